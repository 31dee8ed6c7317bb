"""The complex elementary functions of the generated kernels: the standard's special cases
(C99 Annex G: infinite, NaN and signed-zero parts) and their accuracy on finite values.

The device functions are C text (``gpumsg.array_api._expr.PRELUDE``). Built for the host with
g++ (``prelude_host``), they are checked here without a GPU: on a grid of special parts against
the simulator's NumPy functions (the two backends must agree, zero signs included), and on
finite values from 1e-300 to 1e300 against mpmath at high precision. The same grid then runs
through ``gpumsg.array_api`` on each backend.
"""

from __future__ import annotations

import numpy as np
import prelude_host as host
import pytest

from gpumsg.array_api._expr import FUNCTIONS

INF, NAN = np.inf, np.nan
#: the parts of the grid: every special value the standard names, and finite ones of each size
_PARTS = [0.0, -0.0, INF, -INF, NAN, 1.0, -1.0, 0.5, -2.5, 2.0, 1e-30, -1e30]
_UNIT = {np.complex64: 2.0 ** -24, np.complex128: 2.0 ** -53}
#: host libm's functions are within 1 ulp, CUDA's within 2 (float) to 4 (some float32 ones)
_ULPS = 16


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    if host.GXX is None:
        pytest.skip("g++ is not installed: the kernels' C prelude cannot be built for the host")
    return host.build(str(tmp_path_factory.mktemp("prelude")))


def _grid(dtype) -> np.ndarray:
    re = np.array(_PARTS)
    z = np.empty((len(re), len(re)), dtype)
    z.real = re[:, None]  # parts set one by one: arithmetic would lose the zeros' signs
    z.imag = re[None, :]
    return z.ravel()


def _special(z: np.ndarray) -> np.ndarray:
    """Elements with a zero, infinite or NaN part: their results are exact in the standard."""
    return ~(np.isfinite(z.real) & np.isfinite(z.imag)) | (z.real == 0) | (z.imag == 0)


def _mismatches(z: np.ndarray, got: np.ndarray, ref: np.ndarray, unit: float) -> list[str]:
    """Where ``got`` differs from ``ref``: NaN, infinities and (for special inputs) zeros and
    their signs exactly; finite parts within _ULPS units of roundoff of |ref|."""
    got = np.asarray(got).astype(np.complex128)
    ref = np.asarray(ref).astype(np.complex128)
    special = _special(z)
    bad = []
    for i in range(z.size):
        scale = np.hypot(*(p if np.isfinite(p) else 0.0 for p in (ref[i].real, ref[i].imag)))
        for g, r in ((got[i].real, ref[i].real), (got[i].imag, ref[i].imag)):
            if np.isnan(r) or np.isnan(g):
                ok = np.isnan(r) and np.isnan(g)
            elif np.isinf(r) or np.isinf(g):
                ok = g == r
            elif special[i] and (r == 0 or g == 0):
                ok = g == r and np.signbit(g) == np.signbit(r)
            else:
                ok = abs(g - r) <= _ULPS * unit * scale
            if not ok:
                bad.append(f"{complex(z[i])} -> {complex(got[i])}, expected {complex(ref[i])}")
                break
    return bad


def _reference(fn: str, z: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        return np.asarray(FUNCTIONS[fn](z))


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128], ids=["c64", "c128"])
@pytest.mark.parametrize("fn", host.COMPLEX_UNARY + ("abs",))
def test_special_parts_match_the_simulator(lib, fn: str, dtype) -> None:
    z = _grid(dtype)
    got = host.call_complex(lib, fn, z)
    bad = _mismatches(z, got, _reference(fn, z), _UNIT[dtype])
    assert not bad, f"{fn}: {len(bad)} of {z.size}:\n" + "\n".join(bad[:20])


