"""Creation functions. Data from the host goes in with one copy; ``zeros`` is a memset; every
other fill is a generated kernel: ``arange`` and ``linspace`` are a ramp ``start + i * step``
(NumPy's step and end point, in float64 or int64, converted on store). ``eye``, ``tril`` and
``triu`` are one generated kernel each that works out each element's row and column from its
index: nothing is built on the host."""

from __future__ import annotations

import builtins
import math
import operator
from typing import Any

import numpy as np

from ..client._dlpack import holds_bools
from . import _dtypes as D
from ._array import Array, asarray_host, check_device, new_array, resolve_device

__all__ = ["asarray", "empty", "empty_like", "zeros", "zeros_like", "ones", "ones_like",
           "full", "full_like", "arange", "linspace", "eye", "from_dlpack", "meshgrid",
           "tril", "triu"]

_pybool = builtins.bool


def _shape(shape: Any) -> tuple[int, ...]:
    if isinstance(shape, (int, np.integer)) and not isinstance(shape, _pybool):
        shape = (int(shape),)
    try:
        out = tuple(int(d) for d in shape)
    except TypeError:
        raise TypeError(f"shape must be an int or a tuple of ints, got {shape!r}") from None
    if any(d < 0 for d in out):
        raise ValueError(f"shape must not have negative sizes, got {out}")
    return out


def _dtype(dtype: Any, default: np.dtype) -> np.dtype:
    return default if dtype is None else D.check_dtype(dtype)


def _infer(obj: Any) -> np.dtype:
    """The standard's default dtype for Python data (nested sequences of scalars)."""
    flat: list[Any] = []

    def walk(o: Any) -> None:
        if isinstance(o, (list, tuple)):
            for e in o:
                walk(e)
        else:
            flat.append(o)

    walk(obj)
    kinds = set()
    for v in flat:
        if isinstance(v, Array):
            kinds.add(D.kind_of(v.dtype))
        elif isinstance(v, _pybool):
            kinds.add("b")
        elif isinstance(v, int):
            kinds.add("i")
        elif isinstance(v, float):
            kinds.add("f")
        elif isinstance(v, complex):
            kinds.add("c")
        elif isinstance(v, np.generic) and v.dtype.kind in "biufc":
            kinds.add("i" if v.dtype.kind == "u" else v.dtype.kind)
        else:  # text, None, objects: not numbers (NumPy would make a str or object array)
            raise TypeError(f"asarray: expected numbers (or arrays), got "
                            f"{type(v).__name__} {v!r:.40}")
    if "c" in kinds:
        return D.complex128
    if "f" in kinds:
        return D.float64
    if "i" in kinds:
        return D.int64
    if kinds == {"b"}:
        return D.bool
    return D.float64


def asarray(obj: Any, /, *, dtype: Any = None, device: Any = None, copy: Any = None) -> Array:
    """An array from an Array, a NumPy array, a DLPack or buffer-protocol object, a Python
    scalar or nested sequences of them."""
    if isinstance(obj, Array):
        x = obj
        if device is not None:
            dev = resolve_device(device)
            if dev is not x.device:
                if copy is False:
                    raise ValueError("asarray: copy=False but the device differs")
                x = x.to_device(dev)
        dt = x.dtype if dtype is None else D.check_dtype(dtype)
        if dt != x.dtype:
            if copy is False:
                raise ValueError("asarray: copy=False but the dtype differs")
            from ._elementwise import astype

            return astype(x, dt)
        if copy:
            from ._elementwise import astype

            return astype(x, dt, copy=True)
        return x
    if copy is False:
        raise ValueError("asarray: copy=False, but data from the host must be copied")
    dev = resolve_device(device)
    if isinstance(obj, (list, tuple)) and any(isinstance(v, Array) for v in _flat(obj)):
        obj = _nested_host(obj)
    if isinstance(obj, (np.ndarray, np.generic)):
        host = np.asarray(obj)
        dt = D.check_dtype(host.dtype) if dtype is None else D.check_dtype(dtype)
    elif isinstance(obj, (list, tuple, _pybool, int, float, complex)):
        dt = _infer(obj) if dtype is None else D.check_dtype(dtype)
        if isinstance(obj, int) and not isinstance(obj, _pybool) and D.kind_of(dt) in "iu":
            info = np.iinfo(dt)
            if not info.min <= obj <= info.max:
                raise OverflowError(f"{obj} does not fit {dt}")
        host = np.asarray(obj, dtype=dt)
    elif hasattr(obj, "__dlpack__"):
        return from_dlpack(obj, device=device) if dtype is None else \
            asarray(from_dlpack(obj, device=device), dtype=dtype)
    else:
        host = np.asarray(obj)
        dt = D.check_dtype(host.dtype) if dtype is None else D.check_dtype(dtype)
    if D.kind_of(np.dtype(host.dtype)) == "c" if host.dtype in D.ALL else False:
        if D.kind_of(dt) != "c":
            raise TypeError(f"asarray: complex data cannot become {dt}")
    return asarray_host(dev, host, dt)


