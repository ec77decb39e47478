"""`apr serve` keeps no per-client state that grows with what clients send: metric labels
come from the server's own route table and status codes, never from request paths, model
names or headers (the audit of issue 29; the scheduler's waiting queue is bounded by
--max-queue and a request whose client leaves is cancelled, see test_server_openai)."""
import pytest

pytestmark = [pytest.mark.native]

pytest.importorskip("starlette", reason="starlette is a native dependency")
pytest.importorskip("httpx", reason="starlette's test client needs httpx")

from starlette.testclient import TestClient  # noqa: E402

from apr_native.server.app import ServerSettings, create_app  # noqa: E402
from apr_native.server.engine import ServingEngine  # noqa: E402


def _series(client):
    text = client.get("/metrics", headers={"Authorization": "Bearer k"}).text
    return {line.split(" ")[0] for line in text.splitlines()
            if line and not line.startswith("#")}


def _round(client, tag):
    auth = {"Authorization": "Bearer k"}
    client.get("/scan/{}/.env".format(tag))                                   # unknown path
    client.post("/v1/chat/completions", headers=auth, json={
        "model": "model-{}".format(tag), "messages": [{"role": "user", "content": tag}]})
    client.post("/v1/completions", headers=dict(auth, **{"X-Client-" + tag: tag}),
                json={"model": tag, "prompt": tag})
    client.get("/v1/models/{}".format(tag), headers=auth)
    client.get("/v1/models", headers={"Authorization": "Bearer wrong-" + tag})


def test_metric_labels_do_not_grow_with_client_input(tmp_path):
    engine = ServingEngine(str(tmp_path / "never-loaded.gguf"), "m")
    client = TestClient(create_app(engine, ServerSettings(api_key="k"), manage_engine=False))
    for i in range(3):
        _round(client, "warm{}".format(i))
    _series(client)                     # the first scrape adds the /metrics series
    before = _series(client)
    for i in range(300):
        _round(client, "client{}".format(i))
    after = _series(client)
    assert after == before
    assert not any("client" in name or "scan" in name for name in after)
    assert 'apr_http_requests_total{path="other",status="404"}' in after
