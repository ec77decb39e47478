"""The browser's WebGPU device: `apr_core.gpu.forward`'s device protocol over navigator.gpu,
the twin of apr_native.gpu.wgpu_device (wgpu-py) for the shell.

    device = open_device()            # BrowserGpuDevice, or None (see `unavailable()`)
    kernels = WebGPUKernels(device, host_kernels)     # apr_core.gpu.kernels
    model = Transformer.from_model_file(f, kernels=kernels)    # attach(): weights uploaded
    model.device.submissions, model.device.readbacks          # 1 and 1 per step

The GPUDevice lives in a worker of its own (gpu_worker.js), reached through `js.aprGpu`
(gpu_client.js), because the protocol's `run` is synchronous and WebGPU's read-back is a
Promise: `run` and the upload fences block in `Atomics.wait` until the GPU worker answers;
everything else is posted in order and returns at once. Handles are small integers chosen
here, wrapped in `GpuHandle`s: when Python drops one (a plan grown, a KV cache replaced, a
model forgotten), its GPU object is freed. Arrays cross by address in Pyodide's heap (no
conversion of Python objects to JavaScript ones): a read-back lands in a numpy array.
"""
from __future__ import annotations

import json
import weakref
from typing import Any, List, Optional, Sequence, Tuple

import js  # type: ignore[import-not-found]  # Pyodide's bridge to the worker's globals

OP_WIDTH = 6                       # gpu_protocol.js OPS.WIDTH
OP_CODES = {"dispatch": 0, "copy": 1, "clear": 2}


def _address(array: Any) -> int:
    """Where a contiguous numpy array's data starts in Pyodide's memory."""
    return array.__array_interface__["data"][0]


class GpuHandle:
    """One GPU object of the GPU worker: `id`; `keep` holds what it uses (a bind group's
    buffers), so those stay alive as long as it does."""

    __slots__ = ("id", "keep", "__weakref__")

    def __init__(self, handle_id: int, keep: Tuple[Any, ...] = ()) -> None:
        self.id = handle_id
        self.keep = keep


class BrowserGpuDevice:
    """The device protocol of `apr_core.gpu.forward` on the GPU worker's GPUDevice."""

    def __init__(self, client: Any) -> None:
        from apr_core.gpu.plan import Limits
        self.client = client
        self.name = str(client.adapter)
        limits = client.limits
        # a software adapter (SwiftShader) runs a thread per matmul row best, as lavapipe
        self.limits = Limits(int(limits.maxStorageBufferBindingSize), int(limits.maxBufferSize),
                             1 if client.cpu else 32)
        self.submissions = 0
        self.readbacks = 0
        self._next = 0

    def _handle(self, keep: Tuple[Any, ...] = ()) -> GpuHandle:
        self._next += 1
        handle = GpuHandle(self._next, keep)
        weakref.finalize(handle, self.client.free, self._next)
        return handle

    def buffer(self, size: int, kind: str) -> GpuHandle:
        handle = self._handle()
        self.client.buffer(handle.id, int(size), str(kind))
        return handle

    def write(self, handle: GpuHandle, offset: int, data: Any) -> None:
        import numpy as np
        array = data if isinstance(data, np.ndarray) else np.frombuffer(data, np.uint8)
        array = np.ascontiguousarray(array).reshape(-1).view(np.uint8)   # [bytes]
        _check(self.client.write(handle.id, int(offset), _address(array), array.nbytes))

    def pipeline(self, key: str, wgsl: str) -> GpuHandle:
        handle = self._handle()
        self.client.pipeline(handle.id, str(key), str(wgsl))
        return handle

    def bind_group(self, pipeline: GpuHandle,
                   entries: Sequence[Tuple[int, GpuHandle, int, int]]) -> GpuHandle:
        handle = self._handle(tuple(buf for _, buf, _, _ in entries) + (pipeline,))
        self.client.group(handle.id, pipeline.id, json.dumps(
            [[int(binding), buf.id, int(offset), int(size)] for binding, buf, offset, size
             in entries]))
        return handle

    def run(self, ops: List[Any], readback: GpuHandle, nbytes: int) -> bytes:
        """ONE submission of `ops` in order, then ONE map of `readback`: its first `nbytes`."""
        import numpy as np
        words = np.zeros((len(ops), OP_WIDTH), np.uint32)               # [ops, 6]
        for row, op in enumerate(ops):
            kind = op[0]
            if kind == "dispatch":
                _, pipeline, group, (x, y, z) = op
                words[row] = (0, pipeline.id, group.id, x, y, z)
            elif kind == "copy":
                _, src, src_off, dst, dst_off, n = op
                words[row] = (1, src.id, src_off, dst.id, dst_off, n)
            elif kind == "clear":
                words[row, :4] = (2, op[1].id, op[2], op[3])
            else:
                raise ValueError("unknown device op {!r}".format(kind))
        out = np.empty(int(nbytes), np.uint8)                           # [nbytes]
        error = self.client.run(_address(words), words.size, readback.id, int(nbytes),
                                _address(out))
        self.submissions = int(self.client.submissions)
        self.readbacks = int(self.client.readbacks)
        _check(error)
        return out.tobytes()


def _check(error: Any) -> None:
    if error:
        from apr_core.errors import AprError, ErrorCode
        raise AprError(ErrorCode.UNSUPPORTED, "WebGPU: {}".format(error))


_DEVICE: List[Any] = []            # the worker's one device, made on first use


def open_device() -> Optional[BrowserGpuDevice]:
    """The device over the GPU worker the shell opened at boot, or None (`unavailable()`
    says why)."""
    client = getattr(js, "aprGpu", None)
    if client is None:
        return None
    if not _DEVICE:
        _DEVICE.append(BrowserGpuDevice(client))
    return _DEVICE[0]


def unavailable() -> str:
    """Why there is no WebGPU device in this worker ("" when there is one)."""
    if getattr(js, "aprGpu", None) is not None:
        return ""
    return str(getattr(js, "aprGpuReason", None) or "WebGPU was not requested")


def release() -> None:
    """Free the GPU objects of dropped models now (a Transformer and its GpuForward
    reference each other: only the cycle collector frees them)."""
    import gc
    gc.collect()


__all__ = ["BrowserGpuDevice", "GpuHandle", "open_device", "unavailable", "release"]
