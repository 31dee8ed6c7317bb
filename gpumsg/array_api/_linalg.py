"""``matmul``, ``tensordot``, ``vecdot``: products of floating and complex matrices (float16,
bfloat16, float32, float64, complex64, complex128) go to cuBLAS, one GEMM (or one strided
batch of them) per call, its output allocated by the same message; integer products and
``vecdot`` are the generated multiply-add reduction over the contracted dimension, batch
dimensions broadcast. ``matrix_transpose`` and ``diagonal`` are views."""

from __future__ import annotations

import math
import operator
from typing import Any, NamedTuple

import numpy as np

from ..messages._memo import field_values
from ..messages.cublas import Gemm, GemmStridedBatched, Sgemm
from . import _dtypes as D
from ._array import Array, _copy, check_device
from ._codegen import Operand, ReductionSpec, _ref_of, reduction_new
from ._elementwise import astype, broadcast_shapes
from ._manipulation import permute_dims, reshape

__all__ = ["matmul", "tensordot", "vecdot", "matrix_transpose", "diagonal"]

#: array dtypes cuBLAS multiplies (the GEMM family's element types)
_BLAS_DTYPES = frozenset((D.float16, D.bfloat16, D.float32, D.float64, D.complex64,
                          D.complex128))


def _contract(a: Array, b: Array, out_shape: tuple[int, ...], sa: tuple[int, ...],
              sb: tuple[int, ...], red: tuple[int, ...], conj: bool = False,
              name: str = "matmul") -> Array:
    """``out[o] = sum_r a[o, r] * b[o, r]`` with the given strides over ``out_shape + red``."""
    dev = check_device(a, b)
    dt = D.result_type(a, b)
    if D.kind_of(dt) == "b":
        raise TypeError(f"{name} is not defined for bool")
    acc = D.float32 if dt in (D.float16, D.bfloat16) else dt
    ins = (("x", a.dtype, False), ("y", b.dtype, False))
    spec = ReductionSpec(name, "conj(x) * y" if conj else "x * y", "a + b", "out = a", ins,
                         (acc, acc), acc, ("out", dt))
    ops = [Operand(a._buf, a.dtype, a._offset, sa), Operand(b._buf, b.dtype, b._offset, sb)]
    return Array(reduction_new(dev, spec, out_shape, red, ops, 0), out_shape, dt, dev)


def _bstrides(x: Array, batch: tuple[int, ...], nb: int) -> tuple[int, ...]:
    """x's strides of its batch dimensions broadcast to ``batch``."""
    xb = x.shape[:nb]
    st = x.strides[:nb]
    pad = len(batch) - len(xb)
    return (0,) * pad + tuple(0 if d == 1 and batch[pad + k] != 1 else s
                              for k, (d, s) in enumerate(zip(xb, st)))



def _blas_layout(rows: int, cols: int, s0: int, s1: int) -> tuple[str, int] | None:
    """How cuBLAS (column-major) reads a row-major ``rows`` x ``cols`` matrix whose element
    ``[i, j]`` is ``i * s0 + j * s1`` elements from its start: ("N", ld) when the memory holds
    its transpose column-major (rows of the matrix contiguous, ``ld`` apart), ("T", ld) when it
    holds the matrix itself (columns contiguous); None for any other layout (broadcast, negative
    or interleaved strides). A dimension of one constrains nothing."""
    if (s1 == 1 or cols == 1) and (rows == 1 or s0 >= cols):
        return "N", s0 if rows > 1 else max(1, cols)
    if (s0 == 1 or rows == 1) and (cols == 1 or s1 >= rows):
        return "T", s1 if cols > 1 else max(1, rows)
    return None


def _batch_stride(shape: tuple[int, ...], strides: tuple[int, ...]) -> int | None:
    """The one element stride that walks the flattened batch dimensions ``shape`` (0: one
    matrix for every product), or None when they do not flatten to one stride."""
    dims = [(d, s) for d, s in zip(shape, strides) if d != 1]
    if not dims:
        return 0
    if all(s == 0 for _, s in dims):
        return 0
    for (_, outer), (inner_d, inner) in zip(dims, dims[1:]):
        if inner <= 0 or outer != inner * inner_d:
            return None
    return dims[-1][1] if dims[-1][1] > 0 else None


