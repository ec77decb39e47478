"""convert(quantize=...) against llama.cpp: same per-tensor types as llama_model_quantize,
byte-identical K-quant payloads, and a Q4_K_M file llama.cpp loads and generates from.

The model is a real LlamaConfig (tiny: 8 layers, d_model 256, SmolLM2's 49152-token vocab,
tied embeddings)
with random weights, saved by transformers as SafeTensors F32. llama.cpp needs GGUF names
and tokenizer KV pairs to load it, so the fixture writes the F32 GGUF llama.cpp's converter
would (names from test_model_parity, tokenizer pairs copied from the SmolLM2 GGUF).
"""
import ctypes
import json

import numpy as np
import pytest

from apr_core import dtypes
from apr_core.errors import AprError, ErrorCode
from apr_core.conversion.convert import convert
from apr_core.formats.gguf import gguf_kv_block, read_gguf, write_gguf
from apr_core.conversion.quality import QualityReport
from apr_core.quant.recipes import gguf_name, plan
from apr_core.tensor import LazyTensor

# llama.cpp, torch and transformers: the main Python only
pytestmark = [pytest.mark.native]
llama_cpp = pytest.importorskip("llama_cpp", reason="llama-cpp-python (llama.cpp) not installed")
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from llama_cpp_layout import GGUF_NAMES, permute_for_llama_cpp  # noqa: E402

N_LAYERS = 8


def _tensor(name, array):
    array = np.ascontiguousarray(array, dtype=np.float32)
    return LazyTensor(name, dtypes.by_name("F32"), tuple(array.shape), array.tobytes)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, smollm2_gguf):
    """(safetensors dir, F32 GGUF path) of the tiny random LLaMA."""
    from safetensors.numpy import load_file
    root = tmp_path_factory.mktemp("tiny")
    config = transformers.LlamaConfig(
        vocab_size=49152, hidden_size=256, intermediate_size=512, num_hidden_layers=N_LAYERS,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
        tie_word_embeddings=True, rms_norm_eps=1e-5)   # tied, as SmolLM2
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).eval()
    model.save_pretrained(str(root / "hf"), safe_serialization=True)
    weights = load_file(str(root / "hf" / "model.safetensors"))
    tensors = []
    for name, array in weights.items():
        if name == "lm_head.weight":
            continue
        if name.endswith("q_proj.weight"):
            array = permute_for_llama_cpp(array, config.num_attention_heads)
        if name.endswith("k_proj.weight"):
            array = permute_for_llama_cpp(array, config.num_key_value_heads)
        if name.startswith("model.layers."):
            index, rest = name[len("model.layers."):].split(".", 1)
            target = "blk.{}.{}".format(index, GGUF_NAMES[rest])
        else:
            target = GGUF_NAMES[name]
        tensors.append(_tensor(target, array))
    source = gguf_kv_block(read_gguf(smollm2_gguf))
    kv = {"general.architecture": "llama", "general.name": "tiny",
          "llama.block_count": N_LAYERS, "llama.context_length": 128,
          "llama.embedding_length": 256, "llama.feed_forward_length": 512,
          "llama.attention.head_count": 4, "llama.attention.head_count_kv": 2,
          "llama.attention.layer_norm_rms_epsilon": 1e-5, "llama.rope.freq_base": 10000.0,
          "llama.vocab_size": 49152}
    types = {key: "u32" for key, value in kv.items() if isinstance(value, int)}
    for key, value in source["kv"].items():
        if key.startswith("tokenizer."):
            kv[key] = value
            types[key] = source["types"][key]
    path = str(root / "f32.gguf")
    write_gguf(path, tensors, kv, types)
    return str(root / "hf"), path


def _types(path):
    gguf = read_gguf(path)
    return {name: info.dtype.name for name, info in gguf.tensors.items()}


def _llama_quantize(src, dst, ftype):
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = ftype
    params.nthread = 2
    assert llama_cpp.llama_model_quantize(src.encode(), dst.encode(), ctypes.byref(params)) == 0


@pytest.fixture(scope="module")
def q4_k_m(tiny, tmp_path_factory):
    """(ours, llama.cpp's, report) for Q4_K_M of the F32 GGUF."""
    root = tmp_path_factory.mktemp("q4km")
    theirs = str(root / "llama.gguf")
    _llama_quantize(tiny[1], theirs, llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_K_M)
    ours = str(root / "ours.gguf")
    report = QualityReport()
    convert(tiny[1], ours, quantize="Q4_K_M", report=report)
    return ours, theirs, report


