"""The compressed formats: ``csr_matrix`` (row offsets, column indices, values) and
``csc_matrix`` (column offsets, row indices, values: the CSR arrays of the transpose).

CSR <-> CSC is cuSPARSE's ``cusparseCsr2cscEx2`` (``dev.cusparse.convert``); to COO the offsets
are expanded to one major index per entry (a binary search per entry); a dense array becomes CSR
by cuSPARSE's DenseToSparse.
"""

from __future__ import annotations

from typing import Any

from ...errors import InvalidMessage
from .. import _dtypes as D
from .._array import Array
from .._creation import zeros
from .._elementwise import astype
from . import _construct_args as C
from . import _primitives as P
from ._base import FORMATS, SparseMatrix, check_shape

__all__ = ["csr_matrix", "csc_matrix", "isspmatrix_csr", "isspmatrix_csc"]


class _Compressed(SparseMatrix):
    """CSR and CSC: ``indptr`` (offsets along the major axis), ``indices`` (the minor index of
    each entry) and ``data``."""

    _major = 0  # 0: rows (CSR), 1: columns (CSC)

    def __init__(self, arg1: Any, shape: Any = None, dtype: Any = None, copy: bool = False,
                 *, device: Any = None) -> None:
        """``arg1``: a sparse matrix (converted), a SciPy sparse matrix or a host array-like
        (uploaded; duplicates summed and indices sorted on the host), a dense 2-D gpumsg array
        (cuSPARSE DenseToSparse), a shape ``(M, N)`` (no entries), ``(data, indices, indptr)``
        (taken as given: checked, not sorted) or ``(data, (row, col))`` (COO entries, summed
        where repeated)."""
        self._cache = {}
        fmt = self.format
        if isinstance(arg1, SparseMatrix):
            if shape is not None and check_shape(shape) != arg1.shape:
                raise InvalidMessage(f"shape: {shape} differs from the matrix's {arg1.shape}",
                                     field="shape")
            src = arg1.asformat(fmt)
            if dtype is not None:
                src = src.astype(dtype, copy=False)
            self._adopt(src.copy() if copy else src)
            return
        if C.is_shape(arg1):
            m, n = check_shape(arg1 if shape is None else shape)
            if shape is not None and check_shape(arg1) != (m, n):
                raise InvalidMessage(f"shape: {shape} differs from {arg1}", field="shape")
            dev = C.device_of(device)
            dt = P.value_dtype(D.float64 if dtype is None else dtype)
            it = P.index_dtype_for(m, n)
            nmajor = (m, n)[self._major]
            self._set(zeros((0,), dtype=dt, device=dev), zeros((0,), dtype=it, device=dev),
                      zeros((nmajor + 1,), dtype=it, device=dev), (m, n), True)
            return
        if isinstance(arg1, tuple) and len(arg1) == 2:
            from ._coo import coo_matrix

            self._adopt(coo_matrix(arg1, shape=shape, dtype=dtype, device=device)
                        .asformat(fmt))
            return
        if isinstance(arg1, tuple) and len(arg1) == 3:
            data, indices, indptr = arg1
            dev = C.device_of(device, data, indices, indptr)
            val = P.as_values(dev, data, "data", dtype)
            idx = P.as_index(dev, indices, "indices")
            ptr = P.as_index(dev, indptr, "indptr")
            if copy:
                val, idx, ptr = (astype(a, a.dtype, copy=True) for a in (val, idx, ptr))
            m, n, canonical = C.check_compressed(ptr, idx, val.shape[0], shape, self._major)
            it = P.index_dtype_for(m, n, val.shape[0])
            idx, ptr = P.narrow(idx, it), P.narrow(ptr, it)
            self._set(val, idx, ptr, (m, n), canonical)
            return
        if isinstance(arg1, tuple):
            raise InvalidMessage(f"arg1: expected (data, indices, indptr), (data, (row, col)) "
                                 f"or (M, N), got a tuple of {len(arg1)}", field="arg1")
        if isinstance(arg1, Array):
            self._from_dense(arg1, shape, dtype)
            return
        import scipy.sparse as sp

        dev = C.device_of(device)
        if sp.issparse(arg1):
            host = arg1.asformat(fmt, copy=True)
        else:
            import numpy as np

            arr = np.asarray(arg1)
            if arr.ndim > 2:
                raise InvalidMessage(f"arg1: expected a 2-D array, got {arr.ndim}-D",
                                     field="arg1")
            host = (sp.csr_matrix if fmt == "csr" else sp.csc_matrix)(np.atleast_2d(arr))
        if shape is not None and check_shape(shape) != host.shape:
            raise InvalidMessage(f"shape: {shape} differs from the matrix's {host.shape}",
                                 field="shape")
        ptr, idx, val, canonical = C.upload_scipy(dev, host, dtype)
        self._set(val, idx, ptr, host.shape, canonical)

    def _from_dense(self, dense: Array, shape: Any, dtype: Any) -> None:
        if dense.ndim != 2:
            raise InvalidMessage(f"arg1: expected a 2-D array, got {dense.ndim}-D", field="arg1")
        if shape is not None and check_shape(shape) != dense.shape:
            raise InvalidMessage(f"shape: {shape} differs from the array's {dense.shape}",
                                 field="shape")
        dt = P.value_dtype(dtype if dtype is not None else dense.dtype)
        if D.kind_of(dense.dtype) == "c" and D.kind_of(dt) != "c":
            raise TypeError(f"complex values cannot become {dt}")
        m, n = dense.shape
        src = dense if self._major == 0 else dense.T  # CSC of A = CSR of A^T
        rows, cols = src.shape
        dev = dense.device
        if 0 in (m, n):
            it = P.index_dtype_for(m, n)
            self._set(zeros((0,), dtype=dt, device=dev), zeros((0,), dtype=it, device=dev),
                      zeros((rows + 1,), dtype=it, device=dev), (m, n), True)
            return
        buf = P.whole(astype(src, dt, copy=False))
        it = P.index_dtype_for(m, n, m * n)  # the count is known only after the conversion
        handle = dev.cusparse.from_dense(buf.buffer, index_dtype=it).result()
        ptr, idx, val = _wrap(handle, dev)
        self._set(val, idx, ptr, (m, n), True)
        if self._major == 0:
            self._cache["handle"] = handle
        narrow = P.index_dtype_for(m, n, handle.nnz)
        if narrow != it:
            self._adopt(self._as_index(narrow))

    # -- the arrays --------------------------------------------------------------------------
    def _set(self, data: Array, indices: Array, indptr: Array, shape: tuple[int, int],
             canonical: bool) -> None:
        self._data, self._indices, self._indptr = data, indices, indptr
        self._shape = (int(shape[0]), int(shape[1]))
        self._canonical = canonical

    def _adopt(self, other: SparseMatrix) -> None:
        if not isinstance(other, type(self)):
            other = other.asformat(self.format)
        self._cache = {}
        self._set(other.data, other.indices, other.indptr, other.shape, other._canonical)
        if "handle" in other._cache:
            self._cache["handle"] = other._cache["handle"]

    @classmethod
    def _make(cls, data: Array, indices: Array, indptr: Array, shape: tuple[int, int],
              canonical: bool) -> Any:
        out = cls.__new__(cls)
        out._cache = {}
        out._set(data, indices, indptr, shape, canonical)
        return out

    @classmethod
    def _from_handle(cls, handle: Any, dev: Any, canonical: bool) -> Any:
        """A matrix over the buffers of a cuSPARSE matrix made by the device (SpGEMM, a
        conversion), keeping it as this matrix's descriptor."""
        ptr, idx, val = _wrap(handle, dev)
        out = cls._make(val, idx, ptr, handle.shape, canonical)
        out._cache["handle"] = handle
        return out

    @property
    def data(self) -> Array:
        return self._data

    @property
    def indices(self) -> Array:
        return self._indices

    @property
    def indptr(self) -> Array:
        return self._indptr

    def _arrays(self) -> tuple[Array, Array, Array]:
        return self._indptr, self._indices, self._data

    def _with_data(self, data: Array) -> Any:
        return type(self)._make(data, self._indices, self._indptr, self._shape, self._canonical)

    def _copied(self) -> Any:
        return type(self)._make(*(astype(a, a.dtype, copy=True) for a in
                                  (self._data, self._indices, self._indptr)), self._shape,
                                self._canonical)

    def _as_index(self, it: Any) -> Any:
        return type(self)._make(self._data, P.whole(astype(self._indices, it, copy=False)),
                                P.whole(astype(self._indptr, it, copy=False)), self._shape,
                                self._canonical)

    def _canonicalized(self) -> Any:
        m, n = self._shape
        major = P.expand(self._indptr, self.nnz)
        nmaj, nmin = (m, n) if self._major == 0 else (n, m)
        maj, mnr, val = P.coalesce(major, self._indices, self._data, nmaj, nmin)
        return type(self)._make(val, mnr, P.compress(maj, nmaj), self._shape, True)

    # -- conversions -------------------------------------------------------------------------
    def _other(self) -> Any:
        """The same matrix in the other compressed format (cusparseCsr2cscEx2: entries sorted
        along the new major axis, duplicates kept)."""
        target = "csc" if self.format == "csr" else "csr"
        cls = FORMATS[target]
        m, n = self._shape
        if self.nnz == 0 or m == 0 or n == 0:
            it = self._indices.dtype
            nmajor = (m, n)[cls._major]
            dev = self.device
            return cls._make(self._data, self._indices, zeros((nmajor + 1,), dtype=it,
                                                               device=dev), self._shape, True)
        src = self if self._indices.dtype == D.int32 else None
        if src is None or max(m, n, self.nnz) > P.INT32_MAX:
            # cusparseCsr2cscEx2 takes 32-bit indices: the larger matrix goes through COO
            return self.tocoo().asformat(target)
        handle = self.device.cusparse.convert(self._handle(), target)
        return cls._from_handle(handle, self.device, self._canonical)

    def tocoo(self, copy: bool = False) -> Any:
        major = P.expand(self._indptr, self.nnz)
        rows, cols = (major, self._indices) if self._major == 0 else (self._indices, major)
        data = astype(self._data, self.dtype, copy=True) if copy else self._data
        return FORMATS["coo"]._make(data, rows, cols, self._shape, self._canonical
                                    and self._major == 0)


