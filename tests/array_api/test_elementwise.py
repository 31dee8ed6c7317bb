"""Every element-wise function of the standard against NumPy, for every dtype it takes, on
random inputs with the special values (NaN, +-inf, +-0, integer extremes) mixed in."""

from __future__ import annotations

import numpy as np
import pytest
from array_helpers import ALL_DTYPES, FLOAT_TOL, random_values

import gpumsg.array_api as xpm
from gpumsg.array_api import _dtypes as D
from gpumsg.array_api._elementwise import TABLE

#: the NumPy function each element-wise function is checked against
REF = {
    "abs": np.abs, "acos": np.arccos, "acosh": np.arccosh, "asin": np.arcsin,
    "asinh": np.arcsinh, "atan": np.arctan, "atanh": np.arctanh, "cos": np.cos, "cosh": np.cosh,
    "sin": np.sin, "sinh": np.sinh, "tan": np.tan, "tanh": np.tanh, "exp": np.exp,
    "expm1": np.expm1, "log": np.log, "log1p": np.log1p, "log2": np.log2, "log10": np.log10,
    "sqrt": np.sqrt, "square": np.square, "ceil": np.ceil, "floor": np.floor,
    "trunc": np.trunc, "round": np.round, "sign": np.sign, "signbit": np.signbit,
    "isnan": np.isnan, "isinf": np.isinf, "isfinite": np.isfinite, "negative": np.negative,
    "positive": np.positive, "reciprocal": np.reciprocal, "conj": np.conj, "real": np.real,
    "imag": np.imag, "bitwise_invert": np.invert, "logical_not": np.logical_not,
    "add": np.add, "subtract": np.subtract, "multiply": np.multiply, "divide": np.divide,
    "floor_divide": np.floor_divide, "remainder": np.remainder, "pow": np.power,
    "atan2": np.arctan2, "hypot": np.hypot, "copysign": np.copysign,
    "nextafter": np.nextafter, "logaddexp": np.logaddexp, "maximum": np.maximum,
    "minimum": np.minimum, "equal": np.equal, "not_equal": np.not_equal, "less": np.less,
    "less_equal": np.less_equal, "greater": np.greater, "greater_equal": np.greater_equal,
    "logical_and": np.logical_and, "logical_or": np.logical_or,
    "logical_xor": np.logical_xor, "bitwise_and": np.bitwise_and,
    "bitwise_or": np.bitwise_or, "bitwise_xor": np.bitwise_xor,
    "bitwise_left_shift": np.left_shift, "bitwise_right_shift": np.right_shift,
}
#: complex functions whose special cases (infinite/NaN parts) the device formulas do not
#: follow C99 Annex G for: checked on finite inputs only
_COMPLEX_FINITE = {"acos", "acosh", "asin", "asinh", "atan", "atanh", "cos", "cosh", "sin",
                   "sinh", "tan", "tanh", "exp", "expm1", "log", "log1p", "log2", "log10",
                   "sqrt", "pow", "divide", "reciprocal", "sign", "multiply", "square"}


def _cases() -> list:
    out = []
    for name, f in TABLE.items():
        for dt in ALL_DTYPES:
            if D.kind_of(np.dtype(D.check_dtype(getattr(xpm, dt)))) in f.kinds:
                out.append((name, dt))
    return out


def _inputs(rng, name: str, dt: str, nin: int, shape=(7, 9)) -> list[np.ndarray]:
    dtype = getattr(xpm, dt)
    kind = D.kind_of(dtype)
    specials = not (kind == "c" and name in _COMPLEX_FINITE)
    xs = [random_values(rng, shape, dtype, specials) for _ in range(nin)]
    if kind in "iu":
        if name in ("floor_divide", "remainder"):
            xs[1][xs[1] == 0] = 1  # integer division by zero is unspecified
        if name in ("bitwise_left_shift", "bitwise_right_shift"):
            xs[1] = rng.integers(0, dtype.itemsize * 8 + 2, shape).astype(dtype)
        if name == "pow":
            xs[1] = rng.integers(0, 6, shape).astype(dtype)
    return xs


def _reference(name: str, xs: list[np.ndarray], out_dtype: np.dtype) -> np.ndarray:
    # compute in float64/complex128 for half types (NumPy has no bfloat16 math)
    wide = [x.astype(np.float64) if x.dtype in (D.float16, D.bfloat16) else x for x in xs]
    with np.errstate(all="ignore"):
        ref = REF[name](*wide)
    if name == "floor_divide" and wide[0].dtype.kind == "f":
        # the standard, unlike NumPy: a zero or infinite operand gives floor(x1 / x2)
        a, b = wide
        with np.errstate(all="ignore"):
            ref = np.where((b == 0) | np.isinf(a) | np.isinf(b), np.floor(a / b), ref)
    if name == "divide" and xs[0].dtype.kind in "iu":
        ref = np.divide(*(x.astype(np.float64) for x in xs))
    return np.asarray(ref).astype(out_dtype)


def check_close(got: np.ndarray, ref: np.ndarray) -> None:
    assert got.dtype == ref.dtype, (got.dtype, ref.dtype)
    assert got.shape == ref.shape
    if ref.dtype.kind in "fcV" or ref.dtype in (D.float16, D.bfloat16):
        tol = FLOAT_TOL[ref.dtype.name]
        g = got.astype(np.complex128 if ref.dtype.kind == "c" else np.float64)
        r = ref.astype(g.dtype)
        np.testing.assert_allclose(g, r, rtol=tol, atol=tol, equal_nan=True)
    else:
        np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize("name,dt", _cases())