def _flat(obj: Any) -> list[Any]:
    out: list[Any] = []
    for e in obj:
        if isinstance(e, (list, tuple)):
            out += _flat(e)
        else:
            out.append(e)
    return out


def _nested_host(obj: Any) -> Any:
    if isinstance(obj, (list, tuple)):
        return [_nested_host(e) for e in obj]
    if isinstance(obj, Array):
        return obj._to_numpy()
    return obj


def empty(shape: Any, *, dtype: Any = None, device: Any = None) -> Array:
    return new_array(resolve_device(device), _shape(shape), _dtype(dtype, D.float64))


def zeros(shape: Any, *, dtype: Any = None, device: Any = None) -> Array:
    dev = resolve_device(device)
    out = new_array(dev, _shape(shape), _dtype(dtype, D.float64))
    if out.size:
        out._wrote(dev.memset(out._buf, 0))
    return out


def full(shape: Any, fill_value: Any, *, dtype: Any = None, device: Any = None) -> Array:
    if isinstance(fill_value, Array):
        if fill_value.ndim != 0:
            raise ValueError("full: fill_value must be a scalar")
        fill_value = fill_value._scalar()
    if not isinstance(fill_value, (_pybool, int, float, complex)):
        raise TypeError(f"full: fill_value must be a Python scalar, got {fill_value!r}")
    dt = _infer(fill_value) if dtype is None else D.check_dtype(dtype)
    if isinstance(fill_value, complex) and D.kind_of(dt) != "c":
        raise TypeError(f"full: a complex fill_value for {dt}")
    if isinstance(fill_value, float) and D.kind_of(dt) in "biu":
        raise TypeError(f"full: a float fill_value for {dt}")
    dev = resolve_device(device)
    out = new_array(dev, _shape(shape), dt)
    from ._elementwise import cast_into

    if out.size:
        cast_into(out, fill_value)
    return out


def ones(shape: Any, *, dtype: Any = None, device: Any = None) -> Array:
    dt = _dtype(dtype, D.float64)
    return full(shape, True if dt == D.bool else 1, dtype=dt, device=device)


def _like(x: Array, dtype: Any, device: Any) -> tuple[np.dtype, Any]:
    if not isinstance(x, Array):
        raise TypeError("x must be an array")
    return (x.dtype if dtype is None else D.check_dtype(dtype),
            x.device if device is None else device)


def empty_like(x: Array, /, *, dtype: Any = None, device: Any = None) -> Array:
    dt, dev = _like(x, dtype, device)
    return empty(x.shape, dtype=dt, device=dev)


def zeros_like(x: Array, /, *, dtype: Any = None, device: Any = None) -> Array:
    dt, dev = _like(x, dtype, device)
    return zeros(x.shape, dtype=dt, device=dev)


