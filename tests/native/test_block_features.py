"""Every backend runs every layer feature the family contracts declare, or says which not.

A family's layer features are what its contract (contracts/*.yaml, read through
`apr_core.model.families`) declares of a decoder layer: its layer tensor roles ("q_norm",
"post_ffn_norm", "up_bias" ...) and its constraints ("activation", "norm_type", "mlp_type",
"positions" ...). Most backends run a layer through the model's own `Transformer.run_block`,
kind by kind (RUN_BLOCK: every feature, by construction). Two have a path of their own for a
whole layer or model, which a feature it lacks sends back to `run_block` (numba's one-call
layer, `decoder_block.layer_gaps`) or to the CPU backend (webgpu's device plan, `GpuUnfit`).
Such a fallback is slower, not wrong, so nothing else would notice one appearing: each must
be listed in FALLBACKS with its reason, and one that goes away must leave the table too.
"""
import logging
import os

import numpy as np
import pytest

pytest.importorskip("numba")

from apr_core.conversion.convert import convert                  # noqa: E402
from apr_core.gpu.plan import GpuUnfit, Limits                    # noqa: E402
from apr_core.gpu.plan_layers import build_plan                   # noqa: E402
from apr_core.gpu.step import Capacity                            # noqa: E402
from apr_core.model import Transformer, fused                     # noqa: E402
from apr_core.model.families import contracts                     # noqa: E402
from apr_core.quant import registry                               # noqa: E402
from apr_native import backends                                   # noqa: E402
from apr_native.kernels.layer import decoder_block  # noqa: E402
from synthetic_models import write_gguf_model, write_hf_model     # noqa: E402

pytestmark = pytest.mark.native

# HF config overrides that give each family's synthetic model every layer feature its
# contract declares (sliding windows, Llama's optional attention biases, Gemma's head_dim).
HF_EXTRA = {
    "gemma3": dict(sliding_window=4, head_dim=32, hidden_activation="gelu_pytorch_tanh"),
    "llama": {"attention_bias": True},
    "mistral": {"sliding_window": 4},
    "qwen2": {},
}
# GPT-2's Conv1D weights stay float through `convert --quantize`: its GGUF is quantized.
GGUF_ONLY = ("gpt2",)

_GEMMA_NUMBA = "not in decoder_step (Gemma 3's sandwich norms, Q/K norms and GeGLU)"
_GPT2_NUMBA = "not in decoder_step (GPT-2's LayerNorm with bias and ungated GELU MLP)"
# (backend, family) -> {layer feature that backend's own path lacks: why it is not there}
FALLBACKS = {
    ("numba", "gemma3"): {"q_norm": _GEMMA_NUMBA, "k_norm": _GEMMA_NUMBA,
                          "post_attn_norm": _GEMMA_NUMBA, "post_ffn_norm": _GEMMA_NUMBA,
                          "activation": _GEMMA_NUMBA},
    ("numba", "gpt2"): {"activation": _GPT2_NUMBA, "norm_type": _GPT2_NUMBA,
                        "attn_norm_bias": _GPT2_NUMBA, "ffn_norm_bias": _GPT2_NUMBA,
                        "mlp_type": _GPT2_NUMBA, "up_bias": _GPT2_NUMBA},
    # the device plan's own words (plan_layers._check_supported)
    ("webgpu", "gpt2"): {"positions": "learned position embeddings are not implemented on "
                                      "the GPU"},
}
# backends whose layers are the model's own run_block (their kernels: per-op kinds)
RUN_BLOCK = ("numpy", "simd", "cuda")
FAMILIES = sorted(contracts())


def layer_features(family):
    """What the family's contract declares of a layer: tensor roles and constraint keys."""
    contract = contracts()[family]
    return set(contract["tensors"]["layer"]) | set(contract.get("constraints", {}))


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """family -> path of a small model of that family with block-quantized (Q8_0) weights."""
    base = tmp_path_factory.mktemp("families")
    paths = {}
    for family in FAMILIES:
        if family in GGUF_ONLY:
            paths[family] = str(base / (family + ".gguf"))
            arch = contracts()[family]["architectures"]["gguf"][0]
            write_gguf_model(paths[family], arch=arch, quant="Q8_0")
        else:
            write_hf_model(base / family, family, **HF_EXTRA[family])
            paths[family] = str(base / (family + ".apr"))
            convert(str(base / family), paths[family], quantize="q8_0")
    return paths


