"""Recipe table: exact choices worked out from llama.cpp's llama_tensor_get_type.

(The whole-model comparison with llama_model_quantize is in test_convert_quantize.py.)
"""
import pytest

from apr_core.errors import AprError, ErrorCode
from apr_core.quant.recipes import FILE_TYPES, category, gguf_name, plan, quantizable, resolve

ROLES = ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down")


def model(n_layers=8, width=256, tied=False):
    out = [("token_embd.weight", (1000, width)), ("output_norm.weight", (width,))]
    if not tied:
        out.append(("output.weight", (1000, width)))
    for i in range(n_layers):
        out.append(("blk.{}.attn_norm.weight".format(i), (width,)))
        out.extend(("blk.{}.{}.weight".format(i, r), (width, width)) for r in ROLES)
    return out


def by_role(result, role):
    return [result["blk.{}.{}.weight".format(i, role)] for i in range(8)]


def test_q4_k_m_use_more_bits_layers():
    # use_more_bits(i, 8): i < 1 or i >= 7 or (i - 1) % 3 == 2 -> layers 0, 3, 6, 7
    result = plan(model(), "Q4_K_M")
    more = ["Q6_K", "Q4_K", "Q4_K", "Q6_K", "Q4_K", "Q4_K", "Q6_K", "Q6_K"]
    assert by_role(result, "attn_v") == more and by_role(result, "ffn_down") == more
    assert by_role(result, "attn_q") == ["Q4_K"] * 8
    assert result["output.weight"] == "Q6_K" and result["token_embd.weight"] == "Q4_K"
    assert result["output_norm.weight"] is None and result["blk.3.attn_norm.weight"] is None


def test_tied_embedding_gets_the_output_type():
    assert plan(model(tied=True), "Q4_K_M")["token_embd.weight"] == "Q6_K"
    assert plan(model(tied=True), "Q8_0")["token_embd.weight"] == "Q8_0"
    assert plan(model(), "Q4_0")["output.weight"] == "Q6_K"


def test_q3_k_m_and_q4_k_s_counters():
    q3 = plan(model(), "Q3_K_M")
    assert by_role(q3, "attn_v") == ["Q5_K"] * 2 + ["Q4_K"] * 6
    assert by_role(q3, "ffn_down") == ["Q4_K"] * 8          # 8 // 16 == 0 layers get Q5_K
    assert by_role(q3, "attn_output") == ["Q4_K"] * 8 and by_role(q3, "attn_q") == ["Q3_K"] * 8
    q4s = plan(model(), "Q4_K_S")
    assert by_role(q4s, "attn_v") == ["Q5_K"] * 4 + ["Q4_K"] * 4
    assert by_role(q4s, "ffn_down") == ["Q5_K"] + ["Q4_K"] * 7


def test_q2_k_depends_on_gqa():
    assert by_role(plan(model(), "Q2_K", n_gqa=4), "attn_v") == ["Q4_K"] * 8
    assert by_role(plan(model(), "Q2_K", n_gqa=2), "attn_v") == ["Q3_K"] * 8


def test_fallback_for_rows_that_do_not_fit():
    odd = [("blk.0.ffn_up.weight", (64, 96)), ("blk.0.ffn_down.weight", (64, 96)),
           ("blk.0.attn_q.weight", (64, 40)), ("output.weight", (10, 96))]
    result = plan(odd, "Q4_K_M")
    # Q4_K -> Q5_0; ffn_down on layer 0 wants Q6_K -> Q8_0; 40 fits no block -> F16;
    # the output head with rows that do not fit Q4_K goes to Q8_0.
    assert result == {"blk.0.ffn_up.weight": "Q5_0", "blk.0.ffn_down.weight": "Q8_0",
                      "blk.0.attn_q.weight": "F16", "output.weight": "Q8_0"}
    assert plan(odd, "Q3_K_M")["blk.0.ffn_up.weight"] == "Q4_0"
    assert plan(odd, "Q5_K_S")["blk.0.ffn_up.weight"] == "Q5_1"


def test_plain_types_and_hooks():
    result = plan(model(), "q4_k")
    assert set(v for v in result.values()) == {"Q4_K", None}
    assert result["output.weight"] == "Q4_K" and result["blk.0.attn_norm.weight"] is None
    odd = plan([("blk.0.ffn_up.weight", (8, 96))], "q4_k")
    assert odd == {"blk.0.ffn_up.weight": None}         # plain types never fall back
    hooked = plan(model(), "q4_k", keep_embeddings_q8=True)
    assert hooked["token_embd.weight"] == "Q8_0" and hooked["output.weight"] == "Q4_K"
    assert plan(model(), "Q4_K_M", keep_embeddings_q8=True)["token_embd.weight"] == "Q8_0"


def test_float_file_types():
    result = plan(model(), "F16")
    assert result["output.weight"] == "F16" and result["blk.0.attn_v.weight"] == "F16"
    assert result["output_norm.weight"] is None


def test_hf_names():
    assert gguf_name("model.layers.12.self_attn.v_proj.weight") == "blk.12.attn_v.weight"
    assert gguf_name("lm_head.weight") == "output.weight"
    assert gguf_name("model.embed_tokens.weight") == "token_embd.weight"
    assert gguf_name("something.else") == "something.else"
    assert category("blk.3.attn_v.weight") == "attn_v"
    assert category("blk.3.attn_qkv.weight") == "attn_qkv"
    assert category("token_embd.weight") == "token_embd"
    assert not quantizable("blk.0.attn_norm.weight", (4, 4))
    assert not quantizable("blk.0.attn_q.bias", (4, 4))
    assert not quantizable("blk.0.attn_q.weight", (256,))


def test_resolve_and_errors():
    assert resolve("q4_k") == ("Q4_K", None)
    assert resolve("Q4_K") == ("Q4_K", None)
    assert resolve("Q8_0")[1] is FILE_TYPES["Q8_0"] and resolve("q8_0")[1] is None
    assert resolve("q4_k_m")[1] is FILE_TYPES["Q4_K_M"]
    with pytest.raises(AprError) as info:
        resolve("Q9_Z")
    assert info.value.code == ErrorCode.ARGUMENT
    required = {"Q4_K_M", "Q5_K_M", "Q4_K_S", "Q6_K", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1",
                "Q2_K", "Q3_K_M", "F16", "BF16"}
    assert required <= set(FILE_TYPES)