def _blas_read(x: Array, batch: tuple[int, ...]) -> tuple[str, int, int] | None:
    """How cuBLAS reads ``x`` (``batch`` + a matrix, its batch dimensions broadcast to
    ``batch``) in place: (transpose, leading dimension, batch stride), or None when its layout
    is not one cuBLAS can read in place. Its layout alone: no buffer."""
    if x._offset != 0:
        return None
    rows, cols = x.shape[-2:]
    s0, s1 = x.strides[-2:]
    layout = _blas_layout(rows, cols, s0, s1)
    if layout is None:
        return None
    stride = _batch_stride(batch, _bstrides(x, batch, x.ndim - 2))
    if stride is None:
        return None
    return layout[0], layout[1], stride


def _blas_operand(x: Array, batch: tuple[int, ...]) -> tuple[Any, str, int, int] | None:
    """``x`` as cuBLAS reads it (:func:`_blas_read`) with its buffer reference first, or None
    when its layout is not one cuBLAS can read in place."""
    found = _blas_read(x, batch)
    if found is None:
        return None
    return (_ref_of(x._buf), *found)


class _GemmPlan(NamedTuple):
    """A GEMM of operands that cuBLAS reads in place, from their layouts alone: the message
    class, its fields after its three buffers (B, A, C), and the output's shape, dtype and
    storage name."""

    kind: Any
    fields: tuple
    shape: tuple[int, ...]
    dtype: np.dtype
    storage: str


def _gemm_plan(a: Array, b: Array, batch: tuple[int, ...], dt: np.dtype) -> _GemmPlan | None:
    """The :class:`_GemmPlan` of ``a @ b`` (see :func:`_gemm`), or None when an operand must
    be copied first."""
    la = _blas_read(a, batch)
    lb = _blas_read(b, batch)
    if la is None or lb is None:
        return None
    (ta, lda, sa), (tb, ldb, sb) = la, lb
    n, k = a.shape[-2:]
    m = b.shape[-1]
    count = math.prod(batch)
    if count == 1:
        kind: Any = Sgemm if dt == D.float32 else Gemm
        fields: tuple = (m, n, k, 1.0, 0.0, tb, ta, ldb, lda, m)
    else:
        kind = GemmStridedBatched
        fields = (m, n, k, count, sb, sa, n * m, 1.0, 0.0, tb, ta, ldb, lda, m)
    return _GemmPlan(kind, fields, batch + (n, m), dt, D.storage_name(dt))


def _gemm_send(a: Array, b: Array, plan: _GemmPlan) -> tuple[Array, Any]:
    """Post ``plan``'s GEMM of ``a`` and ``b`` into a new array allocated by its message,
    validated: the array and the message."""
    ra = _ref_of(a._buf)
    rb = _ref_of(b._buf)
    dev = a._dev
    ref = dev.port.mint(plan.shape, plan.storage, "C")
    msg = plan.kind(rb, ra, ref, *plan.fields)
    return Array(dev.port.send_new(ref, msg), plan.shape, plan.dtype, dev), msg


def _gemm_again(a: Array, b: Array, plan: _GemmPlan, rest: tuple) -> Array:
    """:func:`_gemm_send` for operands of a kind whose product was validated before: the
    message is built unchecked from the validated one's fields after its three buffers
    (``rest``), as the layouts, the dtypes and the output are the same and each operand's
    buffer holds its array. A buffer of another storage dtype (a view of other bits) takes the
    checked path."""
    ra = _ref_of(a._buf)
    rb = _ref_of(b._buf)
    if ra.dtype != plan.storage or rb.dtype != plan.storage:
        return _gemm_send(a, b, plan)[0]
    dev = a._dev
    ref = dev.port.mint(plan.shape, plan.storage, "C")
    msg = plan.kind.unchecked(rb, ra, ref, *rest)
    return Array(dev.port.send_new(ref, msg), plan.shape, plan.dtype, dev)


def _gemm(a: Array, b: Array, batch: tuple[int, ...], dt: np.dtype) -> Array:
    """``a @ b`` of ``dt`` operands (stacks broadcast to ``batch``, no dimension empty) as one
    cuBLAS GEMM, or one strided batch of them, writing a new C-ordered array allocated by the
    same message. Row-major ``C = A B`` is the column-major ``C^T = B^T A^T``: each operand
    goes as it lies in memory, a transposed view with the opposite transpose flag. An operand
    laid out otherwise (an offset view, a reversed axis, batch dimensions that broadcast
    against each other) is copied first."""
    copies = []  # held until the GEMM is posted: a copy dropped sooner would be freed first
    operands = []
    for x in (a, b):
        if _blas_read(x, batch) is None:  # a C-ordered copy, its batch broadcast out: one
            # cuBLAS can read
            nb = x.ndim - 2
            full = x._view(batch + x.shape[-2:], _bstrides(x, batch, nb) + x.strides[-2:],
                           x._offset)
            copies.append(_copy(full))
            x = copies[-1]
        operands.append(x)
    plan = _gemm_plan(operands[0], operands[1], batch, dt)
    assert plan is not None  # the copies are C-ordered
    return _gemm_send(operands[0], operands[1], plan)[0]


