"""Model references: the one parser of `hf://` and URL model names, shared by the native CLI
and the browser shell (pure standard library, Python 3.8).

    hf://ORG/REPO                    the repository: an HF model directory, or its single GGUF
    hf://ORG/REPO@REVISION           the same at a branch, tag or commit
    hf://ORG/REPO:QUANT[@REVISION]   the GGUF whose file name carries the quant tag (Q4_K_M ...)
    hf://ORG/REPO/PATH/IN/REPO[@REV] one file (or a sharded manifest with its shards)
    https://host/path, http://...    one file

`parse_reference(text)` returns a `ModelRef`, or None when `text` is not a reference (a
local path or a built-in name); a malformed reference is an `AprError` (E011).
Downloading lives elsewhere (native: `apr_native.hub`; browser: the web shell).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable, List, Optional, Tuple
from urllib.parse import quote

from .errors import AprError, ErrorCode

DEFAULT_ENDPOINT = "https://huggingface.co"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}$")
_REVISION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,127}$")
_QUANT = re.compile(r"^[A-Za-z0-9_]{1,32}$")
_URL = re.compile(r"^https?://[^/\s]+(/\S*)?$", re.IGNORECASE)
SCHEMES = ("hf://", "http://", "https://")
# the files of a Hugging Face model directory (config, weights, tokenizer, chat template)
DIR_SUFFIXES = (".json", ".safetensors", ".txt", ".model", ".tiktoken", ".jinja")


@dataclass(frozen=True)
class ModelRef:
    """A parsed reference. `kind` is "hf" (repo, path, revision, quant) or "url" (url)."""

    kind: str
    text: str
    repo: str = ""
    path: str = ""
    revision: str = ""
    quant: str = ""
    url: str = ""

    @property
    def is_repo(self) -> bool:
        """A whole repository (directory or `:QUANT` pick), not one named file."""
        return self.kind == "hf" and not self.path

    def with_revision(self, revision: str) -> "ModelRef":
        """The same reference pinned to `revision` (a commit from apr.lock)."""
        return ModelRef(self.kind, self.text, self.repo, self.path, revision, self.quant,
                        self.url)

    def resolve_url(self, path: str, endpoint: str = DEFAULT_ENDPOINT,
                    revision: str = "") -> str:
        """The Hub's download URL of `path` in this repository."""
        return "{}/{}/resolve/{}/{}".format(endpoint.rstrip("/"), self.repo,
                                            quote(revision or self.revision or "main", safe=""),
                                            quote(path))


def is_reference(text: str) -> bool:
    return isinstance(text, str) and text.lower().startswith(SCHEMES)


def parse_reference(text: str) -> Optional[ModelRef]:
    """`ModelRef` for `text`, None when it is no reference, E011 when it is a bad one."""
    if not is_reference(text):
        return None
    if not text.lower().startswith("hf://"):
        if not _URL.match(text):
            raise AprError(ErrorCode.ARGUMENT, "not a valid URL", reference=text)
        return ModelRef("url", text, url=text)
    body = text[5:]
    revision = ""
    if "@" in body:
        body, revision = body.rsplit("@", 1)
        if not _REVISION.match(revision) or ".." in revision:
            raise AprError(ErrorCode.ARGUMENT, "bad revision in reference",
                           reference=text, revision=revision)
    parts = body.split("/")
    if len(parts) < 2:
        raise AprError(ErrorCode.ARGUMENT, "a Hugging Face reference is hf://ORG/REPO"
                       "[/PATH][@REVISION] or hf://ORG/REPO:QUANT", reference=text)
    org, repo, rest = parts[0], parts[1], parts[2:]
    quant = ""
    if ":" in repo and not rest:
        repo, quant = repo.split(":", 1)
        if not _QUANT.match(quant):
            raise AprError(ErrorCode.ARGUMENT, "bad quant tag in reference",
                           reference=text, quant=quant)
    for name in (org, repo):
        if not _NAME.match(name) or ".." in name:
            raise AprError(ErrorCode.ARGUMENT, "bad repository name in reference",
                           reference=text, name=name)
    if any(p in ("", ".", "..") for p in rest) or any("\\" in p or ":" in p for p in rest):
        raise AprError(ErrorCode.ARGUMENT, "bad file path in reference", reference=text)
    return ModelRef("hf", text, repo="{}/{}".format(org, repo), path="/".join(rest),
                    revision=revision, quant=quant)


_SHARD = re.compile(r"-(\d{5})-of-(\d{5})\.gguf$", re.IGNORECASE)


def _has_tag(name: str, quant: str) -> bool:
    """`quant` is one of the file name's dash/dot-separated words, case-insensitively:
    Q4_K matches `m-Q4_K.gguf`, not `m-Q4_K_M.gguf`."""
    words = re.split(r"[-.]", name.rsplit("/", 1)[-1].lower())
    return quant.lower() in words


def pick_gguf(ref: ModelRef, files: Iterable[str]) -> List[str]:
    """The GGUF file(s) a repository reference names: for `:QUANT` the one whose name carries
    the tag, otherwise the repository's only GGUF. Split GGUFs (`-00001-of-00003`) are one
    choice: all their parts, in order. E011 lists what the repo has when the pick is
    missing or ambiguous."""
    ggufs = sorted(f for f in files if f.lower().endswith(".gguf"))
    if ref.quant:
        ggufs = [f for f in ggufs if _has_tag(f, ref.quant)]
    groups = {}
    for name in ggufs:
        key = _SHARD.sub(".gguf", name)
        groups.setdefault(key, []).append(name)
    if len(groups) == 1:
        return sorted(next(iter(groups.values())))
    available = sorted(f for f in files if f.lower().endswith(".gguf"))
    what = "no GGUF file" if not groups else "more than one GGUF file"
    tag = " with tag {}".format(ref.quant) if ref.quant else ""
    raise AprError(ErrorCode.ARGUMENT, "{}{} in {}; name one with :QUANT or a path".format(
        what, tag, ref.repo), reference=ref.text,
        available=", ".join(available[:40]) or "(none)")


def select_files(ref: ModelRef, names: List[str]) -> Tuple[List[str], str]:
    """The files an `hf://` reference needs out of the repository's file `names`, and the
    path the model is opened at: a file, or "" for the repository as an HF directory (a
    sub-directory's name for a path naming one). Shared by the native fetcher and the
    browser shell. E013 for a path the repository does not have; `pick_gguf`'s E011."""
    if ref.path:
        if ref.path in names:
            return [ref.path], ref.path
        prefix = ref.path.rstrip("/") + "/"
        inside = [n for n in names if n.startswith(prefix) and "/" not in n[len(prefix):]
                  and n.endswith(DIR_SUFFIXES)]
        if inside:
            return sorted(inside), ref.path.rstrip("/")
        raise AprError(ErrorCode.NETWORK, "no such file in the repository",
                       reference=ref.text, repo=ref.repo, path=ref.path)
    root = [n for n in names if "/" not in n]
    if not ref.quant and "config.json" in root and any(n.endswith(".safetensors") for n in root):
        return sorted(n for n in root if n.endswith(DIR_SUFFIXES)), ""
    picked = pick_gguf(ref, names)
    return picked, picked[0]
