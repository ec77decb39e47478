"""Conversion orchestration: any readable format -> APR v2, GGUF or SafeTensors, with
optional re-quantization (`retype`) and its quality report. Sits above formats, quant and
stats; the format layer itself only reads and writes.

    from apr_core.conversion.convert import convert
    convert("model.gguf", "model.apr", compression="lz4")
"""
