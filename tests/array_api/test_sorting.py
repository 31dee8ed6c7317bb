"""sort and argsort (CUB's block radix sort; the simulator's twin) against NumPy's stable sort:
NaN last, -0 equal to +0, ties in their original order, every real dtype, any axis."""

from __future__ import annotations

import numpy as np
import pytest
from array_helpers import random_values

import gpumsg.array_api as xpm
import gpumsg.array_api._sorting  # noqa: F401 (MAX_ROW)

DTYPES = ["bool", "int8", "uint8", "int16", "int32", "uint32", "int64", "uint64", "float16",
          "bfloat16", "float32", "float64"]


def _reference(h: np.ndarray, axis: int, descending: bool) -> np.ndarray:
    """NumPy's stable argsort, descending with ties still in their original order."""
    keys = h.astype(np.float64) if h.dtype.name in ("float16", "bfloat16") else h
    keys = np.moveaxis(keys, axis, -1)
    if not descending:
        order = np.argsort(keys, axis=-1, kind="stable")
    else:
        n = keys.shape[-1]
        order = n - 1 - np.flip(np.argsort(np.flip(keys, -1), axis=-1, kind="stable"), -1)
    return np.moveaxis(order, -1, axis)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("descending", [False, True])
def test_sort_matches_numpy(xp, rng, dtype, descending) -> None:
    dt = np.dtype(getattr(xpm, dtype))
    h = random_values(rng, (3, 37), dt)
    if dt.kind in "iu":
        h = (h % 5).astype(dt)  # many ties
    x = xp.asarray(h)
    for axis in (-1, 0):
        order = _reference(h, axis, descending)
        got = xp.argsort(x, axis=axis, descending=descending)
        assert got.dtype == xp.int64
        np.testing.assert_array_equal(np.asarray(got), order)
        s = np.asarray(xp.sort(x, axis=axis, descending=descending))
        want = np.take_along_axis(h, order, axis=axis)
        assert s.tobytes() == want.tobytes()  # -0 and NaN as they went in


@pytest.mark.parametrize("dtype", ["bool", "int8", "uint16", "int32", "uint64", "float16",
                                   "bfloat16", "float32", "float64"])
