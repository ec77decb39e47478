"""Seed 000 §11 checklist, sections A (format & structural integrity, 1-24) and B (tensor
physics & statistics, 26-35): each item a real file and a real `apr` command, passing on
the good file and failing as the checklist's "Falsification" column says.

Bad files are assembled field by field with tests/apr2_builders.py (shared with
tests/formats/test_apr2_badfiles.py, which checks the same defects at the library level); the CRC is recomputed after each
edit unless the item is about the CRC, so exactly one defect remains.

Items not (fully) testable through these commands:
| #  | why                                                                              |
|----|----------------------------------------------------------------------------------|
| 10 | Endianness: this host is little-endian; the test pins the LE byte layout with     |
|    | `apr hex --tensor` and shows a byte-swapped payload gives other numbers instead.  |
| 13 | Appended garbage is refused (E002) rather than warned about: the footer must be  |
|    | the last 16 bytes, a stricter reading than the checklist's "should warn".        |
| 23 | Signatures: `apr validate` verifies the embedded Ed25519 signature (integrity);  |
|    | signing and trusted-key checks are the security commands' (tests/formats/test_sign.py).  |
| 24 | Encryption: decrypting with a key is the security commands' job; the format-level |
|    | test is tests/formats/test_apr2.py::test_encrypted_payloads_need_a_key.                   |
| 25 | WASM load: not a CLI item (wasm_tests/).                                         |
"""
import json
import os
import struct

import numpy as np
import pytest

from apr_core import dtypes
from apr_core.formats import flags as F
from apr_core.formats.apr2 import write_apr2
from apr_core.formats.apr2_layout import FOOTER_MAGIC, HEADER_SIZE, Footer, Header, MAGIC
from apr_core.conversion.convert import convert
from apr_core.formats.shards import write_sharded
from apr_core.quant import quantize
from apr_core.tensor import RawTensor
from cli_util import apr, apr_json
from synthetic_models import write_gguf_model
from apr2_builders import assemble, f32_entry, good_file, refooter

pytestmark = pytest.mark.native
F32 = dtypes.BY_NAME["F32"]


def put(tmp_path, name, data):
    path = tmp_path / name
    path.write_bytes(data)
    return str(path)


def fails(args, exit_code, code_name):
    code, out, err = apr(*args)
    assert code == exit_code, (args, out, err)
    assert err.startswith("apr: error: {} ".format(code_name)) and err.count("\n") == 1, err
    return err


@pytest.fixture
def good(tmp_path):
    return put(tmp_path, "good.apr", good_file())


# --- A. Format & structural integrity -------------------------------------------------

def test_a01_magic(tmp_path, good):
    assert open(good, "rb").read(4) == b"APR2"
    assert apr_json("inspect", good, "--header")[1]["magic"] == "APR2"
    data = good_file()
    fails(("inspect", put(tmp_path, "v1.apr", b"APR1" + data[4:])), 4, "E001")
    fails(("inspect", put(tmp_path, "rnd.apr", os.urandom(4) + data[4:])), 4, "E001")


def test_a02_header_size(tmp_path, good):
    info = apr_json("inspect", good, "--header")[1]
    assert info["header_size"] == HEADER_SIZE == 32 and info["metadata_offset"] == 32
    data = good_file()
    offset = info["data_offset"]
    fails(("inspect", put(tmp_path, "ins.apr", data[:offset - 1] + b"\0" + data[offset - 1:])),
          4, "E002")


def test_a03_version(tmp_path):
    assert apr_json("inspect", put(tmp_path, "v2.apr", assemble([])), "--header")[1][
        "version"] == "2.0"
    fails(("inspect", put(tmp_path, "v3.apr", assemble([], version=(3, 0)))), 4, "E003")


def test_a04_checksum(tmp_path, good):
    assert apr("validate", good, "--checksum")[0] == 0
    data = bytearray(good_file())
    data[-20] ^= 0x04
    fails(("validate", put(tmp_path, "flip.apr", bytes(data)), "--checksum"), 5, "E004")


