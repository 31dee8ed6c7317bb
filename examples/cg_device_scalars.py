"""Conjugate gradient with its scalars kept on the device: no host round trip per iteration.

The same 2-D Poisson problem and iterations as ``cg_poisson.py`` (float64), but alpha and beta
never reach the host. cuBLAS's reductions answer host scalars, so the dot products and updates
are four small CUDA kernels compiled with NVRTC, reading and writing a 4-element scalar
buffer ``s = [r.r, p.Ap, r.r new, iteration]``; the SpMV is cuSPARSE's. An iteration is one
SpMV and five launches, all the same messages every iteration, issued without waiting: the
host only downloads x and the history of r.r at the end.

    s[1] = p.Ap                   (cg_dot, one atomic add per block)
    x += alpha p, r -= alpha Ap   (cg_update_xr, alpha = s[0] / s[1])
    s[2] = r.r                    (cg_dot)
    p = r + beta p                (cg_update_p, beta = s[2] / s[0])
    history[s[3]] = s[2]; s[0] = s[2]; s[1] = s[2] = 0; s[3] += 1   (cg_advance, one thread)

On the simulator each kernel runs its NumPy twin (registered below). The answer is checked
against NumPy float64 as in ``cg_poisson.py``::

    python examples/cg_device_scalars.py               # on a GPU: 64^2 and 1024^2, 100 iterations
    python examples/cg_device_scalars.py --backend sim # the NumPy simulator: 32^2, 30 iterations

Exit status 0 when every grid agrees with NumPy, 1 otherwise.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

import gpumsg
from gpumsg.libs.nvrtc import sim_kernel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cg_poisson  # noqa: E402  (the problem, the NumPy reference and the check)

#: threads per block: cg_dot's shared array is sized for it
BLOCK = 256
#: at most this many blocks; the kernels' grid-stride loops cover any n
MAX_BLOCKS = 1024

SOURCE = r"""
#define BLOCK 256

// out[slot] += x . y: a grid-stride partial sum per thread, a tree in shared memory per block,
// one atomic add per block (launched with BLOCK threads per block)
extern "C" __global__ void cg_dot(const double* x, const double* y, double* out, int slot,
                                  int n) {
    __shared__ double part[BLOCK];
    double sum = 0.0;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        sum += x[i] * y[i];
    part[threadIdx.x] = sum;
    __syncthreads();
    for (int w = BLOCK / 2; w > 0; w >>= 1) {
        if (threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];
        __syncthreads();
    }
    if (threadIdx.x == 0) atomicAdd(out + slot, part[0]);
}

// x += alpha p, r -= alpha ap with alpha = s[0] / s[1]
extern "C" __global__ void cg_update_xr(double* x, double* r, const double* p, const double* ap,
                                        const double* s, int n) {
    double alpha = s[0] / s[1];
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        x[i] += alpha * p[i];
        r[i] -= alpha * ap[i];
    }
}

// p = r + beta p with beta = s[2] / s[0]
extern "C" __global__ void cg_update_p(double* p, const double* r, const double* s, int n) {
    double beta = s[2] / s[0];
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        p[i] = r[i] + beta * p[i];
}

