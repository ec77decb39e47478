"""A GGUF LoRA written with gguf-py in llama.cpp's layout (convert_lora_to_gguf.py's:
general.type=adapter, adapter.type=lora, adapter.lora.alpha; `blk.N.<proj>.weight.lora_a`
[r, in] and `.lora_b` [out, r]) on the real SmolLM2-135M Q4_1: apr's greedy tokens and
logits against llama.cpp's (llama-cpp-python, `lora_path`), compared as
test_llama_cpp_parity.py compares the bare models (same LOGIT_TOL, same clear-step rule)."""
import numpy as np
import pytest

from test_llama_cpp_parity import LOGIT_TOL, TOP, apr_greedy, llama_cpp_logits

pytestmark = [pytest.mark.native, pytest.mark.real_model, pytest.mark.oracle]

STEPS = 16
PROMPT = "Explain what a CPU does."
RANK, ALPHA = 8, 16.0
# SmolLM2-135M: d_model 576, kv_dim 192, d_ff 1536; (gguf name, out, in) per target
TARGETS = (("attn_q", 576, 576), ("attn_v", 192, 576), ("ffn_down", 576, 1536))


def write_gguf_lora(path, layers, seed=0, magnitude=0.06):
    """A random LoRA over `layers`' q, v and down projections; returns nothing."""
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


def test_gguf_lora_matches_llama_cpp(smollm2_gguf, numba_ready, tmp_path):
    """On numba's kernels (the CLI's; numpy's decode every weight per token: minutes)."""
    from apr_native.engine import EngineOptions, load_engine
    lora = tmp_path / "smollm2-lora.gguf"
    write_gguf_lora(lora, range(0, 30, 3))
    engine = load_engine(smollm2_gguf, EngineOptions(backend="numba",
                                                     lora=((str(lora), 1.0),)))
    ids = engine.model.prompt_ids(PROMPT, chat=True)
    tokens, ours = apr_greedy(engine.model, ids, STEPS)
    base = load_engine(smollm2_gguf, EngineOptions(backend="numba"))
    base_tokens, _ = apr_greedy(base.model, ids, STEPS)
    print("adapted:", repr(engine.model.tokenizer.decode(tokens)))
    print("base:   ", repr(engine.model.tokenizer.decode(base_tokens)))
    assert tokens != base_tokens          # the adapter changes the answer
    theirs = llama_cpp_logits(smollm2_gguf, ids, tokens, lora_path=str(lora))
    clear = 0
    for step, (mine, ref) in enumerate(zip(ours, theirs)):
        top = np.argsort(mine)[-TOP:]
        moved = ref[top] - mine[top]
        worst = np.abs(moved - moved.mean()).max()
        assert worst <= LOGIT_TOL, "step {}: llama.cpp's logits differ by {:.3f}".format(
            step, worst)
        gap = mine[top[-1]] - mine[top[-2]]
        if gap > 2 * LOGIT_TOL:
            clear += 1
            assert int(ref.argmax()) == tokens[step], step
    assert clear >= STEPS // 2, clear
