"""Process isolation's wire: answers packed without pickling decode to what was sent, and the
worker's device thread spins on its socket only when told to and only while idle."""

from __future__ import annotations

import socket
import threading
import time

import numpy as np
import pytest

import gpumsg
from gpumsg.memory._adaptors import MemoryStatistics
from gpumsg.service._stats import DeviceLoad
from gpumsg.supervision import _worker as worker_mod
from gpumsg.supervision._wire import (
    Receiver,
    decode_replies,
    dumps,
    encode_replies,
    message_frame,
)
from gpumsg.supervision._worker import Outbox, SocketMailbox, configured_settle, configured_spin


def _load(rng, budget, memory: bool, streams: int = 0) -> DeviceLoad:
    ints = [int(v) for v in rng.integers(0, 1 << 40, 16)]
    stats = MemoryStatistics(*ints[9:16]) if memory else None
    return DeviceLoad(f"GPU {ints[0] % 7} é", ints[1] % 8, "cuda", (9, ints[2] % 10),
                      ints[3] % 5, ints[4], ints[5], ints[6], ints[7], budget, ints[8],
                      3, 2, 1, stats, (), tuple(ints[:streams]))


def _frames(data: bytes) -> list[bytes]:
    out, off = [], 0
    while off < len(data):
        n = int.from_bytes(data[off:off + 8], "little")
        out.append(data[off + 8:off + 8 + n])
        off += 8 + n
    return out


def test_every_kind_of_answer_decodes_to_what_was_sent(rng) -> None:
    loads = [_load(rng, None, True), _load(rng, int(rng.integers(1, 1 << 50)), False, 4),
             _load(rng, 0, True, 16)]  # placements per stream of a pool of 4, of 16
    batch = [(1, None), (2, loads[0]), (3, 1 << 63), (4, {"a": [1, 2]}), (5, loads[1]),
             (-6, ValueError("no")), (7, loads[2]), (0, ("bye",))]
    got = [item for frame in _frames(encode_replies(batch)) for item in decode_replies(frame)]
    assert sorted(k for k, _ in got) == sorted(k for k, _ in batch)
    by_key = dict(got)
    for key, value in batch:
        if isinstance(value, BaseException):
            assert type(by_key[key]) is ValueError and str(by_key[key]) == "no"
        else:
            assert by_key[key] == value
    for key, sent in ((2, loads[0]), (5, loads[1]), (7, loads[2])):
        assert type(by_key[key]) is DeviceLoad and by_key[key] == sent
        assert by_key[key].memory is None or type(by_key[key].memory) is MemoryStatistics
    # the loads went packed, in one frame of their own
    assert any(bytes(f[:8]) == b"gm-load\0" for f in _frames(encode_replies(batch)))


def test_a_load_that_does_not_pack_is_pickled(rng) -> None:
    huge = _load(rng, 1 << 70, True)  # past a 64-bit field
    frames = _frames(encode_replies([(9, huge)]))
    assert [bytes(f[:8]) for f in frames] == [b"gm-pckl\0"]
    assert decode_replies(frames[0]) == [(9, huge)]


def test_the_spin_is_configured_by_the_environment(monkeypatch) -> None:
    monkeypatch.delenv("GPUMSG_WORKER_SPIN_US", raising=False)
    monkeypatch.setattr(worker_mod.os, "cpu_count", lambda: 16)
    assert configured_spin() == worker_mod.SPIN_SECONDS > 0
    monkeypatch.setattr(worker_mod.os, "cpu_count", lambda: 2)
    assert configured_spin() == 0.0
    for text, want in (("0", 0.0), ("off", 0.0), (" 120 ", 120e-6), ("1000000", 1.0)):
        monkeypatch.setenv("GPUMSG_WORKER_SPIN_US", text)
        assert configured_spin() == pytest.approx(want)
    for text in ("-1", "fast", "2e6", "nan"):
        monkeypatch.setenv("GPUMSG_WORKER_SPIN_US", text)
        with pytest.raises(ValueError, match="GPUMSG_WORKER_SPIN_US"):
            configured_spin()


