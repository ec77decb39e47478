"""`needs(module)`: a skipif marker whose condition is known at collection.

Tests that need an oracle use it instead of `pytest.importorskip` inside the test, so the
Python 3.8 run (which lacks some oracles on purpose: gguf-py needs numpy >= 1.20, HF
`tokenizers` has no Python 3.8 wheel) deselects them before running, while on the main
Python a missing oracle is a skip, which fails under CI=true (tests/conftest.py).
"""
import importlib

import pytest


def importable(module):
    try:
        importlib.import_module(module)
    except Exception:   # noqa: BLE001 - gguf-py on numpy 1.17 fails with AttributeError too
        return False
    return True


def needs(*modules):
    missing = [m for m in modules if not importable(m)]
    return pytest.mark.skipif(bool(missing), reason="oracle not importable: " + ", ".join(
        missing or modules))
