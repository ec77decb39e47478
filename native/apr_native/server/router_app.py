"""The ASGI app of a many-model server: the request's `model` picks one of the router's
models (server/model_router.py) and the request goes, as it came, to that model's own app
(`app.create_app`, so every route behaves as on a single-model server).

    app = create_router_app(router, settings)

Routes of its own: GET /v1/models and /models (every model with llama-server's router
`status`: loaded, loading, unloaded, unloading, failed), GET /v1/models/{id},
POST /models/load and /models/unload ({"model": ID} -> {"success": true}), /health and
/ready (the router is ready at once; models load on first use). POST /v1/chat/completions,
/v1/completions and /v1/embeddings take the model from the body; GET /props and
POST /slots/{id} from `?model=ID`. An unknown model is a 404 `model_not_found`.
"""
from __future__ import annotations

import json
from contextlib import asynccontextmanager
from typing import Any, Optional

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from .app import ServerSettings, read_json
from .errors import ApiError, error_response
from .model_router import ModelRouter
from .service import _http_error, endpoint_wrapper

BODY_ROUTES = ("/v1/chat/completions", "/v1/completions", "/v1/embeddings")
QUERY_ROUTES = ("/props", "/slots/")


class _Always:
    """The endpoint wrapper's engine: the router itself is always ready."""
    ready = True
    load_error: Optional[str] = None


def _replay(body: bytes, receive: Any) -> Any:
    """An ASGI `receive` that gives `body` once, then the client's own messages (so a
    disconnect still reaches the model's app)."""
    sent = False

    async def replayed() -> Any:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()
    return replayed


def create_router_app(router: ModelRouter, settings: ServerSettings = ServerSettings()
                      ) -> Any:
    wrap = endpoint_wrapper(_Always(), settings.api_key)

    async def forward(request: Request, model: Any, body: bytes) -> Any:
        """Hand the request to `model`'s app (loaded first if need be); the model counts
        as in flight, and is not unloaded, until the response has been sent."""
        entry = await router.acquire(model)
        # the model's app gets its own copy of the scope: the server keeps a connection's
        # last scope, which must not keep an unloaded model's app (and weights) alive
        try:
            await entry.app(dict(request.scope), _replay(body, request.receive),
                            request._send)
        finally:
            await router.release(entry)
        return _Sent()

    async def by_body(request: Request) -> Any:
        data = await read_json(request, settings.max_body)
        model = data.get("model")
        if not isinstance(model, str) or not model:
            raise ApiError(400, "'model' must name one of this server's models (GET "
                           "/v1/models)", param="model", code="invalid_value")
        router.entry(model)         # 404 before anything loads
        return await forward(request, model, json.dumps(data).encode())

    async def by_query(request: Request) -> Any:
        model = request.query_params.get("model")
        router.entry(model)
        return await forward(request, model, await request.body())

    async def models(request: Request) -> Any:
        return JSONResponse({"object": "list", "data": router.cards()})

    async def model(request: Request) -> Any:
        found = router.entry(request.path_params["model"]).model_id
        return JSONResponse(next(c for c in router.cards() if c["id"] == found))

    async def load(request: Request) -> Any:
        entry = await router.load(_named(await read_json(request, settings.max_body)))
        return JSONResponse({"success": True, "model": entry.model_id})

    async def unload(request: Request) -> Any:
        name = _named(await read_json(request, settings.max_body))
        if not await router.unload(name):
            raise ApiError(400, "model '{}' is not loaded".format(name), param="model",
                           code="model_not_loaded")
        return JSONResponse({"success": True, "model": name})

    async def health(request: Request) -> Any:
        return JSONResponse({"status": "ok"})

    async def ready(request: Request) -> Any:
        return JSONResponse({"status": "ready", "models": sorted(router.entries)})

    @asynccontextmanager
    async def lifespan(app: Any) -> Any:
        yield
        await router.close()

    routes = [
        *(Route(path, wrap(by_body), methods=["POST"]) for path in BODY_ROUTES),
        Route("/props", wrap(by_query), methods=["GET"]),
        Route("/slots/{id_slot}", wrap(by_query), methods=["POST"]),
        Route("/v1/models", wrap(models), methods=["GET"]),
        Route("/models", wrap(models), methods=["GET"]),
        Route("/v1/models/{model:path}", wrap(model), methods=["GET"]),
        Route("/models/load", wrap(load), methods=["POST"]),
        Route("/models/unload", wrap(unload), methods=["POST"]),
        Route("/health", wrap(health, protected=False)),
        Route("/ready", wrap(ready, protected=False)),
    ]
    app = Starlette(routes=routes, lifespan=lifespan,
                    exception_handlers={HTTPException: _http_error})
    app.state.router = router
    return app


def _named(data: dict) -> str:
    name = data.get("model")
    if not isinstance(name, str) or not name:
        raise ApiError(400, "'model' must be a non-empty string", param="model",
                       code="invalid_value")
    return name


class _Sent:
    """The model's app has already sent the response: nothing more to send."""

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        return None


__all__ = ["create_router_app"]
