"""The standard's ``linalg`` extension and the rest of ``numpy.linalg``: its 31 functions.

Products, norms, diagonals, ``cross``, ``matrix_power`` and ``multi_dot`` are built from the
namespace's own kernels; ``norm``, ``cond``, ``tensorsolve``, ``tensorinv`` and ``lstsq`` from
those and the decompositions and solvers of :mod:`._solvers` (cuSOLVER, every one accepting
stacks ``(..., M, N)``, batched calls for stacks of matrices up to :data:`BATCHED_MAX`).
"""

from __future__ import annotations

import math
import operator
from collections import namedtuple
from typing import Any

import numpy as np

from ..errors import LinAlgError
from . import _dtypes as D
from ._array import Array, new_array
from ._codegen import ElementwiseSpec, launch_elementwise
from ._elementwise import TABLE, apply, astype
from ._expr import float_text
from ._linalg import diagonal, matmul, matrix_transpose, tensordot, vecdot
from ._manipulation import broadcast_arrays, expand_dims, reshape
from ._reductions import normalize_axes, reduce
from ._reductions import sum as _sum
from ._solvers import (
    BATCHED_MAX,
    EighResult,
    EigResult,
    QRResult,
    SlogdetResult,
    SVDResult,
    _stack_input,
    _tolerance,
    cholesky,
    det,
    eig,
    eigh,
    eigvals,
    eigvalsh,
    inv,
    matrix_rank,
    pinv,
    qr,
    slogdet,
    solve,
    svd,
    svdvals,
)

__all__ = ["matmul", "tensordot", "vecdot", "matrix_transpose", "diagonal", "trace", "outer",
           "vector_norm", "matrix_norm", "cross", "matrix_power", "cholesky", "inv", "solve",
           "det", "slogdet", "eigh", "eigvalsh", "qr", "svd", "svdvals", "matrix_rank", "pinv",
           "eig", "eigvals", "norm", "cond", "multi_dot", "tensorsolve", "tensorinv", "lstsq",
           "LinAlgError", "BATCHED_MAX", "EigResult", "EighResult", "QRResult", "SlogdetResult",
           "SVDResult", "LstsqResult"]

def _floating(x: Any, name: str) -> Array:
    if not isinstance(x, Array):
        raise TypeError(f"{name}: expected an array, got {type(x).__name__}")
    if D.kind_of(x.dtype) not in "fc":
        raise TypeError(f"{name} needs a floating-point array, got {x.dtype}")
    return x


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
    # |x|^p as exp(p log|x|): pow of a float32 and a double literal has no single overload on
    # the device (and a zero still gives 0 for p > 0, inf for p < 0, as NumPy's)
    return reduce(x, axis, keepdims, "normp", f"exp(log(abs(x)) * {float_text(p)})", "a + b", 0,
                  racc, out, post=f"out = exp(log(a) * {float_text(1.0 / p)})", casts=casts)


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
    if ord in (2, -2, "nuc"):
        from ._reductions import max as _max
        from ._reductions import min as _min
        from ._reductions import sum as _s

        s = svdvals(x)
        res = {2: _max, -2: _min, "nuc": _s}[ord](s, axis=-1)
        return reshape(res, res.shape + (1, 1)) if keepdims else res
    raise ValueError(f"matrix_norm: unknown ord {ord!r}")


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
    dt = D.result_type(a, b)
    out = new_array(a.device, a.shape, dt)
    pre = (slice(None),) * ax
    spec = ElementwiseSpec("cross", "out = p * q - r * s",
                           tuple((v, dt, False) for v in "pqrs"), (dt,) * 4, (("out", dt),))
    for i, (j, k) in enumerate(((1, 2), (2, 0), (0, 1))):
        # component i = a_j b_k - a_k b_j, one kernel written into its slice of the result
        dst = out[pre + (i,)]
        ops = [v[pre + (c,)] for v, c in ((a, j), (b, k), (a, k), (b, j))]
        ops = [astype(o, dt, copy=False) if o.dtype != dt else o for o in ops]
        done = launch_elementwise(a.device, spec, dst.shape, [dst._operand()],
                                  [o._operand(dst.shape) for o in ops])
        out._wrote(done)
    return out


