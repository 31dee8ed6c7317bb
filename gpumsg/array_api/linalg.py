"""The standard's ``linalg`` extension.

Products, norms, diagonals, ``cross`` and ``matrix_power`` are built from the namespace's own
kernels. Decompositions and solvers (``cholesky``, ``inv``, ``solve``, ``qr``, ``svd``, ``eigh``,
``det``, ...) go through the device's cuSOLVER client one matrix at a time (a stack is looped
over); those whose client answers host values or tuples (``det``, ``slogdet``, ``eigh``, ``qr``,
``svd``) wait for them.
"""

from __future__ import annotations

import math
import operator
from collections import namedtuple
from typing import Any

import numpy as np

from . import _dtypes as D
from ._array import Array, new_array
from ._codegen import ElementwiseSpec, launch_elementwise
from ._elementwise import TABLE, apply, astype
from ._linalg import matmul, matrix_transpose, tensordot, vecdot
from ._manipulation import broadcast_arrays, expand_dims, reshape, stack
from ._reductions import normalize_axes, reduce
from ._reductions import sum as _sum

__all__ = ["matmul", "tensordot", "vecdot", "matrix_transpose", "diagonal", "trace", "outer",
           "vector_norm", "matrix_norm", "cross", "matrix_power", "cholesky", "inv", "solve",
           "det", "slogdet", "eigh", "eigvalsh", "qr", "svd", "svdvals", "matrix_rank", "pinv"]


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



# -- decompositions and solvers: cuSOLVER through the device's dense linear algebra client ------
EighResult = namedtuple("EighResult", ["eigenvalues", "eigenvectors"])
QRResult = namedtuple("QRResult", ["Q", "R"])
SlogdetResult = namedtuple("SlogdetResult", ["sign", "logabsdet"])
SVDResult = namedtuple("SVDResult", ["U", "S", "Vh"])


def _solver(dev: Any) -> Any:
    """The device's cuSOLVER client (NumPy-shaped, one matrix per call), under its name."""
    for name in ("linalg", "cusolver", "solver"):
        found = getattr(dev, name, None)
        if found is not None and hasattr(found, "cholesky"):
            return found
    raise NotImplementedError("this device has no cuSOLVER client")


def _stack_input(x: Any, name: str) -> Array:
    if not isinstance(x, Array):
        raise TypeError(f"{name}: expected an array, got {type(x).__name__}")
    if x.ndim < 2:
        raise ValueError(f"{name} needs an array of at least 2 dimensions")
    if x.dtype not in (D.float32, D.float64, D.complex64, D.complex128):
        raise TypeError(f"{name} takes float32/64 or complex64/128 arrays, got {x.dtype}")
    return x


def _items(x: Array) -> list[Array]:
    """Each matrix of the stack ``x`` as a C-contiguous array of its own buffer."""
    from ._array import _copy

    batch = x.shape[:-2]
    out = []
    for idx in np.ndindex(*batch):
        out.append(_copy(x[idx]) if idx or not _whole(x) else x)
    return out


def _whole(x: Array) -> bool:
    return x._is_contiguous() and x._offset == 0 and x._buf_shape() == x.shape


def _arr(fut: Any, dev: Any) -> Array:
    """An Array of a buffer future (not waited for) or of a GpuBuffer."""
    base = getattr(fut, "buffer", fut)
    return Array(fut, base.shape, D.check_dtype(base.dtype), dev)


def _restack(parts: list[Array], batch: tuple[int, ...], shape: tuple[int, ...],
             dtype: Any, dev: Any) -> Array:
    """The per-matrix results as one array of shape ``batch + shape`` (an empty stack gives an
    empty array of that shape)."""
    if not parts:
        from ._creation import empty

        return empty(batch + shape, dtype=dtype, device=dev)
    if not batch:
        return parts[0]
    return reshape(stack(parts, axis=0), batch + parts[0].shape)


def cholesky(x: Array, /, *, upper: bool = False) -> Array:
    x = _stack_input(x, "cholesky")
    sol = _solver(x.device)
    parts = [_arr(sol.cholesky(m.buffer), x.device) for m in _items(x)]
    low = _restack(parts, x.shape[:-2], x.shape[-2:], x.dtype, x.device)
    if upper:
        from ._array import _copy

        return _copy(apply(TABLE["conj"], low).mT)
    return low


def inv(x: Array, /) -> Array:
    x = _stack_input(x, "inv")
    sol = _solver(x.device)
    return _restack([_arr(sol.inv(m.buffer), x.device) for m in _items(x)], x.shape[:-2],
                    x.shape[-2:], x.dtype, x.device)


def solve(x1: Array, x2: Array, /) -> Array:
    x1 = _stack_input(x1, "solve")
    if not isinstance(x2, Array):
        raise TypeError("solve: x2 must be an array")
    dt = D.result_type(x1, x2)
    from ._elementwise import astype
    from ._manipulation import broadcast_to

    a = astype(x1, dt, copy=False)
    b = astype(x2, dt, copy=False)
    n = a.shape[-1]
    if b.ndim == 1:
        if b.shape[0] != n:
            raise ValueError("solve: x2's length must match x1")
        batch = a.shape[:-2]
        b = broadcast_to(b, batch + (n,))
        vec = True
    else:
        if b.shape[-2] != n:
            raise ValueError("solve: x2's rows must match x1")
        from ._elementwise import broadcast_shapes

        batch = broadcast_shapes(a.shape[:-2], b.shape[:-2])
        b = broadcast_to(b, batch + b.shape[-2:])
        vec = False
    a = broadcast_to(a, batch + a.shape[-2:])
    sol = _solver(a.device)
    from ._array import _copy

    parts = []
    for idx in np.ndindex(*batch):
        ai, bi = _copy(a[idx]), _copy(b[idx])
        parts.append(_arr(sol.solve(ai.buffer, bi.buffer), a.device))
    return _restack(parts, batch, (n,) if vec else b.shape[-2:], dt, a.device)


