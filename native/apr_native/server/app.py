"""The ASGI app: OpenAI's routes over one `ServingEngine`.

    app = create_app(ServingEngine(path, "demo"), ServerSettings(api_key="secret"))
    uvicorn.run(app, host="127.0.0.1", port=8080)

Routes: POST /v1/chat/completions, /v1/completions, /v1/embeddings; GET /v1/models,
/v1/models/{id} (with the backend, context and sampling defaults in `meta`), /props
(llama-server's: `default_generation_settings`, the sampling a request gets for the
fields it leaves out and where each value came from), /health (alive, and the backend),
/ready (503 until the model is loaded), /metrics (Prometheus), POST /slots/{id}
(llama-server's slot save/restore/erase, with `slot_save_path`: slots.py). With an API key, /v1/*,
/props and /metrics want `Authorization: Bearer KEY`; the probes stay open for load
balancers. `cors_origins` lets web pages on those origins call the API. The same app
object runs under uvicorn (`apr serve`) or as Ray Serve replicas (examples/ray_serve.py).
"""
from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from typing import Any, Callable, Optional, Tuple

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from . import schemas, service, work
from .choices import RequestTracker
from .engine import ServingEngine
from .lora_select import adapters_info, request_scales
from .errors import ApiError
from .metrics import Metrics
from .openai_format import Completion, embedding_list
from .server_log import note_usage
from .service import build_app, endpoint_wrapper, service_routes
from .slots import Slots, slot_routes
from .streaming import EventStream, Recorder, collect
from .transcriptions import TASKS as AUDIO_ROUTES, not_a_speech_model

DEFAULT_MAX_BODY = 4 << 20      # bytes; a long chat history is well under this
DEFAULT_MAX_TOKENS = 512        # per-request cap on generated tokens


@dataclass(frozen=True)
class ServerSettings:
    api_key: Optional[str] = None
    max_tokens: int = DEFAULT_MAX_TOKENS
    max_body: int = DEFAULT_MAX_BODY
    cors_origins: Tuple[str, ...] = ()      # origins whose pages may call the API; "*": any
    slot_save_path: Optional[str] = None    # folder of POST /slots/{id} session files


async def read_json(request: Request, limit: int) -> dict:
    """The body as a JSON object; 413 past `limit` bytes (checked before and while
    reading, so a huge body is never held), 400 for anything that is not a JSON object."""
    declared = request.headers.get("content-length")
    if declared is not None and (not declared.isdigit() or int(declared) > limit):
        raise ApiError(413, "request body larger than {} bytes".format(limit),
                       code="request_too_large")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise ApiError(413, "request body larger than {} bytes".format(limit),
                           code="request_too_large")
    try:
        data = json.loads(bytes(body))
    except (ValueError, RecursionError):
        raise ApiError(400, "request body is not valid JSON", code="invalid_json")
    if not isinstance(data, dict):
        raise ApiError(400, "request body must be a JSON object", code="invalid_json")
    return data


