"""Seed 000 §11 checklist, sections C (Tooling & Operations, 51-73) and D (Conversion &
Interoperability, 76-99): each CLI-testable item is a real file and a real `apr` command.

Items that are not tested here, and why:

| #  | claim             | why not here                                                        |
|----|-------------------|---------------------------------------------------------------------|
| 51 | inspect < 100 ms  | a speed target: timed assertions are banned from the suite;          |
|    |                   | bench/inspect_huge.py prints it on 50 GiB sparse APR and GGUF files  |
| 54 | TUI graph         | there is no `apr tui` (no interactive UI in this project)            |
| 55 | TUI stats         | same                                                                 |
| 60 | export ONNX       | ONNX needs a compute graph, which model files do not carry: export   |
|    |                   | refuses it cleanly (tested below as a refusal, not as a feature)     |
| 79 | APR->ONNX->APR    | no ONNX (see #60); the same round trip is tested through SafeTensors |
|    |                   | and GGUF instead: drift exactly 0                                    |
| 89 | scale factors     | no conversion here rescales values (norm offsets such as Gemma's +1  |
|    |                   | are applied by the runtime at load time, per family contract)        |
| 99 | APR_RAM_LIMIT     | not implemented: large models are read through mmap/lazy tensors     |

#64, #74 and #75 (`apr trace`: output, payload anomalies, diff) are in test_cli_trace.py,
on the real SmolLM2 and a copy with one corrupted layer.
#62 deviates from the seed's number: `--quantize int8` is Q8_0, llama.cpp's 8-bit type,
which stores one f16 scale per 32 weights (34 bytes per 32 weights = 26.6 % of F32); the
seed's "< 25 %" assumes scale-free int8. The test asserts the exact Q8_0 size instead.
#92 ("second import is fast") is tested without timing: the second import of the same
source (same sha256) is a cache hit that reads and writes nothing.
"""
import hashlib
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import synthetic_models as sm
from apr_core import dtypes
from apr_core.formats.apr2 import write_apr2
from apr_core.formats.gguf import gguf_kv_block, write_gguf
from apr_core.formats.open import open_model
from apr_core.formats.safetensors import write_safetensors
from apr_core.quant import dequantize
from apr_core.tensor import RawTensor
from cli_util import apr, apr_json, demo_files  # noqa: F401  (fixture)

pytestmark = pytest.mark.native
F32, BF16 = dtypes.BY_NAME["F32"], dtypes.BY_NAME["BF16"]


def raw(name, values, dtype=F32):
    values = np.asarray(values, dtype="<f4")
    return RawTensor(name, dtype, values.shape, values.tobytes())


def values_of(path, name):
    with open_model(path) as model:
        r = model.read_raw(name)
        return dequantize(r.data, r.dtype, r.shape)


def whisper_like(path, ln_mean=1.0):
    """A small Whisper-named SafeTensors file (HF names) with sane statistics."""
    rng = np.random.RandomState(0)
    write_safetensors(str(path), [
        raw("model.encoder.conv1.weight", 0.05 * rng.randn(16, 8)),
        raw("model.encoder.layer_norm.weight", ln_mean + 0.01 * rng.randn(16)),
        raw("model.encoder.layer_norm.bias", 0.01 * rng.randn(16)),
        raw("model.encoder.layers.0.fc1.weight", 0.05 * rng.randn(32, 16)),
        raw("model.decoder.embed_tokens.weight", 0.05 * rng.randn(24, 16)),
        raw("model.decoder.layer_norm.weight", 1.0 + 0.01 * rng.randn(16))])
    return str(path)


def gguf_with_vocab(path, n_tokens=64, license_name=None):
    """The synthetic LLaMA GGUF plus a tokenizer vocabulary and special token ids."""
    sm.write_gguf_model(path)
    with open_model(str(path)) as model:
        block = gguf_kv_block(model)
        tensors = [model.read_raw(n) for n in model.tensors]
    kv = dict(block["kv"], **{
        "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.tokens": ["<t{}>".format(i) for i in range(n_tokens)],
        "tokenizer.ggml.token_type": [1] * n_tokens,
        "tokenizer.ggml.bos_token_id": 1, "tokenizer.ggml.eos_token_id": 2,
        "tokenizer.ggml.unknown_token_id": 0})
    types = dict(block.get("types") or {}, **{
        "tokenizer.ggml.bos_token_id": "u32", "tokenizer.ggml.eos_token_id": "u32",
        "tokenizer.ggml.unknown_token_id": "u32"})
    if license_name:
        kv["general.license"] = license_name
    write_gguf(str(path), tensors, kv, types)
    return str(path)


