"""The array: a gpumsg buffer (or its future) seen with a shape, strides, offset and dtype.

An operation validates its arguments, works out the result's shape and dtype, allocates the
result and posts the kernel launch that writes it, and answers the new :class:`Array` at once:
the device runs messages in order, so a chain of operations pipelines without a wait. Only reading
a value waits (``bool``/``int``/``float``/``complex``, ``np.asarray``, ``to_device`` of another
device). A view (a basic slice, ``.T``, ``reshape`` of a contiguous array, ...) shares the buffer.
"""

from __future__ import annotations

import builtins
import math
import operator
import threading
from concurrent.futures import Future
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import as_strided

from ..client._buffers import BufferFuture, GpuBuffer
from ..client._dlpack import View
from ..client._dlpack import export as dlpack_export
from ..dtypes import dtype_name
from ..errors import DependencyFailed, GpuRefStale, InvalidMessage
from . import _dtypes as D
from . import _fusion

__all__ = ["Array", "default_device", "set_default_device", "asarray_host", "new_array",
           "check_device", "c_strides", "is_c_contiguous", "view_of", "BUFFERS"]

#: the client's buffer types, which are arrays through their view (:func:`view_of`)
BUFFERS = (GpuBuffer, BufferFuture)

_default: Any = None
#: the operations behind the operators and methods, filled by the package (``__init__``) so that
#: this module imports none of the modules that build on it
OPS: dict[str, Any] = {}
_default_lock = threading.Lock()


def default_device() -> Any:
    """The device used when a call names none: set by :func:`set_default_device`, else
    ``gpumsg.open_device(0)`` (the first GPU, or the simulator where there is none), opened on
    first use."""
    global _default
    dev = _default
    if dev is None or dev.closed:
        with _default_lock:
            if _default is None or _default.closed:
                from ..client._device import open_device

                _default = open_device(0)
            dev = _default
    return dev


def set_default_device(device: Any) -> Any:
    """Make ``device`` (a gpumsg Device) the default; returns the previous one (or None)."""
    global _default
    from ..client._device import Device

    if device is not None and not isinstance(device, Device):
        raise InvalidMessage(f"device must be a gpumsg Device, got {type(device).__name__}",
                             field="device")
    with _default_lock:
        old, _default = _default, device
    return old


def resolve_device(device: Any) -> Any:
    if device is None:
        return default_device()
    from ..client._device import Device

    if isinstance(device, Device):
        if device.closed:
            raise InvalidMessage(f"device {device.ordinal} is closed", field="device")
        return device
    raise InvalidMessage(f"device must be a gpumsg Device (e.g. x.device), got {device!r}",
                         field="device")


def check_device(*arrays: Any) -> Any:
    """The one device of ``arrays`` (Arrays); InvalidMessage when they live on several."""
    dev = None
    for a in arrays:
        if isinstance(a, Array):
            if dev is None:
                dev = a._dev
            elif a._dev is not dev:
                raise InvalidMessage(
                    f"arrays on different devices ({dev!r} and {a._dev!r}): move one with "
                    "to_device() first", field="device")
    return dev


def c_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    out = []
    acc = 1
    for d in reversed(shape):
        out.append(acc)
        acc *= max(d, 1)
    return tuple(reversed(out))


#: shape -> its C-order strides, for the arrays made C-contiguous
_C_STRIDES: dict[tuple[int, ...], tuple[int, ...]] = {}


def is_c_contiguous(shape: tuple[int, ...], strides: tuple[int, ...]) -> bool:
    acc = 1
    for d, s in zip(reversed(shape), reversed(strides)):
        if d == 0:
            return True
        if d != 1 and s != acc:
            return False
        acc *= d
    return True


def new_array(dev: Any, shape: tuple[int, ...], dtype: np.dtype) -> Array:
    """An uninitialized C-contiguous array."""
    buf = dev.alloc(shape, D.storage_name(dtype), order="C")
    return Array(buf, shape, dtype, dev)


def asarray_host(dev: Any, host: np.ndarray, dtype: np.dtype) -> Array:
    """An array holding a copy of NumPy ``host`` (converted to ``dtype``)."""
    # np.array, not np.ascontiguousarray: that makes a 0-d array 1-d
    arr = np.array(np.asarray(host).astype(dtype, copy=False), order="C", copy=None)
    if dtype == D.bool:
        arr = arr.view(np.uint8)
    buf = dev.to_device(arr, order="C")
    return Array(buf, tuple(arr.shape), dtype, dev)