def matrix_power(x: Array, n: int, /) -> Array:
    """``x`` multiplied by itself ``n`` times (n >= 0; a negative power needs an inverse)."""
    if not isinstance(x, Array) or x.ndim < 2 or x.shape[-1] != x.shape[-2]:
        raise ValueError("matrix_power needs square matrices")
    n = operator.index(n)
    if n < 0:
        return matrix_power(inv(x), -n)
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


LstsqResult = namedtuple("LstsqResult", ["x", "residuals", "rank", "singular_values"])


# -- numpy.linalg beyond the standard ------------------------------------------------------------
def norm(x: Array, /, ord: Any = None, axis: Any = None,  # noqa: A002 (NumPy's name)
         keepdims: bool = False) -> Array:
    """NumPy's ``linalg.norm``: with ``axis=None`` the 2-norm of the flattened array (``ord``
    None), else the vector norm of a 1-D or the matrix norm of a 2-D array; an int ``axis``
    gives vector norms, a pair of axes matrix norms (``'fro'``, ``'nuc'``, +-1, +-2, +-inf)."""
    x = _floating(astype(x, D.float64) if isinstance(x, Array) and
                  D.kind_of(x.dtype) in "iub" else x, "norm")
    if axis is None:
        if ord is None:
            out = vector_norm(x, axis=None, keepdims=keepdims)
            return out
        if x.ndim == 1:
            return vector_norm(x, ord=ord, keepdims=keepdims)
        if x.ndim == 2:
            return matrix_norm(x, ord=ord, keepdims=keepdims)
        raise ValueError("norm: an ord needs a 1-D or 2-D array, or an axis")
    axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    axes = tuple(normalize_axes(axes, x.ndim))
    if len(axes) == 1:
        if isinstance(ord, str):
            raise ValueError(f"norm: ord {ord!r} needs two axes")
        return vector_norm(x, axis=axes[0], ord=2 if ord is None else ord, keepdims=keepdims)
    if len(axes) != 2:
        raise ValueError(f"norm: axis must name one or two axes, got {axis!r}")
    from ._manipulation import moveaxis

    moved = moveaxis(x, axes, (-2, -1))
    out = matrix_norm(moved, ord="fro" if ord is None else ord)
    if keepdims:
        for a in sorted(axes):
            out = expand_dims(out, axis=a)
    return out


def cond(x: Array, /, p: Any = None) -> Array:
    """The condition number of each matrix in the norm ``p`` (None or +-2: the ratio of the
    extreme singular values; 'fro', 'nuc', +-1, +-inf: norm(x) * norm(inv(x)))."""
    x = _stack_input(x, "cond")
    if p is None or p in (2, -2):
        s = svdvals(x)
        hi, lo = s[..., 0], s[..., -1]
        return apply(TABLE["divide"], lo, hi) if p == -2 else apply(TABLE["divide"], hi, lo)
    if x.shape[-1] != x.shape[-2]:
        raise ValueError("cond: a norm other than 2 needs square matrices")
    return apply(TABLE["multiply"], matrix_norm(x, ord=p), matrix_norm(inv(x), ord=p))


def multi_dot(arrays: Any, /) -> Array:
    """The product of ``arrays`` in the cheapest order (NumPy's ``multi_dot``: the first may be
    1-D, a row; the last 1-D, a column; the others 2-D)."""
    mats = list(arrays)
    if len(mats) < 2:
        raise ValueError("multi_dot needs at least two arrays")
    for i, m in enumerate(mats):
        if not isinstance(m, Array):
            raise TypeError(f"multi_dot: arrays[{i}] is a {type(m).__name__}, not an array")
    first_vec, last_vec = mats[0].ndim == 1, mats[-1].ndim == 1
    if first_vec:
        mats[0] = reshape(mats[0], (1, -1))
    if last_vec:
        mats[-1] = reshape(mats[-1], (-1, 1))
    if any(m.ndim != 2 for m in mats):
        raise ValueError("multi_dot: the arrays between the ends must be 2-D")
    dims = [mats[0].shape[0]] + [m.shape[1] for m in mats]
    k = len(mats)
    # the matrix-chain order: cost[i][j] the fewest multiply-adds for mats[i..j]
    cost = [[0] * k for _ in range(k)]
    split = [[0] * k for _ in range(k)]
    for span in range(1, k):
        for i in range(k - span):
            j = i + span
            cost[i][j] = math.inf
            for s in range(i, j):
                c = cost[i][s] + cost[s + 1][j] + dims[i] * dims[s + 1] * dims[j + 1]
                if c < cost[i][j]:
                    cost[i][j], split[i][j] = c, s

    def product(i: int, j: int) -> Array:
        if i == j:
            return mats[i]
        s = split[i][j]
        return matmul(product(i, s), product(s + 1, j))

    out = product(0, k - 1)
    if first_vec and last_vec:
        return reshape(out, ())
    if first_vec:
        return reshape(out, (-1,))
    if last_vec:
        return reshape(out, (-1,))
    return out