# ------------------------------------------------------------------ C. tooling

def test_52_lint_warns_on_missing_license(tmp_path):
    path = str(tmp_path / "m.apr")
    write_apr2(path, [raw("w", [1.0])], {"model_type": "t"})
    code, out, _ = apr("lint", path)
    assert code == 0 and "WARN" in out and "license" in out


def test_53_drama_mode_without_a_tty(tmp_path):
    path = str(tmp_path / "m.apr")
    write_apr2(path, [raw("w", [1.0])], {"model_type": "t"})
    done = subprocess.run([sys.executable, "-m",
                           "apr_native.cli.main", "debug", path, "--drama"],
                          capture_output=True, text=True, stdin=subprocess.DEVNULL,
                          env=dict(os.environ, APR_QUIET="1"))
    assert done.returncode == 0 and "DRAMA" in done.stdout and "\x1b[" not in done.stdout


def test_56_57_diff_identity_and_detection(tmp_path):
    a, b = str(tmp_path / "a.apr"), str(tmp_path / "b.apr")
    write_apr2(a, [raw("w", [1.0, 2.0, 3.0])], {"model_type": "t"})
    write_apr2(b, [raw("w", [1.0, 2.5, 3.0])], {"model_type": "t"})
    code, same = apr_json("diff", a, a)
    assert code == 0 and same["similarity"] == 100.0
    code, changed = apr_json("diff", a, b)
    assert changed["similarity"] < 100.0 and changed["max_delta"] == pytest.approx(0.5)


def test_58_merge_average(tmp_path):
    a, b = str(tmp_path / "a.apr"), str(tmp_path / "b.apr")
    write_apr2(a, [raw("w", [1.0])], {"model_type": "t"})
    write_apr2(b, [raw("w", [3.0])], {"model_type": "t"})
    out = str(tmp_path / "m.apr")
    assert apr("merge", a, b, "--strategy", "average", "-o", out)[0] == 0
    assert values_of(out, "w").tolist() == [2.0]


def test_59_merge_ties_masking(tmp_path):
    """Trim (density 0.5 keeps 2 of 4 per model), elect the sign, average the agreeing."""
    paths = []
    for i, v in enumerate(([0.5, -2.0, 0.1, 3.0], [1.0, 1.5, -0.2, -0.9],
                           [-0.1, -1.0, 0.3, 2.0])):
        paths.append(str(tmp_path / "m{}.apr".format(i)))
        write_apr2(paths[-1], [raw("w", v)], {"model_type": "t"})
    out = str(tmp_path / "ties.apr")
    assert apr("merge", *paths, "--strategy", "ties", "--density", "0.5", "-o", out)[0] == 0
    assert values_of(out, "w").tolist() == pytest.approx([1.0, -1.5, 0.0, 2.5])


def test_60_onnx_export_is_refused_cleanly(tmp_path):
    src = str(tmp_path / "m.gguf")
    sm.write_gguf_model(src)
    code, _, err = apr("export", src, "--format", "onnx", "-o", str(tmp_path / "m.onnx"))
    assert code == 4 and len(err.strip().splitlines()) == 1
    assert not os.path.exists(str(tmp_path / "m.onnx"))


@pytest.mark.real_model
@pytest.mark.oracle
def test_61_export_gguf_loads_in_llama_cpp(demo_files, tmp_path):  # noqa: F811
    """The demo model: APR -> `apr export --format gguf` -> llama.cpp completes a prompt
    exactly like the original GGUF; tokenizer keys and tensors are unchanged."""
    llama_cpp = pytest.importorskip("llama_cpp")
    out = str(tmp_path / "exported.gguf")
    code, _, err = apr("export", demo_files["apr"], "--format", "gguf", "-o", out)
    assert code == 0, err
    with open_model(demo_files["gguf"]) as src, open_model(out) as dst:
        kv_src, kv_dst = gguf_kv_block(src)["kv"], gguf_kv_block(dst)["kv"]
        for key in ("tokenizer.ggml.model", "tokenizer.ggml.tokens",
                    "tokenizer.ggml.token_type", "tokenizer.ggml.bos_token_id",
                    "tokenizer.ggml.eos_token_id", "tokenizer.chat_template"):
            assert kv_dst[key] == kv_src[key], key
        assert list(dst.tensors) == list(src.tensors)
        assert all(dst.read_raw(n) == src.read_raw(n) for n in src.tensors)
    completions = []
    for path in (demo_files["gguf"], out):
        llm = llama_cpp.Llama(model_path=path, n_ctx=64, verbose=False, seed=0)
        done = llm.create_completion("The capital of France is", max_tokens=6,
                                     temperature=0.0)
        completions.append(done["choices"][0]["text"])
        del llm
    assert completions[0] == completions[1] and completions[0].strip()


