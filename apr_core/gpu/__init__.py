"""WebGPU execution of a whole forward pass, described in pure Python (3.8 + numpy).

    plan = build_plan(transformer, Capacity(rows=8, out_rows=4, table_width=4, slots=256),
                      Limits(max_binding=128 << 20, max_buffer=2 << 30))
    runner = GpuForward(transformer, device)        # device: a native or browser Device
    logits = runner.forward_rows(ids, cache, rows)  # [len(rows), n_vocab]

Everything a device needs is data built here: the WGSL sources (`wgsl_decode` holds the
per-dtype block decoders, `wgsl_kernels` the kernels; stored weight blocks are read as
u32 words, never copied to float32), the buffers, pipelines and dispatches of one step in
order with their uniform values (`plan`), and the per-step inputs (`step`). `forward`
drives a `Device` (the thin native layer: `apr_native.gpu.wgpu_device`; in the browser
the same calls go to `navigator.gpu`) with ONE submission and ONE read-back per step.
The numpy code of `apr_core.model` and `apr_core.quant` is the definition every kernel is
tested against.
"""
from __future__ import annotations

__all__ = ["wgsl_decode", "wgsl_kernels", "plan", "step", "forward"]
