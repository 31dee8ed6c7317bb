"""``matmul``, ``tensordot``, ``vecdot``: one generated reduction (multiply, add) over the
contracted dimension, for every numeric dtype, batch dimensions broadcast. (The cuBLAS path
for large float matrices is the obvious next step for speed; the results are the same.)
``matrix_transpose`` and ``diagonal`` are views."""

from __future__ import annotations

import operator
from typing import Any

import numpy as np

from . import _dtypes as D
from ._array import Array, check_device, new_array
from ._codegen import Operand, ReductionSpec, launch_reduction
from ._elementwise import broadcast_shapes

__all__ = ["matmul", "tensordot", "vecdot", "matrix_transpose", "diagonal"]


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
    out = new_array(dev, out_shape, dt)
    ops = [Operand(a._buf, a.dtype, a._offset, sa), Operand(b._buf, b.dtype, b._offset, sb)]
    out._wrote(launch_reduction(dev, spec, out_shape, red, out._operand(), ops, 0))
    return out


def _bstrides(x: Array, batch: tuple[int, ...], nb: int) -> tuple[int, ...]:
    """x's strides of its batch dimensions broadcast to ``batch``."""
    xb = x.shape[:nb]
    st = x.strides[:nb]
    pad = len(batch) - len(xb)
    return (0,) * pad + tuple(0 if d == 1 and batch[pad + k] != 1 else s
                              for k, (d, s) in enumerate(zip(xb, st)))


def _as_stored(x: Array) -> tuple[str, int] | None:
    """How cuBLAS (column-major) sees a 2-D row-major operand occupying its whole buffer from
    element 0: ("N", ld) for a C-contiguous array (the buffer holds its transpose), ("T", ld)
    for a transposed one (the buffer holds the matrix itself); None otherwise."""
    r, c = x.shape
    if x._offset != 0 or r == 0 or c == 0:
        return None
    buf = x.buffer.buffer if hasattr(x.buffer, "buffer") else x.buffer
    if buf.size != r * c:
        return None
    if x.strides == (c, 1) or r == 1 and x.strides[1] == 1 or c == 1 and x.strides[0] == 1:
        return ("N", c)
    if x.strides == (1, r):
        return ("T", r)
    return None


def _sgemm(a: Array, b: Array) -> Array | None:
    """``a @ b`` of 2-D float32 operands through cuBLAS's SGEMM (``dev.sgemm``), or None when
    the operands are not laid out for it. ``dev.sgemm`` reads each buffer in its own order, so
    a 2-D C-ordered buffer holding the operand (or its transpose, for a ``.T`` view) goes as it
    is; flat buffers are column-major storage, so there row-major C = A B is passed as the
    column-major C^T = B^T A^T with explicit sizes."""
    sa, sb = _as_stored(a), _as_stored(b)
    if sa is None or sb is None:
        return None
    n, k = a.shape
    m = b.shape[1]
    dev = a.device
    abuf, bbuf = (x.buffer.buffer if hasattr(x.buffer, "buffer") else x.buffer for x in (a, b))
    out = new_array(dev, (n, m), D.float32)
    if len(abuf.shape) == 1 and len(bbuf.shape) == 1 and len(out.buffer.shape) == 1:
        done = dev.sgemm(b.buffer, a.buffer, out.buffer, m=m, n=n, k=k, transa=sb[0],
                         transb=sa[0], lda=sb[1], ldb=sa[1], ldc=m)
    else:
        ops = []
        for x, (kind, _ld), buf in ((a, sa, abuf), (b, sb, bbuf)):
            want = x.shape if kind == "N" else x.shape[::-1]
            if tuple(buf.shape) != tuple(want) or buf.order != "C":
                return None
            ops.append(kind)
        done = dev.sgemm(a.buffer, b.buffer, out.buffer, transa=ops[0], transb=ops[1])
    out._wrote(done)
    return out


def matmul(x1: Array, x2: Array, /) -> Array:
    """The standard's ``matmul``: 2-D float32 operands laid out for it go through cuBLAS's SGEMM,
    everything else through the generated multiply-add reduction."""
    if not isinstance(x1, Array) or not isinstance(x2, Array):
        raise TypeError("matmul: both operands must be arrays")
    if x1.ndim == 0 or x2.ndim == 0:
        raise ValueError("matmul: operands must have at least one dimension")
    if x1.ndim == 2 and x2.ndim == 2 and x1.dtype == D.float32 == x2.dtype and \
            x1.shape[1] == x2.shape[0]:
        check_device(x1, x2)
        out = _sgemm(x1, x2)
        if out is not None:
            return out
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
    sa = _bstrides(a, batch, a.ndim - 2) + (a.strides[-2], 0, a.strides[-1])
    sb = _bstrides(b, batch, b.ndim - 2) + (0, b.strides[-1], b.strides[-2])
    out = _contract(a, b, batch + (n, m), sa, sb, (k,))
    shape = batch + ((n,) if x1.ndim > 1 else ()) + ((m,) if x2.ndim > 1 else ())
    if shape != out.shape:
        from ._manipulation import reshape

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
    sa = tuple(x1.strides[d] for d in f1) + (0,) * len(f2) + tuple(x1.strides[d] for d in a1)
    sb = (0,) * len(f1) + tuple(x2.strides[d] for d in f2) + tuple(x2.strides[d] for d in a2)
    red = tuple(x1.shape[d] for d in a1)
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
