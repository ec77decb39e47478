"""apr in the browser: model bytes from URLs (the lowest layer of the shell's Python side).

`RemoteSource`s over `aprHost` (see apr_web's docstring), the shard cache, `drive` (runs
a synchronous parser, fetching whatever range it asks for) and `_open` (a model URL ->
an open ModelFile, verified and unlocked). `apr_web` (describing models) and `apr_webrun`
(generation) both build on it; it imports neither.
"""
from __future__ import annotations

import hashlib
import json
from typing import Any, Callable, Dict, List, Optional

import js  # type: ignore[import-not-found]  # Pyodide's bridge to the worker's globals

from apr_core.errors import AprError, ErrorCode
from apr_core.formats.apr2 import read_apr2
from apr_core.formats.apr2_layout import FOOTER_SIZE, HEADER, HEADER_SIZE
from apr_core.formats.flags import SHARDED, SIGNED
from apr_core.formats.open import open_model
from apr_core.formats.shards import read_sharded
from apr_core.io import NeedBytes, SparseSource

MIN_FETCH = 1 << 16
MAX_FETCH = 1 << 24
MANIFEST_LIMIT = 64 << 20

_models: Dict[str, Any] = {}
_state: Dict[str, Any] = {}


def _to_js(data: bytes) -> Any:
    """Python bytes as a JS Uint8Array (Pyodide 0.17 and later alike)."""
    try:
        from pyodide.ffi import to_js  # type: ignore[import-not-found]  # Pyodide >= 0.21
    except ImportError:
        from pyodide import to_js  # type: ignore[import-not-found]  # Pyodide 0.17
    return to_js(data)


def _bytes(value: Any) -> bytes:
    """A JS Uint8Array as Python bytes (`to_bytes` on new Pyodide, `to_py` on 0.17)."""
    if hasattr(value, "to_bytes"):
        return value.to_bytes()
    return bytes(value.to_py())


class SourceNeed(NeedBytes):
    """`NeedBytes` that also says which source lacks the range."""

    def __init__(self, source: "RemoteSource", offset: int, length: int) -> None:
        super().__init__(offset, length)
        self.source = source


class RemoteSource(SparseSource):
    """A byte source filled on demand by an async `fetch(offset, length)`."""

    def __init__(self, size: int, name: str, fetch: Callable[[int, int], Any],
                 fetch_all: Optional[Callable[[], Any]] = None,
                 fetch_js: Optional[Callable[[int, int], Any]] = None) -> None:
        super().__init__(size, name)
        self._fetch = fetch
        self._fetch_all = fetch_all or (lambda: fetch(0, size))
        self._fetch_js = fetch_js
        self._chunk = MIN_FETCH

    async def read_js(self, offset: int, length: int) -> Any:
        """`length` bytes at `offset` as a JS Uint8Array, not kept here (for the kernels'
        memory: straight from the cache when the source can, else through one Python copy)."""
        if self._fetch_js is not None:
            return await self._fetch_js(offset, length)
        return _to_js(await self._fetch(offset, length))

    async def fill_exact(self, offset: int, length: int) -> None:
        """Hold exactly the range `[offset, offset + length)` (unless it is held already)."""
        try:
            self.read(offset, length)
        except NeedBytes:
            self.add(offset, await self._fetch(offset, length))

    def _read(self, offset: int, length: int) -> bytes:
        try:
            return super()._read(offset, length)
        except NeedBytes as need:
            raise SourceNeed(self, need.offset, need.length)

    async def fill(self, offset: int, length: int) -> None:
        """Fetch at least `length` bytes at `offset` (more, growing, to save round trips)."""
        length = min(max(length, self._chunk), self.size - offset)
        self.add(offset, await self._fetch(offset, length))
        self._chunk = min(self._chunk * 2, MAX_FETCH)

    async def fill_all(self) -> None:
        """Hold the whole source in memory (before a full model load)."""
        if not any(start == 0 and len(data) == self.size for start, data in self._spans):
            self._spans = []
            self.add(0, await self._fetch_all())


async def drive(parse: Callable[[], Any], max_rounds: int = 100000) -> Any:
    """Run the synchronous `parse()` until no source lacks a range."""
    for _ in range(max_rounds):
        try:
            return parse()
        except SourceNeed as need:
            await need.source.fill(need.offset, need.length)
    raise AprError(ErrorCode.IO, "too many range requests while parsing")


async def _url_source(url: str) -> RemoteSource:
    head = json.loads(await js.aprHost.head(url))
    size, validator = int(head["size"]), str(head.get("validator") or "")
    if validator:
        return CachedFileSource(url, size, validator)

    async def fetch(offset: int, length: int) -> bytes:
        return _bytes(await js.aprHost.fetchRange(url, offset, length))

    async def fetch_all() -> bytes:
        return _bytes(await js.aprHost.fetchFile(url, size))
    return RemoteSource(size, url, fetch, fetch_all)


