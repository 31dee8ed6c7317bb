"""The cuSOLVER dense handle of one device (device thread).

Created on first use, destroyed when the device closes, bound to whichever device stream the
current operation runs on. Workspace sizes are queried once per (function, dtype, shape, lda)
and cached; device workspaces come from the device pool on the issuing stream and are freed
right after the call (stream-ordered, so they are reused only after the work).
"""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

from ...dtypes import CUDA_DATA_TYPE, dtype_of
from ...errors import LibraryError
from ...service.plans import PlanCache
from ..loader import LoadedLibrary, c_size_t, c_void_p, load
from .bindings import FILL, LETTER, OP, STATUS_NAMES

__all__ = ["CusolverHandle", "status_error", "triangle_spans"]


def status_error(status: int, function: str) -> LibraryError:
    return LibraryError("cusolver", status, STATUS_NAMES.get(status, str(status)), function)


def triangle_spans(uplo: str, n: int, lda: int) -> list[tuple[int, int]]:
    """(first element, count) of each column's part strictly outside the ``uplo`` triangle of
    a column-major n x n matrix: what ``clean=True`` sets to zero."""
    if uplo == "L":
        return [(j * lda, j) for j in range(1, n)]
    return [(j * lda + j + 1, n - j - 1) for j in range(n - 1)]


