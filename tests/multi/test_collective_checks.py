"""Collectives whose members' buffers disagree are refused at the call, before anything is
enqueued: InvalidMessage naming the argument (``field``), the rank and what was expected, on
every collective and every kind of disagreement (count, dtype, shape and order where elements
pair up, the size relations of all_gather / reduce_scatter, an output that does not fit its
input, a send and recv that do not match). NCCL does not check these: a rank that disagrees is
read or written out of bounds on a GPU, and the simulator reduced the wrong elements. The
members keep serving: after the refusals the untouched buffers still hold their data and the
same collectives with agreeing buffers give NumPy's float64 answer. On groups of 2 and 3
simulated devices, and (marked gpu) on real NCCL over two GPUs."""

from __future__ import annotations

import numpy as np
import pytest

import gpumsg
from gpumsg.messages.nccl import Collective, CollOp, check_batch, coll_op
from tests.conftest import gpu_count

RTOL = {"f32": 1e-5, "f64": 1e-12}
NP = {"f32": np.float32, "f64": np.float64}


GROUPS = [("sim", 2), ("sim", 3), pytest.param(("cuda", 2), marks=pytest.mark.gpu)]


@pytest.fixture(scope="module", params=GROUPS, ids=lambda p: f"{p[0]}{p[1]}")
def group(request):
    backend, n = request.param
    if backend == "cuda" and gpu_count() < 2:
        pytest.skip("needs two GPUs")
    g = gpumsg.open_devices(list(range(n)), backend=backend)
    g.comm = g.nccl(timeout=60)
    yield g
    g.close()


def _put(group, arrays):
    """One device buffer per rank holding ``arrays[r]`` (each resolved)."""
    bufs = [d.to_device(a) for d, a in zip(group, arrays)]
    for b in bufs:
        b.result(60)
    return bufs


def _random(rng, shape, dtype="f32", order="C"):
    return np.asarray((rng.standard_normal(shape) + 0.1).astype(NP[dtype]), order=order)


def _close(out, ref, dtype):
    out = np.asarray(out, dtype=np.float64)
    assert out.shape == np.shape(ref)
    np.testing.assert_allclose(out, ref, rtol=RTOL[dtype], atol=RTOL[dtype] * np.abs(ref).max())


def _host(d, buf):
    return d.copy_to_host(buf).result(60)


@pytest.fixture
def refused(group, posted):
    """``refused(call, field, rank, *words)``: ``call()`` raises InvalidMessage whose field is
    ``field`` and whose text names ``rank`` and each of ``words``, and no member was sent a
    Collective."""
    seen = [posted(d, Collective) for d in group]

    def check(call, field, rank, *words):
        with pytest.raises(gpumsg.InvalidMessage) as info:
            call()
        text = str(info.value)
        assert info.value.field == field, text
        if rank is not None:
            assert f"rank {rank}" in text, text
        for w in words:
            assert w in text, text
        assert not any(seen), "a refused collective was enqueued"
        return info.value

    return check


def _unchanged(group, bufs, arrays):
    for d, b, a in zip(group, bufs, arrays):
        np.testing.assert_array_equal(_host(d, b), a)


# -- the disagreements, per collective


def test_all_reduce_reported_cases(group, refused, rng):
    """Sizes 4 and 8 (only the first 4 were reduced); f32 ones and f64 arange(4) (both ranks
    got the same wrong numbers)."""
    n, last, comm = len(group), len(group) - 1, group.comm
    xs = [np.ones(4, np.float32) for _ in range(n)]
    xs[last] = np.ones(8, np.float32)
    bufs = _put(group, xs)
    refused(lambda: comm.all_reduce(bufs), f"bufs[{last}]", last, "8 elements", "expected 4")
    ys = [np.ones(4, np.float32) for _ in range(n)]
    ys[last] = np.arange(4, dtype=np.float64)
    ybufs = _put(group, ys)
    refused(lambda: comm.all_reduce(ybufs), f"bufs[{last}]", last, "f64", "expected f32")
    _unchanged(group, bufs, xs)
    _unchanged(group, ybufs, ys)