def test_matches_numpy(xp, rng, name: str, dt: str) -> None:
    f = TABLE[name]
    xs = _inputs(rng, name, dt, f.nin)
    arrays = [xp.asarray(x) for x in xs]
    got = getattr(xp, name)(*arrays)
    ref = _reference(name, xs, got.dtype)
    check_close(np.asarray(got), ref)


def test_broadcast_and_scalars(xp, rng) -> None:
    a = random_values(rng, (4, 1, 5), np.float32, False)
    b = random_values(rng, (3, 1), np.float32, False)
    x, y = xp.asarray(a), xp.asarray(b)
    check_close(np.asarray(x * y + 2.5), (a * b + np.float32(2.5)).astype(np.float32))
    check_close(np.asarray(3 - x), (np.float32(3) - a))
    check_close(np.asarray(2 ** x), np.power(np.float32(2), a))
    i = xp.asarray(np.array([1, -7, 127], np.int8))
    assert (i + 1).dtype == xp.int8
    np.testing.assert_array_equal(np.asarray(i + 1), np.array([2, -6, -128], np.int8))
    with pytest.raises(OverflowError):
        i + 1000


def test_views_as_operands(xp, rng) -> None:
    a = random_values(rng, (6, 8), np.float64, False)
    x = xp.asarray(a)
    got = x[1:5:2, ::-3] + x.T[::-3, 1:5:2].T
    check_close(np.asarray(got), a[1:5:2, ::-3] + a.T[::-3, 1:5:2].T)


def test_division_semantics(xp) -> None:
    """floor_divide and remainder follow Python's signs; float division by zero gives inf/NaN."""
    a = np.array([7, -7, 7, -7, 0], np.int32)
    b = np.array([2, 2, -2, -2, 3], np.int32)
    x, y = xp.asarray(a), xp.asarray(b)
    np.testing.assert_array_equal(np.asarray(x // y), a // b)
    np.testing.assert_array_equal(np.asarray(x % y), a % b)
    f = np.array([1.0, -1.0, 0.0, 5.5, -5.5])
    g = np.array([0.0, 0.0, 0.0, -2.0, 2.0])
    with np.errstate(all="ignore"):
        check_close(np.asarray(xp.asarray(f) / xp.asarray(g)), f / g)
        check_close(np.asarray(xp.asarray(f) // xp.asarray(g)), f // g)
        check_close(np.asarray(xp.asarray(f) % xp.asarray(g)), f % g)
    big = np.array([np.iinfo(np.int64).min], np.int64)
    np.testing.assert_array_equal(np.asarray(xp.asarray(big) // -1), big)


def test_promotion(xp) -> None:
    x8 = xp.asarray(np.array([1], np.int8))
    u8 = xp.asarray(np.array([1], np.uint8))
    f4 = xp.asarray(np.array([1], np.float32))
    c8 = xp.asarray(np.array([1], np.complex64))
    assert (x8 + u8).dtype == xp.int16
    assert (f4 + c8).dtype == xp.complex64
    assert (f4 + xp.asarray(np.array([1.0]))).dtype == xp.float64
    assert (f4 + 1j).dtype == xp.complex64
    with pytest.raises(TypeError):
        xp.asarray(np.array([1], np.uint64)) + xp.asarray(np.array([1], np.int64))
    with pytest.raises(TypeError):
        xp.asarray([True]) + xp.asarray([1])
    with pytest.raises(TypeError):
        xp.sin(xp.asarray([1, 2]))


def test_in_place(xp, rng) -> None:
    a = random_values(rng, (5, 4), np.float32, False)
    x = xp.asarray(a)
    v = x[1:3]
    x += 1.5
    x[1:3] *= 2
    ref = a + np.float32(1.5)
    ref[1:3] *= 2
    check_close(np.asarray(x), ref)
    check_close(np.asarray(v), ref[1:3])  # the view sees the writes
    with pytest.raises(TypeError):
        i = xp.asarray(np.array([1, 2], np.int32))
        i += 1.5


def test_where_clip_astype(xp, rng) -> None:
    a = random_values(rng, (20,), np.float64)
    b = random_values(rng, (20,), np.float64, False)
    x, y = xp.asarray(a), xp.asarray(b)
    check_close(np.asarray(xp.where(x > y, x, y)), np.where(a > b, a, b))
    check_close(np.asarray(xp.where(x > 0, x, 0.0)), np.where(a > 0, a, 0.0))
    check_close(np.asarray(xp.clip(y, -0.5, 0.75)), np.clip(b, -0.5, 0.75))
    check_close(np.asarray(xp.clip(y, max=x)), np.minimum(b, a))
    for dt in ALL_DTYPES:
        target = getattr(xp, dt)
        if D.kind_of(target) == "c":
            continue
        src = random_values(rng, (9,), np.float32, False) * 10
        if D.kind_of(target) == "u":  # a negative float cast to unsigned is undefined (C, the
            src = np.abs(src)           # standard): only representable values are compared
        got = xp.astype(xp.asarray(src), target)
        with np.errstate(all="ignore"):
            check_close(np.asarray(got), src.astype(target))


def test_complex_tanh_at_infinity(xp) -> None:
    """The standard: tanh(+-inf + iy) = +-1 + 0j, the zero with y's sign (finite y)."""
    z = np.empty(3, np.complex128)
    z.real = [np.inf, -np.inf, np.inf]
    z.imag = [2.0, -3.0, -0.0]
    got = np.asarray(xp.tanh(xp.asarray(z)))
    np.testing.assert_array_equal(got.real, [1.0, -1.0, 1.0])
    np.testing.assert_array_equal(np.signbit(got.imag), [False, True, True])
    assert (got.imag == 0).all()
