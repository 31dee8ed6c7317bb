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
from ...service._plans import PlanCache
from .._loader import LoadedLibrary, c_size_t, c_void_p, load
from ..nvrtc._builtin import BuiltinKernels
from ._bindings import EIG_J, EIG_MODE, FILL, LETTER, OP, ORTHO, SIDE, STATUS_NAMES, typed

__all__ = ["CusolverHandle", "status_error", "triangle_spans", "part_spans", "REAL_OF",
           "GESVDJ_LANES"]

#: how many streams ``gesvdj_strided`` spreads a stack's matrices over (round robin, each with
#: its own workspace and Jacobi parameters, forked from and joined back to the issuing stream
#: by events): one gesvdj of a small matrix runs kernels of a few blocks, which leave most of
#: the GPU idle one after the other. 1: every matrix on the issuing stream. Eight matches
#: CUDA's default number of hardware work queues (CUDA_DEVICE_MAX_CONNECTIONS)
GESVDJ_LANES = 8

#: the real type of a precision (eigenvalues, singular values)
REAL_OF = {"f32": "f32", "f64": "f64", "c64": "f32", "c128": "f64"}


def status_error(status: int, function: str) -> LibraryError:
    return LibraryError("cusolver", status, STATUS_NAMES.get(status, str(status)), function)


