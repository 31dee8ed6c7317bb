"""Automatic fusion of element-wise chains: fused results against unfused ones and NumPy
float64, the number of kernels the rule predicts (counted by ``fusion_stats`` and by the
launches posted), intermediates kept by the user, and the order of pending reads against later
writes of their inputs."""

from __future__ import annotations

import numpy as np
import pytest
from array_helpers import FLOAT_TOL, in_threads, random_values

import gpumsg
from gpumsg.messages.nvrtc import Launch


def _delta(xp, before: dict) -> dict:
    now = xp.fusion_stats()
    return {k: now[k] - before[k] for k in now}


def _inputs(xp, rng, n: int, shape=(64, 33), dtype=np.float32) -> tuple[list, list]:
    hs = [rng.standard_normal(shape).astype(dtype) * 0.5 for _ in range(n)]
    return [xp.asarray(h) for h in hs], [h.astype(np.float64) for h in hs]


def test_the_chain_and_its_sum_are_one_kernel(xp, dev, rng, posted) -> None:
    (x, y, z, w), (hx, hy, hz, hw) = _inputs(xp, rng, 4)
    ref = np.exp(hx * hy + hz) * hw
    float(xp.sum(xp.exp(x * y + z) * w))  # compiles once
    launches = posted(dev, Launch)
    float(xp.sum(x))
    plain = len(launches)  # a sum of an array in memory (one launch, or two when split)
    before = xp.fusion_stats()
    s = xp.sum(xp.exp(x * y + z) * w)
    assert len(launches) == 2 * plain
    assert _delta(xp, before) == {"kernels": 0, "reductions": 1, "operations": 4}
    np.testing.assert_allclose(float(s), ref.sum(), rtol=1e-4)
    # the element-wise chain alone: one kernel, one output
    del launches[:]
    before = xp.fusion_stats()
    v = xp.exp(x * y + z) * w
    assert len(launches) == 0
    got = np.asarray(v)
    assert len(launches) == 1 and len(launches[0].writes) == 1
    assert _delta(xp, before) == {"kernels": 1, "reductions": 0, "operations": 4}
    np.testing.assert_allclose(got, ref, rtol=FLOAT_TOL["float32"] * 10)
    with xp.fusion(False):
        unfused = np.asarray(xp.exp(x * y + z) * w)
        assert len(launches) == 1 + 4
    np.testing.assert_array_equal(got, unfused)


