"""The native WebGPU backend: `wgpu_device` (the device layer over wgpu-py) and `backend`
(`--backend webgpu`: the kernels object that runs a whole model on the device, with the
CPU fallback and its logged reason)."""
