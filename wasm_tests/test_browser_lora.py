"""LoRA in Chromium (issue 42 item 3, the browser half): a random PEFT adapter made with peft
for SmolLM2's shapes, loaded next to the real SmolLM2 GGUF with `apr.load(url, {lora})`,
gives native apr's logits (within LOGIT_TOLERANCE, exact kernels, f32 KV) and greedy
tokens with the same adapter, and they differ from the plain model's."""
import base64
import os
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from wasm_shared import GREEDY, LOGIT_TOLERANCE

pytestmark = [pytest.mark.native, pytest.mark.real_model]
QUERY = "pyodide=017&numpy=1&kernels=simd-exact"
# SmolLM2-135M's widths; two layers are enough to make adapter weights for its layers 0-1
SMOLLM2 = dict(vocab_size=64, hidden_size=576, intermediate_size=1536, num_hidden_layers=2,
               num_attention_heads=9, num_key_value_heads=3)


def make_peft_adapter(directory, seed=0):
    """A PEFT LoRA (r 8, alpha 16) over q, v and down of layers 0-1, random A and B."""
    torch = pytest.importorskip("torch")
    peft = pytest.importorskip("peft")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(seed)
    base = transformers.LlamaForCausalLM(transformers.LlamaConfig(**SMOLLM2))
    wrapped = peft.get_peft_model(base, peft.LoraConfig(
        r=8, lora_alpha=16, target_modules=["q_proj", "v_proj", "down_proj"],
        lora_dropout=0.0))
    with torch.no_grad():
        for name, param in wrapped.named_parameters():
            if "lora_" in name:
                param.copy_(torch.randn_like(param) * 0.05)
    wrapped.save_pretrained(str(directory))


def _native(path, adapter, ids):
    """Native apr with the adapter (`--lora DIR`): logits at `ids`, GREEDY greedy tokens."""
    from apr_core.runtime.context_options import ContextOptions
    from apr_core.runtime.engine import Engine, EngineOptions
    from apr_core.runtime.generate import generate_step
    engine = Engine.open(path, EngineOptions(
        dequantize=True, lora=((adapter, 1.0),), context=ContextOptions(kv_type="f32")))
    return (engine.transformer.forward(ids),
            list(generate_step(engine.transformer, ids, max_tokens=GREEDY)))


def test_peft_adapter_in_the_page_equals_native(open_page, native, smollm2_path, models_dir):
    start = time.time()
    adapter = os.path.join(models_dir, "lora-peft")
    if not os.path.isdir(adapter):
        make_peft_adapter(adapter)
    ids = native["ids"]
    with ThreadPoolExecutor(1) as pool:                # native runs while the page loads
        reference = pool.submit(_native, smollm2_path, adapter, ids)
        page = open_page(QUERY)
        page.call("apr.boot({})")
        info = page.call("apr.load('models/smollm2.gguf', {kvType: 'f32', "
                         "lora: [{url: 'models/lora-peft', scale: 1}]})")
        print("page loaded", time.time() - start)
        want, want_greedy = reference.result()
    print("native", time.time() - start)
    assert [entry["scale"] for entry in info["lora"]] == [1.0]
    got = page.call("(ids) => apr.logits(ids)", ids)
    logits = np.frombuffer(base64.b64decode(got["f32"]), "<f4").reshape(got["shape"])
    print("max logit difference", float(np.abs(logits - want).max()),
          "adapter's effect", float(np.abs(want - native["logits"]).max()))
    assert float(np.abs(logits - want).max()) <= LOGIT_TOLERANCE
    assert float(np.abs(want - native["logits"]).max()) > 100 * LOGIT_TOLERANCE
    greedy = page.call("([ids, n]) => apr.greedy(ids, n)", [ids, GREEDY])
    assert greedy["tokens"] == want_greedy
    # a chat session names its model by the file alone: refused over adapted weights
    got = page.call("apr.chat([{role: 'user', content: 'Hi'}], {maxTokens: 1, session: 's'})"
                    ".then(() => null, (e) => e.detail)")
    assert got is not None and got["code"] == "E009", got
    print("done", time.time() - start)
