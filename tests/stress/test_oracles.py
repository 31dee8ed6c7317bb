"""The fuzz's reference checks catch what they must: a wrong element, and a finite element where
the float64 reference is not (an infinite ``alpha``), while leaving inf against NaN free there;
and ``empty``'s undefined contents are left alone."""

from __future__ import annotations

import math

import numpy as np
import oracles
import pytest

from gpumsg.messages import BufRef, Gemv


def _gemv_case(alpha: float) -> tuple[Gemv, dict[int, np.ndarray], np.ndarray]:
    rng = np.random.default_rng(7)
    a = np.asfortranarray(rng.standard_normal((4, 4)).astype(np.float32))  # as the buffer
    x = rng.standard_normal(4).astype(np.float32)
    y = rng.standard_normal(4).astype(np.float32)
    refs = [BufRef(1, i, 0, "f32", shape, "F", 4 * int(np.prod(shape)))
            for i, shape in ((1, (4, 4)), (2, (4,)), (3, (4,)))]
    msg = Gemv(refs[0], refs[1], refs[2], 4, 4, alpha=alpha)
    return msg, {1: a, 2: x, 3: y}, (np.float64(alpha) * (a.astype(np.float64) @ x))


def test_a_right_answer_passes_and_a_wrong_one_is_caught() -> None:
    msg, snaps, want = _gemv_case(1.5)
    assert oracles.check_message(msg, snaps, lambda ref: want.astype(np.float32), None)
    bad = want.astype(np.float32)
    bad[2] += 1.0
    with pytest.raises(oracles.Mismatch):
        oracles.check_message(msg, snaps, lambda ref: bad, None)


def test_an_infinite_alpha_takes_inf_or_nan_but_not_a_finite_value() -> None:
    msg, snaps, want = _gemv_case(math.inf)
    assert not np.isfinite(want).any()
    nan = np.full(4, np.nan, np.float32)  # cuBLAS's order of operations may give NaN here
    assert oracles.check_message(msg, snaps, lambda ref: nan, None)
    finite = nan.copy()
    finite[1] = 3.0
    with pytest.raises(oracles.Mismatch):
        oracles.check_message(msg, snaps, lambda ref: finite, None)


def test_empty_is_checked_for_shape_and_dtype_only() -> None:
    """``empty``'s contents are undefined, the pool's as NumPy's: whatever they hold passes,
    a wrong shape or dtype does not."""
    import fuzz_arrays

    ref = fuzz_arrays._reference("empty", [(3, 5)], {"dtype": np.float32})
    held = np.full((3, 5), np.nan, np.float32)  # what a reused block may hold
    fuzz_arrays._compare("empty", held, ref, False, 1)
    for wrong in (np.zeros((5, 3), np.float32), np.zeros((3, 5), np.float64)):
        with pytest.raises(oracles.Mismatch):
            fuzz_arrays._compare("empty", wrong, ref, False, 1)


def test_a_narrower_mixed_kind_answer_is_compared_in_its_own_type() -> None:
    """float32 ** int32 answers float32 here (NumPy: float64): a float64 value too large for
    float32 is an infinity there, and a wrong finite value still fails."""
    import fuzz_arrays

    ref = np.array([1.6e60, 2.5], np.float64)
    fuzz_arrays._compare("pow", np.array([np.inf, 2.5], np.float32), ref, True, 2)
    for wrong in (np.array([np.inf, 2.6], np.float32), np.array([3.0e38, 2.5], np.float32)):
        with pytest.raises(oracles.Mismatch):
            fuzz_arrays._compare("pow", wrong, ref, True, 2)


def test_clip_is_compared_in_the_dtype_of_x() -> None:
    """clip(float32 x, min=float64 array) answers float32 (the standard: x's dtype; NumPy
    promotes to float64): NumPy's value rounded to float32 passes, a wrong value fails."""
    import fuzz_arrays

    x = np.array([0.1, 0.7, -2.0], np.float32)
    lo = np.array([0.2, 0.25, -1.0 / 3], np.float64)
    right = np.clip(x, lo, None).astype(np.float32)
    assert fuzz_arrays.check_array_call("clip", [x], {"min": lo}, right, {})
    with pytest.raises(oracles.Mismatch):
        fuzz_arrays.check_array_call("clip", [x], {"min": lo}, right + np.float32(0.01), {})


