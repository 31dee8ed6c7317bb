"""The standard's ``fft`` extension over cuFFT (the device's NumPy-shaped FFT client), with the
rest of ``numpy.fft`` (``fft2``, ``ifft2``, ``rfft2``, ``irfft2``): the 18 functions of NumPy.

A transform takes a C-contiguous array (a strided view is copied first) and answers the new
output array at once, like every other operation. The signatures are NumPy's and the standard's
together: ``n``/``axis``/``norm`` (``s``/``axes``/``norm``) may be passed by position as NumPy
and CuPy take them, or by keyword as the standard does; ``norm=None`` means ``"backward"``.
``fftfreq``/``rfftfreq`` are computed on the host and copied in; ``fftshift``/``ifftshift`` are
``roll``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import _dtypes as D
from ._array import Array, _copy, resolve_device
from ._elementwise import TABLE, apply
from ._manipulation import roll
from ._reductions import normalize_axes

__all__ = ["fft", "ifft", "fft2", "ifft2", "fftn", "ifftn", "rfft", "irfft", "rfft2", "irfft2",
           "rfftn", "irfftn", "hfft", "ihfft", "fftfreq", "rfftfreq", "fftshift", "ifftshift"]

_NORMS = ("backward", "ortho", "forward")
_SWAP = {"backward": "forward", "forward": "backward", "ortho": "ortho"}


def _client(dev: Any) -> Any:
    # the device's numpy.fft-shaped calls (cuFFT)
    return dev.fft


def _input(x: Any, kinds: str, name: str) -> Array:
    if not isinstance(x, Array):
        raise TypeError(f"{name}: expected an array, got {type(x).__name__}")
    if D.kind_of(x.dtype) not in kinds or x.dtype in (D.float16, D.bfloat16):
        want = "complex" if kinds == "c" else "real float32/float64"
        raise TypeError(f"{name} takes a {want} array, got {x.dtype}")
    return x if x._is_whole() else _copy(x)


def _norm(norm: str | None) -> str:
    if norm is None:  # NumPy's and CuPy's spelling of the default
        return "backward"
    if not isinstance(norm, str) or norm not in _NORMS:
        raise ValueError(f"norm must be one of {_NORMS} or None, got {norm!r}")
    return norm


def _run(x: Array, method: str, norm: str | None, *args: Any) -> Array:
    fut = getattr(_client(x.device), method)(x.buffer, *args, norm=_norm(norm))
    buf = fut.buffer
    return Array(fut, buf.shape, D.check_dtype(buf.dtype), x.device)


def fft(x: Array, /, n: int | None = None, axis: int = -1,
        norm: str | None = "backward") -> Array:
    """The 1-D discrete Fourier transform of a complex array along ``axis`` (``n``: the length,
    cropped or zero-padded)."""
    return _run(_input(x, "c", "fft"), "fft", norm, n, axis)


def ifft(x: Array, /, n: int | None = None, axis: int = -1,
         norm: str | None = "backward") -> Array:
    """The inverse of :func:`fft`."""
    return _run(_input(x, "c", "ifft"), "ifft", norm, n, axis)


def _axes(x: Array, s: Any, axes: Any) -> tuple[Any, Any]:
    if axes is not None:
        axes = tuple(int(a) for a in axes)
        normalize_axes(axes, x.ndim)  # range and repeats
    if s is not None:
        s = tuple(int(v) for v in s)
        if axes is not None and len(s) != len(axes):
            raise ValueError(f"s and axes differ in length ({len(s)} and {len(axes)})")
    return s, axes


def fftn(x: Array, /, s: Any = None, axes: Any = None,
         norm: str | None = "backward") -> Array:
    """The n-D transform over ``axes`` (all by default; the last ``len(s)`` with ``s``)."""
    x = _input(x, "c", "fftn")
    return _run(x, "fftn", norm, *_axes(x, s, axes))


def ifftn(x: Array, /, s: Any = None, axes: Any = None,
          norm: str | None = "backward") -> Array:
    x = _input(x, "c", "ifftn")
    return _run(x, "ifftn", norm, *_axes(x, s, axes))


def fft2(x: Array, /, s: Any = None, axes: Any = (-2, -1),
         norm: str | None = "backward") -> Array:
    """NumPy's ``fft2``: :func:`fftn` over the last two axes."""
    return fftn(x, s, axes, norm)


def ifft2(x: Array, /, s: Any = None, axes: Any = (-2, -1),
          norm: str | None = "backward") -> Array:
    return ifftn(x, s, axes, norm)


def rfft(x: Array, /, n: int | None = None, axis: int = -1,
         norm: str | None = "backward") -> Array:
    """The transform of a real array: the n // 2 + 1 non-negative frequencies."""
    return _run(_input(x, "f", "rfft"), "rfft", norm, n, axis)


