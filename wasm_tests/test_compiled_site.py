"""`apr compile MODEL --target web -o DIR`: the folder, served by Python's `http.server`
(no Range support, no COOP/COEP headers, no apr process), loads the bundled SmolLM2 in
Chromium by itself, answers a chat question exactly as native apr does, and on a second
load reads every shard from IndexedDB: the server's own request log shows no shard fetched
again. A site built with --quantize, --compress and a smaller --max-shard answers as native
apr does on that site's own shards."""
import hashlib
import json
import re
import socket
import subprocess
import sys
import threading
import time

import pytest

from cli_util import apr
from wasm_shared import QUESTION

pytestmark = [pytest.mark.native, pytest.mark.real_model]
LOAD_TIMEOUT_MS = 600_000
MAX_TOKENS = 96                 # what the demo page asks for (app.js)
# http.server's log line: 127.0.0.1 - - [date] "GET /path HTTP/1.1" 200 -
REQUEST = re.compile(r'"(GET|HEAD) (\S+) HTTP/[\d.]+" (\d{3})')


def compile_site(model, out, *options):
    code, stdout, err = apr("compile", model, "--target", "web", "-o", out, *options, "--json")
    assert code == 0, err
    return out, json.loads(stdout)


@pytest.fixture(scope="module")
def compiled(smollm2_path, tmp_path_factory):
    """The site of the real SmolLM2 in shards of at most 40 MiB (three shards) and the
    build report."""
    return compile_site(smollm2_path, tmp_path_factory.mktemp("compiled") / "site",
                        "--max-shard", "40M")


@pytest.fixture(scope="module")
def compiled_q4_0(smollm2_path, tmp_path_factory):
    """SmolLM2 re-quantized to Q4_0, LZ4-compressed, in shards of at most 24 MiB."""
    return compile_site(smollm2_path, tmp_path_factory.mktemp("compiled_q4_0") / "site",
                        "--quantize", "q4_0", "--compress", "lz4", "--max-shard", "24M")


