// Boot the npm Pyodide (0.17 full: Python 3.8 + numpy) inside workerd / a Cloudflare Worker
// from embedded modules only: no network, no eval, no WebAssembly compiled from bytes.
//
//   const py = await bootPython(files);   // files: pyodide_modules.mjs's exports
//
// What it takes (see ../shared notes on workerd; each line answers one refusal):
//  - the wrapped scripts (pyodide/*.mjs) run where Pyodide calls importScripts;
//  - `location` is a fixed base URL, `fetch` of packages.json is answered from a json module;
//  - the runtime wasm is instantiated from its precompiled module (Module.instantiateWasm),
//    the stdlib and numpy file systems come from data modules (Module.getPreloadedPackage);
//  - numpy's shared libraries, which Emscripten hands to WebAssembly.instantiate /
//    new WebAssembly.Module as bytes, are matched by size and fingerprint to precompiled ones;
//  - the JS-call adapters Emscripten builds per signature come from precompiled modules
//    through a WebAssembly.Function stand-in (Emscripten uses it when it exists).
// Boot runs on the first request (workerd allows no timers or random numbers at global scope).

const BASE = "https://apr-worker.invalid/pyodide/";
const EDGE = 4096;
const LETTER = { i32: "i", i64: "j", f32: "f", f64: "d" };

/** 32-bit FNV-1a of the first and last EDGE bytes (pyodide_assets.fingerprint). */
function fingerprint(bytes) {
  let value = 0x811c9dc5;
  const step = (b) => { value = Math.imul(value ^ b, 0x01000193) >>> 0; };
  const head = bytes.subarray(0, Math.min(EDGE, bytes.length));
  const tail = bytes.subarray(Math.max(0, bytes.length - EDGE));
  for (const b of head) step(b);
  for (const b of tail) step(b);
  return value >>> 0;
}

function asBytes(source) {
  if (source instanceof Uint8Array) return source;
  if (ArrayBuffer.isView(source)) return new Uint8Array(source.buffer, source.byteOffset, source.byteLength);
  if (source instanceof ArrayBuffer) return new Uint8Array(source);
  return null;
}

/** The precompiled library whose bytes these are, or an error naming them. */
function libraryFor(files, source) {
  const bytes = asBytes(source);
  if (bytes === null) return null;
  const print = fingerprint(bytes);
  const found = files.libraries.find((lib) => lib.size === bytes.length && lib.fnv === print);
  if (!found) {
    throw new Error(`no precompiled wasm module for ${bytes.length} bytes (fingerprint ${print}): ` +
                    "workerd compiles no WebAssembly at run time; rebuild the bundle");
  }
  return found.module;
}

function installWasmShims(files) {
  const OriginalModule = WebAssembly.Module;
  const originalInstantiate = WebAssembly.instantiate.bind(WebAssembly);
  WebAssembly.Module = new Proxy(OriginalModule, {
    construct(target, args) { return libraryFor(files, args[0]) || new target(...args); },
  });
  WebAssembly.instantiate = (source, imports) => {
    if (source instanceof OriginalModule) return originalInstantiate(source, imports);
    const module = libraryFor(files, source);
    return originalInstantiate(module, imports).then((instance) => ({ instance, module }));
  };
  WebAssembly.Function = function (type, func) {
    const sig = (type.results.length ? LETTER[type.results[0]] : "v") +
      type.parameters.map((p) => LETTER[p]).join("");
    const module = files.adapters[sig];
    if (!module) throw new Error(`no precompiled JS-call adapter for signature ${sig}: rebuild the bundle`);
    return new WebAssembly.Instance(module, { e: { f: func } }).exports.f;
  };
}

function installGlobals(files) {
  // Emscripten's fallback without setImmediate is a message listener workerd refuses
  globalThis.setImmediate = (fn, ...args) => setTimeout(fn, 0, ...args);
  globalThis.clearImmediate = (id) => clearTimeout(id);
  globalThis.location = { href: BASE + "worker.js", pathname: "/pyodide/worker.js", origin: "https://apr-worker.invalid" };
  const scripts = { "pyodide.asm.js": () => wrapCreate(files), "numpy.js": files.runNumpy };
  globalThis.importScripts = (...urls) => {
    for (const url of urls) {
      const name = String(url).split("/").pop();
      if (!scripts[name]) throw new Error(`importScripts: ${url} is not embedded in this bundle`);
      scripts[name]();
    }
  };
  const originalFetch = globalThis.fetch;
  globalThis.fetch = (input, init) => {
    const url = typeof input === "string" ? input : input.url;
    if (url === BASE + "packages.json") {
      return Promise.resolve(new Response(JSON.stringify(files.packages),
        { headers: { "content-type": "application/json" } }));
    }
    return originalFetch(input, init);
  };
}

/** Run pyodide.asm.js, then give its Module the embedded wasm and file systems. */
function wrapCreate(files) {
  files.runAsm();
  const create = globalThis._createPyodideModule;
  globalThis._createPyodideModule = (Module) => {
    Module.instantiateWasm = (imports, receive) => {
      const instance = new WebAssembly.Instance(files.asmWasm, imports);
      receive(instance, files.asmWasm);
      return instance.exports;
    };
    Module.getPreloadedPackage = (name) => {
      const data = files.data[String(name).split("/").pop()];
      if (!data) throw new Error(`${name} is not embedded in this bundle`);
      return data.slice(0);     // the loader may detach or keep it: a copy per load
    };
    Module.print = (text) => console.log(text);
    Module.printErr = (text) => console.error(text);
    return create(Module);
  };
}

/** Boot Pyodide with numpy; `files` holds the embedded modules (pyodide_modules.mjs). */
export async function bootPython(files) {
  installWasmShims(files);
  installGlobals(files);
  files.runLoader();                    // pyodide.js: defines globalThis.loadPyodide
  const py = await globalThis.loadPyodide({ indexURL: BASE });
  const errors = [];
  await py.loadPackage(["numpy"], () => {}, (message) => errors.push(String(message)));
  if (errors.length) throw new Error("numpy did not load: " + errors.join("; "));
  return py;
}
