"""The numba "decoder_block" kind (apr_native/kernels/decoder_block.py): a whole layer in one
call must give bit-identical results to the same layer run kind by kind from
`Transformer.run_block` (same kernels, same order), with 1 and 2 pool threads; layers it
does not handle (LayerNorm, Gemma's extra norms, dense weights) fall back."""
import numpy as np
import pytest

pytest.importorskip("numba")

from apr_core.model import Transformer, fused                    # noqa: E402
from apr_core.quant import registry                              # noqa: E402
from apr_native import backends                                  # noqa: E402
from apr_native.kernels import cpu
from apr_native.kernels.layer import decoder_block
from apr_native.kernels.layer import fused_layers  # noqa: E402
from synthetic_models import write_gguf_model, write_hf_model    # noqa: E402

pytestmark = pytest.mark.native


@pytest.fixture
def numba_backend():
    return backends.select("numba")


def test_every_fused_kind_has_a_numba_version():
    assert set(fused_layers.KERNELS) | set(decoder_block.KERNELS) == set(fused.KINDS)


def steps(model):
    """Logits of a prefill, four single-token steps and one 3-token step."""
    cache = model.new_cache(32)
    out = [model.forward([1, 5, 9, 2, 7, 3] * 3, cache)]
    for token in (11, 4, 8, 2):
        out.append(model.forward([token], cache))
    out.append(model.forward([6, 1, 3], cache))
    return out


def count_fused_layers(monkeypatch):
    """Calls of the one-call layer (`decoder_block.decoder_step`), counted."""
    calls = []
    step = decoder_block.decoder_step

    def counted(*args):
        calls.append(1)
        return step(*args)
    monkeypatch.setattr(decoder_block, "decoder_step", counted)
    return calls


@pytest.mark.parametrize("arch,quant,kv", [("llama", "Q4_1", {}),
                                           ("qwen2", "Q8_0", {}),         # q/k/v biases
                                           ("llama", "Q5_0", {"n_kv_heads": 1})])
def test_one_call_layer_equals_the_kinds_bit_for_bit(arch, quant, kv, tmp_path, pool_threads,
                                                     numba_backend, monkeypatch):
    path = tmp_path / "m.gguf"
    write_gguf_model(path, arch=arch, quant=quant, **kv)
    model = Transformer.from_path(str(path), kernels=numba_backend)
    calls = count_fused_layers(monkeypatch)
    fast = steps(model)
    # the prefill (18 tokens > DOT_MAX_TOKENS: float products), 4 decode steps and the
    # 3-token step (integer dots, several tokens a block) run each of the 2 layers in one call
    assert len(calls) == 6 * model.config.n_layers
    monkeypatch.delitem(registry._KERNELS[("decoder_block", "*")], "numba")
    by_kinds = steps(model)
    for got, want in zip(fast, by_kinds):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("family,extra", [
    ("gemma3", dict(sliding_window=4, head_dim=32, hidden_activation="gelu_pytorch_tanh")),
    ("gpt2", {"hidden_act": "gelu_new"}),
    ("llama", {}),                                         # dense float weights
])
def test_layers_it_does_not_handle_fall_back(family, extra, tmp_path, numba_backend,
                                             monkeypatch):
    write_hf_model(tmp_path, family, **extra)
    model = Transformer.from_path(str(tmp_path), kernels=numba_backend)
    assert all(decoder_block.layer_plan(model, block) is None for block in model.blocks)
    calls = count_fused_layers(monkeypatch)
    fast = steps(model)
    assert calls == []
    monkeypatch.delitem(registry._KERNELS[("decoder_block", "*")], "numba")
    for got, want in zip(fast, steps(model)):
        np.testing.assert_array_equal(got, want)


def test_plan_follows_the_model_config(tmp_path):
    path = tmp_path / "m.gguf"
    write_gguf_model(path, arch="qwen2", quant="Q8_0")
    model = Transformer.from_path(str(path))
    cfg = model.config
    plan = decoder_block.layer_plan(model, model.blocks[0])
    assert plan.qkv.rows == cfg.q_dim + 2 * cfg.kv_dim
    assert plan.qkv_bias.shape == (cfg.q_dim + 2 * cfg.kv_dim,)   # qwen2: q/k/v biases
    assert plan.o_bias.size == 0 and plan.down_bias.size == 0
    assert plan.glu.rows == 2 * cfg.d_ff and plan.down.rows == cfg.d_model
    assert plan.norm_weights.shape == (2, cfg.d_model) and plan.window == 0
    assert 3 <= cpu.DOT_MAX_TOKENS < 18   # the steps above: integer dots, float products
