"""Speculative decoding through the installed `apr` on the real models: greedy token ids
equal plain decoding's, with prompt-lookup drafts on Qwen2.5-Coder editing code (where
most drafts are kept and some are rejected) and with a draft model on SmolLM2 (its own
weights requantized to Q4_0 by `apr quantize`: same tokenizer, different logits); a draft
model with another tokenizer is refused with a coded error. The counters are reported in
`--json` and by `--verbose`."""
import json
import os
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.native, pytest.mark.real_model]

APR = os.path.join(os.path.dirname(sys.executable), "apr")
EDIT = os.path.join(os.path.dirname(__file__), "..", "..", "bench", "prompts", "code_edit.txt")


def apr(*args, **env_vars):
    env = dict(os.environ, APR_QUIET="1", APR_CONFIG=os.devnull, **env_vars)
    done = subprocess.run([APR, *map(str, args)], capture_output=True, text=True, env=env,
                          stdin=subprocess.DEVNULL, timeout=900)
    return done.returncode, done.stdout, done.stderr


def apr_json(*args, **env_vars):
    code, out, err = apr(*args, "--json", **env_vars)
    assert code == 0, err
    return json.loads(out)


def test_lookup_on_a_code_edit_keeps_greedy_ids(qwen_gguf):
    args = ("run", qwen_gguf, "-f", EDIT, "-n", "160", "--temperature", "0")
    plain = apr_json(*args)
    fast = apr_json(*args, "--speculate", "lookup", "--draft-max", "8")
    assert fast["token_ids"] == plain["token_ids"] and fast["text"] == plain["text"]
    assert "def average(values):" in plain["text"]           # it does copy its input
    s = fast["speculative"]
    # decode passes gave every token but the prefill's, and the end-of-turn token if any
    ended = plain["finish_reason"] == "stop"
    assert s["mode"] == "lookup" and s["decoded_tokens"] == len(plain["token_ids"]) - 1 + ended
    assert 0 < s["accepted_tokens"] < s["drafted_tokens"]     # kept and rejected drafts
    assert s["tokens_per_pass"] > 2.0                          # copying is what it speeds up
    assert "speculative" not in plain
    # the longest drafts the numba backend verifies: passes of up to 16 rows
    longest = apr_json(*args, "--speculate", "lookup", "--draft-max", "15")
    assert longest["token_ids"] == plain["token_ids"]
    assert longest["speculative"]["tokens_per_pass"] > s["tokens_per_pass"]


def test_lookup_keeps_greedy_ids_on_the_int8_dots(qwen_gguf):
    """With int8 activation codes (forced here: the K-quant default at the AVX2 level) a
    verification pass gives each row the bits a one-token step gives it
    (`kquant_token_rows`), so the ids still equal plain decoding's."""
    args = ("run", qwen_gguf, "-f", EDIT, "-n", "64", "--temperature", "0")
    plain = apr_json(*args, APR_DOTS="int8")
    fast = apr_json(*args, "--speculate", "lookup", "--draft-max", "8", APR_DOTS="int8")
    assert fast["token_ids"] == plain["token_ids"]
    assert fast["speculative"]["accepted_tokens"] > 0


@pytest.fixture(scope="module")
def smollm2_q4_0(smollm2_gguf, tmp_path_factory):
    path = tmp_path_factory.mktemp("draft") / "smollm2-q4_0.gguf"
    code, _, err = apr("quantize", smollm2_gguf, "q4_0", "-o", path)
    assert code == 0, err
    return str(path)


def test_draft_model_keeps_greedy_ids(smollm2_gguf, smollm2_q4_0):
    args = ("run", smollm2_gguf, "Write a short poem about the sea.", "-n", "48",
            "--temperature", "0")
    plain = apr_json(*args)
    fast = apr_json(*args, "--draft", smollm2_q4_0, "--draft-max", "3")
    assert fast["token_ids"] == plain["token_ids"]
    s = fast["speculative"]
    assert s["mode"] == "draft" and 0.3 < s["acceptance_rate"] < 1.0
    code, out, err = apr(*args, "--draft", smollm2_q4_0, "--verbose")
    assert code == 0 and "apr: speculative (draft):" in err and "tokens/pass" in err


def test_a_draft_with_another_tokenizer_is_refused(smollm2_gguf, qwen_gguf):
    code, out, err = apr("run", smollm2_gguf, "Hi", "-n", "4", "--draft", qwen_gguf)
    assert code != 0 and "E0" in err and "tokenizer differs" in err
    assert "Traceback" not in err
