"""`apr run`'s quick start on the real models, through the installed command: a short
prompt's first token comes from the simd kernels without numba ever being imported, a
longer run hands over to numba before its first decode step (the same tokens as numba
alone: both compute the prompt to float32 precision), and a long prompt waits for numba.
"""
import json
import os
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.native, pytest.mark.real_model]

# Runs `apr` as the installed command does and reports whether numba was imported.
PROBE = ("import sys\nfrom apr_native.cli.main import main\ncode = main(sys.argv[1:])\n"
         "print('NUMBA' if 'numba' in sys.modules else 'NO NUMBA', file=sys.stderr)\n"
         "sys.exit(code)\n")
# A prompt without near-ties in its first steps (test_numba_parity.py's choice).
PROMPT = "Explain what a CPU does."


@pytest.fixture(scope="module", autouse=True)
def built_library(numba_ready):
    """The simd library exists before the runs and numba's cache is ready (a machine's
    first start runs on the simd kernels alone: test_first_run.py)."""
    from apr_native.simd.build import library
    assert library() is not None


def apr_json(*args):
    env = {k: v for k, v in os.environ.items() if k != "APR_BACKEND"}
    env.update(APR_QUIET="1", APR_CONFIG=os.devnull)
    done = subprocess.run([sys.executable, "-c", PROBE, "run", *map(str, args), "--json"],
                          capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout), done.stderr.strip().splitlines()[-1]


@pytest.mark.parametrize("model", ["smollm2_gguf", "qwen_gguf"])
def test_one_token_never_imports_numba(model, request):
    path = request.getfixturevalue(model)
    result, numba = apr_json(path, "Hi", "-n", 1)
    assert (result["backend"], numba) == ("simd", "NO NUMBA")
    assert result["completion_tokens"] == 1


def test_decoding_hands_over_to_numba_with_numba_alone_tokens(smollm2_gguf):
    quick, numba = apr_json(smollm2_gguf, PROMPT, "-n", 12)
    assert (quick["backend"], numba) == ("numba", "NUMBA")
    alone, _ = apr_json(smollm2_gguf, PROMPT, "-n", 12, "--backend", "numba")
    assert alone["backend"] == "numba"
    assert quick["token_ids"] == alone["token_ids"]


def quick_limit(path):
    """The model's `quick_start.prompt_limit`."""
    from apr_core.model.transformer import Transformer
    from apr_native.simd.quick_start import prompt_limit
    return prompt_limit(Transformer.from_path(str(path)))


@pytest.mark.parametrize("model", ["smollm2_gguf", "qwen_gguf"])
def test_a_prompt_past_the_models_limit_waits_for_numba(model, request):
    """The limit is work (prompt tokens x layer weight bytes): SmolLM2's is past 100
    tokens, Qwen2.5-0.5B's (3.7x the weights) about 32; a raw prompt past it goes to
    numba, one of half its length stays on simd."""
    path = request.getfixturevalue(model)
    limit = quick_limit(path)
    assert (100 < limit < 130) if model == "smollm2_gguf" else (28 < limit < 36)
    for words, backend in ((limit + 8, "numba"), (limit // 2, "simd")):
        prompt = " ".join(["apple"] * words)
        result, numba = apr_json(path, prompt, "--raw", "-n", 1)
        over = result["prompt_tokens"] > limit
        assert over == (backend == "numba"), result["prompt_tokens"]
        assert (result["backend"], numba) == (backend, "NUMBA" if over else "NO NUMBA")