class CachedFileSource(RemoteSource):
    """A single model file, cached whole in IndexedDB by its first full read, under a key of
    its URL, size and HTTP validator (a new version on the server is a new key). Range reads
    (describing a model) go to the network until the file is cached, then to the cache: no
    range read downloads the whole file. With `cache_whole = False` a whole read not yet
    cached goes to the network uncached; `store()` then keeps it (unless it turns out to be
    a shard manifest, which is re-read on every open to notice a new model version)."""

    def __init__(self, url: str, size: int, validator: str) -> None:
        super().__init__(size, url, self._fetch_range, self._fetch_whole, self._fetch_range_js)
        self.url = url
        self.key = hashlib.sha256("\n".join(("file", url, str(size), validator)).encode()
                                  ).hexdigest()
        self.spec = {"url": url, "sha256": self.key, "size": size, "verify": False,
                     "name": url.rsplit("/", 1)[-1] or url, "model": url, "index": 0,
                     "count": 1, "before": 0, "keep": [self.key], "modelSize": size}
        self.cache_whole = True
        self._cached: Optional[bool] = None

    async def _in_cache(self) -> bool:
        if self._cached is None:   # asked once: nothing is downloaded by asking
            probe = json.dumps(dict(self.spec, onlyIfCached=True))
            self._cached = bool(await js.aprHost.ensureShard(probe))
        return self._cached

    async def ensure_cached(self) -> None:
        """Download the whole file into the cache now (before many range reads)."""
        if not await self._in_cache():
            await js.aprHost.ensureShard(json.dumps(self.spec))
            self._cached = True

    async def _fetch_range_js(self, offset: int, length: int) -> Any:
        if await self._in_cache():
            return await js.aprHost.readShard(self.key, offset, length)
        return await js.aprHost.fetchRange(self.url, offset, length)

    async def _fetch_range(self, offset: int, length: int) -> bytes:
        return _bytes(await self._fetch_range_js(offset, length))

    async def _fetch_whole(self) -> bytes:
        if not self.cache_whole and not await self._in_cache():
            return _bytes(await js.aprHost.fetchFile(self.url, self.size))
        if not self._cached:
            await js.aprHost.ensureShard(json.dumps(self.spec))
            self._cached = True
        return _bytes(await js.aprHost.readShard(self.key, 0, self.size))

    async def store(self) -> None:
        """Commit the whole file, already held in memory, to the cache."""
        if not self._cached:
            await js.aprHost.storeFile(json.dumps(self.spec), _to_js(self.read(0, self.size)))
            self._cached = True


class HubFileSource(CachedFileSource):
    """An LFS file of the Hugging Face Hub (see apr_webhub.resolve), cached in IndexedDB
    under the sha256 the Hub advertises for it. Every read waits until the whole file is
    downloaded (Range requests, resumable), checked against that sha256 and committed, so
    no byte that failed the check is ever used or kept; later reads, and later pages, read
    the verified copy without downloading it again."""

    def __init__(self, hub: Dict[str, Any]) -> None:
        super().__init__(hub["url"], hub["size"], "")
        self.key = hub["sha256"]
        self.hub = hub
        self.spec = dict(self.spec, sha256=self.key, verify="sha256", name=hub["file"],
                         model=hub["reference"], keep=[self.key])

    async def _ensure(self) -> None:
        if not self._cached:
            await js.aprHost.ensureShard(json.dumps(self.spec))
            self._cached = True

    async def ensure_cached(self) -> None:
        await self._ensure()

    async def _fetch_range_js(self, offset: int, length: int) -> Any:
        await self._ensure()
        return await js.aprHost.readShard(self.key, offset, length)

    async def _fetch_whole(self) -> bytes:
        await self._ensure()
        return _bytes(await js.aprHost.readShard(self.key, 0, self.size))

    async def store(self) -> None:
        """Nothing to do: a hub file is committed (verified) by its first read."""


async def _hub_source(reference: str) -> RemoteSource:
    """The source of the one file an `hf://` reference names (resolved via the Hub's API)."""
    from apr_webhub import resolve
    hub = await resolve(reference)
    js.aprHost.emit("resolved", json.dumps(hub))
    if hub["sha256"] is None:   # a small file kept in git, not LFS: cached by URL + ETag
        return await _url_source(hub["url"])
    return HubFileSource(hub)


def _is_manifest(header: bytes) -> bool:
    """An APR v2 header with the SHARDED flag."""
    return len(header) >= HEADER_SIZE and header[:4] == b"APR2" and bool(
        HEADER.unpack(header[:HEADER_SIZE])[3] & SHARDED)