def test_q4_k_m_types_match_llama_cpp(q4_k_m):
    ours, theirs, _ = q4_k_m
    expected = _types(theirs)
    assert _types(ours) == expected
    # The recipe did pick the mixed types (not only the default); the tied embedding
    # takes the output head's Q6_K.
    assert expected["token_embd.weight"] == "Q6_K" and expected["blk.0.attn_v.weight"] == "Q6_K"
    assert "output.weight" not in expected
    assert expected["blk.1.ffn_down.weight"] == "Q4_K"
    assert expected["blk.0.attn_norm.weight"] == "F32"


def test_q4_k_m_bytes_match_llama_cpp(q4_k_m):
    """No importance matrix: llama.cpp uses the reference quantizers, as we do."""
    ours, theirs = read_gguf(q4_k_m[0]), read_gguf(q4_k_m[1])
    different = [name for name in theirs.tensors
                 if bytes(ours.read_raw(name).data) != bytes(theirs.read_raw(name).data)]
    assert different == []


def test_q4_k_m_loads_and_generates_in_llama_cpp(q4_k_m):
    llm = llama_cpp.Llama(model_path=q4_k_m[0], n_ctx=64, verbose=False)
    out = llm("The capital of France is", max_tokens=4, temperature=0.0)
    assert out["usage"]["completion_tokens"] >= 1


def test_report_covers_every_quantized_tensor(q4_k_m):
    ours, _, report = q4_k_m
    types = _types(ours)
    rows = {row.name: row for row in report.tensors}
    assert set(rows) == {n for n, t in types.items() if t != "F32"}
    for name, row in rows.items():
        assert row.dtype == types[name] and row.source_dtype == "F32"
        assert row.bits_per_weight == {"Q4_K": 4.5, "Q6_K": 6.5625}[row.dtype]
        assert 0.99 < row.cosine <= 1.0 + 1e-12


def _small_gguf(path, tied):
    """A tokenizer-less F32 LLaMA GGUF (vocab 32): enough for llama_model_quantize,
    which reads hyperparameters but not the vocabulary."""
    rng = np.random.RandomState(2)
    shapes = {"attn_q": (256, 256), "attn_k": (128, 256), "attn_v": (128, 256),
              "attn_output": (256, 256), "ffn_gate": (256, 256), "ffn_up": (256, 256),
              "ffn_down": (256, 256), "attn_norm": (256,), "ffn_norm": (256,)}
    tensors = [_tensor("token_embd.weight", rng.standard_normal((32, 256)) * 0.02),
               _tensor("output_norm.weight", np.ones(256))]
    if not tied:
        tensors.append(_tensor("output.weight", rng.standard_normal((32, 256)) * 0.02))
    for i in range(N_LAYERS):
        for role, shape in shapes.items():
            values = np.ones(shape) if len(shape) == 1 else rng.standard_normal(shape) * 0.02
            tensors.append(_tensor("blk.{}.{}.weight".format(i, role), values))
    kv = {"general.architecture": "llama", "llama.block_count": N_LAYERS,
          "llama.context_length": 128, "llama.embedding_length": 256,
          "llama.feed_forward_length": 256, "llama.attention.head_count": 4,
          "llama.attention.head_count_kv": 2, "llama.attention.layer_norm_rms_epsilon": 1e-5,
          "llama.vocab_size": 32}
    write_gguf(path, tensors, kv, {k: "u32" for k, v in kv.items() if isinstance(v, int)})
    return path


@pytest.fixture(scope="module", params=[False, True], ids=["untied", "tied"])
def small_gguf(request, tmp_path_factory):
    return _small_gguf(str(tmp_path_factory.mktemp("small") / "f32.gguf"), request.param)


@pytest.mark.parametrize("ftype", ["Q4_K_M", "Q5_K_M", "Q3_K_M", "Q3_K_L", "Q2_K", "Q4_K_S",
                                   "Q5_K_S", "Q6_K", "Q8_0", "Q4_0", "Q5_1", "F16", "BF16"])
def test_file_type_plans_match_llama_cpp(tmp_path, ftype, small_gguf):
    """The plan alone (no writing) against llama.cpp's file for the same F32 input."""
    src = small_gguf
    theirs = str(tmp_path / "llama.gguf")
    _llama_quantize(src, theirs, getattr(llama_cpp, "LLAMA_FTYPE_MOSTLY_" + ftype))
    gguf = read_gguf(src)
    ours = plan([(name, info.shape) for name, info in gguf.tensors.items()], ftype, n_gqa=2)
    assert {name: t or "F32" for name, t in ours.items()} == _types(theirs)


