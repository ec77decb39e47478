"""Prometheus metrics (text format at GET /metrics), one registry per app.

Request counts and latencies are taken by an ASGI middleware around every route, so a
streamed response is timed to its last byte; token counts and time to first token are
recorded by the endpoints. Paths outside the known routes are counted as "other" so a
scanner cannot blow up the label set. The engine's own figures (running and waiting
sequences, KV blocks, prefix-cache hits, tokens generated and per second) are read from
`ServingEngine.stats()` at each scrape.
"""
from __future__ import annotations

import time
from typing import Any, Callable, Dict, Iterable, Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.registry import Collector

LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)


class Metrics:
    """The server's collectors; `queue_depth` and `ready` are read when scraped."""

    def __init__(self, paths: Iterable[str], queue_depth: Callable[[], float],
                 ready: Callable[[], float], stats: Callable[[], Dict[str, float]]
                 ) -> None:
        self.paths = frozenset(paths)
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter("apr_http_requests", "HTTP requests by path and status",
                                ["path", "status"], registry=r)
        self.latency = Histogram("apr_http_request_duration_seconds",
                                 "Time from request to last response byte", ["path"],
                                 buckets=LATENCY_BUCKETS, registry=r)
        self.ttft = Histogram("apr_time_to_first_token_seconds",
                              "Time from request to the first generated token",
                              buckets=LATENCY_BUCKETS, registry=r)
        self.prompt_tokens = Counter("apr_prompt_tokens", "Prompt tokens processed",
                                     registry=r)
        self.completion_tokens = Counter("apr_completion_tokens",
                                         "Tokens of completed responses", registry=r)
        self.cancelled = Counter("apr_cancelled_generations",
                                 "Generations stopped because the client went away",
                                 registry=r)
        Gauge("apr_queue_depth", "Requests waiting for or holding the model",
              registry=r).set_function(queue_depth)
        Gauge("apr_model_ready", "1 once the model is loaded", registry=r).set_function(ready)
        r.register(EngineCollector(stats))

    def exposition(self) -> bytes:
        return generate_latest(self.registry)

    content_type = CONTENT_TYPE_LATEST



# stats() key -> (metric name, help, counter?)
ENGINE_FIGURES = {
    "running": ("apr_running_sequences", "Sequences in the running batch", False),
    "waiting": ("apr_waiting_sequences", "Sequences waiting for admission", False),
    "kv_blocks_used": ("apr_kv_blocks_used", "KV blocks held by sequences", False),
    "kv_blocks_free": ("apr_kv_blocks_free", "KV blocks free (cached ones included)", False),
    "kv_blocks_cached": ("apr_kv_blocks_cached", "Free KV blocks kept for prefix reuse", False),
    "kv_blocks_total": ("apr_kv_blocks_total", "KV blocks of the memory budget", False),
    "kv_bytes": ("apr_kv_memory_bytes", "Bytes of the KV block pool", False),
    "prefix_hit_ratio": ("apr_prefix_cache_hit_ratio",
                         "Prompt tokens served from the prefix cache / prompt tokens", False),
    "tokens_per_second": ("apr_generation_tokens_per_second",
                          "Tokens generated per second over the last 10 s", False),
    "generated_tokens": ("apr_generated_tokens",
                         "Tokens generated, including cancelled requests", True),
    "prefix_queries": ("apr_prefix_cache_queried_tokens", "Prompt tokens submitted", True),
    "prefix_hits": ("apr_prefix_cache_hit_tokens", "Prompt tokens found in the prefix cache",
                    True),
    "preempted": ("apr_preemptions", "Sequences preempted for want of KV blocks", True),
    "steps": ("apr_engine_steps", "Forward passes of the batch", True),
    "drafted_tokens": ("apr_speculative_drafted_tokens",
                       "Tokens drafted for speculative verification", True),
    "accepted_tokens": ("apr_speculative_accepted_tokens",
                        "Drafted tokens the model kept", True),
}


class EngineCollector(Collector):
    """The engine's figures, read when scraped (absent until the model is loaded)."""

    def __init__(self, stats: Callable[[], Dict[str, float]]) -> None:
        self.stats = stats

    def collect(self) -> Iterator[Any]:
        figures = self.stats()
        for key, (name, doc, counter) in ENGINE_FIGURES.items():
            if key in figures:
                family = CounterMetricFamily if counter else GaugeMetricFamily
                yield family(name, doc, value=figures[key])


class MeasureMiddleware:
    """ASGI middleware: every HTTP request is counted and timed to its last byte, and
    written to the server's log (`log`, a `server_log.ServerLog`) when there is one."""

    def __init__(self, app: Any, metrics: Metrics, log: Any = None) -> None:
        self.app = app
        self.metrics = metrics
        self.log = log

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        m = self.metrics
        path = scope.get("path", "")
        label = path if path in m.paths else "other"
        start = time.perf_counter()
        status = [500]

        async def send_status(message: dict) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)
        try:
            await self.app(scope, receive, send_status)
        finally:
            seconds = time.perf_counter() - start
            m.requests.labels(label, str(status[0])).inc()
            m.latency.labels(label).observe(seconds)
            if self.log is not None:
                self.log.scope_request(scope, status[0], seconds)


__all__ = ["MeasureMiddleware", "Metrics", "LATENCY_BUCKETS"]
