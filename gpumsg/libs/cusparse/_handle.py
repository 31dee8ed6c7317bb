"""The cuSPARSE handle of one device (device thread).

Created on first use, destroyed when the device closes, bound to the stream of the current
operation. Each sparse matrix has a record here: its cuSPARSE descriptor and the workspaces of
the operations run on it, each sized by one ``*_bufferSize`` query per (operation, op, dense
shape, dtype) and kept, from the device pool, until the matrix is destroyed (all sparse work runs
on the compute stream, so a kept workspace is reused in stream order). Dense vector and matrix
descriptors are cached by (pointer, shape, dtype): a repeated SpMV on the same buffers is one
``cusparseSpMV`` call; a CSR matrix's SpMV workspace is also preprocessed once
(``cusparseSpMV_preprocess``, where the library has it: NVIDIA's advice for a matrix used by
repeated SpMVs). Scalars are passed in host pointer mode (read during the call). Arrays of no
elements (NULL in the pool) are passed as a small dummy allocation: cuSPARSE reads none of it.

A repeated SpMV or SpMM message (the client sends it as the same object) keeps a launcher
(:meth:`CusparseHandle.spmv_bound`, kept per message in the device's ``DerivedMemo``): the
record lookup, the dense descriptors, the workspace, the scalars and the library call's
arguments are derived once, and re-derived only when the handle's ``epoch`` moved (a matrix
made or destroyed, a dense descriptor released). The call itself is replayed as a CUDA graph
from its second run on (``GraphReplays``; cuSPARSE documents SpMV and, after
``cusparseSpMM_preprocess``, SpMM as capturable). ``GPUMSG_SPARSE_REPLAY=0`` turns replays off.
"""

from __future__ import annotations

import ctypes
import itertools
import marshal
from collections.abc import Callable
from typing import Any

import numpy as np

from ...backends.cuda._replays import GraphReplays, device_replays, direct_bound, enabled
from ...config import setting
from ...dtypes import CUDA_DATA_TYPE, dtype_of
from ...errors import InvalidMessage, LibraryError
from ...messages.cusparse import SparseRef
from ...service._plans import PlanCache
from .._loader import LoadedLibrary, c_int, c_int64, c_size_t, c_void_p, load
from ._bindings import (
    ACTION_NUMERIC,
    ALG_DEFAULT,
    ATTR_DIAG,
    ATTR_FILL,
    BASE_ZERO,
    CSR2CSC_ALG1,
    DIAG,
    FILL,
    INDEX,
    OP,
    ORDER_ROW,
    SPGEMM_DEFAULT,
    SPMM_BSR_ALG1,
)

__all__ = ["CusparseHandle", "SizeCounter", "DEVICE_SCALARS_ENV", "REPLAY_ENV",
           "REPLAY_CAPACITY"]

#: set to 1 to pass SpMV's alpha and beta from device memory (pointer mode device) instead of
#: host memory: an experiment on where the SpMV gap to torch comes from (bench_sparse.py runs
#: both); off by default until a device run shows it helps
DEVICE_SCALARS_ENV = "GPUMSG_CUSPARSE_DEVICE_SCALARS"
_SLOT = 32  # bytes per (alpha, beta) pair: two c128 at most
_SLOTS = 1024
#: set to 0 to issue every repeated SpMV/SpMM as a library call instead of a CUDA graph replay
REPLAY_ENV = "GPUMSG_SPARSE_REPLAY"
#: CUDA graphs of repeated SpMVs (and, apart, SpMMs) kept per handle, a few KiB each
REPLAY_CAPACITY = 64
#: (dtype, alpha, beta) pairs kept in host memory that is never rewritten (see _pair)
_PAIRS = 1024


class SizeCounter:
    """Counts workspace-size queries: a hit is an operation that found its size (and workspace)
    already known, a miss one that queried it."""

    def __init__(self) -> None:
        self.hits = self.misses = 0
        self.size = 0

    def info(self) -> dict[str, int]:
        return {"hits": self.hits, "misses": self.misses, "size": self.size}


class _Matrix:
    """The device-side state of one sparse matrix."""

    __slots__ = ("ref", "desc", "ws", "spsv", "serial", "prepped", "alive")

    def __init__(self, ref: SparseRef, desc: int, serial: int) -> None:
        self.ref = ref
        self.desc = desc
        #: unique for the handle's life (a matrix id may be created again, and a descriptor's
        #: address reused): what replay keys name the matrix by
        self.serial = serial
        self.ws: dict[Any, tuple[int, int]] = {}  # key -> (device ptr, bytes)
        #: SpMM workspace keys whose cusparseSpMM_preprocess succeeded (only those replay)
        self.prepped: set[tuple] = set()
        #: False once destroyed: a launcher holding the record derives again (and fails)
        self.alive = True
        #: (kind, op, uplo, diag, ...) -> (SpSV/SpSM descriptor, workspace ptr, bytes)
        self.spsv: dict[tuple, tuple[int, int, int]] = {}


