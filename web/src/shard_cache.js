/**
 * IndexedDB cache of model shards, keyed by the sha256 the manifest gives for each shard.
 *
 * A shard is downloaded in fixed-size chunks that are staged in IndexedDB as they arrive, so
 * a dropped connection (or a closed tab) resumes from the last stored chunk. Staged chunks
 * are never served: only after the whole shard passes its SHA-256 (WebCrypto) and CRC-32
 * checks is it marked complete. A shard that fails either check is deleted, chunks and all.
 * Least-recently-used complete shards are evicted to stay within `maxBytes` and the
 * browser's quota; when that is not enough the caller gets a `quota` error.
 *
 * A single-file model (a GGUF, say) has no manifest to give its sha256: it is cached under a
 * key made from its URL, size and HTTP validator (ETag or Last-Modified) with `verify: false`,
 * so a changed file on the server is a new key, and only the exact-length checks of the
 * transport guard what is stored (as in the browser's own HTTP cache). A file of the
 * Hugging Face Hub (`hf://`) is keyed by the sha256 the Hub advertises for it and checked
 * against it (`verify: "sha256"`, no CRC) before it is committed.
 */
import { crc32, crcHex } from "./crc32.js";
import { ShellError, codes } from "./errors.js";
import { streamRange } from "./transport.js";

const SHARDS = "shards";
const CHUNKS = "chunks";
const RETRIES = 4;
const MEMORY_CHUNKS = 8;  // recently read chunks kept in memory for adjacent range reads

export const promised = (request) => new Promise((resolve, reject) => {
  request.onsuccess = () => resolve(request.result);
  request.onerror = () => reject(request.error);
});

export const done = (tx) => new Promise((resolve, reject) => {
  tx.oncomplete = () => resolve();
  tx.onerror = () => reject(tx.error);
  tx.onabort = () => reject(tx.error || new ShellError(codes.QUOTA, "storage transaction aborted"));
});

const hex = (buffer) => Array.from(new Uint8Array(buffer), (b) => b.toString(16).padStart(2, "0")).join("");

export function quotaError(err, what) {
  if (err && (err.name === "QuotaExceededError" || err.code === codes.QUOTA)) {
    return new ShellError(codes.QUOTA, `browser storage is full while caching ${what}; ` +
      "free space or clear the model cache", { reason: String(err.message || err) });
  }
  return err;
}

export class ShardCache {
  /**
   * @param {object} options `dbName`, `chunkSize` (bytes per stored chunk), `maxBytes`
   *   (cache budget; LRU eviction keeps the total under it).
   */
  constructor({ dbName = "apr-shards", chunkSize = 4 << 20, maxBytes = Infinity } = {}) {
    this.dbName = dbName;
    this.chunkSize = chunkSize;
    this.maxBytes = maxBytes;
    this._db = null;
    this._memory = new Map();  // "sha:index" -> Uint8Array, insertion-ordered for LRU
  }

  async db() {
    if (!this._db) {
      const request = indexedDB.open(this.dbName, 1);
      request.onupgradeneeded = () => {
        request.result.createObjectStore(SHARDS, { keyPath: "sha256" });
        request.result.createObjectStore(CHUNKS);
      };
      this._db = await promised(request);
    }
    return this._db;
  }

  async _record(sha256) {
    const tx = (await this.db()).transaction(SHARDS, "readonly");
    return promised(tx.objectStore(SHARDS).get(sha256));
  }

  async _putRecord(record) {
    const tx = (await this.db()).transaction(SHARDS, "readwrite");
    tx.objectStore(SHARDS).put(record);
    await done(tx);
  }

  /** Every shard record: `{sha256, name, model, url, size, stored, complete, lastUsed}`. */
  async list() {
    const tx = (await this.db()).transaction(SHARDS, "readonly");
    return promised(tx.objectStore(SHARDS).getAll());
  }

  /** Cached models: shards grouped by the model URL they were loaded for. */
  async models() {
    const byModel = new Map();
    for (const shard of await this.list()) {
      const entry = byModel.get(shard.model) || { model: shard.model, shards: 0, bytes: 0, complete: true, lastUsed: 0 };
      entry.shards += 1;
      entry.bytes += shard.stored;
      entry.complete = entry.complete && shard.complete;
      entry.lastUsed = Math.max(entry.lastUsed, shard.lastUsed);
      byModel.set(shard.model, entry);
    }
    return [...byModel.values()];
  }

  /** Drop the chunks kept in memory for adjacent small reads (up to MEMORY_CHUNKS of
   * `chunkSize`: 32 MiB that a tab would otherwise hold for as long as it lives). */
  releaseMemory() {
    this._memory.clear();
  }

  /** Bytes of the chunks kept in memory now (diagnostics and tests). */
  memoryBytes() {
    let total = 0;
    for (const bytes of this._memory.values()) total += bytes.byteLength;
    return total;
  }

  /** Number of stored chunks (staged or committed), for diagnostics and tests. */
  async chunkCount() {
    const tx = (await this.db()).transaction(CHUNKS, "readonly");
    return promised(tx.objectStore(CHUNKS).count());
  }

