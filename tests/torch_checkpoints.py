"""Real PyTorch checkpoints for the import tests: `torch.save` of transformers models'
state_dicts (random weights, tiny real configs), in torch's zip format, its legacy stream
format, and as a `save_pretrained(safe_serialization=False)` directory (pytorch_model.bin +
config.json). Built once per session."""
import os

import pytest

_BUILT = {}


def tiny_models():
    """{name: transformers model} for LLaMA, Qwen2 and GPT-2 with small real configs."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    common = dict(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    return {
        "llama": transformers.LlamaForCausalLM(transformers.LlamaConfig(
            tie_word_embeddings=False, **common)).eval(),
        "qwen2": transformers.Qwen2ForCausalLM(transformers.Qwen2Config(
            tie_word_embeddings=True, **common)).eval(),
        "gpt2": transformers.GPT2LMHeadModel(transformers.GPT2Config(
            vocab_size=96, n_embd=32, n_layer=2, n_head=4, n_positions=64, bos_token_id=0,
            eos_token_id=1)).eval(),
    }


def checkpoints(folder):
    """{key: path}: `<arch>.pt` (zip), `<arch>_legacy.pt`, `<arch>_dir/` HF directories
    (config.json + pytorch_model.bin),
    plus the state_dicts themselves under `key + ':sd'`."""
    key = str(folder)
    if key in _BUILT:
        return _BUILT[key]
    import torch
    out = {}
    for name, model in tiny_models().items():
        sd = model.state_dict()
        out[name + ":sd"] = {k: v.detach().clone() for k, v in sd.items()}
        out[name] = os.path.join(key, name + ".pt")
        torch.save(sd, out[name])
        out[name + "_legacy"] = os.path.join(key, name + "_legacy.pt")
        torch.save(sd, out[name + "_legacy"], _use_new_zipfile_serialization=False)
        # An HF directory as older transformers wrote it: config.json + pytorch_model.bin
        # (current transformers writes SafeTensors even when asked not to).
        out[name + "_dir"] = os.path.join(key, name + "_dir")
        model.config.save_pretrained(out[name + "_dir"])
        torch.save(sd, os.path.join(out[name + "_dir"], "pytorch_model.bin"))
    _BUILT[key] = out
    return out


@pytest.fixture(scope="session")
def torch_checkpoints(tmp_path_factory):
    return checkpoints(tmp_path_factory.mktemp("torch_ckpt"))
