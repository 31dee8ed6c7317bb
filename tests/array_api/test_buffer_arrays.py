"""A gpumsg buffer, and the future of one, is an array: operators, indexing, attributes, the
namespace protocol, scalar conversions and NumPy-style methods work on it directly, with the
results of the same operations on ``xp.asarray`` of its data, on both backends."""

from __future__ import annotations

import concurrent.futures as cf

import numpy as np
import pytest
from array_helpers import random_values

import gpumsg
import gpumsg.array_api as xpm
from gpumsg.errors import InvalidMessage
from tests.conftest import run_python
from tests.tolerance import assert_rel, sum_cond


def _both(dev, host):
    """The future of a new buffer holding ``host``, and the buffer itself."""
    fut = dev.to_device(host)
    return fut, fut.result()


@pytest.mark.parametrize("order", ["C", "F"])
def test_attributes_and_protocol(xp, dev, rng, order) -> None:
    h = np.asarray(random_values(rng, (3, 5), np.float32, False), order=order)
    for b in _both(dev, h):
        assert (b.shape, b.dtype, b.ndim, b.size, len(b)) == ((3, 5), np.float32, 2, 15, 3)
        assert b.device is dev
        assert b.__array_namespace__() is xpm
        assert b.__array_namespace__(api_version="2024.12") is xpm
        np.testing.assert_array_equal(np.asarray(b.T), h.T)
        np.testing.assert_array_equal(np.asarray(b.mT), h.T)
        np.testing.assert_array_equal(np.asarray(b[1]), h[1])
        np.testing.assert_array_equal(np.asarray(b[:, -2]), h[:, -2])
        np.testing.assert_array_equal(np.asarray(b[1:, ::2]), h[1:, ::2])
        np.testing.assert_array_equal(np.asarray(b[..., None, 0]), h[..., None, 0])
        rows = list(b)
        assert len(rows) == 3
        np.testing.assert_array_equal(np.asarray(rows[2]), h[2])
        assert b.to_device(dev).device is dev
        assert isinstance(b + 0, xpm.Array)


