"""LoRA adapters made by `peft` on tiny random transformers models, applied by apr at run
time: logits equal transformers + peft's (the family-parity tolerance of
test_model_parity.py), greedy tokens equal; scale 0 gives the base; several adapters at
once; the same adapter over a quantized base equals base logits + the float delta, with
the base bytes untouched; bad adapters get their coded errors."""
import json
import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
peft = pytest.importorskip("peft")

from apr_core.errors import AprError, ErrorCode  # noqa: E402
from apr_core.formats.lora import read_adapter  # noqa: E402
from apr_core.model import Transformer  # noqa: E402
from apr_core.model.lora import apply_adapters  # noqa: E402
from test_model_parity import build_hf_model  # noqa: E402

pytestmark = [pytest.mark.oracle, pytest.mark.native]

PROMPT = [3, 17, 200, 45, 9, 128, 77, 5, 250, 61, 33, 140]
TOL = 1e-4          # test_model_parity.py's transformers tolerance
SMALL = dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
             num_attention_heads=4, num_key_value_heads=2)
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def make_adapter(base, directory, seed, **config):
    """A peft LoRA with random A and B (B is zero at init, which would hide everything)."""
    torch.manual_seed(seed)
    options = dict(r=4, lora_alpha=8, target_modules=TARGETS, lora_dropout=0.0)
    options.update(config)
    wrapped = peft.get_peft_model(base, peft.LoraConfig(**options))
    with torch.no_grad():
        for name, param in wrapped.named_parameters():
            if "lora_" in name:
                param.copy_(torch.randn_like(param) * 0.2)
    wrapped.save_pretrained(str(directory))
    return wrapped.eval()


def logits(model, ids):
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0].float().numpy()


_CASES = {}


def _case(name, tmp_path_factory):
    """The tiny base model of family `name`, its peft adapter and their logits (built
    once per module run)."""
    if name in _CASES:
        return _CASES[name]
    root = tmp_path_factory.mktemp("lora_" + name)
    config = (transformers.LlamaConfig(rope_theta=100000.0, tie_word_embeddings=True, **SMALL)
              if name == "llama" else transformers.Qwen2Config(**SMALL))
    base = build_hf_model(config, root / "base")
    expected_base = logits(base, PROMPT)
    # rank_pattern / alpha_pattern / rslora exercised by the second family
    extra = {} if name == "llama" else dict(
        use_rslora=True, rank_pattern={"down_proj": 2}, alpha_pattern={"q_proj": 3})
    wrapped = make_adapter(base, root / "adapter", 1, **extra)
    _CASES[name] = dict(root=root, expected=logits(wrapped, PROMPT),
                        expected_base=expected_base, wrapped=wrapped, name=name)
    return _CASES[name]


@pytest.fixture(scope="module", params=["llama", "qwen2"])
def case(request, tmp_path_factory):
    return _case(request.param, tmp_path_factory)


@pytest.fixture(scope="module")
def llama_case(tmp_path_factory):
    """LLaMA only: its GGUF has permuted Q/K rows, the harder layout for a quantized base."""
    return _case("llama", tmp_path_factory)


def test_peft_logits_and_greedy_tokens(case):
    base = Transformer.from_path(str(case["root"] / "base"))
    adapted = apply_adapters(base, [(read_adapter(str(case["root"] / "adapter")), 1.0)])
    got = adapted.forward(PROMPT)
    delta = float(np.abs(got - case["expected"]).max())
    print("{}: max |delta| vs peft = {:.3g}".format(case["name"], delta))
    assert delta <= TOL
    # the adapter changes the answer by far more than the tolerance (else nothing is tested)
    assert float(np.abs(case["expected"] - case["expected_base"]).max()) > 100 * TOL
    # the base model object is left as it was
    assert float(np.abs(base.forward(PROMPT) - case["expected_base"]).max()) <= TOL
    # greedy decoding through the KV cache: same tokens as transformers + peft
    with torch.no_grad():
        ref = case["wrapped"].generate(torch.tensor([PROMPT]), max_new_tokens=8,
                                       do_sample=False)[0, len(PROMPT):].tolist()
    cache = adapted.new_cache(len(PROMPT) + 8)
    ids, out = list(PROMPT), []
    for _ in range(8):
        step = adapted.forward(ids, cache)
        out.append(int(np.argmax(step[-1])))
        ids = [out[-1]]
    assert out == ref