def test_kept_intermediates_are_outputs_of_the_same_kernel(xp, dev, rng, posted) -> None:
    (x, y, z), (hx, hy, hz) = _inputs(xp, rng, 3)
    launches = posted(dev, Launch)
    t = x * y          # kept
    u = xp.sin(t + z) * 2.0
    del_me = u - t     # dropped before it is needed
    del del_me
    before = xp.fusion_stats()
    got_u = np.asarray(u)
    assert len(launches) == 1 and len(launches[0].writes) == 2
    assert _delta(xp, before)["kernels"] == 1
    np.testing.assert_allclose(np.asarray(t), hx * hy, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(got_u, np.sin(hx * hy + hz) * 2.0, rtol=1e-5, atol=1e-6)
    assert len(launches) == 1  # t was already in memory


def test_a_reduction_leaves_its_input_pending(xp, rng) -> None:
    (x, y), (hx, hy) = _inputs(xp, rng, 2)
    v = x * y + 1.0
    m = xp.mean(v, axis=0)
    sd = xp.std(v, axis=1, keepdims=True)
    i = xp.argmax(v, axis=1)
    assert v._node is not None  # still pending: only a later need computes it
    hv = hx * hy + 1.0
    np.testing.assert_allclose(np.asarray(m), hv.mean(0), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(sd), hv.std(1, keepdims=True), rtol=1e-4)
    np.testing.assert_array_equal(np.asarray(i), np.argmax(np.asarray(v), axis=1))
    np.testing.assert_allclose(np.asarray(v), hv, rtol=1e-6, atol=1e-6)
    l2 = xp.ReductionKernel("T x", "T y", "x * x", "a + b", "y = sqrt(a)", 0, "l2fused")
    np.testing.assert_allclose(np.asarray(l2(x - y, axis=1)),
                               np.sqrt(((hx - hy) ** 2).sum(1)), rtol=1e-5)


@pytest.mark.parametrize("how", ["setitem", "iadd", "slice", "kernel", "raw", "dlpack"])
def test_a_pending_read_comes_before_a_later_write(xp, dev, rng, how) -> None:
    (x,), (hx,) = _inputs(xp, rng, 1)
    y = x * 2.0 + 1.0  # pending, reads x
    if how == "setitem":
        x[...] = 0.0
    elif how == "iadd":
        x += 5.0
    elif how == "slice":
        x[3:7, :] = -1.0
    elif how == "kernel":
        xp.ElementwiseKernel("T a", "T b", "b = a * 0", "zero")(x, x)
    elif how == "raw":  # the buffer written behind the namespace's back, by a plain message
        buf = x.buffer
        y = x * 2.0 + 1.0
        dev.copy_from_host(buf, np.zeros(hx.shape, np.float32)).result()
    else:
        if dev.backend == "sim":
            np.from_dlpack(x)[...] = 0.0
        else:
            pytest.importorskip("torch").from_dlpack(x).zero_()
    np.testing.assert_allclose(np.asarray(y), hx * 2.0 + 1.0, rtol=1e-6, atol=1e-6)
    assert not np.array_equal(np.asarray(x), hx)


def test_the_off_switches(xp, dev, rng, posted) -> None:
    (x, y), _ = _inputs(xp, rng, 2)
    launches = posted(dev, Launch)
    with gpumsg.config.configured(array_fusion=False):
        r = (x + y) * 3.0 - x
        assert r._node is None and len(launches) == 3
    with xp.fusion(False):
        r = (x + y) * 3.0
        assert r._node is None and len(launches) == 5
        with xp.fusion(True):
            r = (x + y) * 3.0
            assert r._node is not None
    np.asarray(r)
    assert len(launches) == 6
    with pytest.raises(TypeError):
        with xp.fusion("no"):
            pass


def test_the_environment_switch_is_read_per_configuration(xp, dev, rng, monkeypatch) -> None:
    (x, y), _ = _inputs(xp, rng, 2)
    assert (x + y)._node is not None
    monkeypatch.setenv("GPUMSG_ARRAY_FUSION", "0")
    with gpumsg.config.configured():  # a new configuration: the option is read again
        assert (x + y)._node is None
    monkeypatch.delenv("GPUMSG_ARRAY_FUSION")
    with gpumsg.config.configured():
        assert (x + y)._node is not None


def test_scalars_are_arguments_not_part_of_the_kernel(xp, dev, rng, posted) -> None:
    (x,), (hx,) = _inputs(xp, rng, 1)
    launches = posted(dev, Launch)
    a = np.asarray(xp.exp(x * 2.5) + 1)
    b = np.asarray(xp.exp(x * -3.5) + 7)
    assert launches[0].kernel.name == launches[1].kernel.name
    np.testing.assert_allclose(a, np.exp(hx * 2.5) + 1, rtol=1e-5)
    np.testing.assert_allclose(b, np.exp(hx * -3.5) + 7, rtol=1e-5)


def test_chains_of_one_structure_share_a_kernel_not_their_inputs(xp, dev, rng, posted) -> None:
    """A chain's kernel is kept by its structure: the same operations on other arrays reuse
    it, while reading one array twice (x * x) or two arrays (x * y), or other dtypes, is
    another structure."""
    (x, y, z), (hx, hy, hz) = _inputs(xp, rng, 3)
    launches = posted(dev, Launch)
    got = [np.asarray(x * y + z), np.asarray(y * z + x), np.asarray(x * x + z),
           np.asarray(x * y + x), np.asarray(xp.astype(x, xp.float64) * y + z)]
    names = [m.kernel.name for m in launches]
    assert names[0] == names[1] and len(set(names)) == 4
    w = [a.astype(np.float64) for a in (hx, hy, hz)]
    terms = [(w[0], w[1], w[2]), (w[1], w[2], w[0]), (w[0], w[0], w[2]), (w[0], w[1], w[0])]
    tol = FLOAT_TOL["float32"] * 10
    for g, (a, b, c) in zip(got, terms):
        # float32 rounding of a * b + c, relative to the terms' size (a sum that cancels to
        # near zero keeps the terms' absolute error, not a relative one)
        np.testing.assert_allclose(g, a * b + c, rtol=tol, atol=tol * np.abs(a * b).max()
                                   + tol * np.abs(c).max())
    np.testing.assert_allclose(got[4], hx.astype(np.float64) * hy + hz, rtol=1e-12)


def test_reductions_of_one_chain_structure_repeated_other_ways(xp, rng) -> None:
    """A reduction of a chain whose structure was reduced before reuses what it derived
    (the spec, the shapes) only for the same reduction, shape, axes and keepdims: every other
    way (another reduction, axis, keepdims, shape, dtype, layout of a leaf) is right too."""
    from gpumsg.array_api import _reductions

    h = [random_values(rng, (6, 5), np.float32, False) for _ in range(3)]
    hv = [random_values(rng, (10, 3), np.float32, False) for _ in range(3)]
    w = [a.astype(np.float64) for a in h]
    wv = [a.astype(np.float64) for a in hv]
    tol = FLOAT_TOL["float32"] * 40

    def check(got, want) -> None:
        want = np.asarray(want)
        assert got.shape == want.shape
        np.testing.assert_allclose(np.asarray(got), want, rtol=tol,
                                   atol=tol * max(1.0, float(np.abs(want).max())))

    before = len(_reductions._CHAIN_SPECS)
    for _ in range(2):  # the second round finds what the first derived
        x, y, z = (xp.asarray(a) for a in h)
        check(xp.sum(xp.exp(x * y) + z), np.sum(np.exp(w[0] * w[1]) + w[2]))
        check(xp.sum(xp.exp(x * y) + z, axis=0), np.sum(np.exp(w[0] * w[1]) + w[2], axis=0))
        check(xp.sum(xp.exp(x * y) + z, axis=1, keepdims=True),
              np.sum(np.exp(w[0] * w[1]) + w[2], axis=1, keepdims=True))
        check(xp.max(xp.exp(x * y) + z, axis=1), np.max(np.exp(w[0] * w[1]) + w[2], axis=1))
        check(xp.prod(xp.exp(x * y) * 0.5 + z, axis=0),
              np.prod(np.exp(w[0] * w[1]) * 0.5 + w[2], axis=0))
        xv, yv, zv = (xp.asarray(a) for a in hv)
        check(xp.sum(xp.exp(xv * yv) + zv, axis=0), np.sum(np.exp(wv[0] * wv[1]) + wv[2], axis=0))
        check(xp.sum(xp.exp(x[:, ::2] * y[:, :3]) + z[:, 1:4], axis=1),  # strided leaves
              np.sum(np.exp(w[0][:, ::2] * w[1][:, :3]) + w[2][:, 1:4], axis=1))
        check(xp.sum(xp.exp(xp.astype(x, xp.float64) * y) + z, axis=0),
              np.sum(np.exp(w[0] * w[1]) + w[2], axis=0))
    assert len(_reductions._CHAIN_SPECS) > before


def test_a_long_chain_is_cut_at_the_limit(xp, rng) -> None:
    from gpumsg.array_api._fusion import MAX_OPS

    (x,), (hx,) = _inputs(xp, rng, 1, dtype=np.float64)
    before = xp.fusion_stats()
    y, ref = x, hx
    for _ in range(MAX_OPS + 5):
        y, ref = y * 0.5, ref * 0.5
    np.testing.assert_allclose(np.asarray(y), ref, rtol=1e-12)
    assert _delta(xp, before)["kernels"] == 2
    # inputs count once however often they are read; the 17th distinct one cuts the chain
    from gpumsg.array_api._fusion import MAX_INPUTS

    xs, hs = _inputs(xp, rng, MAX_INPUTS + 1, shape=(50,))
    before = xp.fusion_stats()
    acc, ref = xs[0], hs[0]
    for a, h in zip(xs[1:], hs[1:]):
        acc, ref = acc + a * xs[0], ref + h * hs[0]
    np.testing.assert_allclose(np.asarray(acc), ref, rtol=1e-5, atol=1e-6)
    assert _delta(xp, before)["kernels"] == 2


def test_promotion_broadcasting_and_wrapping_per_operation(xp, rng) -> None:
    ha = rng.integers(-128, 128, (5, 1, 7), dtype=np.int8)
    hb = rng.integers(0, 256, (6, 1), dtype=np.uint8)
    a, b = xp.asarray(ha), xp.asarray(hb)
    c = (a * a) + 1                  # int8, wraps per operation as unfused
    d = c + b                        # int16, broadcast to (5, 6, 7)
    e = xp.where(d > 0, d * 1.5, xp.astype(a, xp.float32))
    with np.errstate(over="ignore"):
        hc = (ha * ha) + np.int8(1)
    hd = hc.astype(np.int16) + hb.astype(np.int16)
    he = np.where(hd > 0, hd * 1.5, ha.astype(np.float32))
    assert (e.dtype, e.shape) == (xp.float64, (5, 6, 7))
    np.testing.assert_array_equal(np.asarray(e), he)
    np.testing.assert_array_equal(np.asarray(c), hc)
    h = xp.asarray(rng.standard_normal(50).astype(np.float16))
    with xp.fusion(False):
        unfused = np.asarray(xp.clip(h * h + h, -0.5, 2.0) / 3)
    np.testing.assert_array_equal(np.asarray(xp.clip(h * h + h, -0.5, 2.0) / 3), unfused)


_UNARY = [("exp", np.exp, lambda v: np.clip(v, -4, 4)), ("sin", np.sin, None),
          ("tanh", np.tanh, None), ("abs", np.abs, None), ("negative", np.negative, None),
          ("sqrt", np.sqrt, np.abs), ("log1p", np.log1p, lambda v: np.abs(v))]
_BINARY = [("add", np.add), ("subtract", np.subtract), ("multiply", np.multiply),
           ("maximum", np.maximum), ("minimum", np.minimum), ("hypot", np.hypot)]


@pytest.mark.parametrize("trial", range(12))
def test_random_expression_graphs_against_numpy(xp, rng, trial) -> None:
    """Random DAGs of unary and binary functions over broadcast inputs, some intermediates
    kept, the result summed or read: NumPy float64 agrees, and the kernels launched are one
    per shape of the results still referenced (the rule)."""
    dtype = np.float64 if trial % 3 == 0 else np.float32
    tol = 1e-10 if dtype == np.float64 else 2e-4
    shapes = [(4, 9, 5), (9, 5), (5,), (4, 1, 5), (1, 9, 1)]
    hs = [rng.uniform(0.2, 1.5, shapes[k % len(shapes)]).astype(dtype) for k in range(4)]
    vals = [xp.asarray(h) for h in hs]
    refs = [h.astype(np.float64) for h in hs]
    kept: list[int] = []
    for _ in range(int(rng.integers(4, 14))):
        if rng.random() < 0.35:
            name, fn, fix = _UNARY[int(rng.integers(len(_UNARY)))]
            k = int(rng.integers(len(vals)))
            arg, r = vals[k], refs[k]
            if fix is not None:  # keep the argument in the function's domain
                arg = xp.clip(arg, -4.0, 4.0) if name == "exp" else xp.abs(arg)
                r = fix(r)
            vals.append(getattr(xp, name)(arg))
            refs.append(fn(r))
            arg = None
        else:
            name, fn = _BINARY[int(rng.integers(len(_BINARY)))]
            i, j = (int(v) for v in rng.integers(len(vals), size=2))
            vals.append(getattr(xp, name)(vals[i], vals[j]))
            refs.append(fn(refs[i], refs[j]))
        if rng.random() < 0.3:
            kept.append(len(vals) - 1)
    keep = {k: (vals[k], refs[k]) for k in kept}
    last, ref = vals[-1], refs[-1]
    vals = refs = None  # drop every other wrapper
    # the rule: when memory is needed, one kernel per shape of the pending results referenced
    predicted = len({a.shape for a, _ in [*keep.values(), (last, None)] if a._node is not None})
    before = xp.fusion_stats()
    if trial % 2:
        np.testing.assert_allclose(float(xp.sum(last)), ref.sum(), rtol=tol * 10)
    got = np.asarray(last)
    assert _delta(xp, before)["kernels"] == predicted
    np.testing.assert_allclose(got, np.broadcast_to(ref, last.shape), rtol=tol, atol=tol)
    for a, r in keep.values():  # in memory already: no kernel more
        np.testing.assert_allclose(np.asarray(a), np.broadcast_to(r, a.shape), rtol=tol,
                                   atol=tol)
    assert _delta(xp, before)["kernels"] == predicted


@pytest.mark.parametrize("dtype", ["float32", "int8", "complex64", "bool"])
def test_every_function_fused_equals_unfused(xp, rng, dtype) -> None:
    """Each function of the table inside a fused chain (``f(x, y)`` then ``+ x``, or ``|`` for
    bool) gives the bits of the same calls made one kernel at a time."""
    from array_helpers import random_values

    from gpumsg.array_api import _dtypes as D
    from gpumsg.array_api._elementwise import TABLE

    dt = getattr(xp, dtype)
    hx, hy = (random_values(rng, (6, 5), dt, specials=False) for _ in range(2))
    if D.kind_of(dt) in "iu":
        hy[hy == 0] = 1
    x, y = xp.asarray(hx), xp.asarray(hy)
    for name, f in TABLE.items():
        if D.kind_of(dt) not in f.kinds or name.startswith("bitwise_") and "shift" in name:
            continue
        fn = getattr(xp, name)

        def chain(fn=fn, f=f):
            r = fn(x) if f.nin == 1 else fn(x, y)
            return r | (r == r) if r.dtype == xp.bool else r * 2 + r

        with xp.fusion(False):
            ref = np.asarray(chain())
        got = np.asarray(chain())
        np.testing.assert_array_equal(got, ref, err_msg=name)


def test_many_kept_results_are_cut_into_kernels_of_bounded_size(xp, rng) -> None:
    from gpumsg.array_api._fusion import MAX_OUTPUTS

    (x,), (hx,) = _inputs(xp, rng, 1)
    n = 2 * MAX_OUTPUTS + 3
    kept = [x * float(k) + 1.0 for k in range(n)]
    before = xp.fusion_stats()
    xp.flush()
    assert _delta(xp, before)["kernels"] == 3
    for k, a in enumerate(kept):
        np.testing.assert_allclose(np.asarray(a), hx * k + 1.0, rtol=1e-6, atol=1e-6)


def test_a_kernel_that_cannot_be_sent_fails_where_its_array_is_read(xp, dev, rng) -> None:
    """Pending work of a device closed meanwhile: other devices' posts go on; reading the
    array raises the device's refusal (every time), not a wrong value."""
    other = gpumsg.open_device(0, backend="sim")
    y = xp.asarray(np.ones(8, np.float32), device=other) * 2.0
    other.close()
    (x,), (hx,) = _inputs(xp, rng, 1)
    np.testing.assert_allclose(np.asarray(x + 1.0), hx + 1.0, rtol=1e-6)  # posts: no raise
    for _ in range(2):
        with pytest.raises(gpumsg.GpuError):
            np.asarray(y)


def test_threads_building_and_reading_chains_at_once(xp, rng) -> None:
    """Pending work is shared by the process: any thread's read computes every thread's
    pending arrays, and each still gets its own values."""
    (x, y), (hx, hy) = _inputs(xp, rng, 2)

    def work(k: int) -> None:
        for step in range(15):
            a = x * float(k) + y
            b = xp.exp(a * 0.1) - float(step)
            if step % 3 == 0:
                np.testing.assert_allclose(float(xp.sum(b)), np.sum(
                    np.exp((hx * k + hy) * 0.1) - step), rtol=1e-4)
            np.testing.assert_allclose(np.asarray(b), np.exp((hx * k + hy) * 0.1) - step,
                                       rtol=1e-5, atol=1e-5)

    in_threads(work)
