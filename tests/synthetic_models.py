"""Tiny random models written with apr_core's own writers, for tests that must run without
torch (the Python 3.8 + numpy 1.17 run): every tensor a family contract names, with the
contract's shapes, as an HF directory (SafeTensors + config.json) or a GGUF file whose
projections are block-quantized."""
import json
import os

import numpy as np

from apr_core import dtypes
from apr_core.formats.gguf import write_gguf
from apr_core.formats.safetensors import write_safetensors
from apr_core.model.config import config_from_gguf, config_from_hf
from apr_core.model.families import Family, contracts, eval_dim
from apr_core.quant import quantize
from apr_core.tensor import RawTensor

HF_BASE = {"vocab_size": 64, "hidden_size": 64, "intermediate_size": 128,
           "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
           "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "max_position_embeddings": 64,
           "hidden_act": "silu", "tie_word_embeddings": False}


def _tensors(config, family, source, seed, quant=None):
    rng = np.random.RandomState(seed)
    fam = Family(family, contracts()[family])
    flags, dims = config.flags(), config.dims()
    out = []
    for spec in fam.specs():
        template = spec.names.get(source)
        if template is None or spec.optional or (spec.when and not flags[spec.when]):
            continue
        if spec.fallback and flags["tied_embeddings"]:
            continue
        shape = tuple(eval_dim(d, dims) for d in spec.shape)
        if spec.hf_transposed and source == "hf":
            shape = shape[::-1]
        layers = range(config.n_layers) if spec.scope == "layer" else [None]
        for layer in layers:
            name = template if layer is None else template.replace("{i}", str(layer))
            if len(shape) == 1 and "norm" in spec.role:
                values = 1.0 + 0.1 * rng.standard_normal(shape)
            else:
                values = rng.standard_normal(shape) / np.sqrt(shape[-1])
            values = values.astype(np.float32)
            if quant and len(shape) == 2:
                dtype = dtypes.BY_NAME[quant]
                out.append(RawTensor(name, dtype, shape, quantize(values, dtype)))
            else:
                out.append(RawTensor(name, dtypes.BY_NAME["F32"], shape, values.tobytes()))
    return out


def write_hf_model(directory, family="llama", seed=0, **overrides):
    """An HF directory for `family` with `HF_BASE` (+ overrides) as config.json."""
    fam = contracts()[family]
    cfg = dict(HF_BASE, model_type=fam["architectures"]["hf"][0], **overrides)
    embed = fam["tensors"]["global"]["embedding"]["hf"]
    config = config_from_hf(cfg, {embed: None})
    os.makedirs(str(directory), exist_ok=True)
    write_safetensors(os.path.join(str(directory), "model.safetensors"),
                      _tensors(config, family, "hf", seed), {"format": "pt"})
    with open(os.path.join(str(directory), "config.json"), "w") as handle:
        json.dump(cfg, handle)
    return cfg


def gguf_kv(arch="llama", n_vocab=64, d_model=64, n_layers=2, n_heads=4, n_kv_heads=2,
            d_ff=128, theta=10000.0):
    return {"general.architecture": arch, arch + ".block_count": n_layers,
            arch + ".context_length": 64, arch + ".embedding_length": d_model,
            arch + ".feed_forward_length": d_ff, arch + ".attention.head_count": n_heads,
            arch + ".attention.head_count_kv": n_kv_heads, arch + ".rope.freq_base": theta,
            arch + ".attention.layer_norm_rms_epsilon": 1e-5, arch + ".vocab_size": n_vocab}


def write_gguf_model(path, arch="llama", quant="Q8_0", seed=0, tied=False, **kv_args):
    """A GGUF file with llama.cpp tensor names; 2-D weights quantized as `quant`."""
    kv = gguf_kv(arch, **kv_args)
    names = {"token_embd.weight": None}
    if not tied:
        names["output.weight"] = None
    config = config_from_gguf(kv, names)
    tensors = _tensors(config, config.arch, "gguf", seed, quant)
    write_gguf(str(path), tensors, kv)
    return kv
