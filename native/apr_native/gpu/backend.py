"""`--backend webgpu` natively: `apr_core.gpu.kernels.WebGPUKernels` on wgpu-py's best
adapter.

    kernels = backends.select("webgpu")        # WebGPUKernels, or the CPU backend's
                                                # kernels with .fallback_reason

Fallback to the CPU backend, with the reason logged on the "apr.webgpu" logger and kept in
`fallback_reason`: no adapter (or APR_WEBGPU_ADAPTER=none) here at selection; a model the
plan cannot place at attach (WebGPUKernels).
"""
from __future__ import annotations

from apr_core.gpu.kernels import LOG, WebGPUKernels
from apr_core.quant import registry


def webgpu_kernels(cpu: registry.Kernels) -> registry.Kernels:
    """WebGPUKernels on the best adapter, or `cpu` (its `fallback_reason` set, logged)
    when there is none."""
    from .wgpu_device import DeviceMissing, open_device
    try:
        device = open_device()
    except DeviceMissing as err:
        cpu.fallback_reason = str(err)       # type: ignore[attr-defined]
        LOG.warning("webgpu: falling back to the %s backend: %s", cpu.backend, err)
        return cpu
    LOG.info("webgpu: %s", device.name)
    return WebGPUKernels(device, cpu)


__all__ = ["WebGPUKernels", "webgpu_kernels", "LOG"]
