"""`apr chat --session FILE`: a conversation saved after N turns and resumed in a new
process answers the later turns with the same greedy tokens as one uninterrupted process,
and the resumed process does not compute the saved prompt again; damaged and mismatched
sessions are refused with their codes (E002 truncated, E004 corrupted, E016 another model,
KV type or context) before anything is generated.

The oracle is the uninterrupted `apr chat` run itself: its stdout must equal the first
run's stdout followed by the resumed run's, and its last turns must have reused exactly
as many prompt positions from the cache as the resumed turns did (the same prefix-cache
hits, from the restored blocks instead of the process's own). Both runs use the numba
backend from the first token (no quick start on other kernels), so the only difference
between them is where the reused KV came from.
"""
import os
import re
import shutil
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.native, pytest.mark.real_model]

TURNS = ["My name is Alice and I live in Paris. Say hello to me.",
         "What is a good thing to do in my city?",
         "What is my name?",
         "Write one short sentence about my city."]
SAVED = 2
MAX_TOKENS = 16
TURN_LINE = re.compile(r"apr: turn (\d+): (\d+) prompt tokens, (\d+) reused from the cache, "
                       r"first token after ([0-9.]+) s")
RESTORED = re.compile(r"KV of (\d+) tokens restored \(([0-9.]+) MiB, ([0-9.]+) s\)")


def chat(model, turns, *flags):
    env = dict(os.environ)
    env.pop("APR_QUIET", None)
    return subprocess.run([sys.executable, "-m", "apr_native.cli.main", "chat", model,
                           "-n", str(MAX_TOKENS), "--backend", "numba", "--verbose"]
                          + list(flags), input="\n".join(turns) + "\n",
                          capture_output=True, text=True, env=env, timeout=600)


def turn_stats(done):
    """[(prompt tokens, reused tokens, first-token seconds)] per turn, from --verbose."""
    return [(int(m.group(2)), int(m.group(3)), float(m.group(4)))
            for m in TURN_LINE.finditer(done.stderr)]


@pytest.mark.parametrize("kv_type", ["f16", "q8_0"])
@pytest.mark.parametrize("model_fixture", ["smollm2_gguf", "qwen_gguf"])
def test_resumed_session_continues_with_the_same_tokens(request, tmp_path, numba_ready,
                                                         model_fixture, kv_type):
    model = request.getfixturevalue(model_fixture)
    session = str(tmp_path / "chat.aprs")
    whole = chat(model, TURNS, "--kv-type", kv_type)
    assert whole.returncode == 0, whole.stderr
    first = chat(model, TURNS[:SAVED], "--kv-type", kv_type, "--session", session)
    assert first.returncode == 0, first.stderr
    assert os.path.getsize(session) > 0
    resumed = chat(model, TURNS[SAVED:], "--kv-type", kv_type, "--session", session)
    assert resumed.returncode == 0, resumed.stderr

    assert len(whole.stdout.strip()) > 0
    assert first.stdout + resumed.stdout == whole.stdout
    restored = RESTORED.search(resumed.stderr)
    assert restored is not None, resumed.stderr
    n_restored = int(restored.group(1))
    stats_whole, stats_resumed = turn_stats(whole), turn_stats(resumed)
    assert len(stats_whole) == len(TURNS) and len(stats_resumed) == len(TURNS) - SAVED
    # the resumed turns reuse what the uninterrupted ones reused, the first of them all
    # from the session: it computes only the new turn's tokens, not the saved prompt
    assert [s[:2] for s in stats_resumed] == [s[:2] for s in stats_whole[SAVED:]]
    prompt, reused, seconds = stats_resumed[0]
    assert n_restored > 0 and reused > 0 and reused <= n_restored < prompt
    print("\n{} kv {}: session of {} tokens ({} MiB, restored in {} s); resumed turn {}: "
          "{} prompt tokens, {} from the session, {} computed, first token after {:.3f} s "
          "(uninterrupted run's same turn: {:.3f} s; its first turn, {} tokens cold: "
          "{:.3f} s)".format(os.path.basename(model), kv_type, n_restored, restored.group(2),
                             restored.group(3), SAVED + 1, prompt, reused, prompt - reused,
                             seconds, stats_whole[SAVED][2], stats_whole[0][0],
                             stats_whole[0][2]))


@pytest.fixture(scope="module")
def saved_session(tmp_path_factory, smollm2_gguf, numba_ready):
    path = str(tmp_path_factory.mktemp("session") / "chat.aprs")
    done = chat(smollm2_gguf, TURNS[:SAVED], "--session", path)
    assert done.returncode == 0, done.stderr
    return path


def refused(model, session, *flags):
    with open(session, "rb") as handle:
        before = handle.read()
    done = chat(model, TURNS[SAVED:], "--session", session, *flags)
    with open(session, "rb") as handle:
        assert handle.read() == before          # a refused session is left as it was
    assert done.stdout == ""                    # nothing generated
    return done


@pytest.mark.parametrize("flags, field", [
    (("--kv-type", "q8_0"), "kv_type"),
    (("--ctx", "4096"), "context"),
])
def test_session_for_other_settings_is_refused(saved_session, smollm2_gguf, tmp_path, flags,
                                               field):
    copy = str(tmp_path / "copy.aprs")
    shutil.copyfile(saved_session, copy)
    done = refused(smollm2_gguf, copy, *flags)
    assert done.returncode == 5 and "E016" in done.stderr, done.stderr
    assert "field='{}'".format(field) in done.stderr


def test_session_for_another_model_is_refused(saved_session, qwen_gguf, tmp_path):
    copy = str(tmp_path / "copy.aprs")
    shutil.copyfile(saved_session, copy)
    done = refused(qwen_gguf, copy)
    assert done.returncode == 5 and "E016" in done.stderr, done.stderr
    assert "field='model_sha256'" in done.stderr


def test_truncated_and_corrupted_sessions_are_refused(saved_session, smollm2_gguf, tmp_path):
    with open(saved_session, "rb") as handle:
        data = handle.read()
    truncated = tmp_path / "truncated.aprs"
    truncated.write_bytes(data[:len(data) * 2 // 3])
    done = refused(smollm2_gguf, str(truncated))
    assert done.returncode == 4 and "E002" in done.stderr, done.stderr
    corrupted = tmp_path / "corrupted.aprs"
    flipped = bytearray(data)
    flipped[len(data) - 4096] ^= 0x01                # one bit of a V row of the last layer
    corrupted.write_bytes(bytes(flipped))
    done = refused(smollm2_gguf, str(corrupted))
    assert done.returncode == 5 and "E004" in done.stderr, done.stderr
