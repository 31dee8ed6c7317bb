"""``dev.cublas``: the cuBLAS messages as methods that return futures (caller's thread).

The GEMM family and ``gemv`` read each buffer's own memory order (see
:mod:`gpumsg.libs.cublas._order`): a 2-D buffer is the matrix its shape and order say, a
C-ordered one handled as the transpose it is in column-major terms; ``m``, ``n``, ``k`` and the
leading dimensions default from the shapes. Flat (non-2-D) buffers are column-major storage with
explicit dimensions, as in cuBLAS. The other level-2/3 calls take column-major matrices and
refuse C-ordered ones. :meth:`Blas.matmul` has NumPy's ``@`` semantics. Reductions answer
Python scalars; ``iamax``/``iamin`` are 0-based.
"""

from __future__ import annotations

from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

from ...errors import InvalidMessage
from ...messages import cublas as msgs
from ...messages._base import BufRef, as_ref, as_refs
from ...messages._memo import MessageMemo, OutputTemplates, with_output
from .._namespace import view
from ._order import gemm_args, gemv_args, refuse_c_order

if TYPE_CHECKING:
    from ...client._device import Device

__all__ = ["Blas", "Cublas", "Matmul"]


class Blas:
    """The BLAS surface of one device (``dev.cublas``)."""

    def __init__(self, device: Device) -> None:
        self._dev = device
        # a GEMM repeated with the same buffers and arguments reuses its message
        self._memo = MessageMemo()
        #: ``matmul(a, b)`` without ``out``: its message, validated once per operands
        self._new_outputs = OutputTemplates()
        #: the same calls on raw column-major storage, for the libraries built on them (a
        #: transpose through ``geam``, say): 2-D buffers of either order are read column-major
        #: as stored, with the dimensions and leading dimensions given, as cuBLAS itself does
        raw = object.__new__(type(self))
        raw.__dict__.update(self.__dict__)
        raw._checked = False
        self.raw = raw

    #: whether the column-major-only calls refuse C-ordered matrices (False: ``raw``)
    _checked = True

    def _send(self, msg: Any) -> Future:
        return self._dev.send(msg)

    def _memo_send(self, msg_type: type, buffers: tuple, args: tuple) -> Future:
        """``send(msg_type(*buffers, *args))`` through the memo (``buffers``: the message's
        leading fields)."""
        dev = self._dev
        dev.port.check_open()
        return dev.port.send_memo(self._memo.entry(msg_type, buffers, args))

    # -- GEMM family
    def gemm(self, a: Any, b: Any, c: Any, m: int | None = None, n: int | None = None,
             k: int | None = None, alpha: Any = 1.0, beta: Any = 0.0, transa: Any = "N",
             transb: Any = "N", lda: int | None = None, ldb: int | None = None,
             ldc: int | None = None, compute: str = "default") -> Future:
        """C = alpha op(A) op(B) + beta C (f32, f64, f16, bf16, c64, c128), each buffer read in
        its own order (a C-ordered C is computed as C^T = op(B)^T op(A)^T); ``m``, ``n``, ``k``
        and the leading dimensions default from 2-D buffers' shapes. A repeated call reuses the
        message it built and checked the first time."""
        dev = self._dev
        dev.port.check_open()
        rc = as_ref(c, "c")
        swapped = len(rc.shape) == 2 and rc.order == "C"
        args = (m, n, k, alpha, beta, transa, transb, lda, ldb, ldc, compute)
        return dev.port.send_memo(self._memo.entry(
            "gemm", (a, b, c), args, lambda refs: _gemm_message(refs, args),
            ("b", "a", "c") if swapped else ("a", "b", "c")))

    def gemm_strided_batched(self, a: Any, b: Any, c: Any, m: int, n: int, k: int, batch: int,
                             stride_a: int, stride_b: int, stride_c: int, alpha: Any = 1.0,
                             beta: Any = 0.0, transa: Any = "N", transb: Any = "N",
                             lda: int | None = None, ldb: int | None = None,
                             ldc: int | None = None, compute: str = "default") -> Future:
        if self._checked:
            refuse_c_order("gemm_strided_batched", a=a, b=b, c=c)
        return self._memo_send(msgs.GemmStridedBatched, (a, b, c), (
            m, n, k, batch, stride_a, stride_b, stride_c, alpha, beta, transa, transb, lda, ldb,
            ldc, compute))

    def gemm_batched(self, a: Any, b: Any, c: Any, m: int, n: int, k: int, alpha: Any = 1.0,
                     beta: Any = 0.0, transa: Any = "N", transb: Any = "N",
                     lda: int | None = None, ldb: int | None = None, ldc: int | None = None,
                     compute: str = "default") -> Future:
        """One GEMM per (a[i], b[i], c[i]); the sequences hold buffers or their futures."""
        self._dev.port.check_open()
        ra, rb, rc = as_refs(a, "a"), as_refs(b, "b"), as_refs(c, "c")
        if ra and rb and rc:  # every item alike: the first one's layout is the call's
            for field, refs in (("a", ra), ("b", rb), ("c", rc)):
                if len({(r.shape, r.order) for r in refs}) > 1:
                    raise InvalidMessage(f"{field}: the items of a batched GEMM must share one "
                                         "shape and order", field=field)
            _, _, _, m, n, k, transa, transb, lda, ldb, ldc = gemm_args(
                ra[0], rb[0], rc[0], m, n, k, transa, transb, lda, ldb, ldc)
            if len(rc[0].shape) == 2 and rc[0].order == "C":
                ra, rb = rb, ra
        return self._send(msgs.GemmBatched(ra, rb, rc, m, n, k, alpha, beta, transa,
                                           transb, lda, ldb, ldc, compute))

    def matmul(self, a: Any, b: Any, out: Any = None, compute: str = "default") -> Future:
        """``a @ b`` for C-ordered 2-D or 3-D buffers with NumPy semantics: (M,K)@(K,N),
        (B,M,K)@(B,K,N), and a 2-D operand broadcast against a 3-D one. Resolves to ``out``
        (allocated C-ordered when None). A call repeated with the same buffers, ``out``
        included, reuses its message (the checks below ran when it was built); without
        ``out``, it copies the message checked the first time with its new output."""
        dev = self._dev
        dev.port.check_open()
        if out is None:
            ra, rb = as_ref(a, "a"), as_ref(b, "b")
            key = (id(ra), id(rb), compute) if type(compute) is str else None
            kept = self._new_outputs.get(key, (ra, rb)) if key is not None else None
            if kept is not None:  # the same operands: the message checked the first time
                ro = dev.port.mint(kept[0], ra.dtype, "C")
                return dev.port.send_new(ro, with_output(kept[1], "c", ro))
            shape = _matmul_shape(ra, rb)
            ro = dev.port.mint(shape, ra.dtype, "C")
            msg = _matmul_message(ra, rb, ro, compute)
            if key is not None:
                self._new_outputs.put(key, (ra, rb), shape, msg)
            return dev.port.send_new(ro, msg)
        return dev.port.send_memo(self._memo.entry(
            "matmul", (a, b, out), (compute,),
            lambda refs: _matmul_message(as_ref(refs[0], "a"), as_ref(refs[1], "b"),
                                         _matmul_out(refs[2], refs[0], refs[1]), compute),
            ("b", "a", "c")), out)

    def replay_info(self) -> Future:
        """Resolves to how the GEMMs were replayed: ``{"cublas": {...}, "cublaslt": {...}}``.

        A GEMM (``sgemm``, ``gemm``, ``gemm_strided_batched``, ``matmul``, ``dev.cublaslt``'s
        matmuls) repeated with the same buffers and arguments is captured as a CUDA graph the
        second time and replayed from then on (the same kernels on the same addresses; a few us
        of host time instead of the library's 10-25). Each entry says whether that is on
        (``GPUMSG_BLAS_REPLAY=0`` turns it off; None: the handle was not used yet; False on the
        simulator), and the graphs held, captures, launches, and why capturing stopped. The
        cuBLAS entry says the same of the reductions under ``reductions`` and of the level-1/2
        calls under ``levels`` (``GPUMSG_BLAS_LEVEL_REPLAY=0`` turns only those off)."""
        return self._send(msgs.BlasReplayInfo())

    # -- level 1
    def axpy(self, x: Any, y: Any, alpha: Any = 1.0, n: int | None = None, incx: int = 1,
             incy: int = 1) -> Future:
        return self._memo_send(msgs.Axpy, (x, y), (alpha, n, incx, incy))

    def scal(self, x: Any, alpha: Any, n: int | None = None, incx: int = 1) -> Future:
        return self._memo_send(msgs.Scal, (x,), (alpha, n, incx))

    def dot(self, x: Any, y: Any, n: int | None = None, incx: int = 1, incy: int = 1,
            conjugate: bool = False) -> Future:
        """Resolves to a Python float/complex; complex vectors: dotu, or dotc with
        ``conjugate=True``."""
        return self._memo_send(msgs.Dot, (x, y), (n, incx, incy, conjugate))

    def dotc(self, x: Any, y: Any, n: int | None = None, incx: int = 1, incy: int = 1) -> Future:
        return self.dot(x, y, n, incx, incy, conjugate=True)

    def nrm2(self, x: Any, n: int | None = None, incx: int = 1) -> Future:
        return self._memo_send(msgs.Nrm2, (x,), (n, incx))

    def asum(self, x: Any, n: int | None = None, incx: int = 1) -> Future:
        return self._memo_send(msgs.Asum, (x,), (n, incx))

    def iamax(self, x: Any, n: int | None = None, incx: int = 1) -> Future:
        """Resolves to the 0-based index of the element of largest |re| + |im|."""
        return self._memo_send(msgs.Iamax, (x,), (n, incx))

    def iamin(self, x: Any, n: int | None = None, incx: int = 1) -> Future:
        """Resolves to the 0-based index of the element of smallest |re| + |im|."""
        return self._memo_send(msgs.Iamin, (x,), (n, incx))

    def copy(self, x: Any, y: Any, n: int | None = None, incx: int = 1, incy: int = 1) -> Future:
        return self._memo_send(msgs.Copy, (x, y), (n, incx, incy))

    def swap(self, x: Any, y: Any, n: int | None = None, incx: int = 1, incy: int = 1) -> Future:
        return self._memo_send(msgs.Swap, (x, y), (n, incx, incy))

    def rot(self, x: Any, y: Any, c: float, s: Any, n: int | None = None, incx: int = 1,
            incy: int = 1) -> Future:
        return self._memo_send(msgs.Rot, (x, y), (c, s, n, incx, incy))

    # -- level 2
    def gemv(self, a: Any, x: Any, y: Any, m: int | None = None, n: int | None = None,
             alpha: Any = 1.0, beta: Any = 0.0, trans: Any = "N", lda: int | None = None,
             incx: int = 1, incy: int = 1) -> Future:
        """y = alpha op(A) x + beta y; ``a`` read in its own order (``m`` x ``n`` is A as
        stored, defaulting from a 2-D buffer's shape)."""
        self._dev.port.check_open()
        args = (m, n, alpha, beta, trans, lda, incx, incy)
        return self._dev.port.send_memo(self._memo.entry(
            "gemv", (a, x, y), args, lambda refs: _gemv_message(refs, args), ("a", "x", "y")))

    def ger(self, x: Any, y: Any, a: Any, m: int, n: int, alpha: Any = 1.0, incx: int = 1,
            incy: int = 1, lda: int | None = None, conjugate: bool = False) -> Future:
        if self._checked:
            refuse_c_order("ger", a=a)
        return self._memo_send(msgs.Ger, (x, y, a), (m, n, alpha, incx, incy, lda, conjugate))

    def symv(self, a: Any, x: Any, y: Any, n: int, alpha: Any = 1.0, beta: Any = 0.0,
             uplo: str = "L", lda: int | None = None, incx: int = 1, incy: int = 1) -> Future:
        if self._checked:
            refuse_c_order("symv", a=a)
        return self._memo_send(msgs.Symv, (a, x, y), (n, alpha, beta, uplo, lda, incx, incy))

    def trsv(self, a: Any, x: Any, n: int, uplo: str = "L", trans: Any = "N", diag: str = "N",
             lda: int | None = None, incx: int = 1) -> Future:
        if self._checked:
            refuse_c_order("trsv", a=a)
        return self._memo_send(msgs.Trsv, (a, x), (n, uplo, trans, diag, lda, incx))

    # -- level 3
    def geam(self, a: Any, b: Any, c: Any, m: int, n: int, alpha: Any = 1.0, beta: Any = 0.0,
             transa: Any = "N", transb: Any = "N", lda: int | None = None,
             ldb: int | None = None, ldc: int | None = None) -> Future:
        if self._checked:
            refuse_c_order("geam", a=a, b=b, c=c)
        return self._memo_send(msgs.Geam, (a, b, c),
                               (m, n, alpha, beta, transa, transb, lda, ldb, ldc))

    def syrk(self, a: Any, c: Any, n: int, k: int, alpha: Any = 1.0, beta: Any = 0.0,
             uplo: str = "L", trans: Any = "N", lda: int | None = None,
             ldc: int | None = None) -> Future:
        if self._checked:
            refuse_c_order("syrk", a=a, c=c)
        return self._memo_send(msgs.Syrk, (a, c), (n, k, alpha, beta, uplo, trans, lda, ldc))

    def symm(self, a: Any, b: Any, c: Any, m: int, n: int, alpha: Any = 1.0, beta: Any = 0.0,
             side: str = "L", uplo: str = "L", lda: int | None = None, ldb: int | None = None,
             ldc: int | None = None) -> Future:
        if self._checked:
            refuse_c_order("symm", a=a, b=b, c=c)
        return self._memo_send(msgs.Symm, (a, b, c), (m, n, alpha, beta, side, uplo, lda, ldb, ldc))

    def trmm(self, a: Any, b: Any, c: Any, m: int, n: int, alpha: Any = 1.0, side: str = "L",
             uplo: str = "L", trans: Any = "N", diag: str = "N", lda: int | None = None,
             ldb: int | None = None, ldc: int | None = None) -> Future:
        if self._checked:
            refuse_c_order("trmm", a=a, b=b, c=c)
        return self._memo_send(msgs.Trmm, (a, b, c),
                               (m, n, alpha, side, uplo, trans, diag, lda, ldb, ldc))

    def trsm(self, a: Any, b: Any, m: int, n: int, alpha: Any = 1.0, side: str = "L",
             uplo: str = "L", trans: Any = "N", diag: str = "N", lda: int | None = None,
             ldb: int | None = None) -> Future:
        if self._checked:
            refuse_c_order("trsm", a=a, b=b)
        return self._memo_send(msgs.Trsm, (a, b), (m, n, alpha, side, uplo, trans, diag, lda, ldb))