#: (dtype, shape, order) of a buffer -> (array dtype, element strides) of its view
_LAYOUTS: dict[tuple, tuple[np.dtype, tuple[int, ...]]] = {}


def view_of(buf: Any) -> Array:
    """The array over ``buf`` (a GpuBuffer or its future), zero copy: the buffer's shape and
    dtype, C strides or, for an F-ordered buffer, F strides (element ``[i, j]`` at
    ``i + j * rows``, as NumPy's F order). A pending future stays pending: operations on the
    view queue behind its producer. TypeError for an element type the array layer lacks."""
    base = buf.buffer if isinstance(buf, BufferFuture) else buf
    if not isinstance(base, GpuBuffer):
        raise TypeError(f"expected a GpuBuffer or its future, got {type(buf).__name__}")
    dt, shape, order = base.dtype, base.shape, base.order
    layout = _LAYOUTS.get((dt, shape, order))
    if layout is None:  # each layout worked out once: a view costs one lookup after that
        layout = _LAYOUTS[(dt, shape, order)] = _layout(dt, shape, order)
        if len(_LAYOUTS) > 4096:
            _LAYOUTS.clear()
    return Array(buf, shape, layout[0], base.device, layout[1])


def _layout(dt: np.dtype, shape: tuple[int, ...], order: str) -> tuple[np.dtype, tuple[int, ...]]:
    if not D.is_dtype(dt):
        raise TypeError(f"a buffer of {dtype_name(dt)} has no array data type: "
                        "gpumsg.array_api has bool, the integers, float16/bfloat16/float32/"
                        "float64 and the complex types; convert it with a library call first")
    if order != "F" or len(shape) < 2:
        return dt, c_strides(shape)
    acc, st = 1, []
    for d in shape:
        st.append(acc)
        acc *= max(d, 1)
    return dt, tuple(st)