class CusparseHandle:
    """One cuSPARSE handle of one device, with its matrices' descriptors and workspaces."""

    def __init__(self, ctx: Any, lib: LoadedLibrary | None = None) -> None:
        self.lib = lib or load("cusparse")
        self._ctx = ctx
        h = c_void_p()
        self._check(self.lib.cusparseCreate(ctypes.byref(h)), "cusparseCreate")
        self.raw_handle: int = h.value or 0
        self._bound_stream: Any = None
        self.matrices: dict[int, _Matrix] = {}
        self.plans: dict[int, dict[str, Any]] = {}
        self.sizes = SizeCounter()
        self._dummy = 0
        # device scalars (DEVICE_SCALARS_ENV): (dtype, alpha, beta) -> device address of the
        # pair, written once from a pinned block that is never rewritten
        self._device_scalars = setting(DEVICE_SCALARS_ENV) == "1"
        self._scalar_slots: dict[tuple, int] = {}
        self._scalar_dev = 0
        self._scalar_host: Any = None
        self._pointer_mode = 0
        #: moves whenever a dense descriptor is released, which a kept launcher may hold
        #: (_Bound; a destroyed matrix says so itself: _Matrix.alive)
        self._epoch = 0
        self._serials = itertools.count(1)
        self._vecs = PlanCache(256, release=self._release_vec)
        self._mats = PlanCache(64, release=self._release_mat)
        #: alpha/beta pairs by value, never rewritten while the handle lives: a launcher and a
        #: captured graph may point at them for good (_pair)
        self._pairs: dict[tuple, tuple[Any, int, int]] = {}
        #: repeated SpMVs and SpMMs replayed as CUDA graphs, apart (a capture refused by one
        #: stops only that one); None where off or on a backend without graphs
        self.spmv_replays: GraphReplays | None = None
        self.spmm_replays: GraphReplays | None = None
        if enabled(REPLAY_ENV):
            self.spmv_replays, self.spmm_replays = (
                device_replays(ctx, REPLAY_CAPACITY) for _ in range(2))
        # host scalars (alpha, beta) per dtype: written before each call, read during it
        self._scalars = {t: np.zeros(2, dtype_of(t)) for t in ("f32", "f64", "c64", "c128")}
        self._scalar_ptrs = {t: (a.ctypes.data, a.ctypes.data + a.itemsize)
                             for t, a in self._scalars.items()}
        #: (1, 0) per dtype, never rewritten: alpha and beta of the scratch SpMV (_spmv_ws)
        self._one_zero = {t: np.array([1, 0], dtype_of(t)) for t in self._scalars}
        #: (libcusolver, cusolverSp handle, matrix descriptor) of SpSolveQR, made on first use
        self._sp: tuple[Any, int, int] | None = None

    # -- plumbing ------------------------------------------------------------------------------
    def _check(self, status: int, function: str) -> None:
        if status:
            name = self.lib.cusparseGetErrorName(status)
            raise LibraryError("cusparse", status, name.decode() if name else str(status),
                               function)

    def _bind(self, stream: Any) -> None:
        if stream is not self._bound_stream:
            self._check(self.lib.cusparseSetStream(self.raw_handle, int(stream)),
                        "cusparseSetStream")
            self._bound_stream = stream

    def _ab(self, dtype: str, alpha: Any, beta: Any = 0.0) -> tuple[int, int]:
        s = self._scalars[dtype]
        s[0] = alpha
        s[1] = beta
        return self._scalar_ptrs[dtype]

    def _mode(self, device: bool) -> None:
        mode = 1 if device else 0
        if mode != self._pointer_mode:
            self._check(self.lib.cusparseSetPointerMode(self.raw_handle, mode),
                        "cusparseSetPointerMode")
            self._pointer_mode = mode

    def _pair(self, dtype: str, alpha: Any, beta: Any) -> tuple[Any, int, int] | None:
        """(array, &alpha, &beta): host scalars of these values that are never rewritten, so
        that a kept launcher and a captured graph may point at them for the handle's life (in
        host pointer mode cuSPARSE reads them during the call; a capture records their values
        then). Keyed by the values' marshal encoding, which tells -0.0 from 0.0. None once
        :data:`_PAIRS` pairs are held: such calls are not kept or replayed."""
        key = (dtype, marshal.dumps((alpha, beta), 2))
        found = self._pairs.get(key)
        if found is None:
            if len(self._pairs) >= _PAIRS:
                return None
            arr = np.array([alpha, beta], dtype_of(dtype))
            base = arr.ctypes.data
            found = self._pairs[key] = (arr, base, base + arr.itemsize)
        return found

    def _release_vec(self, d: int) -> None:
        self._epoch += 1  # a kept launcher may hold it (_Bound)
        self.lib.cusparseDestroyDnVec(d)

    def _release_mat(self, d: int) -> None:
        self._epoch += 1
        self.lib.cusparseDestroyDnMat(d)

    def _device_ab(self, stream: Any, dtype: str, alpha: Any, beta: Any) -> tuple[int, int]:
        """Device addresses of (alpha, beta), or (0, 0) when every slot is taken."""
        key = (dtype, alpha, beta)
        ptr = self._scalar_slots.get(key)
        if ptr is None:
            n = len(self._scalar_slots)
            if n >= _SLOTS:
                return 0, 0
            if not self._scalar_dev:
                self._scalar_dev = self._alloc(_SLOT * _SLOTS)
                self._scalar_host = self._ctx.pinned.allocate(_SLOT * _SLOTS)
            pair = np.array([alpha, beta], dtype_of(dtype))
            view = self._scalar_host.bytes[n * _SLOT:n * _SLOT + pair.nbytes]
            view[...] = pair.view(np.uint8)
            ptr = self._scalar_dev + n * _SLOT
            self._ctx.backend.copy_htod(stream, ptr, self._scalar_host.ptr + n * _SLOT,
                                        pair.nbytes)
            self._scalar_slots[key] = ptr
        return ptr, ptr + dtype_of(dtype).itemsize

    def _alloc(self, nbytes: int) -> int:
        return self._ctx.memory.allocate(nbytes, self._ctx.compute.obj) if nbytes else 0

    def _free(self, ptr: int, nbytes: int) -> None:
        if ptr:
            self._ctx.memory.deallocate(ptr, nbytes, self._ctx.compute.obj)

    def _nonnull(self, ptr: int) -> int:
        """``ptr``, or for an empty array (NULL) a small dummy allocation."""
        if ptr:
            return ptr
        if not self._dummy:
            self._dummy = self._alloc(256)
        return self._dummy

    def _record(self, mid: int) -> _Matrix:
        rec = self.matrices.get(mid)
        if rec is None:
            raise InvalidMessage(f"sparse matrix #{mid} has no descriptor on this device "
                                 "(destroyed, or never created)", field="a")
        return rec

    def _dnvec(self, ptr: int, n: int, dtype: str) -> int:
        key = (ptr, n, dtype)
        d = self._vecs.get(key)
        if d is None:
            h = c_void_p()
            self._check(self.lib.cusparseCreateDnVec(ctypes.byref(h), n, ptr,
                                                     CUDA_DATA_TYPE[dtype]), "cusparseCreateDnVec")
            d = h.value
            self._vecs.put(key, d)
        return d

    def _dnmat(self, ptr: int, rows: int, cols: int, dtype: str) -> int:
        """A row-major rows x cols dense matrix descriptor (leading dimension cols)."""
        key = (ptr, rows, cols, dtype)
        d = self._mats.get(key)
        if d is None:
            h = c_void_p()
            self._check(self.lib.cusparseCreateDnMat(ctypes.byref(h), rows, cols, max(cols, 1),
                                                     ptr, CUDA_DATA_TYPE[dtype], ORDER_ROW),
                        "cusparseCreateDnMat")
            d = h.value
            self._mats.put(key, d)
        return d

    def _workspace(self, rec: _Matrix, key: tuple, query: Any) -> int:
        """The kept workspace of ``key`` on matrix ``rec``; ``query()`` returns its size."""
        ws = rec.ws.get(key)
        if ws is None:
            self.sizes.misses += 1
            nbytes = query()
            ws = (self._alloc(nbytes), nbytes)
            rec.ws[key] = ws
            self.sizes.size += 1
        else:
            self.sizes.hits += 1
        return ws[0]

    def _size(self, name: str, *args: Any) -> int:
        n = c_size_t()
        self._check(getattr(self.lib, name)(self.raw_handle, *args, ctypes.byref(n)), name)
        return n.value

    def _create_desc(self, ref: SparseRef, ptr: int, idx: int, val: int) -> int:
        h = c_void_p()
        rows, cols = ref.shape
        it, vt = INDEX[ref.index_dtype], CUDA_DATA_TYPE[ref.dtype]
        nn = self._nonnull
        ptr, idx, val = nn(ptr), nn(idx), nn(val)
        lib, f = self.lib, ref.format
        if f == "csr":
            st = lib.cusparseCreateCsr(ctypes.byref(h), rows, cols, ref.nnz, ptr, idx, val, it,
                                       it, BASE_ZERO, vt)
        elif f == "csc":
            st = lib.cusparseCreateCsc(ctypes.byref(h), rows, cols, ref.nnz, ptr, idx, val, it,
                                       it, BASE_ZERO, vt)
        elif f == "coo":
            st = lib.cusparseCreateCoo(ctypes.byref(h), rows, cols, ref.nnz, ptr, idx, val, it,
                                       BASE_ZERO, vt)
        else:
            b = ref.block
            st = lib.cusparseCreateBsr(ctypes.byref(h), rows // b, cols // b, ref.nnz, b, b, ptr,
                                       idx, val, it, it, BASE_ZERO, vt, ORDER_ROW)
        self._check(st, f"cusparseCreate{f.capitalize()}")
        return h.value or 0

    # -- matrices ------------------------------------------------------------------------------
    def create(self, ref: SparseRef, ptr: int, idx: int, val: int) -> None:
        """Create (or re-create) the descriptor of ``ref`` over the given device pointers."""
        if ref.id in self.matrices:
            self.destroy(ref.id)
        self.matrices[ref.id] = _Matrix(ref, self._create_desc(ref, ptr, idx, val),
                                        next(self._serials))

    def destroy(self, mid: int) -> None:
        rec = self.matrices.pop(mid, None)
        if rec is None:
            return
        rec.alive = False  # launchers holding the record derive again (and fail: it is gone)
        self._forget(rec.serial)  # before its workspaces go
        for ptr, nbytes in rec.ws.values():
            self._free(ptr, nbytes)
        for key, (descr, ptr, nbytes) in rec.spsv.items():
            if key[0] == "spsm":
                self.lib.cusparseSpSM_destroyDescr(descr)
            else:
                self.lib.cusparseSpSV_destroyDescr(descr)
            self._free(ptr, nbytes)
        self.sizes.size -= len(rec.ws) + len(rec.spsv)
        self.lib.cusparseDestroySpMat(rec.desc)

    def _forget(self, serial: int) -> None:
        """Destroy the replay graphs of a destroyed matrix (its serial is never used again, so
        they would only wait for eviction; their workspace is about to be freed)."""
        for replays in (self.spmv_replays, self.spmm_replays):
            if replays is not None:
                replays.forget(lambda key: key[2] == serial)

    # -- products ------------------------------------------------------------------------------
    def _spmv_ws(self, rec: _Matrix, o: int, pa: int, vx: int, pb: int, vy: int, t: int) -> int:
        """The kept SpMV workspace of ``rec`` for operation ``o`` (sized, allocated and, for
        CSR, preprocessed on first use, then settled by :meth:`_scratch_spmv`), counted as a
        hit or a miss."""
        entry = rec.ws.get(o)
        if entry is None:
            self.sizes.misses += 1
            nbytes = self._size("cusparseSpMV_bufferSize", o, pa, rec.desc, vx, pb, vy, t,
                                ALG_DEFAULT)
            entry = rec.ws[o] = (self._alloc(nbytes), nbytes)
            self.sizes.size += 1
            pre = self.lib.cusparseSpMV_preprocess
            if pre is not None and o == 0 and rec.ref.format == "csr":
                # an optimization only: without it (status != 0) SpMV works the same
                pre(self.raw_handle, o, pa, rec.desc, vx, pb, vy, t, ALG_DEFAULT,
                    entry[0] or None)
            self._scratch_spmv(rec, o, vx, t, entry[0])
        else:
            self.sizes.hits += 1
        return entry[0]

    def _scratch_spmv(self, rec: _Matrix, o: int, vx: int, t: int, ws: int) -> None:
        """One SpMV of a matrix's new workspace into a scratch vector, before the caller's.
        On H100 and H200 (CUDA 13), the first SpMV of a fresh handle, in a process where an
        earlier device's handle had been destroyed, wrote 0 into the last row of a 32x32
        complex128 CSR product (every input read back right, with CUDA_LAUNCH_BLOCKING=1,
        with and without preprocessing, with CSR_ALG1 and ALG2, a zeroed workspace and no
        graphs; the output was written, not skipped); every later SpMV on the same handle
        was right. The cause inside cuSPARSE was not found: this call takes that first
        product (tests/array_api/sparse: test_first_product_of_a_matrix_over_computed_arrays
        after test_arrays_of_another_device_are_refused). Not while a graph is recorded
        (``dev.graph``): the recording keeps exactly the caller's calls, without a scratch
        vector's allocation and free as graph nodes."""
        if getattr(self._ctx, "capture", None) is not None:
            return
        dtype = rec.ref.dtype
        rows, cols = rec.ref.shape
        n = rows if o == 0 else cols
        if n == 0:
            return
        pair = self._one_zero[dtype]
        nbytes = n * pair.itemsize
        scratch = self._alloc(nbytes)
        h = c_void_p()
        self._check(self.lib.cusparseCreateDnVec(ctypes.byref(h), n, scratch, t),
                    "cusparseCreateDnVec")
        try:
            one = pair.ctypes.data
            st = self.lib.cusparseSpMV(self.raw_handle, o, one, rec.desc, vx,
                                       one + pair.itemsize, h.value, t, ALG_DEFAULT, ws)
        finally:
            self.lib.cusparseDestroyDnVec(h.value)
            self._free(scratch, nbytes)
        if st:
            self._check(st, "cusparseSpMV")

    def spmv(self, stream: Any, mid: int, op: str, alpha: Any, x: int, beta: Any, y: int,
             nx: int, ny: int) -> None:
        rec = self._record(mid)
        dtype = rec.ref.dtype
        t = CUDA_DATA_TYPE[dtype]
        vx, vy = self._dnvec(x, nx, dtype), self._dnvec(y, ny, dtype)
        pa, pb = self._ab(dtype, alpha, beta)
        o = OP[op]
        h = self.raw_handle
        if stream is not self._bound_stream:
            self._bind(stream)
        ws = self._spmv_ws(rec, o, pa, vx, pb, vy, t)
        if self._device_scalars:
            da, db = self._device_ab(stream, dtype, alpha, beta)
            if da:
                self._mode(True)
                st = self.lib.cusparseSpMV(h, o, da, rec.desc, vx, db, vy, t, ALG_DEFAULT, ws)
                self._mode(False)
                if st:
                    self._check(st, "cusparseSpMV")
                return
        st = self.lib.cusparseSpMV(h, o, pa, rec.desc, vx, pb, vy, t, ALG_DEFAULT, ws)
        if st:
            self._check(st, "cusparseSpMV")

    def spmv_bound(self, stream: Any, mid: int, op: str, alpha: Any, x: int, beta: Any, y: int,
                   nx: int, ny: int) -> Callable[[Any], None]:
        """``launch(stream)``: :meth:`spmv` with these arguments on ``stream`` (the stream it
        was bound for), for a handler that keeps it per message and pointers
        (service/derived.py). What the call needs is derived at its first launch and again
        only after the handle's epoch moved; from the second launch on the call is replayed
        as a CUDA graph. Raises what :meth:`spmv` raises (a destroyed matrix: InvalidMessage)."""
        if self._device_scalars:  # the experiment keeps its own path
            return direct_bound("spmv", self.spmv, stream, mid, op, alpha, x, beta, y, nx, ny)
        return _Bound(self, lambda: self._derive_spmv(stream, mid, op, alpha, x, beta, y, nx,
                                                      ny))

    def _derive_spmv(self, stream: Any, mid: int, op: str, alpha: Any, x: int, beta: Any,
                     y: int, nx: int, ny: int) -> tuple[Callable[[Any], None], _Matrix]:
        rec = self._record(mid)
        dtype = rec.ref.dtype
        t = CUDA_DATA_TYPE[dtype]
        vx, vy = self._dnvec(x, nx, dtype), self._dnvec(y, ny, dtype)
        o = OP[op]
        pair = self._pair(dtype, alpha, beta)
        if pair is None:  # no lasting scalars left: the plain call, every time
            return _plain(self.spmv, mid, op, alpha, x, beta, y, nx, ny), rec
        _, pa, pb = pair
        if stream is not self._bound_stream:
            self._bind(stream)  # the preprocess of a new workspace runs on it
        ws = self._spmv_ws(rec, o, pa, vx, pb, vy, t)
        return self._launcher("cusparseSpMV", self.spmv_replays, self.lib.cusparseSpMV,
                              (self.raw_handle, o, pa, rec.desc, vx, pb, vy, t, ALG_DEFAULT, ws),
                              ("spmv", id(stream), rec.serial, o, x, nx, y, ny, dtype, pa,
                               ws)), rec

    def _launcher(self, name: str, replays: GraphReplays | None, fn: Any, args: tuple,
                  key: tuple) -> Callable[[Any], None]:
        """``launch(stream)`` of ``fn(*args)`` on the bound stream, through ``replays`` by
        ``key`` where given. The key holds everything the call reads besides device memory:
        the stream, the matrix (by serial: its descriptor, its arrays' addresses, its
        workspace), the operation, the dense operands' addresses and shapes, the dtype, the
        lasting scalars' address (their values), the workspace; ``key[2]`` is the serial."""
        check = self._check
        bind = self._bind

        def now(on: Any) -> None:
            if on is not self._bound_stream:
                bind(on)
            status = fn(*args)
            if status:
                check(status, name)

        if replays is None:
            return now
        call_keyed = replays.call_keyed

        def replayed(on: Any) -> None:
            call_keyed(key, now, on, ())

        return replayed

    def spmm(self, stream: Any, mid: int, op: str, alpha: Any, b: int, b_shape: tuple,
             beta: Any, c: int, c_shape: tuple) -> None:
        rec = self._record(mid)
        dtype = rec.ref.dtype
        t = CUDA_DATA_TYPE[dtype]
        mb, mc = self._dnmat(b, *b_shape, dtype), self._dnmat(c, *c_shape, dtype)
        pa, pb = self._ab(dtype, alpha, beta)
        o = OP[op]
        alg = SPMM_BSR_ALG1 if rec.ref.format == "bsr" else ALG_DEFAULT
        self._bind(stream)
        ws = self._spmm_ws(rec, o, b_shape[1], pa, mb, pb, mc, t, alg)
        self._check(self.lib.cusparseSpMM(self.raw_handle, o, 0, pa, rec.desc, mb, pb, mc, t,
                                          alg, ws), "cusparseSpMM")

    def _spmm_ws(self, rec: _Matrix, o: int, width: int, pa: int, mb: int, pb: int, mc: int,
                 t: int, alg: int) -> int:
        """The kept SpMM workspace of ``rec`` for (operation, dense width), counted as a hit
        or a miss. A new one is preprocessed (``cusparseSpMM_preprocess``, where the library
        has it) on the bound stream: cuSPARSE needs that before an SpMM is captured, and it
        may speed up CSR. Its other arguments are those of every later call with this
        workspace (same operation, width, dtype, algorithm), as the preprocess requires."""
        key = ("spmm", o, width)
        entry = rec.ws.get(key)
        if entry is None:
            self.sizes.misses += 1
            nbytes = self._size("cusparseSpMM_bufferSize", o, 0, pa, rec.desc, mb, pb, mc, t,
                                alg)
            entry = rec.ws[key] = (self._alloc(nbytes), nbytes)
            self.sizes.size += 1
            pre = self.lib.cusparseSpMM_preprocess
            if pre is not None and pre(self.raw_handle, o, 0, pa, rec.desc, mb, pb, mc, t, alg,
                                       entry[0] or None) == 0:
                rec.prepped.add(key)
        else:
            self.sizes.hits += 1
        return entry[0]

    def spmm_bound(self, stream: Any, mid: int, op: str, alpha: Any, b: int, b_shape: tuple,
                   beta: Any, c: int, c_shape: tuple) -> Callable[[Any], None]:
        """``launch(stream)``: :meth:`spmm` with these arguments, kept per message as
        :meth:`spmv_bound` is; replayed only where its workspace was preprocessed."""
        return _Bound(self, lambda: self._derive_spmm(stream, mid, op, alpha, b, b_shape, beta,
                                                      c, c_shape))

    def _derive_spmm(self, stream: Any, mid: int, op: str, alpha: Any, b: int, b_shape: tuple,
                     beta: Any, c: int, c_shape: tuple) -> tuple[Callable[[Any], None], _Matrix]:
        rec = self._record(mid)
        dtype = rec.ref.dtype
        t = CUDA_DATA_TYPE[dtype]
        mb, mc = self._dnmat(b, *b_shape, dtype), self._dnmat(c, *c_shape, dtype)
        o = OP[op]
        pair = self._pair(dtype, alpha, beta)
        if pair is None:
            return _plain(self.spmm, mid, op, alpha, b, b_shape, beta, c, c_shape), rec
        _, pa, pb = pair
        alg = SPMM_BSR_ALG1 if rec.ref.format == "bsr" else ALG_DEFAULT
        if stream is not self._bound_stream:
            self._bind(stream)
        ws = self._spmm_ws(rec, o, b_shape[1], pa, mb, pb, mc, t, alg)
        replays = self.spmm_replays if ("spmm", o, b_shape[1]) in rec.prepped else None
        return self._launcher("cusparseSpMM", replays, self.lib.cusparseSpMM,
                              (self.raw_handle, o, 0, pa, rec.desc, mb, pb, mc, t, alg, ws),
                              ("spmm", id(stream), rec.serial, o, b, b_shape, c, c_shape,
                               dtype, pa, ws, alg)), rec

    def replay_info(self) -> dict[str, Any]:
        """The SpMV and SpMM replays: on or off, graphs held, captures, launches, why
        refused (``backends/cuda/replays.py``)."""
        r, m = self.spmv_replays, self.spmm_replays
        if r is None or m is None:
            return {"enabled": False}
        return {"enabled": True, **r.info(), "spmm": m.info()}

    def spgemm_start(self, stream: Any, plan: int, a_id: int, b_id: int, alpha: Any) -> None:
        """Work estimation and compute of C = alpha A B, kept under ``plan``. cuSPARSE learns
        C's size in the compute phase (the library waits for its own kernels there)."""
        a, b = self._record(a_id), self._record(b_id)
        dtype, it = a.ref.dtype, INDEX[a.ref.index_dtype]
        t = CUDA_DATA_TYPE[dtype]
        lib, h = self.lib, self.raw_handle
        c, g = c_void_p(), c_void_p()
        self._check(lib.cusparseCreateCsr(ctypes.byref(c), a.ref.shape[0], b.ref.shape[1], 0,
                                          None, None, None, it, it, BASE_ZERO, t),
                    "cusparseCreateCsr")
        state: dict[str, Any] = {"c": c.value, "bufs": [], "dtype": dtype, "alpha": alpha,
                                 "a": a.desc, "b": b.desc}
        self.plans[plan] = state
        try:
            self._check(lib.cusparseSpGEMM_createDescr(ctypes.byref(g)),
                        "cusparseSpGEMM_createDescr")
            state["g"] = g.value
            self._bind(stream)
            for phase in ("workEstimation", "compute"):
                name = f"cusparseSpGEMM_{phase}"
                pa, pb = self._ab(dtype, alpha, 0.0)
                n = c_size_t()
                self._check(getattr(lib, name)(h, 0, 0, pa, a.desc, b.desc, pb, c.value, t,
                                               SPGEMM_DEFAULT, g.value, ctypes.byref(n), None),
                            name)
                # never NULL: a NULL buffer would make the second call a size query again
                size = max(n.value, 256)
                buf = self._alloc(size)
                state["bufs"].append((buf, size))
                pa, pb = self._ab(dtype, alpha, 0.0)
                self._check(getattr(lib, name)(h, 0, 0, pa, a.desc, b.desc, pb, c.value, t,
                                               SPGEMM_DEFAULT, g.value, ctypes.byref(n),
                                               buf), name)
        except BaseException:
            self.drop(plan)
            raise

    def plan_nnz(self, plan: int) -> int:
        """The number of entries of a plan's result (SpGEMM: known after its compute phase)."""
        state = self.plans[plan]
        if "nnz" in state:
            return state["nnz"]
        rows, cols, nnz = c_int64(), c_int64(), c_int64()
        self._check(self.lib.cusparseSpMatGetSize(state["c"], ctypes.byref(rows),
                                                  ctypes.byref(cols), ctypes.byref(nnz)),
                    "cusparseSpMatGetSize")
        return nnz.value

    def spgemm_finish(self, stream: Any, plan: int, ptr: int, idx: int, val: int) -> None:
        state = self.plans.get(plan)
        if state is None or "g" not in state:
            raise InvalidMessage(f"no SpGEMM plan {plan} on this device", field="plan")
        lib = self.lib
        try:
            dtype = state["dtype"]
            nn = self._nonnull
            self._check(lib.cusparseCsrSetPointers(state["c"], nn(ptr), nn(idx), nn(val)),
                        "cusparseCsrSetPointers")
            self._bind(stream)
            pa, pb = self._ab(dtype, state["alpha"], 0.0)
            self._check(lib.cusparseSpGEMM_copy(self.raw_handle, 0, 0, pa, state["a"],
                                                state["b"], pb, state["c"],
                                                CUDA_DATA_TYPE[dtype], SPGEMM_DEFAULT,
                                                state["g"]), "cusparseSpGEMM_copy")
        finally:
            self.drop(plan)

    def drop(self, plan: int) -> None:
        """Release a plan: its descriptors and (stream-ordered) its buffers."""
        state = self.plans.pop(plan, None)
        if state is None:
            return
        for ptr, nbytes in state["bufs"]:
            self._free(ptr, nbytes)
        if state.get("g"):
            self.lib.cusparseSpGEMM_destroyDescr(state["g"])
        if state.get("c"):
            self.lib.cusparseDestroySpMat(state["c"])
        if state.get("dense"):
            self.lib.cusparseDestroyDnMat(state["dense"])

    def spsv(self, stream: Any, mid: int, op: str, uplo: str, diag: str, alpha: Any, x: int,
             y: int, n: int) -> None:
        rec = self._record(mid)
        dtype = rec.ref.dtype
        t = CUDA_DATA_TYPE[dtype]
        lib, h = self.lib, self.raw_handle
        self._triangle(rec, uplo, diag)
        vx, vy = self._dnvec(x, n, dtype), self._dnvec(y, n, dtype)
        o = OP[op]
        pa, _ = self._ab(dtype, alpha)
        key = ("spsv", o, uplo, diag)
        entry = rec.spsv.get(key)
        if entry is None:
            self.sizes.misses += 1
            g = c_void_p()
            self._check(lib.cusparseSpSV_createDescr(ctypes.byref(g)), "cusparseSpSV_createDescr")
            try:
                nbytes = self._size("cusparseSpSV_bufferSize", o, pa, rec.desc, vx, vy, t,
                                    ALG_DEFAULT, g.value)
            except BaseException:
                lib.cusparseSpSV_destroyDescr(g.value)
                raise
            entry = (g.value, self._alloc(nbytes), nbytes)
            rec.spsv[key] = entry
            self.sizes.size += 1
        else:
            self.sizes.hits += 1
        self._bind(stream)
        self._check(lib.cusparseSpSV_analysis(h, o, pa, rec.desc, vx, vy, t, ALG_DEFAULT,
                                              entry[0], entry[1] or None),
                    "cusparseSpSV_analysis")
        self._check(lib.cusparseSpSV_solve(h, o, pa, rec.desc, vx, vy, t, ALG_DEFAULT, entry[0]),
                    "cusparseSpSV_solve")

    def _triangle(self, rec: _Matrix, uplo: str, diag: str) -> None:
        lib = self.lib
        for attr, value in ((ATTR_FILL, FILL[uplo]), (ATTR_DIAG, DIAG[diag])):
            v = c_int(value)
            self._check(lib.cusparseSpMatSetAttribute(rec.desc, attr, ctypes.byref(v), 4),
                        "cusparseSpMatSetAttribute")

    def spsm(self, stream: Any, mid: int, op: str, uplo: str, diag: str, alpha: Any, b: int,
             c: int, shape: tuple) -> None:
        """Triangular solve with the k right-hand sides of the row-major n x k B into C."""
        rec = self._record(mid)
        dtype = rec.ref.dtype
        t = CUDA_DATA_TYPE[dtype]
        lib, h = self.lib, self.raw_handle
        self._triangle(rec, uplo, diag)
        mb, mc = self._dnmat(b, *shape, dtype), self._dnmat(c, *shape, dtype)
        o = OP[op]
        pa, _ = self._ab(dtype, alpha)
        key = ("spsm", o, uplo, diag, shape[1])
        entry = rec.spsv.get(key)
        if entry is None:
            self.sizes.misses += 1
            g = c_void_p()
            self._check(lib.cusparseSpSM_createDescr(ctypes.byref(g)), "cusparseSpSM_createDescr")
            try:
                nbytes = self._size("cusparseSpSM_bufferSize", o, 0, pa, rec.desc, mb, mc, t,
                                    ALG_DEFAULT, g.value)
            except BaseException:
                lib.cusparseSpSM_destroyDescr(g.value)
                raise
            entry = (g.value, self._alloc(nbytes), nbytes)
            rec.spsv[key] = entry
            self.sizes.size += 1
        else:
            self.sizes.hits += 1
        self._bind(stream)
        self._check(lib.cusparseSpSM_analysis(h, o, 0, pa, rec.desc, mb, mc, t, ALG_DEFAULT,
                                              entry[0], entry[1] or None),
                    "cusparseSpSM_analysis")
        self._check(lib.cusparseSpSM_solve(h, o, 0, pa, rec.desc, mb, mc, t, ALG_DEFAULT,
                                           entry[0]), "cusparseSpSM_solve")

    def sddmm(self, stream: Any, mid: int, opa: str, opb: str, alpha: Any, a: int,
              a_shape: tuple, b: int, b_shape: tuple, beta: Any) -> None:
        rec = self._record(mid)
        dtype = rec.ref.dtype
        t = CUDA_DATA_TYPE[dtype]
        ma, mb = self._dnmat(a, *a_shape, dtype), self._dnmat(b, *b_shape, dtype)
        pa, pb = self._ab(dtype, alpha, beta)
        oa, ob = OP[opa], OP[opb]
        ws = self._workspace(rec, ("sddmm", oa, ob, a_shape, b_shape), lambda: self._size(
            "cusparseSDDMM_bufferSize", oa, ob, pa, ma, mb, pb, rec.desc, t, ALG_DEFAULT))
        self._bind(stream)
        self._check(self.lib.cusparseSDDMM(self.raw_handle, oa, ob, pa, ma, mb, pb, rec.desc, t,
                                           ALG_DEFAULT, ws), "cusparseSDDMM")

    # -- conversions ---------------------------------------------------------------------------
    def to_dense(self, stream: Any, mid: int, out: int) -> None:
        rec = self._record(mid)
        rows, cols = rec.ref.shape
        md = self._dnmat(out, rows, cols, rec.ref.dtype)
        ws = self._workspace(rec, ("to_dense",), lambda: self._size(
            "cusparseSparseToDense_bufferSize", rec.desc, md, ALG_DEFAULT))
        self._bind(stream)
        self._check(self.lib.cusparseSparseToDense(self.raw_handle, rec.desc, md, ALG_DEFAULT,
                                                   ws), "cusparseSparseToDense")

    def dense_start(self, stream: Any, plan: int, dense: int, rows: int, cols: int, dtype: str,
                    ptr: int, index_dtype: str) -> None:
        """Analysis of dense -> CSR: writes the row offsets at ``ptr`` (the count is their last
        entry); the conversion is kept under ``plan``."""
        lib = self.lib
        it, t = INDEX[index_dtype], CUDA_DATA_TYPE[dtype]
        state: dict[str, Any] = {"bufs": []}
        self.plans[plan] = state
        try:
            d, c = c_void_p(), c_void_p()
            self._check(lib.cusparseCreateDnMat(ctypes.byref(d), rows, cols, max(cols, 1), dense,
                                                t, ORDER_ROW), "cusparseCreateDnMat")
            state["dense"] = d.value
            self._check(lib.cusparseCreateCsr(ctypes.byref(c), rows, cols, 0, ptr, None, None,
                                              it, it, BASE_ZERO, t), "cusparseCreateCsr")
            state["c"] = c.value
            nbytes = self._size("cusparseDenseToSparse_bufferSize", d.value, c.value,
                                ALG_DEFAULT)
            buf = self._alloc(nbytes)
            state["bufs"].append((buf, nbytes))
            self._bind(stream)
            self._check(lib.cusparseDenseToSparse_analysis(self.raw_handle, d.value, c.value,
                                                           ALG_DEFAULT, buf or None),
                        "cusparseDenseToSparse_analysis")
        except BaseException:
            self.drop(plan)
            raise

    def dense_finish(self, stream: Any, plan: int, ptr: int, idx: int, val: int) -> None:
        state = self.plans.get(plan)
        if state is None or "dense" not in state:
            raise InvalidMessage(f"no dense-to-sparse plan {plan} on this device", field="plan")
        lib = self.lib
        try:
            nn = self._nonnull
            self._check(lib.cusparseCsrSetPointers(state["c"], nn(ptr), nn(idx), nn(val)),
                        "cusparseCsrSetPointers")
            self._bind(stream)
            buf = state["bufs"][0][0]
            self._check(lib.cusparseDenseToSparse_convert(self.raw_handle, state["dense"],
                                                          state["c"], ALG_DEFAULT, buf or None),
                        "cusparseDenseToSparse_convert")
        finally:
            self.drop(plan)

    def convert(self, stream: Any, mid: int, src: tuple[int, int, int], ptr: int, idx: int,
                val: int) -> None:
        """CSR -> CSC (or CSC -> CSR: the CSR arrays of the transpose) of the matrix whose
        arrays are ``src`` (ptr, idx, val) into the given arrays."""
        rec = self._record(mid)
        ref = rec.ref
        a_ptr, a_idx, a_val = src
        m, n = ref.shape if ref.format == "csr" else ref.shape[::-1]
        t = CUDA_DATA_TYPE[ref.dtype]
        args = (m, n, ref.nnz, a_val, a_ptr, a_idx, val, ptr, idx, t, ACTION_NUMERIC, BASE_ZERO,
                CSR2CSC_ALG1)
        ws = self._workspace(rec, ("convert",), lambda: self._size(
            "cusparseCsr2cscEx2_bufferSize", *args))
        self._bind(stream)
        self._check(self.lib.cusparseCsr2cscEx2(self.raw_handle, *args, ws or None),
                    "cusparseCsr2cscEx2")

    # -- row indices <-> offsets, the sparse solve -------------------------------------------
    def _legacy(self, name: str) -> Any:
        fn = getattr(self.lib, name)
        if fn is None:
            raise LibraryError("cusparse", 0, f"{name} is not in {self.lib.path}", name)
        return fn

    def compress_rows(self, stream: Any, rows: int, nnz: int, m: int, ptr: int) -> None:
        """``cusparseXcoo2csr``: the m + 1 offsets of ``nnz`` sorted row indices."""
        if nnz == 0:  # no indices to search: every offset is 0
            self._ctx.backend.memset(stream, ptr, 0, m + 1, 4)
            return
        fn = self._legacy("cusparseXcoo2csr")
        self._bind(stream)
        self._check(fn(self.raw_handle, rows, nnz, m, ptr, BASE_ZERO), "cusparseXcoo2csr")

    def expand_rows(self, stream: Any, ptr: int, nnz: int, m: int, rows: int) -> None:
        """``cusparseXcsr2coo``: the row of each of ``nnz`` entries from m + 1 offsets."""
        if nnz == 0:
            return
        fn = self._legacy("cusparseXcsr2coo")
        self._bind(stream)
        self._check(fn(self.raw_handle, ptr, nnz, m, rows, BASE_ZERO), "cusparseXcsr2coo")

    def _solver(self) -> tuple[Any, int, int]:
        """(libcusolver, cusolverSp handle, general 0-based matrix descriptor), made on first
        use."""
        if self._sp is None:
            from ..cusolver._bindings import STATUS_NAMES
            from ._bindings import load_solver

            lib = load_solver()
            if lib.cusolverSpCreate is None or self.lib.cusparseCreateMatDescr is None:
                raise LibraryError("cusolver", 0, f"cusolverSp is not in {lib.path}",
                                   "cusolverSpCreate")
            h, d = c_void_p(), c_void_p()
            st = lib.cusolverSpCreate(ctypes.byref(h))
            if st:
                raise LibraryError("cusolver", st, STATUS_NAMES.get(st, str(st)),
                                   "cusolverSpCreate")
            st = self.lib.cusparseCreateMatDescr(ctypes.byref(d))
            if st:
                lib.cusolverSpDestroy(h.value)
                self._check(st, "cusparseCreateMatDescr")
            self._sp = (lib, h.value or 0, d.value or 0)
        return self._sp

    def spsolve_qr(self, stream: Any, mid: int, ptrs: tuple[int, int, int], b: int, x: int,
                   tol: float, found: list[int]) -> None:
        """``cusolverSp<t>csrlsvqr`` of the matrix ``mid`` (its arrays at ``ptrs``) on the
        stream; the library waits for its work before returning, and the first singular
        column (-1: none) goes to ``found[0]``."""
        from ..cusolver._bindings import STATUS_NAMES
        from ._bindings import SOLVER_LETTER

        ref = self._record(mid).ref
        lib, h, descr = self._solver()
        name = f"cusolverSp{SOLVER_LETTER[ref.dtype]}csrlsvqr"
        fn = getattr(lib, name)
        if fn is None:
            raise LibraryError("cusolver", 0, f"{name} is not in {lib.path}", name)
        st = lib.cusolverSpSetStream(h, int(stream))
        if st:
            raise LibraryError("cusolver", st, STATUS_NAMES.get(st, str(st)),
                               "cusolverSpSetStream")
        sing = c_int(-1)
        nn = self._nonnull
        p, i, v = ptrs
        st = fn(h, ref.shape[0], ref.nnz, descr, nn(v), nn(p), nn(i), b, tol, 0, x,
                ctypes.byref(sing))
        if st:
            raise LibraryError("cusolver", st, STATUS_NAMES.get(st, str(st)), name)
        found[0] = sing.value

    def close(self) -> None:
        if self._sp is not None:
            lib, h, descr = self._sp
            self._sp = None
            lib.cusolverSpDestroy(h)
            self.lib.cusparseDestroyMatDescr(descr)
        for replays in (self.spmv_replays, self.spmm_replays):
            if replays is not None:  # before the workspaces and handle their kernels use go
                replays.close()
        for plan in list(self.plans):
            self.drop(plan)
        for mid in list(self.matrices):
            self.destroy(mid)
        self._free(self._dummy, 256)
        self._dummy = 0
        self._free(self._scalar_dev, _SLOT * _SLOTS)
        self._scalar_dev = 0
        if self._scalar_host is not None:
            self._ctx.pinned.release(self._scalar_host)
            self._scalar_host = None
        # device scalars (DEVICE_SCALARS_ENV): (dtype, alpha, beta) -> device address of the
        # pair, written once from a pinned block that is never rewritten
        self._device_scalars = setting(DEVICE_SCALARS_ENV) == "1"
        self._scalar_slots: dict[tuple, int] = {}
        self._scalar_dev = 0
        self._scalar_host: Any = None
        self._pointer_mode = 0
        self._vecs.clear()
        self._mats.clear()
        if self.raw_handle:
            self.lib.cusparseDestroy(self.raw_handle)
            self.raw_handle = 0


