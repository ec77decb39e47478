"""examples/ray_serve.py: the server's ASGI app as a local 2-replica Ray Serve deployment,
answered through Ray's HTTP proxy by the official `openai` client.

Skipped, with the reason, when `ray[serve]` is not installed. One test: a local Ray
cluster plus two replicas each loading the demo model is the expensive part.
"""
import importlib.util
import os
import socket
import sys

import pytest

pytestmark = [pytest.mark.native, pytest.mark.real_model]

serve = pytest.importorskip("ray.serve", reason="ray[serve] is not installed")
openai = pytest.importorskip("openai", reason="the openai client is a dev dependency")

EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "ray_serve.py")
REPLICAS = 2


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def load_example():
    spec = importlib.util.spec_from_file_location("ray_serve", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    sys.modules["ray_serve"] = module
    spec.loader.exec_module(module)
    return module


# Ray Serve's controller kills a proxy whose ready check takes over 5 s (and then fails
# `serve.start`); the proxy's interpreter imports Ray Serve, Starlette and uvicorn, which
# took longer than that on this 2-core machine while the other pytest worker compiled numba
# kernels. Workers inherit these from the driver's environment at `ray.init`.
SLOW_MACHINE_TIMEOUTS = {"RAY_SERVE_PROXY_READY_CHECK_TIMEOUT_S": "120",
                         "RAY_SERVE_PROXY_HEALTH_CHECK_TIMEOUT_S": "60"}


def test_two_replicas_answer_through_ray_proxy(smollm2_gguf, monkeypatch):
    import ray
    for name, seconds in SLOW_MACHINE_TIMEOUTS.items():
        monkeypatch.setenv(name, seconds)
    example = load_example()
    port = free_port()
    ray.init(num_cpus=2, include_dashboard=False, runtime_env=example.runtime_env(),
             log_to_driver=False)
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        # each replica asks for half a core: two of them, Ray's proxy and controller share
        # this 2-core machine
        serve.run(example.application(smollm2_gguf, "demo", replicas=REPLICAS,
                                      api_key="k", cpus_per_replica=0.5),
                  name="apr", route_prefix="/")
        status = serve.status().applications["apr"].deployments["apr"]
        assert status.replica_states.get("RUNNING") == REPLICAS
        client = openai.OpenAI(base_url="http://127.0.0.1:{}/v1".format(port), api_key="k",
                               max_retries=0, timeout=600)
        assert [m.id for m in client.models.list().data] == ["demo"]
        replies = [client.completions.create(model="demo", prompt="The capital of France is",
                                             max_tokens=2, temperature=0)
                   for _ in range(REPLICAS)]
        assert all("Paris" in r.choices[0].text for r in replies)
        stream = client.chat.completions.create(
            model="demo", messages=[{"role": "user", "content": "What is the capital of "
                                     "France?"}], max_tokens=8, temperature=0, stream=True)
        assert "Paris" in "".join(c.choices[0].delta.content or "" for c in stream)
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url="http://127.0.0.1:{}/v1".format(port), api_key="bad",
                          max_retries=0).models.list()
    finally:
        serve.shutdown()
        ray.shutdown()