class Array:
    """An array of the Array API standard on a gpumsg device (see the module docstring)."""

    # ``_b``: the buffer, None while the array is pending (``_node``: its expression, see
    # _fusion); code outside this class and _fusion reads ``_buf``, which computes it first
    __slots__ = ("_b", "_node", "_shape", "_strides", "_offset", "_dtype", "_dev",
                 "__weakref__")

    def __init__(self, buf: Any, shape: tuple[int, ...], dtype: np.dtype, dev: Any,
                 strides: tuple[int, ...] | None = None, offset: int = 0) -> None:
        self._b = buf
        self._node: Any = None
        if type(shape) is not tuple:
            shape = tuple(shape)
        self._shape = shape
        self._dtype = dtype
        self._dev = dev
        if strides is None:
            # a new array's strides: the few shapes a program repeats, worked out once each
            strides = _C_STRIDES.get(shape)
            if strides is None:
                strides = c_strides(shape)
                if len(_C_STRIDES) >= 1024:
                    _C_STRIDES.clear()
                _C_STRIDES[shape] = strides
        elif type(strides) is not tuple:
            strides = tuple(strides)
        self._strides = strides
        self._offset = offset

    @classmethod
    def _pending(cls, node: Any) -> Array:
        """The array of a pending element-wise result (:mod:`._fusion`): C-contiguous, its
        buffer allocated and written when memory is first needed."""
        out = cls(None, node.shape, node.dtype, node.dev)
        out._node = node
        return out

    @property
    def _buf(self) -> Any:
        # memory is needed: pending work goes first (all of it, so that whatever is done with
        # this memory cannot overtake a pending read of it)
        if self._node is not None or _fusion._live or _fusion._inflight:
            _fusion.flush()
            node = self._node
            if node is not None:
                if node.error is not None:
                    raise node.error
                raise RuntimeError("a pending array was not computed")  # a bug, never silent
        return self._b

    @_buf.setter
    def _buf(self, value: Any) -> None:
        self._b = value

    # -- attributes --------------------------------------------------------------------------
    @property
    def dtype(self) -> np.dtype:
        return self._dtype

    @property
    def shape(self) -> tuple[int, ...]:
        return self._shape

    @property
    def ndim(self) -> int:
        return len(self._shape)

    @property
    def size(self) -> int:
        return math.prod(self._shape)

    @property
    def device(self) -> Any:
        return self._dev

    @property
    def strides(self) -> tuple[int, ...]:
        """Element strides in the buffer (an extension: views share buffers)."""
        return self._strides

    @property
    def buffer(self) -> Any:
        """The gpumsg buffer (or its future) holding the elements."""
        return self._buf

    @property
    def T(self) -> Array:
        if self.ndim != 2:
            raise ValueError(f"T needs a 2-D array, got {self.ndim}-D; use permute_dims or mT")
        return self._view(self._shape[::-1], self._strides[::-1], self._offset)

    @property
    def mT(self) -> Array:
        if self.ndim < 2:
            raise ValueError("mT needs an array of at least 2 dimensions")
        return self._view(self._shape[:-2] + self._shape[-2:][::-1],
                          self._strides[:-2] + self._strides[-2:][::-1], self._offset)

    def _view(self, shape: tuple[int, ...], strides: tuple[int, ...], offset: int) -> Array:
        return Array(self._buf, shape, self._dtype, self._dev, strides, offset)

    def _is_contiguous(self) -> bool:
        return is_c_contiguous(self._shape, self._strides)

    def _operand(self, shape: tuple[int, ...] | None = None) -> Any:
        """This array as a kernel operand broadcast to ``shape`` (default: its own)."""
        from ._codegen import Operand

        st = self._strides
        if shape is not None and shape != self._shape:
            pad = len(shape) - self.ndim
            st = (0,) * pad + tuple(0 if d == 1 and shape[pad + k] != 1 else s
                                    for k, (d, s) in enumerate(zip(self._shape, st)))
        return Operand(self._buf, self._dtype, self._offset, st)

    def _wrote(self, done: Any) -> None:
        """``done`` is the future of a launch that wrote this array's buffer: reading waits for
        it and raises its error."""
        if done is None:
            return
        from ..client._buffers import BufferFuture, GpuBuffer, buffer_after

        buf = self._b
        base = buf.buffer if isinstance(buf, BufferFuture) else buf
        if isinstance(base, GpuBuffer):
            self._buf = buffer_after(done, base)

    # -- reading -----------------------------------------------------------------------------
    def _to_numpy(self) -> np.ndarray:
        return self._received(self._download())

    def _download(self) -> Future:
        """Post the copy of this array's buffer to the host now and return its future, for
        :meth:`_received` to read later: a caller with other work to post reads values
        without waiting for them first (the copy is ordered behind a producer still running:
        one round trip, not a wait for the producer's answer and then another for the
        copy's)."""
        buf = self._buf
        if isinstance(buf, Future) and buf.done():
            buf = buf.result()  # a failed producer raises its own error here
        try:
            return self._dev.copy_to_host(buf)
        except GpuRefStale:
            # a producer whose failure poisoned the device between the look above and the
            # copy (the buffer is stale): its own error (ContextPoisoned, with the cause), not
            # the staleness it left behind
            if isinstance(buf, Future):
                buf.result()
            raise

    def _received(self, download: Future) -> np.ndarray:
        """This array's values from ``download`` (a :meth:`_download` of it); waits for
        the copy, and raises the producer's own error where the producer failed."""
        try:
            host = download.result()
        except DependencyFailed:
            buf = self._buf
            if isinstance(buf, Future):
                buf.result()  # the producer's own error (IndexOutOfRange, ...) where it failed
            raise
        flat = host.ravel(order="K")  # the buffer's memory order (an F-ordered buffer's too)
        if self._dtype == D.bool:
            flat = flat.view(np.bool_)
        if self.size == 0:
            return np.empty(self._shape, flat.dtype)
        item = flat.dtype.itemsize
        view = as_strided(flat[self._offset:], self._shape,
                          tuple(s * item for s in self._strides))
        return np.array(view, copy=True)

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        """``np.asarray(x)``: a copy on the host (waits); ``copy=False`` raises ValueError."""
        if copy is False:
            raise ValueError("device memory reaches NumPy as a copy (copy=False cannot be "
                             "honoured)")
        out = self._to_numpy()
        return out if dtype is None else out.astype(dtype)

    def _scalar(self) -> Any:
        if self.size != 1:
            raise TypeError(f"only an array of one element converts to a Python scalar, got "
                            f"shape {self._shape}")
        return self._to_numpy().reshape(()).item()

    def __bool__(self) -> builtins.bool:
        return builtins.bool(self._scalar())

    def __float__(self) -> float:
        if D.kind_of(self._dtype) == "c":
            raise TypeError("float() of a complex array; use real() first")
        return float(self._scalar())

    def __int__(self) -> int:
        if D.kind_of(self._dtype) == "c":
            raise TypeError("int() of a complex array")
        v = self._scalar()
        return int(v)

    def __index__(self) -> int:
        if D.kind_of(self._dtype) not in "iu":
            raise TypeError(f"__index__ needs an integer array, got {self._dtype}")
        return int(self._scalar())

    def __complex__(self) -> complex:
        return complex(self._scalar())

    def __len__(self) -> int:
        if not self._shape:
            raise TypeError("len() of a 0-d array")
        return self._shape[0]

    def __iter__(self) -> Any:
        if not self._shape:
            raise TypeError("iteration over a 0-d array")
        return (self[i] for i in range(self._shape[0]))

    def __repr__(self) -> str:
        try:
            body = np.array2string(self._to_numpy(), separator=", ")
        except Exception as exc:  # noqa: BLE001 - a failed producer: say so, do not raise
            body = f"<{type(exc).__name__}: {exc}>"
        return f"Array({body}, dtype={self._dtype}, device={self._dev.ordinal}:{self._dev.backend})"

    __str__ = __repr__

    # -- the standard's protocol ---------------------------------------------------------------
    def __array_namespace__(self, *, api_version: str | None = None) -> Any:
        if api_version is not None and api_version not in ("2021.12", "2022.12", "2023.12",
                                                           "2024.12"):
            raise ValueError(f"api_version {api_version!r} is not supported")
        return OPS["namespace"]

    def to_device(self, device: Any, /, *, stream: Any = None) -> Array:
        if stream is not None:
            raise ValueError("stream: gpumsg orders work itself; pass None")
        dev = resolve_device(device)
        if dev is self._dev:
            return self
        return asarray_host(dev, self._to_numpy(), self._dtype)

    def __dlpack_device__(self) -> tuple[int, int]:
        if self._dev.backend == "cuda":
            return (2, self._dev.ordinal)
        return (1, 0)

    def __dlpack__(self, *, stream: Any = None, max_version: Any = None, dl_device: Any = None,
                   copy: Any = None) -> Any:
        """DLPack export, zero copy where it can be; ``copy`` is None or taken for its truth
        value, as NumPy takes it (an array of several elements raises TypeError): true exports
        a copy on every backend.

        A strided view exports the elements where they lie (its strides, its first element
        as the data pointer), a bool array as DLPack booleans (kDLBool, 8 bits: gpumsg holds a
        bool a byte), both without a copy; a view with negative strides, which torch refuses,
        is compacted first unless ``copy=False``. Another ``dl_device`` (the host) gets a
        compact copy, and BufferError with ``copy=False``."""
        if copy is not None:
            copy = builtins.bool(copy)
        kwargs: dict[str, Any] = {}
        if max_version is not None:
            kwargs["max_version"] = max_version
        plain = self._is_whole()
        is_bool = self._dtype == D.bool
        if dl_device is not None and tuple(dl_device) != self.__dlpack_device__():
            # another device (the host): a copy of the elements, compact
            if is_bool and copy is not False:
                if tuple(dl_device) != (1, 0):
                    raise BufferError(f"cannot export to device {tuple(dl_device)}")
                return self._to_numpy().__dlpack__(**kwargs)
            src = self if plain or copy is False else _copy(self)
            return src._buffer().__dlpack__(stream=stream, max_version=max_version,
                                            dl_device=dl_device, copy=copy)
        if plain and not is_bool:
            return self._buffer().__dlpack__(stream=stream, max_version=max_version, copy=copy)
        src = self
        if copy is not False and any(s < 0 for s in self._strides):
            src = _copy(self)  # torch refuses negative strides: a compact copy unless forbidden
        # a strided view, or bool bytes: the elements where they lie, described as they are
        # (copy=True copies the whole buffer and describes the copy alike)
        view = View(src._shape, src._strides, src._offset, is_bool)
        return dlpack_export(src._buffer(), stream, max_version, None, copy, view=view)

    def _buffer(self) -> GpuBuffer:
        """The buffer this array reads (waiting for its allocation if it is a future)."""
        buf = self._buf
        return buf.result() if isinstance(buf, Future) else buf

    def _buf_shape(self) -> tuple[int, ...]:
        buf = self._buf
        return buf.buffer.shape if hasattr(buf, "buffer") else buf.shape

    def _is_whole(self) -> builtins.bool:
        """Whether this array is its buffer read in C order: contiguous from element 0, of the
        buffer's shape, in a C-ordered buffer (or one of fewer than 2 dimensions). What takes
        a plain buffer in its own order (the NumPy-shaped library calls, an export) can be
        given such an array's buffer as it is; a C-strided view of an F-ordered buffer of the
        same shape (a square one's ``.T``) is the transpose of what the buffer says."""
        if self._offset != 0 or not is_c_contiguous(self._shape, self._strides):
            return False
        buf = self._buf
        base = buf.buffer if hasattr(buf, "buffer") else buf
        return base.shape == self._shape and (base.order == "C" or len(base.shape) < 2)

    # -- indexing ----------------------------------------------------------------------------
    def __getitem__(self, key: Any) -> Array:
        return OPS["getitem"](self, _key(key))

    def __setitem__(self, key: Any, value: Any) -> None:
        OPS["setitem"](self, _key(key), view_of(value) if isinstance(value, BUFFERS) else value)

    # -- operators ---------------------------------------------------------------------------
    def _bin(self, name: str, other: Any, reflected: builtins.bool = False) -> Any:
        if not isinstance(other, (Array, builtins.bool, int, float, complex)):
            if not isinstance(other, BUFFERS):
                return NotImplemented
            other = view_of(other)
        fn = OPS[name]
        return fn(other, self) if reflected else fn(self, other)

    def _inplace(self, name: str, other: Any) -> Array:
        if not isinstance(other, (Array, builtins.bool, int, float, complex)):
            if not isinstance(other, BUFFERS):
                return NotImplemented
            other = view_of(other)
        OPS["apply_into"](self, name, other)
        return self

    def __add__(self, o: Any) -> Array: return self._bin("add", o)
    def __radd__(self, o: Any) -> Array: return self._bin("add", o, True)
    def __iadd__(self, o: Any) -> Array: return self._inplace("add", o)
    def __sub__(self, o: Any) -> Array: return self._bin("subtract", o)
    def __rsub__(self, o: Any) -> Array: return self._bin("subtract", o, True)
    def __isub__(self, o: Any) -> Array: return self._inplace("subtract", o)
    def __mul__(self, o: Any) -> Array: return self._bin("multiply", o)
    def __rmul__(self, o: Any) -> Array: return self._bin("multiply", o, True)
    def __imul__(self, o: Any) -> Array: return self._inplace("multiply", o)
    def __truediv__(self, o: Any) -> Array: return self._bin("divide", o)
    def __rtruediv__(self, o: Any) -> Array: return self._bin("divide", o, True)
    def __itruediv__(self, o: Any) -> Array: return self._inplace("divide", o)
    def __floordiv__(self, o: Any) -> Array: return self._bin("floor_divide", o)
    def __rfloordiv__(self, o: Any) -> Array: return self._bin("floor_divide", o, True)
    def __ifloordiv__(self, o: Any) -> Array: return self._inplace("floor_divide", o)
    def __mod__(self, o: Any) -> Array: return self._bin("remainder", o)
    def __rmod__(self, o: Any) -> Array: return self._bin("remainder", o, True)
    def __imod__(self, o: Any) -> Array: return self._inplace("remainder", o)
    def __pow__(self, o: Any) -> Array: return self._bin("pow", o)
    def __rpow__(self, o: Any) -> Array: return self._bin("pow", o, True)
    def __ipow__(self, o: Any) -> Array: return self._inplace("pow", o)
    def __and__(self, o: Any) -> Array: return self._bin("bitwise_and", o)
    def __rand__(self, o: Any) -> Array: return self._bin("bitwise_and", o, True)
    def __iand__(self, o: Any) -> Array: return self._inplace("bitwise_and", o)
    def __or__(self, o: Any) -> Array: return self._bin("bitwise_or", o)
    def __ror__(self, o: Any) -> Array: return self._bin("bitwise_or", o, True)
    def __ior__(self, o: Any) -> Array: return self._inplace("bitwise_or", o)
    def __xor__(self, o: Any) -> Array: return self._bin("bitwise_xor", o)
    def __rxor__(self, o: Any) -> Array: return self._bin("bitwise_xor", o, True)
    def __ixor__(self, o: Any) -> Array: return self._inplace("bitwise_xor", o)
    def __lshift__(self, o: Any) -> Array: return self._bin("bitwise_left_shift", o)
    def __rlshift__(self, o: Any) -> Array: return self._bin("bitwise_left_shift", o, True)
    def __ilshift__(self, o: Any) -> Array: return self._inplace("bitwise_left_shift", o)
    def __rshift__(self, o: Any) -> Array: return self._bin("bitwise_right_shift", o)
    def __rrshift__(self, o: Any) -> Array: return self._bin("bitwise_right_shift", o, True)
    def __irshift__(self, o: Any) -> Array: return self._inplace("bitwise_right_shift", o)
    def __lt__(self, o: Any) -> Array: return self._bin("less", o)
    def __le__(self, o: Any) -> Array: return self._bin("less_equal", o)
    def __gt__(self, o: Any) -> Array: return self._bin("greater", o)
    def __ge__(self, o: Any) -> Array: return self._bin("greater_equal", o)
    def __eq__(self, o: Any) -> Array: return self._bin("equal", o)  # type: ignore[override]
    def __ne__(self, o: Any) -> Array: return self._bin("not_equal", o)  # type: ignore[override]

    __hash__ = None  # type: ignore[assignment]

    def __matmul__(self, o: Any) -> Array:
        if not isinstance(o, Array):
            if not isinstance(o, BUFFERS):
                return NotImplemented
            o = view_of(o)
        return OPS["matmul"](self, o)

    def __rmatmul__(self, o: Any) -> Array:
        if not isinstance(o, Array):
            if not isinstance(o, BUFFERS):
                return NotImplemented
            o = view_of(o)
        return OPS["matmul"](o, self)

    def __imatmul__(self, o: Any) -> Array:
        if isinstance(o, BUFFERS):
            o = view_of(o)
        res = OPS["matmul"](self, o)
        if res.shape != self.shape or res.dtype != self.dtype:
            raise ValueError("@= must keep the array's shape and dtype")
        self[...] = res
        return self

    def __neg__(self) -> Array:
        return OPS["negative"](self)

    def __pos__(self) -> Array:
        return OPS["positive"](self)

    def __abs__(self) -> Array:
        return OPS["abs"](self)

    def __invert__(self) -> Array:
        return OPS["bitwise_invert"](self)

    # -- NumPy- and CuPy-style methods (each the namespace function of the same name) ----------
    def sum(self, axis: Any = None, dtype: Any = None, out: None = None,
            keepdims: builtins.bool = False) -> Array:
        res = OPS["sum"](self, axis=_axes(axis), dtype=dtype, keepdims=keepdims)
        return _into(res, out, "sum")

    def prod(self, axis: Any = None, dtype: Any = None, out: None = None,
             keepdims: builtins.bool = False) -> Array:
        res = OPS["prod"](self, axis=_axes(axis), dtype=dtype, keepdims=keepdims)
        return _into(res, out, "prod")

    def mean(self, axis: Any = None, dtype: Any = None, out: None = None,
             keepdims: builtins.bool = False) -> Array:
        """The mean; ``dtype`` (NumPy's) converts the elements first."""
        x = self if dtype is None else OPS["astype"](self, dtype, copy=False)
        return _into(OPS["mean"](x, axis=_axes(axis), keepdims=keepdims), out, "mean")

    def var(self, axis: Any = None, dtype: Any = None, out: None = None, ddof: Any = 0,
            keepdims: builtins.bool = False, *, correction: Any = None) -> Array:
        """The variance; ``ddof`` (NumPy's name) or ``correction`` (the standard's)."""
        return self._spread("var", axis, dtype, out, ddof, keepdims, correction)

    def std(self, axis: Any = None, dtype: Any = None, out: None = None, ddof: Any = 0,
            keepdims: builtins.bool = False, *, correction: Any = None) -> Array:
        """The standard deviation; ``ddof`` (NumPy's name) or ``correction`` (the
        standard's)."""
        return self._spread("std", axis, dtype, out, ddof, keepdims, correction)

    def _spread(self, name: str, axis: Any, dtype: Any, out: Any, ddof: Any,
                keepdims: builtins.bool, correction: Any) -> Array:
        if correction is not None and ddof:
            raise ValueError(f"{name}: give ddof or correction, not both")
        x = self if dtype is None else OPS["astype"](self, dtype, copy=False)
        res = OPS[name](x, axis=_axes(axis), keepdims=keepdims,
                        correction=ddof if correction is None else correction)
        return _into(res, out, name)

    def max(self, axis: Any = None, out: None = None, keepdims: builtins.bool = False) -> Array:
        return _into(OPS["max"](self, axis=_axes(axis), keepdims=keepdims), out, "max")

    def min(self, axis: Any = None, out: None = None, keepdims: builtins.bool = False) -> Array:
        return _into(OPS["min"](self, axis=_axes(axis), keepdims=keepdims), out, "min")

    def argmax(self, axis: Any = None, out: None = None,
               keepdims: builtins.bool = False) -> Array:
        """The index of the first maximum (of the flattened array when ``axis`` is None)."""
        return _into(OPS["argmax"](self, axis=axis, keepdims=keepdims), out, "argmax")

    def argmin(self, axis: Any = None, out: None = None,
               keepdims: builtins.bool = False) -> Array:
        """The index of the first minimum (of the flattened array when ``axis`` is None)."""
        return _into(OPS["argmin"](self, axis=axis, keepdims=keepdims), out, "argmin")

    def all(self, axis: Any = None, out: None = None, keepdims: builtins.bool = False) -> Array:
        return _into(OPS["all"](self, axis=_axes(axis), keepdims=keepdims), out, "all")

    def any(self, axis: Any = None, out: None = None, keepdims: builtins.bool = False) -> Array:
        return _into(OPS["any"](self, axis=_axes(axis), keepdims=keepdims), out, "any")

    def cumsum(self, axis: Any = None, dtype: Any = None, out: None = None) -> Array:
        """Running sums along ``axis``; of the flattened array when ``axis`` is None (NumPy's
        rule)."""
        x = self
        if axis is None:
            x, axis = x.ravel(), 0
        return _into(OPS["cumulative_sum"](x, axis=axis, dtype=dtype), out, "cumsum")

    def reshape(self, *shape: Any, order: str = "C", copy: builtins.bool | None = None) -> Array:
        """``x.reshape(2, 3)`` or ``x.reshape((2, 3))``, in NumPy's ``order`` ('C': the
        elements read and written row-major; 'F': column-major): a view where the strides
        allow, else a copy."""
        if len(shape) == 1 and not isinstance(shape[0], (int, np.integer)):
            shape = tuple(shape[0])
        if order == "C":
            return OPS["reshape"](self, shape, copy=copy)
        if order != "F":
            raise ValueError(f"reshape: order must be 'C' or 'F', got {order!r}")
        # F order: reversing the axes turns column-major into row-major
        rev = self.transpose()
        return OPS["reshape"](rev, tuple(shape)[::-1], copy=copy).transpose()

    def astype(self, dtype: Any, copy: builtins.bool = True) -> Array:
        return OPS["astype"](self, dtype, copy=copy)

    def transpose(self, *axes: Any) -> Array:
        """The axes permuted (reversed when none are given), a view."""
        if len(axes) == 1 and not isinstance(axes[0], (int, np.integer)):
            axes = tuple(axes[0]) if axes[0] is not None else ()
        if not axes:
            axes = tuple(range(self.ndim))[::-1]
        return OPS["permute_dims"](self, tuple(axes))

    def swapaxes(self, axis1: int, axis2: int) -> Array:
        perm = list(range(self.ndim))
        a, b = _axis(axis1, self.ndim), _axis(axis2, self.ndim)
        perm[a], perm[b] = perm[b], perm[a]
        return OPS["permute_dims"](self, tuple(perm))

    def squeeze(self, axis: Any = None) -> Array:
        """The axes of length one removed (all of them when ``axis`` is None)."""
        if axis is None:
            axis = tuple(k for k, d in enumerate(self._shape) if d == 1)
        return OPS["squeeze"](self, axis=axis)

    def flatten(self) -> Array:
        """A new one-dimensional copy, row-major."""
        return _copy(self).reshape(-1)

    def ravel(self) -> Array:
        """One dimension, row-major: a view when the array is contiguous, else a copy."""
        return OPS["reshape"](self, (-1,))

    def copy(self) -> Array:
        """A new C-contiguous array with the same elements."""
        return _copy(self)

    def get(self) -> np.ndarray:
        """The elements as a NumPy array (CuPy's name): waits, copies to the host."""
        return self._to_numpy()

    def item(self) -> Any:
        """The one element as a Python scalar (waits)."""
        return self._scalar()

    def tolist(self) -> Any:
        """The elements as nested Python lists (waits)."""
        return self._to_numpy().tolist()

    def clip(self, min: Any = None, max: Any = None, out: Any = None) -> Any:  # noqa: A002
        return _into(OPS["clip"](self, min, max), out, "clip")

    def round(self, decimals: int = 0, out: Any = None) -> Any:
        """Rounded half to even to ``decimals`` places (NumPy's: scaled by ``10**decimals``,
        rounded, scaled back; integers with negative ``decimals`` round exactly)."""
        decimals = operator.index(decimals)
        kind = D.kind_of(self._dtype)
        if decimals == 0 or (kind in "iu" and decimals > 0):
            res = OPS["round"](self) if kind in "fc" else _copy(self)
        elif kind in "fc":
            scale = 10.0 ** decimals
            res = OPS["round"](self * scale) / scale if decimals > 0 else \
                OPS["round"](self / (1.0 / scale)) * (1.0 / scale)
        elif kind == "b":
            res = _copy(self)
        else:
            res = _round_int(self, 10 ** -decimals)
        return _into(res, out, "round")

    def conj(self) -> Array:
        return OPS["conj"](self)

    @property
    def nbytes(self) -> int:
        return self.size * self._dtype.itemsize

    @property
    def itemsize(self) -> int:
        return self._dtype.itemsize


