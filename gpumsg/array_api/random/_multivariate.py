"""The multivariate distributions, from the univariate kernels.

* ``multinomial``: a binomial per category, conditioned on what the earlier categories took
  (``x_j ~ Binomial(n - x_0 - ... - x_{j-1}, p_j / (1 - p_0 - ... - p_{j-1}))``);
* ``multivariate_hypergeometric``: the same chain of hypergeometric marginals (NumPy's
  ``marginals`` method; its ``count`` method draws the same distribution, so both names run
  this chain);
* ``dirichlet``: normalised gammas, or (every ``alpha`` below 0.1, where gammas underflow)
  stick-breaking by betas, as NumPy does;
* ``multivariate_normal``: ``z @ A + mean`` with ``A`` from the covariance's SVD, eigendecompo-
  sition or Cholesky factor, computed on the host (the covariance is one small matrix).

The category vectors (``pvals``, ``colors``, ``alpha``, ``mean``, ``cov``) are read on the host.
"""

from __future__ import annotations

import math
import numbers
import warnings
from typing import TYPE_CHECKING, Any

import numpy as np

from ...errors import InvalidMessage
from .. import _dtypes as D
from .._array import Array, asarray_host
from ._params import Param, out_shape, real_host, size_shape

if TYPE_CHECKING:
    from ._generator import Generator

__all__ = ["multinomial", "multivariate_hypergeometric", "dirichlet", "multivariate_normal"]


def _host(x: Any, field: str, dtype: Any = np.float64) -> np.ndarray:
    return real_host(x._to_numpy() if isinstance(x, Array) else x, field, dtype)


def _dev_param(gen: Generator, name: str, host: np.ndarray) -> Param:
    if host.ndim == 0:
        return Param(name, float(host), (), host)
    return Param(name, asarray_host(gen.device, np.ascontiguousarray(host), D.float64),
                 host.shape, host)


def multinomial(gen: Generator, n: Any, pvals: Any, size: Any) -> Array:
    """``Generator.multinomial``: counts of shape ``broadcast(size or n, pvals[..., :-1]) +
    (k,)`` (int64)."""
    from .. import stack

    pv = _host(pvals, "pvals")
    if pv.ndim == 0:
        raise InvalidMessage("pvals: must have at least 1 dimension", field="pvals")
    if not np.all(pv >= 0) or not np.all(pv <= 1):
        raise InvalidMessage("pvals: must be in [0, 1] (and not NaN)", field="pvals")
    if np.any(pv[..., :-1].sum(axis=-1) > 1.0 + 1e-12):
        raise InvalidMessage("pvals: sum(pvals[:-1]) > 1.0", field="pvals")
    k = pv.shape[-1]
    if isinstance(n, Array):
        nh = _host(n, "n")
    else:
        nh = np.asarray(n)
        if nh.dtype.kind not in "biuf":
            raise InvalidMessage(f"n: expected integers, got {nh.dtype}", field="n")
        nh = nh.astype(np.float64)
    if not np.all(nh >= 0):
        raise InvalidMessage("n: n < 0", field="n")
    nh = np.floor(nh)
    shape = out_shape(size_shape(size), [Param("n", None, nh.shape, None),
                                         Param("pvals", None, pv.shape[:-1], None)])
    rem = _dev_param(gen, "n", np.broadcast_to(nh, shape))
    left = np.ones(pv.shape[:-1])
    counts = []
    for j in range(k - 1):
        with np.errstate(all="ignore"):
            ratio = np.where(left > 0, np.minimum(pv[..., j] / left, 1.0), 0.0)
        x = gen._launch("binomial", [rem, _dev_param(gen, "p", ratio)], shape, D.int64)
        counts.append(x)
        rem = Param("n", _as_f64(rem.value if isinstance(rem.value, Array) else
                                 _full(gen, shape, rem.value)) - x, shape, None)
        left = left - pv[..., j]
    last = rem.value if isinstance(rem.value, Array) else _full(gen, shape, rem.value)
    counts.append(_as_i64(last))
    return stack(counts, axis=-1)


def _full(gen: Generator, shape: tuple[int, ...], value: float) -> Array:
    from .. import full

    return full(shape, value, dtype=D.float64, device=gen.device)


def _as_f64(x: Array) -> Array:
    from .. import astype

    return astype(x, D.float64)


def _as_i64(x: Array) -> Array:
    from .. import astype

    return astype(x, D.int64)


