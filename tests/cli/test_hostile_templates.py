"""A real GGUF whose chat template is replaced with gguf-py's own `gguf-new-metadata
--chat-template`: escape routes, runaway loops, memory bombs and recursion end in a coded
error at load (apr run/chat) or at start (apr serve), under a 4 GiB address-space limit,
with no traceback and no code run; `--chat-template` makes the same file answer."""
import json
import os
import resource
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

pytestmark = [pytest.mark.native, pytest.mark.real_model]

BIN = os.path.dirname(sys.executable)
APR = os.path.join(BIN, "apr")
ADDRESS_SPACE = 4 << 30
CANARY = "apr-template-canary"
HOSTILE = {
    "nested": "{% for a in range(100000) %}{% for b in range(100000) %}"
              "{% for c in range(100000) %}{% endfor %}{% endfor %}{% endfor %}",
    "bomb": "{% set ns = namespace(s='ab') %}{% for i in range(64) %}"
            "{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s }}{{ 'a' * 10000000000 }}",
    "recursion": "{% macro f(n) %}{{ f(n) }}{{ f(n) }}{% endmacro %}{{ f(1) }}",
    "exponential": "{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}{{ f(n - 1) }}{% endif %}"
                   "{% endmacro %}{{ f(64) }}",
    "mro": "{{ ''.__class__.__mro__[1].__subclasses__() }}",
    "cycler": "{{ cycler.__init__.__globals__.os.system('touch " + CANARY + "') }}",
    "namespace": "{{ namespace.__init__.__globals__['os'].popen('touch " + CANARY + "') }}",
    "attr": "{{ (()|attr('__class__')|attr('__base__')|attr('__subclasses__'))() }}",
    "format": "{{ '{0.__init__.__globals__[os]}'.format(joiner) }}",
}


def _limited():
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))


def _apr(args, cwd, stdin=None, timeout=120):
    env = dict(os.environ, APR_QUIET="1", APR_CONFIG=os.devnull, APR_BACKEND="numpy")
    start = time.perf_counter()
    done = subprocess.run([APR] + [str(a) for a in args], cwd=str(cwd), env=env,
                          input=stdin, capture_output=True, text=True, timeout=timeout,
                          preexec_fn=_limited)
    return done, time.perf_counter() - start


@pytest.fixture(scope="module")
def hostile_ggufs(smollm2_gguf, tmp_path_factory):
    """{name: GGUF path}: the demo model with each hostile template, by gguf-new-metadata."""
    folder = tmp_path_factory.mktemp("hostile")
    tool = os.path.join(BIN, "gguf-new-metadata")
    paths = {}
    for name, template in HOSTILE.items():
        path = folder / (name + ".gguf")
        subprocess.run([tool, smollm2_gguf, str(path), "--chat-template", template, "--force"],
                       check=True, capture_output=True, timeout=300)
        paths[name] = path
    return paths


def _coded(done, code=None):
    assert done.returncode != 0
    assert "Traceback" not in done.stderr and "Traceback" not in done.stdout, done.stderr
    assert "apr: error: E0" in done.stderr, done.stderr
    if code:
        assert "apr: error: " + code in done.stderr, done.stderr


@pytest.fixture(scope="module")
def baseline_seconds(smollm2_gguf, tmp_path_factory):
    """`apr run` on the untouched model (load, probe, one token): what a hostile file may
    add 2 s to at most."""
    done, seconds = _apr(["run", smollm2_gguf, "Hi", "-n", "1"],
                         tmp_path_factory.mktemp("base"))
    assert done.returncode == 0, done.stderr
    return seconds


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_run_ends_in_a_coded_error(hostile_ggufs, baseline_seconds, tmp_path, name):
    done, seconds = _apr(["run", hostile_ggufs[name], "Hi", "-n", "4"], tmp_path)
    _coded(done, "E008" if name in ("nested", "bomb", "recursion", "exponential") else "E001")
    assert "--raw" in done.stderr and "--chat-template" in done.stderr
    assert seconds < baseline_seconds + 2.0, (seconds, baseline_seconds)
    assert not (tmp_path / CANARY).exists()


