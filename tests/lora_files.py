"""LoRA adapter files for the tests, written as their producers write them: a GGUF LoRA in
llama.cpp's layout (convert_lora_to_gguf.py's: general.type=adapter, adapter.type=lora,
adapter.lora.alpha; `blk.N.<proj>.weight.lora_a` [r, in] and `.lora_b` [out, r], gguf-py
reversing the dims as for every tensor) for SmolLM2-135M."""
import numpy as np
import pytest

RANK, ALPHA = 8, 16.0
# SmolLM2-135M: d_model 576, kv_dim 192, d_ff 1536; (gguf name, out, in) per target
TARGETS = (("attn_q", 576, 576), ("attn_v", 192, 576), ("ffn_down", 576, 1536))


def write_gguf_lora(path, layers, seed=0, magnitude=0.06):
    """A random LoRA (F32 halves) over the q, v and down projections of `layers`."""
    gguf = pytest.importorskip("gguf")
    rng = np.random.default_rng(seed)
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_string("general.type", "adapter")
    writer.add_string("adapter.type", "lora")
    writer.add_float32("adapter.lora.alpha", ALPHA)
    for layer in layers:
        for name, out_dim, in_dim in TARGETS:
            base = "blk.{}.{}.weight".format(layer, name)
            a = (rng.standard_normal((RANK, in_dim)) * magnitude).astype(np.float32)
            b = (rng.standard_normal((out_dim, RANK)) * magnitude).astype(np.float32)
            writer.add_tensor(base + ".lora_a", a)                    # [r, in]
            writer.add_tensor(base + ".lora_b", b)                    # [out, r]
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