class CusolverHandle:
    """One cuSOLVER dense handle (and one params object) of one device."""

    def __init__(self, ctx: Any, lib: LoadedLibrary | None = None) -> None:
        self.lib = lib or load("cusolver")
        self._ctx = ctx
        h = c_void_p()
        self._check(self.lib.cusolverDnCreate(ctypes.byref(h)), "cusolverDnCreate")
        self.raw_handle: int = h.value or 0
        p = c_void_p()
        self._check(self.lib.cusolverDnCreateParams(ctypes.byref(p)), "cusolverDnCreateParams")
        self._params: int = p.value or 0
        self._bound_stream: Any = None
        #: (function, dtype, ...shape) -> (device bytes, host bytes, host buffer)
        self.workspaces = PlanCache(256)

    # -- plumbing ------------------------------------------------------------------------------
    def _check(self, status: int, function: str) -> None:
        if status:
            raise status_error(status, function)

    def _bind(self, stream: Any) -> None:
        if stream is not self._bound_stream:
            self._check(self.lib.cusolverDnSetStream(self.raw_handle, int(stream)),
                        "cusolverDnSetStream")
            self._bound_stream = stream

    def _call(self, stream: Any, name: str, *args: Any) -> None:
        self._bind(stream)
        self._check(getattr(self.lib, name)(self.raw_handle, self._params, *args), name)

    def _workspace(self, key: tuple, query: str, *args: Any) -> tuple[int, int, Any]:
        ws = self.workspaces.get(key)
        if ws is None:
            dev_bytes, host_bytes = c_size_t(), c_size_t()
            self._check(getattr(self.lib, query)(self.raw_handle, self._params, *args,
                                                 ctypes.byref(dev_bytes),
                                                 ctypes.byref(host_bytes)), query)
            # a host workspace (rarely non-zero) lives with the cache entry: the library may
            # read it while the call is queued
            host = np.empty(max(host_bytes.value, 1), np.uint8) if host_bytes.value else None
            ws = (dev_bytes.value, host_bytes.value, host)
            self.workspaces.put(key, ws)
        return ws

    def _with_workspace(self, stream: Any, nbytes: int, issue: Any) -> None:
        memory = self._ctx.memory
        dev = memory.allocate(nbytes, stream) if nbytes else 0
        try:
            issue(dev)
        finally:
            if nbytes:
                memory.deallocate(dev, nbytes, stream)

    def zero_outside(self, stream: Any, dtype: str, uplo: str, n: int, a: int,
                     lda: int) -> None:
        """Set the part of the column-major n x n matrix outside its ``uplo`` triangle to zero
        (one memset per column: the library has no triangular fill)."""
        item = dtype_of(dtype).itemsize
        memset = self._ctx.backend.memset
        for start, count in triangle_spans(uplo, n, lda):
            memset(stream, a + start * item, 0, count * item // 4, 4)

    def zero_outside_strided(self, stream: Any, dtype: str, uplo: str, n: int, a: int,
                             lda: int, stride: int, batch: int) -> None:
        """:meth:`zero_outside` on ``batch`` matrices ``stride`` elements apart: one 2-D memset
        per column covers that column in every matrix (n calls, whatever the batch)."""
        from cuda.bindings import driver

        item = dtype_of(dtype).itemsize
        for start, count in triangle_spans(uplo, n, lda):
            err = driver.cuMemsetD2D32Async(a + start * item, stride * item, 0,
                                            count * item // 4, batch, stream)[0]
            if err:
                raise LibraryError("cuda", int(err), str(err), "cuMemsetD2D32Async")

    # -- Cholesky ------------------------------------------------------------------------------
    def potrf(self, stream: Any, dtype: str, uplo: str, n: int, a: int, lda: int, clean: bool,
              info: int) -> None:
        t = CUDA_DATA_TYPE[dtype]
        if clean:
            self.zero_outside(stream, dtype, uplo, n, a, lda)
        dev_bytes, host_bytes, host = self._workspace(
            ("potrf", dtype, uplo, n, lda), "cusolverDnXpotrf_bufferSize", FILL[uplo], n, t, a,
            lda, t)
        self._bind(stream)
        self._with_workspace(stream, dev_bytes, lambda ws: self._call(
            stream, "cusolverDnXpotrf", FILL[uplo], n, t, a, lda, t, ws, dev_bytes,
            None if host is None else host.ctypes.data, host_bytes, info))

    def potrs(self, stream: Any, dtype: str, uplo: str, n: int, nrhs: int, a: int, lda: int,
              b: int, ldb: int, info: int) -> None:
        t = CUDA_DATA_TYPE[dtype]
        self._call(stream, "cusolverDnXpotrs", FILL[uplo], n, nrhs, t, a, lda, t, b, ldb, info)

    def potrf_batched(self, stream: Any, dtype: str, uplo: str, n: int, ptrs: int, lda: int,
                      infos: int, batch: int) -> None:
        """``batch`` factorizations; ``ptrs``: device array of matrix pointers, ``infos``:
        device int32[batch]."""
        name = f"cusolverDn{LETTER[dtype]}potrfBatched"
        self._bind(stream)
        self._check(getattr(self.lib, name)(self.raw_handle, FILL[uplo], n, ptrs, lda, infos,
                                            batch), name)

    # -- LU ------------------------------------------------------------------------------------
    def getrf(self, stream: Any, dtype: str, m: int, n: int, a: int, lda: int, ipiv: int,
              info: int) -> None:
        t = CUDA_DATA_TYPE[dtype]
        dev_bytes, host_bytes, host = self._workspace(
            ("getrf", dtype, m, n, lda), "cusolverDnXgetrf_bufferSize", m, n, t, a, lda, t)
        self._bind(stream)
        self._with_workspace(stream, dev_bytes, lambda ws: self._call(
            stream, "cusolverDnXgetrf", m, n, t, a, lda, ipiv or None, t, ws, dev_bytes,
            None if host is None else host.ctypes.data, host_bytes, info))

    def getrs(self, stream: Any, dtype: str, trans: str, n: int, nrhs: int, a: int, lda: int,
              ipiv: int, b: int, ldb: int, info: int) -> None:
        t = CUDA_DATA_TYPE[dtype]
        self._call(stream, "cusolverDnXgetrs", OP[trans], n, nrhs, t, a, lda, ipiv or None, t,
                   b, ldb, info)

    def close(self) -> None:
        if self._params:
            self.lib.cusolverDnDestroyParams(self._params)
            self._params = 0
        if self.raw_handle:
            self.lib.cusolverDnDestroy(self.raw_handle)
            self.raw_handle = 0
        self.workspaces = PlanCache(256)
