"""Whole layers in one call (numba): the fused per-layer kinds (`fused_layers`) and the
whole decoder block (`decoder_block`)."""
