"""`apr lock [--check]`, `apr tasks`, `apr task NAME`: the project files apr.toml and
apr.lock (seed 000 §4.15.4-5).

`apr lock` resolves every model apr.toml names (fetching and verifying it) and writes
apr.lock: source, commit, the file to open, every file's size and sha256. `apr lock
--check` resolves them again and exits 5 when anything differs from apr.lock. Commands
given a model name from apr.toml use its locked revision. `apr task NAME [ARGS]` runs a
task's command (`apr ...` in this process, anything else as a program in the project
directory) with ARGS appended.
"""
from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
from typing import List

from apr_core.errors import AprError, ErrorCode

from ..config import wants_json
from .commands import help_line
from .common import EXIT_OK, EXIT_VALIDATION, emit_json


def run_lock(args: argparse.Namespace) -> int:
    from ..project import changes, load, lock_entry, read_lock, write_lock
    from ..references import fetch, progress_bar
    project = load()
    fresh = []
    with progress_bar(False if wants_json(args) else None) as progress:
        for name, source in sorted(project["models"].items()):
            fresh.append(lock_entry(name, fetch(source, progress=progress)))
    if args.check:
        diff = changes(read_lock(project["path"]), fresh)
        ok = not diff
        if wants_json(args):
            emit_json({"lock": str(project["path"].parent / "apr.lock"), "ok": ok,
                       "changes": diff})
        else:
            for line in diff:
                print("changed: " + line)
            print("apr.lock is up to date" if ok else "apr.lock differs: run `apr lock`")
        return EXIT_OK if ok else EXIT_VALIDATION
    path = write_lock(project["path"], fresh)
    if wants_json(args):
        emit_json({"lock": str(path), "models": fresh})
    else:
        for entry in fresh:
            print("{:<16} {} @ {}".format(entry["name"], entry["source"], entry["revision"][:12]))
        print("wrote {}".format(path))
    return EXIT_OK


def run_tasks(args: argparse.Namespace) -> int:
    from ..project import load
    project = load()
    tasks = project["tasks"]
    if wants_json(args):
        emit_json({"project": str(project["path"]), "tasks": tasks,
                   "models": project["models"]})
        return EXIT_OK
    if not tasks:
        print("no tasks in {}".format(project["path"]))
    for name, task in sorted(tasks.items()):
        print("  {:<16} {}".format(name, task["description"] or _command(task["run"])))
    return EXIT_OK


def _argv(run: object) -> List[str]:
    return list(map(str, run)) if isinstance(run, list) else shlex.split(str(run))


def _command(run: object) -> str:
    return " ".join(shlex.quote(a) for a in _argv(run))


def run_task(args: argparse.Namespace) -> int:
    from ..project import load
    project = load()
    task = project["tasks"].get(args.name)
    if task is None:
        raise AprError(ErrorCode.ARGUMENT, "no such task in apr.toml",
                       task=args.name, known=", ".join(sorted(project["tasks"])) or "(none)")
    argv = _argv(task["run"]) + list(args.args)
    if not argv:
        raise AprError(ErrorCode.ARGUMENT, "the task's command is empty", task=args.name)
    folder = str(project["path"].parent)
    if argv[0] == "apr":
        from .main import main
        cwd = os.getcwd()
        os.chdir(folder)                     # the task's model names and paths are the project's
        try:
            return main(argv[1:])
        finally:
            os.chdir(cwd)
    try:
        return subprocess.run(argv, cwd=folder).returncode
    except OSError as exc:
        print("apr: cannot run task {}: {}".format(args.name, exc), file=sys.stderr)
        return 127


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("lock", help=help_line("lock"))
    p.add_argument("--check", action="store_true",
                   help="exit 5 when a fresh resolution differs from apr.lock")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run_lock)
    p = sub.add_parser("tasks", help=help_line("tasks"))
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run_tasks)
    p = sub.add_parser("task", help=help_line("task"))
    p.add_argument("name")
    p.add_argument("args", nargs=argparse.REMAINDER, help="appended to the task's command")
    p.set_defaults(func=run_task)