def _key(key: Any) -> Any:
    """An index with the buffers in it seen as arrays."""
    if isinstance(key, BUFFERS):
        return view_of(key)
    if type(key) is tuple:
        for k in key:
            if isinstance(k, BUFFERS):
                return tuple(view_of(k) if isinstance(k, BUFFERS) else k for k in key)
    return key


def _axes(axis: Any) -> Any:
    """NumPy's axis argument as the standard's: an int, a tuple of ints or None."""
    return tuple(axis) if isinstance(axis, list) else axis


def _round_int(x: Array, q: int) -> Array:
    """Integers rounded to a multiple of ``q`` (a power of ten), half to even, exactly: the
    multiple below (floor division), one up where the rest is past half or at half with
    an odd quotient. A ``q`` beyond the dtype's range gives zeros, as NumPy's."""
    info = np.iinfo(x.dtype)
    if q > info.max:
        return OPS["multiply"](x, 0)
    lo_q = OPS["floor_divide"](x, q)
    rest = x - lo_q * q
    up = (rest > q // 2) | ((rest == q // 2) & (OPS["remainder"](lo_q, 2) == 1))
    return OPS["where"](up, (lo_q + 1) * q, lo_q * q)


def _axis(a: Any, ndim: int) -> int:
    k = operator.index(a)
    if not -ndim <= k < ndim:
        raise ValueError(f"axis {a} is out of range for {ndim} dimensions")
    return k % ndim


def _into(result: Array, out: Any, name: str) -> Any:
    """``result``, or with NumPy's ``out=`` (an array or a buffer of the result's shape)
    ``out`` holding it, converted to its dtype."""
    if out is None:
        return result
    target = view_of(out) if isinstance(out, BUFFERS) else out
    if not isinstance(target, Array):
        raise TypeError(f"{name}: out must be an array or a buffer, got {type(out).__name__}")
    if target.shape != result.shape:
        raise ValueError(f"{name}: out has shape {target.shape}, the result {result.shape}")
    target[...] = result
    return out


def _copy(x: Array) -> Array:
    """A C-contiguous copy of ``x`` in a buffer of its own: one element-wise launch, whose
    message allocates it (pending until read, as every element-wise result)."""
    return OPS["astype"](x, x.dtype, copy=True)