def test_scale_zero_is_the_base_and_scales_add(case):
    base = Transformer.from_path(str(case["root"] / "base"))
    adapter = read_adapter(str(case["root"] / "adapter"))
    adapted = apply_adapters(base, [(adapter, 0.0)])
    assert float(np.abs(adapted.forward(PROMPT) - case["expected_base"]).max()) <= TOL
    # two copies at 0.5 each equal one at 1.0; switching scales needs no reload
    twice = apply_adapters(base, [(adapter, 0.5), (adapter, 0.5)])
    assert float(np.abs(twice.forward(PROMPT) - case["expected"]).max()) <= TOL
    twice.lora.set_scales([0.0, 0.0])
    assert float(np.abs(twice.forward(PROMPT) - case["expected_base"]).max()) <= TOL


def _float_reference(quantized, adapter_dir, arch_permutes):
    """The Q8_0 model with each adapted weight replaced, in float, by dequantized W plus
    alpha/r * B A computed here from the safetensors file (Q/K rows of B permuted with the
    tests' own copy of llama.cpp's permutation for LLaMA)."""
    import copy
    from safetensors.numpy import load_file
    from apr_core.model.weights import Linear
    from apr_core.quant import dequantize
    from llama_cpp_layout import GGUF_NAMES, permute_for_llama_cpp
    with open(os.path.join(adapter_dir, "adapter_config.json")) as handle:
        scaling = json.load(handle)
    tensors = load_file(os.path.join(adapter_dir, "adapter_model.safetensors"))
    ref = copy.copy(quantized)
    ref.blocks = [copy.copy(b) for b in quantized.blocks]
    roles = {"q_proj": "q", "k_proj": "k", "v_proj": "v", "o_proj": "o",
             "gate_proj": "gate", "up_proj": "up", "down_proj": "down"}
    cfg = quantized.config
    changed = 0
    for name, a in tensors.items():
        if ".lora_A." not in name:
            continue
        b = tensors[name.replace(".lora_A.", ".lora_B.")].astype(np.float64)
        layer = int(name.split(".layers.")[1].split(".")[0])
        module = name.split(".")[-3]
        role = roles[module]
        delta = b @ a.astype(np.float64) * (scaling["lora_alpha"] / scaling["r"])
        if arch_permutes and role in ("q", "k"):
            delta = permute_for_llama_cpp(delta, cfg.n_heads if role == "q" else cfg.n_kv_heads)
        block = ref.blocks[layer]
        block.linears = dict(block.linears)
        base = block.linears[role]
        dense = dequantize(base.data, base.dtype, base.shape).astype(np.float64) + delta
        block.linears[role] = Linear.from_dense(base.name, dense.astype(np.float32), base.bias)
        changed += 1
    assert changed == 7 * cfg.n_layers and GGUF_NAMES
    return ref


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_adapter_over_quantized_base_is_base_plus_float_delta(llama_case, tmp_path, backend):
    """Q8_0 GGUF base (apr convert's llama.cpp layout: Q/K permuted for LLaMA): the adapted
    model equals the same model with every adapted weight dequantized plus the float delta;
    the base's stored bytes are the file's, untouched, and still Q8_0."""
    case = llama_case
    from apr_core.conversion.convert import convert
    kernels = None
    if backend == "numba":
        backends = pytest.importorskip("apr_native.backends")
        kernels = backends.select("numba")
    path = str(tmp_path / "base_q8_0.gguf")
    convert(str(case["root"] / "base"), path, "gguf", quantize="q8_0")
    quantized = Transformer.from_path(path, kernels=kernels)
    before = {id(l): bytes(l.data) for b in quantized.blocks for l in b.linears.values()
              if l is not None}
    adapter_dir = str(case["root"] / "adapter")
    adapted = apply_adapters(quantized, [(read_adapter(adapter_dir), 1.0)])
    got = adapted.forward(PROMPT)
    expected = _float_reference(quantized, adapter_dir, True).forward(PROMPT)
    delta = float(np.abs(got - expected).max())
    # numba quantizes activations (~1e-4 here): its own base error, measured, is allowed
    # twice over; the adapter may add no more than numpy's tolerance to it
    bound = TOL if backend == "numpy" else TOL + 2 * float(np.abs(
        quantized.forward(PROMPT) - Transformer.from_path(path).forward(PROMPT)).max())
    print("{}: max |delta| vs base + float delta = {:.3g} (bound {:.3g})".format(
        backend, delta, bound))
    assert delta <= bound
    if backend == "numba":
        # numba's one-call layer reads weights itself: an adapted layer runs run_block
        from apr_native.kernels.layer.decoder_block import layer_gaps
        assert layer_gaps(quantized, quantized.blocks[0]) == []
        assert "weights" in layer_gaps(adapted, adapted.blocks[0])
    for block in adapted.blocks:
        for role in ("q", "k", "v", "o", "gate", "up", "down"):
            lin = block.linears[role]
            assert lin.base.dtype.name == "Q8_0" and bytes(lin.base.data) == before[id(lin.base)]
    # against the float base with peft's adapter the quantization error remains, but the
    # adapter's effect is reproduced: closer to peft's logits than the adapter-less base
    assert float(np.abs(got - case["expected"]).max()) < \
        float(np.abs(quantized.forward(PROMPT) - case["expected"]).max())


