"""Permutations and ``choice``.

A uniform random permutation of ``n`` items puts them in random buckets and shuffles each
bucket (:mod:`._permute`: exactly uniform). ``permuted`` along an axis sorts independent
random 64-bit keys per row (ties, of probability about ``k**2 / 2**65`` for rows of ``k``, keep
the items' order). ``choice`` without replacement takes the first ``k`` of a permutation; with
weights ``p`` it takes the ``k`` smallest keys ``E / p`` for exponential ``E`` (distributed as
``k`` successive draws, each proportional to the weights left, as NumPy draws them); with
replacement and weights it searches uniforms in the normalised cumulative weights, as NumPy
does (:mod:`._weighted`: one kernel for up to 4096 weights).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from ...errors import InvalidMessage
from .. import _dtypes as D
from .._array import Array, new_array
from ._kernels import launch_integers
from ._params import size_shape
from ._permute import permutation_order
from ._weighted import MAX_WEIGHTS, weighted_pick

if TYPE_CHECKING:
    from ._generator import Generator

__all__ = ["permutation", "shuffle", "permuted", "choice", "random_keys"]


def random_keys(gen: Generator, shape: tuple[int, ...]) -> Array:
    """Independent uniform 64-bit keys (uint64) of ``shape``."""
    out = new_array(gen.device, shape, D.uint64)
    launch_integers(out, 0, (1 << 64) - 1, gen.bit_generator.key,
                    gen.bit_generator.next_launch())
    return out


def _order(gen: Generator, n: int) -> Array:
    """A uniform random permutation of ``0 .. n - 1`` (int64): random buckets, each shuffled
    by Fisher-Yates (:mod:`._permute`)."""
    bits = gen.bit_generator
    return permutation_order(gen.device, n, bits.key, (bits.next_launch(), bits.next_launch()))


def _as_array(gen: Generator, x: Any, field: str) -> Array:
    from .. import asarray

    if isinstance(x, Array):
        if x.device is not gen.device:
            raise InvalidMessage(f"{field}: the array is on another device than the generator",
                                 field=field)
        return x
    try:
        return asarray(np.asarray(x), device=gen.device)
    except (TypeError, ValueError) as exc:
        raise InvalidMessage(f"{field}: {exc}", field=field) from None


def _axis(axis: Any, ndim: int, field: str = "axis") -> int:
    if isinstance(axis, bool) or not isinstance(axis, numbers.Integral) or \
            not -ndim <= axis < ndim:
        raise InvalidMessage(f"{field}: {axis!r} is out of bounds for an array of dimension "
                             f"{ndim}", field=field)
    return int(axis) % ndim


def permutation(gen: Generator, x: Any, axis: int = 0) -> Array:
    """``Generator.permutation``: an int ``n`` gives a permutation of ``arange(n)`` (int64);
    an array gives a shuffled copy along ``axis``."""
    if isinstance(x, numbers.Integral) and not isinstance(x, bool):
        if x < 0:
            raise InvalidMessage(f"x: expected a non-negative int, got {x}", field="x")
        return _order(gen, int(x))
    arr = _as_array(gen, x, "x")
    if arr.ndim == 0:
        raise InvalidMessage("x: a 0-d array cannot be permuted; pass an int or an array",
                             field="x")
    ax = _axis(axis, arr.ndim)
    from .. import take

    return take(arr, _order(gen, arr.shape[ax]), axis=ax)


def shuffle(gen: Generator, x: Array, axis: int = 0) -> None:
    """``Generator.shuffle``: shuffle the gpumsg array ``x`` in place along ``axis``."""
    if not isinstance(x, Array):
        raise InvalidMessage(f"x: shuffle works in place on a gpumsg Array, got "
                             f"{type(x).__name__}", field="x")
    if x.ndim == 0:
        raise InvalidMessage("x: a 0-d array cannot be shuffled", field="x")
    ax = _axis(axis, x.ndim)
    from .. import take

    shuffled = take(x, _order(gen, x.shape[ax]), axis=ax)
    x[...] = shuffled


def permuted(gen: Generator, x: Any, axis: int | None, out: Any) -> Array:
    """``Generator.permuted``: each slice along ``axis`` shuffled independently (``axis=None``:
    the flattened array), into ``out`` when given (``out`` may be ``x``)."""
    from .. import argsort, reshape, take_along_axis

    arr = _as_array(gen, x, "x")
    if out is not None:
        if not isinstance(out, Array) or out.shape != arr.shape:
            raise InvalidMessage(f"out: expected a gpumsg Array of shape {arr.shape}",
                                 field="out")
    if axis is None:
        flat = reshape(arr, (-1,))
        res = reshape(take_along_axis(flat, _order(gen, flat.shape[0]), axis=0), arr.shape)
    else:
        ax = _axis(axis, arr.ndim)
        res = take_along_axis(arr, argsort(random_keys(gen, arr.shape), axis=ax), axis=ax)
    if out is None:
        return res
    out[...] = res
    return out


def _probabilities(gen: Generator, p: Any, pop: int) -> tuple[Array, Callable[[], None]]:
    """``p`` as a float64 array on the device, and its check as NumPy checks it (1-D, ``pop``
    entries, >= 0, summing to 1 within sqrt(eps)): a call that raises InvalidMessage naming
    ``p`` when it fails. The shape is checked here; the values of a host ``p`` are too, and
    the check returned does nothing. For a device ``p`` the minimum and the sum are computed
    and their copies to the host posted here, and the check reads them: the caller posts its
    own work first, so the read's wait overlaps it (a read before it would cost a round trip
    of its own)."""
    from .. import asarray, astype
    from .. import min as min_
    from .. import sum as sum_

    if isinstance(p, Array):
        if p.ndim != 1:
            raise InvalidMessage("p: must be 1-dimensional", field="p")
        if p.shape[0] != pop:
            raise InvalidMessage("p: a and p must have same size", field="p")
        pa = astype(p, D.float64, copy=False)
        if not pop:
            _judge(0.0, 0.0)  # an empty p sums to 0, as NumPy finds
        lo, total = min_(pa), sum_(pa)
        reads = (lo._download(), total._download())

        def check() -> None:
            _judge(float(lo._received(reads[0])), float(total._received(reads[1])))

        return pa, check
    host = np.asarray(p, dtype=np.float64)
    if host.ndim != 1:
        raise InvalidMessage("p: must be 1-dimensional", field="p")
    n = host.shape[0]
    if n != pop:
        raise InvalidMessage("p: a and p must have same size", field="p")
    _judge(float(host.min()) if n else 0.0, float(host.sum()))
    return asarray(host, device=gen.device), _nothing


def _judge(lo: float, total: float) -> None:
    if not lo >= 0:
        raise InvalidMessage("p: probabilities are not non-negative", field="p")
    if not abs(total - 1.0) <= math.sqrt(np.finfo(np.float64).eps):
        raise InvalidMessage("p: probabilities do not sum to 1", field="p")


def _nothing() -> None:
    pass


def choice(gen: Generator, a: Any, size: Any, replace: bool, p: Any, axis: int,
           shuffle_: bool) -> Array:
    """``Generator.choice`` (see the module docstring)."""
    from .. import reshape, take

    if isinstance(a, numbers.Integral) and not isinstance(a, bool):
        pool: Array | None = None
        pop = int(a)
        if pop < 0:
            raise InvalidMessage("a: must be a positive integer unless no samples are taken",
                                 field="a")
        ax = 0
    else:
        pool = _as_array(gen, a, "a")
        if pool.ndim == 0:
            raise InvalidMessage("a: must be an int or an array of at least one dimension",
                                 field="a")
        ax = _axis(axis, pool.ndim)
        pop = pool.shape[ax]
    if not isinstance(replace, (bool, np.bool_)):
        raise InvalidMessage(f"replace: expected True or False, got {replace!r}",
                             field="replace")
    shape = size_shape(size)
    out_shape = () if shape is None else shape
    k = math.prod(out_shape)
    if pop == 0 and k > 0:
        raise InvalidMessage("a: cannot take a sample from an empty population", field="a")
    probs, check = _probabilities(gen, p, pop) if p is not None else (None, _nothing)
    bits = gen.bit_generator
    start = bits.counter
    try:
        idx = _pick(gen, pop, out_shape, k, replace, probs, check)
    except InvalidMessage:
        bits.rewind(start, bits.counter)  # nothing drawn, as NumPy's generator after a refusal
        raise
    del shuffle_  # the selection is in random order either way
    if pool is None:
        return idx
    picked = take(pool, reshape(idx, (-1,)), axis=ax)
    return reshape(picked, pool.shape[:ax] + out_shape + pool.shape[ax + 1:])


#: a sample without replacement of at most 1/SPARSE_SHARE of a population larger than
#: SPARSE_POP is drawn by :func:`_distinct_draws`, not by permuting the whole population (NumPy
#: switches at the same point, to a set of draws): choice(2**40, 5, replace=False) needs 5
#: values, not 8 TiB
SPARSE_POP = 10_000
SPARSE_SHARE = 50


def _distinct_draws(gen: Generator, pop: int, k: int) -> Array:
    """``k`` distinct values of ``0 .. pop - 1`` (int64) in random order, for ``k`` <= pop / 50:
    the first ``k`` distinct values of a stream of uniform draws. Each new distinct value of the
    stream is uniform over those not drawn yet, so they are a uniformly random ordered sample.
    A stream of 1.1 k + 16 draws holds k distinct values but with a small chance (about 0.012 k
    repeats are expected); a stream that falls short is drawn again, twice as long."""
    from .. import argsort, concat, ones, sort, take

    m = k + k // 10 + 16
    while True:
        v = gen.integers(0, pop, size=m)
        order = argsort(v, stable=True)  # equal values keep their stream order
        sv = take(v, order)
        starts = concat([ones((1,), dtype=D.bool, device=gen.device), sv[1:] != sv[:-1]])
        first = sort(order[starts])  # where each distinct value first occurs (one read)
        if first.shape[0] >= k:
            return take(v, first[:k])
        m *= 2


def _pick(gen: Generator, pop: int, out_shape: tuple[int, ...], k: int, replace: bool,
          probs: Array | None, check: Callable[[], None]) -> Array:
    """The indices (int64, ``out_shape``) of ``choice``'s sample; ``check`` (of ``probs``)
    is called once the draws are posted, before any read of the sample."""
    from .. import argsort, count_nonzero, cumulative_sum, minimum, reshape, searchsorted

    if replace:
        if probs is None:
            idx = gen.integers(0, max(pop, 1), size=out_shape)
        elif pop <= MAX_WEIGHTS:  # the running sum and the searches in one kernel
            u = gen.random(size=out_shape)
            idx = reshape(weighted_pick(probs, reshape(u, (-1,))), out_shape)
        else:
            cdf = cumulative_sum(probs)
            cdf = cdf / cdf[-1]
            u = gen.random(size=out_shape)
            idx = minimum(searchsorted(cdf, reshape(u, (-1,)), side="right"), pop - 1)
            idx = reshape(idx, out_shape)
        check()
        return idx
    if k > pop:
        raise InvalidMessage("size: cannot take a larger sample than population when "
                             "replace is False", field="size")
    if probs is None and pop > SPARSE_POP and k <= pop // SPARSE_SHARE:
        return reshape(_distinct_draws(gen, pop, k), out_shape)
    if probs is None:
        order = _order(gen, pop)
    else:
        check()
        if int(count_nonzero(probs)) < k:
            raise InvalidMessage("p: fewer non-zero entries in p than size", field="p")
        keys = gen.standard_exponential(size=pop) / probs
        order = argsort(keys)
    return reshape(order[:k], out_shape)