def test_floor_divide_of_an_infinity_is_the_standards() -> None:
    """inf // 2.0: the standard's preferred floor(inf / 2.0) = inf (NumPy: NaN) passes; NaN
    there fails, as does a wrong finite quotient."""
    import fuzz_arrays

    x2 = np.array([2.0, -4.0, 0.5], np.float64)
    right = np.array([np.inf, -np.inf, np.inf])
    assert fuzz_arrays.check_array_call("floor_divide", [np.inf, x2], {}, right, {})
    for wrong in (np.full(3, np.nan), np.array([np.inf, -np.inf, 3.0])):
        with pytest.raises(oracles.Mismatch):
            fuzz_arrays.check_array_call("floor_divide", [np.inf, x2], {}, wrong, {})
    finite = np.array([7.0, 9.0], np.float64)
    assert fuzz_arrays.check_array_call("floor_divide", [finite, 2.0], {},
                                        np.array([3.0, 4.0]), {})


def test_a_posted_field_of_the_wrong_kind_is_named() -> None:
    """A built message whose checks let a value of another kind through (a str where an int
    is annotated: ctypes refuses it only on the GPU) is reported by type and field; the
    messages it carries are looked into; a well-built message has nothing to report."""
    from gpumsg.messages import AllocThen

    msg, _, _ = _gemv_case(1.5)
    assert oracles.field_kinds(msg) == []
    object.__setattr__(msg, "incx", "L")
    assert oracles.field_kinds(msg) == ["Gemv.incx='L'"]
    object.__setattr__(msg, "incx", True)
    assert oracles.field_kinds(msg) == ["Gemv.incx=True"]
    out = BufRef(1, 9, 0, "f32", (4,), "C", 16)
    wrapped = AllocThen.__new__(AllocThen)
    object.__setattr__(wrapped, "out", out)
    object.__setattr__(wrapped, "then", msg)
    assert oracles.field_kinds(wrapped) == ["Gemv.incx=True"]


def test_an_entry_that_cancels_is_held_to_its_terms_sizes() -> None:
    """C = alpha A^T B + beta C for one entry that cancels to near zero (a fuzz draw: k = 2,
    beta = -0.82): float32 rounding of the terms is a large error relative to the entry, and
    passes; an error of a percent of the terms does not."""
    from gpumsg.messages import Sgemm

    a = np.array([0.75, -0.5], np.float32)
    b = np.array([0.5, 0.25], np.float32)
    alpha, beta = 0.39299390874762796, -0.8222815004206412
    terms = alpha * float(np.dot(a.astype(np.float64), b))
    c = np.array([terms / -beta * (1 + 1e-5)], np.float32)  # beta * c cancels alpha a.b
    refs = [BufRef(1, i, 0, "f32", shape, "F", 4 * int(np.prod(shape)))
            for i, shape in ((1, (2, 1)), (2, (2, 1)), (3, (1, 1)))]
    msg = Sgemm(refs[0], refs[1], refs[2], 1, 1, 2, alpha=alpha, beta=beta, transa="T",
                lda=2, ldb=2, ldc=1)
    exact = terms + beta * float(c[0])
    rounded = np.float32(np.float32(alpha) * np.float32(np.dot(a, b)) + np.float32(beta) * c[0])
    assert abs(float(rounded) - exact) > 1e-6 * abs(exact)  # far off relative to the entry
    snaps = {1: a, 2: b, 3: c}
    assert oracles.check_message(msg, snaps, lambda ref: np.array([rounded]), None)
    with pytest.raises(oracles.Mismatch):
        oracles.check_message(msg, snaps, lambda ref: np.array([exact + 0.01 * terms],
                                                                np.float32), None)
