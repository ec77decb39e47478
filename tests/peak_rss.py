"""Peak RSS of a Python child process, measured so that nothing the caller holds counts.

Linux carries a process's peak RSS across fork + exec (`ru_maxrss` of a child forked from
a test process that may hold other models starts at that process's peak), so the child is
started from a small launcher process: its `ru_maxrss` then counts only itself.
"""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LAUNCHER = "import subprocess, sys; sys.exit(subprocess.call(sys.argv[1:]))"


def child_peak_rss_bytes(child_code: str, *args: str) -> int:
    """Run `python -c child_code *args` via the launcher; the child must print its
    `resource.getrusage(RUSAGE_SELF).ru_maxrss` (KiB on Linux) as its last output."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, os.path.join(ROOT, "native")]))
    done = subprocess.run([sys.executable, "-c", LAUNCHER, sys.executable, "-c", child_code]
                          + list(args), capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    return int(done.stdout.split()[-1]) * 1024


def model_run_rss(child_code: str, model_path: str):
    """(file size, baseline peak, model-run peak) in bytes: `child_code` run without
    arguments (the baseline), then with `model_path`; the numbers are printed."""
    size = os.path.getsize(model_path)
    baseline = child_peak_rss_bytes(child_code)
    peak = child_peak_rss_bytes(child_code, model_path)
    print("file {:.1f} MB, baseline {:.1f} MB, peak {:.1f} MB ({:.2f}x file above baseline)"
          .format(size / 1e6, baseline / 1e6, peak / 1e6, (peak - baseline) / size))
    return size, baseline, peak
