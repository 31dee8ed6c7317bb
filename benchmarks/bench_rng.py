"""cuRAND generators beside torch and CuPy in the same run: 256 Mi float32 standard normals.

Steady state, pipelined: each side writes into a buffer it already has (gpumsg:
``g.normal(out=buf)`` with a Philox generator; torch: ``torch.randn(out=t)`` on its default
CUDA generator, also Philox; CuPy: ``cupy.cuda.curand.generateNormal`` on a Philox generator
into an existing array, the raw cuRAND call). ``compare`` warms both up, then alternates runs of
n calls issued back to back followed by one wait (wall time around the whole run, the GPU
synchronized at both ends), medians of 5. Rows with a fresh buffer per call (the allocation
included) are separate. A probe section records which generator/ordering pairs cuRAND accepts
and whether its streams continue across calls and honour offsets (the semantics the simulator
follows)."""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
from _common import compare, write_results

import gpumsg
from gpumsg.messages.curand import NO_OFFSET_KINDS, PSEUDO_KINDS, PSEUDO_ORDERINGS, RNG_KINDS

N = 256 << 20  # 256 Mi values (1 GiB of f32)


def _moments(x: np.ndarray) -> tuple[float, float]:
    x = x.astype(np.float64)
    return float(x.mean()), float(x.std())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None, help="output folder (default: benchmarks/out)")
    ap.add_argument("--n", type=int, default=N)
    args = ap.parse_args()
    if args.out:
        os.environ["OUT"] = args.out
    n = args.n
    import torch

    rows: list[dict] = []
    nbytes = 4 * n
    extra: dict = {}
    with gpumsg.open_device(0) as dev:
        t_out = torch.empty(n, device="cuda", dtype=torch.float32)
        torch_fill = (lambda: torch.randn(n, out=t_out), torch.cuda.synchronize)

        for ordering in ("default", "best", "dynamic"):
            try:
                g = dev.curand.generator("philox", seed=1234, ordering=ordering)
                g.ready.result()
            except gpumsg.GpuError as exc:
                rows.append({"case": f"philox ordering={ordering}", "note": f"refused: {exc}"})
                continue
            out = dev.alloc((n,), "f32", order="C").result()
            last = [g.normal(out=out)]
            last[0].result()

            def ours(g=g, out=out, last=last) -> None:
                last[0] = g.normal(out=out)

            mine, theirs = compare((ours, lambda last=last: last[0].result()), torch_fill)
            m, s = _moments(dev.copy_to_host(out).result()[: 1 << 24])
            rows.append({"case": f"normal f32 256Mi into out, philox ordering={ordering}",
                         "peer": "torch.randn(out=)", "gpumsg_ms": mine * 1e3,
                         "peer_ms": theirs * 1e3, "gpumsg_GBps": nbytes / mine / 1e9,
                         "ratio": theirs / mine, "note": f"mean {m:.2e} std {s:.5f}"})
            out.free()
            g.close()

        # CuPy: the raw cuRAND host call into an existing array, Philox, on CuPy's stream
        try:
            import cupy
            from cupy.cuda import curand

            cg = curand.createGenerator(curand.CURAND_RNG_PSEUDO_PHILOX4_32_10)
            curand.setPseudoRandomGeneratorSeed(cg, 1234)
            c_out = cupy.empty(n, dtype=cupy.float32)
            curand.setStream(cg, cupy.cuda.get_current_stream().ptr)

            def cupy_fill() -> None:
                curand.generateNormal(cg, c_out.data.ptr, n, 0.0, 1.0)

            g = dev.curand.generator("philox", seed=1234)
            out = dev.alloc((n,), "f32", order="C").result()
            last = [g.normal(out=out)]
            last[0].result()
            mine, theirs = compare((lambda: last.__setitem__(0, g.normal(out=out)),
                                    lambda: last[0].result()),
                                   (cupy_fill, cupy.cuda.get_current_stream().synchronize))
            rows.append({"case": "normal f32 256Mi into out, philox", "peer":
                         "CuPy raw curand.generateNormal (Philox)", "gpumsg_ms": mine * 1e3,
                         "peer_ms": theirs * 1e3, "gpumsg_GBps": nbytes / mine / 1e9,
                         "ratio": theirs / mine})
            # where a gap to the same cuRAND call comes from: (1) CuPy's call writing into
            # gpumsg's pool memory; (2) runs of 200 calls (fixed costs amortized further);
            # (3) how long the device thread spends inside the cuRAND host call
            ptr = out.raw_device_ptr()

            def cupy_into_ours() -> None:
                curand.generateNormal(cg, ptr, n, 0.0, 1.0)

            stream_sync = cupy.cuda.get_current_stream().synchronize
            own, into_ours = compare((cupy_fill, stream_sync), (cupy_into_ours, stream_sync))
            rows.append({"case": "diagnostic: CuPy raw call into CuPy memory vs into gpumsg's "
                         "pool buffer", "peer": "CuPy raw into gpumsg memory",
                         "gpumsg_ms": own * 1e3, "peer_ms": into_ours * 1e3,
                         "ratio": into_ours / own,
                         "note": "gpumsg_ms column = CuPy into its own memory"})
            from gpumsg.libs.curand._handle import CurandHandle

            inner = CurandHandle.generate
            spent: list[float] = []

            def timed(self, *a, **k):  # noqa: ANN001, ANN002, ANN003, ANN202
                t0 = time.perf_counter()
                inner(self, *a, **k)
                spent.append(time.perf_counter() - t0)

            CurandHandle.generate = timed  # type: ignore[method-assign]
            try:
                mine, theirs = compare((lambda: last.__setitem__(0, g.normal(out=out)),
                                        lambda: last[0].result()), (cupy_fill, stream_sync),
                                       n=200)
            finally:
                CurandHandle.generate = inner  # type: ignore[method-assign]
            spent.sort()
            rows.append({"case": "normal f32 256Mi into out, philox, runs of 200 calls", "peer":
                         "CuPy raw curand.generateNormal (Philox)", "gpumsg_ms": mine * 1e3,
                         "peer_ms": theirs * 1e3, "gpumsg_GBps": nbytes / mine / 1e9,
                         "ratio": theirs / mine,
                         "note": "device thread inside the cuRAND call: median "
                                 f"{spent[len(spent) // 2] * 1e6:.1f} us, max "
                                 f"{spent[-1] * 1e6:.1f} us"})
            rs = cupy.random.RandomState(1234, method=curand.CURAND_RNG_PSEUDO_PHILOX4_32_10)
            keep: list = []

            def cupy_new() -> None:
                keep[:] = [rs.standard_normal(n, dtype=cupy.float32)]

            def ours_new() -> None:
                last[0] = g.normal((n,), "f32")

            def ours_new_wait() -> None:
                last[0].result()

            mine, theirs = compare((ours_new, ours_new_wait),
                                   (cupy_new, cupy.cuda.get_current_stream().synchronize))
            rows.append({"case": "normal f32 256Mi, new buffer per call", "peer":
                         "cupy.random.RandomState(Philox).standard_normal",
                         "gpumsg_ms": mine * 1e3, "peer_ms": theirs * 1e3,
                         "gpumsg_GBps": nbytes / mine / 1e9, "ratio": theirs / mine})
            del keep[:]
            out.free()
            g.close()
            curand.destroyGenerator(cg)
        except Exception as exc:  # noqa: BLE001
            rows.append({"case": "CuPy", "note": f"not measured: {type(exc).__name__}: {exc}"})

        # fresh buffer per call beside torch.randn allocating
        g = dev.curand.generator("philox", seed=1234)
        last = [g.normal((n,), "f32")]
        last[0].result()
        tk: list = []

        def torch_new() -> None:
            tk[:] = [torch.randn(n, device="cuda")]

        mine, theirs = compare((lambda: last.__setitem__(0, g.normal((n,), "f32")),
                                lambda: last[0].result()), (torch_new, torch.cuda.synchronize))
        rows.append({"case": "normal f32 256Mi, new buffer per call", "peer":
                     "torch.randn(device='cuda')", "gpumsg_ms": mine * 1e3,
                     "peer_ms": theirs * 1e3, "gpumsg_GBps": nbytes / mine / 1e9,
                     "ratio": theirs / mine})
        del tk[:], last[:]
        g.close()
        torch.cuda.empty_cache()

        # per-generator throughput (1 Gi values = 4 GiB would be large: 64 Mi values)
        m = 64 << 20
        out = dev.alloc((m,), "f32", order="C").result()
        for kind in RNG_KINDS:
            g = dev.curand.generator(kind, **({"seed": 7} if kind in PSEUDO_KINDS else {}))
            for dist in ("uniform", "normal"):
                try:
                    getattr(g, dist)(out=out).result()
                    t0 = time.perf_counter()
                    for _ in range(10):
                        f = getattr(g, dist)(out=out)
                    f.result()
                    dt = (time.perf_counter() - t0) / 10
                    rows.append({"case": f"{dist} f32 64Mi into out, {kind}",
                                 "gpumsg_ms": dt * 1e3, "gpumsg_GBps": 4 * m / dt / 1e9})
                except gpumsg.GpuError as exc:
                    rows.append({"case": f"{dist} f32 64Mi, {kind}", "note": f"error: {exc}"})
            g.close()
        out.free()

        extra["probe"] = probe(dev)
    notes = ["ratio = peer time / gpumsg time (> 1: gpumsg faster); wall time of n pipelined "
             "calls then one wait (n sized for >= 30 ms of the peer's work), both warmed up "
             "0.3 s, 5 alternating runs each, medians",
             "gpumsg and CuPy call the same cuRAND host function (curandGenerateNormal, Philox); "
             "torch.randn runs torch's own Philox kernel",
             "probe of cuRAND's semantics (orderings taken, stream continuation, odd lengths, "
             "create/destroy times): rng.json"]
    import json

    print(json.dumps(extra["probe"], indent=1))
    write_results("rng", rows, notes, ["case", "peer", "gpumsg_ms", "peer_ms", "gpumsg_GBps",
                                       "ratio", "note"], extra)


