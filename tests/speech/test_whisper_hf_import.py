"""`apr import` of a Hugging Face Whisper directory (config.json + model.safetensors +
tokenizer.json + generation_config.json) against transformers on the same directory.

The model is a tiny random WhisperForConditionalGeneration (d_model 64, 2 + 2 layers,
4 heads, Whisper's real 51865-token vocabulary so the real tokenizer.json of the Whisper
base package fits; 1500 audio positions so a 30 s window runs). apr renames and fuses its
weights through the one Whisper name table; transformers is the oracle: encoder output,
decoder logits for a token prefix, and greedy tokens, all on the same features.
"""
from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest

from apr_core.speech.model import load_whisper

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

pytestmark = [pytest.mark.native, pytest.mark.oracle, pytest.mark.real_model]

# transformers and apr both compute in float32; the bound is the brief's 1e-4.
TOL = 1e-4
STEPS = 8


def _generation_config(base_dir):
    """HF generation_config.json fields from the Whisper base package's CTranslate2
    config.json and vocabulary (token ids found by their text)."""
    with open(os.path.join(base_dir, "config.json"), encoding="utf-8") as handle:
        ct2 = json.load(handle)
    with open(os.path.join(base_dir, "vocabulary.txt"), encoding="utf-8") as handle:
        vocabulary = handle.read().split("\n")
    index = {token: i for i, token in enumerate(vocabulary)}
    return {"suppress_tokens": ct2["suppress_ids"],
            "begin_suppress_tokens": ct2["suppress_ids_begin"],
            "alignment_heads": ct2["alignment_heads"],
            "lang_to_id": {vocabulary[i]: i for i in ct2["lang_ids"]},
            "task_to_id": {"transcribe": index["<|transcribe|>"],
                           "translate": index["<|translate|>"]},
            "no_timestamps_token_id": index["<|notimestamps|>"],
            "decoder_start_token_id": index["<|startoftranscript|>"],
            "is_multilingual": True}


@pytest.fixture(scope="module")
def hf_dir(whisper_base_dir, tmp_path_factory):
    torch.manual_seed(1234)
    config = transformers.WhisperConfig(
        vocab_size=51865, num_mel_bins=80, d_model=64, encoder_layers=2, decoder_layers=2,
        encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=128,
        decoder_ffn_dim=128, max_source_positions=1500, max_target_positions=64)
    model = transformers.WhisperForConditionalGeneration(config).eval()
    with torch.no_grad():       # random (not zero) biases and norms, so a dropped one shows
        for name, param in model.named_parameters():
            if name.endswith("bias") or "layer_norm" in name:
                param.add_(torch.randn_like(param) * 0.1)
    directory = str(tmp_path_factory.mktemp("whisper_hf") / "tiny-whisper")
    model.save_pretrained(directory, safe_serialization=True)
    shutil.copy(os.path.join(whisper_base_dir, "tokenizer.json"), directory)
    path = os.path.join(directory, "generation_config.json")
    with open(path, encoding="utf-8") as handle:
        generation = json.load(handle)
    generation.update(_generation_config(whisper_base_dir))
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(generation, handle)
    with open(os.path.join(directory, "preprocessor_config.json"), "w") as handle:
        json.dump({"feature_size": 80, "sampling_rate": 16000}, handle)
    return directory, model


@pytest.fixture(scope="module")
def imported(hf_dir, tmp_path_factory):
    from apr_native.cli.main import main
    path = str(tmp_path_factory.mktemp("whisper_hf_apr") / "tiny.apr")
    os.environ.setdefault("APR_QUIET", "1")
    assert main(["import", hf_dir[0], "-o", path, "--json"]) == 0
    return load_whisper(path)


@pytest.fixture(scope="module")
def features():
    rng = np.random.default_rng(7)
    return rng.standard_normal((80, 3000)).astype(np.float32)     # [n_mels, frames]


