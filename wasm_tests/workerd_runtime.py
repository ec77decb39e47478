"""workerd (npm `workerd`) for the worker-bundle tests: its binary, installed on first use
by scripts/setup_workerd.sh, and a served bundle on a free local port.

    with WorkerdServer(binary, bundle_dir, ["workerd/config.capnp"]) as server:
        status, body = server.request("GET", "/v1/models", headers={"authorization": "Bearer KEY"})
"""
import fcntl
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request

from wasm_shared import require

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
START_TIMEOUT_S = 120


def workerd_binary():
    """The workerd binary (installing it with npm when missing); skips locally and fails
    under CI when npm is absent."""
    require(shutil.which("npm") is not None, "npm not installed: cannot install workerd")
    cache = os.environ.get("APR_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "apr")
    os.makedirs(cache, exist_ok=True)
    with open(os.path.join(cache, "workerd.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)     # parallel test workers install it once
        done = subprocess.run(["bash", os.path.join(ROOT, "scripts", "setup_workerd.sh")],
                              capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    binary = done.stdout.strip().splitlines()[-1]
    assert os.access(binary, os.X_OK), "setup_workerd.sh printed no binary: " + done.stdout
    return binary


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class WorkerdServer:
    """`workerd serve ARGS` run in `cwd` on a free port: started by `start()`, which waits
    until the port answers or the process exits (then `exit_code` and `stderr` tell why)."""

    def __init__(self, binary, cwd, args):
        self.port = free_port()
        self.command = [binary, "serve", *args, "-s", "http=127.0.0.1:{}".format(self.port)]
        self.cwd = cwd
        self.process = None
        self.exit_code = None
        self.stderr = ""
        self._log = None

    def start(self, timeout=START_TIMEOUT_S):
        """True once serving; False when workerd exited first."""
        self._log = tempfile.TemporaryFile("w+")
        self.process = subprocess.Popen(self.command, cwd=self.cwd, stdout=self._log,
                                        stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            code = self.process.poll()
            if code is not None:
                self.exit_code = code
                self.stderr = self.log()
                return False
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return True
            except OSError:
                time.sleep(0.2)
        raise AssertionError("workerd neither served nor exited in {} s:\n{}".format(
            timeout, self.log()))

    def log(self):
        self._log.flush()
        self._log.seek(0)
        return self._log.read()

    def request(self, method, path, body=None, timeout=900, headers=None):
        """(status, parsed JSON body)."""
        data = None if body is None else (body if isinstance(body, bytes)
                                          else json.dumps(body).encode())
        request = urllib.request.Request("http://127.0.0.1:{}{}".format(self.port, path),
                                         data=data, method=method,
                                         headers=dict({"content-type": "application/json"},
                                                      **(headers or {})))
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as err:
            return err.code, json.loads(err.read())

    def text(self, path, body, timeout=900):
        """The answer's text of a POST: choices[0]'s text or message, or (streamed) its
        server-sent events' pieces joined."""
        request = urllib.request.Request("http://127.0.0.1:{}{}".format(self.port, path),
                                         data=json.dumps(body).encode(), method="POST",
                                         headers={"content-type": "application/json"})
        with urllib.request.urlopen(request, timeout=timeout) as response:
            raw = response.read().decode()
        if not body.get("stream"):
            choice = json.loads(raw)["choices"][0]
            return choice["message"]["content"] if "message" in choice else choice["text"]
        pieces = []
        for line in raw.splitlines():
            if line.startswith("data: {"):
                for choice in json.loads(line[len("data: "):]).get("choices", []):
                    delta = choice.get("delta", {})
                    pieces.append(delta.get("content") or choice.get("text") or "")
        return "".join(pieces)

    def stop(self):
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
