"""apr_core.name_maps: the tensor name tables of seed 000 §10.8 (pure apr_core: runs on
the Python 3.8 compatibility run too)."""
import synthetic_models as sm
from apr_core.formats.open import open_model
from apr_core.model.families import contracts
from apr_core.name_maps import DECODER_APR, detect, name_map


def test_every_contract_role_has_a_canonical_name():
    for family, contract in contracts().items():
        for scope in ("global", "layer"):
            for role in contract["tensors"][scope]:
                assert role in DECODER_APR, (family, role)
        name_map(family)   # builds


def test_name_maps_translate_both_ways():
    llama = name_map("llama")
    assert llama.translate(["model.layers.7.self_attn.q_proj.weight",
                            "model.embed_tokens.weight"], "hf", "apr") == {
        "model.layers.7.self_attn.q_proj.weight": "layers.7.attn.q_proj.weight",
        "model.embed_tokens.weight": "token_embedding"}          # seed 000 §10.8 table
    assert llama.translate(["blk.0.attn_q.weight", "token_embd.weight"], "gguf", "apr") == {
        "blk.0.attn_q.weight": "layers.0.attn.q_proj.weight",
        "token_embd.weight": "token_embedding"}
    assert name_map("whisper").translate(
        ["model.encoder.embed_positions.weight", "model.decoder.embed_tokens.weight"],
        "hf", "apr") == {"model.encoder.embed_positions.weight": "encoder.positional_embedding",
                         "model.decoder.embed_tokens.weight": "decoder.token_embedding"}


def test_detect_tells_families_apart(tmp_path):
    for family, extra in (("llama", {}), ("qwen2", {}), ("gpt2", {"hidden_act": "gelu_new"})):
        sm.write_hf_model(tmp_path / family, family, **extra)
        with open_model(str(tmp_path / family)) as model:
            assert detect(list(model.tensors)) == (family, "hf")
    sm.write_gguf_model(tmp_path / "q.gguf", arch="qwen2")
    with open_model(str(tmp_path / "q.gguf")) as model:
        assert detect(list(model.tensors)) == ("qwen2", "gguf")
