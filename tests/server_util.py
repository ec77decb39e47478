"""`apr serve` in a subprocess on a free loopback port, for the server test modules."""
import contextlib
import os
import re
import socket
import subprocess
import sys
import time

APR = [sys.executable, "-c", "import sys; from apr_native.cli.main import main; "
       "sys.exit(main())"]
READY_TIMEOUT = 600     # seconds; a loaded 2-core CI machine can be slow to load the model


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Server:
    def __init__(self, process, base, api_key, model):
        import httpx
        self.process = process
        self.base = base
        self.api_key = api_key
        self.model = model
        self.http = httpx.Client(base_url=base, timeout=120,
                                 headers={"Authorization": "Bearer " + api_key})

    def client(self, **kw):
        import openai
        return openai.OpenAI(base_url=self.base + "/v1", api_key=self.api_key,
                             max_retries=0, timeout=300, **kw)

    def async_client(self):
        import openai
        return openai.AsyncOpenAI(base_url=self.base + "/v1", api_key=self.api_key,
                                  max_retries=0, timeout=300)

    def metric(self, name):
        text = self.http.get("/metrics").text
        found = re.search(r"^{} ([0-9.e+]+)$".format(re.escape(name)), text, re.M)
        assert found, name
        return float(found.group(1))


@contextlib.contextmanager
def running_server(model, args, log_path, api_key, command=None):
    """`apr serve MODEL ARGS` until the block ends; ready (GET /ready 200) on entry.
    `model`: one name, or a list of them (a many-model server); `command`: how to start
    `apr` (default: this interpreter on the CLI's main)."""
    import httpx
    port = free_port()
    env = dict(os.environ, APR_QUIET="1")
    models = [model] if isinstance(model, str) else list(model)
    with open(log_path, "w") as stderr:
        process = subprocess.Popen(
            (command or APR) + ["serve"] + models + ["--port", str(port), "--api-key",
                                                     api_key] + list(args),
            env=env, stdout=subprocess.DEVNULL, stderr=stderr)
        base = "http://127.0.0.1:{}".format(port)
        deadline = time.monotonic() + READY_TIMEOUT
        try:
            while True:
                assert process.poll() is None, open(log_path).read()
                try:
                    if httpx.get(base + "/ready", timeout=5).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                assert time.monotonic() < deadline, "server not ready"
                time.sleep(0.5)
            yield Server(process, base, api_key, model)
        finally:
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
