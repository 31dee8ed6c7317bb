"""``sort`` and ``argsort`` with CUB (CCCL), ``searchsorted`` and ``unique_*``.

A row of at most :data:`MAX_ROW` elements is sorted by one block with ``cub::BlockRadixSort``
(stable; keys and their positions, or their bits, as pairs); longer rows go through the
device-wide radix sort of :mod:`._radix`. Both sort the same unsigned keys: the order is NumPy's
(every NaN sorts as one NaN after +inf, -0 equals +0, ties keep their order; descending is the
reverse order with ties still in theirs). ``sort`` writes the original elements, so -0 and NaN
payloads come out as they went in. The simulator runs NumPy twins of the same keys."""

from __future__ import annotations

from collections import namedtuple
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import as_strided

from ..libs.nvrtc._sim import SIM_KERNELS, Recipe, sim_kernel
from . import _dtypes as D
from ._array import Array, _copy, new_array
from ._codegen import kernel_for
from ._compact import compact
from ._cub import cub_kernel, tag, unsigned_type
from ._expr import PRELUDE
from ._gather import whole
from ._manipulation import moveaxis
from ._radix import _key_c, _np_key, radix_sorted

__all__ = ["sort", "argsort", "MAX_ROW"]

THREADS = 256
MAX_ROW = THREADS * 16
_UDT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def _items(n: int) -> int:
    items = 1
    while THREADS * items < n:
        items *= 2
    return items


def render(dt: np.dtype, items: int, indices: bool) -> tuple[str, str]:
    """(kernel name, CUDA source) sorting rows of ``dt`` with one block per row: the unsigned
    keys of :mod:`._radix` paired with their positions (``indices``) or their bits."""
    k = unsigned_type(dt.itemsize)
    val_t = "int" if indices else k
    out_t = "long long" if indices else k
    name = (f"gm_{'argsort' if indices else 'sort'}_{tag(dt)}_{items}_"
            "u")
    body = f"""
#include <cub/block/block_radix_sort.cuh>
__device__ __forceinline__ {k} gm_rkey({k} u) {{ {_key_c(dt)} return u; }}
extern "C" __global__ void {name}(long long nrows, int n, const {k}* __restrict__ in,
                                  {out_t}* __restrict__ out, unsigned long long flip) {{
  typedef cub::BlockRadixSort<{k}, {THREADS}, {items}, {val_t}> Sorter;
  __shared__ typename Sorter::TempStorage tmp;
  for (long long row = blockIdx.x; row < nrows; row += gridDim.x) {{
    const {k}* src = in + row * n;
    {k} keys[{items}];
    {val_t} vals[{items}];
    for (int q = 0; q < {items}; ++q) {{
      const int j = threadIdx.x * {items} + q;
      // past the row: all ones, after every key (and after equal keys: the sort is stable)
      if (j < n) {{
        const {k} s = src[j];
        keys[q] = ({k})(gm_rkey(s) ^ ({k})flip);  // flip: every bit, for a descending sort
        vals[q] = {'j' if indices else 's'};
      }}
      else {{ keys[q] = ({k})~({k})0; vals[q] = 0; }}
    }}
    Sorter(tmp).Sort(keys, vals);
    for (int q = 0; q < {items}; ++q) {{
      const int j = threadIdx.x * {items} + q;
      if (j < n) out[row * n + j] = ({out_t})vals[q];
    }}
    __syncthreads();
  }}
}}
"""
    source = PRELUDE + body
    if name not in SIM_KERNELS:
        sim_kernel(name)(Recipe(_twin, dt, indices))
    return name, source


def _stable_order(keys: np.ndarray, descending: bool) -> np.ndarray:
    """Stable (ascending or descending) argsort of each row of ``keys``."""
    if not descending:
        return np.argsort(keys, axis=-1, kind="stable")
    n = keys.shape[-1]
    return n - 1 - np.argsort(keys[:, ::-1], axis=-1, kind="stable")[:, ::-1]


def _twin(dt: np.dtype, indices: bool) -> Any:
    ut = np.dtype(_UDT[dt.itemsize])

    def run(info: Any, nrows: Any, n: Any, src: np.ndarray, out: np.ndarray, flip: Any) -> None:
        nrows, n = int(nrows), int(n)
        descending = int(flip) != 0
        rows = src[:nrows * n].view(ut).reshape(nrows, n)
        order = np.argsort(_np_key(rows, dt, descending), axis=-1, kind="stable")
        dst = out[:nrows * n].reshape(nrows, n)
        if indices:
            dst[...] = order
        else:
            dst.view(ut)[...] = np.take_along_axis(rows, order, axis=-1)

    return run


def _kernel(dev: Any, dt: np.dtype, items: int, indices: bool) -> Any:
    name, source = render(dt, items, indices)
    return cub_kernel(dev, name, source, ("i64", "i32", "ptr", "ptr", "u64"))


