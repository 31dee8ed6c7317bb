"""``sort`` and ``argsort`` with CUB (CCCL): each row along the axis is sorted by one block with
``cub::BlockRadixSort`` (stable; keys and their positions as pairs), compiled by NVRTC against
the CCCL headers (``nvidia-cuda-cccl``, found by ``cuda.pathfinder``).

Keys are canonical before sorting, so that the order is NumPy's: every NaN sorts as one NaN after
+inf, and -0 equals +0 (ties keep their order: the sort is stable). ``sort`` writes the original
element at each sorted position, so -0 and NaN payloads come out as they went in. A row holds at
most :data:`MAX_ROW` elements (256 threads x 16 keys); longer rows need CUB's device-wide sort,
which is not wired yet, and raise NotImplementedError on every backend. The simulator runs the
NumPy twin (a stable argsort of the same canonical keys)."""

from __future__ import annotations

import threading
import weakref
from collections import namedtuple
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import as_strided

from ..libs.nvrtc._sim import SIM_KERNELS, Recipe, sim_kernel
from . import _dtypes as D
from ._array import Array, _copy, new_array
from ._codegen import kernel_for
from ._expr import PRELUDE
from ._manipulation import moveaxis

__all__ = ["sort", "argsort", "MAX_ROW"]

THREADS = 256
MAX_ROW = THREADS * 16
_lock = threading.Lock()
#: device -> {name: future of the simulator's twin module}, where NVRTC cannot see CCCL
_twins: weakref.WeakKeyDictionary[Any, dict[str, Any]] = weakref.WeakKeyDictionary()

#: key type and the padding that sorts after every real key, ascending / descending
_FLOAT_KEY = ("float", "__int_as_float(0x7fc00000)", "__int_as_float(0xff800000)")
_DOUBLE_KEY = ("double", "__longlong_as_double(0x7ff8000000000000LL)",
               "__longlong_as_double((long long)0xfff0000000000000ULL)")


def _key(dt: np.dtype) -> tuple[str, str, str]:
    if dt in (D.float16, D.bfloat16, D.float32):
        return _FLOAT_KEY
    if dt == D.float64:
        return _DOUBLE_KEY
    if dt == D.bool:
        return ("unsigned char", "255", "0")
    info = np.iinfo(dt)
    ctype = D.CTYPE[dt][0]
    suffix = "ULL" if dt.kind == "u" else "LL"
    lo = f"(({ctype})({info.min}{suffix}))" if info.min != -(1 << 63) else \
        "((long long)(-9223372036854775807LL - 1))"
    return (ctype, f"(({ctype})({info.max}{suffix}))", lo)


def _items(n: int) -> int:
    items = 1
    while THREADS * items < n:
        items *= 2
    return items


def _include_dir() -> str | None:
    try:
        import cuda.pathfinder as pf

        return pf.find_nvidia_header_directory("cccl")
    except Exception:  # noqa: BLE001 - no pathfinder, or no CCCL: the caller decides
        return None