def _matmul_shape(ra: BufRef, rb: BufRef) -> tuple[int, ...]:
    """The shape of ``a @ b`` (Blas.matmul), or InvalidMessage naming what does not fit."""
    for name, r in (("a", ra), ("b", rb)):
        if r.order != "C" and len(r.shape) > 1:
            raise InvalidMessage(f"{name}: matmul takes C-ordered buffers ({r.describe()} "
                                 "is F-ordered; use gemm for column-major data)", field=name)
        if len(r.shape) not in (2, 3):
            raise InvalidMessage(f"{name}: matmul takes 2-D or 3-D buffers, got "
                                 f"{r.shape}", field=name)
    if ra.dtype != rb.dtype:
        raise InvalidMessage(f"b: dtype {rb.dtype} does not match a's {ra.dtype}", field="b")
    M, K = ra.shape[-2:]
    K2, N = rb.shape[-2:]
    if K != K2:
        raise InvalidMessage(f"b: shapes {ra.shape} and {rb.shape} do not align for matmul "
                             f"({K} != {K2})", field="b")
    batch_a = ra.shape[0] if len(ra.shape) == 3 else None
    batch_b = rb.shape[0] if len(rb.shape) == 3 else None
    if batch_a is not None and batch_b is not None and batch_a != batch_b:
        raise InvalidMessage(f"b: batch sizes {batch_a} and {batch_b} differ", field="b")
    batch = batch_a or batch_b
    return (M, N) if batch is None else (batch, M, N)


