"""How llama.cpp's converter lays out a Hugging Face LLaMA-family model in GGUF: tensor
names and the Q/K row permutation (for the tests that build GGUFs the way it does)."""


def permute_for_llama_cpp(weight, n_head):
    """The row order llama.cpp's converter gives LLaMA Q/K weights and biases: within each
    head the two rotary halves are interleaved, so ggml's adjacent-pair RoPE applies."""
    rows, rest = weight.shape[0], weight.shape[1:]
    return (weight.reshape((n_head, 2, rows // n_head // 2) + rest)
            .swapaxes(1, 2).reshape(weight.shape))


GGUF_NAMES = {
    "model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
    "lm_head.weight": "output.weight",
    "input_layernorm.weight": "attn_norm.weight", "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight", "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.q_proj.bias": "attn_q.bias", "self_attn.k_proj.bias": "attn_k.bias",
    "self_attn.v_proj.bias": "attn_v.bias", "self_attn.o_proj.weight": "attn_output.weight",
    "self_attn.o_proj.bias": "attn_output.bias",
    "post_attention_layernorm.weight": "ffn_norm.weight", "mlp.gate_proj.weight":
    "ffn_gate.weight", "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}


# Gemma 3 names where they differ from LLaMA's (post_attention_layernorm is a post-norm).
GEMMA3_GGUF_NAMES = dict(GGUF_NAMES, **{
    "post_attention_layernorm.weight": "post_attention_norm.weight",
    "pre_feedforward_layernorm.weight": "ffn_norm.weight",
    "post_feedforward_layernorm.weight": "post_ffw_norm.weight",
    "self_attn.q_norm.weight": "attn_q_norm.weight",
    "self_attn.k_norm.weight": "attn_k_norm.weight"})