#: one kernel zeroing the strictly lower (``lower``) or strictly upper part of ``batch``
#: column-major m x n matrices ``stride_words`` 32-bit words apart: what the NumPy-shaped
#: factorizations need after cuSOLVER (no library call does it; one memset per column costs one
#: launch per column, 31 for a 32x32 stack, 4095 for a 4096^2 matrix)
ZERO_PART_SOURCE = r"""
extern "C" __global__ void gpumsg_zero_part(unsigned int* base, long long stride_words, int m,
                                            int n, long long lda_words, int words, int lower,
                                            int batch)
{
    long long per = (long long)m * n * words;
    long long col_words = (long long)m * words;
    for (int b = blockIdx.y; b < batch; b += gridDim.y) {
        unsigned int* a = base + (long long)b * stride_words;
        for (long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x; t < per;
             t += (long long)gridDim.x * blockDim.x) {
            long long j = t / col_words;
            long long r = t - j * col_words;
            long long i = r / words;
            if (lower ? (i > j) : (i < j)) a[j * lda_words + r] = 0u;
        }
    }
}

// batch x (n x n), tight: dst(i, j) = src(i, j) on and above the diagonal, conj(src(j, i))
// below it (the Hermitian matrix whose upper triangle src holds). imag: the 32-bit word of an
// element holding the imaginary part's sign bit (-1 for real types).
extern "C" __global__ void gpumsg_herm_from_upper(const unsigned int* src, unsigned int* dst,
                                                  int n, int words, int imag, int batch)
{
    long long per = (long long)n * n * words;
    for (int b = blockIdx.y; b < batch; b += gridDim.y) {
        const unsigned int* s = src + (long long)b * per;
        unsigned int* d = dst + (long long)b * per;
        for (long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x; t < per;
             t += (long long)gridDim.x * blockDim.x) {
            long long j = t / ((long long)n * words);
            long long r = t - j * n * words;
            long long i = r / words;
            int w = (int)(r - i * words);
            if (i <= j) {
                d[t] = s[t];
            } else {
                unsigned int v = s[(i * n + j) * words + w];
                d[t] = (w == imag) ? (v ^ 0x80000000u) : v;
            }
        }
    }
}

// in place, batch x (n x n), tight: the upper triangle becomes the conjugate transpose of the
// lower one, and the strictly lower part zero (a lower factor L becomes L^H).
extern "C" __global__ void gpumsg_lower_to_upper(unsigned int* a, int n, int words, int imag,
                                                 int batch)
{
    long long per = (long long)n * n * words;
    for (int b = blockIdx.y; b < batch; b += gridDim.y) {
        unsigned int* m = a + (long long)b * per;
        for (long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x; t < per;
             t += (long long)gridDim.x * blockDim.x) {
            long long j = t / ((long long)n * words);
            long long r = t - j * n * words;
            long long i = r / words;
            int w = (int)(r - i * words);
            if (i > j) {  // one thread per element of the strictly lower part: its pair is its
                unsigned int v = m[t];
                m[(i * n + j) * words + w] = (w == imag) ? (v ^ 0x80000000u) : v;
                m[t] = 0u;
            } else if (i == j && w == imag) {
                m[t] = m[t] ^ 0x80000000u;
            }
        }
    }
}
"""
#: the same two transforms as element-typed, 32x32-tiled kernels with 32-bit indices (the ones
#: above divide 64-bit integers per 32-bit word and write transposed without tiling: ~0.36 ms
#: for a 10,000 x 32^2 f64 stack on the H100, four times the bandwidth bound). T is the element
#: as raw bits (4, 8 or 16 bytes); ``c`` asks for the conjugate (complex types). Blocks are
#: 32 x 8 threads; blockIdx.y walks the batch.
TILED_SOURCE = r"""
struct alignas(16) w16 { unsigned int x, y, z, w; };

__device__ __forceinline__ unsigned int conj_bits(unsigned int v, int c) { return v; }
__device__ __forceinline__ unsigned long long conj_bits(unsigned long long v, int c)
{
    return c ? (v ^ 0x8000000000000000ull) : v;  // c64: the imaginary float is the high half
}
__device__ __forceinline__ w16 conj_bits(w16 v, int c)
{
    if (c) v.w ^= 0x80000000u;  // c128: the imaginary double's high word
    return v;
}

// dst(i, j) = src(i, j) for i <= j, conj(src(j, i)) for i > j; n x n column-major, tight.
// blockIdx.x: output tile (bi, bj) = (x % tiles, x / tiles).
template <typename T>
__global__ void herm_from_upper(const T* src, T* dst, int n, int batch, int c)
{
    __shared__ T tile[32][33];
    int tiles = (n + 31) / 32;
    int bi = blockIdx.x % tiles, bj = blockIdx.x / tiles;
    int tx = threadIdx.x, ty = threadIdx.y;
    for (int b = blockIdx.y; b < batch; b += gridDim.y) {
        const T* s = src + (long long)b * n * n;
        T* d = dst + (long long)b * n * n;
        if (bi >= bj) {  // the source tile (bj, bi): tile[cl][rl] = s(bj*32 + rl, bi*32 + cl)
            for (int k = 0; k < 32; k += 8) {
                int r = bj * 32 + tx, col = bi * 32 + ty + k;
                if (r < n && col < n) tile[ty + k][tx] = s[(long long)col * n + r];
            }
        }
        __syncthreads();
        for (int k = 0; k < 32; k += 8) {
            int i = bi * 32 + tx, j = bj * 32 + ty + k;
            if (i < n && j < n) {
                long long at = (long long)j * n + i;
                // s(j, i) = tile[i - bi*32][j - bj*32] = tile[tx][ty + k]
                d[at] = (i <= j) ? s[at] : conj_bits(tile[tx][ty + k], c);
            }
        }
        __syncthreads();
    }
}

// in place: a(i, j) = conj(a(j, i)) for i < j, conj(a(i, i)) on the diagonal, 0 for i > j
// (a lower factor L becomes L^H). blockIdx.x: the lower tile (bi, bj), bi >= bj, numbered
// row by row; the block also writes its mirror (bj, bi).
template <typename T>
__global__ void lower_to_upper(T* a, int n, int batch, int c)
{
    __shared__ T tile[32][33];
    int p = blockIdx.x, bi = 0;
    while (p > bi) { p -= bi + 1; ++bi; }
    int bj = p;
    int tx = threadIdx.x, ty = threadIdx.y;
    T zero;
    unsigned char* zb = (unsigned char*)&zero;
    for (int q = 0; q < (int)sizeof(T); ++q) zb[q] = 0;
    for (int b = blockIdx.y; b < batch; b += gridDim.y) {
        T* m = a + (long long)b * n * n;
        // tile[cl][rl] = m(bi*32 + rl, bj*32 + cl)
        for (int k = 0; k < 32; k += 8) {
            int r = bi * 32 + tx, col = bj * 32 + ty + k;
            if (r < n && col < n) tile[ty + k][tx] = m[(long long)col * n + r];
        }
        __syncthreads();
        if (bi == bj) {
            for (int k = 0; k < 32; k += 8) {
                int i = bi * 32 + tx, j = bj * 32 + ty + k;
                if (i < n && j < n) {
                    long long at = (long long)j * n + i;
                    if (i < j) m[at] = conj_bits(tile[tx][ty + k], c);  // m(j, i)
                    else if (i == j) m[at] = conj_bits(tile[ty + k][tx], c);
                    else m[at] = zero;
                }
            }
        } else {
            for (int k = 0; k < 32; k += 8) {
                int i = bj * 32 + tx, j = bi * 32 + ty + k;  // the upper tile (bj, bi)
                if (i < n && j < n)  // m(j, i): rl = j - bi*32 = ty + k, cl = i - bj*32 = tx
                    m[(long long)j * n + i] = conj_bits(tile[tx][ty + k], c);
                int r = bi * 32 + tx, col = bj * 32 + ty + k;  // the lower tile: zero
                if (r < n && col < n) m[(long long)col * n + r] = zero;
            }
        }
        __syncthreads();
    }
}
"""
#: element bytes -> the C++ type of its bits in TILED_SOURCE
TILED_TYPE = {4: "unsigned int", 8: "unsigned long long", 16: "w16"}

