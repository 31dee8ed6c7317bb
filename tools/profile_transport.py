"""Where process isolation's time goes, on this machine (performance work; no GPU needed).

Prints the floor costs the transport is made of — a ping-pong between two processes over a
socketpair, a ping-pong between two threads (SimpleQueue, and queue + Future), the pickling of
typical frames — then Stats and 64^3 SGEMM round trips and pipelined rates in thread and process
isolation, with the CPU time per operation of the client's posting thread, its reader thread
and the worker process (from /proc), and the posting thread's context switches per operation.

    python3 tools/profile_transport.py [--backend sim|cuda|auto] [--n 20000]

Writes $OUT/profile_transport.txt when OUT is set.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import pickle
import socket
import sys
import threading
from concurrent.futures import Future
from queue import SimpleQueue

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "benchmarks"))

import numpy as np  # noqa: E402
from _common import median_us, rate_us  # noqa: E402

import gpumsg  # noqa: E402
from gpumsg.messages.base import BufRef  # noqa: E402
from gpumsg.messages.blas import Sgemm  # noqa: E402
from gpumsg.messages.device import Stats  # noqa: E402
from gpumsg.supervision.codec import register  # noqa: E402

lines: list[str] = []


def say(text: str) -> None:
    print(text, flush=True)
    lines.append(text)


def _echo(sock: socket.socket) -> None:
    while True:
        data = sock.recv(65536)
        if not data:
            return
        sock.send(data)


def floors() -> None:
    ctx = mp.get_context("spawn")
    a, b = socket.socketpair()
    p = ctx.Process(target=_echo, args=(b,))
    p.start()
    b.close()

    def pingpong() -> None:
        a.send(b"x" * 100)
        a.recv(65536)

    say(f"process ping-pong (socketpair, 2 wake-ups)   {median_us(pingpong, 3000):7.1f} us")
    a.shutdown(socket.SHUT_RDWR)
    a.close()
    p.join()
    q1: SimpleQueue = SimpleQueue()
    q2: SimpleQueue = SimpleQueue()

    def echo_thread() -> None:
        while (item := q1.get()) is not None:
            if isinstance(item, Future):
                item.set_result(1)
            else:
                q2.put(item)

    t = threading.Thread(target=echo_thread)
    t.start()
    say(f"thread ping-pong (SimpleQueue, 2 wake-ups)   "
        f"{median_us(lambda: (q1.put(1), q2.get()), 3000):7.1f} us")

    def with_future() -> None:
        f: Future = Future()
        q1.put(f)
        f.result()

    say(f"thread ping-pong (queue + Future)            {median_us(with_future, 3000):7.1f} us")
    q1.put(None)
    t.join()
    r1 = BufRef(1, 1, 0, "f32", (64, 64), "F", 16384)
    r2 = BufRef(1, 2, 0, "f32", (64, 64), "F", 16384)
    for name, obj in (("Stats", Stats()), ("64^3 Sgemm", Sgemm(r1, r1, r2, 64, 64, 64))):
        _pickles(name, obj)
        register(type(obj))  # the transport's reducer (supervision/codec.py)
        _pickles(name + " (codec)", obj)


def _pickles(name: str, obj: object) -> None:
    data = pickle.dumps(obj, 5)
    say(f"pickle / unpickle {name:<20} {median_us(lambda: pickle.dumps(obj, 5), 3000):6.2f}"
        f" / {median_us(lambda: pickle.loads(data), 3000):6.2f} us ({len(data)} bytes)")


def _cpu(path: str) -> float:
    with open(path) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _switches(tid: int) -> int:
    with open(f"/proc/{os.getpid()}/task/{tid}/status") as f:
        return sum(int(line.split(":")[1]) for line in f if "ctxt_switches" in line)


def isolation_rows(backend: str, n: int) -> None:
    for iso in ("thread", "process"):
        _one(iso, backend, n)


def _one(iso: str, backend: str, n: int) -> None:
    dev = gpumsg.open_device(0, backend=backend, isolation=iso)
    try:
        a = dev.to_device(np.random.rand(64, 64).astype(np.float32, order="F")).result()
        c = dev.alloc((64, 64)).result()
        last = [dev.stats()]

        def stats() -> None:
            last[0] = dev.stats()

        def sgemm() -> None:
            last[0] = dev.sgemm(a, a, c, 64, 64, 64)

        rt = median_us(lambda: dev.stats().result(), 2000)
        rt_g = median_us(lambda: dev.sgemm(a, a, c, 64, 64, 64).result(), 2000)
        say(f"{iso:8} Stats round trip {rt:7.1f} us, 64^3 SGEMM round trip {rt_g:7.1f} us")
        for name, issue in (("Stats", stats), ("64^3 SGEMM", sgemm)):
            per = rate_us(issue, lambda: last[0].result(), n, repeats=3)
            extra = ""
            if iso == "process":
                sup = dev._worker
                wpid, reader = sup._worker.process.pid, sup._worker.reader.native_id
                me = threading.get_native_id()
                cpu = (f"/proc/{wpid}/stat", f"/proc/{os.getpid()}/task/{reader}/stat",
                       f"/proc/{os.getpid()}/task/{me}/stat")
                before = [_cpu(p) for p in cpu]
                sw0 = _switches(me)
                for _ in range(n):
                    issue()
                last[0].result()
                used = [(_cpu(p) - b) / n * 1e6 for p, b in zip(cpu, before)]
                extra = (f"; CPU per op: worker {used[0]:.1f}, client reader {used[1]:.1f},"
                         f" posting thread {used[2]:.1f} us; posting thread context "
                         f"switches per op {(_switches(me) - sw0) / n:.3f}")
            say(f"{iso:8} {name} pipelined {per:7.1f} us/op{extra}")
    finally:
        dev.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backend", default="auto")
    parser.add_argument("--n", type=int, default=20000)
    args = parser.parse_args()
    floors()
    isolation_rows(args.backend, args.n)
    out = os.environ.get("OUT")
    if out:
        with open(os.path.join(out, "profile_transport.txt"), "w") as f:
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