def test_all_reduce_disagreements(group, refused, rng):
    n, last, comm = len(group), len(group) - 1, group.comm
    xs = [_random(rng, (2, 3)) for _ in range(n)]
    bufs = _put(group, xs)

    def swap(r, array):
        out = list(bufs)
        out[r] = group[r].to_device(array)
        return out

    refused(lambda: comm.all_reduce(swap(last, _random(rng, (2, 4)))), f"bufs[{last}]", last,
            "8 elements", "expected 6")
    refused(lambda: comm.all_reduce(swap(last, _random(rng, (2, 3), "f64"))), f"bufs[{last}]",
            last, "f64", "expected f32")
    refused(lambda: comm.all_reduce(swap(last, _random(rng, (3, 2)))), f"bufs[{last}]", last,
            "shape (3, 2)", "expected (2, 3)")
    refused(lambda: comm.all_reduce(swap(last, _random(rng, (2, 3), order="F"))),
            f"bufs[{last}]", last, "F-ordered", "expected C")
    # an output that does not fit the input (out of place), on a rank other than 0
    outs = [d.alloc((2, 3), np.float32, order="C") for d in group]
    bad = list(outs)
    bad[last] = group[last].alloc((7,), np.float32)
    refused(lambda: comm.all_reduce(bufs, bad), f"out[{last}]", last, "7 elements",
            "expected 6")
    bad[last] = group[last].alloc((2, 3), np.float64, order="C")
    refused(lambda: comm.all_reduce(bufs, bad), f"out[{last}]", last, "f64")
    bad[last] = group[last].alloc((6,), np.float32)
    refused(lambda: comm.all_reduce(bufs, bad), f"out[{last}]", last, "shape (6,)")
    bad[0] = group[0].alloc((2, 3), np.float32, order="F")
    refused(lambda: comm.all_reduce(bufs, [bad[0]] + outs[1:]), "out[0]", 0, "F-ordered")
    _unchanged(group, bufs, xs)
    comm.all_reduce(bufs, outs).result(60)
    ref = sum(x.astype(np.float64) for x in xs)
    for d, o in zip(group, outs):
        _close(_host(d, o), ref, "f32")


def test_broadcast_disagreements(group, refused, rng):
    n, comm = len(group), group.comm
    root = n - 1
    xs = [_random(rng, 5) for _ in range(n)]
    bufs = _put(group, xs)
    short = [group[0].to_device(_random(rng, 4))] + bufs[1:]
    refused(lambda: comm.broadcast(short, root=root), "bufs[0]", 0, "4 elements",
            "expected 5", f"root {root}")
    other = [group[0].to_device(_random(rng, 5, "f64"))] + bufs[1:]
    refused(lambda: comm.broadcast(other, root=root), "bufs[0]", 0, "f64")
    refused(lambda: comm.broadcast(bufs, root=n), "root", None)
    refused(lambda: comm.broadcast(bufs, root=-1), "root", None)
    _unchanged(group, bufs, xs)
    comm.broadcast(bufs, root=np.int64(root)).result(60)  # any integer type
    for d, b in zip(group, bufs):
        np.testing.assert_array_equal(_host(d, b), xs[root])


@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_reduce_disagreements(group, refused, rng, dtype):
    n, comm = len(group), group.comm
    root = 1
    xs = [_random(rng, 6, dtype) for _ in range(n)]
    bufs = _put(group, xs)
    out = group[root].alloc((6,), NP[dtype])
    long = list(bufs)
    long[0] = group[0].to_device(_random(rng, 9, dtype))
    refused(lambda: comm.reduce(long, out, root=root), "bufs[0]", 0, "9 elements",
            "expected 6")
    other = "f64" if dtype == "f32" else "f32"
    mixed = list(bufs)
    mixed[0] = group[0].to_device(_random(rng, 6, other))
    refused(lambda: comm.reduce(mixed, out, root=root), "bufs[0]", 0, other)
    refused(lambda: comm.reduce(bufs, group[root].alloc((5,), NP[dtype]), root=root), "out",
            root, "5 elements", "expected 6")
    refused(lambda: comm.reduce(bufs, group[root].alloc((6,), NP[other]), root=root), "out",
            root, other)
    refused(lambda: comm.reduce(bufs, group[0].alloc((6,), NP[dtype]), root=root), "out",
            root, "root")
    refused(lambda: comm.reduce(bufs, out, root=n), "root", None)
    _unchanged(group, bufs, xs)
    comm.reduce(bufs, out, root=root, op="max").result(60)
    _close(_host(group[root], out), np.max(np.stack(xs).astype(np.float64), axis=0), dtype)


