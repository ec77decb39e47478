"""mmap loading: tensors of APR v2, GGUF and SafeTensors files come back as zero-copy
views of one mapping, with the same bytes as the ordinary reader; opening reads only the
header and index; compressed APR tensors still decode; a model loaded through the mmap
opener gives the same logits as one read from the file. The resident source (the file read
into huge-page memory) serves the same bytes as writable views of one 2 MiB aligned buffer."""
import os

import numpy as np
import pytest

from apr_core import dtypes
from apr_core.errors import AprError, ErrorCode
from apr_core.formats.apr2_writer import write_apr2
from apr_core.formats.gguf import write_gguf
from apr_core.formats.open import open_model
from apr_core.formats.safetensors import write_safetensors
from apr_core.model import Transformer
from apr_core.quant import quantize
from apr_core.tensor import RawTensor
from apr_native.mmap_source import HUGE_PAGE, MmapSource, ResidentSource, open_mmap, open_resident
from synthetic_models import write_gguf_model

pytestmark = pytest.mark.native


def tensors():
    rng = np.random.default_rng(0)
    big = rng.standard_normal((64, 256)).astype(np.float32)
    return [
        RawTensor("a.weight", dtypes.BY_NAME["Q4_K"], (64, 256),
                  quantize(big, dtypes.BY_NAME["Q4_K"])),
        RawTensor("b.weight", dtypes.BY_NAME["F32"], (3, 5),
                  rng.standard_normal((3, 5)).astype(np.float32).tobytes()),
        RawTensor("zeros", dtypes.BY_NAME["F32"], (4096,), bytes(4 * 4096)),
    ]


def write(kind, path):
    if kind == "gguf":
        write_gguf(str(path), tensors(), {"general.architecture": "llama"})
    elif kind == "safetensors":      # no block types in SafeTensors: F16 stands in
        half = [t if t.dtype.name != "Q4_K" else RawTensor(
            t.name, dtypes.BY_NAME["F16"], t.shape,
            np.ones(t.shape, np.float16).tobytes()) for t in tensors()]
        write_safetensors(str(path), half, {})
    else:
        write_apr2(str(path), tensors(), {"name": "t"}, compression=kind.partition("-")[2]
                   or None)
    return str(path)


@pytest.mark.parametrize("kind", ["gguf", "safetensors", "apr"])
def test_raw_tensors_are_views_of_the_mapping(kind, tmp_path):
    path = write(kind, tmp_path / "m.bin")
    with open_model(path) as plain, open_mmap(path) as mapped:
        assert isinstance(mapped.source, MmapSource)
        header_bytes = mapped.source.bytes_read
        assert header_bytes < os.path.getsize(path) // 4     # O(header), no tensor bytes
        whole = mapped.source.view(0, mapped.source.size)
        for name in plain.tensors:
            got = mapped.read_raw(name).data
            assert isinstance(got, np.ndarray) and got.dtype == np.uint8
            assert np.shares_memory(got, whole), name
            assert got.tobytes() == plain.read_raw(name).data, name


def test_compressed_apr_tensors_still_decode(tmp_path):
    path = write("apr-zstd", tmp_path / "z.apr")
    with open_model(path) as plain, open_mmap(path) as mapped:
        compressed = [n for n, info in mapped.tensors.items() if info.flags & 0x0F]
        assert "zeros" in compressed                              # zeros compress
        for name in plain.tensors:
            assert bytes(mapped.read_raw(name).data) == plain.read_raw(name).data


def test_views_outlive_the_closed_model(tmp_path):
    path = write("gguf", tmp_path / "m.gguf")
    with open_mmap(path) as mapped:
        data = mapped.read_raw("b.weight").data
        expected = bytes(data)
    assert bytes(data) == expected                  # the mapping lives while a view does


def test_missing_and_bad_files(tmp_path):
    with pytest.raises(AprError) as err:
        open_mmap(str(tmp_path / "absent.gguf"))
    assert err.value.code is ErrorCode.IO
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + b"\xff" * 12)
    with pytest.raises(AprError):
        open_mmap(str(bad))
    empty = tmp_path / "empty.gguf"
    empty.write_bytes(b"")
    with pytest.raises(AprError):
        open_mmap(str(empty))
    source = MmapSource(str(bad))
    with pytest.raises(AprError) as err:
        source.view(8, 100)
    assert err.value.code is ErrorCode.CORRUPT


def test_model_through_mmap_gives_the_same_logits(tmp_path):
    path = str(tmp_path / "tiny.gguf")
    write_gguf_model(path, quant="Q4_0")
    ids = [1, 5, 9, 2]
    plain = Transformer.from_path(path).forward(ids)
    mapped_model = Transformer.from_path(path, opener=open_mmap)
    assert all(isinstance(block.linears["q"].data, np.ndarray) for block in mapped_model.blocks)
    assert np.array_equal(mapped_model.forward(ids), plain)


@pytest.mark.parametrize("kind", ["gguf", "safetensors", "apr", "apr-zstd"])
def test_resident_source_serves_the_same_bytes(kind, tmp_path):
    path = write(kind, tmp_path / "m.bin")
    with open_model(path) as plain, open_resident(path) as resident:
        assert isinstance(resident.source, ResidentSource)
        whole = resident.source.view(0, resident.source.size)
        assert whole.ctypes.data % HUGE_PAGE == 0 or not hasattr(__import__("mmap"),
                                                                 "MAP_ANONYMOUS")
        assert whole.tobytes() == open(path, "rb").read()
        for name in plain.tensors:
            got = resident.read_raw(name).data
            assert bytes(got) == plain.read_raw(name).data, name
            if isinstance(got, np.ndarray) and kind != "apr-zstd":
                assert got.flags.writeable and np.shares_memory(got, whole), name


def test_resident_missing_file_and_logits(tmp_path):
    with pytest.raises(AprError) as err:
        open_resident(str(tmp_path / "absent.gguf"))
    assert err.value.code is ErrorCode.IO
    path = str(tmp_path / "tiny.gguf")
    write_gguf_model(path, quant="Q4_0")
    ids = [1, 5, 9, 2]
    plain = Transformer.from_path(path).forward(ids)
    resident = Transformer.from_path(path, opener=open_resident)
    assert np.array_equal(resident.forward(ids), plain)


def test_engine_without_mmap_reads_into_resident_memory(tmp_path):
    from apr_native.engine import EngineOptions, load_engine
    path = str(tmp_path / "tiny.gguf")
    write_gguf_model(path, quant="Q4_0")
    ids = [1, 5, 9, 2]
    mapped = load_engine(path, EngineOptions(backend="numpy"), with_tokenizer=False)
    read = load_engine(path, EngineOptions(backend="numpy", mmap=False), with_tokenizer=False)
    weights = read.transformer.blocks[0].linears["q"].data
    assert isinstance(weights, np.ndarray) and weights.flags.writeable   # not bytes-backed
    assert np.array_equal(read.transformer.forward(ids), mapped.transformer.forward(ids))