#: rows of the standard's special-case lists (x + yj -> result), checked word for word
_STANDARD = [
    ("acos", (0.0, 0.0), (np.pi / 2, -0.0)), ("acos", (-0.0, NAN), (np.pi / 2, NAN)),
    ("acos", (-INF, 1.0), (np.pi, -INF)), ("acos", (INF, INF), (np.pi / 4, -INF)),
    ("acos", (NAN, INF), (NAN, -INF)), ("acosh", (-0.0, 0.0), (0.0, np.pi / 2)),
    ("acosh", (-INF, INF), (INF, 3 * np.pi / 4)), ("acosh", (INF, NAN), (INF, NAN)),
    ("asinh", (INF, 2.0), (INF, 0.0)), ("asinh", (2.0, INF), (INF, np.pi / 2)),
    ("asinh", (NAN, 0.0), (NAN, 0.0)), ("atanh", (1.0, 0.0), (INF, 0.0)),
    ("atanh", (0.0, NAN), (0.0, NAN)), ("atanh", (INF, 3.0), (0.0, np.pi / 2)),
    ("atanh", (INF, NAN), (0.0, NAN)), ("sinh", (INF, 0.0), (INF, 0.0)),
    ("sinh", (NAN, 0.0), (NAN, 0.0)), ("sinh", (2.0, INF), (NAN, NAN)),
    ("cosh", (0.0, 0.0), (1.0, 0.0)), ("cosh", (INF, 0.0), (INF, 0.0)),
    ("cosh", (NAN, 2.0), (NAN, NAN)), ("tanh", (0.0, INF), (0.0, NAN)),
    ("tanh", (INF, 2.0), (1.0, 0.0)), ("tanh", (NAN, 0.0), (NAN, 0.0)),
    ("exp", (-0.0, 0.0), (1.0, 0.0)), ("exp", (INF, 0.0), (INF, 0.0)),
    ("exp", (2.0, NAN), (NAN, NAN)), ("exp", (NAN, 0.0), (NAN, 0.0)),
    ("expm1", (-0.0, 0.0), (0.0, 0.0)), ("expm1", (-INF, 0.0), (-1.0, 0.0)),
    ("expm1", (INF, 0.0), (INF, 0.0)), ("log", (-0.0, 0.0), (-INF, np.pi)),
    ("log", (-INF, INF), (INF, 3 * np.pi / 4)), ("log", (NAN, INF), (INF, NAN)),
    ("log1p", (-1.0, 0.0), (-INF, 0.0)), ("log1p", (INF, NAN), (INF, NAN)),
    ("sqrt", (NAN, INF), (INF, INF)), ("sqrt", (-INF, 2.0), (0.0, INF)),
    ("sqrt", (INF, NAN), (INF, NAN)), ("sign", (-0.0, 0.0), (0.0, 0.0)),
    ("sign", (NAN, 1.0), (NAN, NAN)),
]


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128], ids=["c64", "c128"])
def test_rows_of_the_standard(lib, dtype) -> None:
    bad = []
    for fn, (a, b), (ra, rb) in _STANDARD:
        z = np.empty(1, dtype)
        z.real, z.imag = a, b
        want = np.empty(1, dtype)
        want.real, want.imag = ra, rb
        for who, got in (("device", host.call_complex(lib, fn, z)),
                         ("simulator", _reference(fn, z).astype(dtype))):
            bad += [f"{who} {fn}: {m}" for m in _mismatches(z, got, want, _UNIT[dtype])]
    assert not bad, "\n".join(bad)


def test_real_sign_of_zero_is_plus_zero(lib) -> None:
    """The standard: sign(+-0) is 0 (+0, as NumPy's), sign(NaN) is NaN."""
    for dt in (np.float32, np.float64):
        x = np.array([-0.0, 0.0, NAN, -INF, INF, -2.5, 1e-30], dt)
        got = host.call_real(lib, "sign", x)
        ref = np.sign(x)
        np.testing.assert_array_equal(got, ref)
        np.testing.assert_array_equal(np.signbit(got), np.signbit(ref))


def _finite_sample(rng: np.random.Generator, dtype, n: int) -> np.ndarray:
    """Finite values of every size the dtype holds (normal numbers), both signs, and the
    regions where formulas cancel: near 1, near the unit circle, near the axes."""
    e = 300 if dtype == np.complex128 else 36
    mag = 10.0 ** rng.uniform(-e, e, (n, 2)) * rng.choice([-1, 1], (n, 2))
    near1 = np.column_stack([1 + rng.standard_normal(n) * 1e-3, rng.standard_normal(n) * 1e-8])
    angle = rng.uniform(0, 2 * np.pi, n)
    circle = np.column_stack([np.cos(angle), np.sin(angle)]) * (1 + rng.standard_normal((n, 1))
                                                                  * 1e-6)
    axis = np.column_stack([rng.uniform(-3, 3, n), 10.0 ** rng.uniform(-e, 0, n)])
    parts = np.concatenate([mag, rng.standard_normal((n, 2)) * 3, near1, circle, axis])
    z = np.empty(len(parts), dtype)
    z.real, z.imag = parts[:, 0], parts[:, 1]
    return z