def tensorsolve(a: Array, b: Array, /, axes: Any = None) -> Array:
    """x with ``tensordot(a, x, x.ndim) == b`` (NumPy's ``tensorsolve``; ``axes``: the axes of
    ``a`` moved to the end first)."""
    if not isinstance(a, Array) or not isinstance(b, Array):
        raise TypeError("tensorsolve: expected arrays")
    if axes is not None:
        from ._manipulation import moveaxis

        axes = tuple(normalize_axes(tuple(axes), a.ndim))
        a = moveaxis(a, axes, tuple(range(a.ndim - len(axes), a.ndim)))
    tail = a.shape[b.ndim:]
    size = math.prod(tail)
    if math.prod(a.shape[:b.ndim]) != size or a.shape[:b.ndim] != b.shape:
        raise ValueError(f"tensorsolve: a {a.shape} and b {b.shape} do not make a square "
                         "system")
    x = solve(reshape(a, (size, size)), reshape(b, (size,)))
    return reshape(x, tail)


def tensorinv(a: Array, /, ind: int = 2) -> Array:
    """The inverse of ``a`` under ``tensordot(..., ind)`` (NumPy's ``tensorinv``)."""
    if not isinstance(a, Array):
        raise TypeError("tensorinv: expected an array")
    ind = operator.index(ind)
    if ind <= 0:
        raise ValueError("tensorinv: ind must be a positive integer")
    head, tail = a.shape[:ind], a.shape[ind:]
    size = math.prod(head)
    if math.prod(tail) != size:
        raise ValueError(f"tensorinv: {a.shape} split at {ind} is not square")
    return reshape(inv(reshape(a, (size, size))), tail + head)


def lstsq(a: Array, b: Array, /, rcond: Any = None) -> LstsqResult:
    """NumPy's ``lstsq`` through the SVD of ``a`` (M, N), any rank: x minimizing ||a x - b||
    (the least-norm one when rank < N), the residuals' squared sums ((K,) or (1,); empty when
    rank < N or M <= N), the rank (a 0-d array; computing it waits for the SVD) and the
    singular values. Singular values below ``rcond * max(s)`` (default ``eps * max(M, N)``)
    are treated as zero."""
    a = _stack_input(a, "lstsq")
    if a.ndim != 2 or not isinstance(b, Array) or b.ndim not in (1, 2) or \
            b.shape[0] != a.shape[0]:
        raise ValueError("lstsq needs a 2-D a (M, N) and b of shape (M,) or (M, K)")
    from ._elementwise import where
    from ._reductions import count_nonzero

    dt = D.result_type(a, b)
    a, b = astype(a, dt, copy=False), astype(b, dt, copy=False)
    m, n = a.shape
    u, s, vh = svd(a, full_matrices=False)
    keep = apply(TABLE["greater"], s, _tolerance(a, s, rcond))
    inv_s = where(keep, apply(TABLE["divide"], 1.0, s), 0.0)
    col = b if b.ndim == 2 else reshape(b, (m, 1))
    coef = matmul(apply(TABLE["conj"], u).mT, col)  # U^H b
    coef = apply(TABLE["multiply"], coef, expand_dims(inv_s, axis=-1))
    x = matmul(apply(TABLE["conj"], vh).mT, coef)
    rank = count_nonzero(keep)
    if int(rank) == n and m > n:
        r = apply(TABLE["subtract"], matmul(a, x), col)
        residuals = _sum(apply(TABLE["real"], apply(TABLE["multiply"], r,
                                                     apply(TABLE["conj"], r))), axis=0)
    else:
        from ._creation import empty

        residuals = empty((0,), dtype=D.real_dtype(dt), device=a.device)
    return LstsqResult(x if b.ndim == 2 else reshape(x, (n,)), residuals, rank, s)