// one thread: record r.r, make it the next iteration's, clear the sums, count the iteration
extern "C" __global__ void cg_advance(double* s, double* history) {
    int it = (int)s[3];
    history[it] = s[2];
    s[0] = s[2];
    s[1] = 0.0;
    s[2] = 0.0;
    s[3] = it + 1;
}
"""
KERNELS = ("cg_dot", "cg_update_xr", "cg_update_p", "cg_advance")


def _full_block(launch: Any) -> None:
    if launch.block[0] != BLOCK:
        raise ValueError(f"cg_dot is written for {BLOCK} threads per block, launched with "
                         f"{launch.block[0]}")


@sim_kernel("cg_dot")
def _cg_dot(launch: Any, x: np.ndarray, y: np.ndarray, out: np.ndarray, slot: np.int32,
            n: np.int32) -> None:
    _full_block(launch)
    out[int(slot)] += x[:n] @ y[:n]


@sim_kernel("cg_update_xr")
def _cg_update_xr(launch: Any, x: np.ndarray, r: np.ndarray, p: np.ndarray, ap: np.ndarray,
                  s: np.ndarray, n: np.int32) -> None:
    alpha = s[0] / s[1]
    x[:n] += alpha * p[:n]
    r[:n] -= alpha * ap[:n]


@sim_kernel("cg_update_p")
def _cg_update_p(launch: Any, p: np.ndarray, r: np.ndarray, s: np.ndarray, n: np.int32) -> None:
    beta = s[2] / s[0]
    p[:n] = r[:n] + beta * p[:n]


@sim_kernel("cg_advance")
def _cg_advance(launch: Any, s: np.ndarray, history: np.ndarray) -> None:
    it = int(s[3])
    history[it] = s[2]
    s[0], s[1], s[2], s[3] = s[2], 0.0, 0.0, it + 1


@dataclass
class DeviceScalars:
    """The compiled kernels and the scalar and history buffers of one CG run."""

    compiled: dict[str, Any]
    s: Any        # [r.r, p.Ap, r.r new, iteration], float64
    history: Any  # r.r after each iteration, float64
    iters: int

    def free(self) -> None:
        self.s.free()
        self.history.free()


def prepare(dev: gpumsg.Device, iters: int) -> DeviceScalars:
    """Compile the kernels for ``dev`` and allocate the scalars and a history of ``iters``."""
    futures = {name: dev.compile(SOURCE, name) for name in KERNELS}
    compiled = {name: f.result() for name, f in futures.items()}
    s = dev.alloc((4,), np.float64).result()
    history = dev.alloc((iters,), np.float64).result()
    return DeviceScalars(compiled, s, history, iters)


def cg(dev: gpumsg.Device, prob: cg_poisson.Problem, ds: DeviceScalars) -> Any:
    """``ds.iters`` CG iterations on ``A x = b`` from ``x = 0``, nothing waited for; x is left
    in ``prob.x`` and r.r after each iteration in ``ds.history``. Returns the last launch's
    future."""
    k, s, n = ds.compiled, ds.s, prob.n * prob.n
    grid = (min(-(-n // BLOCK), MAX_BLOCKS),)
    block = (BLOCK,)
    x, r, p, ap = prob.x, prob.r, prob.p, prob.ap
    dev.memset(x, 0)
    dev.memset(s, 0)
    dev.cublas.copy(prob.b, r)
    dev.cublas.copy(prob.b, p)
    dev.launch(k["cg_dot"], grid, block, (r, r, s, 0, n))
    done = None
    for _ in range(ds.iters):
        dev.cusparse.spmv(prob.a, p, ap)
        dev.launch(k["cg_dot"], grid, block, (p, ap, s, 1, n))
        dev.launch(k["cg_update_xr"], grid, block, (x, r, p, ap, s, n))
        dev.launch(k["cg_dot"], grid, block, (r, r, s, 2, n))
        dev.launch(k["cg_update_p"], grid, block, (p, r, s, n))
        done = dev.launch(k["cg_advance"], (1,), (1,), (s, ds.history))
    return done


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", default="auto", choices=("auto", "cuda", "sim"))
    ap.add_argument("--device", type=int, default=0)
    ap.add_argument("--size", default="auto", choices=("auto", "small", "full"),
                    help="full on a GPU and small on the simulator unless told")
    ap.add_argument("--grid", type=int, action="append", help="grid side (repeatable)")
    ap.add_argument("--iters", type=int, default=None)
    args = ap.parse_args(argv)
    failed = 0
    with gpumsg.open_device(args.device, backend=args.backend) as dev:
        small = cg_poisson.small_sizes(args.size, dev.backend)
        grids = args.grid or (cg_poisson.SMALL_GRIDS if small else cg_poisson.GRIDS)
        iters = args.iters or (cg_poisson.SMALL_ITERS if small else cg_poisson.ITERS)
        ds = prepare(dev, iters)
        for n in grids:
            prob = cg_poisson.setup(dev, n)
            cg(dev, prob, ds)  # untimed: the libraries load and plan on first use
            dev.synchronize().result()
            t0 = time.perf_counter()
            cg(dev, prob, ds)
            x = dev.copy_to_host(prob.x).result()
            dt = time.perf_counter() - t0
            history = list(dev.copy_to_host(ds.history).result())
            ok, dist, resid = cg_poisson.check(x, history, prob.b_host, n, iters)
            prob.free()
            failed += not ok
            print(f"cg_device_scalars {n}x{n}, {iters} iterations, float64 [{dev.backend}]: "
                  f"x vs NumPy {dist:.1e}, residual {resid:.2e} "
                  f"({'ok' if ok else 'WRONG'}), {dt * 1e3 / iters:.3f} ms/iteration")
        ds.free()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
