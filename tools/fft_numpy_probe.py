"""Where the NumPy-shaped FFT's time goes: its pipelined time beside that of its pieces (the
explicit execute, a new FftExec message per call into one output, a new buffer dropped), and
the cuFFT replays' captures and launches during each case's rounds. Prints one line per case
(docs/performance.md, stop 36); a probe, not a benchmark: run it on both trees of an A/B."""

from __future__ import annotations

import statistics
import time

import numpy as np

import gpumsg
from gpumsg.libs.cufft import client as fc

N = 2000


def pipe(fn) -> float:
    t0 = time.perf_counter()
    last = None
    for _ in range(N):
        last = fn()
    last.result()
    return (time.perf_counter() - t0) / N * 1e6


def main() -> None:
    dev = gpumsg.open_device(0)
    rng = np.random.default_rng()
    hx = (rng.standard_normal((4, 4096)) + 1j * rng.standard_normal((4, 4096))).astype(np.complex64)
    x = dev.to_device(hx).result()
    out = dev.alloc(hx.shape, np.complex64, order="C").result()
    plan = dev.cufft.plan((4096,), 4, "c2c", "c64")
    plan.result()
    dev.fft.fft(x).result()
    recipe = next(iter(dev.fft._recipes.values()))
    p = recipe.single

    def fresh_msg_fixed_out():  # a new FftExec message per call, the same output
        return dev.send_writing(fc._UNCHECKED(p.spec, x.ref, out.ref, p.direction, p.repeat,
                                              p.x_step, p.out_step, 0, 0, recipe.scale), out)

    ma = dev.to_device(rng.standard_normal((64, 64)).astype(np.float32)).result()
    cases = {
        "numpy fft(x)": lambda: dev.fft.fft(x),
        "matmul(a, a), new output": lambda: dev.linalg.matmul(ma, ma),
        "numpy fft(x) after matmul": lambda: dev.fft.fft(x),
        "explicit execute": lambda: dev.cufft.execute(plan, x, out),
        "fresh message, fixed out": fresh_msg_fixed_out,
        "alloc + drop": lambda: dev.alloc(hx.shape, np.complex64, order="C"),
    }
    for name, fn in cases.items():
        for _ in range(300):
            fn()
        fn().result()
        before = dev.cufft.replay_info().result()
        times = [pipe(fn) for _ in range(5)]
        after = dev.cufft.replay_info().result()
        rounds = ", ".join(f"{t:.1f}" for t in times)
        captures = after.get("captures", 0) - before.get("captures", 0)
        launches = after.get("launches", 0) - before.get("launches", 0)
        print(f"{name}: {statistics.median(times):.1f} us ({rounds}); captures +{captures}, "
              f"launches +{launches}, graphs {after.get('graphs')}", flush=True)
    dev.close()


if __name__ == "__main__":
    main()
