"""Quantized weight blocks (numba): the block-type table and activation quantizer
(`block_table`), one weight row dotted with one token or dequantized (`block_rows`), and
rows dotted with many tokens at once (`token_rows`)."""