def ones_like(x: Array, /, *, dtype: Any = None, device: Any = None) -> Array:
    dt, dev = _like(x, dtype, device)
    return ones(x.shape, dtype=dt, device=dev)


def full_like(x: Array, /, fill_value: Any, *, dtype: Any = None, device: Any = None) -> Array:
    dt, dev = _like(x, dtype, device)
    return full(x.shape, fill_value, dtype=dt, device=dev)


def _render_ramp(dt: np.dtype, integer: bool) -> tuple[str, str, tuple[str, ...]]:
    """``out[i] = start + i * step`` (complex parts separately), the last element ``last``
    where ``fix_last`` says so; computed in int64 (``integer``) or float64."""
    from ..libs.nvrtc._sim import SIM_KERNELS, Recipe, sim_kernel
    from ._cub import tag
    from ._expr import PRELUDE

    storage, ctype = D.CTYPE[dt][0], D.CTYPE[dt][1]
    name = f"gm_ramp_{tag(dt)}_{'i' if integer else 'f'}"
    t = "long long" if integer else "double"
    kinds = ("i64", "ptr") + (("i64",) * 2 if integer else ("f64",) * 6) + ("i64",)
    if integer:
        params = "long long start, long long step"
        value = "start + i * step"
        last = ""
    else:
        params = ("double start, double start_im, double step, double step_im, double last, "
                  "double last_im")
        if D.kind_of(dt) == "c":
            value = f"{ctype}(start + (double)i * step, start_im + (double)i * step_im)"
            last = f"if (fix_last && i == n - 1) v = {ctype}(last, last_im);"
        else:
            value = "start + (double)i * step"
            last = "if (fix_last && i == n - 1) v = last;"
    vt = ctype if D.kind_of(dt) == "c" else t
    store = D.CTYPE[dt][4].format(f"({ctype})(v)")
    src = f"""{PRELUDE}
extern "C" __global__ void {name}(long long n, {storage}* __restrict__ out, {params},
                                  long long fix_last) {{
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (long long)blockDim.x * gridDim.x) {{
    {vt} v = {value};
    {last}
    out[i] = {store};
  }}
}}
"""
    if name not in SIM_KERNELS:
        sim_kernel(name)(Recipe(_ramp_twin, dt, integer))
    return name, src, kinds


def _ramp_twin(dt: np.dtype, integer: bool) -> Any:
    def run(info: Any, n: Any, out: np.ndarray, *args: Any) -> None:
        n = int(n)
        i = np.arange(n, dtype=np.int64)
        if integer:
            v: Any = np.int64(args[0]) + i * np.int64(args[1])
        else:
            start, start_im, step, step_im, last, last_im, fix = args
            v = np.float64(start) + i.astype(np.float64) * np.float64(step)
            if D.kind_of(dt) == "c":
                v = v + 1j * (np.float64(start_im) + i.astype(np.float64) * np.float64(step_im))
            if int(fix) and n:
                v[-1] = last + 1j * last_im if D.kind_of(dt) == "c" else last
        dst = out.view(np.bool_) if dt == D.bool else out
        with np.errstate(all="ignore"):
            dst[:n] = np.asarray(v).astype(D.CTYPE[dt][2]).astype(dst.dtype)

    return run


