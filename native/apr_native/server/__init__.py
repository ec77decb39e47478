"""`apr serve`: an OpenAI-compatible HTTP server over one loaded model.

`create_app(engine, settings)` is a plain ASGI app (Starlette), run by uvicorn in
`apr serve` or deployed as Ray Serve replicas (examples/ray_serve.py). Generation runs in
the `ServingEngine`'s thread: continuous batching over a paged KV cache, behind a bounded
queue.
"""
from ..engine import EngineOptions
from .app import ServerSettings, create_app
from .engine import ServingEngine

__all__ = ["EngineOptions", "ServingEngine", "ServerSettings", "create_app"]
