"""LLVM IR building blocks and numba intrinsics the kernels are written in: block codes
unpacked and dotted as vectors (`block_ir` one token, `pair_ir` token pairs), 16-lane
float vectors (`lanes16`), K-quant scales, atomics, a vectorizable exp."""
