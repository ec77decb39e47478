"""Fetching `hf://` references through `huggingface_hub`, into the shared Hugging Face cache.

`fetch_hf(ref)` asks the Hub (`HF_ENDPOINT`, `HF_TOKEN`) which commit the reference means
and which files it needs, downloads them with `hf_hub_download` (its `.incomplete` files
resume an interrupted transfer; its snapshot/blob layout is what transformers reads), then
verifies every file before it is used: LFS files against the sha256 the Hub advertises,
small files against their git blob id. A mismatch removes the file from the cache and is
E004. Offline (`APR_OFFLINE=1` / `HF_HUB_OFFLINE=1`) only the cache is read: E015 names
the missing reference. A gated repository without a token is E014 telling to set HF_TOKEN.
"""
from __future__ import annotations

import hashlib
import os
import re
import threading
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

from apr_core.atomic import atomic_output
from apr_core.errors import AprError, ErrorCode
from apr_core.refs import DEFAULT_ENDPOINT, ModelRef, select_files

from . import hub_store

Progress = Callable[[str, int, int], None]        # (file, bytes done, bytes total)
# What a network error (E013) tells to try besides `hub_store.OFFLINE_HINT`: the variable
# `endpoint()` reads.
MIRROR_HINT = "set HF_ENDPOINT=URL to use a mirror of the Hub"
_COMMIT = re.compile(r"^[0-9a-f]{40}$")


def endpoint() -> str:
    return (os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


def token() -> Optional[str]:
    return os.environ.get("HF_TOKEN") or os.environ.get("HUGGING_FACE_HUB_TOKEN") or None


def _map_error(exc: Exception, ref: ModelRef) -> AprError:
    """huggingface_hub's exceptions -> coded errors naming the reference."""
    from huggingface_hub import utils as hf_utils
    name = type(exc).__name__
    if isinstance(exc, hf_utils.GatedRepoError):
        hint = "the token has no access: accept the model's terms on the Hub" if token() \
            else "set HF_TOKEN to a token with access to it"
        return AprError(ErrorCode.AUTH, "gated repository: " + hint, reference=ref.text)
    if isinstance(exc, hf_utils.LocalEntryNotFoundError) or name == "OfflineModeIsEnabled":
        return offline_error(ref)
    if isinstance(exc, hf_utils.RepositoryNotFoundError):
        hint = "" if token() else " (a private repository needs HF_TOKEN)"
        return AprError(ErrorCode.NETWORK, "repository not found" + hint,
                        reference=ref.text, repo=ref.repo)
    if isinstance(exc, hf_utils.RevisionNotFoundError):
        return AprError(ErrorCode.NETWORK, "no such revision", reference=ref.text,
                        revision=ref.revision)
    if isinstance(exc, hf_utils.EntryNotFoundError):
        return AprError(ErrorCode.NETWORK, "no such file in the repository",
                        reference=ref.text)
    return AprError(ErrorCode.NETWORK, "cannot reach the Hub: {}; {}, or {}".format(
        str(exc).splitlines()[0][:200] if str(exc) else name, MIRROR_HINT,
        hub_store.OFFLINE_HINT),
        reference=ref.text, endpoint=endpoint())


def offline_error(ref: ModelRef) -> AprError:
    return AprError(ErrorCode.OFFLINE, "offline and {} is not in the cache; run `apr pull "
                    "{}` while online".format(ref.text, ref.text), reference=ref.text)


# --- which files a reference needs: apr_core.refs.select_files (the browser's too) --
def _manifest_parts(local: Path, name: str) -> List[Tuple[str, Optional[str]]]:
    """Shards a manifest names, relative to the repo, with their sha256 when it has one."""
    folder = name.rsplit("/", 1)[0] + "/" if "/" in name else ""
    if name.endswith(".safetensors.index.json"):
        from apr_core.json_files import load_json_file
        index = load_json_file(str(local))
        shards = sorted(set((index.get("weight_map") or {}).values()))
        return [(folder + s, None) for s in shards]
    if name.endswith(".apr"):
        from apr_core.formats.apr2 import read_apr2
        with read_apr2(str(local), verify=False) as model:
            shards = model.metadata.get("shards") or []
        return [(folder + s["file"], s.get("sha256")) for s in shards if isinstance(s, dict)]
    return []


# --- the cache, read without network -------------------------------------------------
def _repo_dir(repo: str) -> Path:
    return hub_store.hf_cache_dir() / ("models--" + repo.replace("/", "--"))


def cached_commit(ref: ModelRef, revision: str) -> Optional[str]:
    if _COMMIT.match(revision or ""):
        return revision
    ref_file = _repo_dir(ref.repo) / "refs" / (revision or "main")
    try:
        return ref_file.read_text().strip() or None
    except OSError:
        return None


def _snapshot_names(snapshot: Path) -> List[str]:
    out = []
    for base, _dirs, names in os.walk(snapshot):
        for name in names:
            out.append(os.path.relpath(os.path.join(base, name), snapshot).replace(os.sep, "/"))
    return out


def _cached_sha256(local: Path) -> Optional[str]:
    """An LFS blob's name in the HF cache is its sha256."""
    blob = os.path.basename(os.path.realpath(local))
    return blob if re.match(r"^[0-9a-f]{64}$", blob) else None


# --- download and verify -------------------------------------------------------------
def _git_sha1(path: Path) -> str:
    digest = hashlib.sha1(b"blob %d\0" % path.stat().st_size)
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 22), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _verify(local: Path, meta: Dict[str, Any], ref: ModelRef) -> None:
    """The file against the Hub's sha256 (LFS) or git blob id; a bad file leaves the cache."""
    try:
        if meta.get("sha256"):
            hub_store.verify(local, meta["sha256"], ref.text)
        elif meta.get("blob") and _git_sha1(local) != meta["blob"]:
            raise AprError(ErrorCode.CHECKSUM, "downloaded file does not match its git blob "
                           "id; it was removed", reference=ref.text, expected=meta["blob"])
    except AprError:
        hub_store.remove_file(str(local))
        raise