def test_imported_hyperparameters_and_generation_settings(hf_dir, imported):
    directory, model = hf_dir
    cfg = model.config
    assert imported.config._asdict() == {
        "n_mels": cfg.num_mel_bins, "n_audio_ctx": cfg.max_source_positions,
        "n_audio_state": cfg.d_model, "n_audio_head": cfg.encoder_attention_heads,
        "n_audio_layer": cfg.encoder_layers, "n_vocab": cfg.vocab_size,
        "n_text_ctx": cfg.max_target_positions, "n_text_state": cfg.d_model,
        "n_text_head": cfg.decoder_attention_heads, "n_text_layer": cfg.decoder_layers}
    with open(os.path.join(directory, "generation_config.json"), encoding="utf-8") as handle:
        generation = json.load(handle)
    assert imported.sot == generation["decoder_start_token_id"]
    assert imported.no_timestamps == generation["no_timestamps_token_id"]
    assert imported.transcribe_token == generation["task_to_id"]["transcribe"]
    assert imported.languages == {k[2:-2]: v for k, v in generation["lang_to_id"].items()}
    assert imported.generation["suppress_ids"] == generation["suppress_tokens"]
    assert imported.generation["suppress_ids_begin"] == generation["begin_suppress_tokens"]
    assert imported.multilingual


def test_encoder_output_matches_transformers(hf_dir, imported, features):
    model = hf_dir[1]
    ours = imported.net.encode(features)                               # [1500, 64]
    with torch.no_grad():
        theirs = model.model.encoder(torch.from_numpy(features[None])).last_hidden_state
    assert ours.shape == tuple(theirs.shape[1:])
    assert np.abs(ours - theirs[0].numpy()).max() < TOL


def test_decoder_logits_match_transformers(hf_dir, imported, features):
    model = hf_dir[1]
    prefix = imported.sot_sequence("en", "transcribe") + [imported.no_timestamps] + \
        imported.encode_text(" Hello world")
    state = imported.net.start(imported.net.encode(features))
    ours = imported.net.logits(imported.net.decode(state, np.array([prefix])))  # [1, n, V]
    with torch.no_grad():
        theirs = model(input_features=torch.from_numpy(features[None]),
                       decoder_input_ids=torch.tensor([prefix])).logits.numpy()
    assert ours.shape == theirs.shape
    assert np.abs(ours - theirs).max() < TOL


def test_greedy_tokens_match_transformers(hf_dir, imported, features):
    """apr's decoder loop (argmax, no Whisper suppression rules: a random model's
    choices would be cut by them) against transformers' manual greedy loop."""
    model = hf_dir[1]
    prefix = imported.sot_sequence("en", "transcribe") + [imported.no_timestamps]
    state = imported.net.start(imported.net.encode(features))
    ours, step = [], np.array([prefix])
    for _ in range(STEPS):
        token = int(imported.net.logits(imported.net.decode(state, step))[0, -1].argmax())
        ours.append(token)
        step = np.array([[token]])
    theirs, ids = [], torch.tensor([prefix])
    with torch.no_grad():
        encoded = model.model.encoder(torch.from_numpy(features[None]))
        for _ in range(STEPS):
            logits = model(encoder_outputs=encoded, decoder_input_ids=ids).logits
            token = int(logits[0, -1].argmax())
            theirs.append(token)
            ids = torch.cat([ids, torch.tensor([[token]])], dim=1)
    assert ours == theirs
    assert len(set(ours)) > 1 or ours[0] != imported.eot     # the loop really decoded


def test_k_projection_bias_is_fused_as_zeros(hf_dir, imported):
    """HF's k_proj has no bias: the fused q|k|v bias has zeros in its k rows."""
    model = hf_dir[1]
    d = model.config.d_model
    bias = imported.net.w["encoder.blocks.0.attn.qkv.bias"]            # [3d]
    layer = model.model.encoder.layers[0].self_attn
    assert np.array_equal(bias[:d], layer.q_proj.bias.detach().numpy())
    assert not bias[d:2 * d].any()
    assert np.array_equal(bias[2 * d:], layer.v_proj.bias.detach().numpy())
