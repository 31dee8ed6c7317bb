"""cumulative_sum and cumulative_prod (a single-pass scan: each tile looks back over the tiles
before it in its row) against NumPy: rows shorter and longer than a tile, rows of many tiles
(look-backs over several windows of 32), every axis, include_initial, NaN and infinities,
integer wrap-around; every scan kernel compiles."""

from __future__ import annotations

import numpy as np
import pytest
from array_helpers import FLOAT_TOL, nvrtc_compile_program, random_values

import gpumsg.array_api as xpm
from gpumsg.array_api._scan import TILE


def _ref(h: np.ndarray, axis: int, dt: np.dtype, prod: bool, initial: bool) -> np.ndarray:
    wide = np.complex128 if dt.kind == "c" else (np.float64 if dt.kind == "f" or
                                                dt.name == "bfloat16" else dt)
    with np.errstate(all="ignore"):
        r = (np.cumprod if prod else np.cumsum)(h.astype(wide), axis=axis)
    if initial:
        first = np.full_like(r.take([0], axis=axis), 1 if prod else 0)
        r = np.concatenate([first, r], axis=axis)
    return r


@pytest.mark.parametrize("dtype", ["bool", "int8", "uint16", "int32", "int64", "float16",
                                   "float32", "float64", "complex64"])
@pytest.mark.parametrize("shape,axis", [((3, 37), 1), ((2 * TILE + 77,), 0),
                                        ((TILE + 5, 3), 0), ((2, 3, 4), 1)])
def test_cumulative_sum(xp, rng, dtype, shape, axis) -> None:
    dt = np.dtype(getattr(xpm, dtype))
    h = random_values(rng, shape, dt)
    x = xp.asarray(h)
    for initial in (False, True):
        got = xp.cumulative_sum(x, axis=axis, include_initial=initial)
        want_dt = {"b": np.int64, "i": np.int64, "u": np.uint64}.get(dt.kind, dt)
        assert got.dtype == want_dt
        ref = _ref(h, axis, dt, False, initial)
        g = np.asarray(got)
        if dt.kind in "biu":
            np.testing.assert_array_equal(g, ref.astype(want_dt))  # wraps as NumPy's
        else:
            # a running sum's error grows with its length: compare against the sum of |x|
            scale = np.cumsum(np.abs(np.where(np.isfinite(h), h, 0)).astype(np.float64),
                              axis=axis)
            if initial:
                scale = np.concatenate([np.zeros_like(scale.take([0], axis=axis)), scale],
                                       axis=axis)
            parts = ((g.real, ref.real), (g.imag, ref.imag)) if dt.kind == "c" else ((g, ref),)
            for gp, rp in parts:
                _close(gp, rp, scale, FLOAT_TOL[dtype] * 4)


def _close(g: np.ndarray, ref: np.ndarray, scale: np.ndarray, tol: float) -> None:
    fin = np.isfinite(ref)
    np.testing.assert_array_equal(np.isnan(g), np.isnan(ref))
    np.testing.assert_array_equal(g[~fin & ~np.isnan(ref)], ref[~fin & ~np.isnan(ref)])
    assert np.all(np.abs(g[fin] - ref[fin]) <= tol * (scale[fin] + 1))


@pytest.mark.parametrize("dtype", ["int16", "uint32", "float64", "complex128"])
def test_cumulative_prod(xp, rng, dtype) -> None:
    dt = np.dtype(getattr(xpm, dtype))
    n = TILE + 300
    if dt.kind in "iu":
        h = rng.integers(1, 4, n).astype(dt)  # products that wrap around
    else:
        h = (1 + 0.01 * rng.standard_normal(n)).astype(dt)
        h[[5, 2000]] = [np.inf, np.nan]
    x = xp.asarray(h)
    got = np.asarray(xp.cumulative_prod(x, include_initial=True))
    ref = _ref(h, 0, dt, True, True)
    if dt.kind in "iu":
        np.testing.assert_array_equal(got, ref.astype(got.dtype))
    else:
        np.testing.assert_allclose(got, ref, rtol=1e-9)
    h2 = random_values(rng, (5, 7), np.float32)
    with np.errstate(invalid="ignore"):  # inf * 0 among the specials
        ref2 = np.cumprod(h2, axis=0)
    np.testing.assert_allclose(np.asarray(xp.cumulative_prod(xp.asarray(h2), axis=0)), ref2,
                               rtol=1e-5)


