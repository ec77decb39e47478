"""What each numba kernel call that posts dots gets of `isa.int8_dots`
(`apr_native.dot_select`): the pool's ACT8 word set from the weight types the call reads,
before the call, for one token or many. The kernels are stand-ins that record the word,
so nothing compiles here."""
from types import SimpleNamespace

import numpy as np
import pytest

pytest.importorskip("numba")

from apr_native import backends, dot_select, isa                 # noqa: E402
from apr_native.kernels import cpu, pool                         # noqa: E402

pytestmark = pytest.mark.native


class _Block:                    # weakly referenced, as the model's blocks are
    def __init__(self, linears):
        self.linears = linears


def _linear(name):
    return SimpleNamespace(dtype=SimpleNamespace(name=name))


def _seen(workers):
    return lambda *args: int(workers.task[pool.ACT8])


@pytest.fixture
def workers():
    mine = pool.Pool(0)
    before = pool.bind(mine)
    try:
        yield mine
    finally:
        pool.bind(before)
        mine.stop()


def _calls(workers, types, tokens=1):
    """ACT8 as each wrapped kind sees it for weights of `types`."""
    x = np.zeros((tokens, 32), np.float32)
    seen = _seen(workers)
    block = _Block({"q": _linear(types[0]), "k": None,
                    **{str(i): _linear(t) for i, t in enumerate(types)}})
    out = [dot_select.decoder_block(seen)(None, block, x, None, None, {}),
           dot_select.matmul_group(seen)([_linear(t) for t in types], x),
           dot_select.matmul_glu(seen)(_linear(types[0]), _linear(types[-1]), x, "silu")]
    if len(types) == 1:
        out.append(dot_select.matmul(seen)(None, _linear(types[0]).dtype, None, x, 0))
    return set(out)


def test_each_call_takes_its_weight_types_codes(workers, monkeypatch):
    monkeypatch.delenv(isa.DOTS_ENV, raising=False)
    level = int(isa.int8_level())
    assert _calls(workers, ("Q4_K", "Q6_K")) == {level}
    assert _calls(workers, ("Q6_K",)) == {level}
    for types in (("Q8_0",), ("Q4_1",), ("Q5_0", "Q6_K"), ("Q4_K", "Q8_0")):
        assert _calls(workers, types) == {0}, types
    monkeypatch.setenv(isa.DOTS_ENV, "int8")
    assert _calls(workers, ("Q4_1",)) == {1}
    monkeypatch.setenv(isa.DOTS_ENV, "exact")
    assert _calls(workers, ("Q4_K",)) == {0}


def test_several_tokens_take_the_same_codes(workers, monkeypatch):
    """A prompt or a verification pass takes the codes one token takes (`kquant_token_rows`
    gives each token the bits it gets alone)."""
    monkeypatch.setenv(isa.DOTS_ENV, "int8")
    workers.task[pool.ACT8] = 0
    assert _calls(workers, ("Q4_K",), tokens=3) == {1}
    monkeypatch.setenv(isa.DOTS_ENV, "exact")
    workers.task[pool.ACT8] = 1
    assert _calls(workers, ("Q4_K",), tokens=40) == {0}


def test_the_numba_backend_registers_the_wrapped_kernels():
    kernels = backends.select("numba")
    head = kernels.lookup("matmul", "Q6_K")
    assert head is not cpu.numba_matmul and head.__wrapped__ is cpu.numba_matmul
    for kind in ("matmul_group", "matmul_glu", "decoder_block"):
        assert hasattr(kernels.lookup(kind, "*"), "__wrapped__"), kind
