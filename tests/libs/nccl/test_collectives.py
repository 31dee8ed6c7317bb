"""NCCL collectives against NumPy float64 references: every collective x op x dtype on groups of
2, 3 and 4 simulated devices, and (marked gpu) on real NCCL over the GPUs present (>= 2)."""

from __future__ import annotations

import numpy as np
import pytest

import gpumsg
from gpumsg.dtypes import dtype_of
from tests.conftest import gpu_count

FLOATS = ("f32", "f64", "f16", "bf16", "e4m3", "e5m2")
INTS = ("i8", "u8", "i32", "u32", "i64", "u64")
RTOL = {"f64": 1e-12, "f32": 1e-5, "f16": 4e-3, "bf16": 3e-2, "e4m3": 0.07, "e5m2": 0.13}


GROUPS = [("sim", 2), ("sim", 3), ("sim", 4),
          pytest.param(("cuda", 2), marks=pytest.mark.gpu)]


@pytest.fixture(scope="module", params=GROUPS, ids=lambda p: f"{p[0]}{p[1]}")
def group(request):
    backend, n = request.param
    if backend == "cuda" and gpu_count() < 2:
        pytest.skip("needs two GPUs")
    g = gpumsg.open_devices(list(range(n)), backend=backend)
    g.comm = g.nccl(timeout=60)
    yield g
    g.close()


def _inputs(rng, n, size, dtype):
    dt = dtype_of(dtype)
    if dtype in INTS:
        lo = 0 if dtype[0] == "u" else -3
        return [rng.integers(lo, 4, size).astype(dt) for _ in range(n)]
    return [(rng.standard_normal(size) + 0.1).astype(np.float32).astype(dt) for _ in range(n)]


def _reference(xs, op, scale=1.0):
    w = [x.astype(np.int64) if x.dtype.kind in "iu" else x.astype(np.float64) for x in xs]
    if op in ("sum", "avg", "premul_sum"):
        out = sum(x * scale for x in w) if op == "premul_sum" else sum(w)
        if op == "avg":
            out = out / len(w) if out.dtype.kind == "f" else np.trunc(out / len(w))
        return out
    if op == "prod":
        return np.prod(np.stack(w), axis=0)
    return (np.max if op == "max" else np.min)(np.stack(w), axis=0)


def _check(out, ref, dtype):
    out = np.asarray(out).astype(np.float64)
    ref = np.asarray(ref)
    if dtype in INTS:
        ref = ref.astype(np.int64)  # inputs are small: no wrap-around
        np.testing.assert_array_equal(out, ref.astype(np.float64))
    else:
        scale = np.abs(ref).max() + 1e-30
        assert np.abs(out - ref).max() <= RTOL[dtype] * scale * 4, (out, ref)


def _ops(dtype):
    if dtype in INTS:
        return ("sum", "prod", "max", "min")
    return ("sum", "prod", "max", "min", "avg", "premul_sum")


CASES = [(d, o) for d in FLOATS + INTS for o in _ops(d)]


@pytest.mark.parametrize("dtype,op", CASES, ids=[f"{d}-{o}" for d, o in CASES])
def test_all_reduce_and_reduce_scatter(group, rng, dtype, op):
    n = len(group)
    xs = _inputs(rng, n, 6 * n, dtype)
    scale = 0.5 if op == "premul_sum" else 1.0
    bufs = [d.to_device(x) for d, x in zip(group, xs)]
    outs = [d.alloc((6 * n,), xs[0].dtype) for d in group]
    parts = [d.alloc((6,), xs[0].dtype) for d in group]
    root = rng.integers(n)
    red = group[root].alloc((6 * n,), xs[0].dtype)
    group.comm.all_reduce(bufs, outs, op=op, scale=scale).result(60)
    group.comm.reduce_scatter(bufs, parts, op=op, scale=scale).result(60)
    group.comm.reduce(bufs, red, root=int(root), op=op, scale=scale).result(60)
    ref = _reference(xs, op, scale)
    for r, d in enumerate(group):
        _check(d.copy_to_host(outs[r]).result(), ref, dtype)
        _check(d.copy_to_host(parts[r]).result(), ref[6 * r:6 * (r + 1)], dtype)
    _check(group[root].copy_to_host(red).result(), ref, dtype)


