"""`apr chat` with piped stdin: one user turn per line, replies printed one per turn, and the
conversation history carried into the next turn.

The oracle is the text pipeline itself driven turn by turn (`TextModel.chat_ids` over the
growing message list, greedy): the CLI's stdout must be exactly reply 1, newline, reply 2,
newline. That the second turn really sees the first is checked by the second reply
differing from what the same question gets in a fresh conversation.
"""
import os
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.native, pytest.mark.real_model]

TURNS = ["My name is Alice. Say hello to me.", "What is my name?"]
MAX_TOKENS = 16


@pytest.fixture(scope="module")
def demo_model(smollm2_gguf):
    from apr_core.runtime.text_model import TextModel
    return TextModel.load(smollm2_gguf)


def reply(model, messages):
    return model.generate(model.chat_ids(messages), max_tokens=MAX_TOKENS).text


def test_chat_reads_piped_turns_and_keeps_history(demo_model):
    env = dict(os.environ, APR_QUIET="1")
    done = subprocess.run([sys.executable, "-m", "apr_native.cli.main", "chat", "demo",
                           "-n", str(MAX_TOKENS)], input="\n".join(TURNS) + "\n",
                          capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr

    messages = [{"role": "user", "content": TURNS[0]}]
    first = reply(demo_model, messages)
    messages += [{"role": "assistant", "content": first},
                 {"role": "user", "content": TURNS[1]}]
    second = reply(demo_model, messages)
    assert first.strip() and second.strip()
    assert done.stdout == first + "\n" + second + "\n"
    fresh = reply(demo_model, [{"role": "user", "content": TURNS[1]}])
    assert second != fresh              # the history changed the second answer
