"""whisper.cpp compiled to WebAssembly in Chromium: the browser peer of bench/whisper.py.

npm `@transcribe/shout` (MIT; pinned in web/package.json, installed by scripts/setup_web.sh)
is whisper.cpp built with emscripten (SIMD, pthreads; its wasm embedded in one ES module).
A page served from one origin by apr's own static server (cross-origin isolated, so
SharedArrayBuffer and threads work, as `apr web` serves wllama) imports it from
web/node_modules, fetches the ggml file `apr export --format whisper.cpp` writes from that
origin into the module's virtual file system and loads it (`Module.init`); nothing else is
fetched. `run(samples)` hands the 16 kHz samples to `Module.transcribe` (greedy, whisper.cpp's
default temperature fallback, segment timestamps, English fixed, no token timestamps -- as
pywhispercpp runs it natively) and times inside the page from that call to its
`onTranscribed` callback: the transcription only, not the model's fetch or load.
"""
from __future__ import annotations

import base64
import os
import shutil
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHOUT_DIR = os.path.join(ROOT, "web", "node_modules", "@transcribe", "shout")
PAGE = """<!doctype html><meta charset="utf-8"><script type="module">
import createModule from "/vendor/shout/index.js";
let Module = null, finish = null;
const log = [];
window.loadShout = async (url) => {
  Module = await createModule({
    print: (s) => log.push(String(s)), printErr: (s) => log.push(String(s)),
    onTranscribed: (result) => finish && finish(result), onCanceled: () => {},
    onNewSegment: () => {}, onProgress: () => {} });
  const response = await fetch(url);
  if (!response.ok) throw new Error("model fetch: " + response.status);
  const t0 = performance.now();
  Module.FS_createDataFile("/", "model.bin", new Uint8Array(await response.arrayBuffer()),
                           true, true);
  Module.init("model.bin", "");
  return { load_s: (performance.now() - t0) / 1000, isolated: self.crossOriginIsolated };
};
window.runShout = async (b64, threads) => {
  const bytes = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
  const pcm = new Float32Array(bytes.buffer);
  log.length = 0;
  const done = new Promise((resolve) => { finish = resolve; });
  const t0 = performance.now();
  // audio, language, threads, translate, max_len, split_on_word, suppress_nst, token_timestamps
  if (Module.transcribe(pcm, "en", threads, false, 0, false, false, false) !== 0)
    throw new Error("whisper.cpp has no model: " + log.join("\\n"));
  const result = await done;
  const wall_s = (performance.now() - t0) / 1000;
  return { text: result.transcription.map((s) => s.text).join("").trim(), wall_s,
           log: log.slice() };
};
window.shoutReady = true;
</script>"""


def missing() -> str | None:
    """None when the npm package is installed, else a one-line reason."""
    if os.path.isfile(os.path.join(SHOUT_DIR, "index.js")):
        return None
    return "@transcribe/shout is not installed in web/node_modules (run scripts/setup_web.sh)"


class ShoutPeer:
    """One Chromium page with whisper.cpp (wasm) and the ggml file loaded."""

    def __init__(self, ggml_path: str, threads: int, chromium_flags: list, play) -> None:
        """`play`: a started Playwright (sync API)."""
        from apr_native.web_server import StaticServer
        self.threads = threads
        self.site_dir = tempfile.mkdtemp(prefix="apr-bench-shout-")
        with open(os.path.join(self.site_dir, "shout.html"), "w") as handle:
            handle.write(PAGE)
        models = os.path.join(self.site_dir, "models")
        os.makedirs(models)
        os.symlink(os.path.abspath(ggml_path), os.path.join(models, "model.bin"))
        self.server = StaticServer({"/": self.site_dir, "/vendor/shout/": SHOUT_DIR}).start()
        self.browser = play.chromium.launch(executable_path=shutil.which("chromium"),
                                                 args=chromium_flags)
        self.page = self.browser.new_page()
        self.page.set_default_timeout(3_600_000)
        origin = self.server.url("/")
        self.foreign = []   # any request off the bench's origin (there must be none)
        self.page.on("request", lambda request: None if request.url.startswith(origin)
                     else self.foreign.append(request.url))
        self.page.goto(self.server.url("/shout.html"))
        self.page.wait_for_function("window.shoutReady === true")
        self.info = self.page.evaluate("(u) => loadShout(u)", self.server.url("/models/model.bin"))
        if not self.info["isolated"]:
            raise RuntimeError("the page is not cross-origin isolated (no threads)")
        if self.foreign:
            raise RuntimeError("whisper.cpp wasm fetched off the origin: {}".format(self.foreign))

    def run(self, samples) -> tuple:
        """(text, seconds of whisper_full inside the page)."""
        encoded = base64.b64encode(samples.astype("<f4").tobytes()).decode()
        result = self.page.evaluate("([b, n]) => runShout(b, n)", [encoded, self.threads])
        self.system_info = result["log"]
        if self.foreign:
            raise RuntimeError("whisper.cpp wasm fetched off the origin: {}".format(self.foreign))
        return result["text"], result["wall_s"]

    def close(self) -> None:
        self.browser.close()
        self.server.stop()
        shutil.rmtree(self.site_dir, ignore_errors=True)


__all__ = ["ShoutPeer", "missing", "PAGE"]
