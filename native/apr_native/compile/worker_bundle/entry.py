"""A Cloudflare Python Worker answering OpenAI's `POST /v1/completions` with apr_core.

Built by `apr compile MODEL --target worker`. The model lives in the R2 bucket bound as
`MODEL` (object key in `apr_worker/manifest.json`, or the `MODEL_KEY` variable); the first
request of an isolate reads it (ranged reads, checked against the build's sha256) and
loads it, later requests reuse it. Routes and request fields: `apr_worker/api.py`.

    curl -s http://127.0.0.1:8787/v1/completions -H 'content-type: application/json' \\
         -d '{"prompt": "The capital of France is", "max_tokens": 8}'

This file is apr_native/compile/worker_bundle/entry.py; in the bundle it is `src/worker.py`.
"""
import json

from workers import Response, WorkerEntrypoint  # type: ignore[import-not-found]

from apr_worker import api

JSON_HEADERS = {"content-type": "application/json; charset=utf-8"}


class Default(WorkerEntrypoint):
    """The worker's entry point: one JSON response per request."""

    async def fetch(self, request):
        method = str(request.method)
        body = await request.text() if method not in ("GET", "HEAD") else ""
        status, answer = await api.handle(method, str(request.url), body, self.env)
        return Response(json.dumps(answer), status=status, headers=JSON_HEADERS)
