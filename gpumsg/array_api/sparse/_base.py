"""What every sparse format shares: attributes, the operators and the products, written once
over each format's arrays and its cuSPARSE descriptor.

A matrix is immutable in what it means: operations answer new matrices or arrays, and a new
matrix may share its index arrays with the one it came from (``A.T``, ``2 * A``, ``A.conj()``
reuse them without a copy). Only :meth:`SparseMatrix.sum_duplicates` changes a matrix, and only
its representation. Formats register their classes in :data:`FORMATS`, so that this module
imports none of them.
"""

from __future__ import annotations

import abc
import operator
from typing import Any

import numpy as np

from ...errors import InvalidMessage
from .. import _dtypes as D
from .._array import Array, check_device
from .._creation import ones, zeros
from .._elementwise import TABLE, apply, astype
from .._manipulation import reshape
from .._reductions import sum as _sum
from . import _primitives as P

__all__ = ["SparseMatrix", "FORMATS", "issparse"]

#: format name -> class, filled by the format modules
FORMATS: dict[str, type] = {}


def issparse(x: Any) -> bool:
    """Whether ``x`` is a sparse matrix of this namespace."""
    return isinstance(x, SparseMatrix)


class SparseMatrix(abc.ABC):
    """A sparse matrix on a gpumsg device (the base of ``csr_matrix``, ``csc_matrix`` and
    ``coo_matrix``). Values are float32, float64, complex64 or complex128; indices int32 (int64
    where a dimension or the number of entries passes 2**31 - 1)."""

    format: str = ""
    ndim: int = 2
    #: NumPy's operators defer to ours (which refuse host arrays: move them with xp.asarray)
    __array_ufunc__ = None

    _shape: tuple[int, int]
    _canonical: bool
    _cache: dict[str, Any]

    # -- what each format defines -------------------------------------------------------------
    @property
    @abc.abstractmethod
    def data(self) -> Array:
        """The stored values (one per entry, repeats included)."""

    @abc.abstractmethod
    def _arrays(self) -> tuple[Array, Array, Array]:
        """(ptr, idx, val) as cuSPARSE names this format's arrays."""

    @abc.abstractmethod
    def _with_data(self, data: Array) -> SparseMatrix:
        """The same structure with other values (shared index arrays)."""

    @abc.abstractmethod
    def _canonicalized(self) -> SparseMatrix:
        """The same matrix with sorted indices and no duplicates (a new matrix)."""

    @abc.abstractmethod
    def tocsr(self, copy: bool = False) -> Any:
        """The same matrix in CSR (``self`` when it is one and ``copy`` is false)."""

    @abc.abstractmethod
    def tocsc(self, copy: bool = False) -> Any:
        """The same matrix in CSC (``self`` when it is one and ``copy`` is false)."""

    @abc.abstractmethod
    def tocoo(self, copy: bool = False) -> Any:
        """The same matrix in COO (``self`` when it is one and ``copy`` is false)."""

    @abc.abstractmethod
    def transpose(self, axes: Any = None, copy: bool = False) -> SparseMatrix:
        """The transpose (over the same arrays where the format allows)."""

    # -- attributes ----------------------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, int]:
        return self._shape

    @property
    def dtype(self) -> np.dtype:
        return self.data.dtype

    @property
    def nnz(self) -> int:
        """Stored entries, duplicates and explicit zeros included (as SciPy counts)."""
        return self.data.shape[0]

    @property
    def size(self) -> int:
        """Stored entries, as ``nnz`` (SciPy's meaning of ``size`` for sparse matrices)."""
        return self.nnz

    @property
    def device(self) -> Any:
        return self.data.device

    @property
    def has_canonical_format(self) -> bool:
        """Whether indices are known sorted within each row (column for CSC; by row, then
        column for COO) with no duplicates."""
        return self._canonical

    @property
    def T(self) -> SparseMatrix:
        return self.transpose()

    @property
    def H(self) -> SparseMatrix:
        """The conjugate transpose."""
        return self.transpose().conj()

    def getH(self) -> SparseMatrix:
        return self.H

    def __len__(self) -> int:
        raise TypeError("sparse matrix length is ambiguous; use nnz or shape[0]")

    def __bool__(self) -> bool:
        if self._shape == (1, 1):
            return self.nnz != 0 and bool(self.todense()[0, 0] != 0)
        raise ValueError("the truth value of a sparse matrix of more than one element is "
                         "ambiguous")

    def __repr__(self) -> str:
        return (f"<{self._shape[0]}x{self._shape[1]} sparse matrix of type {self.dtype} with "
                f"{self.nnz} stored elements in {self._FORMAT_NAME} format on device "
                f"{self.device.ordinal}:{self.device.backend}>")

    _FORMAT_NAME = ""

    # -- the descriptor and the canonical form ----------------------------------------------
    def _handle(self) -> Any:
        """This matrix's cuSPARSE descriptor, made on first use and kept while it lives."""
        h = self._cache.get("handle")
        if h is None:
            ptr, idx, val = self._arrays()
            h = self._cache["handle"] = P.cusparse_matrix(self.format, self._shape, ptr, idx,
                                                          val)
        return h

    def _canon(self) -> SparseMatrix:
        """This matrix if canonical, else its canonical form, made anew each time: the arrays
        may have been written in place since (a kept form would answer with stale values).
        :meth:`sum_duplicates` makes a matrix canonical for good."""
        if self._canonical:
            return self
        return self._canonicalized()

    def sum_duplicates(self) -> None:
        """Sort the indices and sum duplicate entries, in place (on the device; waits for the
        number of distinct entries)."""
        if self._canonical:
            return
        c = self._canon()
        self._adopt(c)

    @abc.abstractmethod
    def _adopt(self, other: SparseMatrix) -> None:
        """Take ``other``'s arrays (the same matrix) as this matrix's own."""

    def sort_indices(self) -> None:
        """Sort the indices in place (duplicates are summed too)."""
        self.sum_duplicates()

    # -- conversions -------------------------------------------------------------------------
    def asformat(self, format: str | None, copy: bool = False) -> SparseMatrix:  # noqa: A002
        if format is None or format == self.format:
            return self.copy() if copy else self
        conv = getattr(self, f"to{format}", None)
        if format not in FORMATS or conv is None:
            raise ValueError(f"format: expected 'csr', 'csc' or 'coo', got {format!r}")
        return conv(copy=copy)

    def todense(self, order: str | None = None, out: Any = None) -> Array:
        """The dense matrix as a new gpumsg array (cuSPARSE SparseToDense of the canonical
        form: duplicates summed)."""
        if order not in (None, "C"):
            raise ValueError("order: dense results are C-ordered")
        if out is not None:
            raise ValueError("out: todense answers a new array")
        m, n = self._shape
        if self.nnz == 0 or m == 0 or n == 0:
            return zeros(self._shape, dtype=self.dtype, device=self.device)
        c = self._canon()
        dev = self.device
        buf = dev.cusparse.to_dense(c._handle())
        return Array(buf, self._shape, self.dtype, dev)

    def toarray(self, order: str | None = None, out: Any = None) -> Array:
        return self.todense(order, out)

    def get(self, stream: Any = None) -> Any:
        """A SciPy copy of the same format on the host (waits)."""
        import scipy.sparse as sp

        ptr, idx, val = (np.asarray(a) for a in self._arrays())
        if self.format == "coo":
            return sp.coo_matrix((val, (ptr, idx)), shape=self._shape)
        cls = sp.csr_matrix if self.format == "csr" else sp.csc_matrix
        return cls((val, idx, ptr), shape=self._shape)

    def copy(self) -> SparseMatrix:
        """A matrix with copies of all its arrays."""
        return self._copied()

    @abc.abstractmethod
    def _copied(self) -> SparseMatrix:
        """The same matrix over copies of its arrays."""

    def astype(self, dtype: Any, copy: bool = True) -> SparseMatrix:
        dt = P.value_dtype(dtype)
        if dt == self.dtype and not copy:
            return self
        if D.kind_of(self.dtype) == "c" and D.kind_of(dt) != "c":
            raise TypeError(f"astype: {self.dtype} to {dt} would drop the imaginary parts")
        return self._with_data(astype(self.data, dt, copy=True))

    # -- element-wise on the stored values --------------------------------------------------
    def conj(self, copy: bool = True) -> SparseMatrix:
        if D.kind_of(self.dtype) != "c":
            return self.copy() if copy else self
        return self._with_data(apply(TABLE["conj"], self.data))

    conjugate = conj

    def _scaled(self, s: Any, name: str) -> SparseMatrix:
        if isinstance(s, np.generic):
            s = s.item()
        if isinstance(s, complex) and D.kind_of(self.dtype) != "c":
            base = self.astype(D.complex64 if self.dtype == D.float32 else D.complex128)
        else:
            base = self
        return base._with_data(apply(TABLE[name], base.data, s))

    def multiply(self, other: Any) -> Any:
        """The element-wise product: by a scalar, a sparse matrix or a dense array of the same
        shape; a sparse (CSR) matrix on this one's pattern."""
        if P.is_scalar(other):
            return self._scaled(other, "multiply")
        if isinstance(other, SparseMatrix):
            if other.shape != self._shape:
                raise ValueError(f"multiply: shapes {self._shape} and {other.shape} differ")
            other = other.todense()
        if not isinstance(other, Array):
            raise TypeError(f"multiply: expected a scalar, a sparse matrix or a gpumsg array, "
                            f"got {type(other).__name__}")
        check_device(self.data, other)
        if other.shape != self._shape:
            raise ValueError(f"multiply: shapes {self._shape} and {other.shape} differ")
        dt = P.promote(self.dtype, other.dtype)
        a = self.tocsr()._canon().astype(dt, copy=False)
        if a.nnz == 0:
            return a.copy()
        coo = a.tocoo()
        n = self._shape[1]
        flat = P.whole(reshape(P.whole(astype(other, dt, copy=False)), (-1,)))
        pos = apply(TABLE["add"], apply(TABLE["multiply"], astype(coo.row, D.int64), n),
                    astype(coo.col, D.int64))
        picked = P.gather(flat, P.whole(astype(pos, P.index_dtype_for(flat.shape[0]),
                                               copy=False)))
        return a._with_data(apply(TABLE["multiply"], a.data, picked))

    # -- operators ---------------------------------------------------------------------------
    def __neg__(self) -> SparseMatrix:
        return self._with_data(apply(TABLE["negative"], self.data))

    def __pos__(self) -> SparseMatrix:
        return self.copy()

    def __mul__(self, other: Any) -> Any:
        """``A * s`` scales; ``A * B`` with a matrix or array is the matrix product (SciPy's
        ``spmatrix`` meaning); use :meth:`multiply` for the element-wise product."""
        if P.is_scalar(other):
            return self._scaled(other, "multiply")
        if isinstance(other, (SparseMatrix, Array)):
            return self @ other
        return NotImplemented

    def __rmul__(self, other: Any) -> Any:
        if P.is_scalar(other):
            return self._scaled(other, "multiply")
        if isinstance(other, Array):
            return other @ self
        return NotImplemented

    def __truediv__(self, other: Any) -> Any:
        if P.is_scalar(other):
            return self._scaled(other, "divide")
        return NotImplemented

    def __add__(self, other: Any) -> Any:
        """``A + B``: sparse of the same shape (entries merged on the device: a CSR matrix,
        CSC for two CSC operands), a dense array (a dense result) or zero."""
        if P.is_scalar(other):
            if other == 0:
                return self.copy()
            raise NotImplementedError("adding a nonzero scalar to a sparse matrix would make "
                                      "it dense; add A.todense() instead")
        if isinstance(other, SparseMatrix):
            return _add(self, other)
        if isinstance(other, Array):
            check_device(self.data, other)
            dense = self.todense()
            return apply(TABLE["add"], dense, other)
        return NotImplemented

    def __radd__(self, other: Any) -> Any:
        return self.__add__(other)

    def __sub__(self, other: Any) -> Any:
        if isinstance(other, SparseMatrix):
            return _add(self, -other)
        if isinstance(other, Array):
            check_device(self.data, other)
            return apply(TABLE["subtract"], self.todense(), other)
        if P.is_scalar(other):
            return self.__add__(-other)
        return NotImplemented

    def __rsub__(self, other: Any) -> Any:
        if isinstance(other, Array):
            check_device(self.data, other)
            return apply(TABLE["subtract"], other, self.todense())
        if P.is_scalar(other):
            return (-self).__add__(other)
        return NotImplemented

    # -- products ----------------------------------------------------------------------------
    def __matmul__(self, other: Any) -> Any:
        if isinstance(other, SparseMatrix):
            return _spgemm(self, other)
        if isinstance(other, Array):
            return _dense_product(self, other, transpose=False)
        if P.is_scalar(other):
            raise ValueError("matmul: a scalar operand is not allowed, use '*'")
        return NotImplemented

    def __rmatmul__(self, other: Any) -> Any:
        if isinstance(other, Array):
            # x @ A = (A^T x^T)^T
            if other.ndim == 1:
                return _dense_product(self, other, transpose=True)
            if other.ndim == 2:
                return _dense_product(self, other.T, transpose=True).T
            raise ValueError(f"matmul: expected a 1-D or 2-D array, got {other.ndim}-D")
        if P.is_scalar(other):
            raise ValueError("matmul: a scalar operand is not allowed, use '*'")
        return NotImplemented

    def dot(self, other: Any) -> Any:
        return self @ other

    # -- reductions --------------------------------------------------------------------------
    def sum(self, axis: Any = None, dtype: Any = None, out: Any = None) -> Array:
        """The sum of all entries (a 0-d array), of each column (``axis=0``: shape (1, n)) or of
        each row (``axis=1``: shape (m, 1)), as SciPy's sparse matrices and CuPy shape them.
        Row and column sums are one SpMV with a vector of ones."""
        if out is not None:
            raise ValueError("out: sum answers a new array")
        dt = self.dtype if dtype is None else P.value_dtype(dtype)
        if axis is None:
            return _sum(self.data, dtype=dt) if self.nnz else \
                zeros((), dtype=dt, device=self.device)
        ax = operator.index(axis)
        if ax < -2 or ax > 1:
            raise ValueError(f"axis {axis} is out of range for a 2-D matrix")
        ax %= 2
        m, n = self._shape
        a = self.astype(dt, copy=False)
        if a.nnz == 0 or m == 0 or n == 0:
            res = zeros((1, n) if ax == 0 else (m, 1), dtype=dt, device=self.device)
            return res
        form = a._product_form()
        h = form._handle()
        k = n if ax == 1 else m
        key = ("ones", k, dt)
        unit = form._cache.get(key)  # kept with the descriptor: nobody else sees it
        if unit is None:
            unit = form._cache[key] = ones((k,), dtype=dt, device=self.device)
        if ax == 1:
            return reshape(P.spmv(h, unit), (m, 1))
        return reshape(P.spmv(h, unit, op="T"), (1, n))

    def _product_form(self) -> SparseMatrix:
        """The form products take: this matrix when canonical, else its canonical form
        (cuSPARSE wants COO entries sorted by row, and some of its algorithms sorted column
        indices; a repeated position would be summed anyway)."""
        return self._canon()

    def mean(self, axis: Any = None, dtype: Any = None) -> Array:
        s = self.sum(axis=axis, dtype=dtype)
        m, n = self._shape
        count = m * n if axis is None else (m if operator.index(axis) % 2 == 0 else n)
        return apply(TABLE["divide"], s, count)

    def diagonal(self, k: int = 0) -> Array:
        """The ``k``-th diagonal as a dense 1-D array (a gather from the dense form's flat
        positions ``i * (n + 1) + k``... taken on the canonical entries instead: one SpMV)."""
        m, n = self._shape
        k = operator.index(k)
        length = max(0, min(m + min(k, 0), n - max(k, 0)))
        if length == 0:
            return zeros((0,), dtype=self.dtype, device=self.device)
        return _diagonal(self, k, length)