def _matmul_out(out: Any, ra: Any, rb: Any) -> BufRef:
    """``out``'s reference, if it can hold ``a @ b``."""
    ro = as_ref(out, "out")
    ra, rb = as_ref(ra, "a"), as_ref(rb, "b")
    shape = _matmul_shape(ra, rb)
    if ro.shape != shape or ro.dtype != ra.dtype or (ro.order != "C" and len(shape) > 1):
        raise InvalidMessage(f"out must be a C-ordered {ra.dtype}{list(shape)} buffer, "
                             f"got {ro.describe()}", field="out")
    return ro


def _matmul_message(ra: BufRef, rb: BufRef, ro: BufRef, compute: str) -> Any:
    """The GEMM of ``out = a @ b`` for C-ordered buffers: row-major C = A B is column-major
    C^T = B^T A^T, so the operands swap."""
    shape = _matmul_shape(ra, rb)
    M, K = ra.shape[-2:]
    N = rb.shape[-1]
    if len(shape) == 2:
        return msgs.Gemm(rb, ra, ro, N, M, K, 1.0, 0.0, "N", "N", N, K, N, compute)
    batch_a, batch_b = len(ra.shape) == 3, len(rb.shape) == 3
    return msgs.GemmStridedBatched(rb, ra, ro, N, M, K, shape[0], K * N if batch_b else 0,
                                   M * K if batch_a else 0, M * N, 1.0, 0.0, "N", "N", N, K, N,
                                   compute)