def probe(dev) -> dict:
    """Which (kind, ordering) pairs cuRAND takes; whether n-then-m equals n+m and offset k
    skips k values (uniform f32), per pseudo kind."""
    accepted: dict = {}
    continues: dict = {}
    for kind in PSEUDO_KINDS:
        accepted[kind] = []
        for ordering in PSEUDO_ORDERINGS:
            try:
                g = dev.curand.generator(kind, seed=5, ordering=ordering)
                g.uniform((1024,)).result()
                accepted[kind].append(ordering)
                g.close()
            except gpumsg.GpuError as exc:
                accepted[kind].append(f"!{ordering}:{type(exc).__name__}")
        try:
            whole = dev.copy_to_host(dev.curand.generator(kind, seed=5).uniform((3000,))).result()
            g = dev.curand.generator(kind, seed=5)
            a = dev.copy_to_host(g.uniform((1000,))).result()
            b = dev.copy_to_host(g.uniform((2000,))).result()
            continues[kind] = {"n_then_m": bool(np.array_equal(np.concatenate([a, b]), whole))}
            if kind not in NO_OFFSET_KINDS:
                skip = dev.copy_to_host(dev.curand.generator(kind, seed=5, offset=1000).uniform(
                    (2000,))).result()
                continues[kind]["offset_skips"] = bool(np.array_equal(skip, whole[1000:]))
        except gpumsg.GpuError as exc:
            continues[kind] = f"error: {exc}"
    lengths: dict = {}
    lifetimes: dict = {}
    for kind in RNG_KINDS:
        kw = {"seed": 5} if kind in PSEUDO_KINDS else {}
        lengths[kind] = {}
        for dist, count in (("uniform", 1), ("uniform", 3), ("uniform", 1001), ("normal", 3),
                            ("poisson", 1001), ("normal", 1 << 20)):
            try:
                g = dev.curand.generator(kind, **kw)
                kwargs = {"lam": 3.0} if dist == "poisson" else {}
                getattr(g, dist)((count,), **kwargs).result()
                lengths[kind][f"{dist}:{count}"] = "ok"
                g.close()
            except gpumsg.GpuError as exc:
                lengths[kind][f"{dist}:{count}"] = f"{type(exc).__name__}: {exc}"
        try:
            t0 = time.perf_counter()
            g = dev.curand.generator(kind, **kw)
            g.ready.result()
            t1 = time.perf_counter()
            g.uniform((1024,)).result()
            t2 = time.perf_counter()
            g.close()
            dev.synchronize().result()
            t3 = time.perf_counter()
            lifetimes[kind] = {"create_ms": (t1 - t0) * 1e3, "first_draw_ms": (t2 - t1) * 1e3,
                               "destroy_ms": (t3 - t2) * 1e3}
        except gpumsg.GpuError as exc:
            lifetimes[kind] = f"error: {exc}"
    return {"orderings": accepted, "continuation": continues, "lengths": lengths,
            "lifetimes": lifetimes}


if __name__ == "__main__":
    main()