def test_62_int8_convert_is_q8_0(tmp_path):
    sm.write_hf_model(tmp_path / "hf", "llama", hidden_size=128, intermediate_size=256)
    src = str(tmp_path / "hf" / "model.safetensors")
    out = str(tmp_path / "int8.apr")
    code, _, err = apr("convert", str(tmp_path / "hf"), "--quantize", "int8", "-o", out)
    assert code == 0, err
    with open_model(src) as f32, open_model(out) as q8:
        for name, info in f32.tensors.items():
            want = "Q8_0" if len(info.shape) == 2 else "F32"
            assert q8.info(name).dtype.name == want, name
            if want == "Q8_0":
                assert q8.info(name).nbytes == info.nbytes * 34 // 128   # 8.5 bits/weight
    ratio = os.path.getsize(out) / os.path.getsize(src)
    assert ratio < 0.28


def test_63_prune_half(tmp_path):
    sm.write_hf_model(tmp_path / "hf", "llama")
    out = str(tmp_path / "pruned.apr")
    assert apr("convert", str(tmp_path / "hf"), "--prune", "0.5", "-o", out)[0] == 0
    name = "model.layers.0.mlp.up_proj.weight"
    got = values_of(out, name)
    assert int(np.count_nonzero(got)) == got.size // 2
    src = values_of(str(tmp_path / "hf" / "model.safetensors"), name)
    kept = got != 0
    assert np.array_equal(got[kept], src[kept])          # survivors untouched
    assert np.min(np.abs(src[kept])) >= np.max(np.abs(src[~kept]))   # smallest went


def test_65_66_explain(tmp_path):
    code, out, _ = apr("explain", "E001")
    assert code == 0 and "E001" in out
    code, out, _ = apr("explain", "E999")
    assert "Unknown Error Code" in out
    sm.write_gguf_model(tmp_path / "m.gguf")
    code, out, err = apr("explain", str(tmp_path / "m.gguf"), "--tensor", "blk.0.attn_qq.weight")
    assert "blk.0.attn_q.weight" in out + err


def test_67_analyze_source(tmp_path):
    good = whisper_like(tmp_path / "w.safetensors")
    code, out, _ = apr("convert", good, "--analyze-source")
    assert code == 0 and "[PASS] model.encoder.layer_norm.weight" in out
    bad = whisper_like(tmp_path / "bad.safetensors", ln_mean=11.0)
    code, out, _ = apr("convert", bad, "--analyze-source")
    assert code == 5 and "[FAIL] model.encoder.layer_norm.weight" in out
    corrupt = tmp_path / "corrupt.safetensors"
    corrupt.write_bytes(open(good, "rb").read()[:-40])
    code, _, err = apr("convert", str(corrupt), "--analyze-source")
    assert code == 4 and "Traceback" not in err


def test_68_69_inline_validation_and_force(tmp_path):
    bad = whisper_like(tmp_path / "bad.safetensors", ln_mean=11.0)
    out = str(tmp_path / "out.apr")
    code, _, err = apr("convert", bad, "-o", out)
    assert code == 5 and "layer_norm.weight" in err and not os.path.exists(out)
    code, _, err = apr("convert", bad, "-o", out, "--force")
    assert code == 0 and os.path.exists(out)
    assert values_of(out, "model.encoder.layer_norm.weight").mean() == pytest.approx(11.0,
                                                                                      abs=0.01)