def _gemm_message(refs: tuple, args: tuple) -> Any:
    """The Gemm message of ``Blas.gemm``'s call (the buffers' orders applied)."""
    m, n, k, alpha, beta, transa, transb, lda, ldb, ldc, compute = args
    a, b, c, m, n, k, ta, tb, lda, ldb, ldc = gemm_args(*refs, m, n, k, transa, transb, lda,
                                                       ldb, ldc)
    return msgs.Gemm(a, b, c, m, n, k, alpha, beta, ta, tb, lda, ldb, ldc, compute)


def _gemv_message(refs: tuple, args: tuple) -> Any:
    """The Gemv message of ``Blas.gemv``'s call (``a``'s order applied)."""
    m, n, alpha, beta, trans, lda, incx, incy = args
    a, m, n, trans, lda = gemv_args(refs[0], m, n, trans, lda)
    return msgs.Gemv(a, refs[1], refs[2], m, n, alpha, beta, trans, lda, incx, incy)


#: ``dev.cublas``: the raw cuBLAS calls (column-major, explicit sizes and leading dimensions)
Cublas = view("Cublas", "Raw cuBLAS (``dev.cublas``): level 1, 2 and 3 BLAS and the GEMM family "
              "with cuBLAS semantics.", (Blas,),
              [n for n in vars(Blas) if not n.startswith("_") and n != "matmul"])
#: ``dev.linalg.matmul``: NumPy's ``matmul`` (joins cuSOLVER's NumPy-level calls)
Matmul = view("Matmul", "NumPy's ``matmul`` through cuBLAS.", (Blas,), ["matmul"])
