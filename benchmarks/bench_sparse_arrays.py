"""Sparse arrays (``gpumsg.array_api.sparse``) beside torch.sparse (CSR) and cupyx.scipy.sparse
in one process: ``y = A @ x`` on a 1M x 1M CSR matrix with 5M entries (5 per row, random
columns, int32 indices), float32, each side allocating its output per call as ``A @ x`` does;
plus the CSR -> CSC conversion and column sums of the same matrix.

Every figure is the wall time of n pipelined calls then one wait (n sized for >= 30 ms of the
peer's work), all sides warmed up, then 5 alternating runs, medians (``_common.compare_many``).
``ratio_torch`` = torch's time / gpumsg's (> 1: gpumsg faster). Each gpumsg result is checked
against SciPy in float64 first.

Where the time goes, for the SpMV row (diagnostic rows, same matrix and vector):

* ``raw spmv into y``: ``dev.cusparse.spmv(m, x, y)`` into a reused output (the array layer's
  cost removed);
* ``A @ x over torch's memory``: the same sparse array built on torch's own CUDA arrays
  (DLPack, no copy): where the arrays live, removed;
* ``A @ x, graph replay off``: a second device with ``GPUMSG_SPARSE_REPLAY=0`` (every SpMV a
  library call, not a CUDA graph replay);
* ``bare cusparseSpMV``: the library called through ctypes in a loop on torch's stream and
  arrays (the floor for any Python binding).

Also the host time to issue one ``A @ x`` (median of single calls). Writes
``sparse_arrays.{json,md}`` to the output folder.
"""

from __future__ import annotations

import os
import statistics
import time
from typing import Any

import numpy as np
import scipy.sparse as sp
from _common import compare_many, write_results

import gpumsg

ROWS = int(os.environ.get("SPARSE_ARRAYS_ROWS", "1000000"))
PER_ROW = 5


def make_matrix(rng: np.random.Generator, rows: int) -> sp.csr_matrix:
    """rows x rows, PER_ROW entries per row at random distinct columns (sorted), float32."""
    cols = np.sort(rng.integers(0, rows, (rows, PER_ROW), dtype=np.int64), axis=1)
    indptr = np.arange(0, rows * PER_ROW + 1, PER_ROW, dtype=np.int64)
    data = (rng.standard_normal(rows * PER_ROW) + 0.1).astype(np.float32)
    a = sp.csr_matrix((data, cols.reshape(-1), indptr), shape=(rows, rows))
    a.sum_duplicates()
    a.indptr = a.indptr.astype(np.int32)
    a.indices = a.indices.astype(np.int32)
    return a


def rel(out: Any, ref: np.ndarray) -> float:
    out = np.asarray(out, dtype=np.float64).reshape(ref.shape)
    return float(np.linalg.norm(out - ref) / np.linalg.norm(ref))


def timed(sides: list[tuple[Any, Any]]) -> list[float]:
    """µs per call of each (issue, finish) side, alternating runs, medians."""
    return [t * 1e6 for t in compare_many(sides)]


def spmv_row(dev: Any, xp: Any, sparse: Any, torch: Any, cupy: Any, csx: Any,
             a: sp.csr_matrix, xh: np.ndarray) -> tuple[dict, Any]:
    ref = a.astype(np.float64) @ xh.astype(np.float64)
    A = sparse.csr_matrix(a)
    x = xp.asarray(xh)
    err = rel(A @ x, ref)
    ta = torch.sparse_csr_tensor(torch.from_numpy(a.indptr).cuda(),
                                 torch.from_numpy(a.indices).cuda(),
                                 torch.from_numpy(a.data).cuda(), size=a.shape)
    tx = torch.from_numpy(xh).cuda()
    ca = csx.csr_matrix((cupy.asarray(a.data), cupy.asarray(a.indices),
                         cupy.asarray(a.indptr)), shape=a.shape)
    cx = cupy.asarray(xh)
    keep: list[Any] = [None, None, None]

    def ours() -> None:
        keep[0] = A @ x

    def theirs_torch() -> None:
        keep[1] = ta @ tx

    def theirs_cupy() -> None:
        keep[2] = ca @ cx

    def sync_ours() -> None:
        dev.synchronize().result()

    g, t, c = timed([(ours, sync_ours), (theirs_cupy, cupy.cuda.Device().synchronize),
                     (theirs_torch, torch.cuda.synchronize)])
    row = {"case": f"y = A @ x, {ROWS // 1000}k x {ROWS // 1000}k, {a.nnz / 1e6:.0f}M nnz, f32",
           "gpumsg_us": g, "torch_us": t, "cupy_us": c, "ratio_torch": t / g,
           "ratio_cupy": c / g, "rel_err": err,
           "rel_err_torch": rel(keep[1].cpu().numpy(), ref),
           "rel_err_cupy": rel(cupy.asnumpy(keep[2]), ref), "target": ">= 0.95 x torch"}
    return row, (A, x, ta, tx, ref)


