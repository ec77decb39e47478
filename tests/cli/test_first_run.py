"""A machine's first `apr run` (issue 38): every kernel cache empty, the installed `apr`
answers the demo question on the portable simd kernels (the run's time is printed, not
asserted: speed targets live in benchmarks, `bench/startup.py --cold`), says
on stderr in one line what it compiles and that it happens once, and leaves numba's
compile to one background job; after that job later runs use numba's kernels.

The background job takes ~2 minutes of a core; the cold-run test checks that the job
running is the right command and ends it, and the warm-up test runs that same command
to its end on the suite's own numba cache (warm after the suite's numba tests, so
seconds there).
"""
import json
import os
import subprocess
import sys
import time

import pytest

from apr_native.cold_start import cold_env, end_warmup_job, warmup_lock

pytestmark = [pytest.mark.native, pytest.mark.real_model]

APR = os.path.join(os.path.dirname(sys.executable), "apr")
QUESTION = "What is the capital of France?"


def apr(env, *args):
    return subprocess.run([APR, *map(str, args)], capture_output=True, text=True, env=env,
                          stdin=subprocess.DEVNULL, timeout=600)


def test_a_cold_first_run_answers_on_simd_and_says_what_it_compiles(tmp_path, smollm2_gguf):
    env = cold_env(tmp_path)
    lock = warmup_lock(tmp_path)
    try:
        start = time.perf_counter()
        done = apr(env, "run", "demo", QUESTION, "-n", 16)
        seconds = time.perf_counter() - start
        assert done.returncode == 0, done.stderr
        assert "Paris" in done.stdout
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("apr: "), done.stderr
        assert "once" in lines[0] and "in the background" in lines[0]
        print("cold first run: %.1f s" % seconds)
        # the job compiling numba's kernels: the warm-up of this very model
        pid = int(lock.read_text())
        with open("/proc/%d/cmdline" % pid, "rb") as handle:
            command = handle.read().split(b"\0")[:-1]
        assert [part.decode() for part in command[1:]] == [
            "-m", "apr_native.numba_warmup_job", smollm2_gguf, str(lock)]
        # a second start while it compiles: the same portable kernels, no second job
        again = apr(env, "run", "demo", QUESTION, "-n", 16, "--json")
        assert again.returncode == 0, again.stderr
        assert json.loads(again.stdout)["backend"] == "simd"
        assert "still compiling" in again.stderr and int(lock.read_text()) == pid
        # the whole run was on the simd kernels: the tokens of --backend simd
        simd = apr(env, "run", "demo", QUESTION, "-n", 16, "--backend", "simd")
        assert simd.returncode == 0 and simd.stdout == done.stdout
    finally:
        end_warmup_job(lock)


def test_the_warmup_job_makes_later_runs_use_numba(tmp_path, smollm2_gguf):
    """The background job's command, run to its end on the suite's numba cache."""
    env = {k: v for k, v in os.environ.items() if k not in ("APR_BACKEND", "APR_QUIET")}
    env.update(APR_CACHE=str(tmp_path), APR_CONFIG=os.devnull)
    lock = tmp_path / "numba-warmup"
    lock.write_text("")
    job = subprocess.run([sys.executable, "-m", "apr_native.numba_warmup_job", smollm2_gguf,
                          str(lock)], capture_output=True, text=True, env=env, timeout=1200)
    assert job.returncode == 0, job.stderr
    assert not lock.exists()                    # released
    done = apr(env, "run", "demo", QUESTION, "-n", 16, "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["backend"] == "numba" and "Paris" in result["text"]
    assert done.stderr == ""                    # nothing compiles, nothing to say


def test_cold_detection_follows_numbas_cache_folder(tmp_path, monkeypatch):
    """`numba_cache` finds the folder numba itself caches the kernels in (asked of
    numba's own locator), and is ready only after a warm-up marked it."""
    from apr_native import numba_cache
    from apr_native.kernels import pool
    assert numba_cache.cache_path() == pool.worker_loop._cache._cache_path
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path))
    probe = subprocess.run([sys.executable, "-c", (
        "from apr_native.kernels import pool\nprint(pool.worker_loop._cache._cache_path)")],
        capture_output=True, text=True, timeout=300)
    assert probe.returncode == 0, probe.stderr
    assert numba_cache.cache_path() == probe.stdout.strip()
    assert not numba_cache.ready()
    numba_cache.mark_ready()
    assert numba_cache.ready()
    monkeypatch.setattr(numba_cache, "package_stamp", lambda: "a changed kernel source")
    assert not numba_cache.ready()


def test_a_level_is_ready_after_its_own_warm_up(tmp_path, monkeypatch):
    """At APR_ISA=avx2 the warm-up job marks the cache after `isa.apply` has set numba's
    CPU name and features from the level, while a run checks the marker before: both
    must name the same marker (they did not, so every such run took the portable kernels
    and started another warm-up)."""
    from apr_native import isa, numba_cache
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path))
    for name in ("NUMBA_CPU_NAME", "NUMBA_CPU_FEATURES"):
        monkeypatch.delenv(name, raising=False)
    level = next(name for name in ("avx2", "generic") if name in isa.available())
    monkeypatch.setenv(isa.ENV, level)
    assert not numba_cache.ready()
    # the warm-up job, after isa.apply(): numba's settings derived from the level
    monkeypatch.setenv("NUMBA_CPU_NAME", isa.LEVELS[level].llvm_cpu)
    monkeypatch.setenv("NUMBA_CPU_FEATURES", isa.LEVELS[level].llvm_features)
    numba_cache.mark_ready()
    for name in ("NUMBA_CPU_NAME", "NUMBA_CPU_FEATURES"):
        monkeypatch.delenv(name)
    assert numba_cache.ready()                  # the next run, before isa.apply()
    monkeypatch.delenv(isa.ENV)                 # the host's own level: another marker
    assert not numba_cache.ready()
    monkeypatch.setenv("NUMBA_CPU_NAME", "x86-64")   # numba's CPU set by hand counts there
    numba_cache.mark_ready()
    monkeypatch.setenv("NUMBA_CPU_NAME", "x86-64-v2")
    assert not numba_cache.ready()


def test_a_cold_numba_compile_is_announced_once(monkeypatch, capsys):
    """`apr serve`, `--backend numba` and models the simd kernels do not read compile
    numba's kernels in the foreground: one line says so (none with APR_QUIET=1)."""
    from apr_native import backends, numba_cache
    monkeypatch.setattr(numba_cache, "ready", lambda: False)
    monkeypatch.setattr(backends, "_compile_announced", False)
    monkeypatch.delenv("APR_QUIET", raising=False)
    backends._announce_numba_compile()
    backends._announce_numba_compile()
    err = capsys.readouterr().err
    assert err == "apr: compiling numba's CPU kernels for this machine (once, ~2 min)\n"
    monkeypatch.setattr(backends, "_compile_announced", False)
    monkeypatch.setenv("APR_QUIET", "1")
    backends._announce_numba_compile()
    assert capsys.readouterr().err == ""