def _watch(repo: str, meta: Dict[str, Any], name: str,
           progress: Optional[Progress]) -> Callable[[], None]:
    """Report the size of huggingface_hub's `.incomplete` blob while it downloads."""
    if progress is None or not meta.get("size"):
        return lambda: None
    total, stop = int(meta["size"]), threading.Event()
    blobs = _repo_dir(repo) / "blobs"

    def loop() -> None:
        while not stop.wait(0.2):
            done = 0
            for part in blobs.glob("*.incomplete") if blobs.is_dir() else []:
                try:
                    done = max(done, part.stat().st_size)
                except OSError:
                    pass
            progress(name, min(done, total), total)
    thread = threading.Thread(target=loop, daemon=True)
    thread.start()

    def finish() -> None:
        stop.set()
        thread.join()
        progress(name, total, total)
    return finish


def _download(ref: ModelRef, name: str, commit: str, meta: Dict[str, Any],
              progress: Optional[Progress]) -> Path:
    from huggingface_hub import hf_hub_download
    from huggingface_hub.utils import disable_progress_bars
    disable_progress_bars()                     # apr draws its own (rich) bar
    finish = _watch(ref.repo, meta, name, progress)
    try:
        path = hf_hub_download(ref.repo, name, revision=commit,
                               cache_dir=str(hub_store.hf_cache_dir()),
                               endpoint=endpoint(), token=token())
    except AprError:
        raise
    except Exception as exc:
        raise _map_error(exc, ref) from None
    finally:
        finish()
    local = Path(path)
    _verify(local, meta, ref)
    return local


def _remote_files(ref: ModelRef, revision: str) -> Tuple[str, Dict[str, Dict[str, Any]]]:
    from huggingface_hub import HfApi
    try:
        info = HfApi(endpoint=endpoint(), token=token()).model_info(
            ref.repo, revision=revision or None, files_metadata=True)
    except Exception as exc:
        raise _map_error(exc, ref) from None
    files = {}
    for sibling in info.siblings or []:
        lfs = sibling.lfs
        files[sibling.rfilename] = {
            "size": sibling.size, "blob": sibling.blob_id,
            "sha256": (lfs.sha256 if hasattr(lfs, "sha256") else lfs.get("sha256"))
            if lfs else None}
    return info.sha, files


