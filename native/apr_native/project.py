"""Project files (seed 000 §4.15.4-5): `apr.toml` names models and tasks, `apr.lock` pins
every model to a commit, its files, sizes and sha256.

    # apr.toml (found in the working directory or a parent; APR_PROJECT names one)
    [models]
    chat = "hf://HuggingFaceTB/SmolLM2-135M-Instruct-GGUF:Q4_1"
    [tasks.hello]
    description = "Say hello"
    run = "apr run chat 'Hello' --max-tokens 8"

A command given `chat` resolves it through apr.lock when the lock has an entry for the same
source: the locked commit, each file checked against its locked sha256, and no network when
it is all cached. `apr lock` writes the lock, `apr lock --check` compares a fresh
resolution with it.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Dict, List, Optional

from apr_core.atomic import atomic_output
from apr_core.errors import AprError, ErrorCode
from apr_core.refs import parse_reference

try:
    import tomllib
except ImportError:     # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

FILE, LOCK = "apr.toml", "apr.lock"


def find_project() -> Optional[Path]:
    named = os.environ.get("APR_PROJECT")
    if named:
        path = Path(named)
        path = path / FILE if path.is_dir() else path
        if not path.is_file():
            raise AprError(ErrorCode.IO, "APR_PROJECT names no apr.toml", path=str(path))
        return path
    here = Path.cwd().resolve()
    for folder in [here, *here.parents]:
        if (folder / FILE).is_file():
            return folder / FILE
    return None


def _read_toml(path: Path) -> Dict[str, Any]:
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise AprError(ErrorCode.IO, "cannot read: {}".format(exc.strerror), path=str(path))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise AprError(ErrorCode.ARGUMENT, "not valid TOML: {}".format(exc), path=str(path))


def load(path: Optional[Path] = None) -> Dict[str, Any]:
    """{"path", "models": {name: source}, "tasks": {name: {description, run}}}."""
    path = path or find_project()
    if path is None:
        raise AprError(ErrorCode.IO, "no apr.toml in this directory or its parents")
    data = _read_toml(path)
    models: Dict[str, str] = {}
    single = data.get("model")
    if isinstance(single, dict) and isinstance(single.get("source"), str):
        models["model"] = single["source"]
    for name, value in (data.get("models") or {}).items():
        source = value.get("source") if isinstance(value, dict) else value
        if not isinstance(source, str):
            raise AprError(ErrorCode.ARGUMENT, "a model in apr.toml needs a source string",
                           model=name, path=str(path))
        parse_reference(source)              # a malformed reference fails here, with E011
        models[name] = source
    tasks: Dict[str, Dict[str, Any]] = {}
    for name, value in (data.get("tasks") or {}).items():
        task = {"run": value} if isinstance(value, (str, list)) else dict(value or {})
        if not isinstance(task.get("run"), (str, list)):
            raise AprError(ErrorCode.ARGUMENT, "a task in apr.toml needs `run` (a command)",
                           task=name, path=str(path))
        tasks[name] = {"description": str(task.get("description", "")), "run": task["run"]}
    return {"path": path, "models": models, "tasks": tasks}


# --- apr.lock ------------------------------------------------------------------------
def lock_path(project: Path) -> Path:
    return project.parent / LOCK


def read_lock(project: Path) -> Dict[str, Dict[str, Any]]:
    path = lock_path(project)
    if not path.is_file():
        return {}
    return {m["name"]: m for m in _read_toml(path).get("models") or [] if "name" in m}


def lock_entry(name: str, record: Dict[str, Any]) -> Dict[str, Any]:
    """What apr.lock keeps of a fetched reference (no machine-specific paths)."""
    return {"name": name, "source": record["reference"], "revision": record["revision"],
            "files": [{"path": f["path"], "size": int(f["size"]), "sha256": f["sha256"] or ""}
                      for f in record["files"]],
            "open": record.get("open", "")}


def _toml_str(value: str) -> str:
    return json.dumps(value, ensure_ascii=False)     # a JSON string is a TOML basic string


def write_lock(project: Path, entries: List[Dict[str, Any]]) -> Path:
    lines = ["# apr.lock - written by `apr lock`; do not edit", ""]
    for entry in entries:
        lines += ["[[models]]"] + ["{} = {}".format(k, _toml_str(entry[k]))
                                   for k in ("name", "source", "revision", "open")]
        for item in entry["files"]:
            lines += ["", "[[models.files]]", "path = " + _toml_str(item["path"]),
                      "size = {}".format(int(item["size"])), "sha256 = " + _toml_str(item["sha256"])]
        lines.append("")
    path = lock_path(project)
    with atomic_output(path) as out:
        out.write("\n".join(lines).encode("utf-8"))
    return path


def changes(locked: Dict[str, Dict[str, Any]], fresh: List[Dict[str, Any]]) -> List[str]:
    """What differs between apr.lock and a fresh resolution, one line each."""
    out = []
    for entry in fresh:
        old = locked.get(entry["name"])
        if old is None:
            out.append("{}: not in apr.lock".format(entry["name"]))
            continue
        for key in ("source", "revision", "open"):
            if old.get(key) != entry[key]:
                out.append("{}: {} {} -> {}".format(entry["name"], key, old.get(key),
                                                    entry[key]))
        if [(f["path"], f["size"], f["sha256"]) for f in old.get("files") or []] != \
                [(f["path"], f["size"], f["sha256"]) for f in entry["files"]]:
            out.append("{}: files changed".format(entry["name"]))
    for name in sorted(set(locked) - {e["name"] for e in fresh}):
        out.append("{}: in apr.lock but not in apr.toml".format(name))
    return out


def resolve_name(name: str) -> Optional[str]:
    """The local path of an apr.toml model name (at its locked revision when apr.lock has
    the same source), or None when there is no project or no such name."""
    try:
        project = find_project()
    except AprError:
        return None
    if project is None:
        return None
    models = load(project)["models"]
    if name not in models:
        return None
    from .references import fetch, progress_bar
    locked = read_lock(project).get(name)
    with progress_bar() as progress:
        if locked and locked.get("source") == models[name]:
            expected = {f["path"]: f["sha256"] for f in locked.get("files") or []
                        if f.get("sha256")}
            return fetch(models[name], revision=locked.get("revision", ""),
                         expected=expected, progress=progress)["path"]
        return fetch(models[name], progress=progress)["path"]
