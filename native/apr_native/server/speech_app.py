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
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.routing import Route

from apr_core.errors import AprError

from .app import ServerSettings
from .errors import ApiError
from .metrics import Metrics
from .service import build_app, check_model, endpoint_wrapper, service_routes
from .speech_engine import SpeechEngine
from .transcriptions import (DEFAULT_MAX_UPLOAD, TASKS, read_form, transcription_request,
                             transcription_response)

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
    endpoint = endpoint_wrapper(engine, settings.api_key)

    def meta() -> dict:
        info = {"backend": engine.backend, "task": "speech-to-text"}
        info.update(engine.stats())
        return info

    async def transcriptions(request: Request) -> Any:
        from apr_core.speech.audio import read_audio
        form = await read_form(request, max_upload)
        try:
            req = await transcription_request(form, TASKS[request.url.path])
        finally:
            await form.close()
        check_model(engine, req.model)
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

    routes = [Route(path, endpoint(transcriptions), methods=["POST"]) for path in TASKS]
    routes += [Route(path, endpoint(text_route, needs_model=False), methods=["POST"])
               for path in TEXT_ROUTES]
    routes += service_routes(engine, metrics, meta, endpoint)
    return build_app(routes, engine, metrics, settings.cors_origins, manage_engine)


__all__ = ["create_speech_app", "bad_audio"]
