"""Fetching plain `https://` / `http://` model URLs into apr's content-addressed cache.

    $APR_CACHE/downloads/<key>.part     the transfer in progress (key = sha256 of the URL)
    $APR_CACHE/blobs/sha256/<sha256>    the verified file, named by its content
    $APR_CACHE/urls/<key>.json          URL -> sha256, size, ETag

The discipline is the Hub's: download to the temporary name, resume an interrupted
transfer with `Range` (guarded by `If-Range` so a changed file restarts), verify, then
rename. The expected sha256 comes from the caller (`apr.lock`, `--sha256`), a `#sha256=HEX`
URL fragment, or an `X-Linked-Etag`/`ETag` that is a sha256 (the Hub's LFS resolve URLs);
without one the file is still content-addressed and its size checked against the server's.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Dict, Optional

from apr_core.atomic import atomic_output
from apr_core.errors import AprError, ErrorCode
from apr_core.refs import ModelRef

from . import hub_store
from .config import cache_dir

_SHA256 = re.compile(r"^[0-9a-f]{64}$")
ATTEMPTS = 4
CHUNK = 1 << 20


def _key(url: str) -> str:
    return hashlib.sha256(url.split("#", 1)[0].encode("utf-8")).hexdigest()[:32]


def _index(url: str) -> Path:
    return cache_dir() / "urls" / (_key(url) + ".json")


def _advertised(headers: Any) -> Optional[str]:
    for name in ("X-Linked-Etag", "ETag"):
        value = (headers.get(name) or "").strip().strip('"').lower()
        if value.startswith("w/"):
            continue
        if _SHA256.match(value):
            return value
    return None


def _open(url: str, start: int, etag: Optional[str]) -> Any:
    headers = {"User-Agent": "apr", "Accept-Encoding": "identity"}
    if start:
        headers["Range"] = "bytes={}-".format(start)
        if etag:
            headers["If-Range"] = etag
    try:
        return urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=30)
    except urllib.error.HTTPError as exc:
        if exc.code in (401, 403):
            raise AprError(ErrorCode.AUTH, "the server refused the download (HTTP {})"
                           .format(exc.code), reference=url)
        raise AprError(ErrorCode.NETWORK, "HTTP {} {}".format(exc.code, exc.reason),
                       reference=url)
    except (urllib.error.URLError, OSError) as exc:
        raise AprError(ErrorCode.NETWORK, "cannot download: {}; {}".format(
            getattr(exc, "reason", exc), hub_store.OFFLINE_HINT), reference=url)


def _transfer(url: str, part: Path, progress: Any) -> Dict[str, Any]:
    """Append the rest of `url` to `part`; resumes up to ATTEMPTS times. Returns the
    response facts (total size, advertised sha256, etag)."""
    facts: Dict[str, Any] = {"etag": None, "sha256": None, "size": None}
    last: Optional[Exception] = None
    for _ in range(ATTEMPTS):
        start = part.stat().st_size if part.is_file() else 0
        response = _open(url, start, facts["etag"])
        with response:
            status = response.status
            headers = response.headers
            facts["etag"] = headers.get("ETag") or facts["etag"]
            facts["sha256"] = _advertised(headers) or facts["sha256"]
            if status == 206:
                match = re.match(r"bytes (\d+)-\d+/(\d+)", headers.get("Content-Range") or "")
                if not match or int(match.group(1)) != start:
                    start = 0          # a range we did not ask for: start over
                    status = 200
                else:
                    facts["size"] = int(match.group(2))
            if status == 200:
                start = 0
                length = headers.get("Content-Length")
                facts["size"] = int(length) if length and length.isdigit() else None
            try:
                with open(part, "r+b" if start else "wb") as out:
                    out.seek(start)
                    out.truncate()
                    done = start
                    for chunk in iter(lambda: response.read(CHUNK), b""):
                        out.write(chunk)
                        done += len(chunk)
                        if progress:
                            progress(url.rsplit("/", 1)[-1], done, facts["size"] or done)
            except (OSError, ValueError) as exc:   # the connection broke: resume
                last = exc
                continue
        if facts["size"] is None or part.stat().st_size == facts["size"]:
            return facts
        last = None
    raise AprError(ErrorCode.NETWORK, "download interrupted; run the command again to "
                   "resume" + (": {}".format(last) if last else ""), reference=url,
                   partial=str(part))


def fetch_url(ref: ModelRef, expected: Optional[str] = None,
              progress: Any = None) -> Dict[str, Any]:
    """The verified local copy of `ref.url` (downloaded unless cached); its record."""
    url = ref.url
    if "#sha256=" in url:
        expected = expected or url.split("#sha256=", 1)[1].lower()
    index = _index(url)
    try:
        known = json.loads(index.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        known = None
    if known and (not expected or known.get("sha256") == expected):
        blob = hub_store.url_blob(known["sha256"])
        if blob.is_file():
            hub_store.verify(blob, known["sha256"], ref.text)
            return _record(ref, blob, known["sha256"])
    if hub_store.offline():
        raise AprError(ErrorCode.OFFLINE, "offline and {} is not in the cache; run `apr "
                       "pull {}` while online".format(ref.text, ref.text), reference=ref.text)
    part = cache_dir() / "downloads" / (_key(url) + ".part")
    part.parent.mkdir(parents=True, exist_ok=True)
    facts = _transfer(url.split("#", 1)[0], part, progress)
    if facts["size"] is not None and part.stat().st_size != facts["size"]:
        part.unlink()
        raise AprError(ErrorCode.NETWORK, "download size differs from the server's",
                       reference=ref.text)
    want = expected or facts["sha256"]
    try:
        sha = _hash(part)
        if want and sha != want:
            raise AprError(ErrorCode.CHECKSUM, "downloaded file does not match the expected "
                           "sha256; it was removed", reference=ref.text, expected=want,
                           actual=sha)
    except AprError:
        part.unlink()
        raise
    blob = hub_store.url_blob(sha)
    blob.parent.mkdir(parents=True, exist_ok=True)
    os.replace(part, blob)
    index.parent.mkdir(parents=True, exist_ok=True)
    with atomic_output(index) as out:
        out.write(json.dumps({"url": url, "sha256": sha, "size": blob.stat().st_size,
                              "etag": facts["etag"]}).encode("utf-8"))
    hub_store.verify(blob, sha, ref.text)          # stamps it: later uses skip the hash
    return _record(ref, blob, sha)


def _hash(path: Path) -> str:
    from apr_core.integrity import sha256_file
    return sha256_file(str(path))


def _record(ref: ModelRef, blob: Path, sha: str) -> Dict[str, Any]:
    return {"reference": ref.text, "kind": "url", "repo": "", "revision": sha,
            "path": str(blob), "open": "", "files": [{"path": ref.url, "size": blob.stat().st_size,
                                          "sha256": sha, "local": str(blob),
                                          "key": _key(ref.url)}]}
