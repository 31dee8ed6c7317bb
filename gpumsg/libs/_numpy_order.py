"""NumPy's rule for the NumPy-level namespaces: memory order never changes an answer. The
calls of ``dev.linalg`` compute on C-ordered buffers; :func:`any_order` wraps a namespace
class so that every public method first makes each F-ordered buffer argument a C-ordered
copy (a generated kernel, :data:`SOURCE`; its NumPy twin on the simulator), passes that on,
and frees the copy once the work is sent (frees are stream-ordered). A buffer with at most
one axis longer than 1 reads the same in either order and is passed on as C-ordered without
a copy.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import threading
import weakref
from concurrent.futures import Future
from typing import Any

import numpy as np

from ..dtypes import as_dtype
from ..errors import InvalidMessage
from ..messages._base import BufRef
from .nvrtc._sim import sim_kernel

__all__ = ["any_order", "c_ordered", "SOURCE"]

#: element size -> the C type the kernel moves it as
_CARRIER = {1: "unsigned char", 2: "unsigned short", 4: "unsigned int",
            8: "unsigned long long", 16: "ulonglong2"}
#: most axes a reordered buffer may have
MAX_AXES = 4

_TEMPLATE = r"""
// y (C order) = x (F order) of shape (d0, d1, d2, d3), elements of SIZE bytes
extern "C" __global__ void gm_f_to_c_SIZE(const CARRIER* x, CARRIER* y, long long n,
                                         long long d0, long long d1, long long d2,
                                         long long d3) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)blockDim.x * gridDim.x) {
        long long t = i;
        long long c3 = t % d3; t /= d3;
        long long c2 = t % d2; t /= d2;
        long long c1 = t % d1; t /= d1;
        y[i] = x[t + d0 * (c1 + d1 * (c2 + d2 * c3))];
    }
}
"""
SOURCE = "".join(_TEMPLATE.replace("SIZE", str(size)).replace("CARRIER", t)
                 for size, t in _CARRIER.items())


def _f_to_c(launch: Any, x: np.ndarray, y: np.ndarray, n: Any, d0: Any, d1: Any, d2: Any,
            d3: Any) -> None:
    m = int(n)
    shape = (int(d0), int(d1), int(d2), int(d3))
    y[:m] = x[:m].reshape(shape, order="F").reshape(-1)


for _size in _CARRIER:
    sim_kernel(f"gm_f_to_c_{_size}")(_f_to_c)

_LOCK = threading.Lock()
_COMPILED: weakref.WeakKeyDictionary[Any, dict[str, Future]] = weakref.WeakKeyDictionary()


def _kernel(dev: Any, name: str) -> Any:
    with _LOCK:
        table = _COMPILED.setdefault(dev, {})
        fut = table.get(name)
        if fut is None:
            fut = table[name] = dev.nvrtc.compile(SOURCE, name)
    try:
        return fut.result()
    except BaseException:
        with _LOCK:
            if table.get(name) is fut:
                del table[name]
        raise


def _ref_of(value: Any) -> BufRef | None:
    """The reference of a buffer argument (a BufRef, a GpuBuffer or its future), else None."""
    if type(value) is BufRef:
        return value
    ref = getattr(value, "ref", None)
    return ref if type(ref) is BufRef else None


def c_ordered(dev: Any, value: Any, field: str) -> tuple[Any, Any]:
    """(``value`` as a C-ordered buffer, the copy made for it or None). Anything but an
    F-ordered buffer is returned as it is."""
    ref = _ref_of(value)
    if ref is None or ref.order != "F":
        return value, None
    if sum(1 for d in ref.shape if d > 1) <= 1:  # the same layout in either order
        return dataclasses.replace(ref, order="C"), None
    if len(ref.shape) > MAX_AXES:
        raise InvalidMessage(f"{field}: an F-ordered buffer of more than {MAX_AXES} axes; "
                             f"copy it to C order first ({ref.describe()})", field=field)
    size = as_dtype(ref.dtype).itemsize
    out = dev.alloc(tuple(ref.shape), ref.dtype, order="C")
    dims = (*ref.shape, *(1,) * (MAX_AXES - len(ref.shape)))
    n = math.prod(ref.shape)
    block = 256
    dev.nvrtc.launch(_kernel(dev, f"gm_f_to_c_{size}"), max(1, min(65535, -(-n // block))),
                     block, (dev.nvrtc.untyped(ref), dev.nvrtc.untyped(out), n, *dims),
                     reads=(ref,), writes=(out,))
    return out, out


def any_order(cls: type) -> type:
    """Wrap every public method of namespace class ``cls`` (whose instances hold the Device
    as ``_dev``) so that its F-ordered buffer arguments arrive as C-ordered copies."""
    for name, fn in list(vars(cls).items()):
        if name.startswith("_") or not callable(fn):
            continue
        setattr(cls, name, _wrapped(fn))
    return cls


#: parameter names of buffers a call writes (never replaced by a copy)
_WRITTEN = frozenset({"out"})


def _wrapped(fn: Any) -> Any:
    @functools.wraps(fn)
    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not any(_is_f(a) for a in args) and not any(
                _is_f(v) for k, v in kwargs.items() if k not in _WRITTEN):
            return fn(self, *args, **kwargs)
        copies: list[Any] = []

        def fix(value: Any, field: str) -> Any:
            if field in _WRITTEN:
                return value  # written, not read: its own call checks its order
            out, copy = c_ordered(self._dev, value, field)
            if copy is not None:
                copies.append(copy)
            return out

        names = fn.__code__.co_varnames[1:fn.__code__.co_argcount]
        args = tuple(fix(a, names[i] if i < len(names) else "args")
                     for i, a in enumerate(args))
        kwargs = {k: fix(v, k) for k, v in kwargs.items()}
        try:
            return fn(self, *args, **kwargs)
        finally:
            for c in copies:
                c.buffer.free()

    return call


def _is_f(value: Any) -> bool:
    ref = _ref_of(value)
    return ref is not None and ref.order == "F"
