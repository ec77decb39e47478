"""Instruction levels (`apr_native.isa`, $APR_ISA): the restriction itself, and what the
kernels compute at every level this host can run.

The exact kernel paths sum integers (exact at any width) and then take the same float32
steps in the same order, so every level with FMA (avx2, avx512, avx512vnni, the host's
own) gives the same bytes: the matvecs of every block type (one token, several tokens)
and the logits of both real models' greedy decode. The generic level (x86-64 baseline,
SSE2, the stand-in for a CPU without x86's wide dots) has no FMA: `llvm.fmuladd` becomes a
multiply and an add, so its floats may differ in the last bits; its greedy tokens may not.
Each level compiles numba's kernels once (its own cache entries), in a child process.
"""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("numba")

from apr_core.errors import AprError, ErrorCode                 # noqa: E402
from apr_native import isa                                       # noqa: E402

pytestmark = [pytest.mark.native, pytest.mark.real_model]

HERE = os.path.dirname(os.path.abspath(__file__))
# the levels a CI host runs: the baseline, AVX2 (what most users' CPUs have), the host's own
TESTED = ("generic", "avx2", isa.NATIVE)


def test_an_unknown_level_is_an_argument_error(monkeypatch):
    monkeypatch.setenv(isa.ENV, "avx9")
    with pytest.raises(AprError) as err:
        isa.requested()
    assert err.value.code == ErrorCode.ARGUMENT and "avx9" in str(err.value)


def test_a_level_the_host_lacks_is_refused(monkeypatch):
    monkeypatch.setattr(isa, "host_features", lambda: frozenset(isa.LEVELS["avx2"].features))
    monkeypatch.setenv(isa.ENV, "avx512")
    with pytest.raises(AprError) as err:
        isa.check("avx512")
    assert err.value.code == ErrorCode.UNSUPPORTED and "avx512bw" in str(err.value)
    assert isa.available() == ("generic", "avx2", isa.NATIVE)
    assert isa.best_level() == "avx2"


def test_a_level_never_grants_what_the_host_or_the_level_lacks(monkeypatch):
    monkeypatch.setattr(isa, "host_features", lambda: frozenset({"avx2", "fma", "f16c"}))
    monkeypatch.setenv(isa.ENV, "generic")
    assert not isa.has("avx2") and not isa.has("f16c")
    monkeypatch.setenv(isa.ENV, "avx2")
    assert isa.has("avx2") and isa.has("f16c") and not isa.has("avx512bw")
    monkeypatch.setenv(isa.ENV, "native")
    assert isa.has("avx2") and not isa.has("avx512bw")


def test_the_simd_library_is_compiled_for_the_level(monkeypatch):
    from apr_native.simd import build
    monkeypatch.setenv(isa.ENV, "avx2")
    assert build.flags(["cc"])[-1] == "-march=x86-64-v3"          # GCC's (and clang's) name
    zig = build.flags([sys.executable, "-m", "ziglang", "cc"])
    assert zig[-1] == "-march=x86_64_v3"                           # zig's
    monkeypatch.delenv(isa.ENV)
    assert build.flags(["cc"])[-1] == "-march=native"
    assert build.flags([sys.executable, "-m", "ziglang", "cc"])[-1] == "-march=native"


def test_the_simd_library_builds_at_every_level_the_host_has(monkeypatch, tmp_path):
    """With the installed compiler (zig's clang where `ziglang` is installed, as in CI): a
    level's -march spelled the compiler's way (zig refused GCC's x86-64-v3, so a run at
    APR_ISA=avx2 fell back to compiling numba's kernels in the foreground every time)."""
    from apr_native.simd import build
    assert build.can_build(), "a C compiler is part of the native setup"
    monkeypatch.setenv("APR_CACHE", str(tmp_path))
    for level in [name for name in TESTED if name in isa.available()]:
        monkeypatch.setenv(isa.ENV, level)
        path = build.library()
        assert path is not None and os.path.getsize(path) > 0, level


def _probe(level, paths):
    env = dict(os.environ, APR_ISA=level)
    env.pop("NUMBA_CPU_NAME", None)
    env.pop("NUMBA_CPU_FEATURES", None)
    done = subprocess.run([sys.executable, os.path.join(HERE, "isa_probe.py")] + paths,
                          capture_output=True, text=True, env=env, timeout=1800)
    lines = [l for l in done.stdout.splitlines() if l.startswith("ISA_PROBE ")]
    assert done.returncode == 0 and lines, done.stderr[-3000:]
    return json.loads(lines[-1][len("ISA_PROBE "):])


def test_every_level_computes_what_the_others_do(smollm2_gguf, qwen_gguf):
    """The forced levels on the real models (an AVX2 run in CI whatever the host)."""
    paths = [smollm2_gguf, qwen_gguf]
    levels = [level for level in TESTED if level in isa.available()]
    assert "avx2" in levels or not isa.host_features() >= isa.LEVELS["avx2"].features
    results = {level: _probe(level, paths) for level in levels}
    for level, result in results.items():
        print(level, result["numba_cpu"], result["paths"],
              {p: r["tokens"][:4] for p, r in result["greedy"].items()})
    reference = results[isa.NATIVE]
    for level, result in results.items():
        assert result["level"] == level
        if level != isa.NATIVE:                       # what numba compiled for
            assert result["numba_cpu"] == [isa.LEVELS[level].llvm_cpu,
                                           isa.LEVELS[level].llvm_features]
        granted = isa.host_features() if level == isa.NATIVE else isa.LEVELS[level].features
        fused = "fma" in granted
        assert result["paths"]["pmaddwd"] == ("avx2" in granted)
        for path in paths:
            ours, theirs = result["greedy"][path], reference["greedy"][path]
            assert ours["tokens"] == theirs["tokens"], (level, path)
            if fused:
                assert ours["digest"] == theirs["digest"], (level, path)
        for key, got in result["matvec"].items():
            want = reference["matvec"][key]
            if fused:
                assert got["digest"] == want["digest"], (level, key)
            else:
                a, b = np.array(got["values"]), np.array(want["values"])
                # one rounding per block of 32 more or less: float32 steps of the sums
                assert np.abs(a - b).max() <= 1e-5 * np.abs(b).max(), (level, key)