def numba_gaps(path):
    model = Transformer.from_path(path, kernels=backends.select("numba"))
    gaps = set()
    for block in model.blocks:
        found = decoder_block.layer_gaps(model, block)
        assert (decoder_block.layer_plan(model, block) is None) == bool(found), found
        gaps.update(found)
    return gaps


def webgpu_gaps(path):
    """The features the device plan refuses, found by its reason in FALLBACKS (a reason
    listed nowhere comes back as itself, and fails the comparison)."""
    model = Transformer.from_path(path)
    try:
        build_plan(model, Capacity(4, 1, 4), Limits(1 << 30, 1 << 30))
    except GpuUnfit as err:
        listed = {why: feature for (backend, _), table in FALLBACKS.items()
                  if backend == "webgpu" for feature, why in table.items()}
        return {listed.get(str(err), str(err))}
    return set()


# backend -> what its own whole-layer (or whole-model) path lacks of a model
OWN_PATHS = {"numba": numba_gaps, "webgpu": webgpu_gaps}


def test_every_backend_is_classified():
    """A new backend must say whether its layers are run_block's or a path of its own."""
    assert sorted(RUN_BLOCK + tuple(OWN_PATHS)) == sorted(backends.NAMES)
    assert {backend for backend, _ in FALLBACKS} <= set(OWN_PATHS)
    assert {family for _, family in FALLBACKS} <= set(FAMILIES)


def test_run_block_backends_have_no_layer_kernel_of_their_own(monkeypatch):
    """Of the backends, only numba registers a "decoder_block" (the whole-layer kind):
    every other one runs a layer as the model's run_block, with every feature."""
    monkeypatch.setenv(backends.CUDA_EMULATE_ENV, "1")   # CUDA's kernels, on the CPU
    for name in RUN_BLOCK + ("numba",):
        backends.select(name)
    assert set(registry._KERNELS[("decoder_block", "*")]) == {registry.REFERENCE, "numba"}
    assert registry._KERNELS[("decoder_block", "*")][registry.REFERENCE] is \
        fused.decoder_block


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("backend", sorted(OWN_PATHS))
def test_fallbacks_are_the_listed_ones(backend, family, models):
    gaps = OWN_PATHS[backend](models[family])
    listed = FALLBACKS.get((backend, family), {})
    print(backend, family, "falls back for", sorted(gaps) or "nothing")
    # named as the contract names the family's layer features ("weights": a dtype gap)
    assert set(listed) <= layer_features(family)
    assert gaps == set(listed), ("unlisted fallback" if gaps - set(listed) else
                                 "listed fallback no longer taken", backend, family, gaps)


def _forward(model):
    cache = model.new_cache(32)
    return [model.forward([1, 5, 9, 2, 7, 3] * 3, cache), model.forward([4], cache)]


@pytest.mark.parametrize("family", [f for f in FAMILIES if ("numba", f) not in FALLBACKS])
def test_numba_runs_the_layers_it_plans_in_one_call_bit_for_bit(family, models, monkeypatch):
    """Where numba lists no fallback its one-call layer runs every layer (sliding windows,
    attention biases ...) with the results of the kinds one by one."""
    model = Transformer.from_path(models[family], kernels=backends.select("numba"))
    calls = []
    step = decoder_block.decoder_step
    monkeypatch.setattr(decoder_block, "decoder_step", lambda *a: calls.append(1) or step(*a))
    fast = _forward(model)
    assert len(calls) == 2 * model.config.n_layers
    monkeypatch.delitem(registry._KERNELS[("decoder_block", "*")], "numba")
    for got, want in zip(fast, _forward(model)):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("family", sorted({f for b, f in FALLBACKS if b == "numba"}))
def test_a_numba_fallback_is_logged_once_with_its_features(family, models, caplog):
    model = Transformer.from_path(models[family], kernels=backends.select("numba"))
    with caplog.at_level(logging.INFO, logger=decoder_block.LOG.name):
        _forward(model)
        _forward(model)
    told = [r.getMessage() for r in caplog.records if r.name == decoder_block.LOG.name]
    assert len(told) == 1, told
    assert told[0].endswith(", ".join(decoder_block.layer_gaps(model, model.blocks[0]))), told
    assert all(feature in told[0] for feature in FALLBACKS["numba", family]), told