  /** Delete one shard (record and chunks). */
  async remove(sha256) {
    const tx = (await this.db()).transaction([SHARDS, CHUNKS], "readwrite");
    tx.objectStore(SHARDS).delete(sha256);
    tx.objectStore(CHUNKS).delete(IDBKeyRange.bound([sha256, 0], [sha256, Infinity]));
    await done(tx);
    for (const key of [...this._memory.keys()]) if (key.startsWith(sha256 + ":")) this._memory.delete(key);
  }

  /** Delete every cached shard. */
  async clear() {
    const tx = (await this.db()).transaction([SHARDS, CHUNKS], "readwrite");
    tx.objectStore(SHARDS).clear();
    tx.objectStore(CHUNKS).clear();
    await done(tx);
    this._memory.clear();
  }

  /** Evict least-recently-used complete shards (never those in `keep`) until `bytes` more fit. */
  async makeRoom(bytes, keep = new Set()) {
    const shards = await this.list();
    let total = shards.reduce((sum, s) => sum + s.stored, 0);
    let free = Infinity;
    if (navigator.storage && navigator.storage.estimate) {
      const { quota, usage } = await navigator.storage.estimate();
      free = quota - usage;
    }
    const victims = shards.filter((s) => !keep.has(s.sha256)).sort((a, b) => a.lastUsed - b.lastUsed);
    while ((total + bytes > this.maxBytes || bytes > free) && victims.length) {
      const victim = victims.shift();
      await this.remove(victim.sha256);
      total -= victim.stored;
      free += victim.stored;
    }
    if (total + bytes > this.maxBytes || bytes > free) {
      throw new ShellError(codes.QUOTA, `not enough browser storage: ${bytes} bytes needed, ` +
        `${Math.max(0, Math.min(free, this.maxBytes - total))} available`, { bytes, free, total });
    }
  }

  /**
   * Make sure the shard described by `spec` is cached and verified; download what is missing.
   * `spec`: {url, sha256, size, crc32 (8 hex digits), crcSpan (bytes the CRC covers), name,
   * model}, or for a single file {url, sha256 (its cache key), size, verify: false, name, model},
   * or for a Hub file {url, sha256 (the Hub's), size, verify: "sha256", name, model}.
   * With `onlyIfCached` nothing is downloaded: `{missing: true}` when not cached.
   * `onProgress(stored, size, fromCache)`. Resolves to `{fromCache, downloaded}`.
   */
  async ensure(spec, { onProgress = () => {}, signal, keep = new Set() } = {}) {
    let record = await this._record(spec.sha256);
    if (record && record.complete && record.size === spec.size) {
      record.lastUsed = Date.now();
      await this._putRecord(record);
      onProgress(record.size, record.size, true);
      return { fromCache: true, downloaded: 0 };
    }
    if (spec.onlyIfCached) return { fromCache: false, downloaded: 0, missing: true };
    if (!record || record.size !== spec.size || record.chunkSize !== this.chunkSize) {
      record = await this._freshRecord(spec, record);
    }
    try {
      await this.makeRoom(spec.size - record.stored, new Set([...keep, spec.sha256]));
    } catch (err) {
      if (record.stored === 0) await this.remove(spec.sha256);  // leave no empty record behind
      throw err;
    }
    onProgress(record.stored, spec.size, false);
    const downloaded = await this._download(spec, record, onProgress, signal);
    await this._verifyAndCommit(spec, record);
    return { fromCache: false, downloaded };
  }

  /**
   * Commit `bytes`, a whole file the caller already holds (read whole to learn what it is),
   * under `spec` (as for `ensure`), checked the same way.
   */
  async put(spec, bytes, { keep = new Set() } = {}) {
    const old = await this._record(spec.sha256);
    if (old && old.complete && old.size === spec.size) return;
    const record = await this._freshRecord(spec, old);
    await this.makeRoom(spec.size, new Set([...keep, spec.sha256]));
    for (let at = 0; at < bytes.length; at += this.chunkSize) {
      // A copy, not a view: IndexedDB would store a view's whole underlying buffer.
      await this._storeChunk(record, bytes.slice(at, at + this.chunkSize));
    }
    await this._verifyAndCommit(spec, record);
  }

  async _freshRecord(spec, old) {
    if (old) await this.remove(spec.sha256);
    const record = { sha256: spec.sha256, size: spec.size, chunkSize: this.chunkSize, stored: 0,
      complete: false, name: spec.name, model: spec.model, url: spec.url, lastUsed: Date.now() };
    await this._putRecord(record);
    return record;
  }