def render(dt: np.dtype, items: int, descending: bool, indices: bool) -> tuple[str, str]:
    """(kernel name, CUDA source) sorting rows of ``dt``."""
    key_t, pad_asc, pad_desc = _key(dt)
    storage = D.CTYPE[dt][0]
    out_t = "long long" if indices else storage
    load = D.CTYPE[dt][3] if dt in (D.float16, D.bfloat16) else "{}"
    canon = ""
    if key_t in ("float", "double"):
        nan = _FLOAT_KEY[1] if key_t == "float" else _DOUBLE_KEY[1]
        canon = f"if (v != v) v = {nan}; if (v == ({key_t})0) v = ({key_t})0;"
    name = (f"gm_{'argsort' if indices else 'sort'}_{D.storage_name(dt)}_{items}_"
            f"{'d' if descending else 'a'}")
    body = f"""
#include <cub/block/block_radix_sort.cuh>
extern "C" __global__ void {name}(long long nrows, int n, const {storage}* __restrict__ in,
                                  {out_t}* __restrict__ out) {{
  typedef cub::BlockRadixSort<{key_t}, {THREADS}, {items}, int> Sorter;
  __shared__ typename Sorter::TempStorage tmp;
  for (long long row = blockIdx.x; row < nrows; row += gridDim.x) {{
    const {storage}* src = in + row * n;
    {key_t} keys[{items}];
    int pos[{items}];
    for (int k = 0; k < {items}; ++k) {{
      const int j = threadIdx.x * {items} + k;
      pos[k] = j;
      if (j < n) {{ {key_t} v = ({key_t})({load.format("src[j]")}); {canon} keys[k] = v; }}
      else keys[k] = {pad_desc if descending else pad_asc};
    }}
    Sorter(tmp).{'SortDescending' if descending else 'Sort'}(keys, pos);
    for (int k = 0; k < {items}; ++k) {{
      const int j = threadIdx.x * {items} + k;
      if (j < n) out[row * n + j] = {'(long long)pos[k]' if indices else 'src[pos[k]]'};
    }}
    __syncthreads();
  }}
}}
"""
    source = PRELUDE + body
    if name not in SIM_KERNELS:
        sim_kernel(name)(Recipe(_twin, dt, descending, indices))
    return name, source


def _stable_order(keys: np.ndarray, descending: bool) -> np.ndarray:
    """Stable (ascending or descending) argsort of each row of ``keys``."""
    if not descending:
        return np.argsort(keys, axis=-1, kind="stable")
    n = keys.shape[-1]
    return n - 1 - np.argsort(keys[:, ::-1], axis=-1, kind="stable")[:, ::-1]


def _twin(dt: np.dtype, descending: bool, indices: bool) -> Any:
    def run(info: Any, nrows: Any, n: Any, src: np.ndarray, out: np.ndarray) -> None:
        nrows, n = int(nrows), int(n)
        rows = src[:nrows * n]
        if dt == D.bool:
            rows = rows.view(np.uint8)
        rows = rows.reshape(nrows, n)
        keys = rows.astype(np.float64) if dt in (D.float16, D.bfloat16) else rows
        if keys.dtype.kind == "f":
            keys = np.where(np.isnan(keys), np.nan, np.where(keys == 0, 0, keys))
        order = _stable_order(keys, descending)
        dst = out[:nrows * n].reshape(nrows, n)
        dst[...] = order if indices else np.take_along_axis(rows, order, axis=-1)

    return run


def _kernel(dev: Any, dt: np.dtype, items: int, descending: bool, indices: bool) -> Any:
    name, source = render(dt, items, descending, indices)
    return cub_kernel(dev, name, source, ("i64", "i32", "ptr", "ptr"))


def cub_kernel(dev: Any, name: str, source: str, signature: tuple[str, ...]) -> Any:
    """Kernel ``name`` of ``source`` (which includes CUB headers) on ``dev``, compiled once per
    device. Without the CCCL headers the simulator loads its twin alone; a GPU cannot."""
    inc = _include_dir()
    if inc is not None:
        return kernel_for(dev, name, source, signature,
                          (f"-I{inc}", "-std=c++17", "-default-device"))
    if dev.backend != "sim":
        raise NotImplementedError("this needs the CCCL headers (pip install "
                                  "nvidia-cuda-cccl-cu12, or a CUDA toolkit)")
    # no CCCL headers here: the simulator loads its twin alone
    with _lock:
        mine = _twins.get(dev)
        if mine is None:
            mine = _twins[dev] = {}
        fut = mine.get(name)
        if fut is None:
            fut = mine[name] = dev.load_module(b"sim:" + name.encode(), {name: signature})
    return fut.result()[name]


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
    if n > MAX_ROW:
        raise NotImplementedError(f"{name}: rows of more than {MAX_ROW} elements need CUB's "
                                  "device-wide sort, which is not wired yet")
    rows = _copy(moved)
    nrows = rows.size // n if n else 0
    out = new_array(x.device, moved.shape, out_dt)
    if nrows and n:
        kernel = _kernel(x.device, x.dtype, _items(n), descending, indices)
        done = x.device.launch(kernel, min(nrows, 1 << 16), THREADS,
                               (nrows, n, rows.buffer, out.buffer), reads=[rows.buffer],
                               writes=[out.buffer])
        out._wrote(done)
    return moveaxis(out, -1, ax)


