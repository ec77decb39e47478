"""A GGUF LoRA written with gguf-py in llama.cpp's layout (convert_lora_to_gguf.py's:
general.type=adapter, adapter.type=lora, adapter.lora.alpha; `blk.N.<proj>.weight.lora_a`
[r, in] and `.lora_b` [out, r]) on the real SmolLM2-135M Q4_1: apr's greedy tokens and
logits against llama.cpp's (llama-cpp-python, `lora_path`), compared as
test_llama_cpp_parity.py compares the bare models (llama_cpp_compare: same bound, same
clear-step rule)."""
import pytest

from lora_files import write_gguf_lora
from llama_cpp_compare import apr_greedy, clear_steps_agree, llama_cpp_logits

pytestmark = [pytest.mark.native, pytest.mark.real_model, pytest.mark.oracle]

STEPS = 16
PROMPT = "Explain what a CPU does."


def test_gguf_lora_matches_llama_cpp(smollm2_gguf, numba_ready, tmp_path):
    """On numba's kernels (the CLI's; numpy's decode every weight per token: minutes)."""
    from apr_native.engine import EngineOptions, load_engine
    lora = tmp_path / "smollm2-lora.gguf"
    write_gguf_lora(lora, range(0, 30, 3))
    engine = load_engine(smollm2_gguf, EngineOptions(backend="numba",
                                                     lora=((str(lora), 1.0),)))
    ids = engine.model.prompt_ids(PROMPT, chat=True)
    tokens, ours = apr_greedy(engine.model, ids, STEPS)
    engine.transformer.lora.set_scales([0.0])          # the plain model, no second load
    base_tokens, _ = apr_greedy(engine.model, ids, STEPS)
    print("adapted:", repr(engine.model.tokenizer.decode(tokens)))
    print("base:   ", repr(engine.model.tokenizer.decode(base_tokens)))
    assert tokens != base_tokens          # the adapter changes the answer
    theirs = llama_cpp_logits(smollm2_gguf, ids, tokens, lora_path=str(lora))
    assert clear_steps_agree(tokens, ours, theirs) >= STEPS // 2
