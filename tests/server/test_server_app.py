"""The server app in-process (Starlette's test client), for what needs no loaded model:
readiness before and after a failed load, auth on the probes, the OpenAI error shape, and
the `apr serve` command's argument checks.
"""
import pytest

pytestmark = [pytest.mark.native]

pytest.importorskip("starlette", reason="starlette is a native dependency")
pytest.importorskip("httpx", reason="starlette's test client needs httpx")

from starlette.testclient import TestClient  # noqa: E402

from apr_native.server.app import ServerSettings, create_app  # noqa: E402
from apr_native.server.engine import ServingEngine  # noqa: E402


def test_not_ready_until_loaded(tmp_path):
    engine = ServingEngine(str(tmp_path / "never-loaded.gguf"), "m")   # worker never started
    client = TestClient(create_app(engine, ServerSettings(api_key="k"), manage_engine=False))
    assert client.get("/health").json() == {"status": "ok", "backend": None}
    ready = client.get("/ready")
    assert ready.status_code == 503 and ready.headers["retry-after"] == "1"
    assert ready.json()["error"]["code"] == "model_not_ready"
    chat = client.post("/v1/chat/completions", headers={"Authorization": "Bearer k"},
                       json={"model": "m", "messages": [{"role": "user", "content": "hi"}]})
    assert chat.status_code == 503
    assert chat.json()["error"] == {"message": "model is still loading", "type": "server_error",
                                    "param": None, "code": "model_not_ready"}
    # the model list needs no model; auth still applies
    assert client.get("/v1/models").status_code == 401
    models = client.get("/v1/models", headers={"Authorization": "Bearer k"}).json()
    assert [m["id"] for m in models["data"]] == ["m"]
    metrics = client.get("/metrics", headers={"Authorization": "Bearer k"}).text
    assert "apr_model_ready 0.0" in metrics
    assert 'apr_http_requests_total{path="/ready",status="503"} 1.0' in metrics


def test_failed_load_is_reported_by_ready(tmp_path):
    bogus = tmp_path / "bogus.gguf"
    bogus.write_bytes(b"not a model at all" * 10)
    engine = ServingEngine(str(bogus), "m")
    with TestClient(create_app(engine)) as client:     # the lifespan starts the engine
        assert engine.wait_ready(timeout=60)
        ready = client.get("/ready")
        assert ready.status_code == 503
        assert ready.json()["error"]["message"].startswith("model failed to load: ")
        chat = client.post("/v1/completions", json={"model": "m", "prompt": "x"})
        assert chat.status_code == 503
        assert chat.json()["error"]["message"] == ready.json()["error"]["message"]


def test_serve_command_rejects_bad_arguments():
    from apr_native.cli.main import main
    assert main(["serve", "demo", "--max-queue", "0"]) == 2
    assert main(["serve", "/no/such/model.gguf"]) == 3


def test_cors_lets_the_named_origin_call(tmp_path):
    engine = ServingEngine(str(tmp_path / "never-loaded.gguf"), "m")
    settings = ServerSettings(api_key="k", cors_origins=("https://app.example",))
    client = TestClient(create_app(engine, settings, manage_engine=False))
    preflight = client.options("/v1/chat/completions", headers={
        "Origin": "https://app.example", "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization, content-type"})
    assert preflight.status_code == 200       # answered before auth: browsers send no key
    assert preflight.headers["access-control-allow-origin"] == "https://app.example"
    assert "authorization" in preflight.headers["access-control-allow-headers"].lower()
    models = client.get("/v1/models", headers={"Origin": "https://app.example",
                                               "Authorization": "Bearer k"})
    assert models.headers["access-control-allow-origin"] == "https://app.example"
    other = client.get("/v1/models", headers={"Origin": "https://evil.example",
                                              "Authorization": "Bearer k"})
    assert "access-control-allow-origin" not in other.headers
    plain = TestClient(create_app(engine, ServerSettings(), manage_engine=False))
    assert "access-control-allow-origin" not in plain.get(
        "/health", headers={"Origin": "https://app.example"}).headers


def test_a_prompt_beyond_the_kv_budget_is_the_clients_400():
    from apr_core.errors import AprError, ErrorCode
    from apr_native.server.errors import from_apr_error
    from apr_native.server.streaming import api_error
    err = AprError(ErrorCode.MEMORY, "prompt needs more KV memory than the budget")
    assert from_apr_error(err).status == 400 and api_error(err).status == 400
    assert api_error(RuntimeError("kernel failed")).status == 500
