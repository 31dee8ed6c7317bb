"""BLAS messages, with cuBLAS semantics: matrices are column-major, ``lda`` is the distance in
elements between columns, ``trans`` is 'N' (as stored), 'T' (transposed) or 'C' (conjugate
transposed; the same as 'T' for real types). All run on the device's compute stream and reply
None once the result is in device memory.
"""

from __future__ import annotations

from typing import Any

from .base import BufRef, Message, _fail, _int, _real, _ref, _require_dtype, _set, message

__all__ = ["Sgemm", "INT32_MAX", "trans_code", "check_matrix"]

INT32_MAX = (1 << 31) - 1

_TRANS = {"N": "N", "T": "T", "C": "C", "n": "N", "t": "T", "c": "C", False: "N", True: "T"}


def trans_code(msg: object, field: str, value: Any) -> str:
    """Normalize a transpose flag ('N', 'T', 'C', or a bool) to 'N', 'T' or 'C'."""
    try:
        out = _TRANS.get(value)
    except TypeError:
        out = None
    if out is None:
        raise _fail(msg, field, f"must be 'N', 'T' or 'C' (or a bool), got {value!r}")
    return out


def check_matrix(msg: object, field: str, ref: BufRef, rows: int, cols: int, ld: int,
                 ld_field: str, offset: int = 0) -> None:
    """Check that a column-major ``rows`` x ``cols`` matrix with leading dimension ``ld``,
    starting ``offset`` elements into ``ref``, fits inside the buffer."""
    if ld < rows or ld < 1:
        raise _fail(msg, ld_field, f"must be >= max(1, {rows}) for a {rows}x{cols} matrix, "
                    f"got {ld}")
    if ld > INT32_MAX:
        raise _fail(msg, ld_field, f"must fit in 32 bits, got {ld}")
    if rows and cols:
        need = offset + ld * (cols - 1) + rows
        if need > ref.size:
            raise _fail(msg, field, f"a {rows}x{cols} matrix with {ld_field}={ld} spans {need} "
                        f"elements but {ref.describe()} holds {ref.size}")


@message(buffers=("a", "b", "c"), writes=("c",))
class Sgemm(Message):
    """C = alpha * op(A) @ op(B) + beta * C in float32 (``cublasSgemm``), strict fp32 math.

    ``lda``/``ldb``/``ldc`` default to the tight leading dimension of the stored matrix. When
    ``beta`` is 0, C is not read (NaNs in it do not propagate). C must not alias A or B.
    """

    a: BufRef
    b: BufRef
    c: BufRef
    m: int
    n: int
    k: int
    alpha: float = 1.0
    beta: float = 0.0
    transa: str = "N"
    transb: str = "N"
    lda: int | None = None
    ldb: int | None = None
    ldc: int | None = None

    def __post_init__(self) -> None:
        # Written for speed (this runs once per GEMM sent): values that are already in normal
        # form are not stored again.
        a, b, c = self.a, self.b, self.c
        if type(a) is not BufRef:
            a = _ref(self, "a", a)
            _set(self, "a", a)
        if type(b) is not BufRef:
            b = _ref(self, "b", b)
            _set(self, "b", b)
        if type(c) is not BufRef:
            c = _ref(self, "c", c)
            _set(self, "c", c)
        m = _int(self, "m", self.m, hi=INT32_MAX)
        n = _int(self, "n", self.n, hi=INT32_MAX)
        k = _int(self, "k", self.k, hi=INT32_MAX)
        if type(self.alpha) is not float:
            _set(self, "alpha", _real(self, "alpha", self.alpha))
        elif self.alpha != self.alpha:
            _real(self, "alpha", self.alpha)
        if type(self.beta) is not float:
            _set(self, "beta", _real(self, "beta", self.beta))
        elif self.beta != self.beta:
            _real(self, "beta", self.beta)
        ta, tb = self.transa, self.transb
        if ta != "N":
            ta = trans_code(self, "transa", ta)
            _set(self, "transa", ta)
        if tb != "N":
            tb = trans_code(self, "transb", tb)
            _set(self, "transb", tb)
        if a.dtype != "f32" or b.dtype != "f32" or c.dtype != "f32":
            for name, ref in (("a", a), ("b", b), ("c", c)):
                _require_dtype(self, name, ref, ("f32",))
        a_rows, a_cols = (m, k) if ta == "N" else (k, m)
        b_rows, b_cols = (k, n) if tb == "N" else (n, k)
        lda, ldb, ldc = self.lda, self.ldb, self.ldc
        if lda is None:
            lda = a_rows if a_rows > 1 else 1
            _set(self, "lda", lda)
        else:
            lda = _int(self, "lda", lda)
        if ldb is None:
            ldb = b_rows if b_rows > 1 else 1
            _set(self, "ldb", ldb)
        else:
            ldb = _int(self, "ldb", ldb)
        if ldc is None:
            ldc = m if m > 1 else 1
            _set(self, "ldc", ldc)
        else:
            ldc = _int(self, "ldc", ldc)
        check_matrix(self, "a", a, a_rows, a_cols, lda, "lda")
        check_matrix(self, "b", b, b_rows, b_cols, ldb, "ldb")
        check_matrix(self, "c", c, m, n, ldc, "ldc")
        for name, ref in (("A", a), ("B", b)):
            if ref.id == c.id and ref.owner == c.owner:
                raise _fail(self, "c", f"C must not alias {name} ({c.describe()})")
