"""Conjugate gradient on the 2-D Poisson equation, the textbook loop, in float64.

The 5-point Laplacian of an ``n x n`` grid (Dirichlet boundary: 4 on the diagonal, -1 for each
neighbour) is built on the host as CSR with NumPy and handed to cuSPARSE; each iteration is one
SpMV (cuSPARSE), two dot products and three AXPY-style updates (cuBLAS). The two scalars of an
iteration, ``p.Ap`` and ``r.r``, are read back to the host every time, as a user writing CG from
BLAS calls does: the loop is paced by two round trips per iteration, not by the GPU.

The answer is checked against the same iterations in NumPy float64 (the stencil applied with
array slices, so the CSR build is checked too)::

    python examples/cg_poisson.py                  # on a GPU: 64^2 and 1024^2 grids, 100 iterations
    python examples/cg_poisson.py --backend sim    # the NumPy simulator: 32^2, 30 iterations
    python examples/cg_poisson.py --size full      # the full sizes wherever it runs

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

#: grid sides and iterations of a full run (on a GPU), and of a small one (the simulator, CI)
GRIDS, ITERS = (64, 1024), 100
SMALL_GRIDS, SMALL_ITERS = (32,), 30
#: relative distance allowed between the GPU's iterate and NumPy's: both are float64, but the
#: GPU sums its dot products in another order, and CG carries those roundings forward
TOLERANCE = 1e-6


def poisson_csr(n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The 5-point Laplacian of an ``n x n`` grid (row-major unknowns) as CSR arrays
    ``(indptr, indices, data)``: int32 indices, float64 values, columns sorted in each row."""
    size = n * n
    idx = np.arange(size)
    i, j = idx // n, idx % n
    offsets = np.array([-n, -1, 0, 1, n])  # ascending: each row's columns come out sorted
    values = np.array([-1.0, -1.0, 4.0, -1.0, -1.0])
    valid = np.stack([i > 0, j > 0, np.ones(size, bool), j < n - 1, i < n - 1], axis=1)
    cols = idx[:, None] + offsets[None, :]
    indices = cols[valid].astype(np.int32)
    data = np.broadcast_to(values, valid.shape)[valid].astype(np.float64)
    indptr = np.concatenate([[0], np.cumsum(valid.sum(axis=1))]).astype(np.int32)
    return indptr, indices, data


def apply_laplacian(x: np.ndarray, n: int) -> np.ndarray:
    """``A @ x`` for the 5-point Laplacian, with array slices (the NumPy reference)."""
    g = x.reshape(n, n)
    y = 4.0 * g
    y[1:, :] -= g[:-1, :]
    y[:-1, :] -= g[1:, :]
    y[:, 1:] -= g[:, :-1]
    y[:, :-1] -= g[:, 1:]
    return y.reshape(-1)


def cg_numpy(b: np.ndarray, n: int, iters: int) -> tuple[np.ndarray, list[float]]:
    """The same iterations as :func:`cg` in NumPy float64: ``(x, [r.r after each])``."""
    x = np.zeros_like(b)
    r = b.copy()
    p = b.copy()
    rr = float(r @ r)
    history = []
    for _ in range(iters):
        ap = apply_laplacian(p, n)
        alpha = rr / float(p @ ap)
        x += alpha * p
        r -= alpha * ap
        rr_new = float(r @ r)
        p = r + (rr_new / rr) * p
        rr = rr_new
        history.append(rr)
    return x, history


@dataclass
class Problem:
    """A Poisson system on a device: the matrix, the right-hand side and CG's vectors."""

    n: int
    b_host: np.ndarray
    a: Any   # the CSR matrix (cuSPARSE descriptor over the three buffers below)
    csr: tuple[Any, Any, Any]
    b: Any
    x: Any
    r: Any
    p: Any
    ap: Any

    def free(self) -> None:
        self.a.free()
        for buf in (*self.csr, self.b, self.x, self.r, self.p, self.ap):
            buf.free()