def test_70_cache_dir(tmp_path):
    src = str(tmp_path / "m.gguf")
    sm.write_gguf_model(src)
    cache = tmp_path / "x"
    code, out, err = apr("import", src, env={"APR_CACHE": str(cache)})
    assert code == 0, err
    assert os.listdir(str(cache / "models")) == ["m.apr"]


def test_71_config_output_format(tmp_path):
    (tmp_path / "config.toml").write_text('[defaults]\noutput_format = "json"\n')
    src = str(tmp_path / "m.gguf")
    sm.write_gguf_model(src)
    code, out, _ = apr("rosetta", "inspect", src,
                       env={"APR_CONFIG": str(tmp_path / "config.toml")})
    assert code == 0 and json.loads(out)["format"] == "gguf"


def test_72_canary_catches_regression(tmp_path):
    sm.write_hf_model(tmp_path / "hf", "llama")
    canary = str(tmp_path / "canary.json")
    assert apr("canary", "create", str(tmp_path / "hf"), "-o", canary)[0] == 0
    assert apr("canary", "check", str(tmp_path / "hf"), "--canary", canary)[0] == 0
    with open_model(str(tmp_path / "hf")) as model:
        raws = [model.read_raw(n) for n in model.tensors]
    name = "model.layers.0.mlp.down_proj.weight"
    raws = [raw(r.name, np.frombuffer(r.data, "<f4").reshape(r.shape) * 1.5)
            if r.name == name else r for r in raws]
    write_safetensors(str(tmp_path / "hf" / "model.safetensors"), raws)
    code, out, _ = apr("canary", "check", str(tmp_path / "hf"), "--canary", canary)
    assert code == 5 and "[FAIL] " + name in out and "Std drift 50.0%" in out


def test_73_json_output_parses(tmp_path):
    src = str(tmp_path / "m.gguf")
    sm.write_gguf_model(src)
    for args in (("inspect", src), ("rosetta", "inspect", src), ("oracle", src)):
        code, out, _ = apr(*args, "--json")
        assert code == 0 and isinstance(json.loads(out), dict), args


# ------------------------------------------------------------------ D. conversion

def test_76_safetensors_import_and_text_file_refused(tmp_path):
    good = whisper_like(tmp_path / "w.safetensors")
    assert apr("import", good, "-o", str(tmp_path / "w.apr"), "--arch", "whisper")[0] == 0
    text = tmp_path / "notes.safetensors"
    text.write_text("this is a text file renamed to look like weights\n" * 4)
    code, _, err = apr("import", str(text), "-o", str(tmp_path / "t.apr"))
    assert code == 4 and "E001" in err and not os.path.exists(str(tmp_path / "t.apr"))


def test_77_pytorch_import_and_malicious_pickle(tmp_path):
    torch = pytest.importorskip("torch")
    sd = {"model.embed_tokens.weight": torch.randn(8, 4)}
    good = str(tmp_path / "m.pt")
    torch.save(sd, good)
    code, _, err = apr("import", good, "-o", str(tmp_path / "m.apr"), "--force")
    assert code == 0, err
    assert values_of(str(tmp_path / "m.apr"), "model.embed_tokens.weight").tolist() == \
        sd["model.embed_tokens.weight"].tolist()
    witness = tmp_path / "pwned"
    evil = tmp_path / "evil.pt"
    evil.write_bytes("cos\nsystem\n(Vtouch {}\ntR.".format(witness).encode())
    code, _, err = apr("import", str(evil), "-o", str(tmp_path / "e.apr"))
    assert code == 5 and "refused unsafe pickle" in err and not witness.exists()


def test_78_gguf_import_and_unknown_arch(tmp_path):
    src = str(tmp_path / "m.gguf")
    sm.write_gguf_model(src)
    assert apr("import", src, "-o", str(tmp_path / "m.apr"))[0] == 0
    with open_model(src) as model:
        block = gguf_kv_block(model)
        tensors = [model.read_raw(n) for n in model.tensors]
    kv = dict(block["kv"], **{"general.architecture": "mystery"})
    write_gguf(str(tmp_path / "odd.gguf"), tensors, kv, block.get("types"))
    code, _, err = apr("import", str(tmp_path / "odd.gguf"), "-o", str(tmp_path / "o.apr"))
    assert code == 4 and "unknown architecture" in err and "mystery" in err


