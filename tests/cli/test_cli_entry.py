"""The `apr` entry point as a first-time user meets it, through the installed command.

- `apr --help` lists every command and imports none of their modules (the lazy table is
  read from each `*_cmd` module's `COMMANDS` literal, which must equal what the module's
  `register` really adds);
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

from apr_native.cli import main as cli_main

APR = os.path.join(os.path.dirname(sys.executable), "apr")


def apr(*args):
    if not os.path.isfile(APR):
        pytest.fail("the installed `apr` command is missing beside {}".format(sys.executable))
    env = dict(os.environ, APR_QUIET="1", APR_CONFIG=os.devnull, COLUMNS="100")
    done = subprocess.run([APR, *map(str, args)], capture_output=True, text=True, env=env,
                          stdin=subprocess.DEVNULL, timeout=300)
    return done.returncode, done.stdout, done.stderr


def registered(module):
    """{command: help line} that `module.register` really adds (None: no listed help)."""
    parser = argparse.ArgumentParser(prog="apr")
    sub = parser.add_subparsers()
    importlib.import_module("apr_native.cli." + module).register(sub)
    helps = {action.dest: action.help for action in sub._choices_actions}
    return {name: helps.get(name) for name in sub.choices}


@pytest.mark.parametrize("module", cli_main.command_modules())
def test_commands_literal_equals_what_register_adds(module):
    assert cli_main.declared_commands(module) == registered(module)


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
    listed = [line.split()[0] for line in out.splitlines() if line.startswith("    ")
              and not line.startswith("      ")]
    want = [name for module in cli_main.command_modules()
            for name, help_line in registered(module).items() if help_line]
    assert listed == want + ["help"]
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