@pytest.mark.parametrize("name", ["nested", "bomb", "cycler"])
def test_serve_refuses_to_start(hostile_ggufs, tmp_path, name):
    done, seconds = _apr(["serve", hostile_ggufs[name], "--port", _free_port()], tmp_path)
    _coded(done)
    assert "apr serve will not start" in done.stderr and "--chat-template" in done.stderr
    assert not (tmp_path / CANARY).exists()


def test_chat_reports_the_template_once(hostile_ggufs, tmp_path):
    done, _ = _apr(["chat", hostile_ggufs["nested"]], tmp_path, stdin="Hi\nHello\n")
    _coded(done, "E008")
    assert done.stderr.count("apr: error:") == 1


def test_chat_template_flag_replaces_a_broken_template(hostile_ggufs, smollm2_gguf, tmp_path):
    # The hostile file's weights with ChatML give the demo model's tokens with ChatML.
    args = ["What is 2+2?", "-n", "8", "--json", "--chat-template", "chatml"]
    fixed, _ = _apr(["run", hostile_ggufs["nested"]] + args, tmp_path)
    demo, _ = _apr(["run", smollm2_gguf] + args, tmp_path)
    assert fixed.returncode == 0, fixed.stderr
    assert json.loads(fixed.stdout)["token_ids"] == json.loads(demo.stdout)["token_ids"]
    assert json.loads(fixed.stdout)["text"].strip()
    # a Jinja file: SmolLM2's own template gives exactly the untouched model's answer
    from apr_core.formats.gguf import read_gguf
    own = tmp_path / "own.jinja"
    own.write_text(read_gguf(smollm2_gguf).metadata["tokenizer.chat_template"])
    from_file, _ = _apr(["run", hostile_ggufs["bomb"], "What is 2+2?", "-n", "8", "--json",
                         "--chat-template", own], tmp_path)
    untouched, _ = _apr(["run", smollm2_gguf, "What is 2+2?", "-n", "8", "--json"], tmp_path)
    assert json.loads(from_file.stdout)["token_ids"] == \
        json.loads(untouched.stdout)["token_ids"]
    chat, _ = _apr(["chat", hostile_ggufs["mro"], "-n", "8", "--chat-template", "chatml"],
                   tmp_path, stdin="What is 2+2?\n")
    assert chat.returncode == 0 and chat.stdout.strip(), chat.stderr
    missing, _ = _apr(["run", smollm2_gguf, "Hi", "--chat-template", "no-such"], tmp_path)
    _coded(missing, "E011")
    assert "--chat-template" in missing.stderr


def test_serve_answers_with_the_flag(hostile_ggufs, tmp_path):
    port = _free_port()
    env = dict(os.environ, APR_QUIET="1", APR_CONFIG=os.devnull, APR_BACKEND="numpy")
    server = subprocess.Popen([APR, "serve", str(hostile_ggufs["exponential"]), "--port", port,
                               "--model-id", "m", "--chat-template", "chatml"], cwd=str(tmp_path), env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        base = "http://127.0.0.1:{}".format(port)
        deadline = time.time() + 120
        while time.time() < deadline:
            assert server.poll() is None, server.communicate()[1]
            try:
                if urllib.request.urlopen(base + "/ready", timeout=2).status == 200:
                    break
            except OSError:
                time.sleep(0.3)
        body = json.dumps({"model": "m", "max_tokens": 8, "temperature": 0,
                           "messages": [{"role": "user", "content": "What is 2+2?"}]}).encode()
        request = urllib.request.Request(base + "/v1/chat/completions", body,
                                         {"Content-Type": "application/json"})
        answer = json.load(urllib.request.urlopen(request, timeout=120))
        assert answer["choices"][0]["message"]["content"].strip()
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_inspect_shows_the_template(hostile_ggufs, smollm2_gguf, tmp_path):
    done, _ = _apr(["inspect", hostile_ggufs["nested"], "--json"], tmp_path)
    info = json.loads(done.stdout)["chat_template"]
    assert info["present"] and info["check"].startswith("E008")
    done, _ = _apr(["inspect", smollm2_gguf, "--json"], tmp_path)
    assert json.loads(done.stdout)["chat_template"] == {
        "present": True, "chars": 368, "family": "chatml", "builtin": None, "check": "ok"}
    done, _ = _apr(["inspect", smollm2_gguf], tmp_path)
    assert "Template:    368 chars, chatml markers, probe ok" in done.stdout


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])
