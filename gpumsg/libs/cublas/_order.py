"""Memory order at the cuBLAS level: each buffer's own order is read, never assumed.

cuBLAS is column-major. A 2-D buffer describes a matrix by its shape and order: an F-ordered
``(r, c)`` buffer is the column-major ``r x c`` matrix with leading dimension ``r``; a C-ordered
one is, seen column-major, its transpose (``c x r``, leading dimension ``c``). The calls here
compute what the shapes say whatever the orders:

* an operand whose order differs from the output's is handed to cuBLAS transposed (its
  ``trans`` flag flipped: 'N' <-> 'T');
* a C-ordered output C is written as the column-major ``C^T = op(B)^T op(A)^T``: the operands
  swap, as row-major cuBLAS users do;
* ``m``, ``n``, ``k`` and the leading dimensions default from the shapes. An explicit ``m``,
  ``n`` or ``k`` may select a leading block of a larger buffer; one larger than the buffer, or an
  explicit leading dimension other than the buffer's own, is refused naming the field and the
  order.

Buffers that are not 2-D (flat storage) are column-major storage with explicit dimensions, as
in cuBLAS itself. A conjugate transpose ('C') of a complex operand whose order differs from the
output's would be a conjugate without transpose, which cuBLAS cannot express: it is refused.
"""

from __future__ import annotations

from typing import Any

from ...errors import InvalidMessage
from ...messages._base import BufRef, as_ref
from ...messages.cublas import trans_code

__all__ = ["gemm_args", "gemv_args", "natural_ld", "refuse_c_order"]

_COMPLEX = ("c64", "c128")
_FLIP = {"N": "T", "T": "N", "C": None}


def natural_ld(ref: BufRef) -> int:
    """The leading dimension of a 2-D buffer as cuBLAS sees it (rows if F, columns if C)."""
    r, c = ref.shape
    return max(1, r if ref.order == "F" else c)


def _is_matrix(ref: BufRef) -> bool:
    return len(ref.shape) == 2


def _where(ref: BufRef) -> str:
    return f"{ref.describe()}"


def _trans(field: str, value: Any) -> str:
    try:
        return trans_code(None, field, value)
    except InvalidMessage:
        raise InvalidMessage(f"{field}: must be 'N', 'T' or 'C' (or a bool), got {value!r}",
                             field=field) from None


def _check_ld(ref: BufRef, field: str, ld: Any, ld_field: str) -> int | None:
    """The leading dimension to pass: the buffer's own when ``ld`` is None; an explicit one
    must agree with it."""
    if not _is_matrix(ref):
        return ld
    own = natural_ld(ref)
    if ld is None:
        return own
    if isinstance(ld, bool) or not isinstance(ld, int) or ld != own:
        what = "rows" if ref.order == "F" else "columns"
        raise InvalidMessage(
            f"{ld_field}={ld!r} contradicts {field}, {_where(ref)}: a {ref.order}-ordered "
            f"buffer's leading dimension is its {what} ({own}); leave {ld_field} out or pass "
            f"flat storage", field=ld_field)
    return ld


def _dim(name: str, given: Any, found: list[tuple[str, BufRef, int, str]]) -> int:
    """``name`` (m, n or k): ``given``, or the size the 2-D buffers in ``found`` give it
    (``(field, ref, size, what)``); an explicit value larger than a buffer's is refused."""
    if given is None:
        if not found:
            raise InvalidMessage(f"{name}: no 2-D buffer gives it; pass {name} for flat storage",
                                 field=name)
        return found[0][2]
    if isinstance(given, bool) or not isinstance(given, int):
        return given  # the message says what is wrong with it
    for field, ref, size, what in found:
        if given > size:
            raise InvalidMessage(
                f"{name}={given} contradicts {field}, {_where(ref)}: as a {ref.order}-ordered "
                f"matrix it has {size} {what}", field=name)
    return given


def _flip(trans: str, ref: BufRef, field: str, tfield: str) -> str:
    out = _FLIP[trans]
    if out is None:
        if ref.dtype not in _COMPLEX:
            return "N"  # 'C' is 'T' for real types
        raise InvalidMessage(
            f"{tfield}='C' on {field}, {_where(ref)}, into an output of the other order would "
            "be a conjugate without transpose, which cuBLAS cannot do; use operands of the "
            "output's order", field=tfield)
    return out