def test_a05_json_metadata(tmp_path, good):
    code, out, _ = apr("inspect", good, "--json")
    assert code == 0 and json.loads(out)["metadata"] == {"apr_version": "2.0.0"}
    bad = put(tmp_path, "j.apr", assemble([], meta=b'{"apr_version": "2.0.0"]'))
    fails(("inspect", bad, "--json"), 4, "E001")


def test_a06_alignment_lint(tmp_path, good):
    _, report = apr_json("lint", good)
    assert not [i for i in report["issues"] if "align" in i["message"]]
    entries = [f32_entry(b"a", shape=(1,)), f32_entry(b"b", offset=4, shape=(3,))]
    loose = put(tmp_path, "a1.apr", assemble(entries, struct.pack("<4f", 1, 2, 3, 4), flags=0,
                                             align=1))
    code, report = apr_json("lint", loose)
    levels = {(i["level"], i["category"]) for i in report["issues"] if "align" in i["message"]}
    assert code == 0 and ("WARN", "Structure") in levels and ("INFO", "Efficiency") in levels


def test_a07_index_sorted(tmp_path):
    swapped = assemble([f32_entry(b"b", offset=64), f32_entry(b"a")], b"\0" * 80)
    fails(("validate", put(tmp_path, "swap.apr", swapped)), 4, "E002")


def test_a08_compression(tmp_path):
    path = str(tmp_path / "c.apr")
    write_apr2(path, [RawTensor("w", F32, (4096,), bytes(4 * 4096))], {}, compression="lz4")
    info = apr_json("inspect", path, "--full")[1]
    assert "COMPRESSED" in info["flags"] and info["tensors"][0]["codec"] == "lz4"
    bad = assemble([f32_entry(b"a", flags=7, size=10, raw_size=16)], b"\0" * 10)
    fails(("validate", put(tmp_path, "codec.apr", bad)), 4, "E009")


def test_a09_sharding(tmp_path):
    tensors = [RawTensor(n, F32, (256,), bytes(1024)) for n in ("x", "y", "z")]
    write_sharded(tmp_path / "m.apr", tensors, {}, max_shard_size=1500)
    assert apr("validate", str(tmp_path / "m.apr"))[0] == 0
    assert apr_json("inspect", str(tmp_path / "m.apr"))[1]["tensor_count"] == 3
    (tmp_path / "m-00002-of-00003.apr").unlink()
    err = fails(("inspect", str(tmp_path / "m.apr")), 3, "E007")
    assert "m-00002-of-00003.apr" in err


def test_a10_little_endian_layout(tmp_path):
    values = np.array([1.0, 2.0, -3.5, 0.25], np.float32)
    le = str(tmp_path / "le.apr")
    write_apr2(le, [RawTensor("w", F32, (4,), values.astype("<f4").tobytes())], {})
    report = apr_json("hex", le, "--tensor", "w")[1]
    assert bytes.fromhex(report["hex"]) == struct.pack("<4f", *values)
    assert report["values"] == values.tolist()
    be = str(tmp_path / "be.apr")
    write_apr2(be, [RawTensor("w", F32, (4,), values.astype(">f4").tobytes())], {})
    assert apr_json("hex", be, "--tensor", "w")[1]["values"] != values.tolist()


def test_a11_flags(tmp_path):
    data = bytearray(good_file())
    flags = struct.unpack_from("<I", data, 8)[0]
    struct.pack_into("<I", data, 8, flags | 1 << 20)
    path = put(tmp_path, "flag.apr", refooter(bytes(data)))
    code, info = apr_json("inspect", path, "--header")
    assert code == 0 and "BIT20" in info["flags"] and "ALIGNED_64" in info["flags"]
    assert any("unknown header flag bits" in w for w in info["warnings"])
    assert apr("validate", path)[0] == 0


def test_a12_footer(tmp_path, good):
    assert open(good, "rb").read()[-12:-8] == FOOTER_MAGIC == b"2RPA"
    fails(("inspect", put(tmp_path, "cut.apr", good_file()[:-16])), 4, "E002")