#: (each operand's dtype, shape, strides and offset) -> the _GemmPlan of a matmul of two
#: arrays of at least 2 dimensions that cuBLAS multiplies in place, with no conversion, and
#: the fields after the three buffers of its first message, once that one was validated: a
#: repeated kind of product derives it once and builds its message unchecked (layouts only:
#: no buffer, no device)
_GEMM_PLANS: dict[tuple, tuple[_GemmPlan, tuple]] = {}
_GEMM_PLANS_SIZE = 4096


def matmul(x1: Array, x2: Array, /) -> Array:
    """The standard's ``matmul``: floating and complex operands through cuBLAS (:func:`_gemm`),
    integers through the generated multiply-add reduction. Operands of different dtypes are
    converted to the promoted one first."""
    if not isinstance(x1, Array) or not isinstance(x2, Array):
        raise TypeError("matmul: both operands must be arrays")
    key = (x1._dtype, x1._shape, x1._strides, x1._offset,
           x2._dtype, x2._shape, x2._strides, x2._offset)
    known = _GEMM_PLANS.get(key)
    if known is not None:
        if x2._dev is not x1._dev:
            check_device(x1, x2)  # raises
        return _gemm_again(x1, x2, *known)
    if x1.ndim == 0 or x2.ndim == 0:
        raise ValueError("matmul: operands must have at least one dimension")
    a, b = x1, x2
    if a.ndim == 1:
        a = a._view((1,) + a.shape, (0,) + a.strides, a._offset)
    if b.ndim == 1:
        b = b._view(b.shape + (1,), b.strides + (0,), b._offset)
    n, k = a.shape[-2:]
    k2, m = b.shape[-2:]
    if k != k2:
        raise ValueError(f"matmul: shapes {x1.shape} and {x2.shape} do not align")
    batch = broadcast_shapes(a.shape[:-2], b.shape[:-2])
    check_device(a, b)
    dt = D.result_type(a, b)
    if dt in _BLAS_DTYPES and n * m * k * math.prod(batch) > 0:
        if a is x1 and b is x2 and a.dtype == dt and b.dtype == dt:
            plan = _gemm_plan(a, b, batch, dt)
            if plan is not None:  # the product of this kind of operands, kept once valid
                out, msg = _gemm_send(a, b, plan)
                if len(_GEMM_PLANS) >= _GEMM_PLANS_SIZE:
                    _GEMM_PLANS.clear()
                _GEMM_PLANS[key] = (plan, field_values(msg)[3:])
                return out
        out = _gemm(a if a.dtype == dt else astype(a, dt),
                    b if b.dtype == dt else astype(b, dt), batch, dt)
    else:
        sa = _bstrides(a, batch, a.ndim - 2) + (a.strides[-2], 0, a.strides[-1])
        sb = _bstrides(b, batch, b.ndim - 2) + (0, b.strides[-1], b.strides[-2])
        out = _contract(a, b, batch + (n, m), sa, sb, (k,))
    shape = batch + ((n,) if x1.ndim > 1 else ()) + ((m,) if x2.ndim > 1 else ())
    if shape != out.shape:
        out = reshape(out, shape)
    return out


def vecdot(x1: Array, x2: Array, /, *, axis: int = -1) -> Array:
    if not isinstance(x1, Array) or not isinstance(x2, Array):
        raise TypeError("vecdot: both operands must be arrays")
    shape = broadcast_shapes(x1.shape, x2.shape)
    nd = len(shape)
    ax = operator.index(axis)
    if not -nd <= ax < nd:
        raise ValueError(f"vecdot: axis {ax} is out of range")
    ax %= nd
    o1 = x1._operand(shape)
    o2 = x2._operand(shape)
    if shape[ax] != (x1.shape[ax - nd] if ax - nd >= -x1.ndim else 1) or \
            shape[ax] != (x2.shape[ax - nd] if ax - nd >= -x2.ndim else 1):
        raise ValueError("vecdot: the contracted axis must have one size in both arrays")
    keep = [d for d in range(nd) if d != ax]
    sa = tuple(o1.strides[d] for d in keep) + (o1.strides[ax],)
    sb = tuple(o2.strides[d] for d in keep) + (o2.strides[ax],)
    return _contract(x1, x2, tuple(shape[d] for d in keep), sa, sb, (shape[ax],), conj=True,
                     name="vecdot")


