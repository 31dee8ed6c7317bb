"""``dev.cusparse``: device sparse matrices and the cuSPARSE messages as methods returning futures
(caller's thread).

A :class:`SparseMatrix` is the client's handle of one device sparse matrix: its three buffers
and the device-side cuSPARSE descriptor (created by the message :class:`SparseCreate` right
after the uploads, destroyed by :meth:`SparseMatrix.free`). It can be passed to later calls at
once: the device runs messages in order. Dense operands are C-ordered (row-major) buffers, like
NumPy's. Operations whose output size is not known in advance (``spgemm``, ``from_dense``) return
a future of the new matrix: their first message answers the number of entries at completion, and
a callback allocates the output and sends the second message.
"""

from __future__ import annotations

import itertools
import numbers
import threading
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

import numpy as np

from ...dtypes import dtype_name
from ...errors import InvalidMessage
from ...messages import cusparse as msgs
from ...messages._base import BufRef, as_ref
from ...messages._memo import MessageMemo
from ...messages.cublas import INT32_MAX
from ...messages.cusparse import SparseRef
from .._namespace import view

if TYPE_CHECKING:
    from ...client._device import Device

__all__ = ["Cusparse", "Sparse", "SparseMatrix"]

_ids = itertools.count(1)
_NP_INDEX = {"i32": np.int32, "i64": np.int64}


def _gather(futures: list[Future], value: Any) -> Future:
    """A future answered with ``value`` once all ``futures`` succeeded, or with the first
    failure (in completion order)."""
    out: Future = Future()
    lock = threading.Lock()
    left = [len(futures)]

    def done(f: Future) -> None:
        exc = f.exception()
        with lock:
            left[0] -= 1
            if out.done():
                return
            if exc is not None:
                out.set_exception(exc)
            elif left[0] == 0:
                out.set_result(value)

    if not futures:
        out.set_result(value)
    for f in futures:
        f.add_done_callback(done)
    return out


def _buffer(x: Any) -> Any:
    """The GpuBuffer of a GpuBuffer or its BufferFuture."""
    return getattr(x, "buffer", x)


