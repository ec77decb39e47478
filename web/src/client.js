/**
 * The page's handle on the apr worker: promise-returning calls plus event listeners.
 *
 *     const apr = new AprClient();
 *     apr.on("progress", (p) => bar.value = p.loaded / p.total);
 *     await apr.boot({ flavor: "017" });
 *     const info = await apr.describe("models/smollm2.apr");
 *     await apr.load("models/smollm2.apr");     // or "hf://ORG/REPO:Q4_K_M", "hf://ORG/REPO/FILE@REV"
 *     apr.on("token", (t) => out.textContent += t.text);
 *     await apr.chat([{ role: "user", content: "Hi" }]);
 */
import { ShellError } from "./errors.js";

/** Model URLs are resolved against the page, not the worker script; `hf://` references
 * are passed as they are (the worker resolves them through the Hub's API). */
const absolute = (url) => (/^hf:\/\//i.test(url) ? url : new URL(url, location.href).href);

export class AprClient {
  constructor(workerURL = new URL("./worker.js", import.meta.url)) {
    this.worker = new Worker(workerURL, { type: "module" });
    this.pending = new Map();
    this.listeners = new Map();
    this.nextId = 1;
    this.worker.onmessage = ({ data }) => {
      if (data.event) {
        for (const fn of this.listeners.get(data.event) || []) fn(data.data);
        return;
      }
      const call = this.pending.get(data.id);
      this.pending.delete(data.id);
      if (data.ok) call.resolve(data.result);
      else call.reject(new ShellError(data.error.code, data.error.message, data.error.detail));
    };
  }

  /** Listen to `progress`, `shard`, `resolved` (an hf:// reference's file, commit, sha256),
   * `token` or `stats` events; returns an unsubscribe function. */
  on(event, fn) {
    if (!this.listeners.has(event)) this.listeners.set(event, new Set());
    this.listeners.get(event).add(fn);
    return () => this.listeners.get(event).delete(fn);
  }

  call(op, ...args) {
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      const transfer = args.filter((a) => a instanceof ArrayBuffer);
      this.worker.postMessage({ id, op, args }, transfer);
    });
  }

  /** Boot Pyodide (see boot.js DEFAULTS); relative URLs resolve against this page.
   * `hfEndpoint`: the Hub that `hf://` references resolve against (default huggingface.co). */
  boot(config = {}) { return this.call("boot", { base: location.href, ...config }); }
  /**
   * Metadata, index (and with `digests` every tensor's sha256) of a model URL. `keys`:
   * `trustedKey` (hex Ed25519 public key) for signed files, `password` or `secretKey` (hex
   * seed) for encrypted ones; a signature is always checked when the file is signed.
   */
  describe(url, { digests = false, full = true, ...keys } = {}) {
    return this.call("describe", absolute(url), digests, full, keys);
  }
  /** Summary of a local File (header, metadata, tensor table). */
  async inspect(file) { return this.call("inspect", file.name, await file.arrayBuffer()); }
  /** Stream per-tensor statistics of an inspected file as `stats` events. */
  stats(name) { return this.call("stats", "file:" + name); }
  /** Load a model for generation (`dequantize`: float32 weights inside Python at load;
   * by default only when no SIMD kernel holds its own float32 copy). Options: `backend`
   * ("auto", "webgpu", "cpu"), `kvType` (the KV cache's storage: "f16" by default, "q8_0",
   * "q4_0", "f32", as `--kv-type`), and the keys of encrypted or signed files. */
  load(url, { dequantize = null, lora = null, ...keys } = {}) {
    // `lora: [{url, scale}]`: LoRA adapters (a GGUF LoRA file, or a PEFT directory's URL),
    // applied at run time as `--lora FILE:SCALE` natively
    if (lora) keys.lora = lora.map(({ url, scale = 1 }) => ({ url: absolute(url), scale }));
    return this.call("load", absolute(url), dequantize, keys);
  }
  /** Answer a conversation. Sampler options beyond `temperature` and `seed` take
   * llama-server's names: `top_k`, `top_p`, `min_p`, `typical_p`, `repeat_penalty`,
   * `dry_multiplier`, `xtc_probability`, `mirostat`, `samplers` ... `session: "name"`
   * keeps the conversation's KV in IndexedDB after the turn (an `apr chat --session`
   * file): the next call with the conversation so far (after a reload too) computes only
   * the new turn's rows (`prefilled_tokens` in the answer). Another model, KV type or
   * context: E016; a damaged session: E002 / E004. */
  chat(messages, { maxTokens = 128, temperature = 0, seed = null, ...sampling } = {}) {
    return this.call("chat", messages, maxTokens, temperature, seed, sampling);
  }
  /** Store a session file (ArrayBuffer / Uint8Array, or a URL) as session `name`. */
  importSession(name, source) {
    const bytes = typeof source === "string" ? new URL(source, location.href).href
      : source instanceof ArrayBuffer ? source : source.slice().buffer;
    return this.call("importSession", name, bytes);
  }
  /** Session `name`'s file (ArrayBuffer), as `apr chat --session FILE` reads it. */
  exportSession(name) { return this.call("exportSession", name); }
  sessionList() { return this.call("sessionList"); }
  sessionRemove(name) { return this.call("sessionRemove", name); }
  logits(ids) { return this.call("logits", ids); }
  greedy(ids, count) { return this.call("greedy", ids, count); }
  dequantDigests() { return this.call("dequantDigests"); }
  /** Where decode time goes: `count` greedy tokens under cProfile, the costliest functions
   * as [name, calls, own s, cumulative s]. */
  profileDecode(ids, count) { return this.call("profileDecode", ids, count); }
  /** Drop a model from the worker's memory (its shards stay in the IndexedDB cache). */
  forget(url) { return this.call("forget", absolute(url)); }
  /** Bytes the worker's WebAssembly memories hold: `{kernels, python}`. */
  memory() { return this.call("memory"); }
  /** Collect garbage in the worker now (only where the browser exposes `gc`). */
  collectGarbage() { return this.call("collectGarbage"); }
  /** Cached shards, cached models, and cache management. */
  cacheList() { return this.call("cacheList"); }
  cacheModels() { return this.call("cacheModels"); }
  cacheClear() { return this.call("cacheClear"); }
  cacheRemove(sha256) { return this.call("cacheRemove", sha256); }
  terminate() { this.worker.terminate(); }
}
