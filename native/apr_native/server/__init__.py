"""`apr serve`: an OpenAI-compatible HTTP server over one loaded model.

`create_app(engine, settings)` is a plain ASGI app (Starlette), run by uvicorn in
`apr serve` or deployed as Ray Serve replicas (examples/ray_serve.py). Generation runs one
request at a time in the engine's worker thread, behind a bounded queue.
"""
from .app import ServerSettings, create_app
from .engine import Engine

__all__ = ["Engine", "ServerSettings", "create_app"]
