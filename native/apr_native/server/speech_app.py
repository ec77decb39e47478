"""The ASGI app of a speech (Whisper) model: OpenAI's audio routes over one `SpeechEngine`.

    app = create_speech_app(SpeechEngine(path, "whisper-base.apr"), ServerSettings())
    uvicorn.run(app, host="127.0.0.1", port=8080)

Routes: POST /v1/audio/transcriptions and /v1/audio/translations (multipart, see
transcriptions.py); GET /v1/models, /v1/models/{id}, /health, /ready, /metrics. The text
routes (chat, completions, embeddings) answer 400: a Whisper model generates no text from a
prompt. Auth, CORS and the error shape are those of the text server (app.py).
"""
from __future__ import annotations

import asyncio
import hmac
from contextlib import asynccontextmanager
from typing import Any, Awaitable, Callable

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from apr_core.errors import AprError

from .app import ServerSettings
from .errors import ApiError, error_response, from_apr_error
from .metrics import MeasureMiddleware, Metrics
from .openai_format import model_card, model_list
from .speech_engine import SpeechEngine
from .transcriptions import (DEFAULT_MAX_UPLOAD, TASKS, read_form, transcription_request,
                             transcription_response)

Handler = Callable[[Request], Awaitable[Any]]
TEXT_ROUTES = ("/v1/chat/completions", "/v1/completions", "/v1/embeddings")


def bad_audio(err: AprError) -> ApiError:
    """An upload `read_audio` refused: the client's fault, with apr's error code."""
    return ApiError(400, "cannot read the audio file: {}".format(err), param="file",
                    code=err.code.category.lower())


def create_speech_app(engine: SpeechEngine, settings: ServerSettings = ServerSettings(),
                      max_upload: int = DEFAULT_MAX_UPLOAD, manage_engine: bool = True
                      ) -> Starlette:
    """The ASGI app serving `engine`; uploads beyond `max_upload` bytes get 413. With
    `manage_engine` the lifespan starts the engine (its model load) and stops it."""
    api_paths = list(TASKS) + ["/v1/models", "/health", "/ready", "/metrics"]
    metrics = Metrics(api_paths, lambda: engine.queue_depth, lambda: 1 if engine.ready else 0,
                      lambda: {})
    expected_auth = None if not settings.api_key else "Bearer " + settings.api_key

    def endpoint(handler: Handler, protected: bool = True) -> Handler:
        async def wrapped(request: Request) -> Any:
            try:
                if protected and expected_auth is not None and not hmac.compare_digest(
                        request.headers.get("authorization", "").encode(),
                        expected_auth.encode()):
                    raise ApiError(401, "invalid or missing API key (Authorization: Bearer)",
                                   code="invalid_api_key")
                return await handler(request)
            except ApiError as err:
                return error_response(err)
            except AprError as err:     # transcribe refused an option (language, prompt)
                return error_response(from_apr_error(err))
        return wrapped

    def meta() -> dict:
        info = {"backend": engine.backend, "task": "speech-to-text"}
        info.update(engine.stats())
        return info

    async def transcriptions(request: Request) -> Any:
        from apr_core.speech.audio import read_audio
        if not engine.ready:
            raise ApiError(503, engine.load_error or "model is still loading",
                           code="model_not_ready", headers={"Retry-After": "1"})
        form = await read_form(request, max_upload)
        try:
            req = await transcription_request(form, TASKS[request.url.path])
        finally:
            await form.close()
        if req.model != engine.model_id:
            raise ApiError(404, "model '{}' not found; this server serves '{}'".format(
                req.model, engine.model_id), param="model", code="model_not_found")
        try:
            samples = await asyncio.to_thread(read_audio, req.audio)
        except AprError as err:
            raise bad_audio(err)
        result = await engine.transcribe(samples, **req.options())
        return transcription_response(result, req.response_format)

    async def text_route(request: Request) -> Any:
        raise ApiError(400, "model '{}' is a speech-to-text model: use "
                       "/v1/audio/transcriptions".format(engine.model_id),
                       param="model", code="model_not_supported")

    async def models(request: Request) -> Any:
        return JSONResponse(model_list(engine.model_id, engine.created, meta()))

    async def model(request: Request) -> Any:
        if request.path_params["model"] != engine.model_id:
            raise ApiError(404, "model '{}' not found".format(request.path_params["model"]),
                           param="model", code="model_not_found")
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

    routes = [Route(path, endpoint(transcriptions), methods=["POST"]) for path in TASKS]
    routes += [Route(path, endpoint(text_route), methods=["POST"]) for path in TEXT_ROUTES]
    routes += [
        Route("/v1/models", endpoint(models), methods=["GET"]),
        Route("/v1/models/{model:path}", endpoint(model), methods=["GET"]),
        Route("/health", endpoint(health, protected=False)),
        Route("/ready", endpoint(ready, protected=False)),
        Route("/metrics", endpoint(prometheus)),
    ]
    middleware = [Middleware(MeasureMiddleware, metrics=metrics)]
    if settings.cors_origins:
        middleware.insert(0, Middleware(
            CORSMiddleware, allow_origins=list(settings.cors_origins),
            allow_methods=["GET", "POST", "OPTIONS"],
            allow_headers=["Authorization", "Content-Type"], max_age=600))
    app = Starlette(routes=routes, lifespan=lifespan,
                    exception_handlers={HTTPException: http_error}, middleware=middleware)
    app.state.engine = engine
    app.state.metrics = metrics
    return app


__all__ = ["create_speech_app", "bad_audio"]