def sort(x: Array, /, *, axis: int = -1, descending: bool = False, stable: bool = True) -> Array:
    """``x`` sorted along ``axis`` (stable; NaN last ascending, first descending). 16-bit
    floats are gathered through their ``argsort``: the value-writing kernel gave wrong values
    for them on an H200 (its argsort was right), so they take the path known to be right."""
    if isinstance(x, Array) and x.dtype in (D.float16, D.bfloat16):
        from ._indexing import take_along_axis

        order = _sort(x, axis, bool(descending), True, "sort")
        return take_along_axis(x, order, axis=axis)
    return _sort(x, axis, bool(descending), False, "sort")


def argsort(x: Array, /, *, axis: int = -1, descending: bool = False,
            stable: bool = True) -> Array:
    """The positions that sort ``x`` along ``axis`` (int64; stable)."""
    return _sort(x, axis, bool(descending), True, "argsort")



def _render_search(dt1: np.dtype, dt2: np.dtype, compute: np.dtype, right: bool) -> tuple[
        str, str]:
    """(name, source) of a binary search per element of ``x2`` in the sorted 1-D ``x1`` (NaN
    ordered last, as the sort orders it)."""
    ct = D.CTYPE[compute][1]
    s1, s2 = D.CTYPE[dt1][0], D.CTYPE[dt2][0]
    l1, l2 = D.CTYPE[dt1][3], D.CTYPE[dt2][3]
    name = (f"gm_searchsorted_{D.storage_name(dt1)}_{D.storage_name(dt2)}_"
            f"{D.storage_name(compute)}_{'r' if right else 'l'}")
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
    v = x2 if x2._is_contiguous() and x2._offset == 0 and x2._buf_shape() == x2.shape \
        else _copy(x2)
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


# -- nonzero: a count per tile (CUB BlockReduce), the tiles' offsets, a compaction per tile
#    (CUB BlockScan) -------------------------------------------------------------------------
TILE_ITEMS = 16
TILE = THREADS * TILE_ITEMS


def _render_nonzero(dt: np.dtype, write: bool, values: np.dtype | None = None) -> tuple[
        str, str]:
    """The count kernel, or the write kernel: the positions of ``x``'s non-zero elements, or
    (``values``) the elements of a second array at those positions."""
    storage, ct = D.CTYPE[dt][0], D.CTYPE[dt][1]
    test = f"(({ct})({D.CTYPE[dt][3].format('x[j]')}) != ({ct})0)"
    name = f"gm_nonzero_{'write' if write else 'count'}_{D.storage_name(dt)}"
    if dt == D.bool:
        name += "_b"
    vs = "long long"
    if values is not None:
        vs = D.CTYPE[values][0]
        name += f"_v{D.storage_name(values)}"
    head = f"""
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>
extern "C" __global__ void {name}(long long n, long long ntiles, const {storage}* __restrict__ x,
"""
    if not write:
        body = head + f"""                                  long long* __restrict__ counts) {{
  typedef cub::BlockReduce<int, {THREADS}> Reduce;
  __shared__ typename Reduce::TempStorage tmp;
  for (long long t = blockIdx.x; t < ntiles; t += gridDim.x) {{
    int c = 0;
    for (int k = 0; k < {TILE_ITEMS}; ++k) {{
      const long long j = t * {TILE} + threadIdx.x * {TILE_ITEMS} + k;
      if (j < n && {test}) ++c;
    }}
    const int total = Reduce(tmp).Sum(c);
    if (threadIdx.x == 0) counts[t] = total;
    __syncthreads();
  }}
}}
"""
    else:
        src = f"const {vs}* __restrict__ src, " if values is not None else ""
        body = head + f"""  {src}const long long* __restrict__ offsets,
                                  {vs}* __restrict__ out) {{
  typedef cub::BlockScan<int, {THREADS}> Scan;
  __shared__ typename Scan::TempStorage tmp;
  for (long long t = blockIdx.x; t < ntiles; t += gridDim.x) {{
    int c = 0;
    for (int k = 0; k < {TILE_ITEMS}; ++k) {{
      const long long j = t * {TILE} + threadIdx.x * {TILE_ITEMS} + k;
      if (j < n && {test}) ++c;
    }}
    int start;
    Scan(tmp).ExclusiveSum(c, start);
    long long at = offsets[t] + start;
    for (int k = 0; k < {TILE_ITEMS}; ++k) {{
      const long long j = t * {TILE} + threadIdx.x * {TILE_ITEMS} + k;
      if (j < n && {test}) out[at++] = {'src[j]' if values is not None else 'j'};
    }}
    __syncthreads();
  }}
}}
"""
    if name not in SIM_KERNELS:
        sim_kernel(name)(Recipe(_nonzero_twin, dt, write, values is not None))
    return name, PRELUDE + body


