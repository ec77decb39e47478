"""The `apr` entry point as a first-time user meets it, through the installed command.

- `apr --help` lists every command of THE table (`cli/commands.py`) once, under its group,
  the groups in the table's order, and imports none of their modules; each module's
  `register` adds exactly the table's commands for it (names, aliases, help lines);
- `apr help COMMAND` prints exactly `apr COMMAND --help`; a misspelled command suggests
  the nearest ones and exits 2;
- `apr --version` / `apr version --json` report every fact a bug report needs, each
  checked against an independent source (numpy's own CPU detection for the SIMD level,
  the installed distributions' metadata, the backend table).
"""
import argparse
import importlib
import json
import os
import platform
import subprocess
import sys

import pytest

from apr_native.cli import commands
from cli_util import apr_installed as apr


class Recorder:
    """Stands in for argparse's subparsers action: records what `register` adds."""

    def __init__(self):
        self.added = {}
        self._sub = argparse.ArgumentParser(prog="apr").add_subparsers()

    def add_parser(self, name, **kwargs):
        self.added[name] = (kwargs.get("help"), tuple(kwargs.get("aliases", ())))
        return self._sub.add_parser(name, **kwargs)


def registered(module):
    """{command: (help line, aliases)} that `module.register` really adds."""
    recorder = Recorder()
    importlib.import_module("apr_native.cli." + module).register(recorder)
    return recorder.added


def test_every_command_module_is_in_the_table():
    here = os.path.dirname(commands.__file__)
    on_disk = sorted(f[:-3] for f in os.listdir(here) if f.endswith("_cmd.py"))
    assert sorted(commands.modules()) == on_disk


@pytest.mark.parametrize("module", commands.modules())
def test_table_equals_what_register_adds(module):
    wanted = {c.name: (c.help, c.aliases) for c in commands.COMMANDS.values()
              if c.module == module}
    assert registered(module) == wanted


def test_every_command_is_in_exactly_one_group():
    names = [c.name for group in commands.GROUPS for c in group.commands]
    aliases = [a for c in commands.COMMANDS.values() for a in c.aliases]
    assert len(names + aliases) == len(set(names + aliases)) == len(commands.NAMES)
    assert [g.title for g in commands.GROUPS] == [
        "models", "inspect", "check", "convert", "run/serve", "trust", "ship", "help"]


def help_sections(text):
    """{group title: [command names]} in the order `apr --help` prints them."""
    sections, current = {}, None
    for line in text.splitlines():
        if line.endswith(":") and not line.startswith(" ") and line[:-1] in {
                g.title for g in commands.GROUPS}:
            current = sections.setdefault(line[:-1], [])
        elif current is not None and line.startswith("  ") and not line.startswith("   "):
            current.append(line.split()[0])
        elif not line.strip():
            current = None
    return sections


def test_help_lists_every_command_without_importing_any():
    code = ("import sys, contextlib, io\n"
            "from apr_native.cli.main import main\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    try:\n"
            "        main(['--help'])\n"
            "    except SystemExit:\n"
            "        pass\n"
            "print(sorted(m for m in sys.modules if m.endswith('_cmd') or m == 'numpy'))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    assert done.stdout.strip() == "[]"
    code, out, err = apr("--help")
    assert code == 0, err
    sections = help_sections(out)
    assert list(sections) == [g.title for g in commands.GROUPS]
    for group in commands.GROUPS:
        assert sections[group.title] == [c.name for c in group.commands], group.title
    listed = [name for names in sections.values() for name in names]
    assert sorted(listed) == sorted(commands.COMMANDS)          # each exactly once
    for command in commands.COMMANDS.values():
        label = command.name + "".join(" ({})".format(a) for a in command.aliases)
        assert "  " + label + " " in out, label
    assert apr("help") == (0, out, "")


@pytest.mark.parametrize("command, usage", [(["run"], "run"), (["inspect"], "inspect"),
                                            (["canary", "create"], "canary create"),
                                            (["ls"], "list")])          # an alias
def test_help_command_equals_command_help(command, usage):
    code, wanted, err = apr(*command, "--help")
    assert code == 0 and wanted.startswith("usage: apr " + usage + " "), err
    assert apr("help", *command) == (0, wanted, "")


def test_misspelled_command_suggests_the_nearest():
    code, out, err = apr("rnu", "demo", "hi")
    assert code == 2 and out == ""
    assert "unknown command 'rnu'" in err and "did you mean: run?" in err
    code, _, err = apr("inspekt", "x.gguf")
    assert code == 2 and "did you mean: inspect?" in err
    code, _, err = apr("zzzzzz")
    assert code == 2 and "did you mean" not in err


def test_version_reports_every_fact():
    import numpy
    from importlib.metadata import version
    from apr_native import __version__, backends
    code, out, err = apr("--version")
    assert code == 0, err
    code, data, err = apr("version", "--json")
    assert code == 0, err
    info = json.loads(data)
    assert json.loads(apr("--version", "--json")[1]) == info
    assert info["apr"] == __version__
    assert info["python"] == platform.python_version()
    assert info["numpy"] == numpy.__version__
    assert info["numba"] == version("numba")
    assert info["backend"] == backends.available()[0]
    try:
        from numpy._core._multiarray_umath import __cpu_features__ as features
    except ImportError:
        from numpy.core._multiarray_umath import __cpu_features__ as features
    cpu = info["cpu"]
    assert (cpu["avx2"], cpu["avx512"], cpu["vnni"]) == (
        features["AVX2"], features["AVX512F"], features["AVX512VNNI"])
    assert set(info["cuda"]) == set(info["wgpu"]) == {"usable", "detail"}
    for line in ("apr " + info["apr"], "python: CPython " + info["python"],
                 "numpy: " + info["numpy"], "numba: " + info["numba"],
                 "backend: " + info["backend"], "cpu: " + cpu["simd"],
                 "AVX2 = {:d}".format(cpu["avx2"]), "AVX-512 = {:d}".format(cpu["avx512"]),
                 "VNNI = {:d}".format(cpu["vnni"]), "cuda: ", "wgpu: "):
        assert line in out, line
