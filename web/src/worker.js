/**
 * The Web Worker that runs Pyodide, so the page stays responsive while models stream in and
 * tokens are generated. Protocol (see client.js): the page posts `{id, op, args}`; the worker
 * answers `{id, ok, result | error}` and pushes `{event, data}` for progress, tokens and stats.
 */
import { bootPyodide } from "./boot.js";
import { ShellError, codes, toPlainError } from "./errors.js";
import { GpuClient } from "./gpu_client.js";
import { SessionStore } from "./session_store.js";
import { ShardCache } from "./shard_cache.js";
import { SimdMatmul } from "./simd_kernel.js";
import { fetchFile, fetchRange, fetchText, urlHead } from "./transport.js";
import { webCrypto } from "./webcrypto.js";

let runtime = null;
let cache = null;
let sessions = null;  // chat sessions in IndexedDB (session_store.js)
let lastHostError = null;  // the JS error behind a failed Python call, with its stable code
let queue = Promise.resolve();

const emit = (event, data) => self.postMessage({ event, data });

/** Remember a failure of a host function before Python sees it as a JsException. */
const guarded = (fn) => async (...args) => {
  try {
    return await fn(...args);
  } catch (err) {
    lastHostError = toPlainError(err);
    throw err;
  }
};

self.aprCrypto = webCrypto;
self.aprHost = {
  head: guarded(async (url) => JSON.stringify(await urlHead(url))),
  fetchText: guarded(async (url) => JSON.stringify(await fetchText(url))),
  fetchRange: guarded((url, offset, length) => fetchRange(url, offset, length)),
  fetchFile: guarded((url, size) => fetchFile(url, (loaded, total) =>
    emit("progress", { url, loaded, total, phase: "download" }), { size })),
  ensureShard: guarded(async (specJson) => {
    const spec = JSON.parse(specJson);
    const progress = (stored, size, fromCache) => emit("progress", {
      url: spec.model, shard: spec.name, index: spec.index, count: spec.count,
      shardLoaded: stored, shardTotal: size, loaded: spec.before + stored, total: spec.modelSize,
      fromCache, phase: fromCache ? "cache" : "download" });
    const result = await cache.ensure(spec, { onProgress: progress, keep: new Set(spec.keep || []) });
    if (!result.missing) emit("shard", { name: spec.name, sha256: spec.sha256, ...result });
    return result.fromCache;
  }),
  readShard: guarded((sha256, offset, length) => cache.read(sha256, offset, length)),
  storeFile: guarded((specJson, bytes) => {
    const spec = JSON.parse(specJson);
    return cache.put(spec, bytes, { keep: new Set(spec.keep || []) });
  }),
  emit: (event, json) => emit(event, JSON.parse(json)),
};

/** Call `apr_web.<fn>(*args)` and parse its JSON answer. */
async function python(fn, ...args) {
  if (!runtime) throw new ShellError(codes.BOOT, "the runtime is not booted yet");
  self.aprArgs = JSON.stringify(args);
  lastHostError = null;
  const text = await runtime.py.runPythonAsync(
    `import apr_web, js, json\nawait apr_web.${fn}(*json.loads(js.aprArgs))`);
  const result = JSON.parse(text);
  if (result && result.error) {
    const err = lastHostError || { code: codes.PYTHON, message: formatPythonError(result.error), detail: result.error };
    throw new ShellError(err.code, err.message, err.detail);
  }
  return result;
}

function formatPythonError(error) {
  return error.category ? `${error.code} ${error.category}: ${error.message}` : `${error.code}: ${error.message}`;
}

/** Call a plain (non-coroutine) `apr_web.<fn>` through the `_sync` coroutine shim. */
const sync = (fn, ...args) => python("_sync", fn, ...args);

const describeRuntime = () => ({ flavor: runtime.flavor, python: runtime.python, numpy: runtime.numpy,
  webcrypto: runtime.webcrypto, kernels: runtime.kernels, hfEndpoint: runtime.hfEndpoint,
  threads: runtime.threads || 1, isolated: Boolean(globalThis.crossOriginIsolated),
  precision: runtime.kernels === "wasm-simd" ? runtime.precision : null,
  gpu: self.aprGpu ? self.aprGpu.adapter : null, gpuReason: self.aprGpuReason || null });