def _nonzero_twin(dt: np.dtype, write: bool, with_values: bool = False) -> Any:
    def flags(x: np.ndarray, n: int) -> np.ndarray:
        v = x[:n].view(np.bool_) if dt == D.bool else x[:n]
        return v != 0

    if not write:
        def count(info: Any, n: Any, ntiles: Any, x: np.ndarray, counts: np.ndarray) -> None:
            n, ntiles = int(n), int(ntiles)
            f = np.zeros(ntiles * TILE, bool)
            f[:n] = flags(x, n)
            counts[:ntiles] = f.reshape(ntiles, TILE).sum(axis=1)

        return count

    def compact(info: Any, n: Any, ntiles: Any, x: np.ndarray, *rest: np.ndarray) -> None:
        n = int(n)
        found = np.flatnonzero(flags(x, n))
        out = rest[-1]
        out[:len(found)] = rest[0][found] if with_values else found

    return compact


def _whole(x: Array) -> Array:
    """``x`` as an array that occupies its whole buffer in C order (a copy when it does not)."""
    return x if x._is_contiguous() and x._offset == 0 and x._buf_shape() == x.shape \
        else _copy(x)


def _compact(x: Array, values: Array | None = None) -> Array:
    """The (C-order) positions of ``x``'s non-zero elements, or the elements of ``values`` (of
    ``x``'s shape) there, as a new 1-D array. Waits for the count."""
    from ._array import asarray_host

    dev = x.device
    n = x.size
    flat = _whole(x)
    src = _whole(values) if values is not None else None
    out_dt = values.dtype if values is not None else D.int64
    ntiles = (n + TILE - 1) // TILE
    if n == 0:
        return new_array(dev, (0,), out_dt)
    name, source = _render_nonzero(x.dtype, False)
    kernel = cub_kernel(dev, name, source, ("i64", "i64", "ptr", "ptr"))
    counts = new_array(dev, (ntiles,), D.int64)
    grid = min(ntiles, 1 << 16)
    counts._wrote(dev.launch(kernel, grid, THREADS, (n, ntiles, flat.buffer, counts.buffer),
                             reads=[flat.buffer], writes=[counts.buffer]))
    per_tile = np.asarray(counts)
    offsets = np.concatenate([[0], np.cumsum(per_tile)[:-1]]).astype(np.int64)
    total = int(per_tile.sum())
    found = new_array(dev, (total,), out_dt)
    if total:
        offs = asarray_host(dev, offsets, D.int64)
        name, source = _render_nonzero(x.dtype, True, None if src is None else src.dtype)
        extra = [] if src is None else [src.buffer]
        signature = ("i64", "i64", "ptr") + ("ptr",) * (len(extra) + 2)
        kernel = cub_kernel(dev, name, source, signature)
        found._wrote(dev.launch(kernel, grid, THREADS,
                                (n, ntiles, flat.buffer, *extra, offs.buffer, found.buffer),
                                reads=[flat.buffer, *extra, offs.buffer],
                                writes=[found.buffer]))
    return found