def _common(a: SparseMatrix, b: Any) -> np.dtype:
    return P.promote(a.dtype, b.dtype)


def _dense_product(a: SparseMatrix, x: Array, transpose: bool) -> Array:
    """``A @ x`` (or ``A^T @ x``) for a 1-D or 2-D gpumsg array: cuSPARSE SpMV or SpMM on the
    matrix's kept descriptor (made once; cuSPARSE's workspace and its preprocessing are kept
    with it on the device, so a repeated product is one library call or graph replay)."""
    if x._dev is not a._data._dev:
        check_device(a.data, x)
    nd = x.ndim
    if nd != 1 and nd != 2:
        raise ValueError(f"matmul: expected a 1-D or 2-D array, got {nd}-D")
    m, n = a._shape[::-1] if transpose else a._shape
    if x._shape[0] != n:
        raise ValueError(f"matmul: {'the transpose of ' if transpose else ''}a {a.shape[0]}x"
                         f"{a.shape[1]} matrix and an operand of shape {x.shape} do not match")
    dt = a.dtype if x._dtype == a.dtype else _common(a, x)
    if a.nnz == 0 or m == 0 or n == 0 or (nd == 2 and x._shape[1] == 0):
        return zeros((m,) if nd == 1 else (m, x._shape[1]), dtype=dt, device=a.device)
    mat = (a if dt == a.dtype else a.astype(dt, copy=False))._product_form()
    xv = P.whole(x if x._dtype == dt else astype(x, dt, copy=False))
    h = mat._cache.get("handle") or mat._handle()
    op = "T" if transpose else "N"
    return P.spmv(h, xv, op) if nd == 1 else P.spmm(h, xv, op)


