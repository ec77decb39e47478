"""Replay of the fuzzing corpus (fast: CI runs this instead of the campaign).

Every file under tests/fuzz/corpus/<target>/ went through `fuzz/run.py` (atheris) and is
fed again to the same target from fuzz/targets.py: only AprError may escape, and a
rejected input may not allocate more than twice its size plus 1 MiB (traced with
tracemalloc). The corpus holds the crashers found by the campaign (fixed since, named
`crash-*`/`finding-*`) and the inputs libFuzzer kept for reaching new coverage (`cov-*`),
copied by `fuzz/run.py --minimize TARGET`.
"""
from __future__ import annotations

import importlib.util
import os
import tracemalloc

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CORPUS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")
ALLOC_SLACK = 1 << 20


def _targets():
    spec = importlib.util.spec_from_file_location("apr_fuzz_targets",
                                                  os.path.join(ROOT, "fuzz", "targets.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


targets = _targets()


def _cases():
    cases = []
    if os.path.isdir(CORPUS):
        for name in sorted(os.listdir(CORPUS)):
            folder = os.path.join(CORPUS, name)
            if os.path.isdir(folder):
                cases.append(name)
    return cases


def test_corpus_covers_every_target():
    assert sorted(_cases()) == sorted(targets.TARGETS)


@pytest.mark.parametrize("name", _cases())
def test_replay(name):
    folder = os.path.join(CORPUS, name)
    files = sorted(os.listdir(folder))
    assert files, name
    target = targets.TARGETS[name]
    inputs = []
    for file_name in files:
        with open(os.path.join(folder, file_name), "rb") as handle:
            inputs.append((file_name, handle.read()))
    for _, data in inputs:
        target(data)    # raises on any escape other than AprError; also warms up imports
    # Second pass, traced: lazy imports and caches from the first pass are not counted.
    for file_name, data in inputs:
        targets.reset_rejected()
        tracemalloc.start()
        try:
            target(data)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        if targets.was_rejected():
            assert peak <= 2 * len(data) + ALLOC_SLACK, (name, file_name, peak)
