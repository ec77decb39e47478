"""The plan of one forward step on a WebGPU device: buffers, pipelines, dispatches in order.

    plan = build_plan(model, Capacity(rows=16, out_rows=4, table_width=4), limits)
                     # (plan_layers.build_plan: this file's Plan filled from a Transformer)
    plan.buffers     name -> Buffer(size, kind)           (kinds: weight, data, step, params,
                                                           readback; "kv" buffers are the runner's)
    plan.uploads     name -> bytes to write once          (weights as stored, norms, params)
    plan.pipelines   key -> WGSL source                   ("matmul:Q4_1", "norm", ...)
    plan.dispatches  [Dispatch], the step in order        (binds, uniform offset, workgroups)

Pure data, built from a Transformer by this file and `plan_layers`; the native runner
(wgpu) and the browser's (navigator.gpu) execute the same plan. Weights are the model's
stored bytes: a tensor larger than the device's binding limit is split by rows into
parts, each its own buffer and its own dispatch (`Limits.max_binding`). What the device
cannot hold raises `GpuUnfit` with the reason (the caller falls back to the CPU).
"""
from __future__ import annotations

import struct
from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np

from .. import dtypes
from .step import Capacity, step_words
from .wgsl_decode import SUPPORTED
from .wgsl_kernels import PARAMS, source

UNIFORM_ALIGN = 256       # WebGPU's largest allowed minUniformBufferOffsetAlignment


class GpuUnfit(Exception):
    """The model cannot run on this device (a limit, an unsupported feature): `reason`."""


class Limits(NamedTuple):
    max_binding: int          # maxStorageBufferBindingSize
    max_buffer: int           # maxBufferSize
    row_threads: int = 32     # matmul threads per output row: 32, or 1 on a CPU adapter


class Buffer(NamedTuple):
    size: int
    kind: str                 # weight | data | step | params | readback | kv


class Bind(NamedTuple):
    binding: int
    buffer: str
    offset: int = 0
    size: int = 0             # 0: the whole buffer