def _spgemm(a: SparseMatrix, b: SparseMatrix) -> Any:
    """``A @ B`` of two sparse matrices: cuSPARSE SpGEMM on their canonical CSR forms (a new
    CSR matrix; waits for the product's number of entries)."""
    check_device(a.data, b.data)
    if a.shape[1] != b.shape[0]:
        raise ValueError(f"matmul: shapes {a.shape} and {b.shape} do not match")
    dt = P.promote(a.dtype, b.dtype)
    csr = FORMATS["csr"]
    shape = (a.shape[0], b.shape[1])
    ca = a.tocsr()._canon().astype(dt, copy=False)
    cb = b.tocsr()._canon().astype(dt, copy=False)
    if ca.nnz == 0 or cb.nnz == 0 or 0 in shape or a.shape[1] == 0:
        return csr(shape, dtype=dt, device=a.device)
    ia, ib = ca.indices.dtype, cb.indices.dtype
    if ia != ib:  # cuSPARSE takes one index type
        ca, cb = ca._as_index(D.int64), cb._as_index(D.int64)
    product = a.device.cusparse.spgemm(ca._handle(), cb._handle()).result()
    return csr._from_handle(product, a.device, canonical=True)


def _add(a: SparseMatrix, b: SparseMatrix) -> SparseMatrix:
    """``A + B``: both operands' entries listed together and coalesced (sorted by row and
    column, duplicates summed) into a CSR matrix; CSC when both are CSC."""
    check_device(a.data, b.data)
    if a.shape != b.shape:
        raise ValueError(f"add: shapes {a.shape} and {b.shape} differ")
    from .._manipulation import concat

    dt = P.promote(a.dtype, b.dtype)
    both_csc = a.format == "csc" and b.format == "csc"
    ca, cb = a.tocoo(), b.tocoo()
    if both_csc:  # coalesce by column: the CSC arrays directly
        ca, cb = ca.transpose(), cb.transpose()
    it = P.index_dtype_for(*ca.shape, ca.nnz + cb.nnz)
    row = concat([astype(ca.row, it, copy=False), astype(cb.row, it, copy=False)])
    col = concat([astype(ca.col, it, copy=False), astype(cb.col, it, copy=False)])
    val = concat([astype(ca.data, dt, copy=False), astype(cb.data, dt, copy=False)])
    coo = FORMATS["coo"]._make(P.whole(val), P.whole(row), P.whole(col), ca.shape, False)
    out = coo.tocsr()
    return out.transpose() if both_csc else out