def test_all_gather_disagreements(group, refused, rng):
    n, last, comm = len(group), len(group) - 1, group.comm
    xs = [_random(rng, 4) for _ in range(n)]
    bufs = _put(group, xs)
    outs = [d.alloc((4 * n,), np.float32) for d in group]
    long = bufs[:last] + [group[last].to_device(_random(rng, 5))]
    refused(lambda: comm.all_gather(long, outs), f"bufs[{last}]", last, "5 elements",
            "expected 4")
    mixed = bufs[:last] + [group[last].to_device(_random(rng, 4, "f64"))]
    refused(lambda: comm.all_gather(mixed, outs), f"bufs[{last}]", last, "f64")
    # an output the size of the input (as in place), not nranks times it
    same = outs[:last] + [group[last].alloc((4,), np.float32)]
    refused(lambda: comm.all_gather(bufs, same), f"out[{last}]", last, "4 elements",
            f"expected {4 * n}")
    bigger = outs[:last] + [group[last].alloc((4 * n + 1,), np.float32)]
    refused(lambda: comm.all_gather(bufs, bigger), f"out[{last}]", last,
            f"expected {4 * n}")
    wrong = outs[:last] + [group[last].alloc((4 * n,), np.float64)]
    refused(lambda: comm.all_gather(bufs, wrong), f"out[{last}]", last, "f64")
    _unchanged(group, bufs, xs)
    comm.all_gather(bufs, outs).result(60)
    for d, o in zip(group, outs):
        _close(_host(d, o), np.concatenate(xs).astype(np.float64), "f32")


def test_reduce_scatter_disagreements(group, refused, rng):
    n, last, comm = len(group), len(group) - 1, group.comm
    xs = [_random(rng, 3 * n) for _ in range(n)]
    bufs = _put(group, xs)
    outs = [d.alloc((3,), np.float32) for d in group]
    bigger = outs[:last] + [group[last].alloc((4,), np.float32)]
    refused(lambda: comm.reduce_scatter(bufs, bigger), f"out[{last}]", last, "4 elements",
            "expected 3")
    wrong = outs[:last] + [group[last].alloc((3,), np.float64)]
    refused(lambda: comm.reduce_scatter(bufs, wrong), f"out[{last}]", last, "f64")
    # an input the size of the output (as in place), not nranks times it
    small = bufs[:last] + [group[last].to_device(_random(rng, 3))]
    refused(lambda: comm.reduce_scatter(small, outs), f"bufs[{last}]", last, "3 elements",
            f"expected {3 * n}")
    long = bufs[:last] + [group[last].to_device(_random(rng, 3 * n + 1))]
    refused(lambda: comm.reduce_scatter(long, outs), f"bufs[{last}]", last,
            f"expected {3 * n}")
    mixed = bufs[:last] + [group[last].to_device(_random(rng, 3 * n, "f64"))]
    refused(lambda: comm.reduce_scatter(mixed, outs), f"bufs[{last}]", last, "f64")
    _unchanged(group, bufs, xs)
    comm.reduce_scatter(bufs, outs, op="premul_sum", scale=0.5).result(60)
    ref = sum(x.astype(np.float64) * 0.5 for x in xs)
    for r, (d, o) in enumerate(zip(group, outs)):
        _close(_host(d, o), ref[3 * r:3 * (r + 1)], "f32")


def test_send_recv_disagreements(group, refused, rng):
    n, comm = len(group), group.comm
    xs = [_random(rng, 5) for _ in range(n)]
    src = _put(group, xs)

    def ring(dst, count=None):
        with comm.group() as fut:
            for r in range(n):
                comm.send(src[r], peer=(r + 1) % n)
                comm.recv(dst[r], peer=(r - 1) % n, count=count)
        return fut

    # rank 1 receives 4 elements where rank 0 sends 5
    dst = [d.alloc((5,), np.float32) for d in group]
    dst[1] = group[1].alloc((4,), np.float32)
    refused(lambda: ring(dst), "ops[1].count", 1, "rank 0")
    dst[1] = group[1].alloc((5,), np.float64)
    refused(lambda: ring(dst), "ops[1].dtype", 1, "rank 0", "f64")
    dst[1] = group[1].alloc((5,), np.float32)
    refused(lambda: ring(dst, count=0), "ops[0].count", None, ">= 1")
    refused(lambda: ring(dst, count=6), "ops[0].recv", None, "6 elements", "holds 5")

    # a send without its recv: refused when the group is issued; its future says why
    def lone():
        with comm.group() as fut:
            comm.send(src[0], peer=1)
        return fut

    err = refused(lambda: comm.send(src[0], peer=1), "ops", 0, "rank 1")
    assert "recv" in str(err)
    refused(lone, "ops", 0, "rank 1")
    refused(lambda: comm.recv(dst[1], peer=0), "ops", 1, "rank 0")
    refused(lambda: comm.send(src[0], peer=0), "ops[0].peer", None, "differ")
    refused(lambda: comm.send(src[0], peer=n), "ops[0].peer", None)
    _unchanged(group, src, xs)
    fut = ring(dst)
    fut.result(60)
    for r, d in enumerate(group):
        np.testing.assert_array_equal(_host(d, dst[r]), xs[(r - 1) % n])
    # a prefix, as long as both sides agree on it
    part = [d.alloc((3,), np.float32) for d in group]
    with comm.group() as fut:
        comm.send(src[0], peer=1, count=3)
        comm.recv(part[1], peer=0)
    fut.result(60)
    np.testing.assert_array_equal(_host(group[1], part[1]), xs[0][:3])