  async _download(spec, record, onProgress, signal) {
    let downloaded = 0;
    for (let attempt = 0; record.stored < spec.size; attempt++) {
      let buffer = new Uint8Array(Math.min(this.chunkSize, spec.size - record.stored));
      let fill = 0;
      try {
        // Ask only for what is not stored yet: a resumed download starts at a chunk boundary.
        await streamRange(spec.url, record.stored, spec.size - 1, async (data) => {
          for (let at = 0; at < data.length;) {
            const n = Math.min(buffer.length - fill, data.length - at);
            buffer.set(data.subarray(at, at + n), fill);
            fill += n; at += n; downloaded += n;
            if (fill === buffer.length) {
              await this._storeChunk(record, buffer);
              onProgress(record.stored, spec.size, false);
              if (record.stored < spec.size) {
                // put() cloned the chunk: the buffer is reused (no garbage per chunk), but
                // for a shorter last chunk
                const next = Math.min(this.chunkSize, spec.size - record.stored);
                if (next !== buffer.length) buffer = new Uint8Array(next);
                fill = 0;
              }
            }
          }
        }, { signal });
      } catch (err) {
        if (err.code !== codes.NETWORK || attempt + 1 >= RETRIES) throw quotaError(err, spec.name);
      }
    }
    return downloaded;
  }

  async _storeChunk(record, bytes) {
    const index = record.stored / this.chunkSize;
    const next = { ...record, stored: record.stored + bytes.length };
    try {
      const tx = (await this.db()).transaction([SHARDS, CHUNKS], "readwrite");
      tx.objectStore(CHUNKS).put(bytes, [record.sha256, index]);
      tx.objectStore(SHARDS).put(next);  // same transaction: `stored` never runs ahead of the chunks
      await done(tx);
    } catch (err) {
      throw quotaError(err, record.name);
    }
    record.stored = next.stored;
  }

  async _verifyAndCommit(spec, record) {
    if (spec.verify !== false) await this._verify(spec);
    record.complete = true;
    record.lastUsed = Date.now();
    await this._putRecord(record);
  }

  async _verify(spec) {
    const whole = await this._assemble(spec.sha256, 0, spec.size, false);
    const sha = hex(await crypto.subtle.digest("SHA-256", whole));
    // A Hub file has only the sha256 the Hub advertises (spec.verify === "sha256").
    const crc = spec.crc32 === undefined ? undefined : crcHex(crc32(whole.subarray(0, spec.crcSpan)));
    if (sha !== spec.sha256 || crc !== spec.crc32) {
      await this.remove(spec.sha256);
      const which = sha !== spec.sha256 ? "sha256" : "CRC-32";
      throw new ShellError(codes.CHECKSUM, `shard ${spec.name} failed its ${which} check: the ` +
        "server sent corrupt data, nothing was cached", { shard: spec.name, expected: spec.sha256, got: sha });
    }
  }

  async _chunk(sha256, index) {
    const key = `${sha256}:${index}`;
    let bytes = this._memory.get(key);
    if (bytes) {
      this._memory.delete(key);
    } else {
      const tx = (await this.db()).transaction(CHUNKS, "readonly");
      bytes = await promised(tx.objectStore(CHUNKS).get([sha256, index]));
      if (!bytes) throw new ShellError(codes.CHECKSUM, `cached shard ${sha256.slice(0, 12)} lost chunk ${index}`);
    }
    this._memory.set(key, bytes);
    if (this._memory.size > MEMORY_CHUNKS) this._memory.delete(this._memory.keys().next().value);
    return bytes;
  }

  async _assemble(sha256, offset, length, remember = true) {
    const size = this.chunkSize;
    const first = Math.floor(offset / size);
    if (length > 0 && Math.floor((offset + length - 1) / size) === first) {  // within one chunk: a view
      const chunk = remember ? await this._chunk(sha256, first) : await this._chunkUncached(sha256, first);
      return chunk.subarray(offset - first * size, offset - first * size + length);
    }
    const out = new Uint8Array(length);
    for (let index = Math.floor(offset / size); index * size < offset + length; index++) {
      const chunk = remember ? await this._chunk(sha256, index) : await this._chunkUncached(sha256, index);
      const from = Math.max(offset, index * size);
      const to = Math.min(offset + length, index * size + chunk.length);
      out.set(chunk.subarray(from - index * size, to - index * size), from - offset);
    }
    return out;
  }

  async _chunkUncached(sha256, index) {
    const tx = (await this.db()).transaction(CHUNKS, "readonly");
    const bytes = await promised(tx.objectStore(CHUNKS).get([sha256, index]));
    if (!bytes) throw new ShellError(codes.CHECKSUM, `staged shard ${sha256.slice(0, 12)} lost chunk ${index}`);
    return bytes;
  }

  /** `length` bytes at `offset` of a committed shard. */
  async read(sha256, offset, length) {
    const record = await this._record(sha256);
    if (!record || !record.complete) {
      throw new ShellError(codes.ARGUMENT, `shard ${sha256.slice(0, 12)} is not in the cache`);
    }
    if (offset < 0 || length < 0 || offset + length > record.size) {
      throw new ShellError(codes.ARGUMENT, "read outside the cached shard", { offset, length, size: record.size });
    }
    // Small reads (a header, a tensor table) keep their chunks for the next adjacent read;
    // bulk reads (weights placed in the kernels' memory) pass through without being kept.
    return this._assemble(sha256, offset, length, length < this.chunkSize);
  }
}