def _write_adapter(directory, config, tensors):
    from safetensors.numpy import save_file
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "adapter_config.json"), "w") as handle:
        json.dump(config, handle)
    save_file(tensors, os.path.join(directory, "adapter_model.safetensors"))


def test_bad_adapters_get_coded_errors(case, tmp_path):
    base = Transformer.from_path(str(case["root"] / "base"))
    good = os.path.join(str(case["root"] / "adapter"), "adapter_model.safetensors")
    config = {"peft_type": "LORA", "r": 4, "lora_alpha": 8}
    name = "base_model.model.model.layers.0.self_attn.q_proj.lora_{}.weight"
    a = np.ones((4, 64), np.float32)
    b = np.ones((64, 4), np.float32)

    def code(tensors, cfg=config, apply=True):
        directory = str(tmp_path / "bad{}".format(len(os.listdir(str(tmp_path)))))
        _write_adapter(directory, cfg, tensors)
        with pytest.raises(AprError) as err:
            adapter = read_adapter(directory)
            if apply:
                apply_adapters(base, [(adapter, 1.0)])
        return err.value.code

    # shape mismatch against the base (q_proj is [64, 64]; this A reads 32 inputs)
    assert code({name.format("A"): np.ones((4, 32), np.float32),
                 name.format("B"): b}) == ErrorCode.VALIDATION
    # ranks of A and B disagree
    assert code({name.format("A"): a, name.format("B"): np.ones((64, 2), np.float32)}
                ) == ErrorCode.VALIDATION
    # rank differs from the config's r
    assert code({name.format("A"): a, name.format("B"): b},
                dict(config, r=8)) == ErrorCode.VALIDATION
    # a missing half
    assert code({name.format("A"): a}) == ErrorCode.NOT_FOUND
    # a target not in the model: layer 7 of a 2-layer model, and a name no table knows
    assert code({name.format("A").replace("layers.0", "layers.7"): a,
                 name.format("B").replace("layers.0", "layers.7"): b}) == ErrorCode.NOT_FOUND
    odd = "base_model.model.model.layers.0.self_attn.r_proj.lora_{}.weight"
    assert code({odd.format("A"): a, odd.format("B"): b}) == ErrorCode.NOT_FOUND
    # missing config key
    assert code({name.format("A"): a, name.format("B"): b},
                {"peft_type": "LORA", "r": 4}) == ErrorCode.VALIDATION
    # a truncated safetensors file
    directory = tmp_path / "truncated"
    directory.mkdir()
    (directory / "adapter_config.json").write_text(json.dumps(config))
    with open(good, "rb") as handle:
        data = handle.read()
    (directory / "adapter_model.safetensors").write_bytes(data[:len(data) // 2])
    with pytest.raises(AprError) as err:
        read_adapter(str(directory))
    assert err.value.code in (ErrorCode.CORRUPT, ErrorCode.FORMAT)
    # nothing there at all
    with pytest.raises(AprError) as err:
        read_adapter(str(tmp_path / "absent"))
    assert err.value.code == ErrorCode.NOT_FOUND
    # a model on a device backend (webgpu) runs its own forward pass: refused
    import copy
    on_device = copy.copy(base)
    on_device.device = object()
    with pytest.raises(AprError) as err:
        apply_adapters(on_device, [(read_adapter(str(case["root"] / "adapter")), 1.0)])
    assert err.value.code == ErrorCode.UNSUPPORTED


def test_merged_export_equals_peft_merge_and_unload(case, tmp_path):
    """`apr export BASE --merge-lora ADAPTER -o merged.gguf` (the CLI, in process) on the F32
    HF base: llama.cpp's layout (LLaMA Q/K permuted), adapted weights kept F32; its logits
    equal peft's merge_and_unload() model and apr's run-time application."""
    import copy
    from cli_util import apr
    out = tmp_path / "merged.gguf"
    code, stdout, stderr = apr("export", case["root"] / "base", "--merge-lora",
                               str(case["root"] / "adapter") + ":1.0", "-o", out, "--json")
    assert code == 0, stderr
    report = json.loads(stdout)
    assert len(report["merged_tensors"]) == 7 * SMALL["num_hidden_layers"]
    assert set(report["merged_tensors"].values()) == {"F32"}
    merged = copy.deepcopy(case["wrapped"]).merge_and_unload()
    expected = logits(merged, PROMPT)
    got = Transformer.from_path(str(out)).forward(PROMPT)
    delta = float(np.abs(got - expected).max())
    print("{}: merged export vs peft merge_and_unload: {:.3g}".format(case["name"], delta))
    assert delta <= TOL
    runtime = apply_adapters(Transformer.from_path(str(case["root"] / "base")),
                             [(read_adapter(str(case["root"] / "adapter")), 1.0)])
    assert float(np.abs(runtime.forward(PROMPT) - got).max()) <= TOL


def test_merged_export_over_quantized_base(llama_case, tmp_path):
    """A Q8_0 base at scale 0.5: adapted weights are written F16 (dequantized base + delta),
    every other tensor keeps its Q8_0 bytes; logits equal run-time application within the
    F16 rounding of the merged weights."""
    case = llama_case
    from apr_core.conversion.convert import convert
    from apr_core.conversion.lora_merge import merge_lora
    from apr_core.formats.open import open_model
    base = str(tmp_path / "base_q8_0.gguf")
    convert(str(case["root"] / "base"), base, "gguf", quantize="q8_0")
    out = str(tmp_path / "merged.gguf")
    adapter = str(case["root"] / "adapter")
    report = merge_lora(base, [(adapter, 0.5)], out)
    assert report["format"] == "gguf" and set(report["merged"].values()) == {"F16"}
    with open_model(base) as before, open_model(out) as after:
        for name in before.tensors:
            if name in report["merged"]:
                assert after.tensors[name].dtype.name == "F16"
            else:
                assert after.read_raw(name).data == before.read_raw(name).data, name
    runtime = apply_adapters(Transformer.from_path(base), [(read_adapter(adapter), 0.5)])
    expected = runtime.forward(PROMPT)
    got = Transformer.from_path(out).forward(PROMPT)
    delta = float(np.abs(got - expected).max())
    print("q8_0 base: merged F16 export vs run time: {:.3g}".format(delta))
    # F16 keeps 11 significant bits of each merged weight: measured 1.6e-3 on the logits,
    # against an adapter effect of more than 0.05
    assert delta <= 5e-3
    assert float(np.abs(expected - Transformer.from_path(base).forward(PROMPT)).max()) > 0.05


def test_peft_on_gpt2_fused_qkv_conv1d(tmp_path):
    """GPT-2: one fused c_attn (qkv) projection stored [in, out] (Conv1D): peft's LoRA on
    c_attn, c_proj and c_fc gives transformers + peft's logits."""
    config = transformers.GPT2Config(vocab_size=256, n_embd=64, n_layer=2, n_head=4,
                                     n_positions=64, bos_token_id=1, eos_token_id=2)
    base = build_hf_model(config, tmp_path / "base")
    wrapped = make_adapter(base, tmp_path / "adapter", 2,
                           target_modules=["c_attn", "c_proj", "c_fc"], fan_in_fan_out=True)
    adapted = apply_adapters(Transformer.from_path(str(tmp_path / "base")),
                             [(read_adapter(str(tmp_path / "adapter")), 1.0)])
    assert "qkv" in [role for role, lin in adapted.blocks[0].linears.items()
                     if type(lin).__name__ == "AdaptedLinear"]
    delta = float(np.abs(adapted.forward(PROMPT) - logits(wrapped, PROMPT)).max())
    print("gpt2: max |delta| vs peft = {:.3g}".format(delta))
    assert delta <= TOL


def test_non_projection_targets_and_bad_gguf_loras(case, tmp_path):
    """A LoRA on the LM head or the embedding is refused (E009), as are GGUF files that are
    not LoRAs, lack their alpha, or are cut short."""
    gguf = pytest.importorskip("gguf")
    base = Transformer.from_path(str(case["root"] / "base"))
    config = {"peft_type": "LORA", "r": 4, "lora_alpha": 8}
    head = {"base_model.model.lm_head.lora_A.weight": np.ones((4, 64), np.float32),
            "base_model.model.lm_head.lora_B.weight": np.ones((256, 4), np.float32)}
    _write_adapter(str(tmp_path / "head"), config, head)
    with pytest.raises(AprError) as err:
        apply_adapters(base, [(read_adapter(str(tmp_path / "head")), 1.0)])
    assert err.value.code == ErrorCode.UNSUPPORTED
    embed = {"base_model.model.model.embed_tokens.lora_embedding_A": np.ones((4, 256),
                                                                              np.float32)}
    _write_adapter(str(tmp_path / "embed"), config, embed)
    with pytest.raises(AprError) as err:
        read_adapter(str(tmp_path / "embed"))
    assert err.value.code == ErrorCode.UNSUPPORTED

    def gguf_file(name, kv, tensors):
        path = str(tmp_path / name)
        writer = gguf.GGUFWriter(path, "llama")
        for key, value in kv.items():
            (writer.add_float32 if isinstance(value, float) else writer.add_string)(key, value)
        for tensor, value in tensors.items():
            writer.add_tensor(tensor, value)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        return path
    halves = {"blk.0.attn_q.weight.lora_a": np.ones((4, 64), np.float32),
              "blk.0.attn_q.weight.lora_b": np.ones((64, 4), np.float32)}
    lora_kv = {"general.type": "adapter", "adapter.type": "lora"}
    for name, kv, code in (("model.gguf", {}, ErrorCode.FORMAT),
                           ("no_alpha.gguf", lora_kv, ErrorCode.NOT_FOUND)):
        with pytest.raises(AprError) as err:
            read_adapter(gguf_file(name, kv, halves))
        assert err.value.code == code, name
    good = gguf_file("good.gguf", dict(lora_kv, **{"adapter.lora.alpha": 8.0}), halves)
    assert read_adapter(good).pairs[0].scaling == 2.0
    if case["name"] == "qwen2":      # a LoRA for llama on a Qwen2 model (llama.cpp refuses)
        with pytest.raises(AprError) as err:
            apply_adapters(base, [(read_adapter(good), 1.0)])
        assert err.value.code == ErrorCode.VALIDATION and "architecture" in str(err.value)
    with open(good, "rb") as handle:
        data = handle.read()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(data[:len(data) - 100])
    with pytest.raises(AprError) as err:
        read_adapter(str(cut))
    assert err.value.code in (ErrorCode.CORRUPT, ErrorCode.FORMAT)
