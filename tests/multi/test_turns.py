"""Work that spans devices issued by the caller holding every member's turn
(``multi_issue="caller"``, the default) beside one message per member (``"members"``): the same
NumPy answers for all_reduce on random data (sum, max, min, prod; every dtype NCCL takes), which
path ran (no Collective or PeerCopy message is posted by the caller's path), ordering against
earlier and later work on every member (streams held back by injected hangs), several buffers
in one call, a busy member (the messages are posted instead), unusable buffers (every rank
fails with the buffer's own typed error, nothing is issued, the outputs are marked failed), a
closed member. On 2 and 3 simulated devices, and (marked gpu) on two GPUs."""

from __future__ import annotations

import time

import numpy as np
import pytest

import gpumsg
from gpumsg.dtypes import dtype_of
from gpumsg.messages.nccl import COLLECTIVE_DTYPES, Collective
from gpumsg.messages.peer import PeerCopyRecv, PeerCopySend
from gpumsg.multi import _turns
from tests.conftest import gpu_count
from tests.tolerance import bound

MODES = ("caller", "members")


GROUPS = [("sim", 2), ("sim", 3), pytest.param(("cuda", 2), marks=pytest.mark.gpu)]


@pytest.fixture(scope="module", params=GROUPS, ids=lambda p: f"{p[0]}{p[1]}")
def group(request):
    backend, n = request.param
    if backend == "cuda" and gpu_count() < 2:
        pytest.skip("needs two GPUs")
    g = gpumsg.open_devices(list(range(n)), backend=backend,
                            allow_fault_injection=backend == "sim")
    g.comm = g.nccl(timeout=60)
    yield g
    g.close()


@pytest.fixture(params=MODES)
def mode(request, monkeypatch):
    """The path; the caller waits up to 5 s (not 2 ms) for busy members to become idle, so
    that which path ran is certain on a loaded test host."""
    monkeypatch.setattr(_turns, "TURN_WAIT", 5.0)
    with gpumsg.config.configured(multi_issue=request.param):
        yield request.param


def _inputs(rng, n, size, dtype):
    """Non-zero values small enough that no sum or product of ``n`` overflows (integers)
    or leaves the range of the 8-bit floats."""
    dt = dtype_of(dtype)
    if dt.kind in "iu":
        lo = 1 if dt.kind == "u" else -3
        out = [rng.integers(lo, 4, size).astype(dt) for _ in range(n)]
        for x in out:
            x[x == 0] = 1
        return out
    return [(rng.uniform(0.5, 2.0, size) * rng.choice([-1, 1], size)).astype(dt)
            for _ in range(n)]


def _check_reduction(out, xs, op, dtype):
    w = [x.astype(np.float64) for x in xs]
    got = np.asarray(out).astype(np.float64)
    if op in ("max", "min"):  # exact: one of the inputs
        np.testing.assert_array_equal(got, (np.max if op == "max" else np.min)(w, axis=0))
        return
    ref = np.sum(w, axis=0) if op == "sum" else np.prod(w, axis=0)
    if dtype_of(dtype).kind in "iu":
        np.testing.assert_array_equal(got, ref)
        return
    # each partial result rounded once more: n roundings of values bounded by sum/prod of |x|
    size = np.sum(np.abs(w), axis=0) if op == "sum" else np.prod(np.abs(w), axis=0)
    tol = bound(dtype, n=len(xs)) * size
    assert np.all(np.abs(got - ref) <= tol), (dtype, op, got, ref)


def _put(group, arrays):
    bufs = [d.to_device(a) for d, a in zip(group, arrays)]
    for b in bufs:
        b.result(60)
    return bufs


def _issued_by_caller(posted, group):
    """Lists of the Collective messages each member is posted from now on."""
    return [posted(d, Collective) for d in group]


