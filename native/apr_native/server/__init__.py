"""`apr serve`: an OpenAI-compatible HTTP server over one loaded model.

`create_app(engine, settings)` is a plain ASGI app (Starlette), run by uvicorn in
`apr serve` or deployed as Ray Serve replicas (examples/ray_serve.py). Generation runs in
the `ServingEngine`'s thread: continuous batching over a paged KV cache, behind a bounded
queue.
"""
# Import from the modules (`.app`, `.engine`): this package imports none of its children,
# so a part without web dependencies (tool_calls, choices) loads without Starlette.
