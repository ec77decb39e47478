"""Constrained decoding (apr_native.structured, llguidance) on the real models: for random
JSON schemas (nested objects, arrays with item limits, enums, bounded integers and
numbers, booleans, strings with length limits, required keys) every sampled output
parses and validates against its schema (oracle: `jsonschema`), with all the requests
decoded together by the batching scheduler."""
import json
import random

import pytest

from apr_core.runtime.batching.request import FinishEvent, GenerationRequest, TokenEvent
from apr_core.errors import AprError, ErrorCode
from apr_core.runtime.sampling import SamplerConfig

pytestmark = [pytest.mark.native, pytest.mark.real_model]

jsonschema = pytest.importorskip("jsonschema", reason="jsonschema is a dev dependency")
pytest.importorskip("llguidance", reason="llguidance is a native dependency")

WORDS = ["name", "city", "score", "tags", "active", "level", "owner", "items", "colour",
         "size", "count", "title", "kind", "rank", "notes", "price"]
SCHEMAS_PER_MODEL = 12


def random_schema(rng, depth=0):
    """An object schema of 1-4 properties, each a random leaf or (shallow) container."""
    keys = rng.sample(WORDS, rng.randint(1, 4))
    props = {k: random_value(rng, depth + 1) for k in keys}
    required = [k for k in keys if rng.random() < 0.7] or keys[:1]
    return {"type": "object", "properties": props, "required": required,
            "additionalProperties": False}


def random_value(rng, depth):
    kinds = ["string", "integer", "number", "boolean", "enum"]
    if depth < 3:
        kinds += ["array", "object"]
    kind = rng.choice(kinds)
    if kind == "string":
        low = rng.randint(0, 3)
        return {"type": "string", "minLength": low, "maxLength": low + rng.randint(1, 12)}
    if kind == "integer":
        low = rng.randint(-50, 50)
        return {"type": "integer", "minimum": low, "maximum": low + rng.randint(0, 500)}
    if kind == "number":
        return {"type": "number", "minimum": 0, "maximum": rng.choice([1, 10, 1000])}
    if kind == "boolean":
        return {"type": "boolean"}
    if kind == "enum":
        return {"enum": rng.sample(["red", "green", "blue", "small", "large", "x"],
                                   rng.randint(1, 4))}
    if kind == "array":
        low = rng.randint(0, 2)
        return {"type": "array", "items": random_value(rng, depth + 1), "minItems": low,
                "maxItems": low + rng.randint(0, 2)}
    return random_schema(rng, depth)


@pytest.fixture(scope="module", params=["smollm2", "qwen2.5"])
def engine(request, smollm2_gguf, qwen_gguf):
    from apr_native.engine import EngineOptions, load_engine
    return load_engine(smollm2_gguf if request.param == "smollm2" else qwen_gguf,
                       EngineOptions(max_batch=SCHEMAS_PER_MODEL))


def decode_all(engine, requests):
    """Every request batched together -> per request (text, finish reason)."""
    texts = [[] for _ in requests]
    finish = [None] * len(requests)
    scheduler = engine.scheduler

    def emit_for(i):
        def emit(event):
            if isinstance(event, TokenEvent):
                texts[i].append(event.text)
            elif isinstance(event, FinishEvent):
                texts[i].append(event.text)
                finish[i] = event.finish_reason
            else:
                raise event.error
        return emit
    for i, req in enumerate(requests):
        scheduler.submit(req, emit_for(i))
    while scheduler.has_work():
        scheduler.step()
    return ["".join(t) for t in texts], finish


def test_random_schemas_parse_and_validate(engine, request):
    from apr_native.structured import json_constraint
    rng = random.Random(request.node.callspec.id)     # other schemas for each model
    schemas = [random_schema(rng) for _ in range(SCHEMAS_PER_MODEL)]
    tok = engine.model.tokenizer
    requests = []
    for i, schema in enumerate(schemas):
        prompt = "Reply with a JSON object that follows this schema: " + json.dumps(schema)
        requests.append(GenerationRequest(
            engine.model.prompt_ids(prompt, chat=True),
            SamplerConfig(temperature=0.8, seed=i), max_tokens=400,
            constraint=json_constraint(tok, schema)))
    texts, finish = decode_all(engine, requests)
    for schema, text, reason in zip(schemas, texts, finish):
        assert reason == "stop", (schema, text)
        jsonschema.validate(json.loads(text), schema)


def test_json_object_mode_and_forks(engine):
    """`n` forks of one constrained request each run their own copy of the grammar: every
    choice that ends ends as a JSON object. (JSON-object mode bounds the syntax, not the
    length: a sampled choice of a 135M model may go on listing numbers until max_tokens,
    which no grammar forbids, so the test asks for at least two choices that end.)"""
    from apr_native.structured import json_constraint
    constraint = json_constraint(engine.model.tokenizer, None)
    prompt = "Give a cat's name and age as a short JSON object."
    req = GenerationRequest(engine.model.prompt_ids(prompt, chat=True),
                            SamplerConfig(temperature=0.3, seed=3), max_tokens=400, n=3,
                            constraint=constraint)
    out, finish = {}, {}
    for event in engine.events(req):
        out.setdefault(event.index, []).append(event.text)
        if isinstance(event, FinishEvent):
            finish[event.index] = event.finish_reason
    texts = ["".join(out[i]) for i in range(3)]
    ended = [text for i, text in enumerate(texts) if finish[i] == "stop"]
    assert len(ended) >= 2, (finish, texts)
    for text in ended:
        assert isinstance(json.loads(text), dict)
    assert all(finish[i] in ("stop", "length") for i in range(3)), finish
    assert len(set(texts)) > 1


def test_a_schema_llguidance_cannot_compile_is_an_argument_error(engine):
    from apr_native.structured import json_constraint
    for bad in ({"type": "integer", "minimum": 5, "maximum": 1},
                {"$ref": "#/definitions/missing"}, {"type": "no-such-type"}):
        with pytest.raises(AprError) as err:
            json_constraint(engine.model.tokenizer, bad)
        assert err.value.code is ErrorCode.ARGUMENT
