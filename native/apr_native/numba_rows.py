"""How many rows a numba pass takes as integer dots, kept apart from the numba kernels so
a process can know it without importing numba (`backends`' quick start)."""

# Above this many tokens float products of dequantized rows (`block_rows.rows_times_tokens`)
# beat integer dots (one thread, ns per 32 weights and token, Q5_0/Q8_0/Q6_K: dots
# 0.45-0.86 at 16 tokens, products 0.53-0.63; at 32 tokens dots 0.68-2.0, products
# 0.50-0.54). It is also the most rows a speculative verification pass takes.
DOT_MAX_TOKENS = 16
# The scheduler's `min_prefill_rows` on numba (registry.Kernels.uniform_rows): past the dots.
UNIFORM_ROWS = DOT_MAX_TOKENS + 1
