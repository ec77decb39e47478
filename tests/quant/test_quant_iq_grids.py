"""Grid-based i-quants (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M) and NVFP4
against gguf-py (the oracle), bit for bit.

test_dequant checks every type gguf-py decodes on small samples (and, through its digest
table, on Python 3.8 + numpy 1.17); here the new types also meet: samples large enough
to hit every codebook row and many chunks, blocks walking every (grid row, sign pattern)
pair of the IQ2 tables, decoding row ranges into a reused buffer, the
packaged codebook file against what scripts/gen_iq_grids.py reads from gguf-py, bad
input, and a whole tensor of each type written by apr's GGUF writer, read back through
gguf-py's GGUFReader and decoded to the same bits.
"""
from __future__ import annotations

import importlib.util
import os

import numpy as np
import pytest

from apr_core import dtypes
from apr_core.errors import AprError, ErrorCode
from apr_core.quant import dequantize, dequantize_rows, supported_types
from apr_core.quant.kernels import iquants_grid
from test_dequant import (_n_blocks, assert_same_bits, assert_same_values, gguf, needs_gguf,
                          oracle, sample)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TYPES = ("IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S", "IQ1_S", "IQ1_M", "NVFP4")


def test_every_type_is_registered():
    assert set(TYPES) <= set(supported_types("dequantize"))


# --------------------------------------------------------------------------- oracle: gguf-py

@pytest.mark.oracle
@needs_gguf
@pytest.mark.parametrize("name", TYPES)
@pytest.mark.parametrize("finite", [True, False])
def test_matches_gguf_py_on_many_blocks(name, finite):
    """1280 blocks of 256 (5120 of 64 for NVFP4): ~40k grid lookups reach practically every
    codebook row, across several kernel chunks with a partial last one; raw random bytes
    (inf/NaN scales) compare NaN-aware."""
    shape = (5, 65536)
    blocks = sample(name, _n_blocks(name, shape), seed=5, finite=finite)
    ref = oracle(blocks, name, shape[0])
    ours = dequantize(blocks.tobytes(), name, shape)
    if finite:
        assert np.isfinite(ref).all() and np.count_nonzero(ref) > ref.size // 2
        assert_same_bits(ours, ref)
    else:
        assert_same_values(ours, ref)


