"""A Hugging Face directory (SafeTensors F32 + config.json + tokenizer.json) converted to
GGUF is a llama.cpp model: llama.cpp loads it, tokenizes like the HF tokenizer, computes
transformers' logits, and a Q4_K_M conversion equals llama_model_quantize's, byte for byte.

Three real configurations with random weights and real tokenizers: LLaMA (Q/K rows permuted
for llama.cpp's adjacent-pair RoPE, untied output head, LLaMA-3's tokenizer), LLaMA with
LLaMA 3.1's RoPE scaling (which llama.cpp reads as a `rope_freqs` tensor) and Qwen2
(NeoX RoPE, Q/K/V biases, tied embeddings, Qwen's tokenizer). The reference layout is
also built independently of `apr_core.model.gguf_export`, from test_model_parity's name table
and permutation, and compared tensor by tensor.
"""
import ctypes
import json
import os
import shutil

import numpy as np
import pytest

from apr_core.errors import AprError, ErrorCode
from apr_core.conversion.convert import convert
from apr_core.formats.gguf import gguf_kv_block, read_gguf

pytestmark = [pytest.mark.oracle, pytest.mark.native]

llama_cpp = pytest.importorskip("llama_cpp", reason="llama-cpp-python (llama.cpp) not installed")
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

from llama_cpp_layout import GGUF_NAMES, permute_for_llama_cpp  # noqa: E402

CACHE = os.environ.get("APR_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "apr")
PROMPT = "The quick brown fox jumps over 1234 lazy dogs. Qu'est-ce que c'est? 🦙"
# LLaMA 3.1's RoPE scaling with an original context of 64 positions: most frequencies
# are slowed 8x and a band is blended, so a missing or wrong rope_freqs shows in the logits.
LLAMA3_SCALING = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                  "high_freq_factor": 4.0, "original_max_position_embeddings": 64}
# case -> (family, transformers config class, model class, cached tokenizer, overrides)
CASES = {
    "llama": ("llama", "LlamaConfig", "LlamaForCausalLM", "llama3",
              {"tie_word_embeddings": False}),
    "llama-3.1-rope": ("llama", "LlamaConfig", "LlamaForCausalLM", "llama3",
                       {"tie_word_embeddings": True, "rope_theta": 500000.0,
                        "rope_scaling": LLAMA3_SCALING}),
    "qwen2": ("qwen2", "Qwen2Config", "Qwen2ForCausalLM", "qwen3",
              {"tie_word_embeddings": True, "rope_theta": 1000000.0}),
}


def _tokenizer_dir(name):
    path = os.path.join(CACHE, "tokenizers", name)
    if not os.path.isfile(os.path.join(path, "tokenizer.json")):
        pytest.skip("{} tokenizer.json not cached (scripts/fetch_tokenizer_vectors.sh)".format(name))
    return path


@pytest.fixture(scope="module", params=sorted(CASES))
def hf_model(request, tmp_path_factory):
    """(family, HF directory, transformers model) with d_model 256 so K-quants apply."""
    family, config_cls, model_cls, tokenizer, overrides = CASES[request.param]
    tok_dir = _tokenizer_dir(tokenizer)
    with open(os.path.join(tok_dir, "tokenizer.json"), encoding="utf-8") as handle:
        vocab = json.load(handle)
    n_vocab = 1 + max(list(vocab["model"]["vocab"].values())
                      + [t["id"] for t in vocab.get("added_tokens", [])])
    torch.manual_seed(0)
    config = getattr(transformers, config_cls)(
        vocab_size=n_vocab, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
        rms_norm_eps=1e-6, **overrides)
    model = getattr(transformers, model_cls)(config).eval()
    with torch.no_grad():   # visible norms and biases, so a misplaced one shows in the logits
        for name, param in model.named_parameters():
            if param.dim() == 1:
                param.add_(torch.randn_like(param) * 0.2)
    path = tmp_path_factory.mktemp("hf") / request.param
    model.save_pretrained(str(path), safe_serialization=True)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(tok_dir, name), str(path / name))
    return family, str(path), model


@pytest.fixture(scope="module")
def f32_gguf(hf_model, tmp_path_factory):
    out = str(tmp_path_factory.mktemp("gguf") / "f32.gguf")
    assert convert(hf_model[1], out) == "gguf"
    return out


