"""Quality report numbers on inputs whose errors are known exactly, and inline validation."""
import math

import numpy as np
import pytest

from apr_core.errors import AprError, ErrorCode
from apr_core.quant import quantize
from apr_core.conversion.quality import QualityReport, check_values, measure, validate


def test_exact_in_q8_0_gives_zero_error():
    # Integers in [-127, 127] with 127 in every block: d = 127/127 = 1, exact in F16.
    values = np.random.RandomState(0).randint(-126, 127, (8, 32)).astype(np.float32)
    values[:, 0] = 127.0
    row = measure("w", values, "Q8_0", quantize(values, "Q8_0"), "F32", values.nbytes)
    assert row.rmse == 0.0 and row.max_abs_error == 0.0 and row.cosine == 1.0
    assert row.bits_per_weight == 8.5 and row.bytes_after == 8 * 34
    assert row.bytes_before == 8 * 32 * 4 and row.shape == (8, 32)


def test_known_f16_rounding_error():
    # 1 + 2**-12 is halfway below 1 + 2**-11 in F16 (ties to even: rounds to 1.0),
    # so the error is exactly 2**-12 on every element.
    values = np.full((2, 4), 1.0 + 2.0 ** -12, dtype=np.float32)
    row = measure("w", values, "F16", quantize(values, "F16"), "F32", values.nbytes)
    assert row.max_abs_error == 2.0 ** -12 and row.rmse == 2.0 ** -12
    assert row.bits_per_weight == 16.0
    expected_cos = 8 * (1 + 2.0 ** -12) / math.sqrt(8 * (1 + 2.0 ** -12) ** 2 * 8)
    assert row.cosine == pytest.approx(expected_cos, abs=1e-15)


def test_sign_flip_cosine_and_zero_vectors():
    values = np.zeros((1, 32), dtype=np.float32)
    row = measure("z", values, "Q8_0", quantize(values, "Q8_0"), "F32", 128)
    assert row.cosine == 1.0 and row.rmse == 0.0
    values = np.array([[1.0, -1.0] * 16], dtype=np.float32)
    data = bytes(quantize(-values, "F16"))
    row = measure("s", values, "F16", data, "F32", 128)
    assert row.cosine == -1.0 and row.max_abs_error == 2.0 and row.rmse == 2.0


def test_report_totals():
    report = QualityReport()
    a = np.full((4, 32), 127.0, np.float32)   # Q8_0 scale 1.0: exact
    report.add(measure("a", a, "Q8_0", quantize(a, "Q8_0"), "F32", a.nbytes))
    report.add(measure("b", a, "F16", quantize(a, "F16"), "F32", a.nbytes))
    totals = report.to_dict()["totals"]
    assert totals == {"tensors": 2, "params": 256, "bytes_before": 1024,
                      "bytes_after": 4 * 34 + 256, "bits_per_weight": 8.0 * 392 / 256,
                      "min_cosine": 1.0, "max_rmse": 0.0}


def test_check_values():
    assert check_values("blk.0.ffn_up.weight", np.array([1.0, np.inf, np.nan])) == [
        "blk.0.ffn_up.weight: 2 NaN/Inf values"]
    assert check_values("encoder.layers.0.self_attn_layer_norm.weight", np.full(8, 0.4)) == [
        "encoder.layers.0.self_attn_layer_norm.weight: mean 0.4 outside [0.5, 3.0]"]
    assert check_values("bert.encoder.layer.0.output.LayerNorm.weight", np.full(8, 3.5)) == [
        "bert.encoder.layer.0.output.LayerNorm.weight: mean 3.5 outside [0.5, 3.0]"]
    # RMSNorm: real models have means from ~0 to ~7 (see EXPECTED_MEANS); 11 is the
    # seed's zombie-model case.
    assert check_values("blk.0.attn_norm.weight", np.full(8, 0.001)) == []
    assert check_values("model.layers.0.input_layernorm.weight", np.full(8, 7.5)) == []
    assert check_values("model.norm.weight", np.full(8, 11.0)) == [
        "model.norm.weight: mean 11 outside [-1.0, 10.0]"]
    assert check_values("encoder.layer_norm.bias", np.full(8, 0.6)) == [
        "encoder.layer_norm.bias: mean 0.6 outside [-0.5, 0.5]"]
    assert check_values("blk.0.attn_q.weight", np.full(8, 11.0)) == []


def test_validate_raises_unless_forced():
    with pytest.raises(AprError) as info:
        validate("output_norm.weight", np.full(4, 11.0))
    assert info.value.code == ErrorCode.VALIDATION and info.value.code.exit_code == 5
    report = QualityReport()
    validate("output_norm.weight", np.full(4, 11.0), force=True, report=report)
    assert report.warnings == ["output_norm.weight: mean 11 outside [-1.0, 10.0]"]
