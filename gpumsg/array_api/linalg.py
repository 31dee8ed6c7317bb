"""The standard's ``linalg`` extension, the part built from the namespace's own kernels:
products, norms, diagonals, ``cross``, ``matrix_power`` with a non-negative exponent.

Decompositions and solvers (``cholesky``, ``inv``, ``solve``, ``qr``, ``svd``, ``eigh``, ``det``,
...) need cuSOLVER and are not here yet; nor are the norms that need singular values
(``matrix_norm`` with ``ord`` 2, -2 or ``"nuc"``).
"""

from __future__ import annotations

import math
import operator
from typing import Any

from . import _dtypes as D
from ._array import Array
from ._elementwise import TABLE, apply
from ._linalg import matmul, matrix_transpose, tensordot, vecdot
from ._manipulation import broadcast_arrays, reshape, stack
from ._reductions import normalize_axes, reduce
from ._reductions import sum as _sum

__all__ = ["matmul", "tensordot", "vecdot", "matrix_transpose", "diagonal", "trace", "outer",
           "vector_norm", "matrix_norm", "cross", "matrix_power"]


def _floating(x: Any, name: str) -> Array:
    if not isinstance(x, Array):
        raise TypeError(f"{name}: expected an array, got {type(x).__name__}")
    if D.kind_of(x.dtype) not in "fc":
        raise TypeError(f"{name} needs a floating-point array, got {x.dtype}")
    return x


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


def trace(x: Array, /, *, offset: int = 0, dtype: Any = None) -> Array:
    return _sum(diagonal(x, offset=offset), axis=-1, dtype=dtype)


def outer(x1: Array, x2: Array, /) -> Array:
    if not isinstance(x1, Array) or not isinstance(x2, Array) or x1.ndim != 1 or x2.ndim != 1:
        raise ValueError("outer needs two 1-D arrays")
    return apply(TABLE["multiply"], reshape(x1, (-1, 1)), reshape(x2, (1, -1)))


def vector_norm(x: Array, /, *, axis: Any = None, keepdims: bool = False,
                ord: Any = 2) -> Array:  # noqa: A002
    """The ``ord``-norm over ``axis`` (all of it by default), in the real dtype of ``x``."""
    x = _floating(x, "vector_norm")
    acc = D.float32 if x.dtype in (D.float16, D.bfloat16) else x.dtype
    racc = D.real_dtype(acc)
    out = D.real_dtype(x.dtype)
    casts = (acc,)
    if ord == 2:
        return reduce(x, axis, keepdims, "norm2", "real(x * conj(x))", "a + b", 0, racc, out,
                      post="out = sqrt(a)", casts=casts)
    if ord == math.inf:
        return reduce(x, axis, keepdims, "norm_inf", "abs(x)", "maximum(a, b)", 0, racc, out,
                      casts=casts)
    if ord == -math.inf:
        return reduce(x, axis, keepdims, "norm_minf", "abs(x)", "minimum(a, b)", math.inf,
                      racc, out, casts=casts)
    if ord == 1:
        return reduce(x, axis, keepdims, "norm1", "abs(x)", "a + b", 0, racc, out, casts=casts)
    if ord == 0:
        return reduce(x, axis, keepdims, "norm0", "x != 0 ? 1 : 0", "a + b", 0, racc, out,
                      casts=casts)
    if isinstance(ord, bool) or not isinstance(ord, (int, float)):
        raise ValueError(f"vector_norm: ord must be a number or +-inf, got {ord!r}")
    p = float(ord)
    return reduce(x, axis, keepdims, "normp", f"pow(abs(x), {p!r})", "a + b", 0, racc, out,
                  post=f"out = pow(a, {1.0 / p!r})", casts=casts)


def matrix_norm(x: Array, /, *, keepdims: bool = False, ord: Any = "fro") -> Array:  # noqa: A002
    """Frobenius, 1, -1, inf and -inf norms of the last two dimensions."""
    x = _floating(x, "matrix_norm")
    if x.ndim < 2:
        raise ValueError("matrix_norm needs at least 2 dimensions")
    if ord == "fro":
        return vector_norm(x, axis=(-2, -1), keepdims=keepdims)
    if ord in (1, -1, math.inf, -math.inf):
        inner = -2 if ord in (1, -1) else -1
        sums = vector_norm(x, axis=inner, keepdims=True, ord=1)
        return vector_norm(sums, axis=(-2, -1), keepdims=keepdims,
                           ord=math.inf if ord > 0 else -math.inf)
    raise NotImplementedError(f"matrix_norm ord={ord!r} needs singular values (cuSOLVER)")


def cross(x1: Array, x2: Array, /, *, axis: int = -1) -> Array:
    """The cross product of 3-element vectors along ``axis`` (other dimensions broadcast)."""
    if not isinstance(x1, Array) or not isinstance(x2, Array):
        raise TypeError("cross: expected arrays")
    if D.kind_of(D.result_type(x1, x2)) not in "iufc":
        raise TypeError("cross needs numeric arrays")
    a, b = broadcast_arrays(x1, x2)
    ax = normalize_axes(axis, a.ndim)[0] if a.ndim else 0
    if a.ndim == 0 or a.shape[ax] != 3:
        raise ValueError("cross: the axis must have 3 elements")
    pre = (slice(None),) * ax

    def part(v: Array, i: int) -> Array:
        return v[pre + (i,)]

    mul, sub = TABLE["multiply"], TABLE["subtract"]

    def term(i: int, j: int) -> Array:
        return apply(sub, apply(mul, part(a, i), part(b, j)), apply(mul, part(a, j), part(b, i)))

    return stack([term(1, 2), term(2, 0), term(0, 1)], axis=ax)


def matrix_power(x: Array, n: int, /) -> Array:
    """``x`` multiplied by itself ``n`` times (n >= 0; a negative power needs an inverse)."""
    if not isinstance(x, Array) or x.ndim < 2 or x.shape[-1] != x.shape[-2]:
        raise ValueError("matrix_power needs square matrices")
    n = operator.index(n)
    if n < 0:
        raise NotImplementedError("matrix_power with n < 0 needs inv (cuSOLVER)")
    from ._creation import eye
    from ._manipulation import broadcast_to

    if n == 0:
        ident = eye(x.shape[-1], dtype=x.dtype, device=x.device)
        from ._array import _copy

        return _copy(broadcast_to(ident, x.shape))
    result = None
    base = x
    while n:
        if n & 1:
            result = base if result is None else matmul(result, base)
        n >>= 1
        if n:
            base = matmul(base, base)
    assert result is not None
    return result