def test_the_worker_settle_is_configured_by_the_environment(monkeypatch) -> None:
    from gpumsg.service._context import SETTLE_SECONDS

    monkeypatch.delenv("GPUMSG_WORKER_SETTLE_US", raising=False)
    monkeypatch.setattr(worker_mod.os, "cpu_count", lambda: 16)
    assert configured_settle() == worker_mod.WORKER_SETTLE_SECONDS > SETTLE_SECONDS
    monkeypatch.setattr(worker_mod.os, "cpu_count", lambda: 2)  # a core would be taken
    assert configured_settle() == SETTLE_SECONDS
    for text, want in (("0", SETTLE_SECONDS), ("off", SETTLE_SECONDS), (" 900 ", 900e-6),
                       ("1000000", 1.0)):
        monkeypatch.setenv("GPUMSG_WORKER_SETTLE_US", text)
        assert configured_settle() == pytest.approx(want)
    for text in ("-1", "long", "2e6"):
        monkeypatch.setenv("GPUMSG_WORKER_SETTLE_US", text)
        with pytest.raises(ValueError, match="GPUMSG_WORKER_SETTLE_US"):
            configured_settle()


def test_a_worker_is_given_its_settle(monkeypatch) -> None:
    monkeypatch.setenv("GPUMSG_WORKER_SETTLE_US", "700")
    with gpumsg.open_device(0, backend="sim", isolation="process", standby=False) as dev:
        assert dev._worker._config["settle"] == pytest.approx(700e-6)
        assert dev.stats().result(timeout=60).generation == 0
    monkeypatch.setenv("GPUMSG_WORKER_SETTLE_US", "soon")
    with pytest.raises(ValueError, match="GPUMSG_WORKER_SETTLE_US"):
        gpumsg.open_device(0, backend="sim", isolation="process", standby=False)


class _Sink:
    def send(self, frame: bytes) -> None:
        pass


def _mailbox(spin: float, idle) -> tuple[SocketMailbox, socket.socket, socket.socket]:
    a, b = socket.socketpair()
    return SocketMailbox(Receiver(b), Outbox(_Sink()), spin, idle), a, b  # type: ignore[arg-type]


def test_the_mailbox_spins_only_while_idle_and_then_blocks() -> None:
    busy = [False]
    box, client, server = _mailbox(0.05, lambda: not busy[0])
    spins = []
    rx = box._rx
    wait = rx.spin

    def counted(seconds: float) -> bool:
        t0 = time.perf_counter()
        ready = wait(seconds)
        spins.append(time.perf_counter() - t0)
        return ready

    rx.spin = counted  # type: ignore[method-assign]
    try:
        # nothing arrives within the spin: it gives up after about the spin, then blocks
        # until the frame sent later comes
        sender = threading.Timer(0.3, client.sendall, [message_frame(1, dumps("late"))])
        sender.start()
        msg, reply = box.get()
        sender.join()
        assert msg == "late" and reply.seq == 1
        assert len(spins) == 1 and 0.05 <= spins[0] < 0.29
        # a frame arriving during the spin ends it at once
        sender = threading.Timer(0.01, client.sendall, [message_frame(2, dumps("soon"))])
        sender.start()
        msg, _ = box.get()
        sender.join()
        assert msg == "soon" and len(spins) == 2 and spins[1] < 0.05
        # work in flight: no spin at all
        busy[0] = True
        client.sendall(message_frame(3, dumps("busy")))
        assert box.get()[0] == "busy" and len(spins) == 2
    finally:
        client.close()
        server.close()


def test_a_spinning_worker_answers_like_any(backend, monkeypatch, rng) -> None:
    monkeypatch.setenv("GPUMSG_WORKER_SPIN_US", "300")
    with gpumsg.open_device(0, backend=backend, isolation="process") as dev:
        x = rng.standard_normal(1000)
        buf = dev.to_device(x).result(timeout=60)
        for _ in range(50):
            assert np.array_equal(dev.copy_to_host(buf).result(timeout=60), x)
            load = dev.stats().result(timeout=60)
            assert type(load) is DeviceLoad and load.pool_used_bytes >= x.nbytes
        futures = [dev.stats() for _ in range(500)]
        assert all(f.result(timeout=60).generation == 0 for f in futures)
