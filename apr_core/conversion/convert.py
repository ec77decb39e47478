"""The conversion core: any readable format -> APR v2, GGUF or SafeTensors.

Tensors keep their bytes and dtype (no re-quantization) unless asked: GGUF quant blocks move
into APR unchanged, shapes stay row-major, metadata travels as `metadata.py` describes.
Tensors stream one at a time from source to destination (`ModelFile.lazy`); `quantize` /
`precision` re-encode them inside their loaders (`retype.py`), with a quality report
and inline validation.
"""
from __future__ import annotations

import os
from typing import Any, Callable, Dict, List, Optional

from .. import dtypes
from ..errors import AprError, ErrorCode
from ..formats import metadata as md
from ..formats.logical import apr_metadata, unpack_tensors
from ..formats.open import open_model
from ..tensor import LazyTensor, ModelFile

FORMAT_BY_EXTENSION = {".apr": "apr", ".gguf": "gguf", ".safetensors": "safetensors"}


def output_format(path: str, fmt: Optional[str] = None) -> str:
    """The format to write: `fmt` if given, else from the extension of `path`."""
    if fmt:
        if fmt not in ("apr", "gguf", "safetensors"):
            raise AprError(ErrorCode.ARGUMENT, "unknown output format", format=fmt)
        return fmt
    ext = os.path.splitext(path)[1].lower()
    if ext not in FORMAT_BY_EXTENSION:
        raise AprError(ErrorCode.ARGUMENT,
                       "cannot tell the output format from the extension (.apr, .gguf, "
                       ".safetensors)", path=path)
    return FORMAT_BY_EXTENSION[ext]


def _for_safetensors(tensors: List[LazyTensor], meta: Dict[str, Any],
                     dequantize: bool) -> List[LazyTensor]:
    """Tensors SafeTensors can hold: block types packed as U8 (or dequantized to F32)."""
    packed: Dict[str, Any] = {}
    out = []
    for tensor in tensors:
        if tensor.dtype.st_name is not None:
            out.append(tensor)
        elif dequantize:
            out.append(_dequantized(tensor))
        else:
            packed[tensor.name] = {"dtype": tensor.dtype.name, "shape": list(tensor.shape)}
            out.append(LazyTensor(tensor.name, dtypes.BY_NAME["U8"],
                                  (tensor.dtype.nbytes(tensor.shape),), tensor.loader))
    meta.pop(md.PACKED_KEY, None)
    if packed:
        meta[md.PACKED_KEY] = packed
    return out


def _dequantized(tensor: LazyTensor) -> LazyTensor:
    def load() -> bytes:
        from ..quant import dequantize
        return dequantize(tensor.load(), tensor.dtype, tensor.shape).astype("<f4").tobytes()
    return LazyTensor(tensor.name, dtypes.BY_NAME["F32"], tensor.shape, load)


def convert(source: Any, dest: str, fmt: Optional[str] = None, *,
            compression: Optional[str] = None, alignment: int = 64,
            max_shard_size: Optional[int] = None, dequantize: bool = False,
            overwrite: bool = True, verify: bool = True, quantize: Optional[str] = None,
            precision: Optional[str] = None, force: bool = False,
            keep_embeddings_q8: bool = False, report: Optional[Any] = None,
            progress: Optional[Callable[[str, int, int], None]] = None) -> str:
    """Convert `source` (path, bytes or ModelFile) to `dest`; returns the format written.

    `compression` ("lz4", "zstd", "zstd:19") and `max_shard_size` apply to APR output;
    `dequantize=True` turns block-quantized tensors into F32 for SafeTensors output instead
    of packing their bytes.

    `quantize`: a plain type (`q4_k`, every quantizable 2-D weight whose rows fit) or a
    llama.cpp file type (`Q4_K_M`, see `quant.recipes`); `keep_embeddings_q8` keeps the
    token embedding in Q8_0. `precision` ("f32", "f16", "bf16") re-encodes the float
    matrices that are not quantized. Re-encoded tensors are validated inline (NaN/Inf, norm
    means) and the conversion aborts with AprError(VALIDATION) unless `force`; `report`
    (a `quant.quality.QualityReport`, or a callable taking each `TensorQuality`) receives
    the per-tensor quality rows; `progress(name, done, total)` is called per tensor.
    """
    target = output_format(dest, fmt)
    model = source if isinstance(source, ModelFile) else open_model(source, verify=verify)
    try:
        meta = apr_metadata(model, source)
        tensors = unpack_tensors(model, meta)
        if target == "gguf" and "gguf" not in meta and "hf_config" in meta:
            # A HF model becomes a llama.cpp model: GGUF names, layouts and KV pairs.
            from ..model.gguf_export import hf_to_gguf
            tensors = hf_to_gguf(tensors, meta)
        if quantize or precision or progress is not None:
            # numpy is needed only to re-type tensors: plain conversions stay stdlib-only.
            from .retype import RetypeOptions, retype
            tensors = retype(tensors, meta, RetypeOptions(
                quantize, precision, force, keep_embeddings_q8, report, progress))
        if target == "apr":
            meta.pop(md.PACKED_KEY, None)
            _write_apr(dest, tensors, meta, compression, alignment, max_shard_size, overwrite)
        elif target == "gguf":
            from ..formats.gguf import write_gguf
            kv, types, gguf_alignment = md.to_gguf(meta)
            tensors = md.gguf_tensor_order(meta, tensors)
            write_gguf(dest, tensors, kv, types, alignment=gguf_alignment, overwrite=overwrite)
        else:
            from ..formats.safetensors import write_safetensors
            tensors = _for_safetensors(tensors, meta, dequantize)
            write_safetensors(dest, tensors, md.to_safetensors(meta), overwrite=overwrite)
    finally:
        if model is not source:
            model.close()
    return target


def _write_apr(dest: str, tensors: List[LazyTensor], meta: Dict[str, Any],
               compression: Optional[str], alignment: int, max_shard_size: Optional[int],
               overwrite: bool) -> None:
    from ..formats.flags import GGUF_SRC, SAFETENSORS_SRC
    source_flag = {"gguf": GGUF_SRC, "safetensors": SAFETENSORS_SRC}.get(
        str(meta.get("source_format")), 0)
    if max_shard_size:
        from ..formats.shards import write_sharded
        write_sharded(dest, tensors, meta, max_shard_size=max_shard_size, alignment=alignment,
                      compression=compression)
        return
    from ..formats.apr2 import write_apr2
    write_apr2(dest, tensors, meta, alignment=alignment, compression=compression,
               overwrite=overwrite, flags=source_flag)