def test_file_type_ids_are_llama_cpps():
    from apr_core.quant.recipes import FILE_TYPES
    for name, row in FILE_TYPES.items():
        constant = "LLAMA_FTYPE_ALL_F32" if name == "F32" else "LLAMA_FTYPE_MOSTLY_" + name
        assert row.ftype == getattr(llama_cpp, constant), name


def test_hf_names_get_the_same_plan(tiny):
    """SafeTensors (HF names) and GGUF names map to the same choices."""
    from safetensors import safe_open
    with safe_open(tiny[0] + "/model.safetensors", framework="numpy") as handle:
        shapes = {name: tuple(handle.get_slice(name).get_shape()) for name in handle.keys()}
    hf = plan(list(shapes.items()), "Q4_K_M")
    gguf = plan([(gguf_name(name), shape) for name, shape in shapes.items()], "Q4_K_M")
    assert {gguf_name(name): t for name, t in hf.items()} == gguf


def test_safetensors_quantized_to_apr(tiny, tmp_path):
    """SafeTensors F32 (HF names) -> APR with a plain type and the seed-003 embedding hook;
    the report's RMSE is the one of the decoded file."""
    from safetensors.numpy import load_file
    from apr_core.formats.open import open_model
    from apr_core.quant import dequantize
    report = QualityReport()
    convert(tiny[0] + "/model.safetensors", str(tmp_path / "m.apr"), quantize="q4_0",
            keep_embeddings_q8=True, report=report)
    with open_model(str(tmp_path / "m.apr")) as model:
        kinds = {name: model.info(name).dtype.name for name in model.tensors}
        down = model.read_raw("model.layers.1.mlp.down_proj.weight")
        decoded = dequantize(down.data, down.dtype, down.shape)
    assert kinds["model.embed_tokens.weight"] == "Q8_0" and "lm_head.weight" not in kinds
    assert kinds["model.norm.weight"] == "F32" and down.dtype.name == "Q4_0"
    assert sorted(n for n, k in kinds.items() if k == "F32") == sorted(
        n for n in kinds if n.endswith("norm.weight"))
    row = {r.name: r for r in report.tensors}["model.layers.1.mlp.down_proj.weight"]
    original = load_file(tiny[0] + "/model.safetensors")["model.layers.1.mlp.down_proj.weight"]
    diff = decoded.astype(np.float64) - original
    assert row.rmse == pytest.approx(float(np.sqrt(np.mean(diff * diff))), rel=1e-9)
    assert row.max_abs_error == float(np.abs(diff).max())
    assert row.bits_per_weight == 4.5 and row.bytes_before == original.nbytes


def test_nan_aborts_and_force_goes_through(tmp_path):
    from apr_core.formats.apr2 import write_apr2
    weights = np.random.RandomState(0).standard_normal((4, 256)).astype(np.float32)
    weights[2, 7] = np.nan
    src = str(tmp_path / "bad.apr")
    write_apr2(src, [_tensor("blk.0.ffn_up.weight", weights),
                     _tensor("blk.0.attn_norm.weight", np.ones(256))], {})
    with pytest.raises(AprError) as info:
        convert(src, str(tmp_path / "out.apr"), quantize="q8_0")
    assert info.value.code == ErrorCode.VALIDATION
    assert "1 NaN/Inf" in info.value.context["problems"][0]
    report = QualityReport()
    convert(src, str(tmp_path / "out.apr"), quantize="q8_0", force=True, report=report)
    assert report.warnings == ["blk.0.ffn_up.weight: 1 NaN/Inf values"]


def test_norm_mean_out_of_range_aborts_even_without_quantize(tmp_path):
    from apr_core.formats.apr2 import write_apr2
    src = str(tmp_path / "ln.apr")
    write_apr2(src, [_tensor("blk.0.attn_norm.weight", np.full(64, 11.0))], {})
    with pytest.raises(AprError) as info:
        convert(src, str(tmp_path / "out.gguf"), precision="f16")
    assert info.value.code == ErrorCode.VALIDATION
    assert info.value.context["problems"] == [
        "blk.0.attn_norm.weight: mean 11 outside [-1.0, 10.0]"]
    convert(src, str(tmp_path / "out.gguf"), precision="f16", force=True)
    assert _types(str(tmp_path / "out.gguf")) == {"blk.0.attn_norm.weight": "F32"}


