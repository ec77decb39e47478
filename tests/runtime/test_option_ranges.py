"""THE range table of the generation options (`apr_core/runtime/option_ranges.py`) against
the bounds `SamplerConfig` enforces: every bound of the table is a bound of the config (a
value just outside is refused, the bound itself taken as the table says), and a sampler
flag the table leaves unbounded is one the config takes at any value. Temperature is the
one deliberate difference: the config reads a negative one as greedy, the table refuses it.
"""
import pytest

from apr_core.errors import AprError
from apr_core.runtime.option_ranges import MAX_TOKENS, RANGES, Range
from apr_core.runtime.sampler_options import OPTIONS
from apr_core.runtime.sampling import SamplerConfig

NUMERIC = [o for o in OPTIONS if o.kind in (int, float)]
STEP = {int: 1, float: 1e-6}


def accepted(field, value):
    try:
        SamplerConfig(**{field: value})
        return True
    except AprError:
        return False


@pytest.mark.parametrize("option", [o for o in NUMERIC if o.field in RANGES
                                    and o.field != "temperature"], ids=lambda o: o.field)
def test_each_bound_is_the_configs(option):
    allowed, kind, step = RANGES[option.field], option.kind, STEP[option.kind]
    probes = []
    if allowed.low is not None:
        low = kind(allowed.low)
        probes += [(low - step, False), (low, not allowed.low_open), (low + step, True)]
    if allowed.high is not None:
        high = kind(allowed.high)
        probes += [(high - step, True), (high, True), (high + step, False)]
    else:
        probes.append((kind(10 ** 9), True))
    for value, inside in probes:
        assert allowed.contains(value) is inside, (value, str(allowed))
        assert accepted(option.field, value) is inside, (option.field, value)


@pytest.mark.parametrize("option", [o for o in NUMERIC if o.field not in RANGES],
                         ids=lambda o: o.field)
def test_an_unbounded_flag_takes_any_value(option):
    for value in (-10 ** 9, 0, 10 ** 9):
        assert accepted(option.field, option.kind(value)), (option.field, value)


def test_temperature_and_max_tokens():
    assert accepted("temperature", -1.0)          # greedy to the config ...
    assert not RANGES["temperature"].contains(-1.0)   # ... refused on the command line
    assert RANGES["temperature"].contains(0.0) and RANGES["temperature"].contains(2.0)
    assert [RANGES["max_tokens"].contains(n) for n in (0, 1, MAX_TOKENS, MAX_TOKENS + 1)] \
        == [False, True, True, False]


def test_nan_is_in_no_range_and_the_text_names_each_kind():
    assert not Range(None).contains(float("nan"))
    assert [str(r) for r in (Range(None), Range(None, 3), Range(0), Range(0.0, 1.0),
                             Range(0.0, 1.0, low_open=True), Range(0.0, low_open=True),
                             Range(0.5, 2.5))] == \
        ["any", "<= 3", ">= 0", "0..1", "> 0 and <= 1", "> 0", "0.5..2.5"]
