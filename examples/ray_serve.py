"""Scale `apr serve` out: the same ASGI app as Ray Serve replicas behind Ray's HTTP proxy.

    pip install "ray[serve]"
    python examples/ray_serve.py demo --replicas 2 --port 8000
    # any OpenAI client: OpenAI(base_url="http://127.0.0.1:8000/v1", api_key="unused")

The server keeps no state between requests, so replicas need no coordination: each one
loads the model and runs its own batching engine (continuous batching over a paged KV
cache, bounded queue) and Ray's proxy spreads requests over them. Ray Serve does the cluster work (placement, health
checks, restarts, routing); nothing here is home-made cluster code. On a real cluster,
`ray start --head` on one machine, `ray start --address=HEAD:6379` on the others, then run
this script with `--address auto`.
"""
import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(HERE, "..", "native"))

from ray import serve  # noqa: E402

from apr_native.cli.common import resolve_model  # noqa: E402
from apr_native.engine import EngineOptions  # noqa: E402
from apr_native.server.app import ServerSettings, create_app  # noqa: E402
from apr_native.server.engine import ServingEngine  # noqa: E402


@serve.ingress()
class AprReplica:
    """One replica: the model loaded before the replica reports ready, then the app."""

    def __init__(self, model: str, model_id: str, dequantize: bool = False,
                 api_key: str = None, max_queue: int = 64, max_batch: int = 16) -> None:
        options = EngineOptions(dequantize=dequantize, max_batch=max_batch)
        self.engine = ServingEngine(resolve_model(model), model_id, options, max_queue)
        self.engine.start()
        # Ray routes traffic to a replica once its constructor returns: load first.
        self.engine.wait_ready()
        if not self.engine.ready:
            raise RuntimeError(self.engine.load_error)
        self.settings = ServerSettings(api_key=api_key)

    def __serve_build_asgi_app__(self):
        return create_app(self.engine, self.settings, manage_engine=False)

    def check_health(self) -> None:
        """Ray restarts a replica whose health check raises."""
        if not self.engine.ready:
            raise RuntimeError(self.engine.load_error or "model not loaded")


def application(model: str, model_id: str = None, replicas: int = 2,
                dequantize: bool = False, api_key: str = None,
                cpus_per_replica: float = 1.0):
    """The Ray Serve application: `replicas` copies of the apr server."""
    deployment = serve.deployment(AprReplica, name="apr", num_replicas=replicas,
                                  ray_actor_options={"num_cpus": cpus_per_replica})
    return deployment.bind(model, model_id or model, dequantize, api_key)


def runtime_env() -> dict:
    """Replicas import this file and apr from the same checkout as the driver (an
    installed apr makes the path unnecessary, and harmless)."""
    paths = [HERE, os.path.join(HERE, ".."), os.path.join(HERE, "..", "native")]
    return {"env_vars": {"PYTHONPATH": os.pathsep.join(os.path.abspath(p) for p in paths)}}


def main() -> None:
    parser = argparse.ArgumentParser(description="apr's OpenAI server as Ray Serve replicas")
    parser.add_argument("model", help="model file or built-in name such as 'demo'")
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--model-id", help="the name clients pass as 'model'")
    parser.add_argument("--api-key")
    parser.add_argument("--dequantize", action="store_true")
    parser.add_argument("--address", help="an existing Ray cluster ('auto'); default local")
    args = parser.parse_args()

    import ray
    ray.init(address=args.address, runtime_env=runtime_env())
    serve.start(http_options={"host": args.host, "port": args.port})
    serve.run(application(args.model, args.model_id, args.replicas, args.dequantize,
                          args.api_key), name="apr", route_prefix="/")
    print("serving {} on http://{}:{}/v1 with {} replicas (Ctrl-C stops)".format(
        args.model_id or args.model, args.host, args.port, args.replicas), flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        serve.shutdown()


if __name__ == "__main__":
    main()