def test_operators_match_numpy(xp, dev, rng) -> None:
    a = random_values(rng, (4, 6), np.int32, False) % 1000
    c = random_values(rng, (4, 6), np.int32, False) % 7 + 1
    ca = xp.asarray(c)
    for x in _both(dev, a):
        y = dev.to_device(c)
        cases = ((x + y, a + c), (x - y, a - c), (x * y, a * c), (x // y, a // c),
                 (x % y, a % c), (x & y, a & c), (x | y, a | c), (x ^ y, a ^ c),
                 (x << 2, a << 2), (x >> 1, a >> 1), (-x, -a), (+x, a), (~x, ~a),
                 (abs(x), abs(a)), (x < y, a < c), (x <= y, a <= c), (x > y, a > c),
                 (x >= y, a >= c), (x == y, a == c), (x != y, a != c), (5 - x, 5 - a),
                 (2 ** y, 2 ** c), (100 // y, 100 // c), (x + ca, a + c), (ca - x, c - a),
                 (x ** 2, a ** 2), (x == x, np.ones_like(a, bool)))
        for got, ref in cases:
            assert isinstance(got, xpm.Array)
            np.testing.assert_array_equal(np.asarray(got), ref)
        np.testing.assert_allclose(np.asarray(x / y), a / c, rtol=1e-12)


@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("dtype", ["float32", "float64", "complex64"])
def test_float_operators_and_matmul(xp, dev, rng, dtype, order) -> None:
    a = np.asarray(random_values(rng, (5, 4), dtype, False), order=order)
    b = np.asarray(random_values(rng, (4, 3), dtype, False), order=order)
    x, y = dev.to_device(a), dev.to_device(b)
    assert_rel(np.asarray(x @ y), a.astype(np.complex128) @ b, dtype, n=4)
    assert_rel(np.asarray(x.T @ x), a.T.astype(np.complex128) @ a, dtype, n=5)
    assert_rel(np.asarray(xp.asarray(a) @ y), a.astype(np.complex128) @ b, dtype, n=4)
    assert_rel(np.asarray(x * 2.5 - x / 3), a * 2.5 - a / np.asarray(3, a.dtype), dtype, n=2)
    got = x.result() @ y.result()
    assert_rel(np.asarray(got), a.astype(np.complex128) @ b, dtype, n=4)


def test_results_equal_the_array_path(xp, dev, rng) -> None:
    """The same operation on the buffer and on an Array of its data gives the same bits."""
    h = random_values(rng, (6, 7), np.float32, True)
    buf, arr = dev.to_device(h), xp.asarray(h)
    for f in (lambda v: v + v * 3, lambda v: v.sum(axis=0), lambda v: v.T[2:, 1],
              lambda v: xp.exp(v) - v.mean(), lambda v: v.max(axis=1, keepdims=True),
              lambda v: v.astype(xp.float64).std(axis=0, ddof=1)):
        np.testing.assert_array_equal(np.asarray(f(buf)), np.asarray(f(arr)))


def _within_roundings(got: np.ndarray, ref: np.ndarray, terms: list[np.ndarray]) -> None:
    """Each float64 element within a few roundings of the largest of the terms summed into it:
    signed terms may cancel to a small result, whose relative error is then larger (a GPU run
    drew 0.0126 from terms near 4.8, off by one rounding of them: 1.8e-14 of the result)."""
    scale = np.max(np.abs(np.stack(terms)), axis=0)
    np.testing.assert_array_less(np.abs(got - ref), 4 * np.finfo(np.float64).eps * scale + 1e-300)


def test_in_place_operators_keep_the_buffer(xp, dev, rng) -> None:
    h = random_values(rng, (3, 4), np.float64, False)
    d = random_values(rng, (3, 4), np.float64, False)
    fut = dev.to_device(h)
    buf = fut.result()
    same = buf
    buf += 1.5
    assert buf is same and isinstance(buf, gpumsg.GpuBuffer)
    buf *= dev.to_device(d)
    fut -= xp.asarray(d)
    assert isinstance(fut, gpumsg.BufferFuture)
    _within_roundings(np.asarray(buf), (h + 1.5) * d - d, [(h + 1.5) * d, d])
    arr = xp.asarray(h)
    arr += buf  # an Array updated in place from a buffer
    _within_roundings(np.asarray(arr), h + (h + 1.5) * d - d, [h, (h + 1.5) * d, d])


@pytest.mark.parametrize("order", ["C", "F"])
def test_setitem(xp, dev, rng, order) -> None:
    h = np.asarray(random_values(rng, (4, 5), np.float32, False), order=order)
    v = random_values(rng, (2, 5), np.float32, False)
    buf = dev.to_device(h)
    buf[0] = 7.0
    buf[2:] = dev.to_device(v)
    buf[1, ::2] = xp.asarray(v[0, :3])
    ref = h.copy()
    ref[0] = 7.0
    ref[2:] = v
    ref[1, ::2] = v[0, :3]
    got = np.asarray(buf)
    np.testing.assert_array_equal(got, ref)
    assert got.flags[f"{order}_CONTIGUOUS"]  # written in the buffer's own order
    arr = xp.asarray(h)
    arr[1:3] = buf[2:]  # a buffer's view as the value
    ref2 = h.copy()
    ref2[1:3] = v
    np.testing.assert_array_equal(np.asarray(arr), ref2)


def test_buffers_as_indices(xp, dev, rng) -> None:
    h = random_values(rng, (6, 3), np.float64, False)
    idx = np.array([5, 0, 2, 2], np.int64)
    buf, ibuf = dev.to_device(h), dev.to_device(idx)
    np.testing.assert_array_equal(np.asarray(buf[ibuf]), h[idx])
    np.testing.assert_array_equal(np.asarray(buf[ibuf, 1]), h[idx, 1])
    np.testing.assert_array_equal(np.asarray(xp.asarray(h)[ibuf]), h[idx])
    mask = h > 0.25
    np.testing.assert_array_equal(np.asarray(buf[xp.asarray(mask)]), h[mask])
    np.testing.assert_array_equal(np.asarray(buf[buf > 0.25]), h[mask])


def test_scalar_conversions_read_the_value(xp, dev, rng) -> None:
    f = float(random_values(rng, (), np.float64, False))
    i = int(random_values(rng, (), np.int32, False))
    for b in _both(dev, np.array([f])):
        assert float(b) == f and bool(b) is (f != 0) and complex(b) == complex(f)
    for b in _both(dev, np.array([[i]], np.int32)):
        assert int(b) == i and b.__index__() == i and [0, 1, 2, 3][b % 4] == [0, 1, 2, 3][i % 4]
    many = dev.to_device(np.ones(3))
    with pytest.raises(TypeError, match="one element"):
        bool(many)
    with pytest.raises(TypeError, match="one element"):
        float(many)


def test_numpy_reads_a_copy(xp, dev, rng) -> None:
    h = random_values(rng, (4, 3), np.float64, False)
    buf = dev.to_device(h)
    got = np.asarray(buf)
    np.testing.assert_array_equal(got, h)
    np.testing.assert_array_equal(buf.get(), h)
    assert buf.tolist() == h.tolist()
    assert dev.to_device(h[:1, :1]).item() == h[0, 0]
    for obj in (buf, xp.asarray(h)):
        with pytest.raises(ValueError, match="copy"):
            np.asarray(obj, copy=False)


def test_asarray_of_a_buffer_shares_its_memory(xp, dev, rng) -> None:
    h = random_values(rng, (5,), np.float32, False)
    buf = dev.to_device(h).result()
    arr = xp.asarray(buf)
    assert isinstance(arr, xpm.Array) and arr.shape == (5,) and arr.dtype == xp.float32
    assert xp.from_dlpack(buf).shape == (5,)
    arr[0] = 3.0  # written through the array, read through the buffer
    assert float(buf[0]) == 3.0
    buf[1] = -2.0
    assert float(arr[1]) == -2.0
    np.testing.assert_array_equal(np.asarray(xp.asarray(buf, copy=True)), np.asarray(buf))


def test_namespace_functions_take_buffers(xp, dev, rng) -> None:
    a = random_values(rng, (3, 4), np.float64, False)
    b = random_values(rng, (3, 4), np.float64, False)
    x, y = dev.to_device(a), dev.to_device(b).result()
    assert_rel(np.asarray(xp.sum(x)), a.sum(), "f64", n=12, cond=sum_cond(a))
    np.testing.assert_array_equal(np.asarray(xp.add(x, y)), a + b)
    np.testing.assert_array_equal(np.asarray(xp.concat([x, y], axis=1)),
                                  np.concatenate([a, b], 1))
    np.testing.assert_array_equal(np.asarray(xp.stack((x, xp.asarray(b)))), np.stack([a, b]))
    np.testing.assert_array_equal(np.asarray(xp.where(x > y, x, y)), np.maximum(a, b))
    np.testing.assert_array_equal(np.asarray(xp.reshape(y, (4, 3))), b.reshape(4, 3))
    np.testing.assert_array_equal(np.asarray(xp.sort(x, axis=1)), np.sort(a, axis=1))
    np.testing.assert_array_equal(np.asarray(xp.clip(x, min=y)), np.maximum(a, b))
    assert xp.result_type(x, xp.float32) == xp.float64
    assert xp.finfo(y).bits == 64


def test_extension_functions_take_buffers(xp, dev, rng) -> None:
    h = random_values(rng, (5, 5), np.float64, False) + 8 * np.eye(5)
    v = random_values(rng, (5,), np.float64, False)
    a, b = dev.to_device(h), dev.to_device(v)
    assert_rel(np.asarray(xp.linalg.solve(a, b)), np.linalg.solve(h, v), "f64", n=5, cond=10)
    assert_rel(np.asarray(xp.linalg.inv(a.result())), np.linalg.inv(h), "f64", n=5, cond=10)
    assert_rel(float(xp.linalg.vector_norm(b)), np.linalg.norm(v), "f64", n=5)
    assert_rel(np.asarray(xp.linalg.multi_dot([a, a, xp.asarray(h)])), h @ h @ h, "f64", n=25)
    z = dev.to_device((h + 1j * h.T).astype(np.complex128))
    assert_rel(np.asarray(xp.fft.fft(z, axis=0)), np.fft.fft(h + 1j * h.T, axis=0), "f64", n=5)
    assert_rel(np.asarray(z.__array_namespace__().fft.rfft(a)), np.fft.rfft(h), "f64", n=5)


def test_user_kernels_take_buffers(xp, dev, rng) -> None:
    a = random_values(rng, (4, 5), np.float32, False)
    b = random_values(rng, (4, 5), np.float32, False)
    x, y = dev.to_device(a), dev.to_device(b).result()
    sq = xp.ElementwiseKernel("T x, T y", "T z", "z = (x - y) * (x - y)", "buf_sqdiff")
    assert_rel(np.asarray(sq(x, y)), (a - b).astype(np.float64) ** 2, "f32")
    out = dev.alloc((4, 5), np.float32)
    assert sq(x, xp.asarray(b), out) is out  # an output buffer is written and answered
    assert_rel(np.asarray(out), (a - b).astype(np.float64) ** 2, "f32")
    l2 = xp.ReductionKernel("T x", "T y", "x * x", "a + b", "y = sqrt(a)", 0, "buf_l2")
    assert_rel(np.asarray(l2(x, axis=1)), np.linalg.norm(a.astype(np.float64), axis=1), "f32",
               n=5)


def test_mixed_devices_are_refused(backend, rng) -> None:
    d1 = gpumsg.open_device(0, backend=backend)
    d2 = gpumsg.open_device(0, backend=backend)
    try:
        h = random_values(rng, (4,), np.float32, False)
        x, y = d1.to_device(h), d2.to_device(h)
        for call in (lambda: x + y, lambda: y * x.result(), lambda: xpm.asarray(h, device=d1) - y,
                     lambda: xpm.add(x, y), lambda: xpm.concat([x, y])):
            with pytest.raises(InvalidMessage) as info:
                call()
            assert info.value.field == "device"
        moved = y.to_device(d1)
        assert moved.device is d1
        np.testing.assert_array_equal(np.asarray(x + moved), h + h)
    finally:
        d1.close()
        d2.close()


def test_dtype_without_an_array_type_is_a_type_error(xp, dev) -> None:
    buf = dev.alloc((4,), "e4m3")
    for call in (lambda: buf + 1, lambda: buf[0], lambda: buf.sum(), lambda: len(buf),
                 lambda: xp.asarray(buf.result()), lambda: xp.sum(buf)):
        with pytest.raises(TypeError, match="e4m3"):
            call()


def test_identity_hash_and_elementwise_equality(xp, dev, rng) -> None:
    h = random_values(rng, (3,), np.float32, False)
    futs = [dev.to_device(h) for _ in range(3)]
    done, _ = cf.wait(futs)  # sets of futures, by identity
    assert done == set(futs)
    keyed = {f.result(): k for k, f in enumerate(futs)}
    assert [keyed[f.result()] for f in futs] == [0, 1, 2]
    assert futs[0].result() in {futs[0].result()}
    eq = futs[0] == futs[1]
    assert isinstance(eq, xpm.Array) and bool(xp.all(eq))
    assert (futs[0] == None) is False  # noqa: E711 - not an array: Python's identity
    assert (futs[0] != "x") is True


def test_a_chain_on_a_buffer_pipelines_without_waiting(xp, dev, posted, monkeypatch) -> None:
    """Operations on a buffer (or its pending future) post their launches and answer at once;
    reading the value is the only wait."""
    from gpumsg.client._buffers import GpuFuture
    from gpumsg.messages.nvrtc import Launch

    host = np.arange(1000, dtype=np.float64)
    with xp.fusion(False):  # one launch per operation
        float((dev.to_device(host) * 2.0 + 1.0).sum())  # compiles the kernels once
        waits: list = []
        real = GpuFuture.result

        def result(self, timeout=None):
            waits.append(self)
            return real(self, timeout)

        buf = dev.to_device(host)
        launches = posted(dev, Launch)
        monkeypatch.setattr(GpuFuture, "result", result)
        y = buf
        for _ in range(10):
            y = y * 2.0 + 1.0
        total = y.sum()
        assert len(launches) >= 21 and not waits
        monkeypatch.setattr(GpuFuture, "result", real)
    ref = host.copy()
    for _ in range(10):
        ref = ref * 2.0 + 1.0
    assert float(total) == ref.sum()


def test_arrays_without_importing_the_array_namespace() -> None:
    """``import gpumsg`` alone: a buffer's first array operation loads the array layer."""
    proc = run_python("""
        import sys, numpy as np, gpumsg
        assert "gpumsg.array_api" not in sys.modules
        with gpumsg.open_device(0, backend="sim") as dev:
            buf = dev.to_device(np.arange(6.0).reshape(2, 3))
            assert float((buf + buf)[1, 2]) == 10.0 and len(buf) == 2
            assert "gpumsg.array_api" in sys.modules
        print("ok")
    """)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr


class _Producer:
    """A DLPack producer that is not an Array, so that importing it reads the capsule."""

    def __init__(self, x) -> None:
        self.x = x

    def __dlpack__(self, **kwargs):
        return self.x.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.x.__dlpack_device__()


def test_the_transpose_of_a_square_f_ordered_buffer_is_not_its_buffer(xp, dev, rng) -> None:
    """``b.T`` of a square F-ordered buffer has C strides and the buffer's shape, yet holds the
    transpose of what the buffer says: the calls that hand a plain buffer to a library in its
    own order copy it first (inv and solve once answered for the untransposed matrix; fft and
    a sparse conversion refused the F-ordered buffer; a GPU export handed out the buffer)."""
    from gpumsg.array_api import sparse

    n = 6
    h = random_values(rng, (n, n), np.float64, False) + n * np.eye(n)
    hc = h + 1j * random_values(rng, (n, n), np.float64, False)
    t = dev.to_device(np.asfortranarray(h), order="F").T
    tc = dev.to_device(np.asfortranarray(hc), order="F").T
    assert t.strides == (n, 1) and t.shape == t.buffer.shape
    v = random_values(rng, (n,), np.float64, False)
    for got, ref in ((xp.linalg.inv(t), np.linalg.inv(h.T)),
                     (xp.linalg.solve(t, xp.asarray(v)), np.linalg.solve(h.T, v)),
                     (xp.linalg.solve(xp.asarray(h), t), np.linalg.solve(h, h.T)),
                     (xp.fft.fft(tc), np.fft.fft(hc.T)), (xp.fft.fft2(tc), np.fft.fft2(hc.T)),
                     (xp.fft.rfft(t), np.fft.rfft(h.T)),
                     (sparse.csr_matrix(t).toarray(), h.T),
                     (xp.from_dlpack(_Producer(t)), h.T)):
        np.testing.assert_allclose(np.asarray(got), ref, rtol=1e-10, atol=1e-10)
