"""The browser shell's WebAssembly SIMD block kernels (web/src/kernels/*.c), built natively.

The same C sources the browser runs compile for this machine (`build`: wasm's SIMD128
intrinsics on this directory's wasm_simd128.h, which gives each its exact lane semantics
with SSE/AVX instructions), load through ctypes in milliseconds and need no numba: they are
what a process runs until numba's kernels have loaded (`kernels`: backend "simd").
"""