def setup(dev: gpumsg.Device, n: int, seed: int | None = None) -> Problem:
    """Upload the ``n x n`` Poisson matrix and a random right-hand side; allocate x, r, p, Ap."""
    rng = np.random.default_rng(seed)
    b_host = rng.standard_normal(n * n)
    indptr, indices, data = poisson_csr(n)
    csr = tuple(dev.to_device(arr).result() for arr in (indptr, indices, data))
    a = dev.cusparse.from_buffers("csr", (n * n, n * n), *csr)
    b = dev.to_device(b_host).result()
    x, r, p, ap = (dev.alloc((n * n,), np.float64).result() for _ in range(4))
    return Problem(n, b_host, a, csr, b, x, r, p, ap)


def cg(dev: gpumsg.Device, prob: Problem, iters: int) -> list[float]:
    """``iters`` CG iterations on ``A x = b`` from ``x = 0``; x is left in ``prob.x``.
    Returns ``r.r`` after each iteration (each one read to the host as the loop runs)."""
    blas, sparse = dev.cublas, dev.cusparse
    x, r, p, ap = prob.x, prob.r, prob.p, prob.ap
    dev.memset(x, 0)
    blas.copy(prob.b, r)
    blas.copy(prob.b, p)
    rr = blas.dot(r, r).result()
    history = []
    for _ in range(iters):
        sparse.spmv(prob.a, p, ap)                # Ap = A p
        alpha = rr / blas.dot(p, ap).result()     # host scalar
        blas.axpy(p, x, alpha)                    # x += alpha p
        blas.axpy(ap, r, -alpha)                  # r -= alpha Ap
        rr_new = blas.dot(r, r).result()          # host scalar
        blas.scal(p, rr_new / rr)                 # p = r + beta p
        blas.axpy(r, p, 1.0)
        rr = rr_new
        history.append(rr)
    return history


def check(x: np.ndarray, history: list[float], b: np.ndarray, n: int, iters: int
          ) -> tuple[bool, float, float]:
    """Compare a CG run with NumPy's: ``(ok, relative distance of x, relative residual)``. The
    residual is recomputed from x on the host, so a wrong recurrence cannot pass for a right
    one."""
    x_ref, hist_ref = cg_numpy(b, n, iters)
    dist = float(np.linalg.norm(x - x_ref) / np.linalg.norm(x_ref))
    resid = float(np.linalg.norm(b - apply_laplacian(x, n)) / np.linalg.norm(b))
    resid_ref = float(np.linalg.norm(b - apply_laplacian(x_ref, n)) / np.linalg.norm(b))
    hist_dist = abs(history[-1] - hist_ref[-1]) / hist_ref[-1]
    ok = (len(history) == iters and dist < TOLERANCE and hist_dist < TOLERANCE
          and abs(resid - resid_ref) <= TOLERANCE * max(resid_ref, 1e-300) + 1e-12)
    return ok, dist, resid


def small_sizes(size: str, backend: str) -> bool:
    """``--size small`` or ``full`` as asked; ``auto`` (the default; ``GPUMSG_EXAMPLES_SIZE``
    overrides it): full on a GPU, small on the simulator."""
    if size == "auto":
        size = os.environ.get("GPUMSG_EXAMPLES_SIZE", "auto")
    return size == "small" or (size != "full" and backend != "cuda")


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
        small = small_sizes(args.size, dev.backend)
        grids = args.grid or (SMALL_GRIDS if small else GRIDS)
        iters = args.iters or (SMALL_ITERS if small else ITERS)
        for n in grids:
            prob = setup(dev, n)
            cg(dev, prob, 2)  # untimed: the libraries load and plan on first use
            t0 = time.perf_counter()
            history = cg(dev, prob, iters)
            x = dev.copy_to_host(prob.x).result()
            dt = time.perf_counter() - t0
            ok, dist, resid = check(x, history, prob.b_host, n, iters)
            prob.free()
            failed += not ok
            print(f"cg_poisson {n}x{n}, {iters} iterations, float64 [{dev.backend}]: "
                  f"x vs NumPy {dist:.1e}, residual {resid:.2e} "
                  f"({'ok' if ok else 'WRONG'}), {dt * 1e3 / iters:.3f} ms/iteration")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