def nonzero(x: Array, /) -> tuple[Array, ...]:
    """The indices of the non-zero elements, one int64 array per dimension (C order). The
    count is read back to size the result (a data-dependent shape: this call waits)."""
    from ._elementwise import TABLE, apply

    if not isinstance(x, Array):
        raise TypeError(f"nonzero: expected an array, got {type(x).__name__}")
    if x.ndim == 0:
        raise ValueError("nonzero: a 0-d array (use atleast_1d semantics explicitly)")
    found = _compact(x)
    if x.ndim == 1:
        return (found,)
    out = []
    stride = 1
    strides = []
    for d in reversed(x.shape):
        strides.append(stride)
        stride *= d
    for d, st in zip(x.shape, reversed(strides)):
        q = apply(TABLE["floor_divide"], found, st) if st != 1 else found
        out.append(apply(TABLE["remainder"], q, d))
    return tuple(out)


__all__ += ["nonzero"]


# -- unique_*: a stable sort, the first element of each run of equal values, compactions --------
UniqueAllResult = namedtuple("UniqueAllResult", ["values", "indices", "inverse_indices",
                                                 "counts"])
UniqueCountsResult = namedtuple("UniqueCountsResult", ["values", "counts"])
UniqueInverseResult = namedtuple("UniqueInverseResult", ["values", "inverse_indices"])


def _runs(x: Array, name: str) -> tuple[Array, Array, Array]:
    """(flat order: the stable argsort, sorted values, run starts: True where a sorted value
    differs from the one before; NaNs differ from everything, so each is its own run)."""
    from ._elementwise import TABLE, apply
    from ._manipulation import reshape

    if not isinstance(x, Array):
        raise TypeError(f"{name}: expected an array, got {type(x).__name__}")
    if D.kind_of(x.dtype) == "c":
        raise TypeError(f"{name}: complex arrays are not supported")
    flat = reshape(x, (-1,))
    order = argsort(flat)
    values = sort(flat)
    starts = new_array(x.device, (flat.size,), D.bool)
    if flat.size:
        starts[0] = True
        starts[1:] = apply(TABLE["not_equal"], values[1:], values[:-1])
    return order, values, starts


def unique_values(x: Array, /) -> Array:
    """The distinct values of ``x`` (sorted; each NaN distinct)."""
    _, values, starts = _runs(x, "unique_values")
    return _compact(starts, values)


def _counts(starts: Array, n: int) -> Array:
    from ._array import asarray_host
    from ._manipulation import concat, diff

    first = _compact(starts)
    return diff(concat([first, asarray_host(starts.device, np.array([n]), D.int64)]))


def unique_counts(x: Array, /) -> UniqueCountsResult:
    _, values, starts = _runs(x, "unique_counts")
    return UniqueCountsResult(_compact(starts, values), _counts(starts, x.size))


def _inverse(x: Array, order: Array, starts: Array) -> Array:
    """Each element's index among the distinct values, in ``x``'s shape."""
    from ._array import asarray_host
    from ._manipulation import reshape
    from ._reductions import cumulative_sum

    group = cumulative_sum(starts, dtype=D.int64)  # 1-based group of each sorted position
    inv = np.empty(x.size, np.int64)
    # the scatter inv[order] = group - 1 goes through the host, as integer-array assignment
    inv[np.asarray(order)] = np.asarray(group) - 1
    return reshape(asarray_host(x.device, inv, D.int64), x.shape)


def unique_inverse(x: Array, /) -> UniqueInverseResult:
    order, values, starts = _runs(x, "unique_inverse")
    return UniqueInverseResult(_compact(starts, values), _inverse(x, order, starts))


def unique_all(x: Array, /) -> UniqueAllResult:
    order, values, starts = _runs(x, "unique_all")
    return UniqueAllResult(_compact(starts, values), _compact(starts, order),
                           _inverse(x, order, starts), _counts(starts, x.size))


__all__ += ["unique_all", "unique_counts", "unique_inverse", "unique_values"]
