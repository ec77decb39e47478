/**
 * The speech page's Web Worker: boots Pyodide with numpy (0.17 by default), loads a Whisper
 * APR file and transcribes the samples the page decoded (apr_webspeech.py). Same protocol
 * as worker.js, so the page drives it with `AprClient`: `{id, op, args}` in, `{id, ok,
 * result | error}` and `{event, data}` (download progress) out.
 *
 * The model file is kept in IndexedDB (`ShardCache`, as the text page keeps a single-file
 * model: under a key of its URL, size and HTTP validator, so a new version on the server is
 * a new key): a reload reads it from there and downloads no model bytes. A server that
 * sends neither ETag nor Last-Modified gives no way to tell versions apart: not cached.
 */
import { bootPyodide, DEFAULTS } from "./boot.js";
import { ShellError, codes, toPlainError } from "./errors.js";
import { SimdMatmul } from "./simd_kernel.js";
import { SpeechKernels } from "./speech_kernels.js";
import { ShardCache } from "./shard_cache.js";
import { fetchFile, urlHead } from "./transport.js";

const MODEL_PATH = "/tmp/whisper.apr";
const SAMPLES_PATH = "/tmp/speech.f32";
let runtime = null;
let cache = null;
let queue = Promise.resolve();

const emit = (event, data) => self.postMessage({ event, data });

/** Call `apr_webspeech.<fn>(*args)` (a plain function returning JSON text). */
function python(fn, ...args) {
  if (!runtime) throw new ShellError(codes.BOOT, "the runtime is not booted yet");
  self.aprArgs = JSON.stringify(args);
  const result = JSON.parse(runtime.py.runPython(
    `import apr_webspeech, js, json\napr_webspeech.${fn}(*json.loads(js.aprArgs))`));
  if (result && result.error) {
    const e = result.error;
    throw new ShellError(codes.PYTHON, e.category ? `${e.code} ${e.category}: ${e.message}` : `${e.code}: ${e.message}`, e);
  }
  return result;
}

const hex = (buffer) => Array.from(new Uint8Array(buffer),
  (b) => b.toString(16).padStart(2, "0")).join("");

/** The model file's bytes: from IndexedDB when cached, else downloaded (and cached). */
async function modelBytes(url) {
  const progress = (loaded, total, cached = false) =>
    emit("progress", { url, loaded, total, cached });
  const absolute = new URL(url, self.location.href).href;
  const { size, validator } = await urlHead(absolute);
  if (!validator || !cache) return { bytes: await fetchFile(absolute, progress, { size }), fromCache: false };
  // the key apr_websource.CachedFileSource gives a single model file
  const key = hex(await crypto.subtle.digest("SHA-256",
    new TextEncoder().encode(["file", absolute, String(size), validator].join("\n"))));
  const name = absolute.split("/").pop() || absolute;
  const { fromCache } = await cache.ensure({ url: absolute, sha256: key, size, verify: false,
    name, model: absolute }, { onProgress: progress });
  return { bytes: await cache.read(key, 0, size), fromCache };
}

const ops = {
  async boot(config = {}) {
    if (!runtime) {
      // Whisper needs numpy: Pyodide 0.17 ships it offline (314 only from a CDN's indexURL).
      runtime = await bootPyodide({ flavor: "017", ...config, numpy: true,
        glue: [...DEFAULTS.glue, "src/apr_webspeech.py"] }, config.base || self.location.href);
      runtime.kernels = "numpy";
      cache = new ShardCache(config.cache || {});
      // "simd": the projections at stored size on the shell's block kernels, as the text
      // models run (relaxed SIMD where the browser has it); "simd-exact": the exact block
      // kernels always; "simd-f32": every weight a float32 copy (the earlier kernel)
      runtime.mode = config.kernels || "simd";
      if (["simd", "simd-exact", "simd-f32"].includes(runtime.mode)) {
        try {
          // The kernels (helper threads where the page is cross-origin isolated) for the
          // model's linear layers; numpy's otherwise.
          if (!(runtime.py._module && runtime.py._module.HEAPU8)) throw new Error("no heap access");
          self.aprSimd = await SimdMatmul.create(() => runtime.py._module.HEAPU8,
            { threads: config.threads || navigator.hardwareConcurrency || 1,
              exact: runtime.mode !== "simd" });
          self.aprSpeech = new SpeechKernels(self.aprSimd);   // attention and GELU
          runtime.threads = self.aprSimd.threads;
          runtime.precision = self.aprSimd.precision;
          runtime.kernels = "wasm-simd";
        } catch (err) { /* no WebAssembly SIMD here: numpy's matmul stays */ }
      }
    }
    return { flavor: runtime.flavor, python: runtime.python, numpy: runtime.numpy,
             kernels: runtime.kernels, threads: runtime.threads || 1,
             precision: runtime.precision || null };
  },
  /** Download a Whisper APR file (progress events) into Pyodide's memory and load it. */
  async load(url) {
    if (!runtime) throw new ShellError(codes.BOOT, "the runtime is not booted yet");
    const { bytes, fromCache } = await modelBytes(url);
    runtime.FS.writeFile(MODEL_PATH, bytes);
    try {
      return { ...python("load", MODEL_PATH, url,
        runtime.kernels !== "wasm-simd" ? "numpy" : runtime.mode === "simd-f32" ? "simd-f32" : "simd"),
               bytes: bytes.length, fromCache };
    } finally {
      runtime.FS.unlink(MODEL_PATH);   // the weights are numpy arrays now: free the file
    }
  },
  /** Transcribe float32 mono 16 kHz samples (an ArrayBuffer, transferred). */
  transcribe(buffer, options = {}) {
    if (!runtime) throw new ShellError(codes.BOOT, "the runtime is not booted yet");
    runtime.FS.writeFile(SAMPLES_PATH, new Uint8Array(buffer));
    try {
      return python("transcribe_file", SAMPLES_PATH, JSON.stringify(options));
    } finally {
      runtime.FS.unlink(SAMPLES_PATH);
    }
  },
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