def _llama(path):
    return llama_cpp.Llama(path, n_ctx=256, logits_all=True, verbose=False, n_threads=2)


def _hf_ids(directory):
    hf = tokenizers.Tokenizer.from_file(os.path.join(directory, "tokenizer.json"))
    return hf.encode(PROMPT, add_special_tokens=False).ids


def test_tensors_match_an_independent_layout(hf_model, f32_gguf):
    family, directory, model = hf_model
    ours = read_gguf(f32_gguf)
    config = model.config
    expected = {}
    for name, param in model.state_dict().items():
        array = param.detach().numpy().astype(np.float32)
        if name == "lm_head.weight" and config.tie_word_embeddings:
            continue
        if family == "llama" and name.endswith(("q_proj.weight", "q_proj.bias")):
            array = permute_for_llama_cpp(array, config.num_attention_heads)
        if family == "llama" and name.endswith(("k_proj.weight", "k_proj.bias")):
            array = permute_for_llama_cpp(array, config.num_key_value_heads)
        if name.startswith("model.layers."):
            index, rest = name[len("model.layers."):].split(".", 1)
            expected["blk.{}.{}".format(index, GGUF_NAMES[rest])] = array
        else:
            expected[GGUF_NAMES[name]] = array
    if _rope_params(config).get("rope_type") == "llama3":
        expected["rope_freqs.weight"] = _llama3_rope_divisors(config)
    assert sorted(ours.tensors) == sorted(expected)
    for name, array in expected.items():
        info = ours.info(name)
        assert info.dtype.name == "F32" and tuple(info.shape) == array.shape, name
        got = np.frombuffer(ours.read_raw(name).data, "<f4").reshape(array.shape)
        if name == "rope_freqs.weight":   # float64 here, float32 in llama.cpp's converter
            np.testing.assert_allclose(got, array, rtol=1e-6)
            assert (array == 1).any() and (array == 8).any() and (  # every band is present
                (array > 1) & (array < 8)).any(), array
        else:
            assert got.tobytes() == array.tobytes(), name
    kv = gguf_kv_block(ours)["kv"]
    arch = kv["general.architecture"]
    assert arch == family
    assert kv[arch + ".block_count"] == 2 and kv[arch + ".attention.head_count_kv"] == 2
    assert kv[arch + ".vocab_size"] == config.vocab_size
    assert len(kv["tokenizer.ggml.tokens"]) == config.vocab_size
    assert kv["tokenizer.ggml.pre"] == {"llama": "llama3", "qwen2": "qwen2"}[family]
    ours.close()


def _rope_params(config):
    """RoPE settings of a transformers config: `rope_parameters` (v5, theta included) or
    `rope_scaling` + `rope_theta` (v4)."""
    params = dict(getattr(config, "rope_parameters", None) or config.rope_scaling or {})
    params.setdefault("rope_theta", getattr(config, "rope_theta", 10000.0))
    return params


def _llama3_rope_divisors(config):
    """llama.cpp's converter's `rope_freqs` for LLaMA 3.1 scaling (per frequency: 1 for
    short wavelengths, `factor` for long ones, a blend between), computed as it does."""
    scaling = _rope_params(config)
    head_dim = config.hidden_size // config.num_attention_heads
    freqs = 1.0 / (scaling["rope_theta"] ** (np.arange(0, head_dim, 2, dtype=np.float32)
                                             / head_dim))
    old_ctx = scaling["original_max_position_embeddings"]
    low_wavelen = old_ctx / scaling["low_freq_factor"]
    high_wavelen = old_ctx / scaling["high_freq_factor"]
    divisors = []
    for freq in freqs:
        wavelen = 2 * np.pi / freq
        if wavelen < high_wavelen:
            divisors.append(1.0)
        elif wavelen > low_wavelen:
            divisors.append(scaling["factor"])
        else:
            smooth = (old_ctx / wavelen - scaling["low_freq_factor"]) / (
                scaling["high_freq_factor"] - scaling["low_freq_factor"])
            divisors.append(1 / ((1 - smooth) / scaling["factor"] + smooth))
    return np.array(divisors, np.float32)


def test_llama_cpp_tokenizes_like_the_hf_tokenizer(hf_model, f32_gguf):
    llm = _llama(f32_gguf)
    try:
        got = llm.tokenize(PROMPT.encode("utf-8"), add_bos=False, special=False)
    finally:
        llm.close()
    assert got == _hf_ids(hf_model[1])


