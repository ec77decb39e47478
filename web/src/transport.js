/**
 * Byte transport: HTTP Range requests with exact-length checks and progress.
 *
 * Python's loaders ask for byte ranges (`apr_core.io.AsyncRangeReader`); this module fetches
 * them. It never looks inside the bytes: a short body, a wrong `Content-Range` or an HTTP
 * error is a `ShellError("network")`, never silently shorter data.
 */
import { ShellError, codes } from "./errors.js";

const RETRIES = 3;

function checkStatus(response, url, start, end) {
  if (response.status === 206) {
    const range = response.headers.get("Content-Range") || "";
    const match = /^bytes (\d+)-(\d+)\/(\d+|\*)$/.exec(range);
    if (!match || Number(match[1]) !== start || (end !== null && Number(match[2]) !== end)) {
      throw new ShellError(codes.NETWORK, `server answered ${url} with the wrong range (${range})`);
    }
    return;
  }
  if (response.status === 200) return;  // a server without Range support: see streamRange
  throw new ShellError(codes.NETWORK, `HTTP ${response.status} for ${url}`,
    { url, status: response.status });
}

/** What identifies a version of the file a response came from: ETag, else Last-Modified. */
const validatorOf = (response) =>
  response.headers.get("ETag") || response.headers.get("Last-Modified") || "";

/**
 * Size of `url` in bytes and its validator (ETag, else Last-Modified; "" when the server
 * sends neither): HEAD, or a one-byte Range request where HEAD is refused.
 */
export async function urlHead(url) {
  const head = await fetch(url, { method: "HEAD", cache: "no-store" }).catch(() => null);
  if (head && head.ok && head.headers.get("Content-Length") !== null) {
    return { size: Number(head.headers.get("Content-Length")), validator: validatorOf(head) };
  }
  const response = await fetch(url, { headers: { Range: "bytes=0-0" }, cache: "no-store" });
  const total = /\/(\d+)$/.exec(response.headers.get("Content-Range") || "");
  if (response.body) await response.body.cancel();
  if (response.status === 206 && total) return { size: Number(total[1]), validator: validatorOf(response) };
  throw new ShellError(codes.NETWORK, `cannot size ${url} (HTTP ${response.status})`,
    { url, status: response.status });
}

/**
 * A small text answer (the Hub's JSON API): `{status, text, errorCode}` for any HTTP status,
 * so the caller (Python) decides what an error means; only a failed connection throws.
 */
export async function fetchText(url) {
  let response;
  try {
    response = await fetch(url, { cache: "no-store" });
  } catch (err) {
    throw new ShellError(codes.NETWORK, `network error fetching ${url}: ${err.message}`, { url });
  }
  return { status: response.status, text: await response.text(),
    errorCode: response.headers.get("X-Error-Code") || "" };
}

/** Total size of `url` in bytes. */
export const urlSize = async (url) => (await urlHead(url)).size;

/**
 * Stream `url` from byte `start` to `end` (inclusive; null = end of file), calling
 * `onData(chunk)` for every piece as it arrives. Resolves with the number of bytes received;
 * rejects on HTTP errors or when the body ends early (a dropped connection). A server
 * without Range support (python -m http.server) answers with the whole file: the bytes
 * before `start` are skipped and the body is dropped after `end`, so a resumed download
 * or a range read still gets exactly its range.
 */
export async function streamRange(url, start, end, onData, { signal } = {}) {
  const range = `bytes=${start}-${end === null ? "" : end}`;
  let response;
  try {
    response = await fetch(url, { headers: { Range: range }, cache: "no-store", signal });
  } catch (err) {
    if (signal && signal.aborted) throw new ShellError(codes.ABORTED, "download cancelled");
    throw new ShellError(codes.NETWORK, `network error fetching ${url}: ${err.message}`, { url });
  }
  checkStatus(response, url, start, end);
  const whole = response.status === 200;
  // Content-Length counts encoded bytes when the server compressed the body (the stream
  // gives decoded ones), and a chunked answer has none: only a plain length is checked.
  const header = response.headers.get("Content-Length");
  const length = header === null || response.headers.get("Content-Encoding") ? NaN : Number(header);
  let skip = whole ? start : 0;
  const wanted = whole && end !== null ? end - start + 1 : Infinity;
  const expected = whole ? Math.min(length - start, wanted) : length;
  const reader = response.body.getReader();
  let received = 0;
  for (;;) {
    if (received >= wanted) {
      await reader.cancel();
      break;
    }
    let step;
    try {
      step = await reader.read();
    } catch (err) {
      throw new ShellError(codes.NETWORK, `connection lost after ${received} bytes of ${url}`,
        { url, received });
    }
    if (step.done) break;
    let chunk = step.value;
    if (skip >= chunk.length) {
      skip -= chunk.length;
      continue;
    }
    chunk = chunk.subarray(skip, skip + Math.min(chunk.length - skip, wanted - received));
    skip = 0;
    received += chunk.length;
    await onData(chunk);
  }
  if (Number.isFinite(expected) && received !== expected) {
    throw new ShellError(codes.NETWORK, `truncated response for ${url}: ${received} of ${expected} bytes`,
      { url, received, expected });
  }
  return received;
}

/** Exactly `length` bytes of `url` at `offset` (retried on transient network errors). */
export async function fetchRange(url, offset, length, options = {}) {
  if (length === 0) return new Uint8Array(0);
  let lastError;
  for (let attempt = 0; attempt < RETRIES; attempt++) {
    const out = new Uint8Array(length);
    let at = 0;
    try {
      await streamRange(url, offset, offset + length - 1, (chunk) => {
        if (at + chunk.length > length) {
          throw new ShellError(codes.NETWORK, `server sent more than the requested range of ${url}`);
        }
        out.set(chunk, at);
        at += chunk.length;
      }, options);
      if (at === length) return out;
      lastError = new ShellError(codes.NETWORK, `short read of ${url}`, { url, offset, length, got: at });
    } catch (err) {
      if (err.code !== codes.NETWORK) throw err;
      lastError = err;
    }
  }
  throw lastError;
}

/** A whole file as bytes, reporting `onProgress(loaded, total)` as it streams in. */
export async function fetchFile(url, onProgress = () => {}, { size = null, ...options } = {}) {
  const total = size === null ? await urlSize(url) : size;
  const out = new Uint8Array(total);
  let loaded = 0;
  for (let attempt = 0; loaded < total; attempt++) {
    try {
      // Resume where the last attempt stopped rather than starting over.
      await streamRange(url, loaded, total - 1, (chunk) => {
        out.set(chunk, loaded);
        loaded += chunk.length;
        onProgress(loaded, total);
      }, options);
    } catch (err) {
      if (err.code !== codes.NETWORK || attempt + 1 >= RETRIES) throw err;
    }
  }
  return out;
}