def test_79_round_trips_without_drift(tmp_path):
    src = str(tmp_path / "m.gguf")
    sm.write_gguf_model(src, quant="Q8_0")
    apr_file = str(tmp_path / "m.apr")
    assert apr("import", src, "-o", apr_file)[0] == 0
    for fmt in ("safetensors", "gguf"):
        mid = str(tmp_path / ("mid." + fmt))
        back = str(tmp_path / ("back_" + fmt + ".apr"))
        assert apr("export", apr_file, "--format", fmt, "-o", mid)[0] == 0
        assert apr("import", mid, "-o", back)[0] == 0
        code, result = apr_json("rosetta", "verify", apr_file, back, "--tolerance", "0")
        assert code == 0 and result["max_delta"] == 0.0, fmt


def test_80_hf_mapping(tmp_path):
    sm.write_hf_model(tmp_path / "hf", "llama")
    out = str(tmp_path / "m.apr")
    assert apr("import", str(tmp_path / "hf"), "-o", out, "--names", "apr")[0] == 0
    with open_model(out) as model:
        assert "layers.0.attn.q_proj.weight" in model.tensors
        assert "layers.1.mlp.down_proj.weight" in model.tensors
    st = str(tmp_path / "hf" / "model.safetensors")
    with open_model(st) as model:
        raws = [model.read_raw(n) for n in model.tensors]
    raws = [RawTensor(r.name.replace("model.layers.0.", "model.layer.0."), r.dtype, r.shape,
                      r.data) for r in raws]
    write_safetensors(st, raws)
    code, _, err = apr("import", str(tmp_path / "hf"), "-o", str(tmp_path / "x.apr"))
    assert code == 5 and "model.layer.0." in err and "name map" in err


def test_81_quantization_is_kept(tmp_path):
    src = str(tmp_path / "m.gguf")
    sm.write_gguf_model(src, quant="Q8_0")
    out = str(tmp_path / "m.apr")
    assert apr("import", src, "-o", out)[0] == 0
    with open_model(src) as a, open_model(out) as b:
        assert b.info("blk.0.attn_q.weight").dtype.name == "Q8_0"
        assert all(a.read_raw(n) == b.read_raw(n) for n in a.tensors)


def test_82_83_precision_bf16_and_back(tmp_path):
    sm.write_hf_model(tmp_path / "hf", "llama")
    bf16, f32 = str(tmp_path / "bf16.apr"), str(tmp_path / "f32.apr")
    assert apr("convert", str(tmp_path / "hf"), "--precision", "bf16", "-o", bf16)[0] == 0
    assert apr("convert", bf16, "--precision", "f32", "-o", f32)[0] == 0
    name = "model.layers.0.self_attn.q_proj.weight"
    with open_model(bf16) as m16, open_model(f32) as m32:
        assert m16.info(name).dtype.name == "BF16" and m32.info(name).dtype.name == "F32"
        r16 = m16.read_raw(name)
    # BF16 -> F32 is exact: the F32 bits are the BF16 bits shifted up 16
    want = (np.frombuffer(r16.data, "<u2").astype("<u4") << 16).view("<f4")
    assert np.array_equal(values_of(f32, name).reshape(-1), want)


def test_84_85_86_vocab_special_tokens_metadata(tmp_path):
    for n_tokens in (64, 60):    # full, and a truncated source vocabulary
        src = gguf_with_vocab(tmp_path / "v{}.gguf".format(n_tokens), n_tokens,
                              license_name="apache-2.0")
        out = str(tmp_path / "v{}.apr".format(n_tokens))
        code, result = apr_json("import", src, "-o", out)
        assert code == 0 and not result["warnings"]
        with open_model(out) as model:
            kv = model.metadata["gguf"]["kv"]
            assert len(kv["tokenizer.ggml.tokens"]) == n_tokens
            assert (kv["tokenizer.ggml.bos_token_id"], kv["tokenizer.ggml.eos_token_id"],
                    kv["tokenizer.ggml.unknown_token_id"]) == (1, 2, 0)
            assert model.metadata["license"] == "apache-2.0"
    bare = gguf_with_vocab(tmp_path / "bare.gguf")
    code, result = apr_json("import", bare, "-o", str(tmp_path / "bare.apr"))
    assert code == 0 and any("no license" in w for w in result["warnings"])


