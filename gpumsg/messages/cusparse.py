"""cuSPARSE generic-API messages (``dev.cusparse``): sparse matrices as device handles, SpMV, SpMM,
SpGEMM, triangular solves, SDDMM and format conversions.

A sparse matrix travels in messages as a :class:`SparseRef`: plain data naming its format,
shape, number of stored entries and the three device buffers that hold it. The device keeps one
cuSPARSE descriptor per matrix (created by :class:`SparseCreate`, destroyed by
:class:`SparseDestroy`) with the workspaces its operations need. Formats (indices 0-based):

======  ================================  =====================  ==================
format  ``ptr``                           ``idx``                ``val``
======  ================================  =====================  ==================
csr     row offsets (rows + 1)            column of each entry   nnz values
csc     column offsets (cols + 1)         row of each entry      nnz values
coo     row of each entry (sorted by row) column of each entry   nnz values
bsr     block-row offsets (rows/b + 1)    block column per block nnz * b * b values
======  ================================  =====================  ==================

(for BSR ``nnz`` counts b x b blocks, each stored row-major, as SciPy's ``bsr_matrix.data``).
Values are f32, f64, c64 or c128; ``ptr`` and ``idx`` share one index type, i32 or i64. Dense
operands are C-ordered (row-major) buffers. Every operation runs on the compute stream.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ._base import (
    BufRef,
    Message,
    _choice,
    _fail,
    _int,
    _ref,
    _scalar,
    _set,
    check_extent,
    fast_init,
    message,
)
from .cublas import INT32_MAX

__all__ = ["SparseRef", "SPARSE_DTYPES", "INDEX_DTYPES", "FORMATS", "SparseCreate",
           "SparseDestroy", "SpMV", "SpMM", "SpGEMMStart", "SpGEMMFinish", "SpSV", "SDDMM",
           "SpSM", "SparseToDense", "DenseToSparseStart", "DenseToSparseFinish", "SparseConvert",
           "SparseCacheInfo", "SparseReplayInfo", "sparse_field"]

SPARSE_DTYPES = ("f32", "f64", "c64", "c128")
INDEX_DTYPES = ("i32", "i64")
FORMATS = ("csr", "csc", "coo", "bsr")
_OPS = {"N": "N", "T": "T", "C": "C", "n": "N", "t": "T", "c": "C"}


@fast_init
@dataclasses.dataclass(frozen=True, slots=True)
class SparseRef:
    """A device sparse matrix as messages see it (see the module's table). ``id`` is minted by
    the client (unique in the process) and names the device-side descriptor. Constructing one
    checks that the buffers fit the format, the shape and ``nnz``."""

    id: int
    format: str
    shape: tuple[int, int]
    nnz: int
    ptr: BufRef
    idx: BufRef
    val: BufRef
    block: int = 1

    def __post_init__(self) -> None:
        _int(self, "id", self.id, lo=1)
        _choice(self, "format", self.format, FORMATS)
        shape = self.shape
        if (not isinstance(shape, tuple) or len(shape) != 2
                or not all(type(d) is int and 0 <= d <= INT32_MAX * 4 for d in shape)):
            raise _fail(self, "shape", f"expected (rows, cols) of non-negative ints, got {shape!r}")
        _int(self, "nnz", self.nnz)
        _int(self, "block", self.block, lo=1)
        for name in ("ptr", "idx", "val"):
            if type(getattr(self, name)) is not BufRef:
                _set(self, name, _ref(self, name, getattr(self, name)))
        if self.val.dtype not in SPARSE_DTYPES:
            raise _fail(self, "val", f"{self.val.describe()}: values must be one of "
                        f"{', '.join(SPARSE_DTYPES)}")
        if self.idx.dtype not in INDEX_DTYPES:
            raise _fail(self, "idx", f"{self.idx.describe()}: indices must be i32 or i64")
        if self.ptr.dtype != self.idx.dtype:
            raise _fail(self, "ptr", f"{self.ptr.describe()} is {self.ptr.dtype} but the indices "
                        f"are {self.idx.dtype}; cuSPARSE needs one index type")
        rows, cols = shape
        b = self.block
        if self.format == "bsr":
            if rows % b or cols % b:
                raise _fail(self, "block", f"shape {shape} is not a multiple of the block {b}")
        elif b != 1:
            raise _fail(self, "block", f"only BSR has blocks (format {self.format!r})")
        nptr = {"csr": rows + 1, "csc": cols + 1, "coo": self.nnz, "bsr": rows // b + 1}
        need = ((self.ptr, "ptr", nptr[self.format]), (self.idx, "idx", self.nnz),
                (self.val, "val", self.nnz * b * b))
        for ref, name, n in need:
            check_extent(self, name, ref, 0, ((n, 1),),
                         f"{self.format} of shape {shape} with nnz={self.nnz}")
        if self.idx.dtype == "i32" and max(self.nnz, rows, cols) > INT32_MAX:
            raise _fail(self, "idx", "32-bit indices cannot address this matrix; use i64")

    @property
    def dtype(self) -> str:
        return self.val.dtype

    @property
    def index_dtype(self) -> str:
        return self.idx.dtype

    def buffers(self) -> tuple[BufRef, BufRef, BufRef]:
        return (self.ptr, self.idx, self.val)

    def describe(self) -> str:
        return (f"sparse #{self.id} ({self.format} {self.dtype}/{self.index_dtype} "
                f"{self.shape[0]}x{self.shape[1]} nnz={self.nnz})")


def sparse_field(msg: Any, field: str, formats: tuple[str, ...] = FORMATS) -> SparseRef:
    """Coerce field ``field`` (a SparseRef, or a client SparseMatrix) to a SparseRef in one of
    ``formats``."""
    value = getattr(msg, field)
    if type(value) is not SparseRef:
        ref = getattr(value, "sparse_ref", None)
        if type(ref) is not SparseRef:
            raise _fail(msg, field, f"expected a SparseMatrix or SparseRef, got "
                        f"{type(value).__name__}")
        _set(msg, field, ref)
        value = ref
    if value.format not in formats:
        raise _fail(msg, field, f"{value.describe()}: this operation takes "
                    f"{' or '.join(formats)}, not {value.format}")
    return value


class _Sparse(Message):
    """Messages naming sparse matrices: their buffers count as the message's buffers."""

    __slots__ = ()
    __sparse__: tuple[str, ...] = ()
    __sparse_writes__: tuple[str, ...] = ()

    def refs(self) -> list[BufRef]:
        out = Message.refs(self)
        for name in type(self).__sparse__:
            out.extend(getattr(self, name).buffers())
        return out

    def written(self) -> list[BufRef]:
        out = Message.written(self)
        for name in type(self).__sparse_writes__:
            out.extend(getattr(self, name).buffers())
        return out


def _sparse_msg(sparse: tuple[str, ...] = (), sparse_writes: tuple[str, ...] = (),
                buffers: tuple[str, ...] = (), writes: tuple[str, ...] = ()) -> Any:
    def wrap(cls: Any) -> Any:
        out = message(buffers=buffers + sparse, writes=writes)(cls)
        out.__sparse__ = sparse
        out.__sparse_writes__ = sparse_writes
        return out

    return wrap


def _op(msg: Any, field: str, dtype: str) -> str:
    """Normalize an operation flag; 'C' on real values is 'T' (cuSPARSE rejects 'C' there)."""
    value = getattr(msg, field)
    out = _OPS.get(value) if isinstance(value, str) else None
    if out is None:
        raise _fail(msg, field, f"must be 'N', 'T' or 'C', got {value!r}")
    if out == "C" and dtype in ("f32", "f64"):
        out = "T"
    if out is not value:
        _set(msg, field, out)
    return out


def _dense(msg: Any, field: str, dtype: str, ndim: int, order_c: bool = True) -> BufRef:
    value = getattr(msg, field)
    ref = value if type(value) is BufRef else _ref(msg, field, value)
    if ref is not value:
        _set(msg, field, ref)
    if ref.dtype != dtype:
        raise _fail(msg, field, f"{ref.describe()} is {ref.dtype} but the sparse matrix holds "
                    f"{dtype}; the operands must share one dtype")
    if ndim == 2:
        if len(ref.shape) != 2:
            raise _fail(msg, field, f"expected a 2-D buffer, got {ref.describe()}")
        if order_c and ref.order != "C" and min(ref.shape) > 1:
            raise _fail(msg, field, f"dense operands are C-ordered (row-major); {ref.describe()} "
                        "is F-ordered")
    return ref


def _length(msg: Any, field: str, ref: BufRef, n: int) -> None:
    if ref.size != n:
        raise _fail(msg, field, f"needs {n} elements for this shape, {ref.describe()} holds "
                    f"{ref.size}")


def _alpha_beta(msg: Any, dtype: str, *names: str) -> None:
    for name in names:
        value = getattr(msg, name)
        if type(value) is float and value == value:
            continue  # the common case, without the ABC checks of _scalar
        value = _scalar(msg, name, value)
        if isinstance(value, complex) and dtype not in ("c64", "c128"):
            raise _fail(msg, name, f"a complex scalar needs complex operands, not {dtype}")
        _set(msg, name, value)


def _distinct(msg: Any, out: str, *others: str) -> None:
    o = getattr(msg, out)
    mine = (o.ptr.id, o.idx.id, o.val.id) if type(o) is SparseRef else (o.id,)
    for name in others:
        r = getattr(msg, name)
        theirs = (r.ptr.id, r.idx.id, r.val.id) if type(r) is SparseRef else (r.id,)
        for i in mine:
            if i in theirs:
                raise _fail(msg, out, f"{out} must not alias {name} ({o.describe()})")


def _plan(msg: Any) -> None:
    _int(msg, "plan", msg.plan, lo=1)


# ---------------------------------------------------------------------------------------------
# the matrix handle


@_sparse_msg(sparse=("a",))
class SparseCreate(_Sparse):
    """Create the device-side cuSPARSE descriptor of matrix ``a`` (host work only: answers at
    once). Its buffers must exist; their contents are read by later operations."""

    a: SparseRef

    def __post_init__(self) -> None:
        sparse_field(self, "a")


@_sparse_msg(sparse=("a",))
class SparseDestroy(_Sparse):
    """Destroy the descriptor of ``a`` and release its cached workspaces (stream-ordered, after
    the work already issued). The buffers are not freed: they belong to their GpuBuffers."""

    a: SparseRef

    def __post_init__(self) -> None:
        sparse_field(self, "a")


# ---------------------------------------------------------------------------------------------
# products


@_sparse_msg(sparse=("a",), buffers=("x", "y"), writes=("y",))
class SpMV(_Sparse):
    """y = alpha op(A) x + beta y (``cusparseSpMV``), op 'N', 'T' or 'C'; x and y dense vectors
    of A's dtype (with beta = 0, y is not read). CSR, CSC, COO and BSR (BSR: op 'N' only, as
    cuSPARSE's BSR algorithm takes no other)."""

    a: SparseRef
    x: BufRef
    y: BufRef
    alpha: float | complex = 1.0
    beta: float | complex = 0.0
    op: str = "N"

    def __post_init__(self) -> None:
        a = sparse_field(self, "a")
        dtype = a.val.dtype
        op = _op(self, "op", dtype)
        if a.format == "bsr" and op != "N":
            raise _fail(self, "op", "cuSPARSE SpMV on BSR takes op 'N' only (convert the matrix "
                        "to CSR for op(A) = A^T or A^H)")
        x = _dense(self, "x", dtype, 1)
        y = _dense(self, "y", dtype, 1)
        rows, cols = a.shape
        _length(self, "x", x, cols if op == "N" else rows)
        _length(self, "y", y, rows if op == "N" else cols)
        _alpha_beta(self, dtype, "alpha", "beta")
        _distinct(self, "y", "x", "a")


@_sparse_msg(sparse=("a",), buffers=("b", "c"), writes=("c",))
class SpMM(_Sparse):
    """C = alpha op(A) B + beta C (``cusparseSpMM``) with dense C-ordered B (k x n) and C
    (m x n), op(A) m x k. CSR, CSC, COO and BSR (BSR: op 'N' only)."""

    a: SparseRef
    b: BufRef
    c: BufRef
    alpha: float | complex = 1.0
    beta: float | complex = 0.0
    op: str = "N"

    def __post_init__(self) -> None:
        a = sparse_field(self, "a")
        dtype = a.val.dtype
        op = _op(self, "op", dtype)
        b = _dense(self, "b", dtype, 2)
        c = _dense(self, "c", dtype, 2)
        m, k = a.shape if op == "N" else a.shape[::-1]
        if b.shape[0] != k:
            raise _fail(self, "b", f"op(A) is {m}x{k} so B needs {k} rows, got {b.describe()}")
        if c.shape != (m, b.shape[1]):
            raise _fail(self, "c", f"needs shape ({m}, {b.shape[1]}), got {c.describe()}")
        if a.format == "bsr" and op != "N":
            raise _fail(self, "op", "cuSPARSE SpMM on BSR takes op 'N' only")
        _alpha_beta(self, dtype, "alpha", "beta")
        _distinct(self, "c", "b", "a")


@_sparse_msg(sparse=("a", "b"))
class SpGEMMStart(_Sparse):
    """First phase of C = alpha A B for CSR A (m x k) and B (k x n) of one dtype and index type
    (``cusparseSpGEMM_workEstimation`` and ``_compute``). Answers the number of entries of C;
    the device keeps the product under ``plan`` (a client-minted id) until
    :class:`SpGEMMFinish` copies it into C's buffers."""

    a: SparseRef
    b: SparseRef
    plan: int
    alpha: float | complex = 1.0

    def __post_init__(self) -> None:
        a = sparse_field(self, "a", ("csr",))
        b = sparse_field(self, "b", ("csr",))
        _plan(self)
        if b.dtype != a.dtype:
            raise _fail(self, "b", f"{b.describe()} does not share A's dtype {a.dtype}")
        if b.index_dtype != a.index_dtype:
            raise _fail(self, "b", f"{b.describe()} does not share A's index type "
                        f"{a.index_dtype}")
        if a.shape[1] != b.shape[0]:
            raise _fail(self, "b", f"A is {a.shape[0]}x{a.shape[1]}, so B needs {a.shape[1]} "
                        f"rows; got {b.describe()}")
        _alpha_beta(self, a.dtype, "alpha")


@_sparse_msg(sparse=("c",), sparse_writes=("c",))
class SpGEMMFinish(_Sparse):
    """Second phase: copy the product kept under ``plan`` into C (CSR, the nnz
    :class:`SpGEMMStart` answered) and release the plan."""

    plan: int
    c: SparseRef

    def __post_init__(self) -> None:
        _plan(self)
        sparse_field(self, "c", ("csr",))


@message()
class SpGEMMDrop(Message):
    """Release a plan of :class:`SpGEMMStart` or :class:`DenseToSparseStart` that will not be
    finished (no-op if there is none)."""

    plan: int

    def __post_init__(self) -> None:
        _plan(self)


__all__ += ["SpGEMMDrop"]


@_sparse_msg(sparse=("a",), buffers=("x", "y"), writes=("y",))
class SpSV(_Sparse):
    """Solve op(A) y = alpha x for y (``cusparseSpSV``): A square CSR or COO whose ``uplo``
    triangle ('L' or 'U') is used, with its stored diagonal (``diag='N'``) or a unit one
    (``'U'``, the stored diagonal ignored). The analysis runs with every solve (values may have
    changed); its descriptor and workspace are kept per (op, uplo, diag)."""

    a: SparseRef
    x: BufRef
    y: BufRef
    alpha: float | complex = 1.0
    op: str = "N"
    uplo: str = "L"
    diag: str = "N"

    def __post_init__(self) -> None:
        a = sparse_field(self, "a", ("csr", "coo"))
        _op(self, "op", a.dtype)
        if a.shape[0] != a.shape[1]:
            raise _fail(self, "a", f"a triangular solve needs a square matrix, got "
                        f"{a.describe()}")
        _choice(self, "uplo", self.uplo, ("L", "U"))
        _choice(self, "diag", self.diag, ("N", "U"))
        dtype = a.dtype
        _length(self, "x", _dense(self, "x", dtype, 1), a.shape[0])
        _length(self, "y", _dense(self, "y", dtype, 1), a.shape[0])
        _alpha_beta(self, dtype, "alpha")
        _distinct(self, "y", "x", "a")


@_sparse_msg(sparse=("a",), buffers=("b", "c"), writes=("c",))
class SpSM(_Sparse):
    """Solve op(A) C = alpha B for C with several right-hand sides (``cusparseSpSM``): A as
    in :class:`SpSV` (square CSR or COO, its ``uplo`` triangle, stored or unit ``diag``), B and C
    dense C-ordered n x k of A's dtype. The analysis runs with every solve."""

    a: SparseRef
    b: BufRef
    c: BufRef
    alpha: float | complex = 1.0
    op: str = "N"
    uplo: str = "L"
    diag: str = "N"

    def __post_init__(self) -> None:
        a = sparse_field(self, "a", ("csr", "coo"))
        _op(self, "op", a.dtype)
        n = a.shape[0]
        if n != a.shape[1]:
            raise _fail(self, "a", f"a triangular solve needs a square matrix, got "
                        f"{a.describe()}")
        _choice(self, "uplo", self.uplo, ("L", "U"))
        _choice(self, "diag", self.diag, ("N", "U"))
        b = _dense(self, "b", a.dtype, 2)
        c = _dense(self, "c", a.dtype, 2)
        if b.shape[0] != n:
            raise _fail(self, "b", f"A is {n}x{n} so B needs {n} rows, got {b.describe()}")
        if c.shape != b.shape:
            raise _fail(self, "c", f"needs B's shape {b.shape}, got {c.describe()}")
        _alpha_beta(self, a.dtype, "alpha")
        _distinct(self, "c", "b", "a")


@_sparse_msg(sparse=("c",), sparse_writes=("c",), buffers=("a", "b"))
class SDDMM(_Sparse):
    """C = alpha (op(A) op(B)) .* spy(C) + beta C on C's stored entries (``cusparseSDDMM``):
    dense C-ordered A and B, C CSR of the same dtype; only C's values are written. ``opa`` and
    ``opb`` are 'N' or 'T' ('C' is 'T' on real values): cuSPARSE's SDDMM has no conjugate
    transpose, and given one on complex values it faults the context (misaligned address, seen
    on an H100), so 'C' on complex operands is refused."""

    a: BufRef
    b: BufRef
    c: SparseRef
    alpha: float | complex = 1.0
    beta: float | complex = 0.0
    opa: str = "N"
    opb: str = "N"

    def __post_init__(self) -> None:
        c = sparse_field(self, "c", ("csr",))
        for field in ("opa", "opb"):
            if _op(self, field, c.dtype) == "C":
                raise _fail(self, field, "cuSPARSE SDDMM takes 'N' or 'T' on complex values "
                            "(conjugate the operand first for op 'C')")
        a = _dense(self, "a", c.dtype, 2)
        b = _dense(self, "b", c.dtype, 2)
        m, k = a.shape if self.opa == "N" else a.shape[::-1]
        kb, n = b.shape if self.opb == "N" else b.shape[::-1]
        if kb != k:
            raise _fail(self, "b", f"op(A) is {m}x{k} so op(B) needs {k} rows, got "
                        f"{b.describe()}")
        if c.shape != (m, n):
            raise _fail(self, "c", f"needs shape ({m}, {n}), got {c.describe()}")
        _alpha_beta(self, c.dtype, "alpha", "beta")


# ---------------------------------------------------------------------------------------------
# conversions


@_sparse_msg(sparse=("a",), buffers=("out",), writes=("out",))
class SparseToDense(_Sparse):
    """Write A into the dense C-ordered ``out`` of A's shape and dtype
    (``cusparseSparseToDense``; zeros where A stores nothing). CSR, CSC and COO."""

    a: SparseRef
    out: BufRef

    def __post_init__(self) -> None:
        a = sparse_field(self, "a", ("csr", "csc", "coo"))
        out = _dense(self, "out", a.dtype, 2)
        if out.shape != a.shape:
            raise _fail(self, "out", f"needs shape {a.shape}, got {out.describe()}")


@message(buffers=("dense", "ptr"), writes=("ptr",))
class DenseToSparseStart(Message):
    """First phase of dense -> CSR (``cusparseDenseToSparse_analysis``): counts the non-zeros of
    the C-ordered ``dense`` matrix into the row offsets ``ptr`` (rows + 1, i32 or i64) and
    answers their number (read back at completion). The device keeps the conversion under
    ``plan`` until :class:`DenseToSparseFinish`."""

    dense: BufRef
    ptr: BufRef
    plan: int

    def __post_init__(self) -> None:
        d = _ref(self, "dense", self.dense)
        _set(self, "dense", d)
        if d.dtype not in SPARSE_DTYPES:
            raise _fail(self, "dense", f"{d.describe()}: values must be one of "
                        f"{', '.join(SPARSE_DTYPES)}")
        _dense(self, "dense", d.dtype, 2)
        p = _ref(self, "ptr", self.ptr)
        _set(self, "ptr", p)
        if p.dtype not in INDEX_DTYPES:
            raise _fail(self, "ptr", f"{p.describe()}: row offsets must be i32 or i64")
        _length(self, "ptr", p, d.shape[0] + 1)
        _plan(self)


@_sparse_msg(sparse=("out",), sparse_writes=("out",))
class DenseToSparseFinish(_Sparse):
    """Second phase: fill the column indices and values of ``out`` (CSR with the nnz that
    :class:`DenseToSparseStart` answered and its ``ptr``) and release the plan."""

    plan: int
    out: SparseRef

    def __post_init__(self) -> None:
        _plan(self)
        sparse_field(self, "out", ("csr",))


@_sparse_msg(sparse=("a", "out"), sparse_writes=("out",))
class SparseConvert(_Sparse):
    """CSR -> CSC or CSC -> CSR of the same matrix (``cusparseCsr2cscEx2``; a CSC matrix's
    arrays are the CSR arrays of its transpose). ``out`` has A's shape, dtype and nnz and the
    other format. cuSPARSE's conversion takes 32-bit indices only."""

    a: SparseRef
    out: SparseRef

    def __post_init__(self) -> None:
        a = sparse_field(self, "a", ("csr", "csc"))
        out = sparse_field(self, "out", ("csc",) if a.format == "csr" else ("csr",))
        if a.index_dtype != "i32":
            raise _fail(self, "a", f"{a.describe()}: cusparseCsr2cscEx2 takes 32-bit indices "
                        "only")
        if (out.shape, out.nnz, out.dtype, out.index_dtype) != (a.shape, a.nnz, a.dtype, "i32"):
            raise _fail(self, "out", f"{out.describe()} must match {a.describe()} in shape, nnz, "
                        "dtype and index type")
        _distinct(self, "out", "a")


@message()
class SparseCacheInfo(Message):
    """The cuSPARSE workspace-size cache counters of the device (hits, misses, size)."""


@message()
class SparseReplayInfo(Message):
    """How repeated SpMVs and SpMMs were replayed as CUDA graphs on the device (see
    ``dev.cusparse.replay_info``)."""


# ---------------------------------------------------------------------------------------------
# row indices <-> row offsets, and the sparse direct solve


def _indices(msg: Any, field: str) -> BufRef:
    value = getattr(msg, field)
    ref = value if type(value) is BufRef else _ref(msg, field, value)
    if ref is not value:
        _set(msg, field, ref)
    if ref.dtype != "i32":
        raise _fail(msg, field, f"{ref.describe()}: cuSPARSE's row conversions take 32-bit "
                    "indices (i32)")
    return ref


def _counts(msg: Any, rows: BufRef, ptr: BufRef) -> None:
    _int(msg, "nnz", msg.nnz)
    _int(msg, "m", msg.m)
    if max(msg.nnz, msg.m) > INT32_MAX:
        raise _fail(msg, "nnz", "32-bit indices cannot address this matrix")
    check_extent(msg, "rows", rows, 0, ((msg.nnz, 1),), f"{msg.nnz} row indices")
    check_extent(msg, "ptr", ptr, 0, ((msg.m + 1, 1),), f"{msg.m + 1} row offsets")
    if rows.id == ptr.id:
        raise _fail(msg, "ptr", "the offsets must not alias the row indices")


@message(buffers=("rows", "ptr"), writes=("ptr",))
class CompressRows(Message):
    """Row offsets from row indices (``cusparseXcoo2csr``): ``ptr[i]`` (i = 0..m) becomes the
    number of the first ``nnz`` entries of ``rows`` below i. ``rows`` must be sorted ascending
    with values in [0, m) (what a COO matrix sorted by row holds); both i32."""

    rows: BufRef
    ptr: BufRef
    nnz: int
    m: int

    def __post_init__(self) -> None:
        _counts(self, _indices(self, "rows"), _indices(self, "ptr"))


@message(buffers=("ptr", "rows"), writes=("rows",))
class ExpandRows(Message):
    """Row indices from row offsets (``cusparseXcsr2coo``): the row of each of the ``nnz``
    entries described by the ``m + 1`` offsets ``ptr`` (non-decreasing, from 0 to nnz); both
    i32."""

    ptr: BufRef
    rows: BufRef
    nnz: int
    m: int

    def __post_init__(self) -> None:
        _counts(self, _indices(self, "rows"), _indices(self, "ptr"))


@_sparse_msg(sparse=("a",), buffers=("b", "x"), writes=("x",))
class SpSolveQR(_Sparse):
    """Solve A x = b for square CSR A (i32 indices, sorted columns, no repeated entries) by
    cuSOLVER's sparse QR (``cusolverSp<t>csrlsvqr``, the GPU path). Answers the index of the
    first column whose pivot |R(j, j)| is at most ``tol``, or -1 when A is invertible at that
    tolerance (x is then the solution; otherwise it is not meaningful). The library waits for
    its own work inside the call, so this message holds the device thread until it is done."""

    a: SparseRef
    b: BufRef
    x: BufRef
    tol: float = 0.0

    def __post_init__(self) -> None:
        a = sparse_field(self, "a", ("csr",))
        if a.shape[0] != a.shape[1]:
            raise _fail(self, "a", f"a solve needs a square matrix, got {a.describe()}")
        if a.index_dtype != "i32":
            raise _fail(self, "a", f"{a.describe()}: cusolverSp takes 32-bit indices only")
        n = a.shape[0]
        _length(self, "b", _dense(self, "b", a.dtype, 1), n)
        _length(self, "x", _dense(self, "x", a.dtype, 1), n)
        tol = self.tol
        if isinstance(tol, bool) or not isinstance(tol, (int, float)) or not tol >= 0 \
                or tol == float("inf"):
            raise _fail(self, "tol", f"expected a finite tolerance >= 0, got {tol!r}")
        _set(self, "tol", float(tol))
        _distinct(self, "x", "b", "a")


__all__ += ["CompressRows", "ExpandRows", "SpSolveQR"]