def create_app(engine: ServingEngine, settings: ServerSettings = ServerSettings(),
               manage_engine: bool = True) -> Starlette:
    """The ASGI app serving `engine`. With `manage_engine` the app's lifespan starts the
    engine's worker (and its model load) and stops it on shutdown."""
    api_paths = ["/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/models",
                 "/props", "/health", "/ready", "/metrics"]
    metrics = Metrics(api_paths, lambda: engine.queue_depth, lambda: 1 if engine.ready else 0,
                      engine.stats)
    endpoint = endpoint_wrapper(engine, settings.api_key)
    slots = Slots(engine, settings.slot_save_path) if settings.slot_save_path else None

    def check_model(name: str) -> None:
        service.check_model(engine, name)

    def meta() -> dict:
        model = engine.model
        info = {"backend": engine.backend, "max_batch": engine.options.max_batch}
        if model is not None:
            info["n_ctx_train"] = model.transformer.config.max_ctx
            info["n_vocab"] = model.transformer.config.n_vocab
        if engine.sampling_defaults is not None:
            info["sampling_defaults"] = engine.sampling_defaults.report()
        return info

    def defaults() -> dict:
        """SamplerConfig field -> value for the fields a request leaves out."""
        return engine.sampling_defaults.values if engine.sampling_defaults else {}

    async def generate(request: Request, kind: str, req: Any,
                       prepare: Callable[[Any], list], param: str, id_slot: int = 0,
                       body: Optional[dict] = None) -> Any:
        check_model(req.model)
        started = time.perf_counter()
        model = engine.model
        adapters = getattr(model.transformer, "lora", None)
        lora = request_scales(body or {}, adapters.paths if adapters is not None else ())
        generation = await asyncio.to_thread(work.generation, model, prepare, req.params,
                                             req.output, param)
        job = engine.submit(generation, lora)
        completion = Completion(kind, engine.model_id, model.tokenizer.token_bytes,
                                engine.backend)
        tracker = RequestTracker(req.params.n, req.output, req.params.logprobs is not None)
        note_usage(request.scope, lambda: (tracker.prompt_tokens, tracker.completion_tokens))
        recorder = Recorder(tracker, metrics, started)
        if slots is not None:       # the slot's conversation, for POST /slots/{id}
            recorder = slots.recording(recorder, id_slot, generation.prompt_ids)
        if req.params.stream:
            return EventStream(job, completion, recorder, req.params.include_usage)
        return await collect(job, request.receive, completion, recorder)

    async def chat(request: Request) -> Any:
        body = await read_json(request, settings.max_body)
        req = schemas.chat_request(body, settings.max_tokens, defaults())
        return await generate(request, "chat", req,
                              lambda m: work.chat_ids(m, req.messages, req.output), "messages",
                              slots.slot_of(body) if slots is not None else 0, body)

    async def completions(request: Request) -> Any:
        body = await read_json(request, settings.max_body)
        req = schemas.completion_request(body, settings.max_tokens, defaults())
        return await generate(request, "text", req, lambda m: work.prompt_ids(m, req.prompt),
                              "prompt", slots.slot_of(body) if slots is not None else 0, body)

    async def embeddings(request: Request) -> Any:
        req = schemas.embedding_request(await read_json(request, settings.max_body))
        check_model(req.model)
        result = await engine.run(work.embeddings(req.inputs))
        metrics.prompt_tokens.inc(result.prompt_tokens)
        note_usage(request.scope, lambda: (result.prompt_tokens, 0))
        return JSONResponse(embedding_list(result.vectors, req.encoding_format,
                                           engine.model_id, result.prompt_tokens))

    async def props(request: Request) -> Any:
        """llama-server's GET /props: the generation settings a request starts from."""
        config = engine.model.transformer.config
        generation = dict(engine.sampling_defaults.report(), n_ctx=config.max_ctx,
                            max_tokens=settings.max_tokens)
        return JSONResponse({"default_generation_settings": generation,
                             "model": engine.model_id, "total_slots": engine.options.max_batch,
                             "backend": engine.backend})

    async def lora_adapters(request: Request) -> Any:
        """llama-server's GET /lora-adapters: `[{id, path, scale}]` loaded at start."""
        return JSONResponse(adapters_info(engine.model.transformer))

    async def audio(request: Request) -> Any:
        raise not_a_speech_model(engine.model_id)     # Whisper models: speech_app.py

    routes = [
        Route("/v1/chat/completions", endpoint(chat), methods=["POST"]),
        Route("/v1/completions", endpoint(completions), methods=["POST"]),
        Route("/v1/embeddings", endpoint(embeddings), methods=["POST"]),
        Route("/props", endpoint(props), methods=["GET"]),
        Route("/lora-adapters", endpoint(lora_adapters), methods=["GET"]),
        *(Route(path, endpoint(audio, needs_model=False), methods=["POST"])
          for path in AUDIO_ROUTES),
        *slot_routes(slots, lambda r: read_json(r, settings.max_body), endpoint),
        *service_routes(engine, metrics, meta, endpoint),
    ]
    return build_app(routes, engine, metrics, settings.cors_origins, manage_engine)


__all__ = ["ServerSettings", "create_app", "read_json", "DEFAULT_MAX_BODY",
           "DEFAULT_MAX_TOKENS"]