@pytest.mark.parametrize("op", ("sum", "max", "min", "prod"))
@pytest.mark.parametrize("dtype", COLLECTIVE_DTYPES)
def test_all_reduce_against_numpy(group, mode, posted, rng, dtype, op):
    n = len(group)
    xs = _inputs(rng, n, 33, dtype)
    bufs = _put(group, xs)
    outs = [d.alloc((33,), xs[0].dtype) for d in group]
    seen = _issued_by_caller(posted, group)
    try:
        group.comm.all_reduce(bufs, outs, op=op).result(60)
    except (gpumsg.LibraryError, gpumsg.CollectiveError) as exc:  # fp8: NCCL >= 2.19 on GPUs
        assert dtype in ("e4m3", "e5m2") and "2.19" in str(exc), exc
        return
    for r, d in enumerate(group):
        _check_reduction(d.copy_to_host(outs[r]).result(60), xs, op, dtype)
        # in place untouched: the inputs are read only
        np.testing.assert_array_equal(d.copy_to_host(bufs[r]).result(60), xs[r])
    if group[0].backend == "sim":  # nothing else posts to these members meanwhile
        assert all((len(s) == 0) == (mode == "caller") for s in seen), [len(s) for s in seen]


def test_ordered_with_each_members_work(group, mode, posted, rng):
    """Every member's input is uploaded (H2D stream) and not waited for, the all-reduce
    (compute) must wait for it; its result is read back (D2H) and overwritten (compute) at
    once. On the simulator the uploads are held back by hangs; on GPUs they are 32 MiB."""
    sim = group[0].backend == "sim"
    n = len(group)
    size = 1000 if sim else 8 << 20
    xs = _inputs(rng, n, size, "f32")
    bufs = [d.alloc((size,), np.float32) for d in group]
    for b in bufs:
        b.result(60)
    if sim:
        for r, d in enumerate(group):
            d.inject_fault("hang", stream="h2d", seconds=0.1 * (r + 1))
        for d in group:
            d.stats().result(60)  # the hang is enqueued, the member idle again
    for r, d in enumerate(group):
        d.copy_from_host(bufs[r], xs[r])  # not waited for
    seen = _issued_by_caller(posted, group)
    fut = group.comm.all_reduce(bufs)
    reads = [d.copy_to_host(b) for d, b in zip(group, bufs)]
    for d, b in zip(group, bufs):
        d.memset(b, 0)  # a later write waits for the all-reduce and the read
    fut.result(60)
    for r in range(n):
        _check_reduction(reads[r].result(60), xs, "sum", "f32")
        assert not group[r].copy_to_host(bufs[r]).result(60).any()
    if sim:
        assert all((len(s) == 0) == (mode == "caller") for s in seen)


def test_per_rank_futures_asked_for_before_the_batch_is_issued(group, mode, rng):
    """``fut.ranks`` of a group's future, asked for before the group issues anything: each
    rank's future is answered with the whole (a waiter on one alone leads the members), and
    asking again gives the same futures; a future asked for after the answer is done at
    once."""
    n = len(group)
    xs = _inputs(rng, n, 12, "f32")
    bufs = _put(group, xs)
    with group.comm.group() as fut:
        ranks = fut.ranks
        assert not any(f.done() for f in ranks)
        group.comm.all_reduce(bufs)
    for f in reversed(ranks):
        assert f.result(60) is None
    assert fut.ranks is ranks and fut.done()
    for r, d in enumerate(group):
        _check_reduction(d.copy_to_host(bufs[r]).result(60), xs, "sum", "f32")
    later = group.comm.all_reduce(bufs)
    later.result(60)
    assert len(later.ranks) == n and all(f.done() and f.result() is None for f in later.ranks)


def test_several_buffers_in_one_call(group, mode, rng):
    n = len(group)
    xs = _inputs(rng, n, 17, "f32")
    ys = _inputs(rng, n, (3, 5), "f64")
    zs = _inputs(rng, n, 9, "i32")
    a, b, c = _put(group, xs), _put(group, ys), _put(group, zs)
    outs = [[d.alloc((17,), np.float32), d.alloc((3, 5), np.float64), d.alloc((9,), np.int32)]
            for d in group]
    fut = group.comm.all_reduce([[a[r], b[r], c[r]] for r in range(n)], outs, op="max")
    fut.result(60)
    assert len(fut.ranks) == n and all(f.done() for f in fut.ranks)
    for r, d in enumerate(group):
        for out, ins, dt in zip(outs[r], (xs, ys, zs), ("f32", "f64", "i32")):
            _check_reduction(d.copy_to_host(out).result(60), ins, "max", dt)
    group.comm.all_reduce([[a[r], b[r]] for r in range(n)]).result(60)  # in place
    for r, d in enumerate(group):
        _check_reduction(d.copy_to_host(a[r]).result(60), xs, "sum", "f32")
        _check_reduction(d.copy_to_host(b[r]).result(60), ys, "sum", "f64")
    with pytest.raises(gpumsg.InvalidMessage, match="bufs\\[1\\]"):
        group.comm.all_reduce([[a[0], b[0]], [a[1]]] + [[a[r], b[r]] for r in range(2, n)])
    with pytest.raises(gpumsg.InvalidMessage, match="bufs"):
        group.comm.all_reduce([[a[r]] for r in range(n - 1)])


