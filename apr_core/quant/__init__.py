"""Quantization: dequantize/quantize kernels per dtype, chosen through `registry`."""
