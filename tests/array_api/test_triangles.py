"""eye, tril and triu: one generated kernel each, against NumPy for every dtype, diagonal
offsets inside and outside the matrix, non-square and stacked inputs and strided views."""

from __future__ import annotations

import numpy as np
import pytest
from array_helpers import ALL_DTYPES, random_values

import gpumsg.array_api as xpm
from gpumsg.messages import Message
from gpumsg.messages.device import AllocThen, CopyFromHost

_OFFSETS = (-7, -2, -1, 0, 1, 3, 9)


def _uploads(msgs: list) -> list:
    """The messages among ``msgs`` that copy host data in (alone or after an allocation)."""
    return [m for m in msgs if isinstance(m, CopyFromHost) or
            (isinstance(m, AllocThen) and isinstance(m.then, CopyFromHost))]


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_eye_every_dtype(xp, dtype) -> None:
    dt = getattr(xpm, dtype)
    for rows, cols in ((4, 4), (3, 6), (6, 2), (1, 1)):
        for k in _OFFSETS:
            got = np.asarray(xp.eye(rows, cols, k=k, dtype=dt))
            ref = np.eye(rows, cols, k=k).astype(dt)
            assert got.dtype == ref.dtype and got.shape == ref.shape
            assert got.tobytes() == ref.tobytes(), (rows, cols, k)
    assert np.asarray(xp.eye(5)).tobytes() == np.eye(5).tobytes()
    assert xp.eye(0, 3).shape == (0, 3) and xp.eye(3, 0).shape == (3, 0)


def test_eye_is_one_launch_and_no_upload(xp, dev, posted) -> None:
    from gpumsg.messages.nvrtc import Launch

    xp.eye(3, 2, k=1)  # compiles the kernel once
    msgs = posted(dev, Message)
    out = xp.eye(300, 200, k=-5, dtype=xp.float32)
    launches = [m for m in msgs if isinstance(m, Launch) or
                (isinstance(m, AllocThen) and isinstance(m.then, Launch))]
    assert len(launches) == 1 and not _uploads(msgs)
    np.testing.assert_array_equal(np.asarray(out), np.eye(300, 200, k=-5, dtype=np.float32))


def test_eye_refuses_bad_sizes(xp) -> None:
    with pytest.raises(ValueError):
        xp.eye(-1)
    with pytest.raises(TypeError):
        xp.eye(2.5)
    with pytest.raises(TypeError):
        xp.eye(3, k=1.0)


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_tril_triu_every_dtype(xp, rng, dtype) -> None:
    dt = getattr(xpm, dtype)
    for shape in ((5, 5), (3, 6), (6, 2), (2, 3, 4, 5)):
        h = random_values(rng, shape, dt)
        x = xp.asarray(h)
        for k in _OFFSETS:
            for fn, ref_fn in ((xp.tril, np.tril), (xp.triu, np.triu)):
                got = np.asarray(fn(x, k=k))
                ref = ref_fn(h, k=k)
                assert got.dtype == ref.dtype and got.shape == ref.shape
                # bit for bit: NaN payloads and zero signs of the kept part, +0 elsewhere
                assert got.tobytes() == ref.tobytes(), (fn.__name__, shape, k)


def test_tril_triu_of_views(xp, rng) -> None:
    h = random_values(rng, (3, 7, 8), np.complex128, False)
    x = xp.asarray(h)
    views = [(x.mT, np.swapaxes(h, -1, -2)), (x[:, 1::2, ::-3], h[:, 1::2, ::-3]),
             (x[1], h[1]), (x[:, :0, :], h[:, :0, :])]
    for v, hv in views:
        for k in (-1, 0, 2):
            np.testing.assert_array_equal(np.asarray(xp.tril(v, k=k)), np.tril(hv, k=k))
            np.testing.assert_array_equal(np.asarray(xp.triu(v, k=k)), np.triu(hv, k=k))


def test_tril_is_one_launch_and_no_upload(xp, dev, posted, rng) -> None:
    from gpumsg.messages.nvrtc import Launch

    x = xp.asarray(random_values(rng, (4, 64, 48), np.float32, False))
    xp.tril(x, k=1)  # compiles the kernel once
    msgs = posted(dev, Message)
    out = xp.triu(xp.tril(x, k=3), k=-2)
    launches = [m for m in msgs if isinstance(m, Launch) or
                (isinstance(m, AllocThen) and isinstance(m.then, Launch))]
    assert len(launches) == 2 and not _uploads(msgs)
    h = np.asarray(x)
    np.testing.assert_array_equal(np.asarray(out), np.triu(np.tril(h, k=3), k=-2))


def test_tril_triu_refuse(xp) -> None:
    with pytest.raises(ValueError):
        xp.tril(xp.asarray([1.0, 2.0]))
    with pytest.raises(TypeError):
        xp.triu(np.eye(3))
    with pytest.raises(TypeError):
        xp.triu(xp.eye(3), k=0.5)


# -- the CUDA text, built for the host (one thread walks the grid-stride loop) ---------------
@pytest.mark.parametrize("dtype", ["bool", "int8", "uint16", "float16", "bfloat16", "float32",
                                   "int64", "complex64", "complex128"])
def test_eye_source_on_the_host(folder, dtype) -> None:
    import prelude_host as host

    from gpumsg.array_api._creation import _render_eye

    dt = getattr(xpm, dtype)
    name, src, kinds = _render_eye(dt)
    kernel = host.build_kernel(folder, name, src)
    for rows, cols, k in ((4, 6, 1), (5, 3, -2), (3, 3, 0), (2, 2, 5)):
        out = np.full(rows * cols * dt.itemsize, 0xAB, np.uint8)  # raw storage, garbage
        host.launch_host(kernel, kinds, (rows * cols, out, cols, k))
        ref = np.eye(rows, cols, k=k).astype(dt)
        assert out.tobytes() == ref.tobytes(), (dtype, rows, cols, k)


@pytest.mark.parametrize("lower", [True, False], ids=["tril", "triu"])
@pytest.mark.parametrize("width", [1, 2, 4, 8, 16])
def test_tri_source_on_the_host(folder, rng, lower: bool, width: int) -> None:
    import prelude_host as host

    from gpumsg.array_api._creation import _render_tri

    dt = {1: np.uint8, 2: np.float16, 4: np.float32, 8: np.int64, 16: np.complex128}[width]
    h = random_values(rng, (3, 5, 6), dt)
    for view in (h, np.swapaxes(h, -1, -2)[:, ::-2], h[1]):
        name, src, kinds = _render_tri(width, view.ndim, lower)
        kernel = host.build_kernel(folder, name, src)
        base = h.ravel()
        off = (view.__array_interface__["data"][0] - h.__array_interface__["data"][0]) // width
        strides = tuple(s // width for s in view.strides)
        for k in (-2, 0, 1, 7):
            out = np.zeros(view.size, dt) + dt(1)
            host.launch_host(kernel, kinds, (view.size, out, base, off, k, *view.shape,
                                             *strides))
            ref = (np.tril if lower else np.triu)(view, k=k)
            assert out.tobytes() == np.ascontiguousarray(ref).tobytes(), (view.shape, k)
