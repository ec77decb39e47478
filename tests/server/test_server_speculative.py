"""`apr serve --speculate lookup`: every request decodes with prompt-lookup drafts, and its
text equals plain `apr run`'s (greedy), alone and batched with another request; the
counters reach /metrics."""
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

from server_util import running_server

pytestmark = [pytest.mark.native, pytest.mark.real_model]

APR = os.path.join(os.path.dirname(sys.executable), "apr")
EDIT = open(os.path.join(os.path.dirname(__file__), "..", "..", "bench", "prompts",
                         "code_edit.txt")).read()
OTHER = "Name three rivers in Europe."
API_KEY = "spec-key"


def apr_run(model, prompt, n):
    env = dict(os.environ, APR_QUIET="1", APR_CONFIG=os.devnull)
    done = subprocess.run([APR, "run", model, "-", "-n", str(n), "--temperature", "0",
                           "--json"], input=prompt, capture_output=True, text=True, env=env,
                          timeout=900)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)["text"]


@pytest.fixture(scope="module")
def server(qwen_gguf, tmp_path_factory):
    log = tmp_path_factory.mktemp("spec-server") / "stderr.txt"
    args = ["--model-id", "qwen", "--speculate", "lookup", "--draft-max", "8",
            "--max-batch", "2"]
    with running_server(qwen_gguf, args, log, API_KEY) as running:
        yield running


def ask(server, prompt, n):
    reply = server.client().chat.completions.create(
        model="qwen", messages=[{"role": "user", "content": prompt}], max_tokens=n,
        temperature=0)
    return reply.choices[0].message.content


def test_speculative_server_answers_as_plain_apr_run(server, qwen_gguf):
    edit = apr_run(qwen_gguf, EDIT, 120)
    other = apr_run(qwen_gguf, OTHER, 40)
    assert ask(server, EDIT, 120) == edit
    assert server.metric("apr_speculative_accepted_tokens_total") > 0
    with ThreadPoolExecutor(2) as pool:            # both in the running batch together
        answers = list(pool.map(lambda job: ask(server, *job), [(EDIT, 120), (OTHER, 40)]))
    assert answers == [edit, other]
    drafted = server.metric("apr_speculative_drafted_tokens_total")
    assert drafted > server.metric("apr_speculative_accepted_tokens_total")