def _shard_source(url: str, entry: Dict[str, Any], number: int, entries: List[Any]) -> RemoteSource:
    """A shard read through the IndexedDB cache; the first read downloads and verifies it."""
    shard_url = _join(url, entry["file"])
    spec = json.dumps({
        "url": shard_url, "sha256": entry["sha256"], "size": entry["size"],
        "crc32": entry["crc32"], "crcSpan": entry["size"] - FOOTER_SIZE, "name": entry["file"],
        "model": url, "index": number, "count": len(entries),
        "before": sum(e["size"] for e in entries[:number]),
        # Eviction must not drop a sibling shard of the model being loaded.
        "keep": [e["sha256"] for e in entries if e.get("sha256")],
        "modelSize": sum(e["size"] for e in entries)})
    ready: List[bool] = []

    async def fetch(offset: int, length: int) -> bytes:
        if not ready:
            await js.aprHost.ensureShard(spec)
            ready.append(True)
        return _bytes(await js.aprHost.readShard(entry["sha256"], offset, length))
    return RemoteSource(entry["size"], entry["file"], fetch)


def _join(base: str, name: str) -> str:
    return base.rsplit("/", 1)[0] + "/" + name


async def _open(url: str, options: Optional[Dict[str, Any]] = None) -> Any:
    """Open a model URL or `hf://` reference: a sharded APR manifest (shards cached) or any
    single model file.

    `options`: `trustedKey` (hex Ed25519 public key), `password` or `secretKey` (hex
    Ed25519 seed of the recipient) for encrypted files. A SIGNED APR file has its signature
    checked before anything else is read (against `trustedKey` when given, else integrity
    only); a signed manifest pins every shard's sha256, which the shard cache checks before
    it keeps a shard. ENCRYPTED files (or shards) are unlocked with the password or key;
    a wrong one is E005 before any tensor is read.
    """
    options = {k: v for k, v in (options or {}).items() if v is not None}
    trusted_key = options.get("trustedKey")
    if url in _models and not options:
        return _models[url]
    if url.lower().startswith("hf://"):   # a Hub reference: its resolve URL, sha256-keyed
        source = await _hub_source(url)
    else:
        source = await _url_source(url)
    location = getattr(source, "url", url)   # where a manifest's shards are, beside it
    head = None
    signature = None
    if source.size <= MANIFEST_LIMIT:
        cached_file = isinstance(source, CachedFileSource)
        if cached_file:
            source.cache_whole = False   # what the file is decides whether it is kept
        await source.fill_all()
        if cached_file and not _is_manifest(source.read(0, min(HEADER_SIZE, source.size))):
            await source.store()
        if source.read(0, min(4, source.size)) == b"APR2":
            head = read_apr2(source, verify=True)  # a manifest's CRC is checked in full
            if head.flags & SIGNED or trusted_key is not None:
                signature = _verify_signature(source, trusted_key)
    if head is not None and head.is_sharded:
        entries = head.metadata.get("shards")
        sources: Dict[str, RemoteSource] = {}

        def opener(name: str) -> Any:
            # read_sharded validated every entry before asking for the first shard.
            if name not in sources:
                number = [e["file"] for e in entries].index(name)
                entry = entries[number]
                if entry.get("sha256") is None:  # not content-addressed: range reads only
                    sources[name] = _plain_shard(location, entry)
                else:
                    sources[name] = _shard_source(location, entry, number, entries)
            return sources[name]
        model = await drive(lambda: read_sharded(source, opener=opener, verify=False))
        model.remote_sources = list(sources.values())
    else:
        model = await drive(lambda: open_model(source, verify=False))
        model.remote_sources = [source]
    model.signature = signature
    _unlock(model, options.get("password"), options.get("secretKey"))
    _models[url] = model
    return model


def _unlock(model: Any, password: Optional[str], secret_key: Optional[str]) -> None:
    from apr_core.formats.flags import ENCRYPTED
    parts = getattr(model, "shards", None) or [model]
    locked = [part for part in parts if isinstance(getattr(part, "flags", None), int)
              and part.flags & ENCRYPTED]
    if not locked:
        return
    from apr_core.crypto.keys import from_seed
    from apr_core.formats.apr2_encrypt import unlock
    key = from_seed(bytes.fromhex(secret_key)) if secret_key else None
    for part in locked:
        unlock(part, password=password, key=key)


def _verify_signature(source: Any, trusted_key: Optional[str]) -> Dict[str, Any]:
    from apr_core import crypto
    from apr_core.formats.apr2_sign import verify_source
    key = bytes.fromhex(trusted_key) if trusted_key else None
    result = verify_source(source, key)  # E006 on any failure
    result["provider"] = crypto.provider_for("verify_ed25519").name
    return result


def _plain_shard(url: str, entry: Dict[str, Any]) -> RemoteSource:
    shard_url = _join(url, entry["file"])

    async def fetch(offset: int, length: int) -> bytes:
        return _bytes(await js.aprHost.fetchRange(shard_url, offset, length))
    return RemoteSource(entry["size"], entry["file"], fetch)


def _error(exc: BaseException) -> str:
    if isinstance(exc, AprError):
        return json.dumps({"error": exc.to_dict()})
    return json.dumps({"error": {"code": type(exc).__name__, "message": str(exc)}})