#: the 32-bit word holding the sign of an element's imaginary part
IMAG_WORD = {"f32": -1, "f64": -1, "c64": 1, "c128": 3}
_ZERO_PART_KINDS = ("ptr", "i64", "i32", "i32", "i64", "i32", "i32", "i32")
_ZERO_NAMES = ("gpumsg_zero_part", "gpumsg_herm_from_upper", "gpumsg_lower_to_upper")
#: (kernel, element bytes) -> the template instantiation of TILED_SOURCE
_TILED_EXPRS = {(k, b): f"{k}<{t}>" for k in ("herm_from_upper", "lower_to_upper")
                for b, t in TILED_TYPE.items()}


def part_spans(part: str, m: int, n: int, lda: int) -> list[tuple[int, int]]:
    """(first element, count) per column of the strictly lower (``'L'``) or strictly upper
    (``'U'``) part of a column-major m x n matrix."""
    if part == "L":
        return [(j * lda + j + 1, m - j - 1) for j in range(min(m, n)) if m - j - 1 > 0]
    return [(j * lda, min(j, m)) for j in range(1, n)]


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
        #: (kind, tol, max_sweeps, sort, lane) -> syevjInfo_t / gesvdjInfo_t
        self._jacobi: dict[tuple, int] = {}
        #: the lanes of gesvdj_strided (see GESVDJ_LANES): a stream, its join event and a
        #: cuSOLVER handle of its own bound to it (nothing of a handle is shared by calls
        #: running at once), and the event that forks them from the issuing stream; made on
        #: first use
        self._lanes: list[tuple[Any, Any, int]] = []
        self._fork: Any = None
        #: (base, stride bytes, count) -> device pointer array (see handlers.pointer_array)
        self.pointer_arrays: dict[tuple, tuple[int, int]] = {}
        #: the zeroing / transposing kernels, and their tiled versions (libs/nvrtc/builtin.py)
        self._zero = BuiltinKernels(ctx, ZERO_PART_SOURCE, "gpumsg_zero_part.cu", _ZERO_NAMES)
        self._tiled = BuiltinKernels(ctx, TILED_SOURCE, "gpumsg_tri_tiled.cu",
                                     expressions=tuple(_TILED_EXPRS.values()),
                                     options=("-std=c++17",))

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

    def _lwork(self, key: tuple, query: str, *args: Any) -> int:
        """Legacy API workspace size in elements (an int), queried once per key."""
        ws = self.workspaces.get(key)
        if ws is None:
            lwork = ctypes.c_int()
            self._check(getattr(self.lib, query)(self.raw_handle, *args, ctypes.byref(lwork)),
                        query)
            ws = (lwork.value, 0, None)
            self.workspaces.put(key, ws)
        return ws[0]

    def _lwork_tail(self, key: tuple, query: str, args: tuple, tail: tuple) -> int:
        """As :meth:`_lwork` for queries whose ``&lwork`` is followed by more arguments."""
        ws = self.workspaces.get(key)
        if ws is None:
            lwork = ctypes.c_int()
            self._check(getattr(self.lib, query)(self.raw_handle, *args, ctypes.byref(lwork),
                                                 *tail), query)
            ws = (lwork.value, 0, None)
            self.workspaces.put(key, ws)
        return ws[0]

    def _legacy(self, stream: Any, dtype: str, name: str, lwork: int, args: Any) -> None:
        """Call legacy ``name(handle, *args(work, lwork))`` with a pooled workspace of ``lwork``
        elements of ``dtype``."""
        self._bind(stream)
        nbytes = lwork * dtype_of(dtype).itemsize

        def issue(ws: int) -> None:
            self._check(getattr(self.lib, name)(self.raw_handle, *args(ws or None, lwork)), name)
        self._with_workspace(stream, nbytes, issue)

    def _generic(self, stream: Any, key: tuple, name: str, args: tuple, tail: tuple) -> None:
        """64-bit API: ``name_bufferSize(handle, params, *args, &d, &h)`` once per key, then
        ``name(handle, params, *args, dev_ws, d, host_ws, h, *tail)``."""
        dev_bytes, host_bytes, host = self._workspace(key, name + "_bufferSize", *args)
        self._bind(stream)
        self._with_workspace(stream, dev_bytes, lambda ws: self._call(
            stream, name, *args, ws or None, dev_bytes,
            None if host is None else host.ctypes.data, host_bytes, *tail))

    def _jacobi_info(self, kind: str, tol: float, max_sweeps: int, sort: bool,
                     lane: int = 0) -> int:
        """The Jacobi parameters object of these settings; ``lane``: one of its own for each
        stream that runs Jacobi calls at the same time as others (the object is the library's
        state of a call, not only its settings)."""
        key = (kind, tol, max_sweeps, sort, lane)
        info = self._jacobi.get(key)
        if info is None:
            p = c_void_p()
            pre = "Syevj" if kind == "syevj" else "Gesvdj"
            self._check(getattr(self.lib, f"cusolverDnCreate{pre}Info")(ctypes.byref(p)),
                        f"cusolverDnCreate{pre}Info")
            info = p.value or 0
            x = f"cusolverDnX{pre.lower()}"
            if tol > 0:  # 0: the library's default, the machine precision
                self._check(getattr(self.lib, x + "SetTolerance")(info, float(tol)),
                            x + "SetTolerance")
            self._check(getattr(self.lib, x + "SetMaxSweeps")(info, int(max_sweeps)),
                        x + "SetMaxSweeps")
            self._check(getattr(self.lib, x + "SetSortEig")(info, int(sort)), x + "SetSortEig")
            self._jacobi[key] = info
        return info

    @property
    def kernels(self) -> str:
        """What the zeroing / transposing kernels are: "not built yet", "nvrtc", "unavailable"."""
        return self._zero.status

    @property
    def tiled(self) -> str:
        return self._tiled.status

    def _zero_kernel(self) -> Any:
        """(modules, zero_part, herm_from_upper, lower_to_upper), or None without NVRTC
        (memsets then)."""
        k = self._zero.get()
        return None if k is None else (k[0], *(k[1][n] for n in _ZERO_NAMES))

    def zero_part_strided(self, stream: Any, dtype: str, part: str, m: int, n: int, a: int,
                          lda: int, stride: int, batch: int) -> bool:
        """One kernel launch zeroing the strictly lower (``part='L'``) or upper part of
        ``batch`` matrices; False when the kernel is unavailable (the caller falls back)."""
        k = self._zero_kernel()
        if k is None:
            return False
        if not (m and n and batch):
            return True
        mods, fn = k[0], k[1]
        words = dtype_of(dtype).itemsize // 4
        per = m * n * words
        grid = (max(1, min((per + 255) // 256, 65535)), max(1, min(batch, 65535)), 1)
        mods.launch(stream, fn, grid, (256, 1, 1), 0, _ZERO_PART_KINDS,
                    [a, stride * words, m, n, lda * words, words, int(part == "L"), batch], [])
        return True

    def _tiled_kernels(self) -> Any:
        """(modules, {(kernel, element bytes): function}); None when NVRTC or the compile is
        unavailable (the untiled kernels then)."""
        k = self._tiled.get()
        return None if k is None else (k[0], {key: k[1][e] for key, e in _TILED_EXPRS.items()})

    def _cholesky_lower_tiled(self, stream: Any, dtype: str, n: int, src: int, out: int,
                              ptrs: int, infos: int, batch: int) -> bool:
        k = self._tiled_kernels()
        if k is None:
            return False
        mods, fns = k
        size = dtype_of(dtype).itemsize
        c = int(dtype in ("c64", "c128"))
        tiles = (n + 31) // 32
        ys = max(1, min(batch, 65535))
        kinds = ("ptr", "ptr", "i32", "i32", "i32")
        mods.launch(stream, fns[("herm_from_upper", size)], (tiles * tiles, ys, 1), (32, 8, 1),
                    0, kinds, [src, out, n, batch, c], [])
        self.potrf_batched(stream, dtype, "L", n, ptrs, n, infos, batch)
        mods.launch(stream, fns[("lower_to_upper", size)], (tiles * (tiles + 1) // 2, ys, 1),
                    (32, 8, 1), 0, kinds[1:], [out, n, batch, c], [])
        return True

    def cholesky_lower(self, stream: Any, dtype: str, n: int, src: int, out: int, ptrs: int,
                       infos: int, batch: int) -> bool:
        """NumPy's batched cholesky of the C-ordered stack at ``src`` into ``out`` through
        potrfBatched with ``uplo='L'`` (the faster of its two kernels, the one torch uses): one
        kernel makes each column-major matrix Hermitian from its upper triangle (NumPy's lower
        one) into ``out``, potrfBatched factors the lower triangles (``ptrs``: pointers into
        ``out``), one kernel turns each factor L' (= conj L) into L'^H above a zero lower part,
        the C-ordered memory of NumPy's L. False (nothing issued) without the kernels."""
        if self._cholesky_lower_tiled(stream, dtype, n, src, out, ptrs, infos, batch):
            return True
        k = self._zero_kernel()
        if k is None:
            return False
        mods, _, herm, to_upper = k
        words = dtype_of(dtype).itemsize // 4
        imag = IMAG_WORD[dtype]
        grid = (max(1, min((n * n * words + 255) // 256, 65535)), max(1, min(batch, 65535)), 1)
        kinds = ("ptr", "ptr", "i32", "i32", "i32", "i32")
        mods.launch(stream, herm, grid, (256, 1, 1), 0, kinds, [src, out, n, words, imag, batch],
                    [])
        self.potrf_batched(stream, dtype, "L", n, ptrs, n, infos, batch)
        mods.launch(stream, to_upper, grid, (256, 1, 1), 0, kinds[1:],
                    [out, n, words, imag, batch], [])
        return True

    def zero_outside(self, stream: Any, dtype: str, uplo: str, n: int, a: int,
                     lda: int) -> None:
        """Set the part of the column-major n x n matrix outside its ``uplo`` triangle to zero
        (one kernel; one memset per column where NVRTC is unavailable)."""
        if self.zero_part_strided(stream, dtype, "L" if uplo == "U" else "U", n, n, a, lda,
                                  lda * n, 1):
            return
        item = dtype_of(dtype).itemsize
        memset = self._ctx.backend.memset
        for start, count in triangle_spans(uplo, n, lda):
            memset(stream, a + start * item, 0, count * item // 4, 4)

    def zero_part(self, stream: Any, dtype: str, part: str, m: int, n: int, a: int,
                  lda: int) -> None:
        if self.zero_part_strided(stream, dtype, part, m, n, a, lda, lda * n, 1):
            return
        item = dtype_of(dtype).itemsize
        memset = self._ctx.backend.memset
        for start, count in part_spans(part, m, n, lda):
            memset(stream, a + start * item, 0, count * item // 4, 4)

    def zero_outside_strided(self, stream: Any, dtype: str, uplo: str, n: int, a: int,
                             lda: int, stride: int, batch: int) -> None:
        """:meth:`zero_outside` on ``batch`` matrices ``stride`` elements apart: one 2-D memset
        per column covers that column in every matrix (n calls, whatever the batch), where the
        zeroing kernel is unavailable."""
        if self.zero_part_strided(stream, dtype, "L" if uplo == "U" else "U", n, n, a, lda,
                                  stride, batch):
            return
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

    # -- QR ------------------------------------------------------------------------------------
    def geqrf(self, stream: Any, dtype: str, m: int, n: int, a: int, lda: int, tau: int,
              info: int) -> None:
        t = CUDA_DATA_TYPE[dtype]
        self._generic(stream, ("geqrf", dtype, m, n, lda), "cusolverDnXgeqrf",
                      (m, n, t, a, lda, t, tau, t), (info,))

    def orgqr(self, stream: Any, dtype: str, m: int, n: int, k: int, a: int, lda: int,
              tau: int, info: int) -> None:
        name = f"cusolverDn{ORTHO[dtype]}"
        lwork = self._lwork(("orgqr", dtype, m, n, k, lda), name + "_bufferSize", m, n, k, a,
                            lda, tau)
        self._legacy(stream, dtype, name, lwork,
                     lambda ws, lw: (m, n, k, a, lda, tau, ws, lw, info))

    def ormqr(self, stream: Any, dtype: str, side: str, trans: str, m: int, n: int, k: int,
              a: int, lda: int, tau: int, c: int, ldc: int, info: int) -> None:
        name = typed(dtype, "ormqr", "unmqr")
        args = (SIDE[side], OP[trans], m, n, k, a, lda, tau, c, ldc)
        lwork = self._lwork(("ormqr", dtype, side, trans, m, n, k, lda, ldc),
                            name + "_bufferSize", *args)
        self._legacy(stream, dtype, name, lwork, lambda ws, lw: (*args, ws, lw, info))

    # -- eigen ---------------------------------------------------------------------------------
    def syevd(self, stream: Any, dtype: str, vectors: bool, uplo: str, n: int, a: int,
              lda: int, w: int, info: int) -> None:
        t, tw = CUDA_DATA_TYPE[dtype], CUDA_DATA_TYPE[REAL_OF[dtype]]
        self._generic(stream, ("syevd", dtype, vectors, uplo, n, lda), "cusolverDnXsyevd",
                      (EIG_MODE[vectors], FILL[uplo], n, t, a, lda, tw, w, t), (info,))

    def syevj(self, stream: Any, dtype: str, vectors: bool, uplo: str, n: int, a: int,
              lda: int, w: int, tol: float, max_sweeps: int, sort: bool, info: int) -> None:
        name = f"cusolverDn{EIG_J[dtype]}"
        params = self._jacobi_info("syevj", tol, max_sweeps, sort)
        args = (EIG_MODE[vectors], FILL[uplo], n, a, lda, w)
        lwork = self._lwork_tail(("syevj", dtype, vectors, uplo, n, lda), name + "_bufferSize",
                                 args, (params,))
        self._legacy(stream, dtype, name, lwork, lambda ws, lw: (*args, ws, lw, info, params))

    def syevj_batched(self, stream: Any, dtype: str, vectors: bool, uplo: str, n: int, a: int,
                      lda: int, w: int, tol: float, max_sweeps: int, sort: bool, infos: int,
                      batch: int) -> None:
        name = f"cusolverDn{EIG_J[dtype]}Batched"
        params = self._jacobi_info("syevj", tol, max_sweeps, sort)
        args = (EIG_MODE[vectors], FILL[uplo], n, a, lda, w)
        lwork = self._lwork_tail(("syevjBatched", dtype, vectors, uplo, n, lda, batch),
                                 name + "_bufferSize", args, (params, batch))
        self._legacy(stream, dtype, name, lwork,
                     lambda ws, lw: (*args, ws, lw, infos, params, batch))

    def sygvd(self, stream: Any, dtype: str, itype: int, vectors: bool, uplo: str, n: int,
              a: int, lda: int, b: int, ldb: int, w: int, info: int) -> None:
        name = typed(dtype, "sygvd", "hegvd")
        args = (itype, EIG_MODE[vectors], FILL[uplo], n, a, lda, b, ldb, w)
        lwork = self._lwork(("sygvd", dtype, itype, vectors, uplo, n, lda, ldb),
                            name + "_bufferSize", *args)
        self._legacy(stream, dtype, name, lwork, lambda ws, lw: (*args, ws, lw, info))

    # -- SVD -----------------------------------------------------------------------------------
    def gesvd(self, stream: Any, dtype: str, jobu: str, jobvt: str, m: int, n: int, a: int,
              lda: int, s: int, u: int, ldu: int, vt: int, ldvt: int, info: int) -> None:
        t, ts = CUDA_DATA_TYPE[dtype], CUDA_DATA_TYPE[REAL_OF[dtype]]
        self._generic(stream, ("gesvd", dtype, jobu, jobvt, m, n, lda, ldu, ldvt),
                      "cusolverDnXgesvd", (ord(jobu), ord(jobvt), m, n, t, a, lda, ts, s, t,
                                           u or None, ldu, t, vt or None, ldvt, t), (info,))

    def gesvdj(self, stream: Any, dtype: str, vectors: bool, econ: bool, m: int, n: int,
               a: int, lda: int, s: int, u: int, ldu: int, v: int, ldv: int, tol: float,
               max_sweeps: int, info: int) -> None:
        name = f"cusolverDn{LETTER[dtype]}gesvdj"
        params = self._jacobi_info("gesvdj", tol, max_sweeps, True)
        args = (EIG_MODE[vectors], int(econ), m, n, a, lda, s, u, ldu, v, ldv)
        lwork = self._lwork_tail(("gesvdj", dtype, vectors, econ, m, n, lda, ldu, ldv),
                                 name + "_bufferSize", args, (params,))
        self._legacy(stream, dtype, name, lwork, lambda ws, lw: (*args, ws, lw, info, params))

    def gesvdj_batched(self, stream: Any, dtype: str, vectors: bool, m: int, n: int, a: int,
                       lda: int, s: int, u: int, ldu: int, v: int, ldv: int, tol: float,
                       max_sweeps: int, infos: int, batch: int) -> None:
        name = f"cusolverDn{LETTER[dtype]}gesvdjBatched"
        params = self._jacobi_info("gesvdj", tol, max_sweeps, True)
        args = (EIG_MODE[vectors], m, n, a, lda, s, u, ldu, v, ldv)
        lwork = self._lwork_tail(("gesvdjBatched", dtype, vectors, m, n, lda, ldu, ldv, batch),
                                 name + "_bufferSize", args, (params, batch))
        self._legacy(stream, dtype, name, lwork,
                     lambda ws, lw: (*args, ws, lw, infos, params, batch))

    # -- any-size batched eigen / SVD, general eigenproblem -----------------------------------
    #: the most matrices one cusolverDnXsyevBatched call takes (a CUDA grid dimension)
    SYEV_BATCH_MAX = 65535

    def syev_batched(self, stream: Any, dtype: str, vectors: bool, uplo: str, n: int, a: int,
                     lda: int, w: int, infos: int, batch: int) -> None:
        """Eigen of ``batch`` matrices ``lda * n`` elements apart: cusolverDnXsyevBatched in
        chunks of :data:`SYEV_BATCH_MAX`, or one Xsyevd per matrix where the library lacks it;
        ``infos``: device int32[batch]."""
        item, ritem = dtype_of(dtype).itemsize, dtype_of(REAL_OF[dtype]).itemsize
        name = "cusolverDnXsyevBatched"
        if getattr(self.lib, name, None) is None:
            for i in range(batch):
                self.syevd(stream, dtype, vectors, uplo, n, a + i * lda * n * item, lda,
                           w + i * n * ritem, infos + 4 * i)
            return
        t, tw = CUDA_DATA_TYPE[dtype], CUDA_DATA_TYPE[REAL_OF[dtype]]
        for start in range(0, batch, self.SYEV_BATCH_MAX):
            count = min(self.SYEV_BATCH_MAX, batch - start)
            ai, wi = a + start * lda * n * item, w + start * n * ritem
            args = (EIG_MODE[vectors], FILL[uplo], n, t, ai, lda, tw, wi, t)
            key = ("syevBatched", dtype, vectors, uplo, n, lda, count)
            ws = self.workspaces.get(key)
            if ws is None:
                dev_bytes, host_bytes = c_size_t(), c_size_t()
                self._check(getattr(self.lib, name + "_bufferSize")(
                    self.raw_handle, self._params, *args, ctypes.byref(dev_bytes),
                    ctypes.byref(host_bytes), count), name + "_bufferSize")
                host = np.empty(host_bytes.value, np.uint8) if host_bytes.value else None
                ws = (dev_bytes.value, host_bytes.value, host)
                self.workspaces.put(key, ws)
            dbytes, hbytes, host = ws
            self._bind(stream)
            self._with_workspace(stream, dbytes, lambda p, args=args, start=start, count=count,
                                 dbytes=dbytes, hbytes=hbytes, host=host: self._call(
                stream, name, *args, p or None, dbytes,
                None if host is None else host.ctypes.data, hbytes, infos + 4 * start, count))

    def gesvdj_lanes(self, batch: int) -> int:
        """How many streams :meth:`gesvdj_strided` runs ``batch`` matrices on (one while a
        graph is being recorded: the recording follows the issuing stream alone)."""
        if getattr(self._ctx, "capture", None) is not None:
            return 1
        return max(1, min(int(GESVDJ_LANES), batch))

    def _side_streams(self, count: int) -> list[tuple[Any, Any, int]]:
        backend = self._ctx.backend
        if self._fork is None:
            self._fork = backend.event_create()
        while len(self._lanes) < count:
            stream, joined = backend.stream_create(), backend.event_create()
            h = c_void_p()
            try:
                self._check(self.lib.cusolverDnCreate(ctypes.byref(h)), "cusolverDnCreate")
                self._check(self.lib.cusolverDnSetStream(h.value, int(stream)),
                            "cusolverDnSetStream")
            except BaseException:
                if h.value:
                    self.lib.cusolverDnDestroy(h.value)
                backend.stream_destroy(stream)
                backend.event_destroy(joined)
                raise
            self._lanes.append((stream, joined, h.value or 0))
        return self._lanes[:count]

    def gesvdj_strided(self, stream: Any, dtype: str, vectors: bool, econ: bool, m: int, n: int,
                       a: int, lda: int, s: int, u: int, ldu: int, v: int, ldv: int,
                       u_step: int, v_step: int, tol: float, max_sweeps: int, infos: int,
                       batch: int, u_lane: int = 0, v_lane: int = 0) -> None:
        """One gesvdj per matrix, on :meth:`gesvdj_lanes` streams in turn (matrix i on lane
        i % lanes), each lane with its own handle, workspace and Jacobi parameters (nothing
        shared by calls running at once); ``u_step``/``v_step``: the elements
        between two items' U and V (0: one scratch matrix per lane, ``u_lane``/``v_lane``
        elements apart). The issuing stream forks the lanes (an event they wait on) and joins
        them (each lane's event it waits on) before returning: its later work, the copy of
        ``infos`` included, comes after every matrix."""
        name = f"cusolverDn{LETTER[dtype]}gesvdj"
        lanes = self.gesvdj_lanes(batch)
        params = [self._jacobi_info("gesvdj", tol, max_sweeps, True, k) for k in range(lanes)]
        item, ritem = dtype_of(dtype).itemsize, dtype_of(REAL_OF[dtype]).itemsize
        p = min(m, n)
        lwork = self._lwork_tail(("gesvdj", dtype, vectors, econ, m, n, lda, ldu, ldv),
                                 name + "_bufferSize",
                                 (EIG_MODE[vectors], int(econ), m, n, a, lda, s, u, ldu, v, ldv),
                                 (params[0],))
        fn = getattr(self.lib, name)
        backend = self._ctx.backend
        side = self._side_streams(lanes) if lanes > 1 else [(stream, None, self.raw_handle)]
        per_lane = lwork * item

        def issue(ws: int) -> None:
            if lanes > 1:  # the lanes start after the issuing stream's work so far
                backend.event_record(self._fork, stream)
                for lane_stream, _, _ in side:
                    backend.stream_wait_event(lane_stream, self._fork)
            else:
                self._bind(stream)
            try:
                for i in range(batch):
                    k = i % lanes
                    self._check(fn(side[k][2], EIG_MODE[vectors], int(econ), m, n,
                                   a + i * lda * n * item, lda, s + i * p * ritem,
                                   u + (i * u_step + k * u_lane) * item, ldu,
                                   v + (i * v_step + k * v_lane) * item, ldv,
                                   (ws + k * per_lane) if ws else None, lwork, infos + 4 * i,
                                   params[k]), name)
            finally:
                if lanes > 1:  # joined even after a failed call: nothing is left behind
                    for lane_stream, joined, _ in side:
                        backend.event_record(joined, lane_stream)
                        backend.stream_wait_event(stream, joined)
        self._with_workspace(stream, per_lane * lanes, issue)

    def geev(self, stream: Any, dtype: str, n: int, a: int, lda: int, w: int, vr: int,
             ldvr: int, infos: int, batch: int) -> None:
        """cusolverDnXgeev per matrix (right eigenvectors into ``vr`` unless it is 0), one
        workspace for all; every type A's (a real A: 2n values of ``w`` per matrix, real parts
        then imaginary parts, and LAPACK's packed pairs in ``vr``)."""
        name = "cusolverDnXgeev"
        if getattr(self.lib, name, None) is None:
            raise LibraryError("cusolver", 9, "CUSOLVER_STATUS_NOT_SUPPORTED: cusolverDnXgeev "
                               "needs cuSOLVER 11.7.2 (CUDA 12.8) or later", name)
        t = CUDA_DATA_TYPE[dtype]
        item = dtype_of(dtype).itemsize
        wstep = n * item if dtype in ("c64", "c128") else 2 * n * item
        jobvr = EIG_MODE[bool(vr)]

        def args(i: int) -> tuple:
            return (EIG_MODE[False], jobvr, n, t, a + i * lda * n * item, lda, t,
                    w + i * wstep, t, None, max(n, 1), t,
                    (vr + i * ldvr * n * item) if vr else None, ldvr, t)

        dbytes, hbytes, host = self._workspace(("geev", dtype, bool(vr), n, lda, ldvr),
                                               name + "_bufferSize", *args(0))
        self._bind(stream)

        def issue(ws: int) -> None:
            for i in range(batch):
                self._call(stream, name, *args(i), ws or None, dbytes,
                           None if host is None else host.ctypes.data, hbytes, infos + 4 * i)
        self._with_workspace(stream, dbytes, issue)

    # -- inverse from Cholesky, batched solves -------------------------------------------------
    def potri(self, stream: Any, dtype: str, uplo: str, n: int, a: int, lda: int,
              info: int) -> None:
        name = f"cusolverDn{LETTER[dtype]}potri"
        lwork = self._lwork(("potri", dtype, uplo, n, lda), name + "_bufferSize", FILL[uplo], n,
                            a, lda)
        self._legacy(stream, dtype, name, lwork,
                     lambda ws, lw: (FILL[uplo], n, a, lda, ws, lw, info))

    def potrs_batched(self, stream: Any, dtype: str, uplo: str, n: int, nrhs: int, aptrs: int,
                      lda: int, bptrs: int, ldb: int, info: int, batch: int) -> None:
        name = f"cusolverDn{LETTER[dtype]}potrsBatched"
        self._bind(stream)
        self._check(getattr(self.lib, name)(self.raw_handle, FILL[uplo], n, nrhs, aptrs, lda,
                                            bptrs, ldb, info, batch), name)

    def getrf_batched(self, stream: Any, dtype: str, n: int, aptrs: int, lda: int, ipiv: int,
                      infos: int, batch: int) -> None:
        """cuBLAS ``<t>getrfBatched`` (on the device's cuBLAS handle); ``ipiv``: int32
        [batch * n] or 0 (no pivoting)."""
        blas = self._ctx.library("cublas")
        blas._call(stream, f"cublas{LETTER[dtype]}getrfBatched", n, aptrs, lda, ipiv or None,
                   infos, batch)

    def getrs_batched(self, stream: Any, dtype: str, trans: str, n: int, nrhs: int, aptrs: int,
                      lda: int, ipiv: int, bptrs: int, ldb: int, batch: int) -> None:
        blas = self._ctx.library("cublas")
        host_info = ctypes.c_int()
        name = f"cublas{LETTER[dtype]}getrsBatched"
        blas._call(stream, name, OP[trans], n, nrhs, aptrs, lda, ipiv or None, bptrs, ldb,
                   ctypes.byref(host_info), batch)
        if host_info.value:  # an argument check, made on the host before the launch
            raise LibraryError("cublas", host_info.value,
                               f"parameter {-host_info.value} rejected", name)

    def close(self) -> None:
        memory = self._ctx.memory
        for ptr, nbytes in self.pointer_arrays.values():
            memory.deallocate(ptr, nbytes, self._ctx.compute.obj)
        self.pointer_arrays.clear()
        backend = self._ctx.backend
        for lane_stream, joined, h in self._lanes:
            self.lib.cusolverDnDestroy(h)
            backend.stream_destroy(lane_stream)
            backend.event_destroy(joined)
        self._lanes.clear()
        if self._fork is not None:
            backend.event_destroy(self._fork)
            self._fork = None
        for (kind, *_), info in self._jacobi.items():
            pre = "Syevj" if kind == "syevj" else "Gesvdj"
            getattr(self.lib, f"cusolverDnDestroy{pre}Info")(info)
        self._jacobi.clear()
        if self._params:
            self.lib.cusolverDnDestroyParams(self._params)
            self._params = 0
        if self.raw_handle:
            self.lib.cusolverDnDestroy(self.raw_handle)
            self.raw_handle = 0
        self.workspaces = PlanCache(256)
