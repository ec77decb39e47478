"""No litter after a crash: a writer's temporary file names its writer (pid and start time),
so the next writer into the directory removes the files of dead writers, says how much it
freed, and never touches a live writer's file (apr_core/atomic.py)."""
import logging
import os
import signal
import subprocess
import sys
import time

import pytest

from apr_core import atomic
from apr_core.atomic import atomic_output, process_start, sweep_stale

BIN = os.path.dirname(sys.executable)
APR = os.path.join(BIN, "apr")


def _dead_pid():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def _litter(directory, name, size):
    path = directory / name
    path.write_bytes(b"x" * size)
    return path


def test_sweep_removes_only_dead_writers_files(tmp_path, caplog):
    me, parent = os.getpid(), os.getppid()
    dead = _litter(tmp_path, ".apr-{}-{}-abcdefgh.tmp".format(_dead_pid(), 123), 1000)
    reused = _litter(tmp_path, ".apr-{}-{}-abcdefgh.tmp".format(
        parent, process_start(parent) + 1), 2000)          # same pid, other start: reused
    live = _litter(tmp_path, ".apr-{}-{}-abcdefgh.tmp".format(
        parent, process_start(parent)), 30)
    mine = _litter(tmp_path, ".apr-{}-0-abcdefgh.tmp".format(me), 40)
    old = _litter(tmp_path, ".apr-k2j4h5g6.tmp", 500)      # before writers were named
    new = _litter(tmp_path, ".apr-q1w2e3r4.tmp", 60)
    os.utime(old, (time.time() - 2 * atomic.LEGACY_STALE_S,) * 2)
    other = _litter(tmp_path, "model.apr.tmp", 70)          # not ours at all
    with caplog.at_level(logging.WARNING, logger="apr.atomic"):
        assert sweep_stale(tmp_path) == (3, 3500)
    assert not dead.exists() and not reused.exists() and not old.exists()
    assert live.exists() and mine.exists() and new.exists() and other.exists()
    assert "removed 3 stale temporary files" in caplog.text and "freed 3.4 KiB" in caplog.text
    assert sweep_stale(tmp_path) == (0, 0)


def test_writer_names_its_temp_file_and_sweeps_first(tmp_path):
    stale = _litter(tmp_path, ".apr-{}-5-abcdefgh.tmp".format(_dead_pid()), 10)
    with atomic_output(tmp_path / "out.bin") as handle:
        names = [n for n in os.listdir(tmp_path) if n.endswith(".tmp")]
        assert names == [n for n in names if n.startswith(".apr-{}-{}-".format(
            os.getpid(), process_start(os.getpid())))] and len(names) == 1
        handle.write(b"data")
    assert not stale.exists()
    assert sorted(os.listdir(tmp_path)) == ["out.bin"]


def _temp_files(directory):
    return [n for n in os.listdir(directory) if n.startswith(".apr-") and n.endswith(".tmp")]


def _convert(source, output, **kwargs):
    env = dict(os.environ, APR_QUIET="1", APR_CONFIG=os.devnull)
    return subprocess.Popen([APR, "convert", source, "-o", str(output), "-f"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kwargs)


def _wait_for_temp(directory, process, least=1 << 20):
    """Poll until `process` has a temporary file of at least `least` bytes in `directory`."""
    deadline = time.time() + 120
    while time.time() < deadline and process.poll() is None:
        for name in _temp_files(directory):
            try:
                if os.path.getsize(os.path.join(directory, name)) >= least:
                    return name
            except OSError:
                pass
        time.sleep(0.005)
    pytest.fail("no temporary file appeared before the writer ended")


@pytest.mark.native
@pytest.mark.real_model
def test_killed_convert_litter_is_removed_by_the_next(smollm2_gguf, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    victim = _convert(smollm2_gguf, out / "model.apr")
    left = _wait_for_temp(out, victim)
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    assert _temp_files(out) == [left] and not (out / "model.apr").exists()
    size = os.path.getsize(out / left)
    second = _convert(smollm2_gguf, out / "model.gguf")
    _, err = second.communicate(timeout=300)
    assert second.returncode == 0, err
    assert _temp_files(out) == []
    assert "removed 1 stale temporary file" in err and "freed" in err
    assert "freed {:.1f} MiB".format(size / (1 << 20)) in err
    assert sorted(os.listdir(out)) == ["model.gguf"]


@pytest.mark.native
@pytest.mark.real_model
def test_concurrent_converts_into_one_directory(smollm2_gguf, tmp_path):
    first = _convert(smollm2_gguf, tmp_path / "a.apr")
    _wait_for_temp(tmp_path, first)
    first.send_signal(signal.SIGSTOP)   # held mid-write (alive) for the whole second convert
    try:
        second = _convert(smollm2_gguf, tmp_path / "b.apr")
        _, err = second.communicate(timeout=300)
        assert second.returncode == 0, err
    finally:
        first.send_signal(signal.SIGCONT)
    assert "stale" not in err
    _, err = first.communicate(timeout=300)
    assert first.returncode == 0, err
    assert sorted(os.listdir(tmp_path)) == ["a.apr", "b.apr"]
    with open(tmp_path / "a.apr", "rb") as a, open(tmp_path / "b.apr", "rb") as b:
        assert a.read() == b.read()


@pytest.mark.native
def test_model_cache_sweeps_dead_imports(tmp_path, caplog):
    from cli_util import apr
    models = tmp_path / "cache" / "models"
    models.mkdir(parents=True)
    stale = _litter(models, ".apr-{}-7-abcdefgh.tmp".format(_dead_pid()), 4096)
    live = _litter(models, ".apr-{}-0-abcdefgh.tmp".format(os.getpid()), 10)
    with caplog.at_level(logging.WARNING, logger="apr.atomic"):
        code, out, err = apr("list", "--json", env={"APR_CACHE": str(tmp_path / "cache")})
    assert code == 0, err
    assert not stale.exists() and live.exists()
    assert "freed 4.0 KiB" in caplog.text
