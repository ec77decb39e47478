"""Where models fetched by reference live, and what apr remembers about them.

- Hugging Face files: the shared Hugging Face cache (`HF_HUB_CACHE`, else `HF_HOME/hub`,
  else ~/.cache/huggingface/hub), written by `huggingface_hub` itself, so transformers and
  huggingface_hub find what apr pulled and the other way round.
- Plain URLs: apr's content-addressed cache, `$APR_CACHE/blobs/sha256/<hex>`, with
  `$APR_CACHE/urls/<key>.json` mapping a URL to its blob and `$APR_CACHE/downloads/<key>.part`
  holding an interrupted transfer until it resumes.
- `$APR_CACHE/pulled.json`: every reference apr resolved (repo, commit, files, sizes,
  sha256), which `apr list`, `apr rm` and `apr cache` read.
- `$APR_CACHE/verified/<sha256>.<size>`: a file hashed once is not hashed again while its
  path, size and mtime stay the same.
"""
from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

from apr_core.atomic import atomic_output
from apr_core.errors import AprError, ErrorCode
from apr_core.integrity import sha256_file

from .config import cache_dir

TRUE = ("1", "true", "yes", "on")


def hf_cache_dir() -> Path:
    """The shared Hugging Face hub cache, as huggingface_hub computes it."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    home = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(str(Path.home()), ".cache"),
        "huggingface")
    return Path(home).expanduser() / "hub"


# What a network error (E013) tells to try when the network is not there to be had.
OFFLINE_HINT = "set APR_OFFLINE=1 to use only what is cached"


def offline() -> bool:
    """APR_OFFLINE=1 or HF_HUB_OFFLINE=1: only what is cached, no network at all."""
    return any(os.environ.get(k, "").lower() in TRUE for k in ("APR_OFFLINE", "HF_HUB_OFFLINE"))


def url_blob(sha256: str) -> Path:
    return cache_dir() / "blobs" / "sha256" / sha256


def _stamp_key(path: Path, stat: os.stat_result) -> str:
    return "{} {} {}".format(os.path.realpath(path), stat.st_size, stat.st_mtime_ns)


def verify(path: Path, sha256: str, what: str) -> None:
    """E004 unless `path` hashes to `sha256`; a stamp remembers a verified file."""
    stat = path.stat()
    stamp = cache_dir() / "verified" / "{}.{}".format(sha256, stat.st_size)
    key = _stamp_key(path, stat)
    if stamp.is_file() and stamp.read_text() == key:
        return
    actual = sha256_file(str(path))
    if actual != sha256:
        raise AprError(ErrorCode.CHECKSUM, "downloaded file does not match the sha256 the "
                       "server advertises; it was removed", reference=what,
                       expected=sha256, actual=actual)
    stamp.parent.mkdir(parents=True, exist_ok=True)
    stamp.write_text(key)


def file_sha256(path: Path) -> str:
    """The sha256 of the file at `path`, from the stamp `verify` (or an earlier call)
    left while its path, size and mtime stay the same; else hashed once and stamped."""
    stat = path.stat()
    key = _stamp_key(path, stat)
    folder = cache_dir() / "verified"
    for stamp in folder.glob("*.{}".format(stat.st_size)) if folder.is_dir() else ():
        digest = stamp.name.split(".")[0]
        if len(digest) == 64 and stamp.read_text() == key:
            return digest
    digest = sha256_file(str(path))
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "{}.{}".format(digest, stat.st_size)).write_text(key)
    return digest


def model_sha256(path: str) -> str:
    """The sha256 naming a model (a session file's `model.sha256`): its file's
    (`file_sha256`), or for a directory the sha256 of its files' names and digests."""
    target = Path(path)
    if target.is_file():
        return file_sha256(target)
    lines = ["{} {}".format(p.relative_to(target).as_posix(), file_sha256(p))
             for p in sorted(target.rglob("*")) if p.is_file()]
    return hashlib.sha256("\n".join(lines).encode("utf-8")).hexdigest()


# --- the record of pulled references -------------------------------------------------
def _record_path() -> Path:
    return cache_dir() / "pulled.json"


def records() -> Dict[str, Dict[str, Any]]:
    try:
        data = json.loads(_record_path().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _save(data: Dict[str, Dict[str, Any]]) -> None:
    path = _record_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_output(path) as out:
        out.write(json.dumps(data, indent=1, sort_keys=True).encode("utf-8"))


def remember(entry: Dict[str, Any]) -> None:
    data = records()
    entry = dict(entry, pulled=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    data[entry["reference"]] = entry
    _save(data)


def entries() -> List[Dict[str, Any]]:
    """Pulled references still present on disk, with their bytes."""
    out = []
    for ref, entry in sorted(records().items()):
        files = entry.get("files") or []
        present = all(os.path.exists(f.get("local", "")) for f in files)
        out.append({"name": ref, "path": entry.get("path"), "source": entry.get("kind"),
                    "revision": entry.get("revision"), "present": present,
                    "bytes": sum(int(f.get("size") or 0) for f in files),
                    "modified": entry.get("pulled")})
    return out


def _hf_blob_in_use(blob: str, repo_dir: Path, skip: str) -> bool:
    for root, _dirs, names in os.walk(repo_dir / "snapshots"):
        for name in names:
            link = os.path.join(root, name)
            if link != skip and os.path.realpath(link) == blob:
                return True
    return False


def remove_file(local: str) -> int:
    """Remove one pulled file: an HF snapshot entry (and its blob when no other snapshot
    links to it) or a URL blob. Returns the bytes freed."""
    path = Path(local)
    if not os.path.lexists(local):
        return 0
    freed = 0
    real = os.path.realpath(local)
    parts = path.parts
    if "snapshots" in parts:                       # HF cache layout: repo/snapshots/commit/...
        repo_dir = Path(*parts[:parts.index("snapshots")])
        if not _hf_blob_in_use(real, repo_dir, local) and os.path.exists(real) and real != local:
            freed = os.path.getsize(real)
            os.unlink(real)
        elif real == local:
            freed = os.path.getsize(local)
        os.unlink(local)
    else:
        freed = os.path.getsize(real)
        os.unlink(local)
    return freed


def forget(reference: str) -> Dict[str, Any]:
    """`apr rm REF`: remove the files apr pulled for `reference`; E007 if it never did."""
    data = records()
    entry = data.pop(reference, None)
    if entry is None:
        raise AprError(ErrorCode.IO, "no such pulled reference (see apr list)",
                       reference=reference)
    freed = 0
    for item in entry.get("files") or []:
        freed += remove_file(item.get("local", ""))
        if entry.get("kind") == "url":
            index = cache_dir() / "urls" / (item.get("key", "") + ".json")
            if index.is_file():
                index.unlink()
    _save(data)
    return {"removed": reference, "bytes": freed}


def usage() -> Dict[str, Any]:
    """`apr cache info`: the directories and what apr keeps in them."""
    def size_of(root: Path) -> Dict[str, int]:
        files = total = 0
        if root.is_dir():
            for base, _dirs, names in os.walk(root):
                for name in names:
                    path = os.path.join(base, name)
                    if os.path.isfile(path) and not os.path.islink(path):
                        files += 1
                        total += os.path.getsize(path)
        return {"files": files, "bytes": total}
    root = cache_dir()
    pulled = entries()
    return {"apr_cache": str(root), "hf_cache": str(hf_cache_dir()), "offline": offline(),
            "models": size_of(root / "models"), "url_blobs": size_of(root / "blobs"),
            "partial_downloads": size_of(root / "downloads"),
            "pulled": {"references": len(pulled), "bytes": _pulled_bytes()}}


def _pulled_bytes() -> int:
    """Bytes of the distinct files behind every pulled reference (two references to one
    blob count it once)."""
    blobs = {}
    for entry in records().values():
        for item in entry.get("files") or []:
            real = os.path.realpath(item.get("local", ""))
            if os.path.isfile(real):
                blobs[real] = os.path.getsize(real)
    return sum(blobs.values())


def clear(include_models: bool = False) -> Dict[str, Any]:
    """`apr cache clear`: every pulled reference (HF entries apr pulled, URL blobs),
    partial downloads and verification stamps; `apr import` outputs too with
    `include_models`."""
    freed, removed = 0, []
    for ref in list(records()):
        freed += forget(ref)["bytes"]
        removed.append(ref)
    root = cache_dir()
    dirs = ["downloads", "verified", "urls", "blobs"] + (["models"] if include_models else [])
    for name in dirs:
        for base, _d, names in os.walk(root / name, topdown=False):
            for file_name in names:
                path = os.path.join(base, file_name)
                freed += os.path.getsize(path) if os.path.isfile(path) else 0
                os.unlink(path)
    return {"removed": removed, "bytes": freed}


def find_local(reference: str) -> Optional[str]:
    entry = records().get(reference)
    return entry.get("path") if entry else None