def _diagonal(a: SparseMatrix, k: int, length: int) -> Array:
    """Entries (i, i + k): the canonical entries on the diagonal (a compaction) scattered into
    their places through a one-column COO matrix's ``todense``."""
    coo = a.tocoo()._canon()
    dev = a.device
    on = apply(TABLE["equal"], apply(TABLE["subtract"], astype(coo.col, D.int64),
                                     astype(coo.row, D.int64)), k)
    from .._compact import compact as _compact

    picked_rows = _compact(on, astype(coo.row, D.int64))
    picked_vals = _compact(on, coo.data)
    start = max(0, -k)
    pos = apply(TABLE["subtract"], picked_rows, start)
    cnt = picked_vals.shape[0]
    if cnt == 0:
        return zeros((length,), dtype=a.dtype, device=dev)
    coo_t = FORMATS["coo"]._make(P.whole(picked_vals),
                                 P.whole(astype(pos, P.index_dtype_for(length), copy=False)),
                                 P.whole(astype(zeros((cnt,), dtype=D.int64, device=dev),
                                                P.index_dtype_for(length), copy=False)),
                                 (length, 1), True)
    return reshape(coo_t.todense(), (length,))


def check_shape(shape: Any) -> tuple[int, int]:
    """``shape`` as (rows, cols) of non-negative ints, or InvalidMessage."""
    try:
        m, n = (operator.index(d) for d in shape)
    except (TypeError, ValueError):
        raise InvalidMessage(f"shape: expected (rows, cols), got {shape!r}",
                             field="shape") from None
    if m < 0 or n < 0:
        raise InvalidMessage(f"shape: dimensions must be non-negative, got {shape!r}",
                             field="shape")
    return m, n
