"""The transformer runtime without torch (runs on Python 3.8 + numpy 1.17 too): RoPE
conventions, GQA attention, KV-cache invariant, quantized-in-memory weights, contract
errors, configs from every source, and generation."""
import numpy as np
import pytest

from apr_core import dtypes
from apr_core.errors import AprError, ErrorCode
from apr_core.conversion.convert import convert
from apr_core.formats.open import open_model
from apr_core.runtime.generate import generate, generate_step
from apr_core.model import Transformer
from apr_core.model.config import RopeScaling
from apr_core.model.layers import Rope, attention
from apr_core.model.weights import Linear
from apr_core.quant import dequantize, quantize, registry
from apr_core.runtime.sampling import Sampler, SamplerConfig
from synthetic_models import write_gguf_model, write_hf_model

PROMPT = [3, 17, 60, 45, 9, 12, 37, 5, 50, 61]


def llama_cpp_permutation(head_dim):
    """Feature order llama.cpp's converter gives one head: (0, h, 1, h+1, ...)."""
    half = head_dim // 2
    return np.stack([np.arange(half), np.arange(half) + half], axis=1).reshape(-1)


def test_interleaved_rope_on_permuted_heads_equals_neox():
    rng = np.random.RandomState(0)
    x = rng.standard_normal((5, 3, 16)).astype(np.float32)          # [T, H, hd]
    pos = np.arange(7, 12)
    neox = Rope(16, 10000.0, "neox", RopeScaling())
    inter = Rope(16, 10000.0, "interleaved", RopeScaling())
    perm = llama_cpp_permutation(16)
    want = neox.apply(x, *neox.tables(pos))[..., perm]
    got = inter.apply(x[..., perm], *inter.tables(pos))
    assert np.abs(got - want).max() < 1e-6
    # ... and the two conventions really differ on unpermuted input.
    assert np.abs(inter.apply(x, *inter.tables(pos)) - neox.apply(x, *neox.tables(pos))).max() > 0.1


def test_partial_rope_leaves_the_tail_alone():
    x = np.random.RandomState(1).standard_normal((4, 2, 16)).astype(np.float32)
    rope = Rope(8, 10000.0, "neox", RopeScaling())
    out = rope.apply(x, *rope.tables(np.arange(4)))
    assert np.array_equal(out[..., 8:], x[..., 8:])
    assert np.array_equal(out[0], x[0])                               # position 0: identity


def test_rope_scaling_linear_is_position_division():
    linear = Rope(8, 10000.0, "neox", RopeScaling("linear", 4.0))
    plain = Rope(8, 10000.0, "neox", RopeScaling())
    assert np.allclose(linear.tables(np.array([8]))[0], plain.tables(np.array([2]))[0])