def tensordot(x1: Array, x2: Array, /, *, axes: Any = 2) -> Array:
    if not isinstance(x1, Array) or not isinstance(x2, Array):
        raise TypeError("tensordot: both operands must be arrays")
    if isinstance(axes, (int, np.integer)):
        n = int(axes)
        if n < 0:
            raise ValueError("tensordot: axes must be non-negative")
        if n > min(x1.ndim, x2.ndim):
            raise ValueError(f"tensordot: axes={n} is more than the operands' dimensions "
                             f"({x1.ndim} and {x2.ndim})")
        a1 = tuple(range(x1.ndim - n, x1.ndim))
        a2 = tuple(range(n))
    else:
        if not (isinstance(axes, (tuple, list)) and len(axes) == 2
                and all(isinstance(a, (tuple, list)) for a in axes)):
            raise TypeError("tensordot: axes must be an integer or a pair of axis sequences, "
                            f"got {axes!r}")
        a1, a2 = (tuple(operator.index(v) for v in axes[0]),
                  tuple(operator.index(v) for v in axes[1]))
        for name, ax, nd in (("x1", a1, x1.ndim), ("x2", a2, x2.ndim)):
            if any(not -nd <= v < nd for v in ax) or len(set(v % nd for v in ax)) != len(ax):
                raise ValueError(f"tensordot: axes {ax} of {name} out of range or repeated "
                                 f"for {nd} dimensions")
        a1 = tuple(v % x1.ndim for v in a1)
        a2 = tuple(v % x2.ndim for v in a2)
    if len(a1) != len(a2) or any(x1.shape[i] != x2.shape[j] for i, j in zip(a1, a2)):
        raise ValueError("tensordot: contracted axes differ in size")
    f1 = [d for d in range(x1.ndim) if d not in a1]
    f2 = [d for d in range(x2.ndim) if d not in a2]
    out_shape = tuple(x1.shape[d] for d in f1) + tuple(x2.shape[d] for d in f2)
    red = tuple(x1.shape[d] for d in a1)
    if D.result_type(x1, x2) in _BLAS_DTYPES and math.prod(out_shape) * math.prod(red) > 0:
        # one GEMM: (free of x1, contracted) @ (contracted, free of x2); the reshapes are
        # views unless the permuted operand is not contiguous
        check_device(x1, x2)
        rows = math.prod(x1.shape[d] for d in f1)
        cols = math.prod(x2.shape[d] for d in f2)
        left = reshape(permute_dims(x1, tuple(f1) + a1), (rows, math.prod(red)))
        right = reshape(permute_dims(x2, a2 + tuple(f2)), (math.prod(red), cols))
        return reshape(matmul(left, right), out_shape)
    sa = tuple(x1.strides[d] for d in f1) + (0,) * len(f2) + tuple(x1.strides[d] for d in a1)
    sb = (0,) * len(f1) + tuple(x2.strides[d] for d in f2) + tuple(x2.strides[d] for d in a2)
    return _contract(x1, x2, out_shape, sa, sb, red, name="tensordot")


def matrix_transpose(x: Array, /) -> Array:
    if not isinstance(x, Array):
        raise TypeError("matrix_transpose: expected an array")
    return x.mT


def diagonal(x: Array, /, *, offset: int = 0) -> Array:
    """The ``offset`` diagonal of the last two dimensions, as a view."""
    if not isinstance(x, Array) or x.ndim < 2:
        raise ValueError("diagonal needs an array of at least 2 dimensions")
    k = operator.index(offset)
    n, m = x.shape[-2:]
    s0, s1 = x.strides[-2:]
    length = max(0, min(n, m - k) if k >= 0 else min(n + k, m))
    start = x._offset + (k * s1 if k >= 0 else -k * s0) if length else x._offset
    return x._view(x.shape[:-2] + (length,), x.strides[:-2] + (s0 + s1,), start)