def test_a13_file_size(tmp_path, good):
    size = apr_json("inspect", good, "--header")[1]["file_size"]
    assert size == os.path.getsize(good) == struct.unpack("<Q", good_file()[-8:])[0]
    err = fails(("inspect", put(tmp_path, "tail.apr", good_file() + b"garbage")), 4, "E002")
    assert "appended" in err


def test_a14_tensor_offsets(tmp_path, good):
    assert apr_json("hex", good, "--tensor", "b")[1]["values"] == [1.0, 2.0, -3.5, 0.25]
    beyond = assemble([f32_entry(b"a", offset=4096)], b"\0" * 16)
    fails(("inspect", put(tmp_path, "off.apr", beyond)), 4, "E002")


def test_a15_empty_model(tmp_path):
    path = put(tmp_path, "empty.apr", assemble([]))
    code, report = apr_json("validate", path)
    assert code == 0 and report["valid"] and report["tensors_checked"] == 0
    assert apr_json("inspect", path)[1]["tensor_count"] == 0


def test_a16_huge_header(tmp_path):
    """A header claiming 200 MB of JSON (a sparse file): refused with E008 before reading."""
    path = str(tmp_path / "huge.apr")
    meta_size = 200 * 2 ** 20
    header = Header(MAGIC, 2, 0, F.ALIGNED_64, HEADER_SIZE, meta_size, HEADER_SIZE + meta_size,
                    8, HEADER_SIZE + meta_size + 64)
    size = HEADER_SIZE + meta_size + 64 + 16
    with open(path, "wb") as handle:
        handle.write(header.pack() + b"{")
        handle.truncate(size)
        handle.seek(size - 16)
        handle.write(Footer(0, FOOTER_MAGIC, size).pack())
    fails(("inspect", path), 1, "E008")


def test_a17_utf8_names(tmp_path):
    fails(("inspect", put(tmp_path, "u.apr", assemble([f32_entry(b"a\xff")], b"\0" * 16))),
          4, "E002")


def test_a18_duplicate_names(tmp_path):
    dup = assemble([f32_entry(b"tensor.a"), f32_entry(b"tensor.a", offset=64)], b"\0" * 80)
    fails(("tensors", put(tmp_path, "dup.apr", dup)), 4, "E002")


def test_a19_dimension_limit(tmp_path):
    eight = put(tmp_path, "8.apr", assemble([f32_entry(b"a", shape=(1,) * 8)], b"\0" * 4))
    assert apr_json("tensors", eight)[1][0]["shape"] == [1] * 8
    nine = put(tmp_path, "9.apr", assemble([f32_entry(b"a", shape=(1,) * 9)], b"\0" * 4))
    fails(("tensors", nine), 4, "E002")


def test_a20_scalar(tmp_path):
    path = put(tmp_path, "s.apr", assemble([f32_entry(b"s", shape=())], struct.pack("<f", 7.5)))
    code, rows = apr_json("tensors", path, "--stats")
    assert code == 0 and rows[0]["shape"] == [] and rows[0]["count"] == 1
    assert (rows[0]["mean"], rows[0]["min"], rows[0]["max"]) == (7.5, 7.5, 7.5)


def test_a21_datatypes(tmp_path):
    for dtype in dtypes.BY_NAME.values():
        if dtype.apr_id is None or dtype.quantized:
            continue
        path = str(tmp_path / "{}.apr".format(dtype.name))
        write_apr2(path, [RawTensor("t", dtype, (32,), bytes(dtype.nbytes((32,))))], {})
        assert apr_json("tensors", path)[1][0]["dtype"] == dtype.name
    bad = assemble([f32_entry(b"a", dtype_id=255)], b"\0" * 16)
    fails(("tensors", put(tmp_path, "255.apr", bad)), 4, "E001")