def irfft(x: Array, /, n: int | None = None, axis: int = -1,
          norm: str | None = "backward") -> Array:
    """The inverse of :func:`rfft` (``n``: the real output's length, 2 (m - 1) by default)."""
    return _run(_input(x, "c", "irfft"), "irfft", norm, n, axis)


def rfftn(x: Array, /, s: Any = None, axes: Any = None,
          norm: str | None = "backward") -> Array:
    x = _input(x, "f", "rfftn")
    return _run(x, "rfftn", norm, *_axes(x, s, axes))


def irfftn(x: Array, /, s: Any = None, axes: Any = None,
           norm: str | None = "backward") -> Array:
    x = _input(x, "c", "irfftn")
    return _run(x, "irfftn", norm, *_axes(x, s, axes))


def rfft2(x: Array, /, s: Any = None, axes: Any = (-2, -1),
          norm: str | None = "backward") -> Array:
    """NumPy's ``rfft2``: :func:`rfftn` over the last two axes."""
    return rfftn(x, s, axes, norm)


def irfft2(x: Array, /, s: Any = None, axes: Any = (-2, -1),
           norm: str | None = "backward") -> Array:
    return irfftn(x, s, axes, norm)


def hfft(x: Array, /, n: int | None = None, axis: int = -1,
         norm: str | None = "backward") -> Array:
    """The FFT of a Hermitian-symmetric signal: ``irfft(conj(x))`` with the norm swapped."""
    x = _input(x, "c", "hfft")
    return irfft(apply(TABLE["conj"], x), n=n, axis=axis, norm=_SWAP[_norm(norm)])


def ihfft(x: Array, /, n: int | None = None, axis: int = -1,
          norm: str | None = "backward") -> Array:
    """The inverse of :func:`hfft`: ``conj(rfft(x))`` with the norm swapped."""
    return apply(TABLE["conj"], rfft(x, n=n, axis=axis, norm=_SWAP[_norm(norm)]))


def _freq_dtype(dtype: Any) -> np.dtype:
    dt = D.float64 if dtype is None else D.check_dtype(dtype)
    if D.kind_of(dt) != "f":
        raise TypeError(f"frequencies need a real floating dtype, got {dt}")
    return dt


def _window(n: Any, d: Any) -> tuple[int, float]:
    """The window length (a positive int) and sample spacing (a non-zero real)."""
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"n must be a positive integer, got {n!r}")
    if isinstance(d, bool) or not isinstance(d, (int, float, np.integer, np.floating)) or d == 0:
        raise ValueError(f"d must be a non-zero real number, got {d!r}")
    return int(n), float(d)


def fftfreq(n: int, /, d: float = 1.0, *, dtype: Any = None, device: Any = None) -> Array:
    """The sample frequencies of an ``n``-point transform with sample spacing ``d``."""
    dt = _freq_dtype(dtype)
    n, d = _window(n, d)
    return _frequencies(resolve_device(device), n, (n - 1) // 2 + 1, d, dt)


def rfftfreq(n: int, /, d: float = 1.0, *, dtype: Any = None, device: Any = None) -> Array:
    """The non-negative sample frequencies of an ``n``-point real transform."""
    dt = _freq_dtype(dtype)
    n, d = _window(n, d)
    return _frequencies(resolve_device(device), n, n // 2 + 1, d, dt, False)


def _frequencies(dev: Any, n: int, count: int, d: float, dt: np.dtype,
                 negative: bool = True) -> Array:
    """``[0, 1, .., count - 1]`` and, with ``negative``, ``[-(n - count), .., -1]`` after them,
    times ``1 / (n d)``, computed as NumPy computes them (integer indices, their float64
    products, then ``dt``) on the device: a long window takes device memory only, where the
    host's copy of NumPy's answer could exhaust the host first."""
    from ._creation import arange
    from ._elementwise import astype, where

    val = 1.0 / (n * d)
    k = arange(n if negative else count, dtype=D.int64, device=dev)
    if negative and n > count:
        k = where(k < count, k, k - n)
    out = astype(k, D.float64) * val
    return out if dt == D.float64 else astype(out, dt)


def _shift(x: Array, axes: Any, sign: int) -> Array:
    if not isinstance(x, Array):
        raise TypeError("expected an array")
    axes = normalize_axes(axes, x.ndim)
    if not axes:
        return _copy(x)
    return roll(x, tuple(sign * (x.shape[a] // 2) for a in axes), axis=axes)


def fftshift(x: Array, /, axes: Any = None) -> Array:
    """The zero frequency moved to the middle of ``axes`` (all by default)."""
    return _shift(x, axes, 1)


def ifftshift(x: Array, /, axes: Any = None) -> Array:
    return _shift(x, axes, -1)