def diagnostics(dev: Any, xp: Any, sparse: Any, torch: Any, a: sp.csr_matrix, xh: np.ndarray,
                peers: tuple) -> list[dict]:
    A, x, ta, tx, ref = peers
    rows = []
    handle = A._handle()
    y = dev.alloc((ROWS,), np.float32)
    err = rel(dev.copy_to_host(dev.cusparse.spmv(handle, x.buffer, y)).result(), ref)
    # the same matrix and vector adopted from torch's memory (no copy)
    At = sparse.csr_matrix((xp.from_dlpack(ta.values()), xp.from_dlpack(ta.col_indices()),
                            xp.from_dlpack(ta.crow_indices())), shape=a.shape)
    xt = xp.from_dlpack(tx)
    err_t = rel(At @ xt, ref)
    keep: list[Any] = [None]

    def raw() -> None:
        dev.cusparse.spmv(handle, x.buffer, y)

    def over_torch() -> None:
        keep[0] = At @ xt

    def ours() -> None:
        keep[0] = A @ x

    def torch_side() -> None:
        keep[0] = ta @ tx

    def sync() -> None:
        dev.synchronize().result()

    r, o, g, t = timed([(raw, sync), (over_torch, sync), (ours, sync),
                        (torch_side, torch.cuda.synchronize)])
    rows.append({"case": "diagnostic: raw spmv into a reused y", "gpumsg_us": r, "torch_us": t,
                 "ratio_torch": t / r, "rel_err": err})
    rows.append({"case": "diagnostic: A @ x over torch's memory (DLPack)", "gpumsg_us": o,
                 "torch_us": t, "ratio_torch": t / o, "rel_err": err_t})
    rows.append({"case": "diagnostic: A @ x again (beside the two above)", "gpumsg_us": g,
                 "torch_us": t, "ratio_torch": t / g})
    try:  # a diagnostic: its failure must not cost the rows above
        rows.append(bare(torch, ta, tx, ref, t))
    except Exception as exc:  # noqa: BLE001
        rows.append({"case": "diagnostic: bare cusparseSpMV", "error": repr(exc)})
    return rows


def bare(torch: Any, ta: Any, tx: Any, ref: np.ndarray, torch_us: float) -> dict:
    """cusparseSpMV through ctypes on torch's stream and arrays, descriptors and workspace made
    once (and preprocessed, as gpumsg does), 300 calls then one synchronize, median of 5."""
    import ctypes

    from _common import rate_us

    from gpumsg.libs._loader import load

    lib = load("cusparse")
    byref, vp = ctypes.byref, ctypes.c_void_p
    t = 0  # CUDA_R_32F
    h, desc, vx, vy = vp(), vp(), vp(), vp()
    lib.cusparseCreate(byref(h))
    lib.cusparseSetStream(h, torch.cuda.current_stream().cuda_stream)
    ty = torch.empty_like(tx)
    crow, col, val = ta.crow_indices(), ta.col_indices(), ta.values()
    lib.cusparseCreateCsr(byref(desc), ROWS, ROWS, val.numel(), crow.data_ptr(),
                          col.data_ptr(), val.data_ptr(), 2, 2, 0, t)
    lib.cusparseCreateDnVec(byref(vx), ROWS, tx.data_ptr(), t)
    lib.cusparseCreateDnVec(byref(vy), ROWS, ty.data_ptr(), t)
    scal = np.array([1.0, 0.0], np.float32)
    pa, pb = scal.ctypes.data, scal.ctypes.data + 4
    size = ctypes.c_size_t()
    lib.cusparseSpMV_bufferSize(h, 0, pa, desc, vx, pb, vy, t, 0, byref(size))
    buf = torch.empty(max(size.value, 1), dtype=torch.uint8, device="cuda")
    if lib.cusparseSpMV_preprocess is not None:
        lib.cusparseSpMV_preprocess(h, 0, pa, desc, vx, pb, vy, t, 0, buf.data_ptr())
    fn, hv, d, xv, yv, b = lib.cusparseSpMV, h.value, desc.value, vx.value, vy.value, \
        buf.data_ptr()
    us = rate_us(lambda: fn(hv, 0, pa, d, xv, pb, yv, t, 0, b), torch.cuda.synchronize, 300,
                 repeats=5, warmup=50)
    err = rel(ty.cpu().numpy(), ref)
    for f, o in ((lib.cusparseDestroyDnVec, vx), (lib.cusparseDestroyDnVec, vy),
                 (lib.cusparseDestroySpMat, desc), (lib.cusparseDestroy, h)):
        f(o)
    return {"case": "diagnostic: bare cusparseSpMV (ctypes, preprocessed, into y)",
            "gpumsg_us": us, "torch_us": torch_us, "ratio_torch": torch_us / us,
            "rel_err": err}


def issue_cost(dev: Any, A: Any, x: Any) -> float:
    """Host µs to issue one ``A @ x`` (median of single calls; the queue drained every 200)."""
    samples = []
    for i in range(2000):
        t0 = time.perf_counter_ns()
        A @ x
        samples.append(time.perf_counter_ns() - t0)
        if i % 200 == 199:
            dev.synchronize().result()
    dev.synchronize().result()
    return statistics.median(samples[200:]) / 1e3