def test_a22_padding(tmp_path, good):
    values = struct.pack("<4f", 1.0, 2.0, 3.0, 4.0)
    dirty = put(tmp_path, "pad.apr", assemble([f32_entry(b"a"), f32_entry(b"b", offset=64)],
                                              values + b"\xff" * 48 + values))
    code, report = apr_json("lint", dirty)
    assert code == 0 and {"level": "WARN", "category": "Structure",
                          "message": "padding bytes are not zero in 1 gap(s), first at offset "
                          "{}".format(apr_json("inspect", dirty, "--header")[1]["data_offset"]
                                      + 16)} in report["issues"]
    assert not [i for i in apr_json("lint", good)[1]["issues"] if "padding" in i["message"]]


def test_a23_signature(tmp_path, good):
    sign = pytest.importorskip("apr_core.formats.apr2_sign")
    from apr_core.crypto.keys import from_seed
    signed = str(tmp_path / "signed.apr")
    sign.sign_apr2(good, signed, from_seed(bytes(range(32))))
    code, report = apr_json("validate", signed, "--quality")
    assert code == 0 and report["signature"]["status"] != "unverified"
    assert report["quality"]["categories"]["security"] == 25
    assert apr_json("validate", good, "--quality")[1]["quality"]["categories"]["security"] == 15
    data = bytearray(open(signed, "rb").read())
    data[-16 - 96 + 3] ^= 0x01               # one byte of the 64-byte signature
    # the footer CRC covers the block: recompute it so only the signature is wrong
    tampered = put(tmp_path, "tampered.apr", refooter(bytes(data)))
    fails(("validate", tampered), 5, "E006")


# --- B. Tensor physics & statistics ---------------------------------------------------

def f32_model(tmp_path, name, tensors, meta=None):
    path = str(tmp_path / name)
    write_apr2(path, [RawTensor(n, F32, np.shape(v), np.asarray(v, np.float32).tobytes())
                      for n, v in tensors.items()], meta or {})
    return path


@pytest.mark.parametrize("item,word", [(26, 0x7FC00000), (27, 0x7F800000)])
def test_b26_b27_nan_inf(tmp_path, item, word):
    values = np.linspace(-1, 1, 8).astype(np.float32)
    good = f32_model(tmp_path, "ok.apr", {"w": values})
    assert apr("validate", good, "--nan-check")[0] == 0
    raw = bytearray(values.tobytes())
    struct.pack_into("<I", raw, 12, word)
    bad = f32_model(tmp_path, "bad.apr", {"w": np.frombuffer(bytes(raw), np.float32)})
    code, report = apr_json("validate", bad, "--nan-check")
    assert code == 5 and report["findings"][0]["message"] == (
        "1 NaN and 0 Inf values" if item == 26 else "0 NaN and 1 Inf values")


def stats_row(path, name):
    code, rows = apr_json("tensors", path, "--stats")
    assert code == 0
    return next(r for r in rows if r["name"] == name)


@pytest.mark.parametrize("item,name,good_value,bad_value,status", [
    (28, "encoder.layer_norm.weight", 1.0, 11.0, "FAIL"),
    (29, "encoder.layer_norm.bias", 0.0, 5.0, "FAIL"),
    (35, "encoder.layers.0.fc1.weight", 0.0, 1.0, "WARN"),
])
def test_b28_b29_b35_means(tmp_path, item, name, good_value, bad_value, status):
    rng = np.random.RandomState(item)
    noise = 0.02 * rng.standard_normal((16, 16)).astype(np.float32)
    good = f32_model(tmp_path, "ok.apr", {name: good_value + noise})
    assert stats_row(good, name)["status"] == "OK"
    bad = f32_model(tmp_path, "bad.apr", {name: bad_value + noise})
    row = stats_row(bad, name)
    assert row["status"] == status and row["findings"][0]["message"].startswith(
        "{} mean {:.4g}".format({28: "LayerNorm weight (gamma)", 29: "LayerNorm bias (beta)",
                                35: "attention/linear weight"}[item], row["mean"]))
    assert apr("validate", bad, "--stats")[0] == (5 if status == "FAIL" else 0)