def test_llama_cpp_logits_match_transformers(hf_model, f32_gguf):
    _, directory, model = hf_model
    ids = _hf_ids(directory)
    with torch.no_grad():
        want = model(torch.tensor([ids])).logits[0].numpy()          # [T, n_vocab]
    llm = _llama(f32_gguf)
    try:
        llm.eval(ids)
        got = np.array(llm.scores[:len(ids)], dtype=np.float32)       # [T, n_vocab]
    finally:
        llm.close()
    scale = float(np.abs(want).max())
    assert np.abs(got - want).max() <= 1e-3 * scale, (np.abs(got - want).max(), scale)
    assert (got.argmax(-1) == want.argmax(-1)).all()


def _llama_quantize(src, dst, ftype):
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = ftype
    params.nthread = 2
    assert llama_cpp.llama_model_quantize(src.encode(), dst.encode(), ctypes.byref(params)) == 0


def test_q4_k_m_equals_llama_quantize_and_runs(hf_model, f32_gguf, tmp_path):
    _, directory, _ = hf_model
    ours, theirs = str(tmp_path / "ours.gguf"), str(tmp_path / "theirs.gguf")
    convert(directory, ours, quantize="Q4_K_M")
    _llama_quantize(f32_gguf, theirs, llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_K_M)
    a, b = read_gguf(ours), read_gguf(theirs)
    try:
        assert {n: i.dtype.name for n, i in a.tensors.items()} == \
            {n: i.dtype.name for n, i in b.tensors.items()}
        assert {i.dtype.name for i in a.tensors.values()} >= {"Q4_K", "Q6_K"}
        for name in b.tensors:
            assert bytes(a.read_raw(name).data) == bytes(b.read_raw(name).data), name
        assert gguf_kv_block(a)["kv"]["general.file_type"] == 15
    finally:
        a.close()
        b.close()
    ids = _hf_ids(directory)
    runs = []
    for path in (ours, theirs):
        llm = _llama(path)
        try:
            runs.append([int(t) for _, t in zip(range(8), llm.generate(ids, temp=0.0))])
        finally:
            llm.close()
    assert runs[0] == runs[1] and len(runs[0]) == 8


def test_apr_keeps_the_directory_and_exports_the_same_gguf(hf_model, f32_gguf, tmp_path):
    """HF dir -> APR carries config and tokenizer: the runtime runs it, and APR -> GGUF
    gives the same tensors and keys as the direct export."""
    from apr_core.runtime.text_model import TextModel
    _, directory, model = hf_model
    apr = str(tmp_path / "model.apr")
    convert(directory, apr, compression="lz4")
    ids = _hf_ids(directory)
    with torch.no_grad():
        want = model(torch.tensor([ids])).logits[0, -1].numpy()
    text_model = TextModel.load(apr)
    assert text_model.tokenizer.encode(PROMPT, add_special=False, parse_special=False) == ids
    got = text_model.transformer.forward(ids, text_model.transformer.new_cache(len(ids)))[-1]
    assert np.abs(got - want).max() <= 1e-4 * float(np.abs(want).max())
    again = str(tmp_path / "again.gguf")
    convert(apr, again)
    a, b = read_gguf(again), read_gguf(f32_gguf)
    try:
        assert gguf_kv_block(a)["kv"] == gguf_kv_block(b)["kv"]
        assert all(bytes(a.read_raw(n).data) == bytes(b.read_raw(n).data) for n in b.tensors)
    finally:
        a.close()
        b.close()


@pytest.mark.parametrize("hf_model", ["llama"], indirect=True)    # one case is enough
def test_sentencepiece_style_tokenizer_is_refused(hf_model, tmp_path):
    family, directory, model = hf_model
    assert family == "llama" and _rope_params(model.config).get("rope_type") != "llama3"
    copy = tmp_path / "spm"
    shutil.copytree(directory, str(copy))
    llama2 = _tokenizer_dir("llama2")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(llama2, name), str(copy / name))
    out = tmp_path / "out.gguf"
    with pytest.raises(AprError) as err:
        convert(str(copy), str(out))
    assert err.value.code == ErrorCode.UNSUPPORTED and not out.exists()
