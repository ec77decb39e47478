"""RoPE scaling against transformers' own implementation (`ROPE_INIT_FUNCTIONS`): the
frequency of every rotated pair and YaRN's attention factor, for linear, LLaMA-3 and YaRN
scaling (YaRN with its defaults, with beta overrides, with an explicit attention factor and
with DeepSeek's mscale pair), read by apr from the same config.json fields; and the GGUF
keys llama.cpp writes for YaRN (read back from a GGUF written by gguf-py)."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from apr_core.model.config import config_from_gguf, config_from_hf  # noqa: E402
from apr_core.model.layers import Rope  # noqa: E402

pytestmark = [pytest.mark.oracle, pytest.mark.native]

SHAPES = dict(vocab_size=256, hidden_size=512, intermediate_size=128, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2)      # head_dim 128

CASES = {
    "linear": {"rope_type": "linear", "factor": 4.0},
    "llama3": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
               "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
    "yarn": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768},
    "yarn_betas": {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 4096,
                   "beta_fast": 16.0, "beta_slow": 2.0},
    "yarn_attention": {"rope_type": "yarn", "factor": 2.0,
                       "original_max_position_embeddings": 2048, "attention_factor": 0.8},
    "yarn_mscale": {"rope_type": "yarn", "factor": 40.0, "original_max_position_embeddings": 4096,
                    "mscale": 1.0, "mscale_all_dim": 0.707},
}


@pytest.mark.parametrize("theta", [10000.0, 1000000.0])
@pytest.mark.parametrize("case", sorted(CASES))
def test_frequencies_and_attention_factor_equal_transformers(case, theta):
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
    params = dict(CASES[case], rope_theta=theta)
    hf = transformers.Qwen2Config(rope_parameters=params, max_position_embeddings=131072,
                                  **SHAPES)
    want, factor = ROPE_INIT_FUNCTIONS[params["rope_type"]](hf, "cpu")
    config = config_from_hf(hf.to_dict(), ["model.embed_tokens.weight"])
    assert config.rope_scaling.kind == params["rope_type"]
    rope = Rope(config.rope_dim, config.rope_theta, "neox", config.rope_scaling)
    np.testing.assert_allclose(rope.inv_freq, want.double().numpy(), rtol=2e-6)
    assert rope.magnitude == pytest.approx(factor, rel=1e-12)
    cos, _ = rope.tables(np.array([0]))
    assert float(cos[0, 0]) == pytest.approx(factor, rel=1e-6)   # scales q.k by factor^2


def test_yarn_gguf_keys_as_llama_cpp_writes_them(tmp_path):
    gguf = pytest.importorskip("gguf")
    path = str(tmp_path / "yarn.gguf")
    writer = gguf.GGUFWriter(path, "qwen2")
    writer.add_context_length(131072)
    writer.add_embedding_length(512)
    writer.add_block_count(2)
    writer.add_feed_forward_length(128)
    writer.add_head_count(4)
    writer.add_head_count_kv(2)
    writer.add_rope_freq_base(1000000.0)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_vocab_size(256)
    writer.add_rope_scaling_type(gguf.RopeScalingType.YARN)
    writer.add_rope_scaling_factor(4.0)
    writer.add_rope_scaling_orig_ctx_len(32768)
    writer.add_tensor("token_embd.weight", np.zeros((256, 512), np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    reader = gguf.GGUFReader(path)
    kv = {f.name: f.contents() for f in reader.fields.values()}
    config = config_from_gguf(kv, ["token_embd.weight"])
    s = config.rope_scaling
    assert (s.kind, s.factor, s.original_max_ctx) == ("yarn", 4.0, 32768)
    assert s.attention_factor == pytest.approx(0.1 * np.log(4.0) + 1.0)
