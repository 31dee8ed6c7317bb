"""Many client threads share one device: every result is checked."""

from __future__ import annotations

import threading
import time

import numpy as np

from tests.conftest import rel_err

THREADS = 8
OPS = 1000


def test_eight_threads_thousand_mixed_ops_each(dev) -> None:
    errors: list[str] = []
    done = [0] * THREADS

    def client(t: int) -> None:
        rng = np.random.default_rng()
        a_host = rng.standard_normal((16, 16)).astype(np.float32, order="F")
        a = dev.to_device(a_host)
        pending = []
        for i in range(OPS):
            kind = i % 4
            if kind == 0:  # round trip of fresh data
                x = rng.standard_normal(int(rng.integers(1, 300)))
                pending.append(("copy", x, dev.copy_to_host(dev.to_device(x))))
            elif kind == 1:  # GEMM against a fresh B
                b_host = rng.standard_normal((16, 8)).astype(np.float32, order="F")
                c = dev.alloc((16, 8), np.float32)
                dev.sgemm(a, dev.to_device(b_host), c, 16, 8, 16)
                pending.append(("gemm", a_host.astype(np.float64) @ b_host,
                                dev.copy_to_host(c)))
            elif kind == 2:  # memset a fresh buffer
                v = int(rng.integers(1, 255))
                buf = dev.alloc((64,), np.uint8)
                dev.memset(buf, v)
                pending.append(("memset", np.full(64, v, np.uint8), dev.copy_to_host(buf)))
            else:
                pending.append(("stats", None, dev.stats()))
            if len(pending) >= 32 or i == OPS - 1:
                for what, expect, fut in pending:
                    got = fut.result(timeout=120)
                    if what == "copy" or what == "memset":
                        ok = np.array_equal(got, expect)
                    elif what == "gemm":
                        ok = rel_err(got, expect) < 1e-5
                    else:
                        ok = got.total_bytes > 0
                    if not ok:
                        errors.append(f"thread {t} op {what} wrong")
                    done[t] += 1
                pending.clear()

    threads = [threading.Thread(target=client, args=(t,)) for t in range(THREADS)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=600)
    assert not errors, errors[:5]
    assert done == [OPS] * THREADS
    # every result was collected above: nothing is left queued or running. ops_in_flight is an
    # upper bound (a batch's futures are answered before its watcher counts it complete), so it
    # reaches 0 within moments, not necessarily at the first look
    deadline = time.monotonic() + 5
    load = dev.stats().result()
    while load.ops_in_flight and time.monotonic() < deadline:
        time.sleep(0.01)
        load = dev.stats().result()
    assert load.ops_in_flight == 0 and load.queue_depth == 0, load