class Dispatch(NamedTuple):
    """One kernel launch. Workgroups: `groups`, with axis `axis` replaced by
    ceil(rows * per / div) where rows is the step's T ("T") or R ("R"); a count over
    65535 on axis 0 spills to axis 1 (kernels index `wid.y * 65535 + wid.x`)."""

    pipeline: str
    binds: Tuple[Bind, ...]
    groups: Tuple[int, int, int]
    rows: str = ""            # "", "T" or "R"
    per: int = 1
    div: int = 1
    axis: int = 0

    def workgroups(self, t: int, r: int) -> Tuple[int, int, int]:
        if not self.rows:
            return self.groups
        n = -(-(t if self.rows == "T" else r) * self.per // self.div)
        groups = list(self.groups)
        if self.axis == 0 and n > 65535:
            groups[0], groups[1] = 65535, -(-n // 65535)
        else:
            groups[self.axis] = n
        return groups[0], groups[1], groups[2]

    @property
    def kv_layers(self) -> Tuple[int, ...]:
        """Layers whose KV buffers this dispatch binds (named "k:<i>", "v:<i>")."""
        return tuple(int(b.buffer[2:]) for b in self.binds if b.buffer.startswith("k:"))


class WeightPart(NamedTuple):
    buffer: str
    row_lo: int
    rows: int


class Plan:
    """Everything one step needs; see the module docstring."""

    def __init__(self, capacity: Capacity, limits: Limits) -> None:
        self.capacity = capacity
        self.limits = limits
        self.buffers: Dict[str, Buffer] = {}
        self.uploads: Dict[str, Any] = {}
        self.pipelines: Dict[str, str] = {}
        self.dispatches: List[Dispatch] = []
        self.logit_chunks: List[Tuple[str, int, int]] = []   # (buffer, first row, rows)
        self._params: List[bytes] = []
        self.kv_row_bytes = 0

    # ------------------------------------------------------------------ building

    def buffer(self, name: str, size: int, kind: str = "data", upload: Any = None) -> str:
        size = max(16, -(-int(size) // 4) * 4)
        if kind != "readback" and kind != "params" and size > self.limits.max_binding:
            raise GpuUnfit("buffer {} of {} bytes exceeds maxStorageBufferBindingSize {}"
                           .format(name, size, self.limits.max_binding))
        self.buffers[name] = Buffer(size, kind)
        if upload is not None:
            self.uploads[name] = upload
        return name

    def floats(self, name: str, values: Optional[np.ndarray]) -> str:
        """A read-only float32 buffer holding `values` (a dummy when None)."""
        if values is None:
            return "dummy"
        if name not in self.buffers:
            data = np.ascontiguousarray(values, np.float32).reshape(-1)
            self.buffer(name, data.nbytes, "weight", data)
        return name

    def weight(self, name: str, linear: Any) -> Tuple[str, List[WeightPart]]:
        """The linear's stored bytes as buffers (split by rows to fit a binding)."""
        dtype, (out_dim, in_dim) = linear.dtype, linear.shape
        data = linear.data
        if linear.weight is not None:            # decoded at load: its float32 copy
            dtype, data = dtypes.BY_NAME["F32"], linear.weight.view(np.uint8).reshape(-1)
        if dtype.name not in SUPPORTED:
            raise GpuUnfit("no WGSL decoder for {} ({})".format(dtype.name, name))
        if getattr(data, "resident", False):
            raise GpuUnfit("weights held by another backend ({})".format(name))
        row_bytes = dtype.nbytes((in_dim,))
        per_part = max(1, (self.limits.max_binding - 4) // row_bytes)
        if row_bytes + 4 > self.limits.max_binding:
            raise GpuUnfit("one row of {} ({} bytes) exceeds the binding limit".format(
                name, row_bytes))
        parts = []
        for i, lo in enumerate(range(0, out_dim, per_part)):
            rows = min(per_part, out_dim - lo)
            key = "w:{}:{}".format(name, i)
            if key not in self.buffers:
                self.buffer(key, rows * row_bytes, "weight",
                            data[lo * row_bytes:(lo + rows) * row_bytes])
            parts.append(WeightPart(key, lo, rows))
        return dtype.name, parts

    def dispatch(self, kind: str, pipeline_key: str, values: Dict[str, Any],
                 binds: Sequence[Tuple[str, int, int]], groups: Tuple[int, int, int],
                 rows: str = "", per: int = 1, div: int = 1, axis: int = 0) -> None:
        """Add a launch of `kind` (its WGSL under `pipeline_key`) with uniform `values`
        (every field of PARAMS[kind]; floats stored as float32 bits) and storage
        bindings `(buffer, offset, size)` from binding 1 (binding 0: the uniforms)."""
        if pipeline_key not in self.pipelines:
            dtype_name = pipeline_key.partition(":")[2]
            self.pipelines[pipeline_key] = source(kind, dtype_name)
        words = []
        for field in PARAMS[kind]:
            value = values[field]
            words.append(struct.pack("<f", value) if isinstance(value, float)
                         else struct.pack("<I", int(value)))
        blob = b"".join(words)
        blob += b"\0" * (-len(blob) % 16)
        offset = len(self._params) * UNIFORM_ALIGN
        self._params.append(blob)
        all_binds = (Bind(0, "params", offset, len(blob)),) + tuple(
            Bind(i + 1, name, off, size) for i, (name, off, size) in enumerate(binds))
        self.dispatches.append(Dispatch(pipeline_key, all_binds, groups, rows, per, div,
                                        axis))

    def finish(self, rope_half: int) -> "Plan":
        """Add the step and params buffers; the plan is complete."""
        self.buffer("step", 4 * step_words(self.capacity, rope_half), "step")
        params = bytearray(UNIFORM_ALIGN * max(1, len(self._params)))
        for i, blob in enumerate(self._params):
            params[i * UNIFORM_ALIGN:i * UNIFORM_ALIGN + len(blob)] = blob
        self.buffer("params", len(params), "params", bytes(params))
        self.buffer("dummy", 16, "data")
        return self


__all__ = ["Plan", "Limits", "Buffer", "Bind", "Dispatch", "WeightPart", "GpuUnfit",
           "UNIFORM_ALIGN"]