def test_b30_embedding_std(tmp_path):
    rng = np.random.RandomState(30)
    good = f32_model(tmp_path, "ok.apr", {"token_embedding": 0.03 * rng.standard_normal((64, 8))})
    assert stats_row(good, "token_embedding")["status"] == "OK"
    bad = f32_model(tmp_path, "bad.apr", {"token_embedding": rng.standard_normal((64, 8))})
    row = stats_row(bad, "token_embedding")
    assert row["status"] == "WARN" and row["findings"][0]["message"] == \
        "token embedding std {:.4g} outside [0.0, 0.2]".format(row["std"])


def test_b31_zero_tensor(tmp_path):
    path = f32_model(tmp_path, "z.apr", {"w": np.zeros(16), "v": np.ones(16)})
    code, out, _ = apr("validate", path, "--zero-check")
    assert code == 0 and "[WARN] w: every value is 0.0" in out and "v:" not in out


def _rewrite(src, dst, change, meta_change=None):
    from apr_core.formats.open import open_model
    with open_model(src) as model:
        meta = json.loads(json.dumps(model.metadata))
        tensors = [change(model.read_raw(n)) for n in model.tensors]
    if meta_change:
        meta_change(meta)
    write_apr2(dst, tensors, meta)
    return dst


@pytest.fixture
def family_model(tmp_path):
    gguf = str(tmp_path / "m.gguf")
    write_gguf_model(gguf, quant="Q8_0")
    path = str(tmp_path / "m.apr")
    convert(gguf, path)
    return path


def test_b32_shape_match(tmp_path, family_model):
    assert apr("validate", family_model, "--shapes")[0] == 0

    def shrink(raw):
        if raw.name != "blk.0.attn_norm.weight":
            return raw
        return RawTensor(raw.name, raw.dtype, (63,), raw.data[:63 * 4])
    bad = _rewrite(family_model, str(tmp_path / "bad.apr"), shrink)
    code, report = apr_json("validate", bad, "--shapes")
    assert code == 5 and "blk.0.attn_norm.weight" in report["shape_problems"][0]
    assert "(expected=(64,), family='llama', got=(63,)" in report["shape_problems"][0]


def test_b33_vocab_match(tmp_path, family_model):
    def more_vocab(meta):
        meta["architecture"]["n_vocab"] = 65
        meta["gguf"]["kv"]["llama.vocab_size"] = 65
    bad = _rewrite(family_model, str(tmp_path / "bad.apr"), lambda raw: raw, more_vocab)
    code, report = apr_json("validate", bad, "--shapes")
    assert code == 5
    assert "metadata n_vocab 65 does not match token_embd.weight rows 64" in \
        report["shape_problems"]


def test_b34_quantization_range(tmp_path):
    q8 = dtypes.BY_NAME["Q8_0"]
    values = np.random.RandomState(34).standard_normal((4, 64)).astype(np.float32)
    data = quantize(values, q8)
    good = str(tmp_path / "ok.apr")
    write_apr2(good, [RawTensor("blk.0.ffn_up.weight", q8, (4, 64), data)], {})
    row = stats_row(good, "blk.0.ffn_up.weight")
    assert row["status"] == "OK"
    assert np.frombuffer(data, np.uint8).reshape(-1, 34)[:, 2:].view(np.int8).min() >= -127
    raw = bytearray(data)
    raw[2 + 5] = 0x80                                   # quant 5 of block 0 := -128
    bad = str(tmp_path / "bad.apr")
    write_apr2(bad, [RawTensor("blk.0.ffn_up.weight", q8, (4, 64), bytes(raw))], {})
    row = stats_row(bad, "blk.0.ffn_up.weight")
    assert row["status"] == "WARN" and row["findings"] == [{
        "tensor": "blk.0.ffn_up.weight", "severity": "warn", "check": "quant",
        "message": "1 quant(s) of -128 outside the symmetric range [-127, 127]"}]
