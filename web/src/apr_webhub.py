"""apr in the browser: `hf://` references -> the Hub's resolve URL of one verified file.

The same references as the native CLI, parsed and matched by the same code
(`apr_core.refs.parse_reference` and `select_files`): the repository is listed through the
Hub's model API (`/api/models/ORG/REPO/revision/REV?blobs=true`: the commit, every file's
size and, for LFS files, the sha256), the file is picked, and the page downloads it from
`ENDPOINT/ORG/REPO/resolve/COMMIT/PATH` (pinned to the commit the listing named). The
sha256 the Hub advertises is the file's key in the IndexedDB cache and what its bytes are
checked against before they are cached or used (apr_websource.HubFileSource).

    hub = await resolve("hf://org/repo:Q4_K_M")
    hub["url"], hub["sha256"], hub["size"], hub["commit"], hub["file"]

The endpoint is https://huggingface.co (`apr_core.refs.DEFAULT_ENDPOINT`) unless the page
configures another (`configure`, from the boot config's `hfEndpoint`: `apr web
--hf-endpoint URL` or the page's `?hfEndpoint=` query).
"""
from __future__ import annotations

import json
import re
from typing import Any, Dict, Optional
from urllib.parse import quote

import js  # type: ignore[import-not-found]  # Pyodide's bridge to the worker's globals

from apr_core.errors import AprError, ErrorCode
from apr_core.refs import DEFAULT_ENDPOINT, parse_reference, select_files

_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_settings: Dict[str, str] = {"endpoint": DEFAULT_ENDPOINT}


def configure(endpoint: Optional[str] = None) -> str:
    """Set the Hub endpoint (None keeps the default); returns the one in use."""
    if endpoint:
        _settings["endpoint"] = str(endpoint).rstrip("/")
    return _settings["endpoint"]


def is_hub_reference(text: str) -> bool:
    return isinstance(text, str) and text.lower().startswith("hf://")


async def _api(url: str, reference: str) -> Any:
    """GET a Hub API URL as JSON; HTTP errors as coded errors naming the reference."""
    answer = json.loads(await js.aprHost.fetchText(url))
    status = int(answer["status"])
    if status == 200:
        try:
            return json.loads(answer["text"])
        except ValueError:
            raise AprError(ErrorCode.NETWORK, "the Hub answered with something other than "
                           "JSON", reference=reference, url=url) from None
    kind = answer.get("errorCode") or ""
    if status in (401, 403):
        raise AprError(ErrorCode.AUTH, "gated or private repository: the browser shell "
                       "sends no token; use a public repository or serve the file yourself",
                       reference=reference, status=status, hub=kind)
    what = {"RepoNotFound": "repository not found", "RevisionNotFound": "no such revision",
            "EntryNotFound": "no such file in the repository"}.get(kind, "HTTP {}".format(status))
    raise AprError(ErrorCode.NETWORK, "the Hub refused the listing: " + what,
                   reference=reference, status=status, url=url)


async def resolve(text: str) -> Dict[str, Any]:
    """The file an `hf://` reference names: {reference, repo, commit, file, url, size,
    sha256 (None for a file not stored in LFS), endpoint}. E011 for a bad reference or an
    ambiguous/missing `:QUANT` (listing what the repository has), E013 for the Hub's 404s,
    E014 for gated repositories, E009 for what the shell cannot open (an HF directory, a
    split GGUF)."""
    ref = parse_reference(text)
    if ref is None or ref.kind != "hf":
        raise AprError(ErrorCode.ARGUMENT, "not an hf:// reference", reference=text)
    endpoint = _settings["endpoint"]
    listing = "{}/api/models/{}/revision/{}?blobs=true".format(
        endpoint, ref.repo, quote(ref.revision or "main", safe=""))
    info = await _api(listing, text)
    siblings = {s["rfilename"]: s for s in info.get("siblings") or []
                if isinstance(s, dict) and isinstance(s.get("rfilename"), str)}
    commit = str(info.get("sha") or ref.revision or "main")
    wanted, opened = select_files(ref, sorted(siblings))
    if not opened or opened not in siblings:
        raise AprError(ErrorCode.UNSUPPORTED, "the browser shell opens one model file (a GGUF, "
                       "a SafeTensors file or an APR file or manifest), not an HF model "
                       "directory: name the file with hf://ORG/REPO/PATH", reference=text)
    if len(wanted) > 1:
        raise AprError(ErrorCode.UNSUPPORTED, "a split GGUF ({} parts) cannot be opened in the "
                       "browser shell yet".format(len(wanted)), reference=text,
                       files=", ".join(wanted))
    entry = siblings[opened]
    lfs = entry.get("lfs") if isinstance(entry.get("lfs"), dict) else None
    size = entry.get("size", lfs.get("size") if lfs else None)
    if not isinstance(size, int) or size < 0:
        raise AprError(ErrorCode.NETWORK, "the Hub's listing gives no size for the file",
                       reference=text, file=opened)
    sha256 = str(lfs.get("sha256") or "").lower() if lfs else ""
    if lfs and not _SHA256.match(sha256):
        raise AprError(ErrorCode.NETWORK, "the Hub's listing gives no valid sha256 for an "
                       "LFS file", reference=text, file=opened)
    return {"reference": text, "repo": ref.repo, "commit": commit, "file": opened,
            "url": ref.resolve_url(opened, endpoint, revision=commit), "size": size,
            "sha256": sha256 or None, "endpoint": endpoint}


__all__ = ["configure", "resolve", "is_hub_reference"]
