"""A stand-in for Cloudflare's `workers` module, for running a worker bundle's Python entry
point under Pyodide outside workerd (wasm_tests/test_worker_bundle.py).

Only what the bundle uses: `WorkerEntrypoint` (keeps `ctx` and `env`, as the real class
does) and `Response` (keeps the body, status and headers for the test to read back).
Requests are real JavaScript `Request` objects, so `method`, `url` and `await text()` are
the runtime's own.
"""


class WorkerEntrypoint:
    def __init__(self, ctx, env):
        self.ctx = ctx
        self.env = env


class Response:
    def __init__(self, body, status=200, headers=None):
        self.body = body
        self.status = status
        self.headers = dict(headers or {})
