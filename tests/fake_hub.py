"""A loopback server that behaves like the Hugging Face Hub, for tests that must not touch
the internet.

Two HTTP servers: the hub (127.0.0.1) answers the API and `resolve` URLs; the "CDN"
(127.0.0.2, another host, as the Hub's LFS storage is) serves LFS blobs. What it does, as
huggingface.co does it:

- `GET /api/models/ORG/REPO[/revision/REV]` (model info: `sha`, `siblings`; with
  `?blobs=true` each sibling's size, blob id and LFS sha256);
- `GET /api/models/ORG/REPO/tree/REV[/PATH]` (`recursive`; files with `oid`, `size`,
  `lfs.oid`; directories);
- `HEAD|GET /ORG/REPO/resolve/REV/PATH`: small (git) files answered directly with the git
  blob sha1 as `ETag`; LFS files a 302 to the CDN with `X-Linked-Etag` (the sha256),
  `X-Linked-Size`; always `X-Repo-Commit`;
- `Range: bytes=A-` / `A-B` (206 + `Content-Range`) on every file;
- gated repos: 401 + `X-Error-Code: GatedRepo` unless `Authorization: Bearer <token>`;
- CORS on every answer (`Access-Control-Allow-Origin: *`, the headers above exposed) and
  preflights answered, so the browser shell can use it from its own origin;
- 404 with `X-Error-Code` RepoNotFound / RevisionNotFound / EntryNotFound.

Faults for tests: `corrupt(sha256, data)` makes the CDN serve other bytes under a blob's
name; `cut_after(sha256, n)` makes the next download of a blob stop after n bytes; every
request is logged in `requests` (method, path, Range header, Authorization present).
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Dict, List, Optional, Tuple, Union
from urllib.parse import parse_qs, quote, unquote, urlsplit

LFS_SUFFIXES = (".gguf", ".safetensors", ".apr", ".bin", ".pt", ".onnx")
CHUNK = 1 << 20


@dataclass
class HubFile:
    path: str
    source: Union[bytes, str]       # content, or a file on disk served without loading it
    size: int
    sha256: str
    git_sha1: str       # git blob id: of the content, or of the LFS pointer for LFS files
    lfs: bool

    def read(self, start: int, end: int) -> bytes:
        if isinstance(self.source, bytes):
            return self.source[start:end]
        with open(self.source, "rb") as handle:
            handle.seek(start)
            return handle.read(end - start)


@dataclass
class HubRepo:
    repo_id: str
    commit: str
    files: Dict[str, HubFile]
    gated: bool = False
    refs: Dict[str, str] = field(default_factory=dict)   # branch/tag -> commit
    history: Dict[str, Dict[str, HubFile]] = field(default_factory=dict)  # commit -> files


def _hash_file(path: str) -> Tuple[str, str, int]:
    size = os.path.getsize(path)
    sha256, sha1 = hashlib.sha256(), hashlib.sha1(b"blob %d\0" % size)
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(CHUNK), b""):
            sha256.update(chunk)
            sha1.update(chunk)
    return sha256.hexdigest(), sha1.hexdigest(), size


def make_file(path: str, source: Union[bytes, str], lfs: Optional[bool] = None) -> HubFile:
    if isinstance(source, bytes):
        sha256 = hashlib.sha256(source).hexdigest()
        sha1 = hashlib.sha1(b"blob %d\0" % len(source) + source).hexdigest()
        size = len(source)
    else:
        sha256, sha1, size = _hash_file(source)
    if lfs is None:
        lfs = path.endswith(LFS_SUFFIXES)
    if lfs:     # git stores the LFS pointer: its blob id (and the API's oid) is the pointer's
        pointer = "version https://git-lfs.github.com/spec/v1\noid sha256:{}\nsize {}\n" \
            .format(sha256, size).encode()
        sha1 = hashlib.sha1(b"blob %d\0" % len(pointer) + pointer).hexdigest()
    return HubFile(path, source, size, sha256, sha1, lfs)


class FakeHub:
    """`with FakeHub() as hub: hub.add_repo("org/m", {"model.gguf": path}); hub.url`"""

    def __init__(self, token: str = "hf_test_token") -> None:
        self.token = token
        self.repos: Dict[str, HubRepo] = {}
        self.requests: List[Dict[str, object]] = []
        self.corrupted: Dict[str, bytes] = {}
        self.cuts: Dict[str, int] = {}
        self._lock = threading.Lock()
        self._servers: List[ThreadingHTTPServer] = []

    # --- content ---------------------------------------------------------------------
    def add_repo(self, repo_id: str, files: Dict[str, Union[bytes, str]], gated: bool = False,
                 lfs: Optional[bool] = None) -> str:
        """Publish a new commit of `repo_id` holding exactly `files`; returns its sha."""
        entries = {p: make_file(p, s, lfs) for p, s in files.items()}
        digest = hashlib.sha1(repo_id.encode())
        for name in sorted(entries):
            digest.update("{}\0{}\n".format(name, entries[name].git_sha1).encode())
        commit = digest.hexdigest()
        old = self.repos.get(repo_id)
        refs = dict(old.refs) if old else {}
        refs["main"] = commit
        history = dict(old.history) if old else {}
        history[commit] = entries
        repo = HubRepo(repo_id, commit, entries, gated, refs, history)
        self.repos[repo_id] = repo
        return commit

    def corrupt(self, sha256: str, data: bytes) -> None:
        self.corrupted[sha256] = data

    def cut_after(self, sha256: str, nbytes: int) -> None:
        self.cuts[sha256] = nbytes

    # --- servers ---------------------------------------------------------------------
    def __enter__(self) -> "FakeHub":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        hub = self

        class Handler(_Handler):
            owner = hub
        cdn_host = "127.0.0.2"
        try:
            cdn = ThreadingHTTPServer((cdn_host, 0), Handler)
        except OSError:          # a loopback without 127.0.0.2: another port still is
            cdn_host = "127.0.0.1"    # another origin
            cdn = ThreadingHTTPServer((cdn_host, 0), Handler)
        api = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = "http://127.0.0.1:{}".format(api.server_address[1])
        self.cdn_url = "http://{}:{}".format(cdn_host, cdn.server_address[1])
        for server in (api, cdn):
            server.daemon_threads = True
            threading.Thread(target=server.serve_forever, daemon=True).start()
        self._servers = [api, cdn]

    def stop(self) -> None:
        for server in self._servers:
            server.shutdown()
            server.server_close()
        self._servers = []

    def downloads(self, sha256: str) -> List[Dict[str, object]]:
        """Logged CDN GETs of one blob."""
        return [r for r in self.requests
                if r["method"] == "GET" and r["path"] == "/lfs/" + sha256]

    # --- lookups ---------------------------------------------------------------------
    def _repo(self, repo_id: str, revision: str,
              auth: Optional[str]) -> Tuple[int, Dict[str, str], Optional[HubRepo], str]:
        repo = self.repos.get(repo_id)
        if repo is None:
            return 404, {"X-Error-Code": "RepoNotFound",
                         "X-Error-Message": "Repository not found"}, None, ""
        if repo.gated and auth != "Bearer " + self.token:
            return 401, {"X-Error-Code": "GatedRepo", "X-Error-Message":
                         "Access to model {} is restricted. You must have access to it and "
                         "be authenticated to access it. Please log in.".format(repo_id)}, None, ""
        commit = repo.refs.get(revision, revision)
        if commit not in repo.history:                   
            return 404, {"X-Error-Code": "RevisionNotFound",
                         "X-Error-Message": "Invalid rev id: " + revision}, None, ""
        return 200, {}, repo, commit


_API = re.compile(r"^/api/models/([^/]+/[^/]+)(?:/revision/([^/]+))?/?$")
_TREE = re.compile(r"^/api/models/([^/]+/[^/]+)/tree/([^/]+)(?:/(.*))?$")
_RESOLVE = re.compile(r"^/([^/]+/[^/]+)/resolve/([^/]+)/(.+)$")
_RANGE = re.compile(r"^bytes=(\d+)-(\d*)$")
CORS_EXPOSE = ", ".join(("X-Repo-Commit", "X-Linked-Etag", "X-Linked-Size", "ETag",
                         "Content-Range", "Content-Length", "Accept-Ranges", "X-Error-Code",
                         "X-Error-Message"))


class _Handler(BaseHTTPRequestHandler):
    owner: FakeHub
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: object) -> None:     # quiet: tests read hub.requests
        pass

    def end_headers(self) -> None:
        # CORS as huggingface.co sends it, so a page on another origin (the browser shell)
        # may read the API, follow the 302 and read the headers the Hub's clients use.
        self.send_header("Access-Control-Allow-Origin", "*")
        self.send_header("Access-Control-Expose-Headers", CORS_EXPOSE)
        self.send_header("Cross-Origin-Resource-Policy", "cross-origin")
        super().end_headers()

    def do_OPTIONS(self) -> None:                      # a CORS preflight (Range, Authorization)
        with self.owner._lock:
            self.owner.requests.append({"method": "OPTIONS", "path": urlsplit(self.path).path,
                                        "host": self.headers.get("Host"), "range": None,
                                        "auth": False})
        self.send_response(204)
        self.send_header("Access-Control-Allow-Methods", "GET, HEAD, OPTIONS")
        self.send_header("Access-Control-Allow-Headers", "Range, Authorization, Content-Type")
        self.send_header("Access-Control-Max-Age", "86400")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_HEAD(self) -> None:
        self._handle(head=True)

    def do_GET(self) -> None:
        self._handle(head=False)

    # --- dispatch ------------------------------------------------------------------
    def _handle(self, head: bool) -> None:
        hub = self.owner
        split = urlsplit(self.path)
        path, query = unquote(split.path), parse_qs(split.query)
        with hub._lock:
            hub.requests.append({"method": self.command, "path": path, "host":
                                 self.headers.get("Host"), "range": self.headers.get("Range"),
                                 "auth": self.headers.get("Authorization") is not None})
        auth = self.headers.get("Authorization")
        if path.startswith("/lfs/"):
            return self._lfs(path[5:], head)
        match = _API.match(path)
        if match:
            return self._info(match.group(1), unquote(match.group(2) or "main"), query, auth)
        match = _TREE.match(path)
        if match:
            return self._tree(match.group(1), match.group(2), match.group(3) or "", query, auth)
        match = _RESOLVE.match(path)
        if match:
            return self._resolve(match.group(1), match.group(2), match.group(3), head, auth)
        self._send(404, b"", {"X-Error-Code": "RepoNotFound"})

    def _info(self, repo_id: str, revision: str, query: dict, auth: Optional[str]) -> None:
        status, headers, repo, commit = self.owner._repo(repo_id, revision, auth)
        if repo is None:
            return self._json(status, {"error": headers["X-Error-Message"]}, headers)
        files = repo.history[commit]                          
        siblings = []
        for name in sorted(files):
            entry: Dict[str, object] = {"rfilename": name}
            if query.get("blobs") == ["true"] or query.get("blobs") == ["True"]:
                item = files[name]
                entry.update(size=item.size, blobId=item.git_sha1)
                if item.lfs:
                    entry["lfs"] = {"sha256": item.sha256, "size": item.size,
                                    "pointerSize": 134}
            siblings.append(entry)
        self._json(200, {"_id": repo_id, "id": repo_id, "modelId": repo_id, "sha": commit,
                         "private": False, "gated": "auto" if repo.gated else False,
                         "disabled": False, "tags": [], "siblings": siblings,
                         "lastModified": "2025-01-01T00:00:00.000Z"})

    def _tree(self, repo_id: str, revision: str, prefix: str, query: dict,
              auth: Optional[str]) -> None:
        status, headers, repo, commit = self.owner._repo(repo_id, unquote(revision), auth)
        if repo is None:
            return self._json(status, {"error": headers["X-Error-Message"]}, headers)
        files = repo.history[commit]                          
        recursive = query.get("recursive") in (["true"], ["True"], ["1"])
        base = prefix.strip("/") + "/" if prefix.strip("/") else ""
        out, dirs = [], set()
        for name in sorted(files):
            if not name.startswith(base):
                continue
            rest = name[len(base):]
            if "/" in rest and not recursive:
                dirs.add(base + rest.split("/")[0])
                continue
            for i, _ in enumerate(rest.split("/")[:-1]):
                dirs.add(base + "/".join(rest.split("/")[:i + 1]))
            item = files[name]
            entry: Dict[str, object] = {"type": "file", "oid": item.git_sha1,
                                        "size": item.size, "path": name}
            if item.lfs:
                entry["lfs"] = {"oid": item.sha256, "size": item.size, "pointerSize": 134}
            out.append(entry)
        if base and not out and not dirs:
            return self._json(404, {"error": "not found"}, {"X-Error-Code": "EntryNotFound"})
        listing = [{"type": "directory", "oid": "0" * 40, "size": 0, "path": d}
                   for d in sorted(dirs)] + out
        self._json(200, listing)

    def _resolve(self, repo_id: str, revision: str, name: str, head: bool,
                 auth: Optional[str]) -> None:
        status, headers, repo, commit = self.owner._repo(repo_id, unquote(revision), auth)
        if repo is None:
            return self._send(status, b"" if head else headers["X-Error-Message"].encode(),
                              headers)
        item = repo.history[commit].get(name)                
        if item is None:
            return self._send(404, b"" if head else b"Entry not found",
                              {"X-Error-Code": "EntryNotFound",
                               "X-Error-Message": "Entry not found", "X-Repo-Commit": commit})
        common = {"X-Repo-Commit": commit, "ETag": '"{}"'.format(item.git_sha1)}
        if item.lfs:
            location = "{}/lfs/{}".format(self.owner.cdn_url, item.sha256)
            common.update({"Location": location, "X-Linked-Etag": '"{}"'.format(item.sha256),
                           "X-Linked-Size": str(item.size)})
            return self._send(302, b"", common, head=True)
        self._content(item, item.read(0, item.size), head, common)

    def _lfs(self, sha256: str, head: bool) -> None:
        hub = self.owner
        item = next((f for r in hub.repos.values()
                     for files in r.history.values()          
                     for f in files.values() if f.sha256 == sha256), None)
        if item is None:
            return self._send(404, b"NoSuchKey")
        data = hub.corrupted.get(sha256)
        payload: Union[bytes, HubFile] = data if data is not None else item
        self._content(payload, None, head, {"ETag": '"{}"'.format(sha256)},
                      cut=None if head else hub.cuts.pop(sha256, None))

    # --- bodies --------------------------------------------------------------------
    def _content(self, payload: Union[bytes, HubFile], data: Optional[bytes], head: bool,
                 headers: Dict[str, str], cut: Optional[int] = None) -> None:
        size = len(payload) if isinstance(payload, bytes) else payload.size
        start, end, status = 0, size, 200
        match = _RANGE.match(self.headers.get("Range") or "")
        if match:
            start = int(match.group(1))
            end = min(size, int(match.group(2)) + 1) if match.group(2) else size
            if start >= size:
                return self._send(416, b"", {"Content-Range": "bytes */{}".format(size)})
            status = 206
            headers = dict(headers, **{"Content-Range": "bytes {}-{}/{}".format(
                start, end - 1, size)})
        headers = dict(headers, **{"Accept-Ranges": "bytes", "Content-Length": str(end - start),
                                   "Content-Type": "application/octet-stream"})
        self.send_response(status)
        for key, value in headers.items():
            self.send_header(key, value)
        self.end_headers()
        if head:
            return
        stop = end if cut is None else min(end, start + cut)
        pos = start
        while pos < stop:
            step = min(CHUNK, stop - pos)
            chunk = payload[pos:pos + step] if isinstance(payload, bytes) else \
                payload.read(pos, pos + step)
            self.wfile.write(chunk)
            pos += step
        if cut is not None:                 # the transfer breaks: close mid-body
            self.wfile.flush()
            self.close_connection = True
            self.connection.shutdown(2)

    def _json(self, status: int, obj: object, headers: Optional[Dict[str, str]] = None) -> None:
        self._send(status, json.dumps(obj).encode(),
                   dict(headers or {}, **{"Content-Type": "application/json"}))

    def _send(self, status: int, body: bytes, headers: Optional[Dict[str, str]] = None,
              head: bool = False) -> None:
        self.send_response(status)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if body and not head and self.command != "HEAD":
            self.wfile.write(body)


def resolve_url(hub: FakeHub, repo_id: str, path: str, revision: str = "main") -> str:
    return "{}/{}/resolve/{}/{}".format(hub.url, repo_id, quote(revision, safe=""),
                                        quote(path))
