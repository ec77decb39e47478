"""A random PEFT LoRA on the real SmolLM2-135M-Instruct Q4_1 (issue 42).

The adapter is made here with `peft` (r=8, lora_alpha=16, q/k/v/o/gate/up/down, random A
and B: `init_lora_weights=False`, torch seed 0) over the model transformers loads from the
GGUF itself (conftest's `smollm2_hf`: dequantized to a float32 LlamaForCausalLM, Q/K
rows un-permuted), so apr must lay the adapter's Q/K rows out as llama.cpp's converter laid
out the base's. apr runs the same GGUF with `EngineOptions(lora=...)` on numpy's kernels
with an f32 KV cache (float32 against float32, the base kept Q4_1 in memory). Held to
test_model_real's SmolLM2 tolerance: the logits of a chat prompt and of 8 greedy steps,
peft's greedy tokens, and at scale 0 the same engine gives transformers' logits without
the adapter (the adapter, not only the base, is what matches). Measured: 9.2e-5 over the
prompt, 7.3e-5 over the steps, 8.8e-5 at scale 0; the adapter moves the logits by 27.5.

The greedy steps are teacher-forced: transformers + peft generate 8 greedy tokens (through
their KV cache, keeping each step's logits), then apr runs the prompt and those tokens
through one KV cache (the prompt, then the 7 fed-back tokens as one chunk) and its argmax
at each step must be peft's token. Step k's row is apr's greedy choice after the same k
tokens, so this is apr's greedy decode, at the cost of two forward passes instead of eight
(numpy decodes every weight on each pass: ~2 s under load).
"""
import numpy as np
import pytest

from test_model_real import SMOL_TOL

pytestmark = [pytest.mark.real_model, pytest.mark.native, pytest.mark.oracle]

PROMPT = "Explain what a CPU does."
STEPS = 8
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


@pytest.fixture(scope="module")
def case(smollm2_gguf, smollm2_hf, tmp_path_factory):
    """transformers' logits without and with the peft adapter, its greedy tokens, and apr's
    engine with the saved adapter at scale 1."""
    torch = pytest.importorskip("torch")
    peft = pytest.importorskip("peft")
    from apr_core.runtime.context_options import ContextOptions
    from apr_native.engine import EngineOptions, load_engine
    adapter = str(tmp_path_factory.mktemp("smollm2_lora") / "adapter")
    torch.manual_seed(0)
    wrapped = peft.get_peft_model(smollm2_hf, peft.LoraConfig(
        r=8, lora_alpha=16, target_modules=TARGETS, lora_dropout=0.0,
        init_lora_weights=False)).eval()
    try:
        wrapped.save_pretrained(adapter, save_embedding_layers=False)
        engine = load_engine(smollm2_gguf, EngineOptions(
            backend="numpy", context=ContextOptions(kv_type="f32"), lora=((adapter, 1.0),)))
        ids = engine.model.prompt_ids(PROMPT, chat=True)
        with torch.no_grad():
            with wrapped.disable_adapter():
                base = wrapped(torch.tensor([ids])).logits[0].numpy()
            prompt_rows = wrapped(torch.tensor([ids])).logits[0]
            # transformers' greedy decoding (its KV cache), with each step's logits
            out = wrapped.generate(torch.tensor([ids]), max_new_tokens=STEPS, do_sample=False,
                                   output_logits=True, return_dict_in_generate=True)
        tokens = out.sequences[0, len(ids):].tolist()
        # the prompt's rows, then the rows after each fed-back token (the last prompt row
        # is generate's first step)
        adapted = torch.cat([prompt_rows, *out.logits[1:]]).numpy()
    finally:
        wrapped.unload()          # the session's smollm2_hf back as it was
    return dict(ids=ids, base=base, tokens=tokens, adapted=adapted, engine=engine,
                adapter=adapter, config=smollm2_hf.config.to_dict())


