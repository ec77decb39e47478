"""Shared by the WASM tests: what they must reproduce of native apr on SmolLM2, how closely,
and how a missing prerequisite is handled."""
import os

import pytest

PROMPT = "The capital of France is"
QUESTION = "What is the capital of France?"
GREEDY = 8
# WASM numpy has no BLAS, so sums run in another order: logits agree to rounding only.
LOGIT_TOLERANCE = 1e-3


def require(condition, reason):
    """Skip locally, fail in CI: the WASM requirement must not vanish into silent skips."""
    if condition:
        return
    if os.environ.get("CI"):
        pytest.fail("wasm_tests prerequisite missing in CI: " + reason)
    pytest.skip(reason)