def gemm_args(a: Any, b: Any, c: Any, m: Any, n: Any, k: Any, transa: Any, transb: Any,
              lda: Any, ldb: Any, ldc: Any) -> tuple:
    """The column-major GEMM ``(a, b, c, m, n, k, transa, transb, lda, ldb, ldc)`` that
    computes ``C = op(A) op(B)`` (the alpha/beta form too) as the buffers' shapes and orders
    say. ``m``, ``n``, ``k``, ``lda``, ``ldb``, ``ldc`` may be None."""
    ra, rb, rc = as_ref(a, "a"), as_ref(b, "b"), as_ref(c, "c")
    ta, tb = _trans("transa", transa), _trans("transb", transb)
    ms: list = []
    ns: list = []
    ks: list = []
    if _is_matrix(ra):
        r, cc = ra.shape
        rows, cols = (r, cc) if ta == "N" else (cc, r)
        ms.append(("a", ra, rows, "rows in op(a)"))
        ks.append(("a", ra, cols, "columns in op(a)"))
    if _is_matrix(rb):
        r, cc = rb.shape
        rows, cols = (r, cc) if tb == "N" else (cc, r)
        ks.append(("b", rb, rows, "rows in op(b)"))
        ns.append(("b", rb, cols, "columns in op(b)"))
    if _is_matrix(rc):
        ms.append(("c", rc, rc.shape[0], "rows"))
        ns.append(("c", rc, rc.shape[1], "columns"))
    m, n, k = _dim("m", m, ms), _dim("n", n, ns), _dim("k", k, ks)
    lda = _check_ld(ra, "a", lda, "lda")
    ldb = _check_ld(rb, "b", ldb, "ldb")
    ldc = _check_ld(rc, "c", ldc, "ldc")
    out = rc.order if _is_matrix(rc) else "F"
    order_a = ra.order if _is_matrix(ra) else "F"
    order_b = rb.order if _is_matrix(rb) else "F"
    if order_a != out:
        ta = _flip(ta, ra, "a", "transa")
    if order_b != out:
        tb = _flip(tb, rb, "b", "transb")
    if out == "F":
        return ra, rb, rc, m, n, k, ta, tb, lda, ldb, ldc
    # row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T
    return rb, ra, rc, n, m, k, tb, ta, ldb, lda, ldc


def gemv_args(a: Any, m: Any, n: Any, trans: Any, lda: Any) -> tuple:
    """The column-major GEMV ``(a, m, n, trans, lda)`` for ``y = op(A) x`` as ``a``'s shape
    and order say (``m`` x ``n``: A as stored, cuBLAS's convention)."""
    ra = as_ref(a, "a")
    t = _trans("trans", trans)
    if not _is_matrix(ra):
        return ra, m, n, t, lda
    rows, cols = ra.shape
    m = _dim("m", m, [("a", ra, rows, "rows")])
    n = _dim("n", n, [("a", ra, cols, "columns")])
    lda = _check_ld(ra, "a", lda, "lda")
    if ra.order == "F":
        return ra, m, n, t, lda
    # C-ordered A is, column-major, A^T (n x m): op(A) = op'(A^T)
    return ra, n, m, _flip(t, ra, "a", "trans"), lda


def refuse_c_order(call: str, **buffers: Any) -> None:
    """For the calls that take column-major matrices only: a C-ordered 2-D buffer (with more
    than one row and column) is refused naming its order, rather than read as its
    transpose."""
    for field, value in buffers.items():
        if value is None:
            continue
        try:
            ref = as_ref(value, field)
        except InvalidMessage:
            continue  # the message says what is wrong with it
        # a row or column vector is laid out alike in either order
        if len(ref.shape) == 2 and ref.order == "C" and min(ref.shape) > 1:
            raise InvalidMessage(
                f"{field}: {call} reads column-major matrices and {_where(ref)} is C-ordered "
                "(it would be read as its transpose); allocate it with order='F', or pass flat "
                "storage", field=field)