def test_pipelined_collectives_keep_their_order(group, mode, rng):
    """Many calls in a row, alternating ops on one buffer: each sees the one before."""
    n = len(group)
    xs = _inputs(rng, n, 64, "f64")
    bufs = _put(group, xs)
    futs = []
    for _ in range(6):
        futs.append(group.comm.all_reduce(bufs, op="max"))
        futs.append(group.comm.all_reduce(bufs, op="sum"))
    for f in futs:
        f.result(60)
    ref = np.max(xs, axis=0)
    for _ in range(6):
        ref = n * ref  # max over equal values, then n times it
    for r, d in enumerate(group):
        np.testing.assert_allclose(d.copy_to_host(bufs[r]).result(60), ref, rtol=1e-12)


def test_busy_member_posts_the_messages(group, posted, rng):
    """A member whose device thread is stuck cannot lend its turn: the caller gives back
    the turns it took and posts one message per member, and the answer is the same."""
    if group[0].backend != "sim":
        pytest.skip("needs an injected stall")
    n = len(group)
    xs = _inputs(rng, n, 8, "f32")
    bufs = _put(group, xs)
    seen = _issued_by_caller(posted, group)
    group[-1].inject_fault("stall", seconds=0.3)  # its device thread holds its turn
    time.sleep(0.05)
    fut = group.comm.all_reduce(bufs)
    fut.result(60)
    assert all(len(s) == 1 for s in seen), [len(s) for s in seen]
    for r, d in enumerate(group):
        _check_reduction(d.copy_to_host(bufs[r]).result(60), xs, "sum", "f32")
    seen = _issued_by_caller(posted, group)  # idle again: the caller issues
    group.comm.all_reduce(bufs).result(60)
    assert all(len(s) == 0 for s in seen)


def test_unusable_buffer_fails_every_rank_with_its_error(group, rng):
    if group[0].backend != "sim":
        pytest.skip("needs an injected allocation failure")
    n = len(group)
    xs = _inputs(rng, n, 8, "f32")
    bufs = _put(group, xs)
    outs = [d.alloc((8,), np.float32) for d in group]
    group[-1].inject_fault("oom", count=2).result(60)  # past the trim-and-retry
    broken = group[-1].alloc((8,), np.float32)  # its allocation fails
    with pytest.raises(gpumsg.OutOfMemory):
        broken.result(60)
    fut = group.comm.all_reduce(bufs[:-1] + [broken.ref], outs)
    for f in [fut, *fut.ranks]:
        with pytest.raises(gpumsg.DependencyFailed):
            f.result(60)
    for r, d in enumerate(group):  # nothing was written: the outputs hold no valid contents
        with pytest.raises(gpumsg.DependencyFailed):
            d.copy_to_host(outs[r]).result(60)
        np.testing.assert_array_equal(d.copy_to_host(bufs[r]).result(60), xs[r])
    stale = group[0].alloc((8,), np.float32)
    ref = stale.ref
    stale.result(60).free().result(60)
    fut = group.comm.all_reduce([ref] + bufs[1:], outs)
    with pytest.raises(gpumsg.GpuRefStale):
        fut.result(60)
    with pytest.raises(gpumsg.DependencyFailed):
        group[1].copy_to_host(outs[1]).result(60)
    group.comm.all_reduce(bufs).result(60)  # the communicator still serves
    for r, d in enumerate(group):
        _check_reduction(d.copy_to_host(bufs[r]).result(60), xs, "sum", "f32")


def test_wrong_device_is_refused_at_the_call(group, mode):
    bufs = [d.alloc((4,), np.float32) for d in group]
    with pytest.raises(gpumsg.InvalidMessage, match="rank 0"):
        group.comm.all_reduce([bufs[1], bufs[0]] + bufs[2:])
    with pytest.raises(gpumsg.InvalidMessage, match="bufs"):
        group.comm.all_reduce(bufs[:-1])


