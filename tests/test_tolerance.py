"""The tolerance helper (tests/tolerance.py): bounds scale with the unit roundoff and the
problem size, a correct computation in each precision lands under its bound, and an error of
one rounding in a wider place (or a wrong operation) does not."""

from __future__ import annotations

import numpy as np
import pytest

from tests.tolerance import assert_orthonormal, assert_rel, bound, rel_err, unit_roundoff


def test_unit_roundoffs() -> None:
    assert unit_roundoff("f64") == np.finfo(np.float64).eps / 2
    assert unit_roundoff("f32") == np.finfo(np.float32).eps / 2
    assert unit_roundoff("f16") == np.finfo(np.float16).eps / 2
    assert unit_roundoff("c64") == unit_roundoff("f32")
    assert unit_roundoff(np.complex128) == unit_roundoff("f64")
    assert unit_roundoff("bf16") == 2.0 ** -8
    assert bound("f32", 10) == 10 * bound("f32", 1)
    assert bound("f32", 10, cond=100) == 100 * bound("f32", 10)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_correct_product_passes_and_a_wrong_one_fails(rng, dtype) -> None:
    k = 200
    a = rng.standard_normal((30, k)).astype(dtype)
    b = rng.standard_normal((k, 20)).astype(dtype)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    assert_rel(a @ b, ref, dtype, n=k)
    with pytest.raises(AssertionError):  # one operand transposed-conjugated wrongly, etc.
        assert_rel((a @ b) * (1 + 50 * k * unit_roundoff(dtype)), ref, dtype, n=k)


def test_orthonormality(rng) -> None:
    q, _ = np.linalg.qr(rng.standard_normal((12, 7)))
    assert_orthonormal(q, "f64")
    with pytest.raises(AssertionError):
        assert_orthonormal(np.zeros((12, 7)), "f64")
    assert rel_err(np.zeros(3), np.zeros(3)) == 0.0
