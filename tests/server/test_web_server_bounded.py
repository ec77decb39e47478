"""`apr web`'s server keeps bounded state: 100,000 requests (files, ranges, HEADs, 404s on
unique client-chosen paths, percent-encoded spellings of one file) grow its process's RSS
by under 5 MB, and what it remembers is a ring plus a counter."""
import gc
import http.client
import os

import pytest

from apr_native.web_server import REQUEST_LOG, StaticServer

pytestmark = pytest.mark.native

REQUESTS = 100000
WARM_UP = 3000
PER_CONNECTION = 500        # a new connection (and server thread) this often


def _rss_bytes():
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    pytest.skip("no /proc/self/status")


def _request(i):
    """(method, path, headers, expected status) of request number i."""
    kind = i % 5
    if kind == 0:
        return "GET", "/models/m.bin", {}, 200
    if kind == 1:
        return "GET", "/models/m.bin", {"Range": "bytes={}-{}".format(i % 900, 999)}, 206
    if kind == 2:
        return "HEAD", "/index.html", {}, 200
    if kind == 3:
        return "GET", "/models/missing-{}.bin".format(i), {}, 404    # unique per request
    return "GET", "/models/%6D.bin?v={}".format(i), {}, 200            # spelling of m.bin


def _drive(server, first, count):
    conn = None
    for i in range(first, first + count):
        if conn is None or i % PER_CONNECTION == 0:
            if conn is not None:
                conn.close()
            conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
        method, path, headers, status = _request(i)
        conn.request(method, path, headers=headers)
        response = conn.getresponse()
        response.read()
        assert response.status == status, (i, path)
    conn.close()


def test_100k_requests_keep_rss_flat(tmp_path):
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "m.bin").write_bytes(os.urandom(1000))
    (tmp_path / "index.html").write_text("<html></html>")
    server = StaticServer({"/": str(tmp_path), "/models/": str(tmp_path / "models")}).start()
    try:
        _drive(server, 0, WARM_UP)
        gc.collect()
        before = _rss_bytes()
        _drive(server, WARM_UP, REQUESTS)
        gc.collect()
        growth = _rss_bytes() - before
    finally:
        server.stop()
    print("RSS growth over {} requests: {:.2f} MB".format(REQUESTS, growth / 1e6))
    assert growth < 5 * 1000 * 1000
    assert server.request_count == WARM_UP + REQUESTS
    assert len(server.requests) == REQUEST_LOG
    assert list(server.requests)[-1][2] == _request(WARM_UP + REQUESTS - 1)[3]
    assert set(server._sent) == {"/models/m.bin"}          # one key per file, not per URL
    assert server.bytes_sent("/models/") > 0