def test_real_smollm2_requantized_like_llama_cpp(smollm2_gguf, tmp_path):
    """SmolLM2 (Q4_1/Q8_0, d_model 576: every Q4_K/Q6_K falls back) -> Q4_K_M: the same
    types and bytes as llama.cpp's requantization, and it still answers Paris."""
    theirs = str(tmp_path / "llama.gguf")
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype, params.allow_requantize, params.nthread = \
        llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_K_M, True, 2
    assert llama_cpp.llama_model_quantize(smollm2_gguf.encode(), theirs.encode(),
                                          ctypes.byref(params)) == 0
    ours = str(tmp_path / "ours.gguf")
    report = QualityReport()
    convert(smollm2_gguf, ours, quantize="Q4_K_M", report=report)
    assert _types(ours) == _types(theirs)
    a, b = read_gguf(ours), read_gguf(theirs)
    assert [n for n in b.tensors if bytes(a.read_raw(n).data) != bytes(b.read_raw(n).data)] == []
    assert {r.source_dtype for r in report.tensors} == {"Q4_1", "Q8_0"}
    assert a.metadata["general.file_type"] == b.metadata["general.file_type"] == 15
    llm = llama_cpp.Llama(model_path=ours, n_ctx=64, verbose=False)
    text = llm("The capital of France is", max_tokens=4, temperature=0.0)["choices"][0]["text"]
    assert "Paris" in text


# --------------------------------------------------------------------------- CLI

def _apr(*args):
    import os
    import subprocess
    import sys
    env = dict(os.environ, APR_QUIET="1")
    done = subprocess.run([sys.executable, "-m", "apr_native.cli.main"] + list(args),
                          capture_output=True, text=True, env=env)
    return done.returncode, done.stdout, done.stderr


@pytest.fixture
def small_apr(tmp_path):
    from apr_core.formats.apr2 import write_apr2
    rng = np.random.RandomState(1)
    path = str(tmp_path / "small.apr")
    write_apr2(path, [_tensor("blk.0.ffn_up.weight", rng.standard_normal((8, 256)) * 0.02),
                      _tensor("blk.0.attn_q.weight", rng.standard_normal((8, 64)) * 0.02),
                      _tensor("blk.0.attn_norm.weight", np.ones(256))], {})
    return path


@pytest.mark.native
def test_cli_quantize_json(small_apr, tmp_path):
    out = str(tmp_path / "q.gguf")
    code, stdout, _ = _apr("quantize", small_apr, "q4_k", "-o", out, "--precision", "f16",
                           "--json")
    assert code == 0
    result = json.loads(stdout)
    rows = {r["name"]: r for r in result["quality"]["tensors"]}
    # q4_k on 256-wide rows; the 64-wide matrix does not fit and takes --precision.
    assert {n: r["dtype"] for n, r in rows.items()} == {"blk.0.ffn_up.weight": "Q4_K",
                                                       "blk.0.attn_q.weight": "F16"}
    assert _types(out) == {"blk.0.ffn_up.weight": "Q4_K", "blk.0.attn_q.weight": "F16",
                           "blk.0.attn_norm.weight": "F32"}
    assert result["format"] == "gguf" and result["quality"]["totals"]["tensors"] == 2


@pytest.mark.native
def test_cli_convert_quantize_table_and_exit_codes(small_apr, tmp_path):
    out = str(tmp_path / "q.apr")
    code, stdout, _ = _apr("convert", small_apr, "--quantize", "Q4_K_M", "--compress", "zstd",
                           "-o", out)
    assert code == 0
    assert "blk.0.ffn_up.weight" in stdout and "2 tensors re-encoded" in stdout
    code, _, stderr = _apr("convert", small_apr, "--quantize", "Q4_K_M", "-o", out)
    assert code == 2 and "output exists" in stderr
    code, _, stderr = _apr("quantize", small_apr, "Q9_Z", "-o", str(tmp_path / "x.gguf"))
    assert code == 2 and "unknown quantization type" in stderr


@pytest.mark.native
def test_cli_validation_exit_5_and_force(tmp_path):
    from apr_core.formats.apr2 import write_apr2
    src = str(tmp_path / "bad.apr")
    write_apr2(src, [_tensor("blk.0.attn_norm.weight", np.full(256, 11.0))], {})
    out = str(tmp_path / "out.safetensors")
    code, stdout, stderr = _apr("quantize", src, "q8_0", "-o", out, "--json")
    assert code == 5 and json.loads(stdout)["error"]["code"] == "E012"
    code, stdout, stderr = _apr("quantize", src, "q8_0", "-o", out, "--relaxed")
    assert code == 0 and "mean 11 outside" in stderr
