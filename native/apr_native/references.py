"""THE resolution of model references: `hf://...`, `https://...` and names from apr.toml ->
a verified local path. `engine.resolve_model` calls `resolve` for every command's model
argument (after apr.toml names, `project.resolve_name`), so run, chat, serve, inspect, tensors, validate, convert, import, export, diff,
eval, bench and web all accept references the same way.

    record = fetch("hf://org/repo:Q4_K_M")      # downloads (or finds cached), verifies
    record["path"]                               # the file or directory to open
"""
from __future__ import annotations

import contextlib
import os
import sys
from typing import Any, Dict, Iterator, Optional

from apr_core.errors import AprError, ErrorCode
from apr_core.refs import is_reference, parse_reference

from . import hub_store


@contextlib.contextmanager
def progress_bar(enabled: Optional[bool] = None) -> Iterator[Any]:
    """A rich progress bar on stderr fed by (file, done, total) calls; a no-op callback
    when stderr is not a terminal or APR_QUIET=1."""
    if enabled is None:
        enabled = os.environ.get("APR_QUIET") != "1" and sys.stderr.isatty()
    if not enabled:
        yield None
        return
    from rich.console import Console
    from rich.progress import (BarColumn, DownloadColumn, Progress, TextColumn,
                               TimeRemainingColumn, TransferSpeedColumn)
    tasks: Dict[str, Any] = {}
    with Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(),
                  TransferSpeedColumn(), TimeRemainingColumn(),
                  console=Console(stderr=True), transient=False) as bar:
        def update(name: str, done: int, total: int) -> None:
            if name not in tasks:
                tasks[name] = bar.add_task("Downloading " + name, total=total)
            bar.update(tasks[name], completed=done, total=total)
        yield update


def fetch(text: str, revision: str = "", expected: Optional[Dict[str, str]] = None,
          progress: Any = None) -> Dict[str, Any]:
    """Resolve and fetch a reference; returns its record (see `hub.fetch_hf`) and
    remembers it for `apr list` / `apr rm` / `apr cache`."""
    ref = parse_reference(text)
    if ref is None:
        raise AprError(ErrorCode.ARGUMENT, "not a model reference (hf://ORG/REPO..., "
                       "https://...)", reference=text)
    if ref.kind == "url":
        from .url_cache import fetch_url
        sha = next(iter((expected or {}).values()), None)
        record = fetch_url(ref, sha, progress)
    else:
        from .hub import fetch_hf
        record = fetch_hf(ref, revision, progress, expected)
    old = hub_store.records().get(record["reference"]) or {}
    if {k: v for k, v in old.items() if k != "pulled"} != record:
        hub_store.remember(record)
    return record


def resolve(name: str) -> Optional[str]:
    """The local path for a reference; None for anything else (a path, an apr.toml name
    or a built-in name, which `engine.resolve_model` handles)."""
    if not is_reference(name):
        return None
    with progress_bar() as progress:
        return fetch(name, progress=progress)["path"]
