"""Messages are pure data: frozen, slotted, picklable, comparable, validated at construction."""

from __future__ import annotations

import dataclasses
import pickle

import numpy as np
import pytest

from gpumsg import InvalidMessage
from gpumsg.messages import (
    Alloc,
    AllocPinned,
    BufRef,
    CopyDevice,
    CopyFromHost,
    CopyToHost,
    ExportSync,
    Free,
    FreePinned,
    HostRef,
    InjectFault,
    Memset,
    Message,
    Sgemm,
    SnapshotChildren,
    SnapshotContext,
    SnapshotStream,
    Stats,
    Synchronize,
    TrimMemory,
    WatchGeneration,
)


def ref(i: int = 1, shape=(8, 8), dtype: str = "f32", order: str = "F", owner: int = 7) -> BufRef:
    size = int(np.prod(shape))
    item = np.dtype({"f32": np.float32, "f64": np.float64, "u8": np.uint8}[dtype]).itemsize
    return BufRef(owner, i, 0, dtype, tuple(shape), order, size * item)


HOST = HostRef("pinned", 3, 0, 256)

GOOD = [
    Alloc(ref()),
    Free(ref()),
    CopyFromHost(ref(), HOST),
    CopyFromHost(ref(), np.arange(64, dtype=np.float32).reshape(8, 8)),
    CopyFromHost(ref(), np.arange(4, dtype=np.float32), 16),
    CopyToHost(ref()),
    CopyToHost(ref(), HOST, 0, 256),
    CopyDevice(ref(1), ref(2)),
    Memset(ref(), 7),
    Memset(ref(), 0xFFFF, 0, 128, 2),
    Synchronize(),
    Stats(),
    SnapshotContext(),
    SnapshotStream("d2h"),
    SnapshotChildren(),
    WatchGeneration(3),
    AllocPinned(100),
    FreePinned(4),
    TrimMemory(),
    InjectFault("illegal_address"),
    Sgemm(ref(1), ref(2), ref(3), 8, 8, 8, 1.5, 0.5, "T", "C", 8, 8, 8),
]


@pytest.mark.parametrize("msg", GOOD, ids=lambda m: type(m).__name__)
def test_message_is_pure_data(msg: Message) -> None:
    assert isinstance(msg, Message)
    assert dataclasses.is_dataclass(msg)
    assert not hasattr(msg, "__dict__"), "messages are slotted"
    fields = dataclasses.fields(msg)
    if fields:
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(msg, fields[0].name, None)
    again = pickle.loads(pickle.dumps(msg))
    assert again == msg
    assert type(again) is type(msg)


def test_messages_compare_by_value() -> None:
    assert Sgemm(ref(1), ref(2), ref(3), 8, 8, 8) == Sgemm(ref(1), ref(2), ref(3), 8, 8, 8)
    assert Sgemm(ref(1), ref(2), ref(3), 8, 8, 8) != Sgemm(ref(1), ref(2), ref(3), 8, 8, 4)
    a = CopyFromHost(ref(), np.ones((8, 8), np.float32))
    assert a == CopyFromHost(ref(), np.ones((8, 8), np.float32))
    assert a != CopyFromHost(ref(), np.zeros((8, 8), np.float32))


def test_sgemm_fills_leading_dimensions() -> None:
    m = Sgemm(ref(1, (4, 3)), ref(2, (3, 5)), ref(3, (4, 5)), 4, 5, 3)
    assert (m.lda, m.ldb, m.ldc) == (4, 3, 4)
    t = Sgemm(ref(1, (3, 4)), ref(2, (5, 3)), ref(3, (4, 5)), 4, 5, 3, transa=True, transb="t")
    assert (t.transa, t.transb, t.lda, t.ldb) == ("T", "T", 3, 5)