def _ramp(dev: Any, n: int, dt: np.dtype, integer: bool, args: tuple[Any, ...]) -> Array:
    from ._codegen import kernel_for

    out = new_array(dev, (n,), dt)
    if n:
        name, src, kinds = _render_ramp(dt, integer)
        kernel = kernel_for(dev, name, src, kinds)
        grid = builtins.max(1, builtins.min((n + 255) // 256, 1 << 16))
        out._wrote(dev.launch(kernel, grid, 256, (n, out.buffer) + args, writes=[out.buffer]))
    return out


def arange(start: Any, /, stop: Any = None, step: Any = 1, *, dtype: Any = None,
           device: Any = None) -> Array:
    """``start, start + step, ...`` up to ``stop`` (excluded), made on the device."""
    if stop is None:
        start, stop = 0, start
    for v in (start, stop, step):
        if not isinstance(v, (int, float)) or isinstance(v, _pybool):
            raise TypeError("arange: start, stop and step must be ints or floats")
    if step == 0:
        raise ValueError("arange: step must not be 0")
    floats = any(isinstance(v, float) for v in (start, stop, step))
    dt = (D.float64 if floats else D.int64) if dtype is None else D.check_dtype(dtype)
    n = builtins.max(0, math.ceil((stop - start) / step))
    dev = resolve_device(device)
    if not floats and D.kind_of(dt) in "biu":
        return _ramp(dev, n, dt, True, (int(start), int(step), 0))
    # NumPy's step: the difference of the first two values
    delta = (float(start) + float(step)) - float(start)
    return _ramp(dev, n, dt, False, (float(start), 0.0, delta, 0.0, 0.0, 0.0, 0))


def linspace(start: Any, stop: Any, /, num: int, *, dtype: Any = None, device: Any = None,
             endpoint: bool = True) -> Array:
    """``num`` evenly spaced values from ``start`` to ``stop`` (included with ``endpoint``),
    made on the device as NumPy's: ``start + i * step``, the end point exact."""
    for v in (start, stop):
        if isinstance(v, (str, bytes)):  # complex() below would parse the text
            raise TypeError(f"linspace: start and stop must be numbers, got {type(v).__name__}")
    cplx = isinstance(start, complex) or isinstance(stop, complex)
    dt = (D.complex128 if cplx else D.float64) if dtype is None else D.check_dtype(dtype)
    if D.kind_of(dt) not in "fc":
        raise TypeError(f"linspace: dtype must be floating, got {dt}")
    if cplx and D.kind_of(dt) != "c":
        raise TypeError("linspace: complex bounds need a complex dtype")
    num = operator.index(num)
    if num < 0:
        raise ValueError(f"linspace: num must be non-negative, got {num}")
    a, b = complex(start), complex(stop)
    div = num - 1 if endpoint else num
    step = (b - a) / div if div > 0 else 0j
    fix = 1 if endpoint and num > 1 else 0
    return _ramp(resolve_device(device), num, dt, False,
                 (a.real, a.imag, step.real, step.imag, b.real, b.imag, fix))


def _render_eye(dt: np.dtype) -> tuple[str, str, tuple[str, ...]]:
    """``out[r, c] = (c - r == k)`` over a C-ordered ``rows x cols`` array of ``dt``."""
    from ..libs.nvrtc._sim import SIM_KERNELS, Recipe, sim_kernel
    from ._cub import tag
    from ._expr import PRELUDE

    storage, ctype = D.CTYPE[dt][0], D.CTYPE[dt][1]
    name = f"gm_eye_{tag(dt)}"
    store = D.CTYPE[dt][4].format(f"({ctype})(v)")
    src = f"""{PRELUDE}
extern "C" __global__ void {name}(long long n, {storage}* __restrict__ out, long long cols,
                                  long long k) {{
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (long long)blockDim.x * gridDim.x) {{
    int v = (i % cols) - (i / cols) == k ? 1 : 0;
    out[i] = {store};
  }}
}}
"""
    if name not in SIM_KERNELS:
        sim_kernel(name)(Recipe(_eye_twin, dt))
    return name, src, ("i64", "ptr", "i64", "i64")


def _eye_twin(dt: np.dtype) -> Any:
    def run(info: Any, n: Any, out: np.ndarray, cols: Any, k: Any) -> None:
        i = np.arange(int(n), dtype=np.int64)
        v = (i % int(cols)) - (i // int(cols)) == int(k)
        dst = out.view(np.bool_) if dt == D.bool else out
        dst[:int(n)] = v.astype(D.CTYPE[dt][2]).astype(dst.dtype)

    return run


def eye(n_rows: int, n_cols: int | None = None, /, *, k: int = 0, dtype: Any = None,
        device: Any = None) -> Array:
    """The ``n_rows x n_cols`` array with ones on diagonal ``k`` (above the main one for
    ``k > 0``), zeros elsewhere: one generated kernel."""
    from ._codegen import kernel_for

    dt = _dtype(dtype, D.float64)
    dev = resolve_device(device)
    rows = _count(n_rows, "n_rows")
    cols = rows if n_cols is None else _count(n_cols, "n_cols")
    k = _count(k, "k", signed=True)
    out = new_array(dev, (rows, cols), dt)
    n = rows * cols
    if n:
        name, src, kinds = _render_eye(dt)
        kernel = kernel_for(dev, name, src, kinds)
        grid = builtins.max(1, builtins.min((n + 255) // 256, 1 << 16))
        out._wrote(dev.launch(kernel, grid, 256, (n, out.buffer, cols, k),
                              writes=[out.buffer]))
    return out


def _count(v: Any, field: str, signed: bool = False) -> int:
    """``v`` as an int (a size, or with ``signed`` a diagonal offset clamped to +-2**62)."""
    if isinstance(v, _pybool) or not isinstance(v, (int, np.integer)):
        raise TypeError(f"{field} must be an int, got {v!r}")
    v = int(v)
    if signed:
        return builtins.max(-(1 << 62), builtins.min(v, 1 << 62))
    if v < 0:
        raise ValueError(f"{field} must not be negative, got {v}")
    return v


def from_dlpack(x: Any, /, *, device: Any = None, copy: Any = None) -> Array:
    """An array from a DLPack producer: on the device's own memory (a CUDA tensor on the
    GPU, or host memory on the simulator) adopted without a copy; else copied in."""
    if isinstance(x, Array):
        return asarray(x, device=device, copy=copy)
    dev = resolve_device(device)
    if not hasattr(x, "__dlpack__"):
        raise TypeError("from_dlpack: the object has no __dlpack__")
    kind = x.__dlpack_device__()[0] if hasattr(x, "__dlpack_device__") else 1
    if kind == 1:  # host memory
        host = np.from_dlpack(x)
        dt = D.check_dtype(host.dtype)
        if dev.backend == "cuda" and copy is False:
            raise BufferError("from_dlpack: host memory cannot be adopted by a GPU without a copy")
        return asarray_host(dev, host, dt)
    buf = dev.from_dlpack(x)
    b = buf.buffer if hasattr(buf, "buffer") else buf
    dt = D.bool if holds_bools(b) else D.check_dtype(b.dtype)  # kDLBool arrives as bytes
    return Array(buf, b.shape, dt, dev,
                 None if b.order == "C" else tuple(
                     int(np.prod(b.shape[:k])) for k in range(len(b.shape))))


def meshgrid(*arrays: Array, indexing: str = "xy") -> list[Array]:
    from ._manipulation import broadcast_to, reshape

    if indexing not in ("xy", "ij"):
        raise ValueError("meshgrid: indexing must be 'xy' or 'ij'")
    if not arrays:
        return []
    check_device(*arrays)
    dts = {a.dtype for a in arrays}
    if len(dts) > 1:
        raise TypeError("meshgrid: arrays must share a dtype")
    for a in arrays:
        if a.ndim != 1:
            raise ValueError("meshgrid: arrays must be 1-D")
    n = len(arrays)
    shape = [a.size for a in arrays]
    if indexing == "xy" and n > 1:
        shape[0], shape[1] = shape[1], shape[0]
    out = []
    for i, a in enumerate(arrays):
        s = [1] * n
        pos = i
        if indexing == "xy" and n > 1 and i < 2:
            pos = 1 - i
        s[pos] = a.size
        v = broadcast_to(reshape(a, tuple(s)), tuple(shape))
        from ._array import _copy

        out.append(_copy(v))
    return out


def _render_tri(width: int, ndim: int, lower: bool) -> tuple[str, str, tuple[str, ...]]:
    """``out[..., r, c] = keep(c - r) ? x[..., r, c] : 0`` over the C-ordered result of
    ``ndim >= 2`` dimensions, ``x`` at element ``off`` with strides ``t``; elements move as
    words of ``width`` bytes (bit-exact; all-zero bits are every dtype's zero)."""
    from ..libs.nvrtc._sim import SIM_KERNELS, Recipe, sim_kernel
    from ._codegen import _index_code
    from ._gather import _WORD

    w = _WORD[width]
    name = f"gm_{'tril' if lower else 'triu'}_{width}_{ndim}"
    params = ["long long n", f"{w}* __restrict__ dst", f"const {w}* __restrict__ src",
              "long long off", "long long k"]
    params += [f"long long d{j}" for j in range(ndim)] + [f"long long tx_{j}"
                                                           for j in range(ndim)]
    kinds = ("i64", "ptr", "ptr", "i64", "i64") + ("i64",) * (2 * ndim)
    body = "\n".join(_index_code("e", "i", ndim, ["x"], "d", "t", "long long", "    "))
    test = "<=" if lower else ">="
    src = f"""
typedef {w} gm_word;
extern "C" __global__ void {name}({", ".join(params)}) {{
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (long long)blockDim.x * gridDim.x) {{
    long long c = i % d{ndim - 1}, r = (i / d{ndim - 1}) % d{ndim - 2};
    if (c - r {test} k) {{
{body}
      dst[i] = src[off + ex];
    }} else {{
      dst[i] = gm_word();
    }}
  }}
}}
"""
    if name not in SIM_KERNELS:
        sim_kernel(name)(Recipe(_tri_twin, width, ndim, lower))
    return name, src, kinds


def _tri_twin(width: int, ndim: int, lower: bool) -> Any:
    from ._gather import _NPWORD

    wt = _NPWORD[width]

    def run(info: Any, n: Any, dst: np.ndarray, src: np.ndarray, off: Any, k: Any,
            *rest: Any) -> None:
        n, off, k = int(n), int(off), int(k)
        dims = tuple(int(v) for v in rest[:ndim])
        tx = np.array([int(v) for v in rest[ndim:]], np.int64)
        coords = np.stack(np.unravel_index(np.arange(n), dims))
        diff = coords[-1] - coords[-2]
        keep = diff <= k if lower else diff >= k
        d, s = dst.view(wt), src.view(wt)
        vals = s[off + tx @ coords]
        d[:n] = np.where(keep, vals, np.zeros((), wt))

    return run


def _tri(x: Array, k: int, lower: bool) -> Array:
    from ._codegen import kernel_for

    if not isinstance(x, Array):
        raise TypeError(f"tril/triu: x must be an Array, got {type(x).__name__}")
    if x.ndim < 2:
        raise ValueError("tril/triu need at least 2 dimensions")
    k = _count(k, "k", signed=True)
    dev = x.device
    out = new_array(dev, x.shape, x.dtype)
    n = out.size
    if n:
        name, src, kinds = _render_tri(x.dtype.itemsize, x.ndim, lower)
        kernel = kernel_for(dev, name, src, kinds)
        grid = builtins.max(1, builtins.min((n + 255) // 256, 1 << 16))
        out._wrote(dev.launch(kernel, grid, 256,
                              (n, out.buffer, x.buffer, x._offset, k, *x.shape, *x.strides),
                              reads=[x.buffer], writes=[out.buffer]))
    return out


def tril(x: Array, /, *, k: int = 0) -> Array:
    """``x`` with the elements above diagonal ``k`` of its last two dimensions set to zero
    (stacks of matrices too): one generated kernel."""
    return _tri(x, k, True)


def triu(x: Array, /, *, k: int = 0) -> Array:
    """``x`` with the elements below diagonal ``k`` of its last two dimensions set to zero
    (stacks of matrices too): one generated kernel."""
    return _tri(x, k, False)