def _every_pair(name):
    """IQ2 blocks whose 8-element groups walk every (grid row, sign pattern) pair in turn:
    the pre-signed tables have 32768 (IQ2_XXS), 65536 (IQ2_XS), 262144 (IQ2_S) entries,
    more than random blocks reach."""
    rows, signs = {"IQ2_XXS": (256, 128), "IQ2_XS": (512, 128), "IQ2_S": (1024, 256)}[name]
    pair = np.arange(rows * signs)
    row, sign = pair // signs, pair % signs                      # group k of the tensor
    blocks = sample(name, rows * signs // 32, seed=9)
    n = blocks.shape[0]
    if name == "IQ2_XXS":   # sub-block: u8 rows[4], u32 (4 x 7-bit signs | scale << 28)
        sub = blocks[:, 2:].reshape(n, 8, 8)
        sub[:, :, :4] = row.reshape(n, 8, 4)
        aux = (sign.reshape(n, 8, 4) << np.array([0, 7, 14, 21])).sum(axis=2)
        aux |= (sub[:, :, 7].astype(np.int64) >> 4) << 28                 # keep the scale
        sub[:, :, 4:] = aux.astype("<u4").view(np.uint8).reshape(n, 8, 4)
    elif name == "IQ2_XS":  # u16 = row | sign << 9
        words = (row | sign << 9).astype("<u2").reshape(n, 32)
        blocks[:, 2:66] = words.view(np.uint8)
    else:                   # low 8 bits, sign bytes, then 2 high bits per group in qh
        blocks[:, 2:34] = (row & 255).reshape(n, 32)
        blocks[:, 34:66] = sign.reshape(n, 32)
        high = (row >> 8).reshape(n, 8, 4) << np.array([0, 2, 4, 6])
        blocks[:, 66:74] = high.sum(axis=2)
    return blocks


@pytest.mark.oracle
@needs_gguf
@pytest.mark.parametrize("name", ["IQ2_XXS", "IQ2_XS", "IQ2_S"])
def test_every_grid_row_and_sign_pattern_matches_gguf_py(name):
    blocks = _every_pair(name)
    shape = (blocks.shape[0] // 16, 4096)
    assert_same_bits(dequantize(blocks, name, shape), oracle(blocks, name, shape[0]))


@pytest.mark.oracle
@needs_gguf
@pytest.mark.parametrize("name", TYPES)
def test_row_ranges_into_a_reused_buffer_match_gguf_py(name):
    blocks = sample(name, _n_blocks(name, (6, 512)), seed=3)
    ref = oracle(blocks, name, 6)
    out = np.full(3 * 512, np.nan, np.float32)
    assert_same_bits(dequantize_rows(blocks, name, (6, 512), 2, 5, out=out), ref[2:5])


# --------------------------------------------------------------------------- the codebooks

def _generator():
    spec = importlib.util.spec_from_file_location(
        "gen_iq_grids", os.path.join(ROOT, "scripts", "gen_iq_grids.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@needs_gguf
def test_packaged_grid_file_is_gguf_py_codebooks():
    gen = _generator()
    with open(gen.OUT_PATH, "rb") as handle:
        assert handle.read() == gen.render(), \
            "apr_core/data/iq_grids.bin is stale: run scripts/gen_iq_grids.py"


def test_grid_tables_have_ggml_shapes_and_values():
    """Independent of gguf-py: sizes, value sets and ksigns' even-parity rule."""
    g = iquants_grid.grids()
    assert {name: table.shape for name, table in g.items()} == {
        name: (rows, width) for name, rows, width in iquants_grid.GRID_TABLES}
    assert set(np.unique(g["iq2xxs"])) | set(np.unique(g["iq2s"])) == {0x08, 0x19, 0x2B}
    assert set(np.unique(g["iq3xxs"])) <= {4, 12, 20, 28, 36, 44, 52, 62}
    assert set(np.unique(g["iq3s"])) == {1, 3, 5, 7, 9, 11, 13, 15}
    assert set(np.unique(g["iq1s"].view(np.int8))) == {-1, 0, 1}
    ksigns = [int(v) for v in g["ksigns"].reshape(-1)]
    assert ksigns == [i | (bin(i).count("1") % 2) << 7 for i in range(128)]
    for name in ("iq2xxs", "iq2xs", "iq2s", "iq3xxs", "iq3s", "iq1s"):
        assert len({row.tobytes() for row in g[name]}) == g[name].shape[0], name


def test_missing_grid_file_is_an_io_error(monkeypatch):
    monkeypatch.setattr(iquants_grid, "_grids", {})
    monkeypatch.setattr(iquants_grid, "_tables", {})
    monkeypatch.setattr(iquants_grid.pkgutil, "get_data", lambda package, path: b"\0" * 7)
    with pytest.raises(AprError) as err:
        dequantize(bytes(66), "IQ2_XXS", (256,))
    assert err.value.code is ErrorCode.IO and "grid" in str(err.value)


# --------------------------------------------------------------------------- bad input

@pytest.mark.parametrize("name", TYPES)
def test_truncated_or_partial_input_is_refused_with_a_code(name):
    row = dtypes.by_name(name)
    blocks = sample(name, 2, seed=1).tobytes()
    with pytest.raises(AprError) as err:
        dequantize(blocks[:-1], name, (2 * row.block_size,))        # one byte short
    assert err.value.code is ErrorCode.CORRUPT
    with pytest.raises(AprError) as err:
        dequantize(blocks + b"\0", name, (2 * row.block_size,))     # odd length
    assert err.value.code is ErrorCode.CORRUPT
    with pytest.raises(AprError) as err:
        dequantize(blocks, name, (row.block_size + 1,))             # partial block
    assert err.value.code is ErrorCode.FORMAT


# --------------------------------------------------------------------------- GGUF round trip

@pytest.mark.oracle
@needs_gguf
def test_gguf_round_trip_through_gguf_py_reader(tmp_path):
    """apr writes one tensor of each type; gguf-py reads the file and decodes each to the
    bits apr decodes, from the file apr's reader opens."""
    from apr_core.formats.gguf import read_gguf
    from apr_core.formats.gguf_write import write_gguf
    from apr_core.tensor import RawTensor

    shapes = {name: (3, 2 * dtypes.by_name(name).block_size * (i + 1))
              for i, name in enumerate(TYPES)}
    tensors = [RawTensor("t." + name.lower(), dtypes.by_name(name), shape,
                         sample(name, _n_blocks(name, shape), seed=11).tobytes())
               for name, shape in shapes.items()]
    path = str(tmp_path / "iq.gguf")
    write_gguf(path, tensors, {"general.architecture": "llama"})
    reader = gguf.GGUFReader(path)
    by_name = {t.name: t for t in reader.tensors}
    with read_gguf(path) as model:
        for tensor in tensors:
            peer = by_name[tensor.name]
            assert peer.tensor_type == gguf.GGMLQuantizationType(tensor.dtype.gguf_id)
            ref = np.asarray(gguf.quants.dequantize(np.asarray(peer.data), peer.tensor_type),
                             np.float32)
            assert np.isfinite(ref).all()
            raw = model.read_raw(tensor.name)
            assert raw.data == tensor.data
            assert_same_bits(dequantize(raw.data, raw.dtype, raw.shape),
                             ref.reshape(tensor.shape))