def other_rows(dev: Any, sparse: Any, torch: Any, cupy: Any, csx: Any, peers: tuple,
               a: sp.csr_matrix) -> list[dict]:
    """CSR -> CSC and column sums, each side answering a new result per call."""
    A, x, ta, tx, ref = peers
    ca = csx.csr_matrix((cupy.asarray(a.data), cupy.asarray(a.indices),
                         cupy.asarray(a.indptr)), shape=a.shape)
    ref_csc = a.tocsc()
    got = A.tocsc()
    exact = bool(np.array_equal(np.asarray(got.indptr), ref_csc.indptr)
                 and np.array_equal(np.asarray(got.indices), ref_csc.indices)
                 and np.array_equal(np.asarray(got.data), ref_csc.data))
    ref_sum = np.asarray(a.astype(np.float64).sum(axis=0)).ravel()
    err_sum = rel(np.asarray(A.sum(axis=0)).ravel(), ref_sum)
    keep: list[Any] = [None]

    def sync() -> None:
        dev.synchronize().result()

    def k(fn: Any) -> Any:
        def issue() -> None:
            keep[0] = fn()
        return issue

    rows = []
    for name, ours, theirs_c, theirs_t, check in (
            ("A.tocsc()", lambda: A.tocsc(), lambda: ca.tocsc(),
             lambda: ta.to_sparse_csc(), f"exact: {exact}"),
            ("A.sum(axis=0)", lambda: A.sum(axis=0), lambda: ca.sum(axis=0),
             lambda: torch.sum(ta, dim=0), f"rel_err {err_sum:.2g}")):
        sides = [(k(ours), sync), (k(theirs_c), cupy.cuda.Device().synchronize)]
        try:  # torch may not take this call on a CSR tensor: then no torch column
            theirs_t()
            torch.cuda.synchronize()
            sides.append((k(theirs_t), torch.cuda.synchronize))
        except Exception:  # noqa: BLE001
            pass
        times = timed(sides)
        row = {"case": f"{name}, {ROWS // 1000}k x {ROWS // 1000}k, {a.nnz / 1e6:.0f}M nnz, "
               "f32", "gpumsg_us": times[0], "cupy_us": times[1], "ratio_cupy":
               times[1] / times[0], "check": check}
        if len(times) == 3:
            row.update(torch_us=times[2], ratio_torch=times[2] / times[0])
        rows.append(row)
    return rows


def main() -> None:
    import cupy
    import cupyx.scipy.sparse as csx
    import torch

    import gpumsg.array_api as xp
    from gpumsg.array_api import sparse

    rng = np.random.default_rng(0)
    a = make_matrix(rng, ROWS)
    xh = rng.standard_normal(ROWS).astype(np.float32)
    rows = []
    with gpumsg.open_device(0) as dev:
        old = xp.set_default_device(dev)
        row, peers = spmv_row(dev, xp, sparse, torch, cupy, csx, a, xh)
        rows.append(row)
        print(row, flush=True)
        rows += diagnostics(dev, xp, sparse, torch, a, xh, peers)
        for r in rows[1:]:
            print(r, flush=True)
        issue = issue_cost(dev, peers[0], peers[1])
        print({"issue_us": issue}, flush=True)
        try:
            more = other_rows(dev, sparse, torch, cupy, csx, peers, a)
        except Exception as exc:  # noqa: BLE001 - extra rows: their failure keeps the rest
            more = [{"case": "tocsc / sum rows", "error": repr(exc)}]
        rows += more
        for r in more:
            print(r, flush=True)
        replay = dev.cusparse.replay_info().result()
        xp.set_default_device(old)
        del peers
    os.environ["GPUMSG_SPARSE_REPLAY"] = "0"
    try:
        with gpumsg.open_device(0) as dev:
            old = xp.set_default_device(dev)
            r, peers = spmv_row(dev, xp, sparse, torch, cupy, csx, a, xh)
            r["case"] = "diagnostic: " + r["case"] + ", graph replay off"
            rows.append(r)
            print(r, flush=True)
            xp.set_default_device(old)
    except Exception as exc:  # noqa: BLE001 - a diagnostic
        rows.append({"case": "diagnostic: graph replay off", "error": repr(exc)})
    finally:
        del os.environ["GPUMSG_SPARSE_REPLAY"]
    notes = [
        "each side answers a new output per call (A @ x); gpumsg's from its pool, torch's and "
        "CuPy's from their caching allocators; times are µs per call in steady state (n "
        "pipelined calls then one wait, medians of 5 alternating runs)",
        "ratio_torch = torch µs / gpumsg µs (> 1: gpumsg faster); ratio_cupy likewise",
        f"host time to issue one A @ x: {issue:.1f} µs (median)",
        f"SpMV graph replays at the end of the first device: {replay}",
        "rel_err: against SciPy in float64 on the host",
    ]
    write_results("sparse_arrays", rows, notes,
                  ["case", "gpumsg_us", "torch_us", "cupy_us", "ratio_torch", "ratio_cupy",
                   "rel_err", "check", "target"], extra={"issue_us": issue})


if __name__ == "__main__":
    main()
