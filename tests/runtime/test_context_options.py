"""`--ctx` and the RoPE overrides: a plain Qwen2 checkpoint run with `--rope-scaling yarn`
(and linear) gives the logits transformers gives for the same weights configured with that
scaling; `--rope-scaling none` undoes a file's scaling; `--ctx` changes the context the
scheduler enforces (through the installed apr: a prompt past it is E011 naming it)."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from apr_core.errors import AprError  # noqa: E402
from apr_core.model import Transformer  # noqa: E402
from apr_core.runtime.context_options import ContextOptions, apply_context  # noqa: E402

pytestmark = [pytest.mark.oracle, pytest.mark.native]

SMALL = dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
PROMPT = [3, 17, 200, 45, 9, 128, 77, 5, 250, 61, 33, 140, 7, 99, 12, 64, 31, 8, 2, 201,
          14, 150, 66, 90]


def hf_model(rope):
    config = transformers.Qwen2Config(rope_parameters=dict(rope, rope_theta=1000000.0), **SMALL)
    return transformers.AutoModelForCausalLM.from_config(
        config, attn_implementation="eager").float().eval()


@pytest.fixture(scope="module")
def plain_dir(tmp_path_factory):
    torch.manual_seed(0)
    model = hf_model({"rope_type": "default"})
    with torch.no_grad():
        for param in model.parameters():
            param.add_(torch.randn_like(param) * 0.05)
    directory = tmp_path_factory.mktemp("plain")
    model.save_pretrained(str(directory))
    return directory, model.state_dict()


def logits_of(rope, state):
    model = hf_model(rope)
    model.load_state_dict(state, strict=False)       # rotary buffers are not saved
    with torch.no_grad():
        return model(torch.tensor([PROMPT])).logits[0].float().numpy()


@pytest.mark.parametrize("options,rope", [
    (ContextOptions(rope_scaling="yarn", rope_scale=4.0, yarn_orig_ctx=8),
     {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 8}),
    (ContextOptions(rope_scaling="yarn", rope_freq_scale=0.5, yarn_orig_ctx=16,
                    yarn_beta_fast=8.0, yarn_beta_slow=2.0),
     {"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 16,
      "beta_fast": 8.0, "beta_slow": 2.0}),
    (ContextOptions(rope_scaling="linear", rope_scale=3.0),
     {"rope_type": "linear", "factor": 3.0}),
], ids=["yarn", "yarn-betas", "linear"])
def test_overrides_equal_transformers_with_that_scaling(plain_dir, options, rope):
    directory, state = plain_dir
    ours = Transformer.from_path(str(directory))
    before = ours.forward(PROMPT)
    changes = apply_context(ours, options)
    assert changes["rope_scaling"].kind == rope["rope_type"]
    got = ours.forward(PROMPT)
    want = logits_of(rope, state)
    assert float(np.abs(got - want).max()) <= 1e-4
    assert float(np.abs(got - before).max()) > 1e-2              # the scaling did change it
    apply_context(ours, ContextOptions(rope_scaling="none"))
    assert float(np.abs(ours.forward(PROMPT) - before).max()) <= 1e-6


def test_ctx_and_bad_values(plain_dir):
    ours = Transformer.from_path(str(plain_dir[0]))
    assert apply_context(ours, ContextOptions(ctx=32)) == {"max_ctx": 32}
    assert ours.config.max_ctx == 32 and ours.new_cache().capacity == 32
    for bad in (dict(ctx=0), dict(rope_scaling="dynamic"), dict(rope_scale=-1.0)):
        with pytest.raises(AprError):
            ContextOptions(**bad)


APR = os.path.join(os.path.dirname(sys.executable), "apr")


@pytest.mark.real_model
def test_apr_run_ctx(smollm2_gguf):
    env = dict(os.environ, APR_QUIET="1", APR_CONFIG=os.devnull)
    flags = ["--raw", "-n", "2", "--json"]
    done = subprocess.run([APR, "run", smollm2_gguf, "Hello"] + flags + [
        "--ctx", "96", "--rope-scaling", "yarn", "--rope-scale", "2"],
        capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["context"] == 96 and result["rope_scaling"] == "yarn"
    long_prompt = " ".join(["word"] * 120)
    done = subprocess.run([APR, "run", smollm2_gguf, long_prompt] + flags + ["--ctx", "96"],
                          capture_output=True, text=True, env=env)
    assert done.returncode != 0 and "E011" in done.stderr and "96" in done.stderr