class _Bound:
    """The launcher a repeated SpMV/SpMM message keeps (``launch(stream)``): ``derive()``
    returns the launch of the call with every argument derived, and the matrix record it
    holds. It runs again whenever that record was destroyed or the handle's epoch moved (a
    dense descriptor it holds may be gone), so a destroyed matrix still fails here as
    :meth:`CusparseHandle.spmv` would. Each launch that derives nothing counts a workspace hit,
    as a call that looks its workspace up does."""

    __slots__ = ("handle", "derive", "epoch", "rec", "run", "counting")

    def __init__(self, handle: CusparseHandle,
                 derive: Callable[[], tuple[Callable[[Any], None], _Matrix]]) -> None:
        self.handle = handle
        self.derive = derive
        self.epoch = -1
        self.rec: Any = _GONE
        self.run: Callable[[Any], None] = _GONE.run
        self.counting = True

    def __call__(self, stream: Any) -> None:
        h = self.handle
        if self.epoch != h._epoch or not self.rec.alive:
            self.rec = _GONE  # until a derive succeeds
            run, rec = self.derive()
            # read after deriving: the descriptors it made may have evicted others
            self.epoch = h._epoch
            self.run, self.rec = run, rec
            self.counting = type(run) is not _Plain
        elif self.counting:
            h.sizes.hits += 1
        self.run(stream)


class _Gone:
    """What a launcher holds before its first derive and after a failed one."""

    alive = False

    @staticmethod
    def run(stream: Any) -> None:
        raise AssertionError("a launcher ran without deriving")


_GONE = _Gone()


class _Plain:
    """``launch(stream)`` = ``fn(stream, *args)``, the handle's full call (which counts its own
    workspace lookups): what a launcher falls back to when it cannot keep lasting scalars."""

    __slots__ = ("fn", "args")

    def __init__(self, fn: Callable[..., None], args: tuple) -> None:
        self.fn = fn
        self.args = args

    def __call__(self, stream: Any) -> None:
        self.fn(stream, *self.args)


def _plain(fn: Callable[..., None], *args: Any) -> _Plain:
    return _Plain(fn, args)
