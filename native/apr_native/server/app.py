"""The ASGI app: OpenAI's routes over one `ServingEngine`.

    app = create_app(ServingEngine(path, "demo"), ServerSettings(api_key="secret"))
    uvicorn.run(app, host="127.0.0.1", port=8080)

Routes: POST /v1/chat/completions, /v1/completions, /v1/embeddings; GET /v1/models,
/v1/models/{id} (with the backend and context in `meta`), /health (alive, and the
backend), /ready (503 until the model is loaded), /metrics (Prometheus). With an API key,
/v1/* and /metrics want `Authorization: Bearer KEY`; the probes stay open for load
balancers. `cors_origins` lets web pages on those origins call the API. The same app
object runs under uvicorn (`apr serve`) or as Ray Serve replicas (examples/ray_serve.py).
"""
from __future__ import annotations

import asyncio
import hmac
import json
import time
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Optional, Tuple

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from apr_core.errors import AprError

from . import schemas, work
from .choices import RequestTracker
from .engine import ServingEngine
from .errors import ApiError, error_response, from_apr_error
from .metrics import MeasureMiddleware, Metrics
from .openai_format import Completion, embedding_list, model_card, model_list
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


Handler = Callable[[Request], Awaitable[Any]]


def create_app(engine: ServingEngine, settings: ServerSettings = ServerSettings(),
               manage_engine: bool = True) -> Starlette:
    """The ASGI app serving `engine`. With `manage_engine` the app's lifespan starts the
    engine's worker (and its model load) and stops it on shutdown."""
    api_paths = ["/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/models",
                 "/health", "/ready", "/metrics"]
    metrics = Metrics(api_paths, lambda: engine.queue_depth, lambda: 1 if engine.ready else 0,
                      engine.stats)
    expected_auth = None if not settings.api_key else "Bearer " + settings.api_key

    def endpoint(handler: Handler, protected: bool = True, needs_model: bool = True
                 ) -> Handler:
        """Auth, readiness and the mapping of ApiError to OpenAI error bodies."""
        async def wrapped(request: Request) -> Any:
            try:
                if protected and expected_auth is not None and not hmac.compare_digest(
                        request.headers.get("authorization", "").encode(),
                        expected_auth.encode()):
                    raise ApiError(401, "invalid or missing API key (Authorization: Bearer)",
                                   code="invalid_api_key")
                if needs_model and not engine.ready:
                    raise ApiError(503, engine.load_error or "model is still loading",
                                   code="model_not_ready", headers={"Retry-After": "1"})
                return await handler(request)
            except ApiError as err:
                return error_response(err)
            except AprError as err:     # the template, tokenizer or schema refused it
                return error_response(from_apr_error(err))
        return wrapped

    def check_model(name: str) -> None:
        if name != engine.model_id:
            raise ApiError(404, "model '{}' not found; this server serves '{}'".format(
                name, engine.model_id), param="model", code="model_not_found")

    def meta() -> dict:
        model = engine.model
        info = {"backend": engine.backend, "max_batch": engine.options.max_batch}
        if model is not None:
            info["n_ctx_train"] = model.transformer.config.max_ctx
            info["n_vocab"] = model.transformer.config.n_vocab
        return info

    async def generate(request: Request, kind: str, req: Any,
                       prepare: Callable[[Any], list], param: str) -> Any:
        check_model(req.model)
        started = time.perf_counter()
        model = engine.model
        generation = await asyncio.to_thread(work.generation, model, prepare, req.params,
                                             req.output, param)
        job = engine.submit(generation)
        completion = Completion(kind, engine.model_id, model.tokenizer.token_bytes,
                                engine.backend)
        tracker = RequestTracker(req.params.n, req.output, req.params.logprobs is not None)
        recorder = Recorder(tracker, metrics, started)
        if req.params.stream:
            return EventStream(job, completion, recorder, req.params.include_usage)
        return await collect(job, request.receive, completion, recorder)

    async def chat(request: Request) -> Any:
        req = schemas.chat_request(await read_json(request, settings.max_body),
                                   settings.max_tokens)
        return await generate(request, "chat", req,
                              lambda m: work.chat_ids(m, req.messages, req.output), "messages")

    async def completions(request: Request) -> Any:
        req = schemas.completion_request(await read_json(request, settings.max_body),
                                         settings.max_tokens)
        return await generate(request, "text", req, lambda m: work.prompt_ids(m, req.prompt),
                              "prompt")

    async def embeddings(request: Request) -> Any:
        req = schemas.embedding_request(await read_json(request, settings.max_body))
        check_model(req.model)
        result = await engine.run(work.embeddings(req.inputs))
        metrics.prompt_tokens.inc(result.prompt_tokens)
        return JSONResponse(embedding_list(result.vectors, req.encoding_format,
                                           engine.model_id, result.prompt_tokens))

    async def audio(request: Request) -> Any:
        raise not_a_speech_model(engine.model_id)     # Whisper models: speech_app.py

    async def models(request: Request) -> Any:
        return JSONResponse(model_list(engine.model_id, engine.created, meta()))

    async def model(request: Request) -> Any:
        check_model(request.path_params["model"])
        return JSONResponse(model_card(engine.model_id, engine.created, meta()))

    async def health(request: Request) -> Any:
        return JSONResponse({"status": "ok", "backend": engine.backend})

    async def ready(request: Request) -> Any:
        if engine.ready:
            return JSONResponse({"status": "ready", "model": engine.model_id})
        raise ApiError(503, engine.load_error or "model is still loading",
                       code="model_not_ready", headers={"Retry-After": "1"})

    async def prometheus(request: Request) -> Any:
        return Response(metrics.exposition(), media_type=metrics.content_type)

    async def http_error(request: Request, exc: Exception) -> Any:
        """Starlette's own 404/405 in OpenAI's error shape."""
        assert isinstance(exc, HTTPException)
        return error_response(ApiError(exc.status_code, str(exc.detail),
                                       code="not_found" if exc.status_code == 404 else None))

    @asynccontextmanager
    async def lifespan(app: Any) -> Any:
        if manage_engine:
            engine.start()
        yield
        if manage_engine:
            engine.stop()

    routes = [
        Route("/v1/chat/completions", endpoint(chat), methods=["POST"]),
        Route("/v1/completions", endpoint(completions), methods=["POST"]),
        Route("/v1/embeddings", endpoint(embeddings), methods=["POST"]),
        Route("/v1/models", endpoint(models, needs_model=False), methods=["GET"]),
        *(Route(path, endpoint(audio, needs_model=False), methods=["POST"])
          for path in AUDIO_ROUTES),
        Route("/v1/models/{model:path}", endpoint(model, needs_model=False), methods=["GET"]),
        Route("/health", endpoint(health, protected=False, needs_model=False)),
        Route("/ready", endpoint(ready, protected=False, needs_model=False)),
        Route("/metrics", endpoint(prometheus, needs_model=False)),
    ]
    middleware = [Middleware(MeasureMiddleware, metrics=metrics)]
    if settings.cors_origins:       # outermost: preflights are answered before auth
        middleware.insert(0, Middleware(
            CORSMiddleware, allow_origins=list(settings.cors_origins),
            allow_methods=["GET", "POST", "OPTIONS"],
            allow_headers=["Authorization", "Content-Type"], max_age=600))
    app = Starlette(routes=routes, lifespan=lifespan,
                    exception_handlers={HTTPException: http_error}, middleware=middleware)
    app.state.engine = engine
    app.state.metrics = metrics
    return app


__all__ = ["ServerSettings", "create_app", "read_json", "DEFAULT_MAX_BODY",
           "DEFAULT_MAX_TOKENS"]
