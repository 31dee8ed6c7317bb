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
from typing import Any

import numpy as np

from ..libs.nvrtc.sim import SIM_KERNELS, sim_kernel
from . import _dtypes as D
from ._array import Array, _copy, new_array
from ._expr import PRELUDE
from ._manipulation import moveaxis

__all__ = ["sort", "argsort", "MAX_ROW"]

THREADS = 256
MAX_ROW = THREADS * 16
_kernels: dict[tuple, Any] = {}
_lock = threading.Lock()

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
        sim_kernel(name)(_twin(dt, descending, indices))
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
    key = (dev._state.token, name)
    fut = _kernels.get(key)
    if fut is None:
        with _lock:
            fut = _kernels.get(key)
            if fut is None:
                inc = _include_dir()
                signature = ("i64", "i32", "ptr", "ptr")
                if inc is not None:
                    fut = dev.compile(source, name, options=(f"-I{inc}", "-std=c++17",
                                                             "-default-device"),
                                      signature=signature)
                elif dev.backend == "sim":  # no CCCL headers here: the simulator's twin
                    fut = dev.load_module(b"sim:" + name.encode(), {name: signature})
                else:
                    raise NotImplementedError(
                        "sorting needs the CCCL headers (pip install nvidia-cuda-cccl-cu12, or "
                        "a CUDA toolkit)")
                _kernels[key] = fut
    try:
        found = fut.result()
    except BaseException:
        _kernels.pop(key, None)
        raise
    return found[name] if isinstance(found, dict) else found


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
    """``x`` sorted along ``axis`` (stable; NaN last ascending, first descending)."""
    return _sort(x, axis, bool(descending), False, "sort")


def argsort(x: Array, /, *, axis: int = -1, descending: bool = False,
            stable: bool = True) -> Array:
    """The positions that sort ``x`` along ``axis`` (int64; stable)."""
    return _sort(x, axis, bool(descending), True, "argsort")