def _sort(x: Array, axis: int, descending: bool, indices: bool, name: str) -> Array:
    if not isinstance(x, Array):
        raise TypeError(f"{name}: expected an array, got {type(x).__name__}")
    if x.ndim == 0:
        raise ValueError(f"{name} needs at least one dimension")
    if D.kind_of(x.dtype) == "c":
        raise TypeError(f"{name}: complex arrays have no order")
    ax = int(axis)
    if not -x.ndim <= ax < x.ndim:
        raise ValueError(f"{name}: axis {ax} is out of range")
    ax %= x.ndim
    moved = moveaxis(x, ax, -1)
    n = moved.shape[-1]
    out_dt = D.int64 if indices else x.dtype
    rows = whole(moved)
    nrows = rows.size // n if n else 0
    if nrows and n > MAX_ROW:
        return moveaxis(radix_sorted(rows, nrows, n, descending, indices, moved.shape, out_dt),
                        -1, ax)
    out = new_array(x.device, moved.shape, out_dt)
    if nrows and n:
        kernel = _kernel(x.device, x.dtype, _items(n), indices)
        flip = (1 << (x.dtype.itemsize * 8)) - 1 if descending else 0
        done = x.device.launch(kernel, min(nrows, 1 << 16), THREADS,
                               (nrows, n, rows.buffer, out.buffer, flip), reads=[rows.buffer],
                               writes=[out.buffer])
        out._wrote(done)
    return moveaxis(out, -1, ax)


def sort(x: Array, /, *, axis: int = -1, descending: bool = False, stable: bool = True) -> Array:
    """``x`` sorted along ``axis`` (stable; NaN last ascending, first descending; rows of any
    length)."""
    return _sort(x, axis, bool(descending), False, "sort")


def argsort(x: Array, /, *, axis: int = -1, descending: bool = False,
            stable: bool = True) -> Array:
    """The positions that sort ``x`` along ``axis`` (int64; stable; rows of any length)."""
    return _sort(x, axis, bool(descending), True, "argsort")



def _render_search(dt1: np.dtype, dt2: np.dtype, compute: np.dtype, right: bool) -> tuple[
        str, str]:
    """(name, source) of a binary search per element of ``x2`` in the sorted 1-D ``x1`` (NaN
    ordered last, as the sort orders it)."""
    ct = D.CTYPE[compute][1]
    s1, s2 = D.CTYPE[dt1][0], D.CTYPE[dt2][0]
    l1, l2 = D.CTYPE[dt1][3], D.CTYPE[dt2][3]
    name = (f"gm_searchsorted_{tag(dt1)}_{tag(dt2)}_"
            f"{tag(compute)}_{'r' if right else 'l'}")
    # lt(a, b): a sorts before b, NaN after everything
    test = "!gm_lt(key, m)" if right else "gm_lt(m, key)"
    body = f"""
__device__ __forceinline__ bool gm_lt({ct} a, {ct} b) {{
  return a < b || (b != b && a == a); }}
extern "C" __global__ void {name}(long long n2, long long n1, const {s1}* __restrict__ a,
                                  long long off_a, long long stride_a,
                                  const {s2}* __restrict__ v, long long* __restrict__ out) {{
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n2;
       i += (long long)blockDim.x * gridDim.x) {{
    const {ct} key = ({ct})({l2.format("v[i]")});
    long long lo = 0, hi = n1;
    while (lo < hi) {{
      const long long mid = lo + (hi - lo) / 2;
      const {ct} m = ({ct})({l1.format("a[off_a + mid * stride_a]")});
      if ({test}) lo = mid + 1; else hi = mid;
    }}
    out[i] = lo;
  }}
}}
"""
    if name not in SIM_KERNELS:
        sim_kernel(name)(Recipe(_search_twin, dt1, dt2, compute, right))
    return name, PRELUDE + body


def _search_twin(dt1: np.dtype, dt2: np.dtype, compute: np.dtype, right: bool) -> Any:
    comp = D.CTYPE[compute][2]

    def run(info: Any, n2: Any, n1: Any, a: np.ndarray, off: Any, stride: Any, v: np.ndarray,
            out: np.ndarray) -> None:
        n2, n1, off, stride = int(n2), int(n1), int(off), int(stride)
        if dt1 == D.bool:
            a = a.view(np.bool_)
        if dt2 == D.bool:
            v = v.view(np.bool_)
        sorted_ = as_strided(a[off:], (n1,), (stride * a.dtype.itemsize,)).astype(comp) \
            if n1 else np.empty(0, comp)
        keys = v[:n2].astype(comp)
        out[:n2] = np.searchsorted(sorted_, keys, side="right" if right else "left")

    return run