BAD = [
    (lambda: Alloc("not a buffer"), "out"),
    (lambda: Alloc(BufRef(1, 1, 0, "f32", (4,), "F", 3)), "out"),
    (lambda: Alloc(BufRef(1, 1, 0, "f32", (4,), "X", 16)), "out"),
    (lambda: CopyFromHost(ref(), [1, 2, 3]), "src"),
    (lambda: CopyFromHost(ref(), np.ones((8, 8), np.float64)), "src"),
    (lambda: CopyFromHost(ref(), np.ones((4, 16), np.float32)), "src"),
    (lambda: CopyFromHost(ref(), np.ones(70, np.float32)), "dst_offset"),
    (lambda: CopyFromHost(ref(), np.ones(4, np.float32), -4), "dst_offset"),
    (lambda: CopyFromHost(ref(), np.array([object()])), "src"),
    (lambda: CopyToHost(ref(), src_offset=300), "src_offset"),
    (lambda: CopyToHost(ref(), HostRef("pinned", 1, 0, 8)), "dst"),
    (lambda: CopyToHost(ref(), nbytes=-1), "nbytes"),
    (lambda: CopyDevice(ref(1, (2, 2)), ref(2)), "dst_offset"),
    (lambda: CopyDevice(ref(1), ref(1), 0, 8, 64), "dst_offset"),
    (lambda: Memset(ref(), 256), "value"),
    (lambda: Memset(ref(), 1, 0, 255, 2), "width"),
    (lambda: Memset(ref(), 1, width=3), "width"),
    (lambda: Memset(ref(), 1, 0, 300), "offset"),
    (lambda: SnapshotStream("copy"), "stream"),
    (lambda: WatchGeneration(-1), "after"),
    (lambda: AllocPinned(0), "nbytes"),
    (lambda: AllocPinned(10, staging=1), "staging"),
    (lambda: FreePinned("x"), "block"),
    (lambda: InjectFault("segfault"), "kind"),
    (lambda: InjectFault("hang", seconds=-1), "seconds"),
    (lambda: InjectFault("oom", count=0), "count"),
    (lambda: HostRef("disk", 1, 0, 8), "pool"),
    (lambda: Sgemm(ref(1), ref(2), ref(3), -1, 8, 8), "m"),
    (lambda: Sgemm(ref(1), ref(2), ref(3), 8, 8, 8.0), "k"),
    (lambda: Sgemm(ref(1), ref(2), ref(3), 8, 8, 9), "a"),
    (lambda: Sgemm(ref(1), ref(2), ref(3), 8, 9, 8), "b"),
    (lambda: Sgemm(ref(1), ref(2), ref(3), 9, 8, 8, lda=9), "a"),
    (lambda: Sgemm(ref(1), ref(2), ref(3), 8, 8, 8, lda=4), "lda"),
    (lambda: Sgemm(ref(1), ref(2), ref(3), 8, 8, 8, ldc=7), "ldc"),
    (lambda: Sgemm(ref(1), ref(2), ref(3), 8, 8, 8, transa="X"), "transa"),
    (lambda: Sgemm(ref(1), ref(2), ref(3), 8, 8, 8, alpha="2"), "alpha"),
    (lambda: Sgemm(ref(1), ref(2), ref(3), 8, 8, 8, beta=float("nan")), "beta"),
    (lambda: Sgemm(ref(1, dtype="f64"), ref(2), ref(3), 8, 8, 8), "a"),
    (lambda: Sgemm(ref(1), ref(2), ref(1), 8, 8, 8), "c"),
    (lambda: Sgemm(ref(1), ref(2), 3, 8, 8, 8), "c"),
    (lambda: ExportSync(ref(), stream=8), "stream"),
    (lambda: ExportSync(ref(), stream=4095), "stream"),
    (lambda: ExportSync(ref(), stream=-2), "stream"),
]


@pytest.mark.parametrize("stream", [-1, 0, 1, 2, 4096, 0x7F00_1234_5000])
def test_export_sync_takes_the_dlpack_stream_values(stream: int) -> None:
    assert ExportSync(ref(), stream=stream).stream == stream


@pytest.mark.parametrize("make,field", BAD, ids=[f"{i}-{f}" for i, (_, f) in enumerate(BAD)])
def test_invalid_field_is_named(make, field: str) -> None:
    with pytest.raises(InvalidMessage) as info:
        make()
    assert info.value.field == field
    assert field in str(info.value)


def test_fast_init_whole_stores_every_field_as_given() -> None:
    """``BufRef.whole`` (the client's mint, which has checked and derived everything) builds
    the same reference as the constructor, derived ``size`` included, without __post_init__;
    ``unchecked`` exists only where every field is an init field."""
    made = ref(3, (4, 5))
    whole = BufRef.whole(7, 3, 0, "f32", (4, 5), "F", 80, 20)  # type: ignore[attr-defined]
    assert whole == made and whole.size == made.size == 20
    assert pickle.loads(pickle.dumps(whole)) == made
    with pytest.raises(dataclasses.FrozenInstanceError):
        whole.size = 1  # type: ignore[misc]
    # stored as given: the caller's derivation is trusted (a wrong one shows, it is not redone)
    assert BufRef.whole(7, 3, 0, "f32", (4, 5), "F", 80, 99).size == 99  # type: ignore[attr-defined]
    assert not hasattr(BufRef, "unchecked") and hasattr(HostRef, "unchecked")
    assert not hasattr(HostRef, "whole")


def test_minted_reference_matches_the_checked_one(dev) -> None:
    """``Device._mint``'s fast path (a BufRef built whole) gives what the checked path gives."""
    fast = dev._mint((3, 4), np.float64, "C")
    slow = dev._mint_checked((3, 4), np.float64, "C")
    assert (fast.dtype, fast.shape, fast.order, fast.nbytes, fast.size) == \
        (slow.dtype, slow.shape, slow.order, slow.nbytes, slow.size) == ("f64", (3, 4), "C", 96, 12)
    assert fast.id != slow.id