_MP = ("exp", "expm1", "log", "log1p", "log2", "log10", "sqrt", "sin", "cos", "tan", "sinh",
       "cosh", "tanh", "asin", "acos", "atan", "asinh", "acosh", "atanh")


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128], ids=["c64", "c128"])
def test_finite_values_against_mpmath(lib, rng, dtype) -> None:
    mpmath = pytest.importorskip("mpmath")
    fns = {"log2": lambda w: mpmath.log(w, 2), "log10": lambda w: mpmath.log(w, 10),
           "asin": mpmath.asin, "acos": mpmath.acos, "atan": mpmath.atan,
           "asinh": mpmath.asinh, "acosh": mpmath.acosh, "atanh": mpmath.atanh}
    z = _finite_sample(rng, dtype, 12)
    info = np.finfo(np.float32 if dtype == np.complex64 else np.float64)
    tiny, big = float(info.tiny), float(info.max)
    unit = _UNIT[dtype]
    bad = []
    with mpmath.workprec(2400):  # enough bits for the cancellations at 1e-300
        for fn in _MP:
            f = fns.get(fn) or getattr(mpmath, fn)
            got = host.call_complex(lib, fn, z).astype(np.complex128)
            for v, g in zip(z, got):
                r = complex(f(mpmath.mpc(float(v.real), float(v.imag))))
                if not np.isfinite(r) or not tiny * 1e3 < abs(r) or \
                        max(abs(r.real), abs(r.imag)) >= big:
                    continue  # the result overflows or underflows the dtype
                err = abs(g - r) / abs(r)
                if not err <= _ULPS * unit:
                    bad.append(f"{fn}({complex(v)}) = {g}, expected {r}: {err / unit:.3g} u")
    assert not bad, f"{len(bad)} inaccurate:\n" + "\n".join(bad[:20])


@pytest.mark.parametrize("dtype", ["complex64", "complex128"])
def test_special_parts_on_each_backend(xp, dtype) -> None:
    """The grid through the array namespace: the GPU's kernels agree with the simulator."""
    dt = np.dtype(dtype)
    z = _grid(dt)
    x = xp.asarray(z)
    bad = []
    for fn in host.COMPLEX_UNARY + ("abs",):
        got = np.asarray(getattr(xp, fn)(x))
        bad += [f"{fn}: {m}" for m in _mismatches(z, got, _reference(fn, z), _UNIT[dt.type])]
    assert not bad, f"{len(bad)} mismatches:\n" + "\n".join(bad[:30])


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128], ids=["c64", "c128"])
def test_pow_matches_the_simulator(lib, dtype) -> None:
    """Small integer exponents by repeated products (z**1 is z, as NumPy's), a zero base gives
    0 for a positive real part of the exponent, else exp(b log a)."""
    a = _grid(dtype)
    exps = np.array([0, 1, 2, 3, -1, -2, 7, 0.5, 2.5 + 1j, 1j, -1.5, INF, NAN], dtype)
    aa, bb = np.repeat(a, exps.size), np.tile(exps, a.size)
    got = host.call_complex_pow(lib, aa, bb)
    with np.errstate(all="ignore"):
        ref = np.asarray(FUNCTIONS["pow"](aa, bb))
    # a power's rounding error grows with |b log a|: the tolerance too, for finite values
    bad = _mismatches(aa, got, ref, _UNIT[dtype] * 8)
    assert not bad, f"{len(bad)} of {aa.size}:\n" + "\n".join(bad[:20])


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128], ids=["c64", "c128"])
def test_division_matches_numpy(lib, dtype) -> None:
    """Smith's method, as NumPy's: the same values and zero signs, a zero divisor included."""
    z = _grid(dtype)
    aa, bb = np.repeat(z, z.size), np.tile(z, z.size)
    got = host.call_complex_pow(lib, aa, bb, "divide")
    with np.errstate(all="ignore"):
        ref = aa / bb
    bad = _mismatches(aa, got, ref, _UNIT[dtype])
    assert not bad, f"{len(bad)} of {aa.size}:\n" + "\n".join(bad[:20])
