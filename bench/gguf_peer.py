"""gguf-py's numpy (de)quantizers as the peer of the quantization benchmarks."""
from __future__ import annotations

from typing import Callable, Optional

import numpy as np

from apr_core import dtypes


def gguf_kernel(kind: str, dtype: dtypes.DType) -> Optional[Callable[[np.ndarray], np.ndarray]]:
    """gguf-py's `quantize` or `dequantize` (`kind`) for `dtype`, or None when gguf-py is
    absent or lacks the type. The function is probed once on a zero input, since gguf-py
    reports a missing type only when called."""
    try:
        from gguf import GGMLQuantizationType
        from gguf import quants
    except ImportError:
        return None
    if dtype.gguf_id is None:
        return None
    probe = np.zeros((1, dtype.type_size), np.uint8) if kind == "dequantize" else \
        np.zeros((1, dtype.block_size * 8), np.float32)
    function = getattr(quants, kind)
    try:
        qtype = GGMLQuantizationType(dtype.gguf_id)
        function(probe, qtype)
    except (NotImplementedError, ValueError, TypeError, KeyError):
        return None
    return lambda rows: function(rows, qtype)