def test_a_repeated_call_is_checked_as_the_first(group, refused, rng):
    """A call that repeats the last one (the same buffers, kind and arguments) reuses its
    checked operations; anything else is checked again: another buffer in a rank's place, a
    freed buffer, another argument (``root=True`` where ``root=1`` passed, an unknown op).
    The repeats give NumPy's answer."""
    n, last, comm = len(group), len(group) - 1, group.comm
    xs = [_random(rng, 6) for _ in range(n)]
    bufs = _put(group, xs)
    for k in range(3):  # each all-reduce sums what the last one left on every rank
        comm.all_reduce(bufs).result(60)
        total = n ** k * sum(x.astype(np.float64) for x in xs)
        for d, b in zip(group, bufs):
            _close(_host(d, b), total, "f32")
    longer = list(bufs)
    longer[last] = group[last].to_device(_random(rng, 8))
    refused(lambda: comm.all_reduce(longer), f"bufs[{last}]", last, "8 elements")
    comm.all_reduce(bufs).result(60)
    refused(lambda: comm.all_reduce(bufs, op="median"), "ops[0].op", None)
    comm.broadcast(bufs, root=1).result(60)
    refused(lambda: comm.broadcast(bufs, root=True), "root", None)
    comm.broadcast(bufs, root=1).result(60)
    for d, b in zip(group, bufs):
        np.testing.assert_array_equal(_host(d, b), _host(group[1], bufs[1]))
    gone = list(bufs)
    gone[last] = group[last].to_device(_random(rng, 6))
    comm.all_reduce(gone).result(60)
    group[last].free(gone[last])
    with pytest.raises(gpumsg.GpuRefStale):
        comm.all_reduce(gone)


def test_refused_group_fails_its_future(group, rng):
    comm = group.comm
    src = _put(group, [_random(rng, 5) for _ in group])
    with pytest.raises(gpumsg.InvalidMessage):
        with comm.group() as fut:
            comm.send(src[0], peer=1)
    for f in [fut, *fut.ranks]:
        with pytest.raises(gpumsg.InvalidMessage):
            f.result(0)
    with pytest.raises(gpumsg.InvalidMessage):
        with comm.group() as fut2:
            comm.all_reduce(src)
            comm.all_reduce([group[0].to_device(_random(rng, 4))] + src[1:])
    with pytest.raises(gpumsg.InvalidMessage):
        fut2.result(0)
    comm.all_reduce(src).result(60)  # still serves


def test_all_to_all_disagreements(group, refused, rng):
    n, comm = len(group), group.comm
    blocks = [[_random(rng, 3) for _ in range(n)] for _ in range(n)]
    sends = [[d.to_device(blocks[i][j]) for j in range(n)] for i, d in enumerate(group)]
    recvs = [[d.alloc((3,), np.float32) for _ in range(n)] for d in group]
    bad = [list(row) for row in recvs]
    bad[1][0] = group[1].alloc((2,), np.float32)
    refused(lambda: comm.all_to_all(sends, bad), "recvs[1][0]", 1, "2 elements",
            "expected 3", "sends[0][1]")
    bad[1][0] = group[1].alloc((3,), np.float64)
    refused(lambda: comm.all_to_all(sends, bad), "recvs[1][0]", 1, "f64")
    refused(lambda: comm.all_to_all(sends[:-1], recvs), "sends", None)
    comm.all_to_all(sends, recvs).result(60)
    for j, d in enumerate(group):
        for i in range(n):
            if i != j:
                np.testing.assert_array_equal(_host(d, recvs[j][i]), blocks[i][j])


