"""Helpers for the inspection/validation CLI tests: run `apr` in-process (the real entry
point, `apr_native.cli.main.main`) or as a subprocess, and session-scoped converted copies
of the demo model (one conversion per test session, shared by every test module)."""
import contextlib
import io
import json
import os
import subprocess
import sys

import pytest

from apr_core.conversion.convert import convert


def apr(*args, env=None):
    """(exit code, stdout, stderr) of `apr ARGS` run in this process, as a pipe would see it."""
    from apr_native.cli.main import main
    out, err = io.StringIO(), io.StringIO()
    saved = dict(os.environ)
    # APR_CONFIG: the developer's own config.toml (output_format = "json" ...) stays out
    os.environ.update({"APR_QUIET": "1", "APR_CONFIG": os.devnull, **(env or {})})
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main([str(a) for a in args])
            except SystemExit as exc:    # argparse errors exit 2
                code = exc.code
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return code, out.getvalue(), err.getvalue()


APR = os.path.join(os.path.dirname(sys.executable), "apr")


def apr_installed(*args, env=None):
    """(exit code, stdout, stderr) of the installed `apr` command beside this Python, as a
    user's shell runs it: its own process, no TTY, no stdin, 100 columns."""
    if not os.path.isfile(APR):
        pytest.fail("the installed `apr` command is missing beside {}".format(sys.executable))
    full_env = dict(os.environ, APR_QUIET="1", APR_CONFIG=os.devnull, COLUMNS="100",
                    **(env or {}))
    done = subprocess.run([APR, *map(str, args)], capture_output=True, text=True,
                          env=full_env, stdin=subprocess.DEVNULL, timeout=300)
    return done.returncode, done.stdout, done.stderr


def apr_json(*args):
    code, out, err = apr(*args, "--json")
    assert out, err
    return code, json.loads(out)


def apr_subprocess(*args, env=None):
    """`python -m apr_native.cli.main ARGS` with no TTY and no stdin, as CI runs it."""
    full_env = dict(os.environ, APR_QUIET="1", APR_CONFIG=os.devnull, **(env or {}))
    done = subprocess.run([sys.executable, "-m", "apr_native.cli.main", *map(str, args)],
                          capture_output=True, text=True, env=full_env,
                          stdin=subprocess.DEVNULL)
    return done.returncode, done.stdout, done.stderr


# Converted files, made once per session: a fixture imported into several test modules
# is instantiated per module, so the files are memoised here.
_DEMO = {}


@pytest.fixture(scope="session")
def demo_files(smollm2_gguf, tmp_path_factory):
    """The demo GGUF and its conversions by apr_core.conversion.convert: APR, APR+LZ4,
    SafeTensors (block types packed as U8 + record) and SafeTensors dequantized to F32."""
    if smollm2_gguf not in _DEMO:
        _DEMO[smollm2_gguf] = _convert(smollm2_gguf, tmp_path_factory.mktemp("demo_formats"))
    return _DEMO[smollm2_gguf]


def _convert(smollm2_gguf, folder):
    files = {"gguf": smollm2_gguf}
    for key, name, kwargs in (("apr", "demo.apr", {}),
                              ("apr_lz4", "demo_lz4.apr", {"compression": "lz4"}),
                              ("st", "demo.safetensors", {}),
                              ("st_f32", "demo_f32.safetensors", {"dequantize": True})):
        path = str(folder / name)
        convert(smollm2_gguf, path, **kwargs)
        files[key] = path
    return files
