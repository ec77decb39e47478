"""`WebGPUKernels`: the registry backend "webgpu", shared by the native device (wgpu-py,
apr_native.gpu) and the browser's (navigator.gpu, the shell's apr_webgpu).

    kernels = WebGPUKernels(device, cpu_kernels)
    model = Transformer.from_model_file(f, kernels=kernels)   # attach(): weights uploaded
    model.device.submissions, model.device.readbacks          # 1 and 1 per step

The model keeps its host weights (views of the mapped file or the shell's bytes): the
paths that stay on the host (`apr trace`'s per-layer observation, server embeddings) run
the CPU backend's kernels, which are what this object looks up. A model the plan cannot
place (a tensor row over the binding limit, an unsupported feature or dtype) stays on the
CPU backend: the reason is logged on the "apr.webgpu" logger and kept in
`fallback_reason`.
"""
from __future__ import annotations

import logging
from typing import Any, Optional

from ..quant import registry

BACKEND = "webgpu"
LOG = logging.getLogger("apr.webgpu")


class WebGPUKernels(registry.Kernels):
    """Backend "webgpu": `attach(model)` puts the model's forward pass on `device` (any
    object with `apr_core.gpu.forward`'s device protocol); host lookups go to `cpu`'s
    kernels."""

    def __init__(self, device: Any, cpu: registry.Kernels) -> None:
        super().__init__(BACKEND, uniform_rows=1)
        self._order = cpu._order              # host-side kernels: the CPU backend's
        self.device = device
        self.cpu = cpu
        self.fallback_reason: Optional[str] = None

    def attach(self, model: Any) -> None:
        """Upload `model`'s weights and route its forward passes to the device; on a
        model the device cannot hold, fall back to the CPU backend (logged)."""
        from .forward import GpuForward
        from .plan import GpuUnfit
        try:
            model.device = GpuForward(model, self.device)
        except GpuUnfit as err:
            self.fall_back(str(err))
            model.device = None

    def fall_back(self, reason: str) -> None:
        self.fallback_reason = reason
        self.backend = self.cpu.backend
        self.uniform_rows = self.cpu.uniform_rows
        LOG.warning("webgpu: falling back to the %s backend: %s", self.cpu.backend, reason)


__all__ = ["WebGPUKernels", "BACKEND", "LOG"]