def searchsorted(x1: Array, x2: Array, /, *, side: str = "left", sorter: Any = None) -> Array:
    """Insertion positions of ``x2`` in the sorted 1-D ``x1`` (int64, ``x2``'s shape): one
    binary search per element of ``x2``."""
    from ._array import check_device

    if not isinstance(x1, Array) or not isinstance(x2, Array):
        raise TypeError("searchsorted: x1 and x2 must be arrays")
    if x1.ndim != 1:
        raise ValueError("searchsorted: x1 must be 1-D")
    if side not in ("left", "right"):
        raise ValueError(f"searchsorted: side must be 'left' or 'right', got {side!r}")
    dev = check_device(x1, x2)
    compute = D.result_type(x1, x2)
    if D.kind_of(compute) == "c":
        raise TypeError("searchsorted: complex arrays have no order")
    if sorter is not None:
        from ._indexing import take

        x1 = take(x1, sorter)
    out = new_array(dev, x2.shape, D.int64)
    if x2.size == 0:
        return out
    v = x2 if x2._is_whole() else _copy(x2)
    name, source = _render_search(x1.dtype, x2.dtype, compute, side == "right")
    kernel = kernel_for(dev, name, source, ("i64", "i64", "ptr", "i64", "i64", "ptr", "ptr"))
    n2 = x2.size
    grid = max(1, min((n2 + 255) // 256, 1 << 16))
    done = dev.launch(kernel, grid, 256, (n2, x1.shape[0], x1.buffer, x1._offset,
                                          x1.strides[0], v.buffer, out.buffer),
                      reads=[x1.buffer, v.buffer], writes=[out.buffer])
    out._wrote(done)
    return out


__all__ += ["searchsorted"]


# -- unique_*: a stable sort, the first element of each run of equal values, compactions --------
UniqueAllResult = namedtuple("UniqueAllResult", ["values", "indices", "inverse_indices",
                                                 "counts"])
UniqueCountsResult = namedtuple("UniqueCountsResult", ["values", "counts"])
UniqueInverseResult = namedtuple("UniqueInverseResult", ["values", "inverse_indices"])


def _order(flat: Array) -> Array:
    """The stable sorting order of the 1-D ``flat``; complex values in NumPy's order: by real
    part, then imaginary part, those with a NaN imaginary part after every other, then those
    with a NaN real part (three stable sorts, least significant first)."""
    from ._elementwise import TABLE, apply, astype
    from ._indexing import take

    if D.kind_of(flat.dtype) != "c":
        return argsort(flat)
    re, im = apply(TABLE["real"], flat), apply(TABLE["imag"], flat)
    order = argsort(im)
    order = take(order, argsort(take(re, order)))
    nan_re = astype(apply(TABLE["isnan"], re), D.int8)
    nan_im = astype(apply(TABLE["isnan"], im), D.int8)
    cls = apply(TABLE["add"], apply(TABLE["multiply"], nan_re, 2), nan_im)
    return take(order, argsort(take(cls, order)))


def _runs(x: Array, name: str) -> tuple[Array, Array, Array]:
    """(flat order: the stable argsort, sorted values, run starts: True where a sorted value
    differs from the one before; NaNs differ from everything, so each is its own run)."""
    from ._elementwise import TABLE, apply
    from ._indexing import take
    from ._manipulation import reshape

    if not isinstance(x, Array):
        raise TypeError(f"{name}: expected an array, got {type(x).__name__}")
    flat = reshape(x, (-1,))
    order = _order(flat)
    values = take(flat, order)
    starts = new_array(x.device, (flat.size,), D.bool)
    if flat.size:
        starts[0] = True
        starts[1:] = apply(TABLE["not_equal"], values[1:], values[:-1])
    return order, values, starts


def unique_values(x: Array, /) -> Array:
    """The distinct values of ``x`` (sorted; each NaN distinct)."""
    _, values, starts = _runs(x, "unique_values")
    return compact(starts, values)


def _counts(starts: Array, n: int) -> Array:
    from ._array import asarray_host
    from ._manipulation import concat, diff

    first = compact(starts)
    return diff(concat([first, asarray_host(starts.device, np.array([n]), D.int64)]))


def unique_counts(x: Array, /) -> UniqueCountsResult:
    _, values, starts = _runs(x, "unique_counts")
    return UniqueCountsResult(compact(starts, values), _counts(starts, x.size))


def _inverse(x: Array, order: Array, starts: Array) -> Array:
    """Each element's index among the distinct values, in ``x``'s shape: the running count of
    run starts, scattered back to the elements' places."""
    from ._indexing import setitem
    from ._manipulation import reshape
    from ._scan import cumulative_sum

    group = cumulative_sum(starts, dtype=D.int64)  # 1-based group of each sorted position
    inv = new_array(x.device, (x.size,), D.int64)
    setitem(inv, (order,), group - 1)
    return reshape(inv, x.shape)


def unique_inverse(x: Array, /) -> UniqueInverseResult:
    order, values, starts = _runs(x, "unique_inverse")
    return UniqueInverseResult(compact(starts, values), _inverse(x, order, starts))


def unique_all(x: Array, /) -> UniqueAllResult:
    order, values, starts = _runs(x, "unique_all")
    return UniqueAllResult(compact(starts, values), compact(starts, order),
                           _inverse(x, order, starts), _counts(starts, x.size))


__all__ += ["unique_all", "unique_counts", "unique_inverse", "unique_values"]
