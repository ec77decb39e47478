"""Bad decoding flags of `apr run` end in one coded line (E011), never a traceback or an
internal error: sampler options out of range, an unknown or repeated stage, a logit bias
for a token outside the vocabulary, context/RoPE values out of range, an empty draft."""
import pytest

from cli_util import apr

pytestmark = [pytest.mark.native, pytest.mark.real_model]


@pytest.mark.parametrize("flags", [
    ["--logit-bias", "99999999+1"], ["--logit-bias=-5+1"], ["--logit-bias", "7"],
    ["--samplers", "top_k;top_k"], ["--samplers", "top_n_sigma"], ["--dry-base", "0.5"],
    ["--mirostat", "3"], ["--xtc-probability", "2"], ["--repeat-last-n", "-2"],
    ["--ctx", "0"], ["--rope-scale", "-1"], ["--yarn-orig-ctx", "0"],
    ["--speculate", "lookup", "--draft-max", "0"],
])
def test_bad_decoding_flags_are_coded_errors(smollm2_gguf, flags):
    code, out, err = apr("run", smollm2_gguf, "Hi", "-n", "2", *flags)
    assert code != 0 and out == ""
    assert "E011" in err and "Traceback" not in err and "internal error" not in err, err
    assert len(err.strip().splitlines()) == 1