@pytest.mark.parametrize("dtype", FLOATS + INTS)
def test_broadcast_reduce_all_gather(group, rng, dtype):
    n = len(group)
    root = n - 1
    xs = _inputs(rng, n, 7, dtype)
    bufs = [d.to_device(x) for d, x in zip(group, xs)]
    red = group[root].alloc((7,), xs[0].dtype)
    gathered = [d.alloc((7 * n,), xs[0].dtype) for d in group]
    comm = group.comm
    comm.reduce(bufs, red, root=root, op="max").result(60)
    comm.all_gather(bufs, gathered).result(60)
    comm.broadcast(bufs, root=root).result(60)
    _check(group[root].copy_to_host(red).result(), _reference(xs, "max"), dtype)
    for r, d in enumerate(group):
        _check(d.copy_to_host(gathered[r]).result(),
               np.concatenate(xs).astype(np.float64), dtype)
        _check(d.copy_to_host(bufs[r]).result(), xs[root].astype(np.float64), dtype)


def test_send_recv_ring_and_all_to_all(group, rng):
    n = len(group)
    xs = _inputs(rng, n, 5, "f32")
    src = [d.to_device(x) for d, x in zip(group, xs)]
    dst = [d.alloc((5,), np.float32) for d in group]
    comm = group.comm
    with comm.group() as fut:  # a ring: r sends to r+1 and receives from r-1
        for r in range(n):
            comm.send(src[r], peer=(r + 1) % n)
            comm.recv(dst[r], peer=(r - 1) % n)
    fut.result(60)
    for r, d in enumerate(group):
        np.testing.assert_array_equal(d.copy_to_host(dst[r]).result(), xs[(r - 1) % n])
    blocks = [[rng.standard_normal(3).astype(np.float32) for _ in range(n)] for _ in range(n)]
    sends = [[d.to_device(blocks[i][j]) for j in range(n)] for i, d in enumerate(group)]
    recvs = [[d.alloc((3,), np.float32) for _ in range(n)] for d in group]
    comm.all_to_all(sends, recvs).result(60)
    for j, d in enumerate(group):
        for i in range(n):
            if i != j:
                np.testing.assert_array_equal(d.copy_to_host(recvs[j][i]).result(),
                                              blocks[i][j])


def test_group_batches_collectives(group, rng):
    n = len(group)
    xs = _inputs(rng, n, 8, "f32")
    ys = _inputs(rng, n, 8, "f32")
    a = [d.to_device(x) for d, x in zip(group, xs)]
    b = [d.to_device(y) for d, y in zip(group, ys)]
    comm = group.comm
    with comm.group() as fut:
        comm.all_reduce(a, op="sum")
        comm.all_reduce(b, op="max")
    fut.result(60)
    assert len(fut.ranks) == n and all(f.done() for f in fut.ranks)
    for r, d in enumerate(group):
        _check(d.copy_to_host(a[r]).result(), _reference(xs, "sum"), "f32")
        _check(d.copy_to_host(b[r]).result(), _reference(ys, "max"), "f32")


def test_bad_arguments(group):
    comm = group.comm
    bufs = [d.alloc((4,), np.float32) for d in group]
    with pytest.raises(gpumsg.InvalidMessage):
        comm.all_reduce(bufs[:-1])
    with pytest.raises(gpumsg.InvalidMessage):
        comm.all_reduce(list(reversed(bufs)))
    with pytest.raises(gpumsg.InvalidMessage, match="op"):
        comm.all_reduce(bufs, op="median")
    small = [d.alloc((2,), np.float32) for d in group]
    with pytest.raises(gpumsg.InvalidMessage, match="out"):
        comm.all_gather(bufs, small)
    comm.all_reduce(bufs).result(60)  # still serves
