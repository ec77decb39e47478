"""Server processes for bench/server_load.py: start one and wait until it answers, its
log in a file, and sample its peak resident memory (with its children's)."""
import socket
import subprocess
import tempfile
import threading
import time

import httpx
import psutil


class ServerFailed(Exception):
    """A server that exited or never became ready: its peer is reported, the run goes on."""


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class RssSampler(threading.Thread):
    """Peak resident memory of a process (and its children), sampled every 100 ms."""

    def __init__(self, pid):
        super().__init__(daemon=True)
        self.process = psutil.Process(pid)
        self.peak = 0
        self.running = True

    def rss(self):
        try:
            procs = [self.process] + self.process.children(recursive=True)
            return sum(p.memory_info().rss for p in procs)
        except psutil.Error:
            return 0

    def run(self):
        while self.running:
            self.peak = max(self.peak, self.rss())
            time.sleep(0.1)


def log_tail(log, lines=5):
    log.seek(0)
    return "\n".join(log.read().decode(errors="replace").splitlines()[-lines:])


def start(command, port, ready_path, timeout, env):
    # A file, not a pipe: a chatty server (llama.cpp logs every request) must never block
    # on a full pipe nobody reads.
    log = tempfile.TemporaryFile()
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
    base = "http://127.0.0.1:{}".format(port)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise ServerFailed("exited ({}) before ready:\n{}".format(
                process.returncode, log_tail(log, 20)))
        try:    # llama-server answers 503 while it loads the model
            if httpx.get(base + ready_path, timeout=5).status_code == 200:
                return process, base, log
        except httpx.TransportError:
            pass
        time.sleep(0.5)
    process.kill()
    process.wait()
    raise ServerFailed("not ready after {}s:\n{}".format(timeout, log_tail(log, 20)))
