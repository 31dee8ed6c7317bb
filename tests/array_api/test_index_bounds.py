"""Indices outside their axis raise IndexError instead of wrapping: at the call for indices from
the host; for index arrays on the device, when the result (or what was assigned) is read."""

from __future__ import annotations

import numpy as np
import pytest
from array_helpers import INT_DTYPES

import gpumsg
import gpumsg.array_api as xp_
from gpumsg.backends.sim import SimBackend
from gpumsg.errors import DependencyFailed, IndexOutOfRange


def _raises_on_read(arr) -> IndexOutOfRange:
    with pytest.raises(IndexError) as info:
        np.asarray(arr)
    assert isinstance(info.value, IndexOutOfRange)
    return info.value


@pytest.mark.parametrize("dtype", INT_DTYPES)
def test_device_indices_at_the_edges(xp, rng, dtype) -> None:
    n = 7
    h = rng.standard_normal(n) + 2.0
    x = xp.asarray(h)
    info = np.iinfo(dtype)
    good = [v for v in (0, n - 1, -1, -n) if info.min <= v <= info.max]
    got = x[xp.asarray(np.array(good, dtype))]
    np.testing.assert_array_equal(np.asarray(got), h[np.array(good)])
    bad = [v for v in (n, -n - 1, info.max, info.min)
           if not -n <= v < n and info.min <= v <= info.max]
    for v in bad:
        idx = np.array([1, v, 2], dtype)
        y = x[xp.asarray(idx)]  # no wait at the call
        err = _raises_on_read(y)
        assert err.field == "key"
        with pytest.raises(DependencyFailed) as dep:
            np.asarray(y * 2.0 + 1.0)  # a reader of the result fails too
        assert isinstance(dep.value.root, IndexOutOfRange)
        assert np.asarray(x).tobytes() == h.tobytes()  # x itself is untouched


def test_host_indices_raise_at_the_call(xp, rng) -> None:
    h = rng.standard_normal((4, 5)) + 1.0
    x = xp.asarray(h)
    for key in ([0, 4], (slice(None), [5]), (np.array([-5]),), ([1, 2], [0, -6])):
        with pytest.raises(IndexError):
            x[key]
        with pytest.raises(IndexError):
            x[key] = 1.0
    assert np.asarray(x).tobytes() == h.tobytes()
    with pytest.raises(IndexError):
        x[np.array([2 ** 64 - 1], np.uint64)]
    np.testing.assert_array_equal(np.asarray(x[[-4, 3], [-5, 4]]), h[[-4, 3], [-5, 4]])


def test_two_index_arrays_one_out_of_range(xp, rng) -> None:
    h = rng.standard_normal((3, 4, 5)) + 1.0
    x = xp.asarray(h)
    i = xp.asarray(np.array([[0], [2]]))
    j = xp.asarray(np.array([1, 3, -5]))
    np.testing.assert_array_equal(np.asarray(x[i, :, j]), h[np.array([[0], [2]]), :,
                                                            np.array([1, 3, -5])])
    _raises_on_read(x[i, :, xp.asarray(np.array([1, 5, 0]))])
    _raises_on_read(x[xp.asarray(np.array([[0], [3]])), :, j])
    _raises_on_read(x[1:, xp.asarray(np.array([-5, 0]))])


def test_take_and_take_along_axis(xp, rng) -> None:
    h = rng.standard_normal((3, 6)) + 1.0
    x = xp.asarray(h)
    idx = np.array([5, -6, 0])
    np.testing.assert_array_equal(np.asarray(xp.take(x, xp.asarray(idx), axis=1)),
                                  np.take(h, idx, axis=1))
    err = _raises_on_read(xp.take(x, xp.asarray(np.array([6])), axis=1))
    assert err.field == "indices"
    _raises_on_read(xp.take(x, xp.asarray(np.array([0, -4], np.int16)), axis=0))
    order = np.argsort(h, axis=1)
    np.testing.assert_array_equal(
        np.asarray(xp.take_along_axis(x, xp.asarray(order), axis=1)),
        np.take_along_axis(h, order, axis=1))
    order[1, 2] = 6
    _raises_on_read(xp.take_along_axis(x, xp.asarray(order), axis=1))


def test_assignment_through_a_bad_device_index(xp, rng) -> None:
    h = rng.standard_normal(6) + 1.0
    x = xp.asarray(h)
    x[xp.asarray(np.array([1, -2]))] = xp.asarray(np.array([10.0, 20.0]))
    ref = h.copy()
    ref[[1, -2]] = [10.0, 20.0]
    np.testing.assert_array_equal(np.asarray(x), ref)
    y = xp.asarray(h)
    y[xp.asarray(np.array([1, 6], np.uint8))] = 5.0  # no wait at the call
    _raises_on_read(y)


def test_masks_and_ints_need_no_check(xp, dev, posted, rng) -> None:
    """Indices made by gpumsg (a mask's nonzero) or checked on the host post no check."""
    from gpumsg.messages.cudnn import IndexCheck

    h = rng.standard_normal((4, 5)) + 1.0
    x = xp.asarray(h)
    checks = posted(dev, IndexCheck)
    m = h > 1.0
    np.testing.assert_array_equal(np.asarray(x[xp.asarray(m[:, 0]), 1:]), h[m[:, 0], 1:])
    np.testing.assert_array_equal(np.asarray(x[[0, -1], 2]), h[[0, -1], 2])
    assert not checks
    np.asarray(x[xp.asarray(np.array([0, 1])), 2])
    assert len(checks) == 1


