"""``dev.cublaslt``: the cuBLASLt messages as methods that return futures (caller's thread)."""

from __future__ import annotations

from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

import numpy as np

from ...messages._memo import MessageMemo
from ...messages.cublaslt import BlasLtCacheInfo, Matmul
from ..cublas._order import refuse_c_order

if TYPE_CHECKING:
    from ...client._device import Device

__all__ = ["CublasLt"]

#: Matmul's buffer fields, in the order matmul passes them to the memo
_BUFFER_FIELDS = ("a", "b", "d", "c", "bias", "aux", "scale_a", "scale_b", "scale_c", "scale_d")


class CublasLt:
    """Raw cuBLASLt (``dev.cublaslt``): matmuls with epilogues, fp8 scales, the plan cache."""

    _dev: Device
    #: a matmul repeated with the same buffers and arguments reuses its message
    _memo: MessageMemo

    def __init__(self, device: Device) -> None:
        self._dev = device
        self._memo = MessageMemo()

    def matmul(self, a: Any, b: Any, d: Any, m: int, n: int, k: int, c: Any = None,
               alpha: float = 1.0, beta: float = 0.0, transa: Any = "N", transb: Any = "N",
               lda: int | None = None, ldb: int | None = None, ldc: int | None = None,
               ldd: int | None = None, epilogue: str = "none", bias: Any = None,
               aux: Any = None, aux_ld: int | None = None, compute: str = "default",
               scale_a: Any = None, scale_b: Any = None, scale_c: Any = None,
               scale_d: Any = None) -> Future:
        """One cuBLASLt matmul (see :class:`~gpumsg.messages.cublaslt.Matmul`). fp8 scales may be
        Python floats: they are uploaded as f32 device scalars first."""
        dev = self._dev
        dev.port.check_open()
        scales = []
        for s in (scale_a, scale_b, scale_c, scale_d):
            if isinstance(s, (int, float)) and not isinstance(s, bool):
                s = dev.to_device(np.array([s], np.float32))
            scales.append(s)
        args = (m, n, k, alpha, beta, transa, transb, lda, ldb, ldc, ldd, epilogue, aux_ld,
                compute)

        def build(refs: tuple) -> Matmul:
            ra, rb, rd, rc, rbias, raux, *rscales = refs
            # column-major matrices only: a C-ordered one would be read as its transpose
            refuse_c_order("lt_matmul", a=ra, b=rb, d=rd, c=rc, aux=raux)
            return Matmul(ra, rb, rd, m, n, k, rc, alpha, beta, transa, transb, lda, ldb, ldc,
                          ldd, epilogue, rbias, raux, aux_ld, compute, *rscales)

        return dev.port.send_memo(self._memo.entry(
            Matmul, (a, b, d, c, bias, aux, *scales), args, build, _BUFFER_FIELDS))

    def cache_info(self) -> Future:
        """Resolves to the cuBLASLt plan cache's counters: hits, misses, size, capacity."""
        return self._dev.send(BlasLtCacheInfo())

