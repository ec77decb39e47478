/**
 * Boot Pyodide inside the worker and install apr_core into it.
 *
 * Two distributions are supported: the official `pyodide` npm package (314.x, Python 3.14,
 * `loadPyodide` ES module) and the full 0.17 distribution (`@pyodide/pyodide`, Python 3.8
 * with numpy 1.17.5, loaded through its global `languagePluginLoader`). `indexURL` is where
 * the distribution lives: the page's own copy by default, a CDN or mirror in production.
 * Everything else (the apr_core wheel, the Python glue) comes from the page's origin.
 */
import { ShellError, codes } from "./errors.js";

/** Configuration defaults; the page may override any of them. */
export const DEFAULTS = Object.freeze({
  flavor: "314",                  // "314" (official) or "017" (full, ships numpy)
  indexURL: null,                 // null: the local copy under `pyodide/<flavor>/`
  wheelURL: "wheels/apr_core.whl",
  extraWheels: {},                // per flavor, e.g. {"314": ["site/msgpack-…pyemscripten….whl"]}
  numpy: "auto",                  // true: required, false: skip, "auto": load when available
  glue: ["src/apr_websource.py", "src/apr_web.py", "src/apr_webrun.py", "src/apr_webcrypto.py", "src/apr_webkernel.py",
    "src/apr_webplace.py", "src/apr_webgpu.py",
    "src/apr_webhub.py", "src/apr_websession.py", "src/apr_weblora.py"],
  hfEndpoint: null,               // the Hub for hf:// references; null: https://huggingface.co
  kernels: "simd",                // "simd": WebAssembly SIMD matmuls behind apr_core's registry
                                  // (relaxed SIMD where the browser has it); "simd-exact"
});

/**
 * 0.17's loader fetches its scripts with `importScripts`, which module workers lack; a
 * synchronous XHR plus global eval does the same thing in a module worker.
 */
function installImportScripts() {
  self.importScripts = (...urls) => {
    for (const url of urls) {
      const request = new XMLHttpRequest();
      request.open("GET", url, false);
      request.send();
      if (request.status !== 200) throw new ShellError(codes.BOOT, `cannot load ${url} (HTTP ${request.status})`);
      (0, eval)(`${request.responseText}\n//# sourceURL=${url}`);
    }
  };
}

async function loadRuntime(flavor, indexURL) {
  if (flavor === "017") {
    installImportScripts();
    self.languagePluginUrl = indexURL;
    self.importScripts(`${indexURL}pyodide.js`);
    await self.languagePluginLoader;
    return { py: self.pyodide, FS: self.pyodide._module.FS };
  }
  const module = await import(`${indexURL}pyodide.mjs`);
  const py = await module.loadPyodide({ indexURL });
  return { py, FS: py.FS };
}

async function fetchBytes(url) {
  const response = await fetch(url);
  if (!response.ok) throw new ShellError(codes.BOOT, `cannot fetch ${url} (HTTP ${response.status})`);
  return new Uint8Array(await response.arrayBuffer());
}

/**
 * Boot the runtime and return `{py, FS, flavor, python, numpy}` with apr_core importable
 * and the glue module `apr_web` loaded. `base` is the URL the relative paths resolve against.
 */
export async function bootPyodide(options = {}, base = self.location.href) {
  const cfg = { ...DEFAULTS, ...options };
  const resolve = (path) => new URL(path, base).href;
  const indexURL = resolve(cfg.indexURL || `pyodide/${cfg.flavor}/`).replace(/\/?$/, "/");
  const { py, FS } = await loadRuntime(cfg.flavor, indexURL);
  for (const wheel of cfg.extraWheels[cfg.flavor] || []) await py.loadPackage(resolve(wheel));
  let numpy = false;
  if (cfg.numpy) {
    try {
      await py.loadPackage(["numpy"]);
    } catch (err) { /* checked below: some versions log a failed load instead of throwing */ }
    numpy = py.runPython("import importlib.util; importlib.util.find_spec('numpy') is not None");
    if (!numpy && cfg.numpy === true) throw new ShellError(codes.BOOT, `numpy is not available from ${indexURL}`);
  }
  // The same wheel pip installs natively, unpacked with the stdlib (works on every Pyodide).
  FS.writeFile("/tmp/apr_core.whl", await fetchBytes(resolve(cfg.wheelURL)));
  FS.mkdir("/tmp/apr_glue");
  for (const path of cfg.glue) {
    FS.writeFile(`/tmp/apr_glue/${path.split("/").pop()}`, await fetchBytes(resolve(path)));
  }
  const python = py.runPython(`
import importlib, os, shutil, sys, sysconfig, zipfile
_dest = sysconfig.get_paths()["purelib"]
zipfile.ZipFile("/tmp/apr_core.whl").extractall(_dest)
for _name in os.listdir("/tmp/apr_glue"):
    shutil.copy("/tmp/apr_glue/" + _name, _dest)
importlib.invalidate_caches()
import apr_core, apr_web
sys.version.split()[0]
`);
  return { py, FS, flavor: cfg.flavor, python, numpy };
}