def test_peft_adapter_on_smollm2_matches_transformers_peft(case):
    engine, ids, tokens = case["engine"], case["ids"], case["tokens"]
    transformer = engine.transformer
    assert engine.backend == "numpy" and transformer.kv_type == "f32"
    assert transformer.memory_report()["dense_bytes"] == 0         # the base stays Q4_1
    cache = transformer.new_cache(len(ids) + STEPS)
    prompt_rows = transformer.forward(ids, cache)
    step_rows = transformer.forward(tokens[:-1], cache)
    got = np.concatenate([prompt_rows, step_rows])
    expected = case["adapted"]
    n = len(ids)
    prompt_error = float(np.abs(got[:n] - expected[:n]).max())
    step_error = float(np.abs(got[n:] - expected[n:]).max())
    effect = float(np.abs(expected[:n] - case["base"]).max())
    ours = got[n - 1:].argmax(axis=-1).tolist()
    top2 = np.sort(got[n - 1:], axis=-1)[:, -2:]
    print("SmolLM2 + peft LoRA: {} prompt tokens, max |delta| vs transformers + peft = {:.3g}"
          " (prompt), {:.3g} ({} greedy steps); the adapter moves the logits by {:.3g}; "
          "tokens {} {!r}; smallest top-2 gap {:.3g}".format(
              n, prompt_error, step_error, STEPS, effect, tokens,
              engine.model.tokenizer.decode(tokens), float((top2[:, 1] - top2[:, 0]).min())))
    assert prompt_error <= SMOL_TOL and step_error <= SMOL_TOL
    assert effect > 100 * SMOL_TOL          # else the adapter would hide in the tolerance
    assert ours == tokens


def test_scale_zero_is_transformers_without_the_adapter(case):
    transformer = case["engine"].transformer
    transformer.lora.set_scales([0.0])
    try:
        got = transformer.forward(case["ids"])
    finally:
        transformer.lora.set_scales([1.0])
    error = float(np.abs(got - case["base"]).max())
    print("SmolLM2, adapter at scale 0: max |delta| vs transformers without it = {:.3g}"
          .format(error))
    assert error <= SMOL_TOL


def convert_for_llama_cpp(adapter, config, folder):
    """The adapter as llama.cpp's own converter writes it (convert_lora_to_gguf.py from the
    llama-cpp-python sdist, extracted by scripts/fetch_tokenizer_vectors.sh), f32. The base
    folder holds only config.json (all the converter reads of the base)."""
    import json
    import os
    import subprocess
    import sys
    cache = os.environ.get("APR_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "apr")
    script = os.path.join(cache, "llama.cpp-src", "convert_lora_to_gguf.py")
    if not os.path.exists(script):
        pytest.skip("llama.cpp's convert_lora_to_gguf.py is missing: run scripts/setup.sh")
    base = folder / "base"
    base.mkdir()
    config = {k: v for k, v in config.items() if k != "quantization_config"}
    config["architectures"] = ["LlamaForCausalLM"]     # transformers' GGUF load names none
    (base / "config.json").write_text(json.dumps(config))
    out = folder / "lora-f32.gguf"
    done = subprocess.run([sys.executable, script, "--base", str(base), "--outtype", "f32",
                           "--outfile", str(out), adapter], capture_output=True, text=True,
                          env=dict(os.environ, HF_HUB_OFFLINE="1"), timeout=600)
    assert done.returncode == 0 and out.exists(), done.stderr[-2000:]
    return str(out)


def test_the_adapter_converted_by_llama_cpp_gives_llama_cpps_greedy_tokens(
        case, smollm2_gguf, numba_ready, tmp_path):
    """apr with the PEFT folder against llama.cpp with the GGUF its converter made of it:
    test_llama_cpp_parity's logit bound and clear-step rule over 16 greedy steps; apr reads
    the converted file as it reads the folder (the same logits)."""
    from apr_native.engine import EngineOptions, load_engine
    from llama_cpp_compare import apr_greedy, clear_steps_agree, llama_cpp_logits
    converted = convert_for_llama_cpp(case["adapter"], case["config"], tmp_path)
    steps = 16
    peft_dir = load_engine(smollm2_gguf, EngineOptions(backend="numba",
                                                       lora=((case["adapter"], 1.0),)))
    tokens, ours = apr_greedy(peft_dir.model, case["ids"], steps)
    gguf = load_engine(smollm2_gguf, EngineOptions(backend="numba", lora=((converted, 1.0),)))
    same_tokens, same_rows = apr_greedy(gguf.model, case["ids"], steps)
    assert same_tokens == tokens
    assert max(float(np.abs(a - b).max()) for a, b in zip(same_rows, ours)) < 1e-4
    theirs = llama_cpp_logits(smollm2_gguf, case["ids"], tokens, lora_path=converted)
    clear = clear_steps_agree(tokens, ours, theirs)
    print("llama.cpp with its converted adapter: {} of {} steps clear, greedy {!r}".format(
        clear, steps, peft_dir.model.tokenizer.decode(tokens)))
    assert clear >= steps // 2
