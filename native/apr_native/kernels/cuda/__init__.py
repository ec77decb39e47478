"""numba CUDA kernels (`cuda_matmul`), the per-thread code they share (`cuda_threads`),
and that code compiled for the CPU to test it without a GPU (`cuda_emulated`)."""
