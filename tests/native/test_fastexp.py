"""The vectorized float32 exp of the numba SiLU against float64 exp, and SiLU-times-up
against the reference formula."""
import numpy as np
import pytest

pytest.importorskip("numba")

from numba import njit                                           # noqa: E402

from apr_native.kernels.vector import fastexp  # noqa: E402

pytestmark = pytest.mark.native


@njit
def exp_all(x, out):
    for i in range(x.shape[0]):
        out[i] = fastexp.exp_f32(x[i])


def test_exp_within_one_ulp_of_float64_exp_over_its_range():
    x = np.linspace(fastexp.EXP_LO, fastexp.EXP_HI, 1_000_003).astype(np.float32)
    x = np.concatenate([x, np.float32([0.0, -0.0, 1e-30, -1e-30, 0.5, -0.5])])
    got = np.empty_like(x)
    exp_all(x, got)
    exact = np.exp(x.astype(np.float64))
    ulps = np.abs(got - exact) / np.spacing(exact.astype(np.float32)).astype(np.float64)
    assert ulps.max() <= 1.0, (ulps.max(), x[ulps.argmax()])


def test_exp_clamps_to_finite_normal_values():
    x = np.float32([-1e4, -100.0, -87.0, 88.0, 100.0, 1e4])
    got = np.empty_like(x)
    exp_all(x, got)
    assert np.isfinite(got).all() and (got >= np.finfo(np.float32).tiny).all()
    np.testing.assert_allclose(got[[0, 1]], np.exp(np.float32(-87.0)), rtol=1e-6)
    np.testing.assert_allclose(got[[4, 5]], np.exp(np.float32(88.0)), rtol=1e-6)


def test_silu_mul_matches_the_reference_formula():
    rng = np.random.default_rng(0)
    g = (rng.standard_normal((3, 1000)) * 30).astype(np.float32)  # [T, n], tails clamp
    u = rng.standard_normal((3, 1000)).astype(np.float32)
    out = np.empty_like(g)
    fastexp.silu_mul(g, u, out)
    with np.errstate(over="ignore"):
        want = g / (np.float32(1.0) + np.exp(-g)) * u            # numpy float32
    err = np.abs(out - want)
    # below g = -87 exp(-g) is clamped (the reference overflows to inf): |result| < 1e-35
    assert (err <= 4 * np.finfo(np.float32).eps * np.abs(want) + 1e-35).all(), err.max()
    assert np.abs(out[g < -87]).max() < 1e-35 and (err[g >= -87] <= 4 * np.finfo(
        np.float32).eps * np.abs(want[g >= -87])).all()
    inplace = g.copy()
    fastexp.silu_mul_inplace(inplace, u)
    np.testing.assert_array_equal(inplace, out)
