"""A static file server for the browser shell: HTTP Range, COOP/COEP, byte counting.

`apr web` and the browser tests serve the shell (`web/`), the Pyodide distributions, the
`apr_core` wheel and a model directory from one origin, because the page never fetches
anything from another origin. Python's `http.server` has neither Range support nor the
cross-origin isolation headers (needed for SharedArrayBuffer), hence this module.

Mounts map a URL prefix to a directory; the longest matching prefix wins::

    server = StaticServer({"/": "web", "/models/": "out"}, port=0).start()
    server.url("/models/m.apr"), server.bytes_sent("/models/")

`faults` lets tests make the server misbehave on purpose (a corrupted byte, a connection
dropped mid-body); it is empty in normal use.

State stays bounded however long it runs: `requests` keeps the last `REQUEST_LOG` requests
(a ring), `request_count` counts them all, and byte counts are kept per file path, never
per client-chosen URL spelling.
"""
from __future__ import annotations

import collections
import email.utils
import os
import posixpath
import re
import socket
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable, Deque, Dict, Optional, Tuple

MIME = {
    ".html": "text/html; charset=utf-8", ".js": "text/javascript", ".mjs": "text/javascript",
    ".css": "text/css", ".json": "application/json", ".wasm": "application/wasm",
    ".png": "image/png", ".svg": "image/svg+xml", ".py": "text/x-python; charset=utf-8",
    ".map": "application/json", ".txt": "text/plain; charset=utf-8",
}
CHUNK = 1 << 18
REQUEST_LOG = 4096          # requests remembered for tests and debugging (a ring)
FAULT_PAUSE_S = 1.0
_RANGE = re.compile(r"bytes=(\d*)-(\d*)\Z")

# A fault hook gets (url path, body offset of this chunk, chunk) and returns the chunk to
# send, possibly altered; a shorter chunk (or None) is sent and then the connection drops.
Fault = Callable[[str, int, bytes], Optional[bytes]]


def parse_range(header: Optional[str], size: int) -> Optional[Tuple[int, int]]:
    """`Range` header -> inclusive (start, end), None for the whole file.

    Raises ValueError when the range cannot be satisfied (the caller answers 416). Only a
    single range is supported; a multi-range request gets the whole file, as RFC 9110 allows.
    """
    if not header or "," in header:
        return None
    match = _RANGE.match(header.strip())
    if not match or match.groups() == ("", ""):
        return None
    first, last = match.groups()
    if first == "":  # suffix range: the last N bytes
        count = int(last)
        if count == 0:
            raise ValueError("empty suffix range")
        return max(size - count, 0), size - 1
    start = int(first)
    end = min(int(last), size - 1) if last else size - 1
    if start >= size or end < start:
        raise ValueError("range not satisfiable")
    return start, end


class StaticServer:
    """A threaded static server over `mounts` ({url prefix: directory})."""

    def __init__(self, mounts: Dict[str, str], host: str = "127.0.0.1", port: int = 0,
                 extra_headers: Optional[Dict[str, str]] = None) -> None:
        self.mounts = sorted(((p if p.endswith("/") else p + "/", os.path.abspath(d))
                              for p, d in mounts.items()), key=lambda m: -len(m[0]))
        self.extra_headers = dict(extra_headers or {})
        self.faults: Dict[str, Fault] = {}
        # (path, Range, status) of the last REQUEST_LOG requests
        self.requests: Deque[Tuple[str, Optional[str], int]] = collections.deque(
            maxlen=REQUEST_LOG)
        self.request_count = 0
        self._sent: Dict[str, int] = {}
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer((host, port), _handler_for(self))
        self._httpd.daemon_threads = True
        self._thread: Optional[threading.Thread] = None

    @property
    def port(self) -> int:
        return self._httpd.server_address[1]

    def url(self, path: str = "/") -> str:
        return "http://{}:{}{}".format(self._httpd.server_address[0], self.port, path)

    def start(self) -> "StaticServer":
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        self._httpd.serve_forever()

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    # ------------------------------------------------------------------ accounting

    def bytes_sent(self, prefix: str = "/") -> int:
        """Body bytes sent for URL paths starting with `prefix` since the last reset."""
        with self._lock:
            return sum(n for path, n in self._sent.items() if path.startswith(prefix))

    def reset_counts(self) -> None:
        with self._lock:
            self._sent.clear()
            self.requests.clear()

    def _count(self, path: str, n: int) -> None:
        # `path` is normalised and names a served file, so there is one key per file.
        with self._lock:
            self._sent[path] = self._sent.get(path, 0) + n

    def _log(self, path: str, rng: Optional[str], status: int) -> None:
        with self._lock:
            self.request_count += 1
            self.requests.append((path[:256], None if rng is None else rng[:64], status))

    def resolve(self, url_path: str) -> Optional[str]:
        """The file a URL path maps to, or None (never outside its mount's directory)."""
        path = posixpath.normpath(urllib.parse.unquote(url_path))
        if url_path.endswith("/"):
            path += "/"
        for prefix, directory in self.mounts:
            if path.startswith(prefix) or path + "/" == prefix:
                rest = path[len(prefix):] if path.startswith(prefix) else ""
                full = os.path.abspath(os.path.join(directory, *[p for p in rest.split("/")
                                                                 if p not in ("", ".", "..")]))
                if full != directory and not full.startswith(directory + os.sep):
                    return None
                if os.path.isdir(full):
                    full = os.path.join(full, "index.html")
                return full if os.path.isfile(full) else None
        return None


