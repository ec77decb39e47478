// The entry point of an apr worker bundle (`apr compile MODEL --target worker`): a JavaScript
// module worker that boots Pyodide from embedded modules (boot.mjs), registers the shell's
// SIMD block kernels (web/src/simd_kernel.js, precompiled wasm bindings) as apr_core's
// backend, and hands every request to Python (apr_worker/js_entry.py -> api.py).
//
//   GET /v1/models, POST /v1/completions, POST /v1/chat/completions (stream: SSE), GET /health
//
// One Python interpreter per isolate: requests run one after another, in arrival order;
// a streamed answer is pulled from Python one chunk per turn, so other requests interleave.
import files from "./pyodide_modules.mjs";
import { bootPython } from "./boot.mjs";
import { SimdMatmul } from "./simd_kernel.js";
import kernelF32 from "./kernels/matmul_f32.wasm";
import kernelBlock from "./kernels/matmul_k.wasm";
import pythonZip from "./python.zip";

const MAX_BODY = 1 << 20;     // bytes of request body (api.MAX_BODY says the same)
const JSON_HEADERS = { "content-type": "application/json; charset=utf-8" };
const SSE_HEADERS = { "content-type": "text/event-stream; charset=utf-8", "cache-control": "no-cache" };

let booting = null;
let queue = Promise.resolve();
let interpreter = null;       // the booted interpreter, for the memory header

/** `x-apr-wasm-memory`: bytes of the isolate's two big WebAssembly memories (Python's heap,
 * the kernels' weights and scratch), for bench/edge.py and anyone watching the 128 MB limit. */
function memoryHeader() {
  if (!interpreter) return {};
  const kernels = globalThis.aprSimd ? globalThis.aprSimd.bytesHeld() : 0;
  return { "x-apr-wasm-memory": `python=${interpreter._module.HEAPU8.length}; kernels=${kernels}` };
}

async function boot() {
  const py = await bootPython(files);
  py._module.FS.writeFile("/tmp/apr_python.zip", new Uint8Array(pythonZip));
  py.runPython(`
import sys, zipfile
zipfile.ZipFile("/tmp/apr_python.zip").extractall("/lib/apr")
sys.path.insert(0, "/lib/apr")
`);
  // The kernels read x and write y in Python's memory, by address (one thread: no SharedArrayBuffer)
  globalThis.aprSimd = new SimdMatmul([kernelF32, kernelBlock], () => py._module.HEAPU8, 1, false);
  // placement.py: `length` bytes at `address` in Python's heap -> `at` in the kernels' memory
  globalThis.aprKernelWrite = (at, address, length) =>
    globalThis.aprSimd.write(at, py._module.HEAPU8.subarray(address, address + length));
  py.runPython("import apr_webkernel, apr_worker.js_entry\napr_webkernel.register_simd_matmul(True)");
  interpreter = py;
  return py;
}

/** The isolate's Python, booted by the first request; a failed boot is tried again. */
function runtime() {
  if (!booting) booting = boot().catch((err) => { booting = null; throw err; });
  return booting;
}

/** Run `fn(py)` when the interpreter is free. */
function turn(fn) {
  const next = queue.then(async () => fn(await runtime()));
  queue = next.catch(() => {});
  return next;
}

async function python(py, code) {
  return JSON.parse(await py.runPythonAsync(code));
}

function errorResponse(status, message, code) {
  return new Response(JSON.stringify({ error: { message, type: status >= 500 ? "server_error" : "invalid_request_error",
                                                param: null, code } }), { status, headers: JSON_HEADERS });
}

/** The body as text, or null past MAX_BODY bytes: a longer body is read to its end and
 * dropped (never held), so the client gets the 413 instead of a reset connection. */
async function readBody(request) {
  if (!request.body) return "";
  const reader = request.body.getReader();
  const parts = [];
  let total = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    total += value.byteLength;
    if (total <= MAX_BODY) parts.push(value);
  }
  if (total > MAX_BODY) return null;
  const bytes = new Uint8Array(total);
  let at = 0;
  for (const part of parts) { bytes.set(part, at); at += part.byteLength; }
  return new TextDecoder().decode(bytes);
}

function streamFrom(id) {
  const encoder = new TextEncoder();
  return new ReadableStream({
    async pull(controller) {
      const chunk = await turn((py) => python(py, `import apr_worker.js_entry as e\nawait e.next_chunk(${id})`));
      if (chunk === null) controller.close();
      else controller.enqueue(encoder.encode(chunk));
    },
    async cancel() {
      await turn((py) => python(py, `import apr_worker.js_entry as e\ne.cancel(${id})`));
    },
  });
}

export default {
  async fetch(request, env) {
    const method = request.method.toUpperCase();
    let body = "";
    if (method !== "GET" && method !== "HEAD") {
      body = await readBody(request);
      if (body === null) return errorResponse(413, `request body larger than ${MAX_BODY} bytes`, "request_too_large");
    }
    const key = env.API_KEY;
    if (key && request.headers.get("authorization") !== `Bearer ${key}`) {
      return errorResponse(401, "a valid API key is required (Authorization: Bearer ...)", "invalid_api_key");
    }
    try {
      const answer = await turn((py) => {
        globalThis.aprCall = { method, url: request.url, body, env };
        return python(py, "import apr_worker.js_entry as e\nawait e.serve()");
      });
      if (answer.stream !== undefined) {
        return new Response(streamFrom(answer.stream), { status: 200, headers: { ...SSE_HEADERS, ...memoryHeader() } });
      }
      return new Response(JSON.stringify(answer.body), { status: answer.status,
                                                         headers: { ...JSON_HEADERS, ...memoryHeader() } });
    } catch (err) {
      return errorResponse(500, `the worker failed: ${err && err.message ? err.message : err}`, "worker_error");
    }
  },
};