def test_cumulative_edges(xp, rng) -> None:
    h = rng.standard_normal((3, 0))
    x = xp.asarray(h)
    assert xp.cumulative_sum(x, axis=1).shape == (3, 0)
    np.testing.assert_array_equal(np.asarray(xp.cumulative_sum(x, axis=1, include_initial=True)),
                                  np.zeros((3, 1)))
    with pytest.raises(ValueError):
        xp.cumulative_sum(xp.asarray(rng.standard_normal((2, 2))))
    with pytest.raises(ValueError):
        xp.cumulative_sum(xp.asarray(np.float64(1.0)))
    with pytest.raises(TypeError):
        xp.cumulative_sum(xp.asarray(np.ones(3, np.complex64)), dtype=xp.float32)
    big = np.full(5, np.iinfo(np.int64).max, np.int64)
    np.testing.assert_array_equal(np.asarray(xp.cumulative_sum(xp.asarray(big))),
                                  np.cumsum(big))
    s = xp.asarray(rng.standard_normal((4, 6)))[:, ::2]  # a strided view
    np.testing.assert_allclose(np.asarray(xp.cumulative_sum(s, axis=1)),
                               np.cumsum(np.asarray(s), axis=1), rtol=1e-12)


@pytest.mark.parametrize("dtype", ["int32", "float32", "complex128"])
def test_rows_of_many_tiles(xp, rng, dtype) -> None:
    """Three rows of 70 tiles and a bit: each tile's look-back crosses up to three windows of
    32 tiles, and stops at its own row's first tile, whatever ran before it."""
    dt = np.dtype(getattr(xpm, dtype))
    n = 70 * TILE + 13
    if dt.kind == "i":
        h = rng.integers(-1000, 1000, (3, n)).astype(dt)
    else:
        h = rng.standard_normal((3, n)).astype(dt)
        if dt.kind == "c":
            h = h + 1j * rng.standard_normal((3, n))
    for initial in (False, True):
        got = np.asarray(xp.cumulative_sum(xp.asarray(h), axis=1, include_initial=initial))
        ref = _ref(h, 1, dt, False, initial)
        if dt.kind == "i":
            np.testing.assert_array_equal(got, ref.astype(np.int64))
            continue
        scale = np.cumsum(np.abs(h).astype(np.float64), axis=1)
        if initial:
            scale = np.concatenate([np.zeros((3, 1)), scale], axis=1)
        parts = ((got.real, ref.real), (got.imag, ref.imag)) if dt.kind == "c" else ((got, ref),)
        for gp, rp in parts:
            _close(gp, rp, scale, FLOAT_TOL[dtype] * 4)


def test_every_scan_kernel_compiles() -> None:
    """The scan kernel of every input, accumulator and output type, through NVRTC with the
    CCCL headers (no GPU needed; skipped where either is missing)."""
    from gpumsg.array_api import _scan
    from gpumsg.array_api._cub import include_dir
    from gpumsg.array_api._reductions import _acc

    compile_program = nvrtc_compile_program()
    inc = include_dir()
    if inc is None:
        pytest.skip("the CCCL headers are not installed here")
    kernels = {}
    for name in ("bool", "int8", "uint16", "int64", "float16", "bfloat16", "float32",
                 "complex64", "complex128"):
        dt = np.dtype(getattr(xpm, name))
        wide = {"b": np.dtype(np.int64), "i": np.dtype(np.int64),
                "u": np.dtype(np.uint64)}.get(dt.kind, dt)
        for op in ("sum", "prod"):
            for out in {dt, wide}:
                kname, src, _ = _scan._render(op, dt, _acc(out), out)
                kernels[kname] = src
    for kname, src in kernels.items():
        prog = compile_program(src, kname, "sm_90", (f"-I{inc}", "-std=c++17",
                                                     "-default-device"))
        assert prog.image