def test_closed_member_fails_every_rank(mode, rng):
    g = gpumsg.open_devices([0, 1, 2], backend="sim")
    try:
        comm = g.nccl(timeout=5.0)
        bufs = _put(g, _inputs(rng, 3, 4, "f32"))
        refs = [b.ref for b in bufs]
        g[2].close()
        with pytest.raises(gpumsg.GpuRefStale):
            comm.all_reduce(bufs)  # its buffers are stale at the call
        fut = comm.all_reduce(refs)
        for f in [fut, *fut.ranks]:
            with pytest.raises(gpumsg.CollectiveError):
                f.result(30)
    finally:
        g.close()


def test_peer_copies_issued_by_the_caller(group, mode, posted, rng):
    """Both directions between the first two members, into a buffer and allocating, each
    ordered after the source's upload (held back) and before the destination's overwrite."""
    if group[0].backend != "sim":
        pytest.skip("needs injected hangs")
    a, b = group[0], group[1]
    x, y = (rng.standard_normal(256).astype(np.float32) for _ in range(2))
    xa, yb = a.alloc((256,), np.float32), b.alloc((256,), np.float32)
    into = b.alloc((256,), np.float32)
    for f in (b.copy_peer(into, xa), a.copy_peer(src=yb)):  # peer access enabled here
        f.result(60)
    seen = [posted(d, PeerCopySend, PeerCopyRecv) for d in (a, b)]
    a.inject_fault("hang", stream="h2d", seconds=0.2)
    a.stats().result(60)  # answered once the device thread has enqueued the hang: a is idle
    a.copy_from_host(xa, x)
    b.copy_from_host(yb, y)
    f1 = b.copy_peer(into, xa)
    f2 = a.copy_peer(src=yb)  # allocating on a
    f3 = b.copy_peer(src=xa)  # after xa's upload, held back on a
    cleared = b.memset(into, 0)  # waits for the copy
    np.testing.assert_array_equal(b.copy_to_host(into).result(60), np.zeros(256, np.float32))
    f1.result(60)
    cleared.result(60)
    assert not b.copy_to_host(into).result(60).any()  # the memset came last
    back = f2.result(60)
    np.testing.assert_array_equal(a.copy_to_host(back).result(60), y)
    np.testing.assert_array_equal(b.copy_to_host(f3.result(60)).result(60), x)
    if mode == "caller":
        assert not seen[0] and not seen[1]
    else:
        assert len(seen[0]) == len(seen[1]) == 3
    b.copy_peer(into, xa).result(60)
    np.testing.assert_array_equal(b.copy_to_host(into).result(60), x)


def test_bad_mode_is_refused_naming_the_variable(group):
    bufs = [d.alloc((4,), np.float32) for d in group]
    with gpumsg.config.configured(multi_issue="both"):
        with pytest.raises(gpumsg.InvalidMessage, match="GPUMSG_MULTI_ISSUE") as info:
            group.comm.all_reduce(bufs)
    assert info.value.field == "GPUMSG_MULTI_ISSUE"
    group.comm.all_reduce(bufs).result(60)  # still serves


def test_pending_array_chains_are_computed_first(mode, rng):
    """A fused element-wise chain that reads a buffer (array_api holds it back) is computed
    before a collective or a peer copy writes that buffer, as before any message posted."""
    import gpumsg.array_api as xp

    with gpumsg.open_devices([0, 1], backend="sim") as g:
        comm = g.nccl(timeout=30)
        xs = _inputs(rng, 2, 64, "f32")
        arrays = [xp.asarray(x, device=d) for x, d in zip(xs, g)]
        bufs = [a.buffer for a in arrays]  # taken before the chains exist
        doubled = [a * 2 + 1 for a in arrays]  # pending: reads each array's buffer
        comm.all_reduce(bufs).result(30)
        for x, y in zip(xs, doubled):
            np.testing.assert_allclose(np.asarray(y), x * 2 + 1, rtol=1e-6)
        src = xp.asarray(xs[0], device=g[0])
        dst = xp.asarray(xs[1], device=g[1])
        into, frm = dst.buffer, src.buffer
        pending = dst - 1  # reads dst's buffer
        g[1].copy_peer(into, frm).result(30)
        np.testing.assert_allclose(np.asarray(pending), xs[1] - 1, rtol=1e-6)
        np.testing.assert_allclose(np.asarray(dst), xs[0], rtol=0)