def naive_attention(q, k, v, q_pos, scale, window=None):
    """Per-head loops with KV heads repeated: the textbook definition."""
    T, H, hd = q.shape
    n_kv, L, _ = k.shape
    out = np.zeros((T, H, hd))
    for h in range(H):
        kh, vh = k[h // (H // n_kv)], v[h // (H // n_kv)]
        for t in range(T):
            s = kh @ q[t, h] * scale
            allowed = [j <= q_pos[t] and (window is None or q_pos[t] - j < window)
                       for j in range(L)]
            s = np.where(allowed, s, -np.inf)
            p = np.exp(s - s.max())
            out[t, h] = (p / p.sum()) @ vh
    return out.reshape(T, H * hd)


@pytest.mark.parametrize("window", [None, 3])
def test_gqa_attention_matches_naive(window):
    rng = np.random.RandomState(2)
    q = rng.standard_normal((4, 6, 8)).astype(np.float32)
    k = rng.standard_normal((2, 9, 8)).astype(np.float32)
    v = rng.standard_normal((2, 9, 8)).astype(np.float32)
    pos = np.arange(5, 9)
    got = attention(q, k, v, pos, 0.35, window)
    assert np.abs(got - naive_attention(q, k, v, pos, 0.35, window)).max() < 1e-5


@pytest.mark.parametrize("quant", ["Q8_0", "Q4_1", "Q4_K"])
def test_linear_quantized_matmul_matches_dense(quant):
    rng = np.random.RandomState(3)
    w = rng.standard_normal((40, 256)).astype(np.float32)
    dtype = dtypes.BY_NAME[quant]
    data = quantize(w, dtype)
    x = rng.standard_normal((3, 256)).astype(np.float32)
    want = x @ dequantize(data, dtype, (40, 256)).T
    tiny = Linear("w", data, dtype, (40, 256), scratch_bytes=7 * 256 * 4)  # 7 rows at a time
    assert tiny.quantized_in_memory and tiny.nbytes == len(data)
    assert np.abs(tiny.matmul(x) - want).max() < 1e-4
    assert np.abs(tiny.rows([5, 0, 39]) - dequantize(data, dtype, (40, 256))[[5, 0, 39]]).max() == 0


def test_matmul_goes_through_the_kernel_registry(monkeypatch):
    calls = []

    def fake(data, dtype, shape, x, scratch):
        calls.append(shape)
        return np.zeros((x.shape[0], shape[0]), np.float32)
    monkeypatch.setitem(registry._KERNELS, ("matmul", "Q8_0"),
                        dict(registry._KERNELS[("matmul", "Q8_0")], test=fake))
    data = quantize(np.ones((2, 32), np.float32), dtypes.BY_NAME["Q8_0"])
    w = Linear("w", data, dtypes.BY_NAME["Q8_0"], (2, 32), kernels=registry.Kernels("test"))
    assert w.matmul(np.ones((1, 32), np.float32)).tolist() == [[0.0, 0.0]] and calls == [(2, 32)]
    plain = Linear("w", data, dtypes.BY_NAME["Q8_0"], (2, 32))      # numpy's, untouched
    assert plain.matmul(np.ones((1, 32), np.float32)).tolist() != [[0.0, 0.0]]


@pytest.fixture(scope="module")
def gguf_q8(tmp_path_factory):
    path = tmp_path_factory.mktemp("q8") / "tiny.gguf"
    write_gguf_model(path, quant="Q8_0")
    return str(path)


def test_quantized_gguf_model_runs_in_its_own_bytes(gguf_q8):
    lazy = Transformer.from_path(gguf_q8)
    report = lazy.memory_report()
    assert report["dense_bytes"] == 0 and report["quantized_bytes"] > 0
    dense = Transformer.from_path(gguf_q8, dequantize_at_load=True)
    assert dense.memory_report()["quantized_bytes"] == 0
    assert lazy.config.rope_style == "interleaved" and lazy.config.source == "gguf"
    assert np.abs(lazy.forward(PROMPT) - dense.forward(PROMPT)).max() <= 1e-5


@pytest.mark.parametrize("kind", ["gguf", "hf_llama", "hf_qwen2", "hf_gpt2", "hf_gemma3"])
def test_kv_cache_decode_equals_full_recompute(kind, gguf_q8, tmp_path):
    if kind == "gguf":
        model = Transformer.from_path(gguf_q8)
    else:
        extra = {"sliding_window": 4} if kind == "hf_gemma3" else {}
        if kind == "hf_gemma3":
            extra.update(head_dim=32, num_hidden_layers=6, hidden_activation="gelu_pytorch_tanh")
        if kind == "hf_gpt2":
            extra = {"hidden_act": "gelu_new"}
        write_hf_model(tmp_path, kind[3:], **extra)
        model = Transformer.from_path(str(tmp_path))
    full = model.forward(PROMPT)
    cache = model.new_cache(len(PROMPT))
    parts = [model.forward(PROMPT[:4], cache)] + [model.forward([t], cache) for t in PROMPT[4:]]
    # Seed 004 §12: equal within 1e-5, here relative to the logit scale: a decode step's
    # matvec (BLAS gemv) sums in another order than the prefill's gemm.
    assert np.abs(np.concatenate(parts) - full).max() <= 1e-5 * max(1.0, np.abs(full).max())
    with pytest.raises(AprError) as err:
        model.forward([1], cache)
    assert err.value.code is ErrorCode.MEMORY


def test_apr_file_from_gguf_loads_with_the_gguf_table(gguf_q8, tmp_path):
    apr_path = str(tmp_path / "tiny.apr")
    convert(gguf_q8, apr_path)
    from_apr = Transformer.from_path(apr_path)
    assert from_apr.config == Transformer.from_path(gguf_q8).config
    assert np.abs(from_apr.forward(PROMPT) - Transformer.from_path(gguf_q8).forward(PROMPT)).max() == 0


def test_tied_gguf_uses_the_embedding_as_head(tmp_path):
    path = tmp_path / "tied.gguf"
    write_gguf_model(path, quant="Q4_1", tied=True)
    model = Transformer.from_path(str(path))
    assert model.config.tied_embeddings and model.lm_head is model.embedding


# --------------------------------------------------------------------------- contract errors

def test_missing_tensor_is_not_found(tmp_path):
    write_hf_model(tmp_path, "llama")
    with open_model(str(tmp_path)) as model_file:
        del model_file.tensors["model.layers.1.mlp.up_proj.weight"]
        with pytest.raises(AprError) as err:
            Transformer.from_model_file(model_file, hf_config=_config(tmp_path))
    assert err.value.code is ErrorCode.NOT_FOUND
    assert err.value.context["tensor"] == "model.layers.1.mlp.up_proj.weight"


def test_wrong_shape_is_validation_error(tmp_path):
    write_hf_model(tmp_path, "qwen2")
    cfg = _config(tmp_path)
    cfg["intermediate_size"] = 96
    with pytest.raises(AprError) as err:
        Transformer.from_model_file(open_model(str(tmp_path)), hf_config=cfg)
    assert err.value.code is ErrorCode.VALIDATION
    context = err.value.context
    assert context["role"] in ("gate", "up", "down") and context["family"] == "qwen2"
    assert 96 in context["expected"] and 128 in context["got"] and 96 not in context["got"]


@pytest.mark.parametrize("change,code", [
    ({"model_type": "bert"}, ErrorCode.UNSUPPORTED),
    ({"num_key_value_heads": 3}, ErrorCode.VALIDATION),
    ({"rms_norm_eps": 0.0}, ErrorCode.VALIDATION),
    ({"hidden_act": "relu"}, ErrorCode.VALIDATION),
    ({"rope_scaling": {"rope_type": "longrope", "factor": 4.0}}, ErrorCode.UNSUPPORTED),
])
def test_bad_configs_are_refused(tmp_path, change, code):
    write_hf_model(tmp_path, "llama")
    cfg = dict(_config(tmp_path), **change)
    with pytest.raises(AprError) as err:
        Transformer.from_model_file(open_model(str(tmp_path)), hf_config=cfg)
    assert err.value.code is code


def test_safetensors_without_config_is_refused(tmp_path):
    write_hf_model(tmp_path, "llama")
    with pytest.raises(AprError) as err:
        Transformer.from_model_file(open_model(str(tmp_path / "model.safetensors")))
    assert err.value.code is ErrorCode.NOT_FOUND


def test_token_ids_are_checked(gguf_q8):
    model = Transformer.from_path(gguf_q8)
    for bad in ([64], [-1], []):
        with pytest.raises(AprError):
            model.forward(bad)


def _config(directory):
    import json
    with open(str(directory / "config.json")) as handle:
        return json.load(handle)


# --------------------------------------------------------------------------- generation

def test_greedy_generation_follows_full_recompute_argmax(gguf_q8):
    model = Transformer.from_path(gguf_q8)
    tokens = generate(model, PROMPT[:3], max_tokens=6)
    sequence = list(PROMPT[:3])
    for _ in range(6):
        sequence.append(int(np.argmax(model.forward(sequence)[-1])))
    assert tokens == sequence[3:]


def test_generation_stops_at_stop_ids_and_max_tokens(gguf_q8):
    model = Transformer.from_path(gguf_q8)
    free = generate(model, PROMPT[:3], max_tokens=5)
    assert len(free) == 5
    stopped = generate(model, PROMPT[:3], max_tokens=5, stop_ids={free[2]})
    assert stopped == free[:free.index(free[2])]
    assert generate(model, PROMPT[:3], max_tokens=0) == []
    steps = generate_step(model, PROMPT[:3], max_tokens=5)
    assert next(steps) == free[0]


def test_seeded_sampling_is_reproducible(gguf_q8):
    model = Transformer.from_path(gguf_q8)

    def run(seed):
        sampler = Sampler(SamplerConfig(temperature=1.5, top_p=0.95, seed=seed))
        return generate(model, PROMPT[:3], sampler, max_tokens=8)
    assert run(7) == run(7)
    assert any(run(7) != run(s) for s in (8, 9, 10))


def test_the_generator_reports_why_it_stopped(gguf_q8):
    """generate_step returns "eos" or "length" (StopIteration.value); TextModel.generate
    passes it on as "stop" / "length" instead of guessing from the token count."""
    model = Transformer.from_path(gguf_q8)

    def run(**kwargs):
        steps, tokens = generate_step(model, [1, 2, 3], **kwargs), []
        try:
            while True:
                tokens.append(next(steps))
        except StopIteration as done:
            return tokens, done.value
    greedy, why = run(max_tokens=12)
    assert len(greedy) == 12 and why == "length"
    assert run(max_tokens=0) == ([], "length")
    assert run(max_tokens=4, stop_ids=[greedy[0]]) == ([], "eos")
    # a token first sampled at step k > 0, as the stop id: EOS after k tokens, even with
    # max_tokens == k + 1, but "length" when the limit comes first
    k = next(i for i, t in enumerate(greedy) if i and t not in greedy[:i])
    assert run(max_tokens=k + 1, stop_ids=[greedy[k]]) == (greedy[:k], "eos")
    assert run(max_tokens=k, stop_ids=[greedy[k]]) == (greedy[:k], "length")