/** Open the WebGPU device in its own worker (gpu_client.js); Python's apr_webgpu uses it
 * for models loaded with backend "webgpu" or "auto". Without one, the reason is kept. */
async function openGpu(config) {
  if (config.webgpu === false) return "WebGPU is switched off for this page";
  if (!runtime.numpy) return "WebGPU generation needs numpy (Pyodide 0.17)";
  if (!(runtime.py._module && runtime.py._module.HEAPU8)) return "no access to Python's heap";
  try {
    const { client, reason } = await GpuClient.open(() => runtime.py._module.HEAPU8);
    self.aprGpu = client || null;
    return reason || null;
  } catch (err) {
    return `WebGPU failed to start: ${err.message || err}`;
  }
}

const ops = {
  async boot(config = {}) {
    if (runtime) return describeRuntime();
    cache = new ShardCache(config.cache || {});
    sessions = new SessionStore();
    runtime = await bootPyodide(config, config.base || self.location.href);
    runtime.py.runPython(`
import apr_web
async def _sync(name, *args):
    return getattr(apr_web, name)(*args)
apr_web._sync = _sync
`);
    runtime.webcrypto = runtime.py.runPython("apr_web.register_webcrypto()");
    self.aprArgs = JSON.stringify([config.hfEndpoint || null]);  // hf:// references' Hub
    runtime.hfEndpoint = runtime.py.runPython(
      "import apr_webhub, js, json\napr_webhub.configure(*json.loads(js.aprArgs))");
    runtime.kernels = "numpy";
    // "simd": relaxed SIMD where the browser has it, else exact; "simd-exact": the exact
    // kernels always; "simd-f32": every weight as float32 (the older kernel)
    const kernels = config.kernels || "simd";
    if (runtime.numpy && ["simd", "simd-exact", "simd-f32"].includes(kernels)) {
      try {
        // The kernels read x and write y in Python's memory (Pyodide's Emscripten heap).
        if (!(runtime.py._module && runtime.py._module.HEAPU8)) throw new Error("no heap access");
        // Threads (helper Workers over a shared memory) only where the page is cross-origin
        // isolated; `threads` defaults to every core the browser reports.
        self.aprSimd = await SimdMatmul.create(() => runtime.py._module.HEAPU8,
          { threads: config.threads || navigator.hardwareConcurrency || 1, exact: kernels !== "simd" });
        runtime.threads = self.aprSimd.threads;
        runtime.precision = self.aprSimd.precision;
        runtime.isolated = self.aprSimd.isolated;
        const quantized = kernels === "simd-f32" ? "False" : "True";
        if (runtime.py.runPython(`import apr_webkernel; apr_webkernel.register_simd_matmul(${quantized})`)) {
          runtime.kernels = "wasm-simd";
        }
      } catch (err) { /* no WebAssembly SIMD here: numpy's kernels stay */ }
    }
    self.aprGpuReason = await openGpu(config);
    return describeRuntime();
  },
  describe: (url, digests = false, full = true, options = null) => python("describe", url, digests, full, options),
  cryptoSelfTest: (seedHex, messageHex) => sync("crypto_self_test", seedHex, messageHex),
  async inspect(name, buffer) {
    const path = `/tmp/upload-${Date.now()}-${name.replace(/[^\w.-]/g, "_")}`;
    runtime.FS.writeFile(path, new Uint8Array(buffer));
    return sync("inspect_file", path, name);
  },
  stats: (key) => sync("tensor_stats", key),
  async load(url, dequantize = null, options = null) {
    try {
      return await python("load", url, dequantize, options);
    } finally {
      cache.releaseMemory();  // the header's chunks: a loaded model reads none again
    }
  },
  async chat(messages, maxTokens = 128, temperature = 0, seed = null, sampling = null) {
    const run = () => sync("chat", JSON.stringify(messages), maxTokens, temperature, seed,
                           JSON.stringify(sampling || {}));
    if (!sampling || sampling.session == null) return run();
    // a session: its stored file to Python's file system, its KV to the engine, the turn,
    // then the file Python saved back to IndexedDB
    const name = String(sampling.session);
    const file = await sync("session_path", name);
    const stored = await sessions.get(name);
    if (stored && !runtime.FS.analyzePath(file).exists) runtime.FS.writeFile(file, stored);
    const prepared = await python("session_prepare", name);
    const result = await run();
    await sessions.put(name, runtime.FS.readFile(file));
    return { ...result, session: { name, restored_tokens: prepared.restored_tokens } };
  },
  /** Take a session file (bytes or a URL, e.g. written by `apr chat --session`) as session
   * `name`: validated whole first (E001/E002/E004), then stored. */
  async importSession(name, source) {
    const bytes = typeof source === "string" ? await fetchFile(source) : new Uint8Array(source);
    const file = `/tmp/import-${Date.now()}.aprs`;
    runtime.FS.writeFile(file, bytes);
    const info = await sync("session_check", String(name), file);
    await sessions.put(String(name), bytes);
    return info;
  },
  async exportSession(name) {
    const bytes = await sessions.get(String(name));
    if (!bytes) throw new ShellError(codes.ARGUMENT, `no session named ${name}`);
    return bytes.buffer;
  },
  sessionList: () => sessions.list(),
  async sessionRemove(name) {
    await sync("session_forget", String(name));
    await sessions.remove(String(name));
  },
  logits: (ids) => sync("logits", JSON.stringify(ids)),
  greedy: (ids, count) => sync("greedy", JSON.stringify(ids), count),
  dequantDigests: () => sync("dequant_digests"),
  profileDecode: (ids, count) => sync("profile_decode", JSON.stringify(ids), count),
  forget: (url) => sync("forget", url),
  /** Bytes held by the worker's two WebAssembly memories: the kernels' (placed weights,
   * scratch) and Python's (Pyodide's heap: tokenizer, KV cache, small tensors), the WebGPU
   * device's buffers, and its submissions and read-backs so far. */
  memory() {
    return { kernels: self.aprSimd ? self.aprSimd.bytesHeld() : 0,
             python: runtime && runtime.py._module ? runtime.py._module.HEAPU8.length : 0,
             gpu: self.aprGpu ? self.aprGpu.bytesHeld : 0,   // the WebGPU device's buffers
             submissions: self.aprGpu ? self.aprGpu.submissions : 0,
             readbacks: self.aprGpu ? self.aprGpu.readbacks : 0 };
  },
  /** Run Python's cycle collector (it drops proxies of JS buffers held in cycles), then the
   * JS garbage collector where the browser exposes it (tests: --js-flags=--expose-gc), twice
   * (the first pass may only run finalizers), so memory a forgotten model held is returned
   * now; true when the JS collector ran. */
  collectGarbage() {
    if (runtime) runtime.py.runPython("import gc; gc.collect()");
    if (typeof globalThis.gc !== "function") return false;
    globalThis.gc();
    globalThis.gc();
    return true;
  },
  kernelCheck(fn, ...args) {  // wasm_tests/test_quant_kernel.py: apr_webrun.kernel_check / fused_check
    if (fn !== "kernel_check" && fn !== "fused_check") throw new ShellError(codes.ARGUMENT, `unknown check ${fn}`);
    self.aprArgs = JSON.stringify(args);
    return JSON.parse(runtime.py.runPython(
      `import apr_webrun, js, json\napr_webrun.${fn}(*json.loads(js.aprArgs))`));
  },
  cacheList: () => cache.list(),
  cacheModels: () => cache.models(),
  cacheChunks: () => cache.chunkCount(),
  cacheMemoryBytes: () => cache.memoryBytes(),
  cacheRemove: (sha256) => cache.remove(sha256),
  cacheClear: () => cache.clear(),
};

self.onmessage = (message) => {
  const { id, op, args = [] } = message.data;
  // One Python interpreter: operations run one after another, in arrival order.
  queue = queue.then(async () => {
    try {
      if (!ops[op]) throw new ShellError(codes.ARGUMENT, `unknown operation ${op}`);
      self.postMessage({ id, ok: true, result: await ops[op](...args) });
    } catch (err) {
      self.postMessage({ id, ok: false, error: toPlainError(err) });
    }
  });
};