class csr_matrix(_Compressed):
    """A compressed sparse row matrix on a gpumsg device (see :class:`SparseMatrix` and the
    constructor's forms)."""

    format = "csr"
    _major = 0
    _FORMAT_NAME = "Compressed Sparse Row"

    def tocsr(self, copy: bool = False) -> csr_matrix:
        return self.copy() if copy else self

    def tocsc(self, copy: bool = False) -> Any:
        return self._other()

    def transpose(self, axes: Any = None, copy: bool = False) -> Any:
        """The transpose: a CSC matrix over the same arrays."""
        if axes is not None:
            raise ValueError("axes: sparse matrices transpose their two axes only")
        return csc_matrix._make(self._data, self._indices, self._indptr, self._shape[::-1],
                                self._canonical)


class csc_matrix(_Compressed):
    """A compressed sparse column matrix on a gpumsg device (see :class:`SparseMatrix`)."""

    format = "csc"
    _major = 1
    _FORMAT_NAME = "Compressed Sparse Column"

    def tocsc(self, copy: bool = False) -> csc_matrix:
        return self.copy() if copy else self

    def tocsr(self, copy: bool = False) -> Any:
        return self._other()

    def transpose(self, axes: Any = None, copy: bool = False) -> Any:
        """The transpose: a CSR matrix over the same arrays."""
        if axes is not None:
            raise ValueError("axes: sparse matrices transpose their two axes only")
        return csr_matrix._make(self._data, self._indices, self._indptr, self._shape[::-1],
                                self._canonical)


def _wrap(handle: Any, dev: Any) -> tuple[Array, Array, Array]:
    """Arrays over a device-made cuSPARSE matrix's buffers (ptr, idx, val)."""
    ptr, idx, val = handle.buffers
    it = handle.index_dtype
    return (Array(ptr, ptr.shape, it, dev), Array(idx, idx.shape, it, dev),
            Array(val, val.shape, handle.dtype, dev))


def isspmatrix_csr(x: Any) -> bool:
    return isinstance(x, csr_matrix)


def isspmatrix_csc(x: Any) -> bool:
    return isinstance(x, csc_matrix)


FORMATS.update(csr=csr_matrix, csc=csc_matrix)