def validators(path: str) -> Dict[str, str]:
    """ETag and Last-Modified of a file, as static servers and CDNs send them: the page's
    cache of a single-file model keeps it only while these stay the same."""
    stat = os.stat(path)
    return {"ETag": '"{:x}-{:x}"'.format(stat.st_size, stat.st_mtime_ns),
            "Last-Modified": email.utils.formatdate(stat.st_mtime, usegmt=True)}


def _handler_for(server: StaticServer) -> type:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:  # quiet: tests and `apr web --json`
            pass

        def setup(self) -> None:
            super().setup()
            # Headers and body are separate writes: without this, Nagle's algorithm holds
            # the body until the client's delayed ACK (~40 ms per keep-alive response).
            try:
                self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass

        def _headers(self, status: int, length: int, ctype: str,
                     extra: Optional[Dict[str, str]] = None) -> None:
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(length))
            self.send_header("Accept-Ranges", "bytes")
            # Cross-origin isolation (SharedArrayBuffer, threads) and no HTTP caching, so
            # the IndexedDB cache is the only cache and server-side counts are exact.
            self.send_header("Cross-Origin-Opener-Policy", "same-origin")
            self.send_header("Cross-Origin-Embedder-Policy", "require-corp")
            self.send_header("Cross-Origin-Resource-Policy", "same-origin")
            self.send_header("Cache-Control", "no-store")
            for key, value in list(server.extra_headers.items()) + list((extra or {}).items()):
                self.send_header(key, value)
            self.end_headers()

        def do_HEAD(self) -> None:
            self._serve(body=False)

        def do_GET(self) -> None:
            self._serve(body=True)

        def _serve(self, body: bool) -> None:
            path = urllib.parse.urlsplit(self.path).path
            rng = self.headers.get("Range")
            full = server.resolve(path)
            if full is None:
                server._log(path, rng, 404)
                message = b"not found\n"
                self._headers(404, len(message), "text/plain")
                if body:
                    self.wfile.write(message)
                return
            size = os.path.getsize(full)
            try:
                span = parse_range(rng, size)
            except ValueError:
                server._log(path, rng, 416)
                self._headers(416, 0, "text/plain", {"Content-Range": "bytes */{}".format(size)})
                return
            start, end = span if span else (0, size - 1)
            status = 206 if span else 200
            server._log(path, rng, status)
            ctype = MIME.get(os.path.splitext(full)[1].lower(), "application/octet-stream")
            extra = validators(full)
            if span:
                extra["Content-Range"] = "bytes {}-{}/{}".format(start, end, size)
            self._headers(status, end - start + 1, ctype, extra)
            if body and size:
                self._send_body(full, path, start, end)

        def _send_body(self, full: str, path: str, start: int, end: int) -> None:
            fault = next((hook for prefix, hook in server.faults.items()
                          if path.startswith(prefix)), None)
            counted = posixpath.normpath(urllib.parse.unquote(path))   # one key per file
            with open(full, "rb") as handle:
                handle.seek(start)
                offset = start
                while offset <= end:
                    chunk = handle.read(min(CHUNK, end - offset + 1))
                    if not chunk:
                        break
                    expected = len(chunk)
                    if fault is not None:
                        chunk = fault(path, offset, chunk) or b""
                    try:
                        self.wfile.write(chunk)
                    except (BrokenPipeError, ConnectionResetError):
                        return
                    server._count(counted, len(chunk))
                    if len(chunk) < expected:
                        # Simulated network failure: the body stops here and the socket
                        # closes, after a pause so the client has read what was sent (a
                        # reset can otherwise discard bytes still in its buffers).
                        self.close_connection = True
                        self.wfile.flush()
                        time.sleep(FAULT_PAUSE_S)
                        self.connection.shutdown(socket.SHUT_RDWR)
                        return
                    offset += len(chunk)

    return Handler


__all__ = ["StaticServer", "parse_range", "MIME"]