def test_87_tensor_names_normalised(tmp_path):
    src = whisper_like(tmp_path / "w.safetensors")
    out = str(tmp_path / "w.apr")
    assert apr("import", src, "-o", out, "--arch", "whisper", "--names", "apr")[0] == 0
    with open_model(out) as model:
        names = list(model.tensors)
    assert "encoder.conv1.weight" in names and "decoder.token_embedding" in names
    assert not [n for n in names if n.startswith("model.")]


def test_88_llama_q_k_rows_permuted_for_gguf(tmp_path):
    """HF LLaMA -> GGUF: Q/K rows get llama.cpp's RoPE permutation (convert_hf_to_gguf's
    `permute`), V does not; shapes otherwise identical."""
    sm.write_hf_model(tmp_path / "hf", "llama")
    apr_file, out = str(tmp_path / "m.apr"), str(tmp_path / "m.gguf")
    assert apr("import", str(tmp_path / "hf"), "-o", apr_file)[0] == 0
    assert apr("export", apr_file, "--format", "gguf", "-o", out)[0] == 0
    st = str(tmp_path / "hf" / "model.safetensors")
    for role, heads in (("q", 4), ("k", 2), ("v", None)):
        hf = values_of(st, "model.layers.0.self_attn.{}_proj.weight".format(role))
        got = values_of(out, "blk.0.attn_{}.weight".format(role))
        want = hf if heads is None else hf.reshape(heads, 2, hf.shape[0] // heads // 2,
                                                   hf.shape[1]).swapaxes(1, 2).reshape(hf.shape)
        assert np.array_equal(got, want), role


def test_90_sharded_import_and_missing_shard(tmp_path):
    from apr_core.formats.safetensors_index import write_safetensors_sharded
    sm.write_hf_model(tmp_path / "hf", "llama")
    with open_model(str(tmp_path / "hf")) as model:
        raws = [model.read_raw(n) for n in model.tensors]
    shard_dir = tmp_path / "sharded"
    shard_dir.mkdir()
    write_safetensors_sharded(str(shard_dir), raws, max_shard_size=40000)
    (shard_dir / "config.json").write_text((tmp_path / "hf" / "config.json").read_text())
    shards = sorted(n for n in os.listdir(str(shard_dir)) if n.endswith(".safetensors"))
    assert len(shards) >= 2
    out = str(tmp_path / "s.apr")
    assert apr("import", str(shard_dir), "-o", out)[0] == 0
    with open_model(out) as model:
        assert sorted(model.tensors) == sorted(r.name for r in raws)
    os.unlink(str(shard_dir / shards[1]))
    code, _, err = apr("import", str(shard_dir), "-o", str(tmp_path / "t.apr"))
    assert code == 3 and shards[1] in err


def test_91_remote_import_fails_gracefully(tmp_path):
    """A Hub that cannot be reached (HF_ENDPOINT on a closed loopback port): one line,
    E013 naming the endpoint and the reference, exit 3, nothing written."""
    from server_util import free_port
    endpoint = "http://127.0.0.1:{}".format(free_port())
    out = tmp_path / "w.apr"
    code, _, err = apr("import", "hf://openai/whisper-tiny", "-o", str(out),
                       env={"HF_ENDPOINT": endpoint, "HF_HUB_OFFLINE": "0", "APR_OFFLINE": "0",
                            "HF_HOME": str(tmp_path / "hf")})
    assert code == 3 and len(err.strip().splitlines()) == 1, err
    assert "E013" in err and endpoint in err and "hf://openai/whisper-tiny" in err
    assert not out.exists() and os.listdir(str(tmp_path)) in (["hf"], [])


def test_92_second_import_is_a_cache_hit(tmp_path):
    src = str(tmp_path / "m.gguf")
    sm.write_gguf_model(src)
    env = {"APR_CACHE": str(tmp_path / "cache")}
    code, out, _ = apr("import", src, "--json", env=env)
    assert code == 0 and json.loads(out)["cached"] is False
    cached = tmp_path / "cache" / "models" / "m.apr"
    stamp = cached.stat().st_mtime_ns
    code, out, _ = apr("import", src, "--json", env=env)
    assert json.loads(out)["cached"] is True and cached.stat().st_mtime_ns == stamp
    sm.write_gguf_model(src, seed=5)    # the source changes: a fresh import
    code, out, _ = apr("import", src, "--json", env=env)
    assert json.loads(out)["cached"] is False