# -- the CUDA text, built for the host ----------------------------------------------------------
@pytest.mark.parametrize("scatter", [False, True], ids=["gather", "scatter"])
@pytest.mark.parametrize("width", [1, 8, 16])
def test_checked_move_source_on_the_host(folder, rng, scatter: bool, width: int) -> None:
    import prelude_host as host

    from gpumsg.array_api._gather import OUT_OF_RANGE, _render_move

    dt = {1: np.uint8, 8: np.float64, 16: np.complex128}[width]
    name, src, kinds = _render_move(width, 2, scatter, checked=True)
    kernel = host.build_kernel(folder, name, src)
    big = (rng.standard_normal(40) * 10).astype(dt)
    adv = np.array([3, OUT_OF_RANGE, 0, 7], np.int64)  # offsets along the result's rows
    shape, vs, as_ = (4, 2), (0, 20), (1, 0)  # element (r, c) at big[adv[r] + 20 c]
    rows = np.arange(4)[:, None]
    cols = np.arange(2)[None, :]
    where = adv[rows] + 20 * cols
    ok = np.broadcast_to(adv[rows] != OUT_OF_RANGE, shape)
    flag = np.zeros(1, np.int32)
    if scatter:
        dst = big.copy()
        vals = (rng.standard_normal(8) + 3).astype(dt)
        host.launch_host(kernel, kinds, (8, dst, vals, 0, adv, flag, 12345, *shape, *vs, *as_))
        ref = big.copy()
        ref[where[ok]] = vals.reshape(shape)[ok]
        assert dst.tobytes() == ref.tobytes()
    else:
        out = np.full(8, 7, dt)
        host.launch_host(kernel, kinds, (8, out, big, 0, adv, flag, 12345, *shape, *vs, *as_))
        ref = np.where(ok, big[np.where(ok, where, 0)], np.zeros((), dt)).ravel()
        assert out.tobytes() == ref.tobytes()
    assert flag[0] == 12345  # the move's token


@pytest.mark.parametrize("index", ["int8", "int64", "uint32"])
def test_take_source_on_the_host(folder, rng, index: str) -> None:
    """The checked take kernel: indices in ``[-n, n)`` (``[0, n)`` unsigned) gathered,
    wrapped once; others write zero bits and store the launch's token in the flag, which
    a launch that found nothing leaves as it was."""
    import prelude_host as host

    from gpumsg.array_api._gather import _render_take

    name, src, kinds = _render_take(8, index.replace("int", "i").replace("ui", "u"), 1)
    kernel = host.build_kernel(folder, name, src)
    x = rng.standard_normal(10) + 5.0
    raw = [3, 9, 0, 10, -2, -11] if index[0] == "i" else [3, 9, 0, 10, 2**32 - 2]
    idx = np.array(raw, np.dtype(index))
    want = np.array([x[v] if -10 <= v < 10 else 0.0 for v in np.asarray(raw)])
    for token, flagged in ((77, True), (78, False)):
        ids = idx if flagged else idx[:3]
        n = len(ids)
        out = np.full(n, 9.0)
        flag = np.array([5], np.int32)
        host.launch_host(kernel, kinds, (n, out, x, 0, ids, 0, flag, token, 10, 1, n, 0, 1))
        assert out.tobytes() == want[:n].tobytes()
        assert flag[0] == (token if flagged else 5)


@pytest.mark.parametrize("dtype", ["int8", "int64", "uint32", "uint64"])
def test_offsets_source_on_the_host(folder, xp, dtype) -> None:
    """The checked offsets kernel (a generated element-wise kernel): in range, an index's
    offset; outside [-d, d), OUT_OF_RANGE (2**64 - 1 is not -1)."""
    import prelude_host as host

    from gpumsg.array_api import _indexing
    from gpumsg.array_api._codegen import render_elementwise, scalar_bits
    from gpumsg.array_api._gather import OUT_OF_RANGE

    info = np.iinfo(dtype)
    vals = np.array([v for v in (0, 1, 4, 5, -5, -6, info.max, info.min, -1)
                     if info.min <= v <= info.max], dtype)
    x = xp.asarray(np.zeros((5, 3)))
    plan = _indexing._Plan(x, (xp.asarray(vals),))
    captured = {}
    real = _indexing.launch_elementwise

    def grab(dev, spec, shape, outs, ins):
        captured["spec"], captured["ins"] = spec, ins
        return real(dev, spec, shape, outs, ins)

    _indexing.launch_elementwise = grab
    try:
        plan.offsets()
    finally:
        _indexing.launch_elementwise = real
    spec = captured["spec"]
    name, src, kinds = render_elementwise(spec, "contig", True)
    kernel = host.build_kernel(folder, name, src)
    out = np.zeros(vals.size, np.int64)
    bits = []
    for value, (_, dt, sc) in zip(captured["ins"], spec.ins):
        if sc:
            bits += list(scalar_bits(value, dt))
    host.launch_host(kernel, kinds, (vals.size, out, vals, *bits, 0, 0))
    wide = vals.astype(object)
    ref = [OUT_OF_RANGE if not -5 <= v < 5 else (v % 5) * 3 for v in wide]
    assert out.tolist() == ref


def test_a_read_racing_its_producer_raises_the_producers_error(rng) -> None:
    # a slow stream: the result is still being computed when it is read, so the read's copy
    # is what waits for it (and fails with it)
    with gpumsg.open_device(0, backend=SimBackend(jitter=5e-3)) as dev:
        h = rng.standard_normal(7) + 2.0
        x = xp_.asarray(h, device=dev)
        y = x[xp_.asarray(np.array([1, 9, 2]), device=dev)]
        assert not y._buf.done()
        err = _raises_on_read(y)
        assert err.field == "key"
        z = x[xp_.asarray(np.array([1, 6, 2]), device=dev)] * 2.0
        np.testing.assert_array_equal(np.asarray(z), h[[1, 6, 2]] * 2.0)
