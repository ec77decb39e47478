"""The native WebGPU device (wgpu-py: Vulkan, Metal or DX12; lavapipe on a CPU-only box):
the thin layer under `apr_core.gpu.forward.GpuForward` (its docstring is the protocol).

    device = open_device()              # DeviceMissing(reason) when there is no adapter
    device.limits                       # the adapter's maxima, requested at creation

APR_WEBGPU_ADAPTER=none hides every adapter (the CPU fallback, tested without a machine
that lacks Vulkan); APR_WEBGPU_MAX_BINDING=<bytes> lowers the storage binding limit the
plan splits tensors by (the split path, tested with a small limit).
"""
from __future__ import annotations

import os
import tempfile
from typing import Any, List, Optional, Sequence, Tuple

from apr_core.gpu.plan import Limits

ADAPTER_ENV = "APR_WEBGPU_ADAPTER"
MAX_BINDING_ENV = "APR_WEBGPU_MAX_BINDING"


class DeviceMissing(Exception):
    """No usable WebGPU adapter here: `str(err)` says why."""


def _usage(kind: str) -> int:
    import wgpu
    u = wgpu.BufferUsage
    if kind == "params":
        return u.UNIFORM | u.COPY_DST
    if kind == "readback":
        return u.MAP_READ | u.COPY_DST
    return u.STORAGE | u.COPY_DST | u.COPY_SRC


class WgpuDevice:
    """A wgpu device with the adapter's largest limits, and submission counters."""

    def __init__(self, adapter: Any, max_binding: Optional[int] = None) -> None:
        names = ("max-storage-buffer-binding-size", "max-buffer-size",
                 "max-storage-buffers-per-shader-stage", "max-compute-workgroup-storage-size",
                 "max-compute-invocations-per-workgroup", "max-compute-workgroup-size-x",
                 "max-uniform-buffer-binding-size")
        limits = {name: adapter.limits[name] for name in names if name in adapter.limits}
        self.adapter = adapter
        self.device = adapter.request_device_sync(required_limits=limits)
        binding = limits["max-storage-buffer-binding-size"]
        if max_binding:
            binding = min(binding, int(max_binding))
        # a CPU adapter (lavapipe) runs a thread per matmul row best: no barriers
        cpu = adapter.info.get("adapter_type", "") == "CPU"
        self.limits = Limits(binding, limits["max-buffer-size"], 1 if cpu else 32)
        self.submissions = 0
        self.readbacks = 0

    @property
    def name(self) -> str:
        info = self.adapter.info
        return "{} ({}, {})".format(info.get("device", "?"), info.get("backend_type", "?"),
                                    info.get("adapter_type", "?"))

    def buffer(self, size: int, kind: str) -> Any:
        return self.device.create_buffer(size=int(size), usage=_usage(kind))

    def write(self, handle: Any, offset: int, data: Any) -> None:
        self.device.queue.write_buffer(handle, int(offset), data)

    def pipeline(self, key: str, wgsl: str) -> Any:
        module = self.device.create_shader_module(label=key, code=wgsl)
        return self.device.create_compute_pipeline(
            label=key, layout="auto", compute={"module": module, "entry_point": "main"})

    def bind_group(self, pipeline: Any, entries: Sequence[Tuple[int, Any, int, int]]) -> Any:
        made = []
        for binding, handle, offset, size in entries:
            resource = {"buffer": handle, "offset": int(offset),
                        "size": int(size) if size else int(handle.size) - int(offset)}
            made.append({"binding": binding, "resource": resource})
        return self.device.create_bind_group(layout=pipeline.get_bind_group_layout(0),
                                             entries=made)

    def run(self, ops: List[Any], readback: Any, nbytes: int) -> bytes:
        """Record `ops` into one command buffer, submit it once, map `readback` once."""
        encoder = self.device.create_command_encoder()
        compute = None
        for op in ops:
            if op[0] == "dispatch":
                if compute is None:
                    compute = encoder.begin_compute_pass()
                _, pipeline, group, (x, y, z) = op
                compute.set_pipeline(pipeline)
                compute.set_bind_group(0, group)
                compute.dispatch_workgroups(x, y, z)
                continue
            if compute is not None:
                compute.end()
                compute = None
            if op[0] == "copy":
                _, src, src_off, dst, dst_off, n = op
                encoder.copy_buffer_to_buffer(src, src_off, dst, dst_off, n)
            elif op[0] == "clear":
                encoder.clear_buffer(op[1], op[2], op[3])
            else:
                raise ValueError("unknown device op {!r}".format(op[0]))
        if compute is not None:
            compute.end()
        self.device.queue.submit([encoder.finish()])
        self.submissions += 1
        import wgpu
        readback.map_sync(wgpu.MapMode.READ, 0, nbytes)
        try:
            data = bytes(readback.read_mapped(0, nbytes, copy=False))
        finally:
            readback.unmap()
        self.readbacks += 1
        return data


def open_device() -> WgpuDevice:
    """The highest-performance adapter's device, or DeviceMissing with the reason."""
    if os.environ.get(ADAPTER_ENV, "").strip().lower() == "none":
        raise DeviceMissing("{}=none hides the WebGPU adapters".format(ADAPTER_ENV))
    if not os.environ.get("XDG_RUNTIME_DIR"):
        # Mesa's Vulkan loader warns without one; a private directory silences it
        os.environ["XDG_RUNTIME_DIR"] = tempfile.mkdtemp(prefix="apr-xdg-")
    try:
        import wgpu
    except ImportError as err:
        raise DeviceMissing("the wgpu package is not installed ({})".format(err))
    try:
        adapter = wgpu.gpu.request_adapter_sync(power_preference="high-performance")
    except Exception as err:                 # no Vulkan/Metal/DX12 driver at all
        raise DeviceMissing("no WebGPU adapter: {}".format(err))
    if adapter is None:
        raise DeviceMissing("no WebGPU adapter")
    binding = os.environ.get(MAX_BINDING_ENV)
    return WgpuDevice(adapter, int(binding) if binding else None)


__all__ = ["WgpuDevice", "DeviceMissing", "open_device", "ADAPTER_ENV", "MAX_BINDING_ENV"]
