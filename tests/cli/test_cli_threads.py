"""`-t/--threads N` on the commands that run a model (llama.cpp's flag): the installed `apr`
runs numba's kernels on a pool of N threads (the pool's own count, reported by `apr run
--json`), whatever $APR_THREADS says, and the tokens do not depend on N (each row's sum is
the same arithmetic whichever thread runs it). Out of range is one E011 line."""
import json

import pytest

from cli_util import apr_installed as apr

pytestmark = [pytest.mark.native, pytest.mark.real_model]

QUESTION = "What is the capital of France?"


def run(*flags):
    code, out, err = apr("run", "demo", QUESTION, "-n", "8", "--backend", "numba", "--json",
                         *flags, env={"APR_THREADS": "2"})
    assert code == 0, err
    return json.loads(out)


def test_threads_size_the_pool_and_keep_the_tokens(numba_ready):
    one, two = run("-t", "1"), run("--threads", "2")
    assert (one["threads"], two["threads"]) == (1, 2)
    assert one["token_ids"] == two["token_ids"] and "Paris" in one["text"]


@pytest.mark.parametrize("command", ["run", "chat", "serve"])
def test_zero_threads_is_one_argument_error(command):
    code, out, err = apr(command, "demo", "-t", "0")
    assert (code, out) == (2, "")
    assert err == ("apr: error: E011 ARGUMENT: -t/--threads 0 is out of range (1..1024); "
                   "see 'apr help {}'\n".format(command))
