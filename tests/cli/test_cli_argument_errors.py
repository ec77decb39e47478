"""Argument errors as a user meets them through the installed `apr`: each is exactly one
line on stderr, coded E011, naming the option, the value and what is allowed, pointing at
`apr help COMMAND`, exit 2, nothing on stdout (argparse alone prints its usage text and
no code). Network errors (E013) say how to point at a mirror or go offline.
"""
import argparse
import socket

import pytest

from apr_core.runtime.option_ranges import RANGES
from apr_native.cli.arg_parser import typed
from cli_util import apr_installed as apr

CASES = [
    (["run", "demo", "-n", "-5"], "run", "-n/--max-tokens -5 is out of range (1..1048576)"),
    (["run", "demo", "-n", "0"], "run", "-n/--max-tokens 0 is out of range (1..1048576)"),
    (["run", "demo", "--temperature", "abc"], "run",
     "--temperature 'abc' is not a number (>= 0)"),
    (["run", "demo", "--temperature", "-1"], "run", "--temperature -1 is out of range (>= 0)"),
    (["run", "demo", "--top-p", "1.5"], "run", "--top-p 1.5 is out of range (> 0 and <= 1)"),
    (["run", "demo", "--top-k", "2.5"], "run", "--top-k '2.5' is not an integer (>= 0)"),
    (["chat", "demo", "--min-p", "nan"], "chat", "--min-p nan is out of range (0..1)"),
    (["run", "demo", "--backend", "nope"], "run",
     "--backend 'nope' is not one of 'auto', 'numpy', 'simd', 'numba', 'cuda', 'webgpu'"),
    (["cache", "frob"], "cache", "action 'frob' is not one of 'info', 'clear'"),
    (["run"], "run", "missing argument: model"),
    (["canary", "create", "m.gguf"], "canary create", "missing argument: -o/--output"),
    (["run", "demo", "--temperature"], "run", "--temperature needs a value"),
    (["run", "demo", "hi", "--bogus"], "run", "unknown argument: --bogus"),
    (["serve", "demo", "--lora", "a.gguf", "--slot-save-path", "slots"], "serve",
     "--slot-save-path cannot be used with --lora: slot files name the model file alone, "
     "not its adapters"),
]


@pytest.mark.parametrize("argv, command, text", CASES, ids=[" ".join(c[0]) for c in CASES])
def test_one_coded_line_with_the_value(argv, command, text):
    code, out, err = apr(*argv)
    assert (code, out) == (2, "")
    assert err == "apr: error: E011 ARGUMENT: {}; see 'apr help {}'\n".format(text, command)


def test_unknown_command_is_one_line_pointing_at_the_command_list():
    code, out, err = apr("rnu", "demo")
    assert (code, out) == (2, "")
    assert err == ("apr: error: E011 ARGUMENT: unknown command 'rnu' (did you mean: run?); "
                   "see 'apr --help'\n")


def test_a_value_inside_its_range_is_taken():
    top_p = typed(float, RANGES["top_p"])
    assert top_p("1") == 1.0 and top_p("0.5") == 0.5
    assert typed(int, RANGES["max_tokens"])("1") == 1
    assert typed(float)("-3.5") == -3.5                 # no range: any number
    with pytest.raises(argparse.ArgumentTypeError):
        top_p("0")


def closed_port():
    """A local port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_network_error_says_how_to_use_a_mirror_or_go_offline(tmp_path):
    endpoint = "http://127.0.0.1:{}".format(closed_port())
    env = {"APR_CACHE": str(tmp_path / "apr"), "HF_HUB_CACHE": str(tmp_path / "hf"),
           "HF_ENDPOINT": endpoint}
    code, _, err = apr("pull", "hf://org/repo", env=env)
    assert code == 3 and err.count("\n") == 1 and err.startswith("apr: error: E013 "), err
    assert "set HF_ENDPOINT=URL to use a mirror of the Hub, or set APR_OFFLINE=1 to use " \
           "only what is cached" in err
    assert "endpoint='{}'".format(endpoint) in err          # the variable named is read
    code, _, err = apr("pull", endpoint + "/x.gguf", env=env)
    assert code == 3 and err.startswith("apr: error: E013 ") and "APR_OFFLINE=1" in err, err
    # ... and the variable named does what the message says: no network, E015
    code, _, err = apr("pull", "hf://org/repo", env=dict(env, APR_OFFLINE="1"))
    assert code == 3 and err.startswith("apr: error: E015 "), err
