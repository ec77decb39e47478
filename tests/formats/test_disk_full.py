"""A full disk never leaves a partial model behind (seed 000 §11 #98), for every writer.

Uses a real 256 KiB tmpfs (needs root and mount permission; skipped otherwise).
"""
import os

import pytest

from apr_core import dtypes
from apr_core.errors import AprError, ErrorCode
from apr_core.formats.apr2 import write_apr2
from apr_core.formats.gguf import write_gguf
from apr_core.formats.safetensors import write_safetensors
from apr_core.tensor import RawTensor

WRITERS = {
    "model.apr": lambda path, tensors: write_apr2(path, tensors, {"model_type": "t"}),
    "model.gguf": lambda path, tensors: write_gguf(path, tensors, {"general.architecture": "t"}),
    "model.safetensors": lambda path, tensors: write_safetensors(path, tensors),
}


@pytest.mark.parametrize("name", sorted(WRITERS))
def test_full_disk_leaves_no_file(tiny_disk, name):
    f32 = dtypes.BY_NAME["F32"]
    tensors = [RawTensor("t{}".format(i), f32, (256, 256), bytes(256 * 1024)) for i in range(3)]
    target = tiny_disk / name
    with pytest.raises(AprError) as err:
        WRITERS[name](str(target), tensors)
    assert err.value.code == ErrorCode.IO
    assert "disk full" in err.value.message
    assert os.listdir(str(tiny_disk)) == []  # neither the target nor a temp file remains


@pytest.mark.parametrize("name", sorted(WRITERS))
def test_full_disk_keeps_previous_file_intact(tiny_disk, name):
    f32 = dtypes.BY_NAME["F32"]
    target = tiny_disk / name
    WRITERS[name](str(target), [RawTensor("small", f32, (4,), bytes(16))])
    before = target.read_bytes()
    big = [RawTensor("t{}".format(i), f32, (256, 256), bytes(256 * 1024)) for i in range(3)]
    with pytest.raises(AprError):
        WRITERS[name](str(target), big)
    assert target.read_bytes() == before
    assert os.listdir(str(tiny_disk)) == [name]
