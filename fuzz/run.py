"""Fuzzing campaign over every parser: `python fuzz/run.py --minutes N`.

Runs each target of `fuzz/targets.py` in turn in its own low-priority process (`nice 19`)
for an equal share of the budget, with atheris (coverage-guided libFuzzer over Python
bytecode) when importable, else a plain random-mutation loop. Findings:

* crash: any exception other than AprError (input saved with its traceback);
* hang: an input running over 2 s (libFuzzer -timeout=2);
* alloc: a rejected input whose traced peak allocation exceeds 2x its size + 1 MiB
  (checked under tracemalloc on every 256th input, to keep the campaign fast).

Working corpus, findings and cumulative statistics go to --workdir (default
~/.cache/apr/fuzz); `--report` prints the totals. Copy fixed findings into
tests/fuzz/corpus/<target>/ so CI replays them (tests/fuzz/test_fuzz_regressions.py);
`--minimize TARGET` copies the campaign's coverage corpus (and findings) there.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import re
import subprocess
import sys
import time
import traceback
import tracemalloc

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
for _path in (ROOT, os.path.join(ROOT, "native"), HERE):
    if _path not in sys.path:
        sys.path.insert(0, _path)

DEFAULT_WORKDIR = os.path.join(os.path.expanduser("~"), ".cache", "apr", "fuzz")
ALLOC_EVERY = 256
ALLOC_SLACK = 1 << 20


class Harness:
    """Wraps a target: counts inputs, records crashes and allocation findings."""

    def __init__(self, name: str, target, outdir: str) -> None:
        self.name, self.target, self.outdir = name, target, outdir
        self.count = 0
        self.seen = set()
        os.makedirs(outdir, exist_ok=True)

    def __call__(self, data: bytes) -> None:
        import targets
        self.count += 1
        try:
            if self.count % ALLOC_EVERY == 0:
                tracemalloc.start()
                targets.reset_rejected()
                self.target(data)
                peak = tracemalloc.get_traced_memory()[1]
                tracemalloc.stop()
                if targets.was_rejected() and peak > 2 * len(data) + ALLOC_SLACK:
                    self._save("alloc", data, "peak {} bytes for a rejected {}-byte "
                               "input\n".format(peak, len(data)), ("alloc", peak // ALLOC_SLACK))
            else:
                self.target(data)
        except Exception as exc:  # noqa: BLE001 - any non-AprError escape is the finding
            if tracemalloc.is_tracing():
                tracemalloc.stop()
            frames = traceback.extract_tb(exc.__traceback__)
            where = next((f for f in reversed(frames) if "apr_core" in f.filename), frames[-1])
            self._save("crash", data, traceback.format_exc(),
                       (type(exc).__name__, where.filename, where.lineno))

    def _save(self, kind: str, data: bytes, text: str, signature: tuple) -> None:
        if signature in self.seen:
            return
        self.seen.add(signature)
        digest = hashlib.sha1(data).hexdigest()[:16]
        base = os.path.join(self.outdir, "{}-{}".format(kind, digest))
        with open(base + ".bin", "wb") as handle:
            handle.write(data)
        with open(base + ".txt", "w") as handle:
            handle.write(text)
        sys.stderr.write("FINDING {} {} {}\n".format(self.name, kind, base))


def run_minimize(name: str, workdir: str, dest: str, max_files: int = 400) -> int:
    """Copy the campaign's corpus for `name` (libFuzzer keeps only inputs that reached new
    coverage) plus its findings into `dest`, the regression corpus CI replays; files are
    named by content hash, so repeated runs add only what is new. Smallest inputs first,
    at most `max_files`. Returns the number of files in `dest`."""
    os.makedirs(dest, exist_ok=True)
    found = []
    for sub in ("corpus", "findings"):
        folder = os.path.join(workdir, name, sub)
        if os.path.isdir(folder):
            for entry in os.listdir(folder):
                path = os.path.join(folder, entry)
                if not entry.endswith(".txt") and os.path.isfile(path):
                    found.append((os.path.getsize(path), sub, path))
    have = set(os.listdir(dest))
    for size, sub, path in sorted(found):
        if len(have) >= max_files:
            break
        with open(path, "rb") as handle:
            data = handle.read()
        target_name = "{}-{}".format("finding" if sub == "findings" else "cov",
                                     hashlib.sha1(data).hexdigest()[:16])
        if target_name not in have:
            with open(os.path.join(dest, target_name), "wb") as handle:
                handle.write(data)
            have.add(target_name)
    return len(have)


def _instrument(atheris) -> None:
    with atheris.instrument_imports(include=["apr_core"]):
        import apr_core.errors, apr_core.io, apr_core.tensor, apr_core.dtypes  # noqa: F401
        import apr_core.formats.apr1, apr_core.formats.apr2, apr_core.formats.gguf  # noqa
        import apr_core.formats.safetensors, apr_core.formats.shards  # noqa: F401
        import apr_core.formats.apr2_encrypt, apr_core.formats.apr2_sign  # noqa: F401
        import apr_core.formats.apr2_stream, apr_core.formats.msgpack_codec  # noqa: F401
        import apr_core.codecs.lz4, apr_core.codecs.framing, apr_core.codecs.zstd  # noqa
        import apr_core.text.tokenizer, apr_core.text.bpe, apr_core.text.hf_json  # noqa
        import apr_core.text.pretokenize, apr_core.crypto.ed25519_pure  # noqa: F401


def run_child(name: str, seconds: int, workdir: str) -> None:
    """One target for `seconds`; prints 'EXECUTED <n>' when it stops on its own."""
    try:
        import atheris
    except ImportError:
        atheris = None
    if atheris is not None:
        # Before anything imports apr_core's parsers (the seeds do): only modules
        # imported inside the instrumentation context report coverage.
        _instrument(atheris)
    import targets
    corpus = os.path.join(workdir, name, "corpus")
    findings = os.path.join(workdir, name, "findings")
    os.makedirs(corpus, exist_ok=True)
    seeds = targets.SEEDS[name]()
    for seed in seeds:
        path = os.path.join(corpus, "seed-" + hashlib.sha1(seed).hexdigest()[:16])
        if not os.path.exists(path):
            with open(path, "wb") as handle:
                handle.write(seed)
    if atheris is None:
        _mutation_loop(name, targets, seeds, seconds, findings)
        return
    harness = Harness(name, targets.TARGETS[name], findings)
    argv = [sys.argv[0], corpus, "-max_total_time={}".format(seconds), "-timeout=2",
            "-rss_limit_mb=2048", "-max_len=65536", "-print_final_stats=1",
            "-artifact_prefix={}/".format(findings)]
    atheris.Setup(argv, harness)
    atheris.Fuzz()


def _mutation_loop(name, targets, seeds, seconds, findings) -> None:
    """Fallback without atheris: random mutations of the seeds (not coverage-guided)."""
    harness = Harness(name, targets.TARGETS[name], findings)
    rng = random.Random(0)
    deadline = time.time() + seconds
    while time.time() < deadline:
        data = bytearray(rng.choice(seeds))
        for _ in range(rng.randint(1, 8)):
            op = rng.randrange(4)
            pos = rng.randrange(len(data) + 1)
            if op == 0 and data:
                data[pos % len(data)] ^= 1 << rng.randrange(8)
            elif op == 1 and data:
                data[pos % len(data)] = rng.choice((0, 1, 0x7F, 0x80, 0xFF))
            elif op == 2:
                data[pos:pos] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
            else:
                del data[pos:pos + rng.randint(1, 16)]
        harness(bytes(data))
    print("stat::number_of_executed_units: {}".format(harness.count), file=sys.stderr)


def _stats_path(workdir: str) -> str:
    return os.path.join(workdir, "stats.json")


def load_stats(workdir: str) -> dict:
    try:
        with open(_stats_path(workdir)) as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return {}


def run_campaign(names, minutes: float, workdir: str) -> dict:
    stats = load_stats(workdir)
    share = max(10, int(minutes * 60 / len(names)))
    for name in names:
        deadline = time.time() + share
        # libFuzzer stops a run at its first finding (a timeout under load, say):
        # start it again on the grown corpus until the target's share is spent.
        while time.time() < deadline - 5:
            stats = _run_child_once(name, int(deadline - time.time()), workdir)
    return stats


def _run_child_once(name: str, seconds: int, workdir: str) -> dict:
    """One child run of `name`; adds its counts to stats.json and returns the stats."""
    cmd = ["nice", "-n", "19", sys.executable, os.path.abspath(__file__), "--child", name,
           "--seconds", str(max(10, seconds)), "--workdir", workdir]
    started = time.time()
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, errors="replace")
    text = proc.stdout + proc.stderr
    match = re.findall(r"stat::number_of_executed_units: (\d+)", text)
    executed = int(match[-1]) if match else 0
    stats = load_stats(workdir)  # re-read: another campaign may have written since
    entry = stats.setdefault(name, {"executed": 0, "seconds": 0.0, "runs": 0})
    entry["executed"] += executed
    entry["seconds"] += round(time.time() - started, 1)
    entry["runs"] += 1
    if "ERROR: libFuzzer: timeout" in text:
        entry["hangs"] = entry.get("hangs", 0) + 1
    findings_dir = os.path.join(workdir, name, "findings")
    entry["findings"] = sorted(f for f in os.listdir(findings_dir)
                               if not f.endswith(".txt")) if os.path.isdir(
                                   findings_dir) else []
    entry["corpus"] = len(os.listdir(os.path.join(workdir, name, "corpus")))
    with open(_stats_path(workdir), "w") as handle:
        json.dump(stats, handle, indent=2, sort_keys=True)
    print("{:12s} +{:>9,} inputs ({:>9,} total, {} findings)".format(
        name, executed, entry["executed"], len(entry["findings"])), flush=True)
    return stats


def main() -> int:
    import targets
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=5.0, help="total budget")
    parser.add_argument("--targets", default=",".join(targets.TARGETS),
                        help="comma-separated subset of: " + ", ".join(targets.TARGETS))
    parser.add_argument("--workdir", default=DEFAULT_WORKDIR)
    parser.add_argument("--report", action="store_true", help="print cumulative stats")
    parser.add_argument("--minimize", metavar="TARGET",
                        help="copy TARGET's coverage corpus and findings into "
                             "tests/fuzz/corpus/TARGET (the CI regression corpus)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--seconds", type=int, default=60, help=argparse.SUPPRESS)
    args, _ = parser.parse_known_args()
    if args.child:
        run_child(args.child, args.seconds, args.workdir)
        return 0
    if args.minimize:
        count = run_minimize(args.minimize, args.workdir,
                             os.path.join(ROOT, "tests", "fuzz", "corpus", args.minimize))
        print("{}: {} files in the regression corpus".format(args.minimize, count))
        return 0
    if args.report:
        print(json.dumps(load_stats(args.workdir), indent=2, sort_keys=True))
        return 0
    names = [n for n in args.targets.split(",") if n]
    unknown = [n for n in names if n not in targets.TARGETS]
    if unknown:
        parser.error("unknown targets: {}".format(", ".join(unknown)))
    run_campaign(names, args.minutes, args.workdir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