def test_93_source_checksum(tmp_path):
    src = str(tmp_path / "m.gguf")
    sm.write_gguf_model(src)
    digest = hashlib.sha256(open(src, "rb").read()).hexdigest()
    assert apr("import", src, "-o", str(tmp_path / "a.apr"), "--sha256", digest)[0] == 0
    with open(src, "r+b") as handle:
        handle.seek(-1, 2)
        handle.write(b"\x55")
    code, _, err = apr("import", src, "-o", str(tmp_path / "b.apr"), "--sha256", digest)
    assert code == 5 and "E004" in err and not os.path.exists(str(tmp_path / "b.apr"))


def test_94_non_commercial_license_warning(tmp_path):
    src = gguf_with_vocab(tmp_path / "nc.gguf", license_name="cc-by-nc-4.0")
    code, result = apr_json("import", src, "-o", str(tmp_path / "nc.apr"))
    assert code == 0 and any("restricts commercial use" in w for w in result["warnings"])


def test_95_architecture_detection(tmp_path):
    for family, extra in (("llama", {}), ("qwen2", {}), ("gpt2", {"hidden_act": "gelu_new"})):
        sm.write_hf_model(tmp_path / family, family, **extra)
        st = str(tmp_path / family / "model.safetensors")   # no config.json beside it
        os.rename(st, str(tmp_path / (family + ".safetensors")))
        code, result = apr_json("import", str(tmp_path / (family + ".safetensors")), "-o",
                                str(tmp_path / (family + ".apr")))
        assert code == 0 and result["architecture"] == family
    odd = str(tmp_path / "odd.safetensors")
    write_safetensors(odd, [raw("mystery.kernel", [1.0])])
    code, _, err = apr("import", odd, "-o", str(tmp_path / "odd.apr"))
    assert code == 5 and "pass --arch" in err


def test_96_output_path(tmp_path):
    src = str(tmp_path / "m.gguf")
    sm.write_gguf_model(src)
    out = tmp_path / "deep" / "er"
    out.mkdir(parents=True)
    assert apr("import", src, "-o", str(out / "named.apr"))[0] == 0
    assert os.listdir(str(out)) == ["named.apr"]


def test_97_every_writing_command_refuses_to_overwrite(tmp_path):
    src = str(tmp_path / "m.gguf")
    sm.write_gguf_model(src)
    apr_file = str(tmp_path / "m.apr")
    assert apr("import", src, "-o", apr_file)[0] == 0
    target = tmp_path / "exists.apr"
    commands = [
        ("import", src, "-o", "{}"), ("export", apr_file, "--format", "gguf", "-o", "{}"),
        ("convert", src, "-o", "{}", "--format", "apr"),
        ("convert", src, "-o", "{}", "--format", "apr", "--prune", "0.5"),
        ("merge", apr_file, apr_file, "-o", "{}"),
        ("canary", "create", src, "-o", "{}"), ("rosetta", "convert", src, "{}"),
        ("rosetta", "fingerprint", src, "-o", "{}")]
    for command in commands:
        target.write_bytes(b"precious")
        args = [a.format(target) if a == "{}" else a for a in command]
        code, _, err = apr(*args)
        assert code == 2 and "exists" in err, command
        assert target.read_bytes() == b"precious", command
        code, _, err = apr(*args, "--force")
        assert code == 0 and target.read_bytes() != b"precious", (command, err)


def test_98_disk_full_leaves_no_file(tiny_disk, tmp_path):
    sm.write_hf_model(tmp_path / "hf", "llama", hidden_size=128, intermediate_size=256)
    src = str(tmp_path / "hf")
    big = str(tmp_path / "big.apr")
    assert apr("import", src, "-o", big)[0] == 0
    assert os.path.getsize(big) > 256 * 1024
    for command in (("import", src, "-o", "{}/a.apr"),
                    ("export", big, "--format", "gguf", "-o", "{}/a.gguf"),
                    ("merge", big, big, "-o", "{}/m.apr"),
                    ("convert", big, "--prune", "0.1", "-o", "{}/p.apr")):
        args = [a.format(tiny_disk) if "{}" in a else a for a in command]
        code, _, err = apr(*args)
        assert code == 3 and "disk full" in err, (command, err)
        assert os.listdir(str(tiny_disk)) == [], command
