"""What every apr server app shares, whatever its model: the API-key and error wrapper of
a route, the model / probe / metrics routes, Starlette's own errors in OpenAI's shape, the
engine's lifespan, CORS and the request metrics; `app.py` (text models) and
`speech_app.py` (Whisper) add their own routes on top.

An engine here is anything with `model_id`, `created`, `backend`, `ready`, `load_error`,
`log` (its `server_log.ServerLog`, which every request is written to), `start()` and
`stop()`.
"""
from __future__ import annotations

import hmac
from contextlib import asynccontextmanager
from typing import Any, Awaitable, Callable, List, Optional

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from apr_core.errors import AprError

from .errors import ApiError, error_response, from_apr_error
from .metrics import MeasureMiddleware, Metrics
from .openai_format import model_card, model_list

Handler = Callable[[Request], Awaitable[Any]]


def not_ready(engine: Any) -> ApiError:
    return ApiError(503, engine.load_error or "model is still loading",
                    code="model_not_ready", headers={"Retry-After": "1"})


def check_model(engine: Any, name: str) -> None:
    """404 unless `name` is the model this server serves."""
    if name != engine.model_id:
        raise ApiError(404, "model '{}' not found; this server serves '{}'".format(
            name, engine.model_id), param="model", code="model_not_found")


def endpoint_wrapper(engine: Any, api_key: Optional[str]
                     ) -> Callable[..., Handler]:
    """`wrap(handler, protected=True, needs_model=True)`: the API key (when the server has
    one and the route is protected), readiness (503 while the model loads) and the mapping
    of ApiError / AprError to OpenAI error bodies."""
    expected_auth = None if not api_key else "Bearer " + api_key

    def wrap(handler: Handler, protected: bool = True, needs_model: bool = True) -> Handler:
        async def wrapped(request: Request) -> Any:
            try:
                if protected and expected_auth is not None and not hmac.compare_digest(
                        request.headers.get("authorization", "").encode(),
                        expected_auth.encode()):
                    raise ApiError(401, "invalid or missing API key (Authorization: Bearer)",
                                   code="invalid_api_key")
                if needs_model and not engine.ready:
                    raise not_ready(engine)
                return await handler(request)
            except ApiError as err:
                return error_response(err)
            except AprError as err:     # the model's code refused the request's input
                return error_response(from_apr_error(err))
        return wrapped
    return wrap


def service_routes(engine: Any, metrics: Metrics, meta: Callable[[], dict],
                   wrap: Callable[..., Handler]) -> List[Route]:
    """GET /v1/models, /v1/models/{id}, /health, /ready (open to load balancers), /metrics."""
    async def models(request: Request) -> Any:
        return JSONResponse(model_list(engine.model_id, engine.created, meta()))

    async def model(request: Request) -> Any:
        check_model(engine, request.path_params["model"])
        return JSONResponse(model_card(engine.model_id, engine.created, meta()))

    async def health(request: Request) -> Any:
        return JSONResponse({"status": "ok", "backend": engine.backend})

    async def ready(request: Request) -> Any:
        if engine.ready:
            return JSONResponse({"status": "ready", "model": engine.model_id})
        raise not_ready(engine)

    async def prometheus(request: Request) -> Any:
        return Response(metrics.exposition(), media_type=metrics.content_type)

    return [
        Route("/v1/models", wrap(models, needs_model=False), methods=["GET"]),
        Route("/v1/models/{model:path}", wrap(model, needs_model=False), methods=["GET"]),
        Route("/health", wrap(health, protected=False, needs_model=False)),
        Route("/ready", wrap(ready, protected=False, needs_model=False)),
        Route("/metrics", wrap(prometheus, needs_model=False)),
    ]


async def _http_error(request: Request, exc: Exception) -> Any:
    """Starlette's own 404/405 in OpenAI's error shape."""
    assert isinstance(exc, HTTPException)
    return error_response(ApiError(exc.status_code, str(exc.detail),
                                   code="not_found" if exc.status_code == 404 else None))


def build_app(routes: List[Route], engine: Any, metrics: Metrics,
              cors_origins: Any, manage_engine: bool) -> Starlette:
    """The Starlette app: `routes`, the request metrics and log lines, CORS for
    `cors_origins` (outermost: preflights are answered before auth) and, with
    `manage_engine`, a lifespan that starts the engine (its model load) and stops it."""
    @asynccontextmanager
    async def lifespan(app: Any) -> Any:
        if manage_engine:
            engine.start()
        yield
        if manage_engine:
            engine.stop()

    middleware = [Middleware(MeasureMiddleware, metrics=metrics, log=engine.log)]
    if cors_origins:
        middleware.insert(0, Middleware(
            CORSMiddleware, allow_origins=list(cors_origins),
            allow_methods=["GET", "POST", "OPTIONS"],
            allow_headers=["Authorization", "Content-Type"], max_age=600))
    app = Starlette(routes=routes, lifespan=lifespan,
                    exception_handlers={HTTPException: _http_error}, middleware=middleware)
    app.state.engine = engine
    app.state.metrics = metrics
    return app


__all__ = ["Handler", "check_model", "endpoint_wrapper", "service_routes", "build_app",
           "not_ready"]