class PlainServer:
    """`python -m http.server` on a free port of 127.0.0.1, serving `root`; `requests`
    collects (method, path, status) from its log as it writes it."""

    def __init__(self, root):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.process = subprocess.Popen(
            [sys.executable, "-m", "http.server", str(self.port), "--bind", "127.0.0.1",
             "--directory", str(root)],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.requests = []
        self.reader = threading.Thread(target=self._read_log, daemon=True)
        self.reader.start()
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "http.server did not start"
                time.sleep(0.1)

    def _read_log(self):
        for line in self.process.stderr:
            match = REQUEST.search(line)
            if match:
                self.requests.append((match.group(1), match.group(2), int(match.group(3))))

    def url(self, path="/"):
        return "http://127.0.0.1:{}{}".format(self.port, path)

    def stop(self):
        self.process.terminate()
        self.process.wait(timeout=30)


@pytest.fixture(scope="module")
def server(compiled):
    plain = PlainServer(compiled[0])
    yield plain
    plain.stop()


@pytest.fixture(scope="module")
def server_q4_0(compiled_q4_0):
    plain = PlainServer(compiled_q4_0[0])
    yield plain
    plain.stop()


def wait_for_model(page):
    """The page boots Python and loads the bundled model with no one typing a URL."""
    page.wait_for_function("document.body.dataset.runtime", timeout=LOAD_TIMEOUT_MS)
    assert page.evaluate("document.body.dataset.runtime") == "ready", page.inner_text("#error")
    page.wait_for_function("document.body.dataset.model", timeout=LOAD_TIMEOUT_MS)
    assert page.evaluate("document.body.dataset.model") == "ready", page.inner_text("#error")
    assert page.is_visible("#chat")


def ask(page, question):
    """Type `question` into the page's chat and return the answer it shows."""
    page.fill("#prompt", question)
    page.click("#send")
    page.wait_for_function("document.body.dataset.chat === 'done'")
    assert page.is_hidden("#error"), page.inner_text("#error")
    assert "tokens/s" in page.inner_text("#speed")
    return page.locator(".msg.assistant").last.inner_text()


def test_the_report_lists_every_part_and_each_shard(compiled):
    out, report = compiled
    shards = report["model"]["shards"]
    assert len(shards) == 3
    assert all(s["size"] <= 40 << 20 for s in shards)
    on_disk = {p.relative_to(out).as_posix(): p.stat().st_size for p in out.rglob("*")
               if p.is_file()}
    assert report["size"] == sum(on_disk.values()) and report["files"] == len(on_disk)
    assert {p["part"]: p["size"] for p in report["parts"] if p["part"].startswith("shard ")} \
        == {"shard " + s["file"]: on_disk[s["file"]] for s in shards}
    assert sum(p["size"] for p in report["parts"]) == report["size"]
    config = json.loads((out / "site" / "config.json").read_text())
    assert config["autoload"] and config["defaultModel"] == report["model"]["url"]
    assert (out / report["model"]["url"]).is_file() and (out / "index.html").is_file()


def test_served_by_http_server_it_chats_and_reloads_from_indexeddb(browser, server, compiled,
                                                                   native):
    shard_paths = {"/" + s["file"] for s in compiled[1]["model"]["shards"]}
    context = browser.new_context()
    try:
        page = context.new_page()
        page.set_default_timeout(LOAD_TIMEOUT_MS)
        # the page's default kernels (relaxed SIMD in Chromium): the chat text is native's
        response = page.goto(server.url("/"))
        # nothing special about the headers, so no SharedArrayBuffer: one thread
        headers = {k.lower() for k in response.all_headers()}
        assert not headers & {"cross-origin-opener-policy", "cross-origin-embedder-policy"}
        assert page.evaluate("self.crossOriginIsolated") is False
        wait_for_model(page)
        first = list(server.requests)
        fetched = [path for method, path, status in first if method == "GET" and status == 200]
        assert sorted(p for p in fetched if p in shard_paths) == sorted(shard_paths)
        # every file the page asks for is in the folder (the browser's own favicon probe aside)
        assert [r for r in first if r[2] >= 400 and r[1] != "/favicon.ico"] == []

        assert "relaxed SIMD" in page.inner_text("#runtime")
        answer = ask(page, QUESTION)
        assert answer == native["chat"] and "Paris" in answer

        seen = len(server.requests)
        page.reload()
        wait_for_model(page)
        again = server.requests[seen:]
        assert again, "the reload reached the server at all"
        assert [path for _, path, _ in again if path in shard_paths] == []
        cached = page.locator("#shard-list li.cached")
        assert cached.count() == len(shard_paths)
    finally:
        context.close()


# In a page of the site (no app booted): stop a shard download after two stored chunks,
# then ensure the shard again, and read it back; plus one range read inside the shard.
RESUME = """async ([spec, chunk, offset, length]) => {
  const hex = (buffer) => Array.from(new Uint8Array(buffer),
    (b) => b.toString(16).padStart(2, "0")).join("");
  const sha = async (bytes) => hex(await crypto.subtle.digest("SHA-256", bytes));
  const { ShardCache } = await import("/src/shard_cache.js");
  const { fetchRange } = await import("/src/transport.js");
  const cache = new ShardCache({ dbName: "plain-server-resume", chunkSize: chunk });
  const stop = new AbortController();
  const stopped = await cache.ensure(spec, { signal: stop.signal,
    onProgress: (stored) => { if (stored >= 2 * chunk) stop.abort(); } })
    .then(() => null, (err) => err.code);
  const staged = (await cache.list()).map((r) => [r.stored, r.complete]);
  const resumed = await cache.ensure(spec);
  return { stopped, staged, resumed, whole: await sha(await cache.read(spec.sha256, 0, spec.size)),
           range: await sha(await fetchRange(spec.url, offset, length)) };
}"""


def test_a_stopped_shard_download_resumes_on_a_server_without_range(browser, server, compiled):
    """http.server answers every Range request with the whole file (200): the shell skips
    to the bytes it asked for, so a resumed download and a range read still work."""
    from apr_core.formats.open import open_model
    out, report = compiled
    with open_model(str(out / report["model"]["url"])) as manifest:
        entry = manifest.metadata["shards"][-1]
    data = (out / "models" / entry["file"]).read_bytes()
    chunk, offset, length = 1 << 20, 1234567, 300000
    spec = {"url": server.url("/models/" + entry["file"]), "sha256": entry["sha256"],
            "size": entry["size"], "crc32": entry["crc32"], "crcSpan": entry["size"] - 16,
            "name": entry["file"], "model": "resume-test"}
    context = browser.new_context()
    try:
        page = context.new_page()
        page.goto(server.url("/site/config.json"))
        got = page.evaluate(RESUME, [spec, chunk, offset, length])
    finally:
        context.close()
    assert got["stopped"] == "aborted"
    [(staged, complete)] = got["staged"]
    assert not complete and staged % chunk == 0 and 2 * chunk <= staged < entry["size"]
    assert got["resumed"] == {"fromCache": False, "downloaded": entry["size"] - staged}
    assert got["whole"] == hashlib.sha256(data).hexdigest() == entry["sha256"]
    assert got["range"] == hashlib.sha256(data[offset:offset + length]).hexdigest()


def test_a_quantized_compressed_site_answers_as_native_apr_on_its_shards(browser, server_q4_0,
                                                                         compiled_q4_0):
    from apr_core.formats.open import open_model
    from apr_core.runtime.engine import Engine
    out, report = compiled_q4_0
    manifest = str(out / report["model"]["url"])
    assert report["model"]["url"] == "models/SmolLM2-135M-Instruct.q4_0.apr"
    with open_model(manifest) as model:
        dtypes = [info.dtype.name for info in model.tensors.values()]
        assert all(e["size"] <= 24 << 20 for e in model.metadata["shards"])
        assert len(model.metadata["shards"]) == len(report["model"]["shards"]) >= 4
    assert dtypes.count("Q4_0") == report["model"]["quality"]["tensors"] > 0
    assert "Q4_1" not in dtypes
    native = Engine.open(manifest).model    # as the site's engine: its KV type
    expected = native.generate(native.chat_ids([{"role": "user", "content": QUESTION}]),
                               max_tokens=MAX_TOKENS).text
    assert expected
    context = browser.new_context()
    try:
        page = context.new_page()
        page.set_default_timeout(LOAD_TIMEOUT_MS)
        page.goto(server_q4_0.url("/?kernels=simd-exact"))
        wait_for_model(page)
        assert ask(page, QUESTION) == expected
    finally:
        context.close()