@pytest.mark.parametrize("descending", [False, True])
def test_device_wide_sort(xp, rng, dtype, descending) -> None:
    """Rows longer than one block's tile go through the device-wide radix sort: one row (the
    payload is the element's bits), and several rows (sorted by row in the last passes), with a
    partial last tile, on either axis."""
    dt = np.dtype(getattr(xpm, dtype))
    n = xpm._sorting.MAX_ROW + 1 + int(rng.integers(0, 3000))
    h = random_values(rng, (n,), dt)
    if dt.kind in "iu":
        h[: n // 2] = (h[: n // 2] % 7).astype(dt)  # runs of equal keys
    elif dt.kind == "f":
        h[: n // 3] = np.round(h[: n // 3])
    for arr, axis in ((h, -1), (np.stack([h, h[::-1], np.roll(h, 5)]), -1),
                      (np.stack([h, h[::-1]], axis=1), 0)):
        x = xp.asarray(arr)
        order = _reference(arr, axis, descending)
        got = xp.argsort(x, axis=axis, descending=descending)
        np.testing.assert_array_equal(np.asarray(got), order)
        s = np.asarray(xp.sort(x, axis=axis, descending=descending))
        assert s.tobytes() == np.take_along_axis(arr, order, axis=axis).tobytes()


def test_a_million_keys(xp, rng) -> None:
    """Hundreds of tiles: equal keys spread over many tiles keep their order."""
    h = np.round(rng.standard_normal((1 << 20) + 123) * 100).astype(np.float32)
    h[rng.choice(h.size, 1000, replace=False)] = np.nan
    h[rng.choice(h.size, 1000, replace=False)] = -0.0
    x = xp.asarray(h)
    order = np.argsort(h, kind="stable")
    np.testing.assert_array_equal(np.asarray(xp.argsort(x)), order)
    assert np.asarray(xp.sort(x)).tobytes() == h[order].tobytes()


def test_many_long_rows(xp, rng) -> None:
    """More than 256 rows: two digits of row passes."""
    h = rng.integers(-50, 50, size=(300, xpm._sorting.MAX_ROW + 7)).astype(np.int16)
    got = np.asarray(xp.argsort(xp.asarray(h)))
    np.testing.assert_array_equal(got, np.argsort(h, axis=-1, kind="stable"))


def test_sort_edges(xp, rng) -> None:
    h = rng.standard_normal(xpm._sorting.MAX_ROW)
    np.testing.assert_array_equal(np.asarray(xp.sort(xp.asarray(h))), np.sort(h))
    assert xp.sort(xp.asarray(np.zeros((0, 4)))).shape == (0, 4)
    assert xp.argsort(xp.asarray(np.zeros((3, 0)))).shape == (3, 0)
    with pytest.raises(TypeError):
        xp.sort(xp.asarray(np.ones(3, np.complex64)))
    with pytest.raises(ValueError):
        xp.sort(xp.asarray(np.float32(1)))


@pytest.mark.parametrize("dtype", ["int32", "uint8", "float32", "float64"])
def test_searchsorted(xp, rng, dtype) -> None:
    dt = np.dtype(getattr(xpm, dtype))
    base = random_values(rng, (40,), dt)
    if dt.kind in "iu":
        base = (base % 9).astype(dt)
    a = np.sort(base)
    v = random_values(rng, (5, 6), dt)
    if dt.kind in "iu":
        v = (v % 11).astype(dt)
    else:
        v[0, :3] = [np.nan, -0.0, 0.0]
    xa, xv = xp.asarray(a), xp.asarray(v)
    for side in ("left", "right"):
        got = xp.searchsorted(xa, xv, side=side)
        assert got.dtype == xp.int64 and got.shape == v.shape
        np.testing.assert_array_equal(np.asarray(got), np.searchsorted(a, v, side=side))
    rev = xp.asarray(a[::-1].copy())[::-1]  # a strided (negative-stride) view of x1
    np.testing.assert_array_equal(np.asarray(xp.searchsorted(rev, xv)), np.searchsorted(a, v))
    perm = rng.permutation(40)
    got = xp.searchsorted(xp.asarray(a[perm]), xv, sorter=xp.asarray(np.argsort(perm)))
    np.testing.assert_array_equal(np.asarray(got), np.searchsorted(a, v))


def test_simulator_without_cccl_headers(monkeypatch) -> None:
    """Where the CCCL headers are missing, the simulator still sorts (its twin)."""
    import gpumsg
    from gpumsg.array_api import _cub

    monkeypatch.setattr(_cub, "include_dir", lambda: None)
    d = gpumsg.open_device(0, backend="sim")
    try:
        x = xpm.asarray(np.array([3.0, 1.0, 2.0, 1.0]), device=d)
        np.testing.assert_array_equal(np.asarray(xpm.sort(x)), [1.0, 1.0, 2.0, 3.0])
        np.testing.assert_array_equal(np.asarray(xpm.argsort(x, descending=True)), [0, 2, 1, 3])
    finally:
        d.close()


def test_gpu_without_cccl_headers_says_what_to_install(monkeypatch) -> None:
    """Where the CCCL headers are missing a GPU cannot build a CUB kernel: a typed error that
    names the package, raised before anything is compiled or sent."""
    from types import SimpleNamespace

    from gpumsg.array_api import _cub
    from gpumsg.libs._loader import LibraryNotFound

    monkeypatch.setattr(_cub, "include_dir", lambda: None)
    with pytest.raises(LibraryNotFound, match="nvidia-cuda-cccl"):
        _cub.cub_kernel(SimpleNamespace(backend="cuda"), "gm_sort_keys", "", ())


@pytest.mark.parametrize("dtype", ["bool", "int8", "uint64", "float16", "float32",
                                   "complex128"])
@pytest.mark.parametrize("shape", [(9000,), (3, 2000), (2, 3, 5), (0, 4)])
def test_nonzero(xp, rng, dtype, shape) -> None:
    dt = np.dtype(getattr(xpm, dtype))
    h = random_values(rng, shape, dt)
    if h.size:
        h.reshape(-1)[rng.random(h.size) < 0.6] = 0  # zeros and -0 among the values
    got = xp.nonzero(xp.asarray(h))
    ref = np.nonzero(h)
    assert len(got) == len(ref)
    for g, r in zip(got, ref):
        assert g.dtype == xp.int64
        np.testing.assert_array_equal(np.asarray(g), r)
    with pytest.raises(ValueError):
        xp.nonzero(xp.asarray(np.float32(1)))


@pytest.mark.parametrize("dtype", ["int16", "uint8", "float32", "float64", "bool", "complex64",
                                   "complex128"])
@pytest.mark.parametrize("shape", [(6, 7), (3, 2000)])
def test_unique(xp, rng, dtype, shape) -> None:
    """Small and device-wide sorts; complex values in NumPy's order (real part, imaginary
    part, NaN imaginary parts after the rest, then NaN real parts)."""
    dt = np.dtype(getattr(xpm, dtype))
    h = random_values(rng, shape, dt)
    if dt.kind in "iu":
        h = (h % 6).astype(dt)
    elif dt.kind == "f":
        h = np.round(h).astype(dt)  # repeats, with the NaNs, +-inf and +-0 mixed in
    elif dt.kind == "c":
        rounded = np.empty(shape, dt)
        rounded.real, rounded.imag = np.round(h.real / 2), np.round(h.imag / 2)
        h = rounded
        h.reshape(-1)[:4] = [complex(np.nan, 1), complex(1, np.nan), complex(np.nan, np.nan),
                             complex(-0.0, 0.0)]
    x = xp.asarray(h)
    values, index, inverse, counts = np.unique(h, return_index=True, return_inverse=True,
                                               return_counts=True, equal_nan=False)
    got = xp.unique_all(x)
    np.testing.assert_array_equal(np.asarray(got.values), values)
    np.testing.assert_array_equal(np.asarray(got.indices), index)
    np.testing.assert_array_equal(np.asarray(got.inverse_indices), inverse.reshape(h.shape))
    np.testing.assert_array_equal(np.asarray(got.counts), counts)
    np.testing.assert_array_equal(np.asarray(xp.unique_values(x)), values)
    v, c = xp.unique_counts(x)
    np.testing.assert_array_equal(np.asarray(c), counts)
    v, inv = xp.unique_inverse(x)
    np.testing.assert_array_equal(np.asarray(inv), inverse.reshape(h.shape))
    assert xp.unique_values(xp.asarray(np.zeros(0, dt))).shape == (0,)