class SparseMatrix:
    """A sparse matrix on one device (CSR, CSC, COO or BSR; see :mod:`gpumsg.messages.cusparse`).

    ``ready`` resolves to the matrix once its data is on the device and its descriptor exists
    (work sent before that is ordered after it anyway). :meth:`free` destroys the descriptor and
    frees the buffers the matrix owns (those of ``from_buffers`` belong to the caller)."""

    def __init__(self, device: Device, ref: SparseRef, buffers: tuple[Any, Any, Any],
                 ready: list[Future], owns: bool = True) -> None:
        self._dev = device
        self._ref = ref
        self._buffers = tuple(_buffer(b) for b in buffers)
        self._owns = owns
        self._freed = False
        self.ready: Future = _gather(ready, self)

    @property
    def sparse_ref(self) -> SparseRef:
        """The matrix as messages name it (raises GpuRefStale if freed or stale)."""
        if self._freed:
            from ...errors import GpuRefStale

            raise GpuRefStale(f"{self._ref.describe()} was freed")
        for b in self._buffers:
            b.ref  # noqa: B018 - raises if the buffer was freed or is stale
        return self._ref

    @property
    def shape(self) -> tuple[int, int]:
        return self._ref.shape

    @property
    def nnz(self) -> int:
        """Stored entries (BSR: stored blocks)."""
        return self._ref.nnz

    @property
    def format(self) -> str:
        return self._ref.format

    @property
    def dtype(self) -> np.dtype:
        from ...dtypes import as_dtype

        return as_dtype(self._ref.dtype)

    @property
    def index_dtype(self) -> np.dtype:
        return np.dtype(_NP_INDEX[self._ref.index_dtype])

    @property
    def block(self) -> int:
        return self._ref.block

    @property
    def buffers(self) -> tuple[Any, Any, Any]:
        """(ptr, idx, val): the GpuBuffers (CSR: indptr, indices, data; COO: row, col, data)."""
        return self._buffers

    def free(self) -> Future:
        """Destroy the device descriptor and free the owned buffers; resolves once done."""
        if self._freed:
            from ...errors import GpuRefStale

            raise GpuRefStale(f"{self._ref.describe()} was already freed")
        done = self._dev.send(msgs.SparseDestroy(self.sparse_ref))
        self._freed = True
        futures = [done]
        if self._owns:
            futures += [b.free() for b in self._buffers]
        return _gather(futures, None)

    def __del__(self) -> None:
        # a dropped matrix: its descriptor and kept workspaces go too (its owned buffers are
        # freed by their own finalizers); no reply, nothing raised (closed device, shutdown)
        if getattr(self, "_freed", True):
            return
        self._freed = True
        try:
            self._dev.port.post_unanswered(msgs.SparseDestroy.unchecked(self._ref),
                                           self._ref.val.generation)
        except Exception:  # noqa: BLE001
            pass

    def to_scipy(self, timeout: float | None = 60) -> Any:
        """Download into a SciPy sparse matrix of the same format (blocks until done)."""
        import scipy.sparse as sp

        ref = self.sparse_ref
        p, i, v = (self._dev.copy_to_host(b).result(timeout) for b in self._buffers)
        nnz, b = ref.nnz, ref.block
        rows, cols = ref.shape
        if ref.format == "coo":
            return sp.coo_matrix((v[:nnz], (p[:nnz], i[:nnz])), shape=ref.shape)
        if ref.format == "bsr":
            return sp.bsr_matrix((v[:nnz * b * b].reshape(nnz, b, b), i[:nnz],
                                  p[:rows // b + 1]), shape=ref.shape)
        n = rows if ref.format == "csr" else cols
        cls = sp.csr_matrix if ref.format == "csr" else sp.csc_matrix
        return cls((v[:nnz], i[:nnz], p[:n + 1]), shape=ref.shape)

    def __repr__(self) -> str:
        state = " freed" if self._freed else ""
        return f"<gpumsg.SparseMatrix {self._ref.describe()}{state}>"


class Cusparse:
    """Raw cuSPARSE (``dev.cusparse``): device sparse matrices, their descriptors, SpMV, SpMM,
    SpSV, SpSM, SDDMM, SpGEMM and conversions."""

    def __init__(self, device: Device) -> None:
        self._dev = device
        # an SpMV/SpMM repeated with the same matrix, buffers and arguments reuses its message
        self._memo = MessageMemo()

    def _memo_send(self, kind: str, msg_type: type, m: SparseMatrix, buffers: tuple,
                   names: tuple[str, str], args: tuple, writing: Any) -> Future:
        """``send_writing(msg_type(m, *buffers, *args), writing)`` through the memo: the message
        is built, validated and screened once per distinct call, then sent again as is.

        Every call still takes ``m.sparse_ref`` (GpuRefStale for a freed matrix, or one whose
        buffers were freed or are stale) and each buffer's ``ref`` (the memo: freed or stale
        buffers), and the device must be open. The key names the matrix by the identity of
        its SparseRef, which the kept message holds (so the id is not reused while the entry
        lives): two matrices over the same buffers never share a message."""
        dev = self._dev
        dev.port.check_open()
        ref = m.sparse_ref
        return dev.port.send_memo(self._memo.entry(
            (kind, id(ref)), buffers, args, lambda refs: msg_type(ref, *refs, *args),
            names), writing)

    # -- making matrices -----------------------------------------------------------------------
    @staticmethod
    def _dtypes(m: Any, dtype: Any, index_dtype: Any, extent: int) -> tuple[str, str]:
        name = dtype_name(dtype if dtype is not None else m.dtype, "dtype")
        if name not in msgs.SPARSE_DTYPES:
            raise InvalidMessage(f"dtype: sparse values must be one of "
                                 f"{', '.join(msgs.SPARSE_DTYPES)}, got {name}", field="dtype")
        if index_dtype is None:
            index = "i32" if extent <= INT32_MAX else "i64"
        else:
            index = dtype_name(index_dtype, "index_dtype")
            if index not in msgs.INDEX_DTYPES:
                raise InvalidMessage(f"index_dtype: must be i32 or i64, got {index}",
                                     field="index_dtype")
        return name, index

    @staticmethod
    def _scipy(matrix: Any) -> Any:
        import scipy.sparse as sp

        if sp.issparse(matrix):
            return matrix
        try:
            arr = np.asarray(matrix)
        except (TypeError, ValueError):  # a ragged list: not a matrix
            arr = np.empty(0)
        if arr.ndim != 2:
            raise InvalidMessage(f"matrix: expected a SciPy sparse matrix or a 2-D array, got "
                                 f"{type(matrix).__name__} of {arr.ndim} dimensions",
                                 field="matrix")
        try:
            return sp.csr_matrix(arr)
        except (TypeError, ValueError) as exc:
            raise InvalidMessage(f"matrix: {exc}", field="matrix") from None

    def _upload(self, fmt: str, shape: tuple[int, int], nnz: int, arrays: tuple,
                block: int = 1) -> SparseMatrix:
        dev = self._dev
        bufs = tuple(dev.to_device(np.ascontiguousarray(a)) for a in arrays)
        ref = SparseRef(next(_ids), fmt, (int(shape[0]), int(shape[1])), int(nnz), *bufs,
                        block=block)
        created = dev.send(msgs.SparseCreate(ref))
        return SparseMatrix(dev, ref, bufs, [*bufs, created])

    def csr(self, matrix: Any, dtype: Any = None, index_dtype: Any = None) -> SparseMatrix:
        """Upload a SciPy sparse matrix (or a 2-D array) as CSR: duplicates summed, column
        indices sorted. ``dtype`` (default the matrix's) f32/f64/c64/c128; ``index_dtype``
        i32 (default where it fits) or i64."""
        m = self._scipy(matrix).tocsr(copy=True)
        name, index = self._dtypes(m, dtype, index_dtype, max(*m.shape, m.nnz))
        m.sum_duplicates()
        it = _NP_INDEX[index]
        return self._upload("csr", m.shape, m.nnz, (m.indptr.astype(it), m.indices.astype(it),
                                                    m.data.astype(name_np(name))))

    def csc(self, matrix: Any, dtype: Any = None, index_dtype: Any = None) -> SparseMatrix:
        """Upload as CSC (duplicates summed, row indices sorted); as :meth:`csr`."""
        m = self._scipy(matrix).tocsc(copy=True)
        name, index = self._dtypes(m, dtype, index_dtype, max(*m.shape, m.nnz))
        m.sum_duplicates()
        it = _NP_INDEX[index]
        return self._upload("csc", m.shape, m.nnz, (m.indptr.astype(it), m.indices.astype(it),
                                                    m.data.astype(name_np(name))))

    def coo(self, matrix: Any, dtype: Any = None, index_dtype: Any = None) -> SparseMatrix:
        """Upload as COO. Entries are sorted by (row, column) on the host, as cuSPARSE needs,
        and duplicates are summed: cuSPARSE sums duplicate COO entries in products but keeps
        only one of them in ``to_dense`` (H100 run), so a canonical matrix is the only one on
        which every operation agrees with SciPy. (``from_buffers`` takes COO arrays as given.)"""
        m = self._scipy(matrix).tocoo(copy=True)
        name, index = self._dtypes(m, dtype, index_dtype, max(*m.shape, m.nnz))
        m.sum_duplicates()
        order = np.lexsort((m.col, m.row))
        it = _NP_INDEX[index]
        return self._upload("coo", m.shape, m.nnz, (m.row[order].astype(it),
                                                    m.col[order].astype(it),
                                                    m.data[order].astype(name_np(name))))

    def bsr(self, matrix: Any, block: int, dtype: Any = None,
            index_dtype: Any = None) -> SparseMatrix:
        """Upload as BSR with square ``block`` x ``block`` blocks (row-major inside a block);
        the shape must be a multiple of ``block``."""
        import scipy.sparse as sp

        if isinstance(block, bool) or not isinstance(block, (int, np.integer)) or block < 1:
            raise InvalidMessage(f"block: expected a positive int, got {block!r}", field="block")
        src = self._scipy(matrix)
        if src.shape[0] % block or src.shape[1] % block:
            raise InvalidMessage(f"block: shape {src.shape} is not a multiple of {block}",
                                 field="block")
        m = sp.bsr_matrix(src, blocksize=(block, block), copy=True)
        m.sum_duplicates()
        name, index = self._dtypes(m, dtype, index_dtype, max(*m.shape, m.nnz))
        it = _NP_INDEX[index]
        nb = m.indices.size
        return self._upload("bsr", m.shape, nb, (m.indptr.astype(it), m.indices.astype(it),
                                                 m.data.astype(name_np(name)).reshape(-1)),
                            block=int(block))

    def from_buffers(self, format: str, shape: tuple[int, int], ptr: Any, indices: Any,
                     values: Any, nnz: int | None = None, block: int = 1) -> SparseMatrix:
        """A matrix over existing device buffers (CSR: ``ptr`` the row offsets; CSC: column
        offsets; COO: the row of each entry, sorted by row; BSR: block-row offsets), which stay
        the caller's: :meth:`SparseMatrix.free` only destroys the descriptor. ``nnz`` defaults
        to the size of ``indices``."""
        refs = [as_ref(b, name)
                for name, b in (("ptr", ptr), ("indices", indices), ("values", values))]
        if nnz is None:
            nnz = refs[1].size
        if not isinstance(shape, tuple):
            shape = tuple(shape) if isinstance(shape, list) else shape
        ref = SparseRef(next(_ids), format, shape, nnz, *refs, block=block)
        created = self._dev.send(msgs.SparseCreate(ref))
        return SparseMatrix(self._dev, ref, (ptr, indices, values), [created], owns=False)

    # -- products ------------------------------------------------------------------------------
    def spmv(self, m: Any, x: Any, y: Any = None, alpha: Any = 1.0, beta: Any = 0.0,
             op: str = "N") -> Any:
        """y = alpha op(A) x + beta y; a new y (C-ordered, A's dtype) when ``y`` is None
        (then ``beta`` must be 0). Returns the future of y."""
        dev = self._dev
        if y is None:
            ref = _sparse_ref(m)
            _no_beta(beta, "y")
            rows, cols = ref.shape
            new = dev.port.mint((rows if op in ("N", "n") else cols,), ref.dtype, "F")
            return dev.port.send_new(new, msgs.SpMV(m, x, new, alpha, beta, op))
        if type(m) is SparseMatrix:  # y given: a repeated call reuses its message
            return self._memo_send("spmv", msgs.SpMV, m, (x, y), ("x", "y"), (alpha, beta, op),
                                   y)
        return dev.send_writing(msgs.SpMV(m, x, y, alpha, beta, op), y)

    def spmm(self, m: Any, b: Any, c: Any = None, alpha: Any = 1.0, beta: Any = 0.0,
             op: str = "N") -> Any:
        """C = alpha op(A) B + beta C for C-ordered B; a new C-ordered C when ``c`` is None."""
        dev = self._dev
        if c is None:
            ref = _sparse_ref(m)
            _no_beta(beta, "c")
            rb = getattr(b, "ref", None)
            if type(rb) is not BufRef or len(rb.shape) != 2:
                raise InvalidMessage("b: expected a 2-D GpuBuffer", field="b")
            rows = ref.shape[0] if op in ("N", "n") else ref.shape[1]
            new = dev.port.mint((rows, rb.shape[1]), ref.dtype, "C")
            return dev.port.send_new(new, msgs.SpMM(m, b, new, alpha, beta, op))
        if type(m) is SparseMatrix:  # c given: a repeated call reuses its message
            return self._memo_send("spmm", msgs.SpMM, m, (b, c), ("b", "c"), (alpha, beta, op),
                                   c)
        return dev.send_writing(msgs.SpMM(m, b, c, alpha, beta, op), c)

    def spsv(self, m: Any, x: Any, y: Any = None, alpha: Any = 1.0, op: str = "N",
             uplo: str = "L", diag: str = "N") -> Any:
        """Solve op(T) y = alpha x, T the ``uplo`` triangle of square CSR/COO A (``diag='U'``:
        unit diagonal assumed); a new y when ``y`` is None. Returns the future of y."""
        dev = self._dev
        if y is None:
            ref = _sparse_ref(m)
            new = dev.port.mint((ref.shape[0],), ref.dtype, "F")
            return dev.port.send_new(new, msgs.SpSV(m, x, new, alpha, op, uplo, diag))
        return dev.send_writing(msgs.SpSV(m, x, y, alpha, op, uplo, diag), y)

    def spsm(self, m: Any, b: Any, c: Any = None, alpha: Any = 1.0, op: str = "N",
             uplo: str = "L", diag: str = "N") -> Any:
        """:meth:`spsv` with several right-hand sides: solve op(T) C = alpha B for C-ordered
        n x k B; a new C-ordered C when ``c`` is None. Returns the future of C."""
        dev = self._dev
        if c is None:
            ref = _sparse_ref(m)
            rb = getattr(b, "ref", None)
            if type(rb) is not BufRef:
                raise InvalidMessage("b: expected a GpuBuffer or its future", field="b")
            new = dev.port.mint(rb.shape, getattr(ref, "dtype", rb.dtype), "C")
            return dev.port.send_new(new, msgs.SpSM(m, b, new, alpha, op, uplo, diag))
        return dev.send_writing(msgs.SpSM(m, b, c, alpha, op, uplo, diag), c)

    def sddmm(self, a: Any, b: Any, c: Any, alpha: Any = 1.0, beta: Any = 0.0,
              opa: str = "N", opb: str = "N") -> Future:
        """C = alpha (op(A) op(B)) .* spy(C) + beta C in place on CSR C's values, A and B
        dense C-ordered. Resolves to None."""
        return self._dev.send(msgs.SDDMM(a, b, c, alpha, beta, opa, opb))

    def spgemm(self, a: Any, b: Any, alpha: Any = 1.0) -> Future:
        """C = alpha A B for CSR A and B (one dtype, one index type): a future of the new CSR
        matrix C (sorted column indices)."""
        dev = self._dev
        plan = next(_ids)
        start_msg = msgs.SpGEMMStart(a, b, plan, alpha)
        rows, cols = start_msg.a.shape[0], start_msg.b.shape[1]
        proto = start_msg.a

        def make(nnz: int) -> tuple[Future, Any]:
            return self._finish_new(rows, cols, nnz, proto.dtype, proto.index_dtype,
                                    lambda ref: msgs.SpGEMMFinish(plan, ref))

        return self._two_phase(dev.send(start_msg), plan, make, (a, b))

    def _two_phase(self, start: Future, plan: int, make: Any, keep: tuple) -> Future:
        """Chain the second phase to ``start``; ``keep`` (the inputs) stays referenced until the
        second phase is done, so that no input buffer is freed between the phases."""
        dev = self._dev
        out: Future = Future()

        def started(f: Future) -> None:
            exc = f.exception()
            if exc is not None:
                try:
                    dev.send(msgs.SpGEMMDrop(plan))
                except Exception:  # noqa: BLE001 - the device may be closing; the plan dies with it
                    pass
                out.set_exception(exc)
                return
            try:
                done, matrix = make(int(f.result()))
            except BaseException as e:  # noqa: BLE001 - delivered on the future
                out.set_exception(e)
                return

            def finished(g: Future, _keep: tuple = keep) -> None:
                e = g.exception()
                if e is not None:
                    out.set_exception(e)
                else:
                    out.set_result(matrix)

            done.add_done_callback(finished)

        start.add_done_callback(started)
        return out

    def _finish_new(self, rows: int, cols: int, nnz: int, dtype: str, index: str, msg: Any,
                    ptr: Any = None) -> tuple[Future, SparseMatrix]:
        dev = self._dev
        if ptr is None:
            ptr = dev.alloc((rows + 1,), _NP_INDEX[index])
        idx = dev.alloc((nnz,), _NP_INDEX[index])
        val = dev.alloc((nnz,), dtype)
        ref = SparseRef(next(_ids), "csr", (rows, cols), nnz, ptr, idx, val)
        filled = dev.send(msg(ref))
        created = dev.send(msgs.SparseCreate(ref))
        matrix = SparseMatrix(dev, ref, (ptr, idx, val), [ptr, idx, val, filled, created])
        return matrix.ready, matrix

    # -- conversions ---------------------------------------------------------------------------
    def to_dense(self, m: Any, out: Any = None) -> Any:
        """A dense C-ordered copy of A (CSR, CSC or COO); returns the future of ``out``."""
        dev = self._dev
        if out is None:
            ref = _sparse_ref(m)
            new = dev.port.mint(ref.shape, ref.dtype, "C")
            return dev.port.send_new(new, msgs.SparseToDense(m, new))
        return dev.send_writing(msgs.SparseToDense(m, out), out)

    def from_dense(self, dense: Any, index_dtype: Any = "i32") -> Future:
        """The CSR matrix of the non-zeros of the C-ordered 2-D buffer ``dense`` (row-major
        order): a future of the new SparseMatrix."""
        dev = self._dev
        index = dtype_name(index_dtype, "index_dtype")
        if index not in msgs.INDEX_DTYPES:
            raise InvalidMessage(f"index_dtype: must be i32 or i64, got {index}",
                                 field="index_dtype")
        rd = getattr(dense, "ref", None)
        if type(rd) is not BufRef or len(rd.shape) != 2:
            raise InvalidMessage("dense: expected a 2-D GpuBuffer", field="dense")
        rows, cols = rd.shape
        plan = next(_ids)
        ptr = dev.alloc((rows + 1,), _NP_INDEX[index])
        try:
            start = dev.send(msgs.DenseToSparseStart(dense, ptr, plan))
        except BaseException:
            ptr.buffer.free()
            raise

        def make(nnz: int) -> tuple[Future, Any]:
            return self._finish_new(rows, cols, nnz, rd.dtype, index,
                                    lambda ref: msgs.DenseToSparseFinish(plan, ref), ptr)

        return self._two_phase(start, plan, make, (dense,))

    def convert(self, m: SparseMatrix, format: str) -> SparseMatrix:
        """The same matrix in the other compressed format (CSR -> CSC or CSC -> CSR; 32-bit
        indices), as a new SparseMatrix."""
        ref = _sparse_ref(m)
        if not isinstance(ref, SparseRef):
            raise InvalidMessage("a: expected a SparseMatrix", field="a")
        want = {"csr": "csc", "csc": "csr"}.get(ref.format)
        if format != want:
            raise InvalidMessage(f"format: a {ref.format} matrix converts to "
                                 f"{want or 'nothing here'}, not {format!r}", field="format")
        if ref.index_dtype != "i32":
            raise InvalidMessage(f"a: {ref.describe()}: cusparseCsr2cscEx2 takes 32-bit indices "
                                 "only", field="a")
        dev = self._dev
        n = ref.shape[1] if ref.format == "csr" else ref.shape[0]
        ptr = dev.alloc((n + 1,), np.int32)
        idx = dev.alloc((ref.nnz,), np.int32)
        val = dev.alloc((ref.nnz,), ref.dtype)
        out = SparseRef(next(_ids), format, ref.shape, ref.nnz, ptr, idx, val)
        filled = dev.send(msgs.SparseConvert(ref, out))
        created = dev.send(msgs.SparseCreate(out))
        return SparseMatrix(dev, out, (ptr, idx, val), [ptr, idx, val, filled, created])

    def compress_rows(self, rows: Any, m: int, nnz: int | None = None, ptr: Any = None) -> Any:
        """The ``m + 1`` row offsets of the first ``nnz`` (default all) row indices in ``rows``
        (i32, sorted ascending, each in [0, m)) by ``cusparseXcoo2csr``; a new i32 buffer when
        ``ptr`` is None. Returns the future of the offsets."""
        dev = self._dev
        if nnz is None:
            nnz = as_ref(rows, "rows").size
        m = _count(m, "m")
        if ptr is None:
            new = dev.port.mint((m + 1,), "i32", "F")
            return dev.port.send_new(new, msgs.CompressRows(rows, new, nnz, m))
        return dev.send_writing(msgs.CompressRows(rows, ptr, nnz, m), ptr)

    def expand_rows(self, ptr: Any, nnz: int, m: int | None = None, rows: Any = None) -> Any:
        """The row index of each of ``nnz`` entries from the ``m + 1`` (default: all of
        ``ptr``) row offsets ``ptr`` (i32) by ``cusparseXcsr2coo``; a new i32 buffer when
        ``rows`` is None. Returns the future of the row indices."""
        dev = self._dev
        if m is None:
            m = as_ref(ptr, "ptr").size - 1
        nnz = _count(nnz, "nnz")
        if rows is None:
            new = dev.port.mint((nnz,), "i32", "F")
            return dev.port.send_new(new, msgs.ExpandRows(ptr, new, nnz, m))
        return dev.send_writing(msgs.ExpandRows(ptr, rows, nnz, m), rows)

    def solve_qr(self, m: Any, b: Any, x: Any = None, tol: float = 0.0) -> tuple[Any, Future]:
        """Solve A x = b for square CSR A (i32 indices, sorted columns, no repeated entries)
        by cuSOLVER's sparse QR (``cusolverSp<t>csrlsvqr``). Returns ``(x, singular)``: x (a
        new buffer when None) and a future of the first column whose pivot is at most
        ``tol`` in magnitude, -1 when there is none (x is then the solution)."""
        dev = self._dev
        if x is None:
            ref = _sparse_ref(m)
            x = dev.alloc((ref.shape[0],), ref.dtype)
        return x, dev.send(msgs.SpSolveQR(m, b, x, tol))

    def cache_info(self) -> Future:
        """Resolves to the workspace-size counters (hits, misses, size)."""
        return self._dev.send(msgs.SparseCacheInfo())

    def replay_info(self) -> Future:
        """Resolves to how repeated SpMVs and SpMMs were replayed. An ``spmv``/``spmm`` repeated
        with the same matrix, buffers and arguments is captured as a CUDA graph the second time
        and replayed from then on (the same kernels on the same addresses). The dict says
        whether that is on (``GPUMSG_SPARSE_REPLAY=0`` turns it off; False on the simulator),
        and the SpMV graphs held, captures, launches and why capturing stopped; the same for
        SpMM under ``"spmm"``."""
        return self._dev.send(msgs.SparseReplayInfo())


#: ``dev.sparse``: SciPy's names for what cuSPARSE does here (``scipy.sparse.csr_array(m)``
#: -> ``dev.cusparse.csr_array(m)``: a SciPy matrix or a dense array made a device matrix)
Sparse = view("Sparse", "SciPy's sparse names (``dev.sparse``): device sparse arrays made from "
              "a SciPy sparse matrix or a dense array.", (Cusparse,),
              {"csr_array": "csr", "csc_array": "csc", "coo_array": "coo", "bsr_array": "bsr"})


def name_np(name: str) -> np.dtype:
    from ...dtypes import as_dtype

    return as_dtype(name)


def _sparse_ref(m: Any) -> SparseRef:
    """The SparseRef of a SparseMatrix (or the ref itself); InvalidMessage naming ``m`` for
    anything else."""
    ref = m.sparse_ref if isinstance(m, SparseMatrix) else m
    if not isinstance(ref, SparseRef):
        raise InvalidMessage(f"m: expected a SparseMatrix, got {type(m).__name__}", field="m")
    return ref


def _count(value: Any, field: str) -> int:
    """``value`` as a count for 32-bit indices (an int in [0, 2**31 - 1]), or InvalidMessage
    naming ``field``."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral) \
            or not 0 <= value <= INT32_MAX:
        raise InvalidMessage(f"{field}: expected an int in [0, 2**31 - 1], got {value!r}",
                             field=field)
    return int(value)


def _no_beta(beta: Any, out: str) -> None:
    """A new output holds nothing to scale: ``beta`` must be 0 then."""
    if not isinstance(beta, numbers.Number) or beta != 0:
        raise InvalidMessage(f"beta: a new {out} holds nothing to scale; pass beta=0 or {out}",
                             field="beta")
