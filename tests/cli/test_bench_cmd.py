"""`apr bench`: runs each runtime in a child, reports speed, TTFT, load time and peak RSS,
and apr's ratios to the peers; exit codes and errors per seed 000 appendix A.

Speed values are not asserted (no timed assertions): the test checks the report's
structure, that counts and ratios are consistent with each other, and that the same
prompt ids reach every runtime.
"""
import json
import os
import subprocess
import sys

import pytest

from synthetic_models import write_gguf_model

pytestmark = pytest.mark.native

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def apr(*args, **extra_env):
    env = dict(os.environ, APR_QUIET="1",
               PYTHONPATH=os.pathsep.join([ROOT, os.path.join(ROOT, "native")]), **extra_env)
    return subprocess.run([sys.executable, "-m", "apr_native.cli.main"] + list(args),
                          capture_output=True, text=True, env=env)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("bench") / "tiny.gguf")
    write_gguf_model(path, quant="Q4_0")
    return path


def test_bench_json_report(tiny):
    done = apr("bench", tiny, "-p", "5", "-n", "3", "--repeats", "2", "--warmup", "1",
               "--backend", "numpy", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["file_bytes"] == os.path.getsize(tiny)
    assert len(report["prompt_ids"]) == 5 and all(0 <= i < 64 for i in report["prompt_ids"])
    assert report["prompt"].startswith("5 fixed pseudo-random token ids")
    assert "no chat template" in report["prompt"]     # unlike `apr run`'s default
    (result,) = report["results"]
    assert result["runtime"] == "apr" and result["backend"] == "numpy"
    assert len(result["runs"]) == 2
    assert result["ttft_s"] == min(r["ttft_s"] for r in result["runs"])
    assert result["prefill_tok_s"] == pytest.approx(5 / result["ttft_s"])
    assert result["decode_tok_s"] == pytest.approx(
        2 / min(r["decode_s"] for r in result["runs"]))
    assert result["peak_rss_bytes"] > os.path.getsize(tiny) and result["load_s"] > 0
    assert report["ratios"] == {}
    _same_inputs_everywhere(report, report["options"]["threads"])


def _same_inputs_everywhere(report, threads):
    """Every runtime's child saw the parent's prompt ids and every thread variable set to
    --threads."""
    for result in report["results"]:
        assert result["prompt_ids"] == report["prompt_ids"], result["runtime"]
        assert result["threads"] == threads
        assert set(result["thread_env"].values()) == {str(threads)}, result["thread_env"]


def test_bench_threads_override_the_environment(tiny):
    """--threads wins over a thread count already in the caller's environment."""
    done = apr("bench", tiny, "-p", "3", "-n", "2", "--repeats", "1", "--warmup", "0",
               "--backend", "numpy", "--threads", "1", "--json",
               APR_THREADS="7", OMP_NUM_THREADS="7", NUMBA_NUM_THREADS="2")
    assert done.returncode == 0, done.stderr
    _same_inputs_everywhere(json.loads(done.stdout), 1)


@pytest.mark.real_model
def test_bench_compare_llama_cpp_prints_ratios(smollm2_gguf, capsys):
    """llama.cpp needs a complete GGUF (tokenizer keys): the real SmolLM2 file."""
    pytest.importorskip("llama_cpp")
    done = apr("bench", smollm2_gguf, "-p", "4", "-n", "2", "--repeats", "1", "--warmup", "0",
               "--compare", "llama.cpp", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    ours, peer = report["results"]
    assert peer["runtime"] == "llama.cpp"
    _same_inputs_everywhere(report, report["options"]["threads"])
    ratio = report["ratios"]["llama.cpp"]
    assert ratio["prefill"] == pytest.approx(ours["prefill_tok_s"] / peer["prefill_tok_s"])
    assert ratio["decode"] == pytest.approx(ours["decode_tok_s"] / peer["decode_tok_s"])
    # the text report of the same results (a second bench run would time both runtimes again)
    from apr_native.cli import bench_cmd
    bench_cmd._print(report["model"], report["prompt_ids"], report["options"],
                     report["results"], report["ratios"])
    assert "apr / llama.cpp: prefill" in capsys.readouterr().out


def test_bench_rounds_report_the_best_of_every_round(tiny):
    done = apr("bench", tiny, "-p", "4", "-n", "3", "--repeats", "2", "--warmup", "0",
               "--rounds", "3", "--backend", "numpy", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    (result,) = report["results"]
    assert report["options"]["rounds"] == 3 and len(result["runs"]) == 6
    assert result["ttft_s"] == min(r["ttft_s"] for r in result["runs"])
    assert result["decode_tok_s"] == pytest.approx(
        2 / min(r["decode_s"] for r in result["runs"]))
    text = apr("bench", tiny, "-p", "4", "-n", "2", "--repeats", "1", "--warmup", "0",
               "--rounds", "2", "--backend", "numpy")
    assert text.returncode == 0 and "best of 2 after 0 warm-up in each of 2 interleaved" \
        in text.stdout, text.stdout


def test_bench_errors(tiny, tmp_path):
    assert apr("bench", "--help").returncode == 0
    missing = apr("bench", str(tmp_path / "absent.gguf"))
    assert missing.returncode != 0 and missing.stderr.count("\n") == 1
    assert apr("bench", tiny, "--repeats", "0").returncode == 2
    assert apr("bench", tiny, "--rounds", "0").returncode == 2
    assert apr("bench", tiny, "--backend", "tpu").returncode == 2


def test_bench_runs_apr_at_the_level_asked_and_reports_the_roofline(tiny):
    """--isa reaches apr's child as APR_ISA; the roofline divides the bandwidth by the
    weight bytes a decode step reads (every layer's projections and the LM head, as
    gguf-py lists them)."""
    import gguf
    done = apr("bench", tiny, "-p", "3", "-n", "3", "--repeats", "1", "--warmup", "0",
               "--backend", "numpy", "--isa", "generic", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    (result,) = report["results"]
    assert result["isa"] == "generic (x86-64)" and report["options"]["isa"] == "generic"
    tensors = {t.name: int(t.n_bytes) for t in gguf.GGUFReader(tiny).tensors}
    head = "output.weight" if "output.weight" in tensors else "token_embd.weight"
    read = sum(n for name, n in tensors.items() if name.startswith("blk.") and
               name.endswith(".weight") and "norm" not in name) + tensors[head]
    roof = report["roofline"]
    assert roof["bytes"] == read
    assert roof["tok_s"] == pytest.approx(roof["gbs"] * 1e9 / read)
    assert roof["reached"]["apr"] == pytest.approx(100 * result["decode_tok_s"] / roof["tok_s"])


def test_bench_llama_cpp_at_a_named_level_needs_its_build(tiny, tmp_path):
    """llama.cpp at a named level runs the libraries built for it, never the native wheel
    in their place: without them, one coded line says how to build them."""
    done = apr("bench", tiny, "--isa", "generic", "--compare", "llama.cpp",
               APR_CACHE=str(tmp_path))
    assert done.returncode != 0 and done.stderr.count("\n") == 1, done.stderr
    assert "E009" in done.stderr and "scripts/build_llama_lib.sh generic" in done.stderr