def fetch_hf(ref: ModelRef, revision: str = "", progress: Optional[Progress] = None,
             expected: Optional[Dict[str, str]] = None) -> Dict[str, Any]:
    """Resolve and fetch `ref` (at `revision`, e.g. a locked commit). Returns the record:
    {reference, kind, repo, revision (commit), path (what to open), files: [{path, size,
    sha256, local}]}. `expected` maps file -> sha256 from apr.lock (must match)."""
    revision = revision or ref.revision
    commit = cached_commit(ref, revision)
    snapshot = _repo_dir(ref.repo) / "snapshots" / commit if commit else None
    if hub_store.offline() or (expected and snapshot and _COMMIT.match(revision or "")):
        record = _from_cache(ref, commit, snapshot, expected)
        if record is not None:
            return record
        if hub_store.offline():
            raise offline_error(ref)
    commit, remote = _remote_files(ref, revision)
    wanted, opened = select_files(ref, sorted(remote))
    files: List[Dict[str, Any]] = []
    queue = [(name, (expected or {}).get(name)) for name in wanted]
    while queue:
        name, sha = queue.pop(0)
        if name not in remote:
            raise AprError(ErrorCode.NETWORK, "a file the model needs is missing from the "
                           "repository", reference=ref.text, path=name)
        meta = dict(remote[name])
        if sha and meta.get("sha256") and sha != meta["sha256"]:
            raise AprError(ErrorCode.CHECKSUM, "the Hub's sha256 differs from apr.lock",
                           reference=ref.text, path=name, locked=sha, hub=meta["sha256"])
        meta["sha256"] = meta.get("sha256") or sha
        local = _download(ref, name, commit, meta, progress)
        files.append({"path": name, "size": local.stat().st_size,
                      "sha256": meta.get("sha256"), "local": str(local)})
        if name == opened:
            queue.extend(p for p in _manifest_parts(local, name) if p[0] not in wanted)
    _write_ref(ref, revision, commit)
    return _record(ref, commit, opened, files)


def _write_ref(ref: ModelRef, revision: str, commit: str) -> None:
    """refs/<branch> -> commit, as huggingface_hub writes it, so that offline lookups (ours,
    huggingface_hub's, transformers') find the snapshot by branch or tag name."""
    if _COMMIT.match(revision or ""):
        return
    path = _repo_dir(ref.repo) / "refs" / (revision or "main")
    try:
        if path.read_text() == commit:
            return
    except OSError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_output(path) as out:
        out.write(commit.encode("ascii"))


def _from_cache(ref: ModelRef, commit: Optional[str], snapshot: Optional[Path],
                expected: Optional[Dict[str, str]]) -> Optional[Dict[str, Any]]:
    """The record from the cache alone, every file verified; None when something is
    missing."""
    if not commit or snapshot is None or not snapshot.is_dir():
        return None
    try:
        wanted, opened = select_files(ref, _snapshot_names(snapshot))
    except AprError:
        return None
    files, queue = [], list(wanted)
    while queue:
        name = queue.pop(0)
        local = snapshot / name
        if not local.is_file():
            return None
        sha = (expected or {}).get(name) or _cached_sha256(local)
        _verify(local, {"sha256": sha}, ref)
        files.append({"path": name, "size": local.stat().st_size, "sha256": sha,
                      "local": str(local)})
        if name == opened:
            queue.extend(p for p, _ in _manifest_parts(local, name) if p not in wanted)
    return _record(ref, commit, opened, files)


def _record(ref: ModelRef, commit: str, opened: str,
            files: List[Dict[str, Any]]) -> Dict[str, Any]:
    snapshot = _repo_dir(ref.repo) / "snapshots" / commit
    return {"reference": ref.text, "kind": "hf", "repo": ref.repo, "revision": commit,
            "path": str(snapshot / opened) if opened else str(snapshot), "open": opened,
            "files": files}
