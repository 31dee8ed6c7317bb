"""cuSPARSE on the simulator: the handle's calls in SciPy (``scipy.sparse``) with the same
signatures and semantics. Each matrix record keeps its format and device pointers; an operation
reads the arrays from simulated memory when it runs on the stream (so it sees writes issued
before it), computes with SciPy in the matrix's dtype and writes the result back. With beta = 0
the output is not read (fresh device memory holds NaN here, as it may hold anything on a GPU).
SpGEMM keeps the structural product (entries whose products cancel stay, as in cuSPARSE) with
sorted column indices; conversions write sorted indices. One difference: ``to_dense`` of a COO
matrix with duplicate entries (only ``from_buffers`` makes one) sums them here, where cuSPARSE
keeps one of them. Workspace-size bookkeeping is the same
as the CUDA handle's (one query per operation and shape, per matrix)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ...backends.cuda._replays import direct_bound
from ...backends.sim._device import SimBackend
from ...backends.sim._numerics import solve_triangular_csr
from ...backends.sim._views import vector
from ...dtypes import dtype_of
from ...errors import InvalidMessage
from ...messages.cusparse import SparseRef
from ._handle import SizeCounter

__all__ = ["SimCusparse", "load_matrix"]

_INDEX = {"i32": np.int32, "i64": np.int64}


def _sp() -> Any:
    import scipy.sparse as sp

    return sp


def load_matrix(sim: SimBackend, ref: SparseRef, ptrs: tuple[int, int, int]) -> Any:
    """A SciPy copy of the matrix ``ref`` whose arrays are at ``ptrs`` in simulated memory."""
    sp = _sp()
    it, vt = _INDEX[ref.index_dtype], dtype_of(ref.dtype)
    p, i, v = ptrs
    rows, cols = ref.shape
    nnz, b = ref.nnz, ref.block
    idx = np.array(vector(sim, i, nnz, 1, it))
    if ref.format == "coo":
        r = np.array(vector(sim, p, nnz, 1, it))
        val = np.array(vector(sim, v, nnz, 1, vt))
        return sp.coo_matrix((val, (r, idx)), shape=ref.shape)
    if ref.format == "bsr":
        indptr = np.array(vector(sim, p, rows // b + 1, 1, it))
        val = np.array(vector(sim, v, nnz * b * b, 1, vt)).reshape(nnz, b, b)
        return sp.bsr_matrix((val, idx, indptr), shape=ref.shape)
    n = rows if ref.format == "csr" else cols
    indptr = np.array(vector(sim, p, n + 1, 1, it))
    val = np.array(vector(sim, v, nnz, 1, vt))
    cls = sp.csr_matrix if ref.format == "csr" else sp.csc_matrix
    return cls((val, idx, indptr), shape=ref.shape)


def _op(m: Any, op: str) -> Any:
    return m if op == "N" else m.T if op == "T" else m.conj().T


def _dense(m: Any, op: str) -> np.ndarray:
    return m if op == "N" else m.T if op == "T" else m.conj().T


class _Record:
    __slots__ = ("ref", "ptrs", "keys")

    def __init__(self, ref: SparseRef, ptrs: tuple[int, int, int]) -> None:
        self.ref = ref
        self.ptrs = ptrs
        self.keys: set[tuple] = set()


class SimCusparse:
    """The simulator's cuSPARSE handle: every method enqueues the SciPy equivalent."""

    def __init__(self, ctx: Any) -> None:
        self.sim: SimBackend = ctx.backend
        self.raw_handle = id(self)
        self.matrices: dict[int, _Record] = {}
        self.plans: dict[int, dict[str, Any]] = {}
        self.sizes = SizeCounter()

    def _record(self, mid: int) -> _Record:
        rec = self.matrices.get(mid)
        if rec is None:
            raise InvalidMessage(f"sparse matrix #{mid} has no descriptor on this device "
                                 "(destroyed, or never created)", field="a")
        return rec

    def _count(self, rec: _Record, key: tuple) -> None:
        if key in rec.keys:
            self.sizes.hits += 1
        else:
            self.sizes.misses += 1
            self.sizes.size += 1
            rec.keys.add(key)

    def _load(self, rec: _Record) -> Any:
        return load_matrix(self.sim, rec.ref, rec.ptrs)

    def _vec(self, ptr: int, n: int, dtype: str) -> np.ndarray:
        return vector(self.sim, ptr, n, 1, dtype_of(dtype))

    def _mat(self, ptr: int, shape: tuple, dtype: str) -> np.ndarray:
        rows, cols = shape
        return vector(self.sim, ptr, rows * cols, 1, dtype_of(dtype)).reshape(rows, cols)

    # -- matrices ------------------------------------------------------------------------------
    def create(self, ref: SparseRef, ptr: int, idx: int, val: int) -> None:
        if ref.id in self.matrices:
            self.destroy(ref.id)
        self.matrices[ref.id] = _Record(ref, (ptr, idx, val))

    def destroy(self, mid: int) -> None:
        rec = self.matrices.pop(mid, None)
        if rec is not None:
            self.sizes.size -= len(rec.keys)

    # -- products ------------------------------------------------------------------------------
    def spmv(self, stream: Any, mid: int, op: str, alpha: Any, x: int, beta: Any, y: int,
             nx: int, ny: int) -> None:
        rec = self._record(mid)
        self._count(rec, ("spmv", op))
        dtype = rec.ref.dtype

        def run() -> None:
            a = _op(self._load(rec), op)
            yv = self._vec(y, ny, dtype)
            out = alpha * (a @ np.array(self._vec(x, nx, dtype)))
            if beta != 0:
                out = out + beta * yv
            yv[...] = out

        stream.put(run)

    # a repeated message's launcher, as the CUDA handle binds it (every launch is the full
    # call here: the record is looked up and the workspace counted each time, nothing replayed)
    def spmv_bound(self, stream: Any, mid: int, op: str, alpha: Any, x: int, beta: Any, y: int,
                   nx: int, ny: int) -> Callable[[Any], None]:
        return direct_bound("spmv", self.spmv, stream, mid, op, alpha, x, beta, y, nx, ny)

    def spmm_bound(self, stream: Any, mid: int, op: str, alpha: Any, b: int, b_shape: tuple,
                   beta: Any, c: int, c_shape: tuple) -> Callable[[Any], None]:
        return direct_bound("spmm", self.spmm, stream, mid, op, alpha, b, b_shape, beta, c,
                            c_shape)

    def replay_info(self) -> dict[str, Any]:
        """The simulator issues every call as it comes: no CUDA graphs to replay."""
        return {"enabled": False}

    def spmm(self, stream: Any, mid: int, op: str, alpha: Any, b: int, b_shape: tuple,
             beta: Any, c: int, c_shape: tuple) -> None:
        rec = self._record(mid)
        self._count(rec, ("spmm", op, b_shape[1]))
        dtype = rec.ref.dtype

        def run() -> None:
            a = _op(self._load(rec), op)
            cm = self._mat(c, c_shape, dtype)
            out = alpha * np.asarray(a @ np.array(self._mat(b, b_shape, dtype)))
            if beta != 0:
                out = out + beta * cm
            cm[...] = out

        stream.put(run)

    def spgemm_start(self, stream: Any, plan: int, a_id: int, b_id: int, alpha: Any) -> None:
        a, b = self._record(a_id), self._record(b_id)
        state: dict[str, Any] = {"kind": "spgemm", "it": _INDEX[a.ref.index_dtype]}
        self.plans[plan] = state
        sp = _sp()

        def run() -> None:
            ma, mb = self._load(a).tocsr(), self._load(b).tocsr()
            # the structural product: ones in place of values cannot cancel
            pa = sp.csr_matrix((np.ones(ma.nnz), ma.indices, ma.indptr), shape=ma.shape)
            pb = sp.csr_matrix((np.ones(mb.nnz), mb.indices, mb.indptr), shape=mb.shape)
            pattern = (pa @ pb).tocsr()
            pattern.sort_indices()
            rows = np.repeat(np.arange(pattern.shape[0]), np.diff(pattern.indptr))
            prod = (ma @ mb).tocsr()
            vals = np.asarray(prod[rows, pattern.indices]).ravel() if pattern.nnz else \
                np.zeros(0, ma.dtype)
            state["result"] = (pattern.indptr, pattern.indices,
                               (alpha * vals).astype(ma.dtype))
            state["nnz"] = int(pattern.nnz)

        stream.put(run)

    def plan_nnz(self, plan: int) -> int:
        return int(self.plans[plan]["nnz"])

    def spgemm_finish(self, stream: Any, plan: int, ptr: int, idx: int, val: int) -> None:
        state = self.plans.pop(plan, None)
        if state is None or state.get("kind") != "spgemm":
            raise InvalidMessage(f"no SpGEMM plan {plan} on this device", field="plan")

        def run() -> None:
            indptr, indices, vals = state["result"]
            n = len(indices)
            vector(self.sim, ptr, len(indptr), 1, state["it"])[...] = indptr
            vector(self.sim, idx, n, 1, state["it"])[...] = indices
            vector(self.sim, val, n, 1, vals.dtype)[...] = vals

        stream.put(run)

    def drop(self, plan: int) -> None:
        self.plans.pop(plan, None)

    def _solve(self, rec: _Record, op: str, uplo: str, diag: str, rhs: np.ndarray) -> Any:
        sp = _sp()
        n = rec.ref.shape[0]
        a = self._load(rec).tocsr()
        tri = sp.tril(a, -1 if diag == "U" else 0) if uplo == "L" else \
            sp.triu(a, 1 if diag == "U" else 0)
        if diag == "U":
            tri = tri + sp.identity(n, dtype=a.dtype)
        t = _op(tri, op).tocsr()
        lower = (uplo == "L") == (op == "N")
        # substitution with IEEE arithmetic, not spsolve_triangular (which raises on a zero
        # pivot): cuSPARSE answers inf/NaN there
        return solve_triangular_csr(t, rhs, lower) if n else rhs

    def spsv(self, stream: Any, mid: int, op: str, uplo: str, diag: str, alpha: Any, x: int,
             y: int, n: int) -> None:
        rec = self._record(mid)
        self._count(rec, ("spsv", op, uplo, diag))
        dtype = rec.ref.dtype

        def run() -> None:
            out = self._solve(rec, op, uplo, diag, alpha * np.array(self._vec(x, n, dtype)))
            self._vec(y, n, dtype)[...] = out

        stream.put(run)

    def spsm(self, stream: Any, mid: int, op: str, uplo: str, diag: str, alpha: Any, b: int,
             c: int, shape: tuple) -> None:
        rec = self._record(mid)
        self._count(rec, ("spsm", op, uplo, diag, shape[1]))
        dtype = rec.ref.dtype

        def run() -> None:
            rhs = alpha * np.array(self._mat(b, shape, dtype))
            out = self._solve(rec, op, uplo, diag, rhs) if shape[1] else rhs
            self._mat(c, shape, dtype)[...] = np.asarray(out).reshape(shape)

        stream.put(run)

    def sddmm(self, stream: Any, mid: int, opa: str, opb: str, alpha: Any, a: int,
              a_shape: tuple, b: int, b_shape: tuple, beta: Any) -> None:
        rec = self._record(mid)
        self._count(rec, ("sddmm", opa, opb, a_shape, b_shape))
        ref = rec.ref
        dtype = ref.dtype

        def run() -> None:
            ma = _dense(np.array(self._mat(a, a_shape, dtype)), opa)
            mb = _dense(np.array(self._mat(b, b_shape, dtype)), opb)
            p, i, v = rec.ptrs
            it = _INDEX[ref.index_dtype]
            indptr = np.array(vector(self.sim, p, ref.shape[0] + 1, 1, it))
            cols = np.array(vector(self.sim, i, ref.nnz, 1, it))
            rows = np.repeat(np.arange(ref.shape[0]), np.diff(indptr))
            vals = self._vec(v, ref.nnz, dtype)
            out = alpha * np.einsum("ij,ji->i", ma[rows], mb[:, cols]) if ref.nnz else \
                np.zeros(0, vals.dtype)
            if beta != 0:
                out = out + beta * vals
            vals[...] = out

        stream.put(run)

    # -- conversions ---------------------------------------------------------------------------
    def to_dense(self, stream: Any, mid: int, out: int) -> None:
        rec = self._record(mid)
        self._count(rec, ("to_dense",))

        def run() -> None:
            self._mat(out, rec.ref.shape, rec.ref.dtype)[...] = self._load(rec).toarray()

        stream.put(run)

    def dense_start(self, stream: Any, plan: int, dense: int, rows: int, cols: int, dtype: str,
                    ptr: int, index_dtype: str) -> None:
        state = {"kind": "dense", "dense": (dense, rows, cols, dtype), "it": index_dtype}
        self.plans[plan] = state

        def run() -> None:
            d = self._mat(dense, (rows, cols), dtype)
            counts = np.count_nonzero(d, axis=1)
            indptr = np.zeros(rows + 1, np.int64)
            np.cumsum(counts, out=indptr[1:])
            vector(self.sim, ptr, rows + 1, 1, _INDEX[index_dtype])[...] = indptr

        stream.put(run)

    def dense_finish(self, stream: Any, plan: int, ptr: int, idx: int, val: int) -> None:
        state = self.plans.pop(plan, None)
        if state is None or state.get("kind") != "dense":
            raise InvalidMessage(f"no dense-to-sparse plan {plan} on this device", field="plan")
        dense, rows, cols, dtype = state["dense"]
        it = _INDEX[state["it"]]

        def run() -> None:
            d = np.array(self._mat(dense, (rows, cols), dtype))
            r, c = np.nonzero(d)  # row-major order: sorted by row, then column
            vector(self.sim, idx, len(c), 1, it)[...] = c
            self._vec(val, len(c), dtype)[...] = d[r, c]

        stream.put(run)

    def convert(self, stream: Any, mid: int, src: tuple[int, int, int], ptr: int, idx: int,
                val: int) -> None:
        rec = self._record(mid)
        self._count(rec, ("convert",))
        ref = rec.ref

        def run() -> None:
            m = self._load(rec)
            out = m.tocsc() if ref.format == "csr" else m.tocsr()
            out.sort_indices()
            it = _INDEX[ref.index_dtype]
            n = ref.shape[1] if ref.format == "csr" else ref.shape[0]
            vector(self.sim, ptr, n + 1, 1, it)[...] = out.indptr
            vector(self.sim, idx, ref.nnz, 1, it)[...] = out.indices
            self._vec(val, ref.nnz, ref.dtype)[...] = out.data

        stream.put(run)

    # -- row indices <-> offsets, the sparse solve -------------------------------------------
    def compress_rows(self, stream: Any, rows: int, nnz: int, m: int, ptr: int) -> None:
        def run() -> None:
            r = np.array(vector(self.sim, rows, nnz, 1, np.int32)) if nnz else \
                np.zeros(0, np.int32)
            out = np.searchsorted(r, np.arange(m + 1), side="left")
            vector(self.sim, ptr, m + 1, 1, np.int32)[...] = out

        stream.put(run)

    def expand_rows(self, stream: Any, ptr: int, nnz: int, m: int, rows: int) -> None:
        def run() -> None:
            if nnz == 0:
                return
            p = np.array(vector(self.sim, ptr, m + 1, 1, np.int32))
            out = np.searchsorted(p, np.arange(nnz), side="right") - 1
            vector(self.sim, rows, nnz, 1, np.int32)[...] = out

        stream.put(run)

    def spsolve_qr(self, stream: Any, mid: int, ptrs: tuple[int, int, int], b: int, x: int,
                   tol: float, found: list[int]) -> None:
        """A Householder QR of the matrix without column reordering, as cuSOLVER's GPU path:
        the first column whose |R(j, j)| <= tol is reported (x is then NaN here; cuSOLVER
        leaves it undefined)."""
        rec = self._record(mid)
        ref = rec.ref
        n = ref.shape[0]
        dtype = ref.dtype

        def run() -> None:
            a = self._load(rec).toarray()
            wide = np.complex128 if np.iscomplexobj(a) else np.float64
            q, r = np.linalg.qr(a.astype(wide))
            pivots = np.abs(np.diag(r))
            bad = np.flatnonzero(pivots <= tol)
            xv = self._vec(x, n, dtype)
            if bad.size:
                found[0] = int(bad[0])
                xv[...] = np.nan
                return
            rhs = q.conj().T @ np.array(self._vec(b, n, dtype)).astype(wide)
            import scipy.linalg

            xv[...] = scipy.linalg.solve_triangular(r, rhs, lower=False)
            found[0] = -1

        stream.put(run)

    def close(self) -> None:
        self.matrices.clear()
        self.plans.clear()