@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_matching_collectives_in_one_group(group, rng, dtype):
    """Agreeing buffers, several collectives in one group call, 2-D in both orders: NumPy's
    float64 answer (the checks refuse nothing that is right)."""
    n, comm = len(group), group.comm
    xs = [_random(rng, (2, 3), dtype, order="F") for _ in range(n)]
    ys = [_random(rng, (4, 2), dtype) for _ in range(n)]
    zs = [_random(rng, 5, dtype) for _ in range(n)]
    a, b, c = _put(group, xs), _put(group, ys), _put(group, zs)
    outs = [d.alloc((2, 3), NP[dtype], order="F") for d in group]
    gathered = [d.alloc((8 * n,), NP[dtype]) for d in group]
    with comm.group() as fut:
        comm.all_reduce(a, outs, op="avg")
        comm.all_gather(b, gathered)
        comm.all_reduce(c, op="min")
    fut.result(60)
    wide = [x.astype(np.float64) for x in xs]
    for r, d in enumerate(group):
        _close(_host(d, outs[r]), sum(wide) / n, dtype)
        _close(_host(d, gathered[r]), np.concatenate([y.ravel() for y in ys]), dtype)
        _close(_host(d, c[r]), np.min(np.stack(zs), axis=0), dtype)


# -- the batch check itself, and a Collective message sent without the communicator


def _op(kind, count, dtype="f32", **kw):
    return CollOp(kind, None, None, count, dtype, **kw)


def test_check_batch_names_the_field_and_rank():
    check_batch([[_op("all_reduce", 4)], [_op("all_reduce", 4)]])
    cases = [
        ([[_op("all_reduce", 4)], [_op("all_reduce", 8)]], "ops[0].count", "rank 1"),
        ([[_op("all_reduce", 4)], [_op("all_reduce", 4, "f64")]], "ops[0].dtype", "rank 1"),
        ([[_op("all_reduce", 4)], [_op("all_gather", 4)]], "ops[0].kind", "rank 1"),
        ([[_op("reduce", 4, root=0)], [_op("reduce", 4, root=1)]], "ops[0].root", "rank 1"),
        ([[_op("all_reduce", 4)], [_op("all_reduce", 4, op="max")]], "ops[0].op", "rank 1"),
        ([[_op("all_reduce", 4, op="premul_sum", scale=2.0)],
          [_op("all_reduce", 4, op="premul_sum", scale=3.0)]], "ops[0].scale", "rank 1"),
        ([[_op("all_reduce", 4)], []], "ops", "rank 1"),
        ([[_op("send", 4, peer=1)], [_op("recv", 3, peer=0)]], "ops[0].count", "rank 1"),
        ([[_op("send", 4, peer=1)], [_op("recv", 4, "i32", peer=0)]], "ops[0].dtype",
         "rank 1"),
        ([[_op("send", 4, peer=1)], []], "ops", "rank 0"),
        ([[], [_op("recv", 4, peer=0)]], "ops", "rank 1"),
    ]
    for batch, field, rank in cases:
        with pytest.raises(gpumsg.InvalidMessage) as info:
            check_batch(batch)
        assert info.value.field == field and rank in str(info.value), str(info.value)
    # fields a collective never reads may differ; a lone send passes the per-call check
    check_batch([[_op("all_gather", 4, op="max")], [_op("all_gather", 4, root=1)]])
    check_batch([[_op("send", 4, peer=1)], []], pairs=False)


def test_disagreeing_messages_fail_every_rank_on_the_simulator(rng):
    """Collective messages sent without the communicator's checks: the simulator's rendezvous
    refuses to compute from rank 0's count alone, and every rank's future fails (none reports
    success with its output never written)."""
    with gpumsg.open_devices([0, 1], backend="sim") as g:
        comm = g.nccl(timeout=30)
        a = g[0].to_device(_random(rng, 4))
        b = g[1].to_device(_random(rng, 8))
        a.result(30), b.result(30)
        futs = [g[0].send(Collective(comm.comm_id, 0, 2, (coll_op("all_reduce", a, a, 4,
                                                                  "f32"),))),
                g[1].send(Collective(comm.comm_id, 1, 2, (coll_op("all_reduce", b, b, 8,
                                                                  "f32"),)))]
        for f in futs:
            with pytest.raises(gpumsg.GpuError, match="count"):
                f.result(30)