def multivariate_hypergeometric(gen: Generator, colors: Any, nsample: Any, size: Any,
                                method: str) -> Array:
    """``Generator.multivariate_hypergeometric``: ``nsample`` items drawn without replacement
    from an urn of ``colors[j]`` items of colour ``j``; counts of shape ``size + (k,)``."""
    from .. import stack

    if not isinstance(method, str) or method not in ("count", "marginals"):
        raise InvalidMessage(f"method: expected 'count' or 'marginals', got {method!r}",
                             field="method")
    col = _host(colors, "colors", None)
    if col.ndim != 1 or (col.size and col.dtype.kind not in "iu"):
        raise InvalidMessage("colors: must be a one-dimensional sequence of integers",
                             field="colors")
    col = col.astype(np.int64)
    if np.any(col < 0):
        raise InvalidMessage("colors: must be nonnegative", field="colors")
    if isinstance(nsample, bool) or not isinstance(nsample, numbers.Integral):
        raise InvalidMessage(f"nsample: expected an int, got {nsample!r}", field="nsample")
    total = int(col.sum())
    if nsample < 0:
        raise InvalidMessage("nsample: must be nonnegative", field="nsample")
    if nsample > total:
        raise InvalidMessage("nsample: nsample > sum(colors)", field="nsample")
    if method == "marginals" and total >= 1_000_000_000:
        raise InvalidMessage("colors: sum(colors) must be less than 1000000000 when method "
                             "is 'marginals'", field="colors")
    shape = size_shape(size) or ()
    rest = float(total)
    rem = Param("nsample", float(nsample), (), None)
    counts = []
    for j in range(col.size - 1):
        rest -= float(col[j])
        x = gen._launch("hypergeometric", [Param("ngood", float(col[j]), (), None),
                                           Param("nbad", rest, (), None), rem], shape,
                        D.int64)
        counts.append(x)
        base = rem.value if isinstance(rem.value, Array) else _full(gen, shape, rem.value)
        rem = Param("nsample", _as_f64(base) - x, shape, None)
    if col.size:
        last = rem.value if isinstance(rem.value, Array) else _full(gen, shape, rem.value)
        counts.append(_as_i64(last))
    if not counts:
        from .. import zeros

        return zeros(shape + (0,), dtype=D.int64, device=gen.device)
    return stack(counts, axis=-1)


def dirichlet(gen: Generator, alpha: Any, size: Any) -> Array:
    """``Generator.dirichlet``: points of the simplex, shape ``size + (k,)`` (float64)."""
    from .. import expand_dims, stack, where
    from .. import sum as sum_

    al = _host(alpha, "alpha")
    if al.ndim != 1:
        raise InvalidMessage("alpha: must be one-dimensional", field="alpha")
    if not np.all(al >= 0):
        raise InvalidMessage("alpha: alpha < 0 (or NaN)", field="alpha")
    k = al.size
    shape = size_shape(size) or ()
    if k and al.max() < 0.1:
        # stick-breaking: x_j = beta(a_j, a_{j+1} + ... ) of what is left
        parts = []
        left: Any = 1.0
        tail = np.cumsum(al[::-1])[::-1]
        for j in range(k - 1):
            if al[j] == 0 or tail[j + 1] == 0:
                frac: Any = _full(gen, shape, 0.0 if al[j] == 0 else 1.0)
            else:
                frac = gen._launch("beta", [Param("a", float(al[j]), (), None),
                                            Param("b", float(tail[j + 1]), (), None)],
                                   shape, D.float64)
            parts.append(frac * left)
            left = left - parts[-1]
        parts.append(left if isinstance(left, Array) else _full(gen, shape, left))
        return stack(parts, axis=-1)
    g = gen._launch("gamma", [_dev_param(gen, "alpha", al)], shape + (k,), D.float64)
    if k == 0:
        return g
    total = expand_dims(sum_(g, axis=-1), axis=-1)
    return where(total > 0, g / total, 0.0)


def multivariate_normal(gen: Generator, mean: Any, cov: Any, size: Any, check_valid: str,
                        tol: float, method: str) -> Array:
    """``Generator.multivariate_normal``: float64 points of shape ``size + (k,)``."""
    from .. import asarray, matmul

    if not isinstance(check_valid, str) or check_valid not in ("warn", "raise", "ignore"):
        raise InvalidMessage("check_valid: must equal 'warn', 'raise', or 'ignore'",
                             field="check_valid")
    if not isinstance(method, str) or method not in ("svd", "eigh", "cholesky"):
        raise InvalidMessage("method: must be 'svd', 'eigh' or 'cholesky'", field="method")
    mu = _host(mean, "mean")
    cv = _host(cov, "cov")
    if mu.ndim != 1:
        raise InvalidMessage("mean: must be 1 dimensional", field="mean")
    k = mu.size
    if cv.shape != (k, k):
        raise InvalidMessage("cov: must be 2 dimensional and square, with mean's length",
                             field="cov")
    if method == "cholesky":
        try:
            a = np.linalg.cholesky(cv).T
        except np.linalg.LinAlgError:
            raise InvalidMessage("cov: not positive definite (method='cholesky')",
                                 field="cov") from None
    else:
        if method == "eigh":
            s, u = np.linalg.eigh(cv)
            ok = np.all(s >= -tol)
            a = (u * np.sqrt(np.abs(s))).T
        else:
            u, s, vh = np.linalg.svd(cv)
            ok = np.allclose((vh.T * s) @ vh, cv, rtol=tol, atol=tol)
            a = np.sqrt(s)[:, None] * vh
        if check_valid != "ignore" and not ok:
            if check_valid == "raise":
                raise InvalidMessage("cov: covariance is not symmetric positive-semidefinite",
                                     field="cov")
            warnings.warn("covariance is not symmetric positive-semidefinite.",
                          RuntimeWarning, stacklevel=3)
    shape = size_shape(size) or ()
    n = math.prod(shape)
    z = gen.standard_normal(size=(n, k))
    x = matmul(z, asarray(np.ascontiguousarray(a), device=gen.device)) + \
        asarray(mu, device=gen.device)
    from .. import reshape

    return reshape(x, shape + (k,))