def slogdet(x: Array, /) -> SlogdetResult:
    x = _stack_input(x, "slogdet")
    sol = _solver(x.device)
    futs = [sol.slogdet(m.buffer) for m in _items(x)]
    vals = [f.result() for f in futs]
    batch = x.shape[:-2]
    sign = np.array([v[0] for v in vals]).reshape(batch)
    logabs = np.array([v[1] for v in vals]).reshape(batch)
    from ._array import asarray_host

    return SlogdetResult(asarray_host(x.device, sign, x.dtype),
                         asarray_host(x.device, logabs, D.real_dtype(x.dtype)))


def det(x: Array, /) -> Array:
    x = _stack_input(x, "det")
    sol = _solver(x.device)
    vals = [f.result() for f in [sol.det(m.buffer) for m in _items(x)]]
    from ._array import asarray_host

    return asarray_host(x.device, np.array(vals).reshape(x.shape[:-2]), x.dtype)


def eigh(x: Array, /) -> EighResult:
    x = _stack_input(x, "eigh")
    sol = _solver(x.device)
    ws, vs = [], []
    for m in _items(x):
        w, v = sol.eigh(m.buffer).result()
        ws.append(_arr(w, x.device))
        vs.append(_arr(v, x.device))
    batch, n = x.shape[:-2], x.shape[-1]
    return EighResult(_restack(ws, batch, (n,), D.real_dtype(x.dtype), x.device),
                      _restack(vs, batch, (n, n), x.dtype, x.device))


def eigvalsh(x: Array, /) -> Array:
    return eigh(x).eigenvalues


def qr(x: Array, /, *, mode: str = "reduced") -> QRResult:
    x = _stack_input(x, "qr")
    if mode not in ("reduced", "complete"):
        raise ValueError(f"qr: mode must be 'reduced' or 'complete', got {mode!r}")
    sol = _solver(x.device)
    qs, rs = [], []
    for m in _items(x):
        q, r = sol.qr(m.buffer, mode=mode).result()
        qs.append(_arr(q, x.device))
        rs.append(_arr(r, x.device))
    batch, (m, n) = x.shape[:-2], x.shape[-2:]
    k = m if mode == "complete" else min(m, n)
    return QRResult(_restack(qs, batch, (m, k), x.dtype, x.device),
                    _restack(rs, batch, (k, n), x.dtype, x.device))


def svd(x: Array, /, *, full_matrices: bool = True) -> SVDResult:
    x = _stack_input(x, "svd")
    sol = _solver(x.device)
    us, ss, vs = [], [], []
    for m in _items(x):
        u, s, vh = sol.svd(m.buffer, full_matrices=bool(full_matrices)).result()
        us.append(_arr(u, x.device))
        ss.append(_arr(s, x.device))
        vs.append(_arr(vh, x.device))
    batch, (m, n) = x.shape[:-2], x.shape[-2:]
    k = min(m, n)
    return SVDResult(_restack(us, batch, (m, m if full_matrices else k), x.dtype, x.device),
                     _restack(ss, batch, (k,), D.real_dtype(x.dtype), x.device),
                     _restack(vs, batch, (n if full_matrices else k, n), x.dtype, x.device))


def svdvals(x: Array, /) -> Array:
    x = _stack_input(x, "svdvals")
    sol = _solver(x.device)
    parts = [_arr(sol.svd(m.buffer, compute_uv=False), x.device) for m in _items(x)]
    return _restack(parts, x.shape[:-2], (min(x.shape[-2:]),), D.real_dtype(x.dtype), x.device)


def _tolerance(x: Array, s: Array, rtol: Any) -> Array:
    """``rtol * max(s)`` per matrix (default rtol: max(M, N) * eps)."""
    from ._reductions import max as _max

    if rtol is None:
        rtol = max(x.shape[-2:]) * float(np.finfo(D.real_dtype(x.dtype)).eps)
    top = _max(s, axis=-1, keepdims=True) if s.shape[-1] else s
    if isinstance(rtol, Array):
        rtol = expand_dims(rtol, axis=-1)
    return apply(TABLE["multiply"], top, rtol)


def matrix_rank(x: Array, /, *, rtol: Any = None) -> Array:
    from ._reductions import count_nonzero

    x = _stack_input(x, "matrix_rank")
    s = svdvals(x)
    return count_nonzero(apply(TABLE["greater"], s, _tolerance(x, s, rtol)), axis=-1)


def pinv(x: Array, /, *, rtol: Any = None) -> Array:
    from ._elementwise import where

    x = _stack_input(x, "pinv")
    u, s, vh = svd(x, full_matrices=False)
    keep = apply(TABLE["greater"], s, _tolerance(x, s, rtol))
    inv_s = where(keep, apply(TABLE["divide"], 1.0, s), 0.0)
    # pinv = V diag(1/s) U^H
    v = apply(TABLE["conj"], vh).mT
    scaled = apply(TABLE["multiply"], v, expand_dims(inv_s, axis=-2))
    return matmul(scaled, apply(TABLE["conj"], u).mT)
