"""`Engine(model, options)` shapes its own view of the model (issue 41 item 9): the
TextModel handed over is left as it was, so two engines over the same weights keep
their own context, KV cache type and chat template."""
import pytest

from apr_core.runtime.context_options import ContextOptions
from apr_core.runtime.engine import Engine, EngineOptions
from apr_core.runtime.text_model import TextModel

pytestmark = [pytest.mark.real_model]


def test_the_model_handed_over_is_left_as_it_was(smollm2_gguf):
    model = TextModel.load(smollm2_gguf)
    transformer, config = model.transformer, model.transformer.config
    kv_type, template = transformer.kv_type, model.chat_template
    short = Engine(model, EngineOptions(context=ContextOptions(ctx=64, kv_type="f32"),
                                        chat_template="llama3"))
    plain = Engine(model, EngineOptions())
    assert model.transformer is transformer and transformer.config is config
    assert (transformer.kv_type, model.chat_template) == (kv_type, template)
    assert (short.transformer.config.max_ctx, plain.transformer.config.max_ctx) == (
        64, config.max_ctx)
    assert (short.transformer.kv_type, plain.transformer.kv_type) == ("f32", "f16")
    assert short.model.chat_template == "llama3" and plain.model.chat_template == template
    assert short.transformer.lm_head is transformer.lm_head          # the weights, shared
    # within 64 positions the shorter context changes nothing
    same = Engine(model, EngineOptions(context=ContextOptions(kv_type="f32")))
    ids = model.prompt_ids("The capital of France is")
    assert short.generate(ids, max_tokens=4).token_ids == \
        same.generate(ids, max_tokens=4).token_ids
