"""The static server behind `apr web` and the browser tests: HTTP Range, isolation headers,
confinement to its mounts, byte counting; and `apr web` itself (no browser needed)."""
import json
import subprocess
import sys
import urllib.error
import urllib.request

import pytest

from apr_native.web_server import StaticServer, parse_range

pytestmark = pytest.mark.native


@pytest.mark.parametrize("header, expected", [
    (None, None), ("bytes=0-9", (0, 9)), ("bytes=5-", (5, 99)), ("bytes=-3", (97, 99)),
    ("bytes=90-500", (90, 99)), ("bytes=0-0", (0, 0)), ("bytes=0-1,5-6", None),
    ("items=0-1", None), ("bytes=-", None), ("bytes=-500", (0, 99)),
])
def test_parse_range(header, expected):
    assert parse_range(header, 100) == expected


@pytest.mark.parametrize("header", ["bytes=100-", "bytes=100-200", "bytes=9-3", "bytes=-0"])
def test_unsatisfiable_ranges(header):
    with pytest.raises(ValueError):
        parse_range(header, 100)


@pytest.fixture
def server(tmp_path):
    (tmp_path / "pub").mkdir()
    (tmp_path / "pub" / "data.bin").write_bytes(bytes(range(256)) * 4)
    (tmp_path / "secret.txt").write_text("no")
    srv = StaticServer({"/files/": str(tmp_path / "pub")}).start()
    yield srv
    srv.stop()


def fetch(server, path, headers=None, method="GET"):
    request = urllib.request.Request(server.url(path), headers=headers or {}, method=method)
    try:
        with urllib.request.urlopen(request) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers), err.read()


def test_range_requests_headers_and_byte_counts(server):
    data = bytes(range(256)) * 4
    status, headers, body = fetch(server, "/files/data.bin", {"Range": "bytes=10-19"})
    assert (status, body) == (206, data[10:20])
    assert headers["Content-Range"] == "bytes 10-19/1024"
    assert headers["Cross-Origin-Opener-Policy"] == "same-origin"
    assert headers["Cross-Origin-Embedder-Policy"] == "require-corp"
    assert headers["Accept-Ranges"] == "bytes"
    status, headers, body = fetch(server, "/files/data.bin")
    assert (status, body) == (200, data)
    status, headers, body = fetch(server, "/files/data.bin", method="HEAD")
    assert (status, headers["Content-Length"], body) == (200, "1024", b"")
    status, headers, _ = fetch(server, "/files/data.bin", {"Range": "bytes=2000-"})
    assert (status, headers["Content-Range"]) == (416, "bytes */1024")
    assert server.bytes_sent("/files/") == 10 + 1024
    assert [r[2] for r in server.requests] == [206, 200, 200, 416]


@pytest.mark.parametrize("path", ["/files/../secret.txt", "/files/%2e%2e/secret.txt",
                                  "/secret.txt", "/files/missing.bin"])
def test_nothing_outside_the_mounts_is_served(server, path):
    assert fetch(server, path)[0] == 404


def test_a_fault_hook_truncates_the_body(server):
    server.faults["/files/"] = lambda path, offset, chunk: chunk[:100]
    with pytest.raises(Exception):  # the client sees a short body: IncompleteRead
        fetch(server, "/files/data.bin")
    assert server.bytes_sent("/files/data.bin") == 100


def test_apr_web_serves_the_shell_and_the_models(tmp_path):
    from apr_native.web_bundle import missing_runtime
    if missing_runtime("017"):
        pytest.skip(missing_runtime("017"))
    models = tmp_path / "models"
    models.mkdir()
    (models / "m.gguf").write_bytes(b"GGUF" + bytes(60))
    (models / "m.apr").write_bytes(b"APR2" + bytes(60))
    (models / "m-00001-of-00002.apr").write_bytes(b"APR2")
    proc = subprocess.Popen([sys.executable, "-m", "apr_native.cli.main", "web", str(models),
                             "--port", "0", "--json"], stdout=subprocess.PIPE, text=True)
    try:
        lines = []
        while not lines or lines[-1] != "}":
            lines.append(proc.stdout.readline().rstrip("\n"))
        info = json.loads("\n".join(lines))
        assert [m["url"] for m in info["models"]] == ["models/m.apr", "models/m.gguf"]
        with urllib.request.urlopen(info["url"] + "index.html") as response:
            assert b"<title>apr" in response.read()
        with urllib.request.urlopen(info["url"] + "site/config.json") as response:
            config = json.loads(response.read())
        assert config["flavor"] == "017" and config["models"] == info["models"]
        with urllib.request.urlopen(info["url"] + "pyodide/017/pyodide.js") as response:
            assert response.status == 200
        request = urllib.request.Request(info["url"] + "models/m.gguf",
                                         headers={"Range": "bytes=0-3"})
        with urllib.request.urlopen(request) as response:
            assert response.read() == b"GGUF"
    finally:
        proc.terminate()
        proc.wait(timeout=10)
