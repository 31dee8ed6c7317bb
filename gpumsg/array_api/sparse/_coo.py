"""The coordinate format: ``coo_matrix`` (the row, column and value of each entry, in any order,
repeats allowed and summed, as SciPy's).

To CSR or CSC the entries are coalesced on the device (a stable sort by (row, column) or
(column, row), repeats summed by one generated kernel) and the sorted major indices
compressed into offsets.
Products and ``todense`` use the canonical form (cuSPARSE wants COO entries sorted by row, and
its SparseToDense keeps one of repeated entries where SciPy sums them).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...errors import InvalidMessage
from .. import _dtypes as D
from .._array import Array
from .._creation import zeros
from .._elementwise import astype
from . import _construct_args as C
from . import _primitives as P
from ._base import FORMATS, SparseMatrix, check_shape

__all__ = ["coo_matrix", "isspmatrix_coo"]


class coo_matrix(SparseMatrix):
    """A sparse matrix in coordinate format on a gpumsg device (see :class:`SparseMatrix`)."""

    format = "coo"
    _FORMAT_NAME = "COOrdinate"

    def __init__(self, arg1: Any, shape: Any = None, dtype: Any = None, copy: bool = False,
                 *, device: Any = None) -> None:
        """``arg1``: ``(data, (row, col))`` (taken as given: any order, repeats allowed; the
        shape is inferred from the largest indices where ``shape`` is None), a shape
        ``(M, N)``, a sparse matrix (converted), a SciPy sparse matrix or a host array-like
        (uploaded), or a dense 2-D gpumsg array (through CSR, on the device)."""
        self._cache = {}
        if isinstance(arg1, SparseMatrix):
            if shape is not None and check_shape(shape) != arg1.shape:
                raise InvalidMessage(f"shape: {shape} differs from the matrix's {arg1.shape}",
                                     field="shape")
            src = arg1.tocoo()
            if dtype is not None:
                src = src.astype(dtype, copy=False)
            self._adopt(src.copy() if copy else src)
            return
        if C.is_shape(arg1):
            m, n = check_shape(arg1 if shape is None else shape)
            dev = C.device_of(device)
            dt = P.value_dtype(D.float64 if dtype is None else dtype)
            it = P.index_dtype_for(m, n)
            empty = zeros((0,), dtype=it, device=dev)
            self._set(zeros((0,), dtype=dt, device=dev), empty, empty, (m, n), True)
            return
        if isinstance(arg1, tuple) and len(arg1) == 2:
            data, ij = arg1
            if not (isinstance(ij, (tuple, list)) and len(ij) == 2):
                raise InvalidMessage("arg1: expected (data, (row, col))", field="arg1")
            row, col = ij
            dev = C.device_of(device, data, row, col)
            val = P.as_values(dev, data, "data", dtype)
            r = P.as_index(dev, row, "row")
            c = P.as_index(dev, col, "col")
            if copy:
                val, r, c = (astype(a, a.dtype, copy=True) for a in (val, r, c))
            m, n, canonical = C.check_coo(r, c, val.shape[0], shape)
            it = P.index_dtype_for(m, n, val.shape[0])
            r, c = P.narrow(r, it), P.narrow(c, it)
            self._set(val, r, c, (m, n), canonical)
            return
        if isinstance(arg1, tuple):
            raise InvalidMessage(f"arg1: expected (data, (row, col)) or (M, N), got a tuple of "
                                 f"{len(arg1)}", field="arg1")
        if isinstance(arg1, Array):
            self._adopt(FORMATS["csr"](arg1, shape=shape, dtype=dtype).tocoo())
            return
        import scipy.sparse as sp

        dev = C.device_of(device)
        if sp.issparse(arg1):
            host = arg1.tocoo(copy=True)
        else:
            arr = np.asarray(arg1)
            if arr.ndim > 2:
                raise InvalidMessage(f"arg1: expected a 2-D array, got {arr.ndim}-D",
                                     field="arg1")
            host = sp.coo_matrix(np.atleast_2d(arr))
        if shape is not None and check_shape(shape) != host.shape:
            raise InvalidMessage(f"shape: {shape} differs from the matrix's {host.shape}",
                                 field="shape")
        r, c, val, canonical = C.upload_scipy(dev, host, dtype)
        self._set(val, r, c, host.shape, canonical)

    def _set(self, data: Array, row: Array, col: Array, shape: tuple[int, int],
             canonical: bool) -> None:
        self._data, self._row, self._col = data, row, col
        self._shape = (int(shape[0]), int(shape[1]))
        self._canonical = canonical

    def _adopt(self, other: SparseMatrix) -> None:
        if not isinstance(other, coo_matrix):
            other = other.tocoo()
        self._cache = {}
        self._set(other.data, other.row, other.col, other.shape, other._canonical)
        if "handle" in other._cache:
            self._cache["handle"] = other._cache["handle"]

    @classmethod
    def _make(cls, data: Array, row: Array, col: Array, shape: tuple[int, int],
              canonical: bool) -> coo_matrix:
        out = cls.__new__(cls)
        out._cache = {}
        out._set(data, row, col, shape, canonical)
        return out

    @property
    def data(self) -> Array:
        return self._data

    @property
    def row(self) -> Array:
        return self._row

    @property
    def col(self) -> Array:
        return self._col

    def _arrays(self) -> tuple[Array, Array, Array]:
        return self._row, self._col, self._data

    def _with_data(self, data: Array) -> coo_matrix:
        return coo_matrix._make(data, self._row, self._col, self._shape, self._canonical)

    def _copied(self) -> coo_matrix:
        return coo_matrix._make(*(astype(a, a.dtype, copy=True) for a in
                                  (self._data, self._row, self._col)), self._shape,
                                self._canonical)

    def _canonicalized(self) -> coo_matrix:
        m, n = self._shape
        r, c, v = P.coalesce(self._row, self._col, self._data, m, n)
        return coo_matrix._make(v, r, c, self._shape, True)

    def transpose(self, axes: Any = None, copy: bool = False) -> coo_matrix:
        """The transpose: rows and columns swapped (the same arrays; entries no longer sorted
        by row)."""
        if axes is not None:
            raise ValueError("axes: sparse matrices transpose their two axes only")
        return coo_matrix._make(self._data, self._col, self._row, self._shape[::-1],
                                self.nnz <= 1)

    def tocoo(self, copy: bool = False) -> coo_matrix:
        return self.copy() if copy else self

    def tocsr(self, copy: bool = False) -> Any:
        """CSR, on the device: entries coalesced by (row, column), rows compressed."""
        m, n = self._shape
        c = self._canon()
        return FORMATS["csr"]._make(c.data, c.col, P.compress(c.row, m), self._shape, True)

    def tocsc(self, copy: bool = False) -> Any:
        """CSC, on the device: entries coalesced by (column, row), columns compressed."""
        m, n = self._shape
        cols, rows, val = P.coalesce(self._col, self._row, self._data, n, m)
        return FORMATS["csc"]._make(val, rows, P.compress(cols, n), self._shape, True)


def isspmatrix_coo(x: Any) -> bool:
    return isinstance(x, coo_matrix)


FORMATS["coo"] = coo_matrix
