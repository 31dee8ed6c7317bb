"""The moves behind indexing and copies: a gather ``dst[i] = src[off + view(i) + adv[idx(i)]]``
or a scatter (the other way) over the result's C order, ``view(i)`` and ``idx(i)`` the strided
offsets of the result's coordinates into the source and into an int64 array of extra offsets
(the indices' offsets: see :mod:`._indexing`). Elements are moved as words of their width, so a
move is bit-exact for every dtype. The simulator runs the NumPy twin.

A checked move (``flag`` given) treats an extra offset equal to :data:`OUT_OF_RANGE` (what the
offsets kernel writes for an index outside its axis) as no element: it stores its ``token``
in the i32 ``flag``, and a gather writes zero bits there, a scatter writes nothing. The
check after it (``IndexCheck`` with that token) fails the result when the flag holds the
token: a flag kept from one move to the next needs no zeroing (see ``_indexing``)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..libs.nvrtc._sim import SIM_KERNELS, Recipe, sim_kernel
from . import _dtypes as D
from ._array import Array, _copy, new_array
from ._codegen import _distinct, _index_code, _ref_of, _send, kernel_for

__all__ = ["move", "whole", "OUT_OF_RANGE"]

_WORD = {1: "unsigned char", 2: "unsigned short", 4: "unsigned int", 8: "unsigned long long",
         16: "ulonglong2"}
_NPWORD = {1: np.dtype(np.uint8), 2: np.dtype(np.uint16), 4: np.dtype(np.uint32),
           8: np.dtype(np.uint64), 16: np.dtype("V16")}


#: the extra offset that marks an index outside its axis (no element lies that far away)
OUT_OF_RANGE = -(1 << 62)


def _render_move(width: int, ndim: int, scatter: bool, checked: bool = False
                 ) -> tuple[str, str, tuple[str, ...]]:
    """The gather ``out[i] = x[off + view(i) + adv[idx(i)]]`` (or the scatter, the other way)
    over ``ndim`` result dimensions, for elements ``width`` bytes wide; ``checked``: an extra
    offset of OUT_OF_RANGE stores ``tok`` in ``flag`` and moves no element."""
    w = _WORD[width]
    name = f"gm_{'scatter' if scatter else 'gather'}{'_chk' if checked else ''}_{width}_{ndim}"
    params = ["long long n", f"{w}* __restrict__ dst", f"const {w}* __restrict__ src",
              "long long off", "const long long* __restrict__ adv"]
    params += ["int* __restrict__ flag", "int tok"] if checked else []
    params += [f"long long d{k}" for k in range(ndim)]
    params += [f"long long tv_{k}" for k in range(ndim)] + [f"long long ta_{k}"
                                                             for k in range(ndim)]
    kinds = ("i64", "ptr", "ptr", "i64", "ptr") + (("ptr", "i32") if checked else ()) + \
        ("i64",) * (3 * ndim)
    lines = _index_code("x", "i", ndim, ["v", "a"], "d", "t", "long long", "    ")
    if not checked:
        move = "dst[off + xv + adv[xa]] = src[i];" if scatter else \
            "dst[i] = src[off + xv + adv[xa]];"
    elif scatter:
        move = (f"long long a_ = adv[xa];\n    if (a_ == {OUT_OF_RANGE}LL) *flag = tok;\n"
                "    else dst[off + xv + a_] = src[i];")
    else:
        move = (f"long long a_ = adv[xa];\n    if (a_ == {OUT_OF_RANGE}LL) {{ *flag = tok; "
                "dst[i] = gm_word(); }\n    else dst[i] = src[off + xv + a_];")
    src = _grid_stride(w, name, params, lines + [f"    {move}"])
    if name not in SIM_KERNELS:
        sim_kernel(name)(Recipe(_move_twin, width, ndim, scatter, checked))
    return name, src, kinds


def _grid_stride(word: str, name: str, params: list[str], body: list[str]) -> str:
    """The source of kernel ``name``: ``body`` (lines) run for each ``i < n`` in a grid-stride
    loop, ``gm_word`` the type elements move as."""
    lines = "\n".join(body)
    return f"""
typedef {word} gm_word;
extern "C" __global__ void {name}({", ".join(params)}) {{
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (long long)blockDim.x * gridDim.x) {{
{lines}
  }}
}}
"""


def _move_twin(width: int, ndim: int, scatter: bool, checked: bool = False) -> Any:
    wt = _NPWORD[width]

    def run(info: Any, n: Any, dst: np.ndarray, src: np.ndarray, off: Any, adv: np.ndarray,
            *rest: Any) -> None:
        flag = None
        if checked:
            flag, tok, rest = rest[0], int(rest[1]), rest[2:]
        n, off = int(n), int(off)
        dims = tuple(int(v) for v in rest[:ndim])
        tv = np.array([int(v) for v in rest[ndim:2 * ndim]], np.int64)
        ta = np.array([int(v) for v in rest[2 * ndim:3 * ndim]], np.int64)
        coords = np.stack(np.unravel_index(np.arange(n), dims)) if ndim else \
            np.zeros((0, n), np.int64)
        extra = adv[ta @ coords]
        good = extra != OUT_OF_RANGE if checked else np.ones(n, bool)
        if flag is not None and not good.all():
            flag.view(np.int32)[0] = tok
        where = off + tv @ coords + np.where(good, extra, 0)
        d, s = dst.view(wt), src.view(wt)
        if scatter:
            d[where[good]] = s[:n][good]
        else:
            d[:n] = np.where(good, s[where], np.zeros((), wt))

    return run


def move(dst: Array, src: Array, off: int, adv: Array, shape: tuple[int, ...],
         vs: tuple[int, ...], as_: tuple[int, ...], scatter: bool,
         flag: Any = None, token: int = 1) -> Any:
    """Launch the gather into the C-contiguous ``dst`` (or, ``scatter``, from the C-contiguous
    ``src``) over ``shape``: the strided side at element ``off`` with strides ``vs``, the
    offsets ``adv`` with strides ``as_``; with ``flag`` (a one-int32 buffer or its reference,
    not holding ``token``), checked (see the module's docstring). Returns the launch's
    future."""
    dev = dst.device
    n = math.prod(shape)
    if n == 0:
        return None
    checked = flag is not None
    name, source, kinds = _render_move(dst.dtype.itemsize, len(shape), scatter, checked)
    kernel = kernel_for(dev, name, source, kinds)
    extra = (flag, token) if flag is not None else ()
    args = (n, dst.buffer, src.buffer, off, adv.buffer, *extra, *shape, *vs, *as_)
    grid = max(1, min((n + 255) // 256, 1 << 16))
    return dev.launch(kernel, grid, 256, args, reads=[src.buffer, adv.buffer],
                      writes=[dst.buffer, *extra[:1]])


#: C types of the index dtypes a take reads
_INDEX_C = {"i8": "signed char", "i16": "short", "i32": "int", "i64": "long long",
            "u8": "unsigned char", "u16": "unsigned short", "u32": "unsigned int",
            "u64": "unsigned long long"}


def _render_take(width: int, index: str, ndim: int) -> tuple[str, str, tuple[str, ...]]:
    """The checked gather ``out[i] = x[off + view(i) + wrap(idx[ioff + at(i)]) * s]`` over
    ``ndim`` result dimensions, elements ``width`` bytes wide, indices of dtype ``index``: an
    index outside ``[-ext, ext)`` (``[0, ext)`` unsigned) stores ``tok`` in ``flag`` and writes
    zero bits.
    The offsets a move reads from an array (:func:`move`) computed in place: one launch."""
    w = _WORD[width]
    it = _INDEX_C[index]
    name = f"gm_take_{width}_{index}_{ndim}"
    params = ["long long n", f"{w}* __restrict__ dst", f"const {w}* __restrict__ src",
              "long long off", f"const {it}* __restrict__ idx", "long long ioff",
              "int* __restrict__ flag", "int tok", "long long ext", "long long s"]
    params += [f"long long d{k}" for k in range(ndim)]
    params += [f"long long tv_{k}" for k in range(ndim)] + [f"long long ta_{k}"
                                                             for k in range(ndim)]
    kinds = ("i64", "ptr", "ptr", "i64", "ptr", "i64", "ptr", "i32", "i64", "i64") + \
        ("i64",) * (3 * ndim)
    lines = _index_code("x", "i", ndim, ["v", "a"], "d", "t", "long long", "    ")
    if index[0] == "u":
        test = "(unsigned long long)k_ >= (unsigned long long)ext"
        pos = "(long long)k_"
    else:
        test = "(long long)k_ < -ext || (long long)k_ >= ext"
        pos = "((long long)k_ < 0 ? (long long)k_ + ext : (long long)k_)"
    src = _grid_stride(w, name, params, lines + [
        f"    {it} k_ = idx[ioff + xa];",
        f"    if ({test}) {{ *flag = tok; dst[i] = gm_word(); }}",
        f"    else dst[i] = src[off + xv + {pos} * s];"])
    if name not in SIM_KERNELS:
        sim_kernel(name)(Recipe(_take_twin, width, index, ndim))
    return name, src, kinds


def _take_twin(width: int, index: str, ndim: int) -> Any:
    wt = _NPWORD[width]
    idt = np.dtype(index.replace("i", "int").replace("u", "uint"))

    def run(info: Any, n: Any, dst: np.ndarray, src: np.ndarray, off: Any, idx: np.ndarray,
            ioff: Any, flag: np.ndarray, tok: Any, ext: Any, s: Any, *rest: Any) -> None:
        n, off, ioff, ext, s = int(n), int(off), int(ioff), int(ext), int(s)
        dims = tuple(int(v) for v in rest[:ndim])
        tv = np.array([int(v) for v in rest[ndim:2 * ndim]], np.int64)
        ta = np.array([int(v) for v in rest[2 * ndim:3 * ndim]], np.int64)
        coords = np.stack(np.unravel_index(np.arange(n), dims)) if ndim else \
            np.zeros((0, n), np.int64)
        raw = idx.view(idt)[ioff + ta @ coords]
        if idt.kind == "u":
            good = raw < np.uint64(ext) if idt == np.uint64 else raw.astype(np.int64) < ext
            k = raw.astype(np.int64)
        else:
            k = raw.astype(np.int64)
            good = (k >= -ext) & (k < ext)
            k = np.where(k < 0, k + ext, k)
        if not good.all():
            flag.view(np.int32)[0] = int(tok)
        d = dst.view(wt)
        d[:n] = np.zeros((), wt)
        d[:n][good] = src.view(wt)[off + (tv @ coords)[good] + k[good] * s]

    return run


def take_new(view: Array, index: Array, axis: int, shape: tuple[int, ...],
             vs: tuple[int, ...], at: tuple[int, ...], flag: Any, token: int) -> Any:
    """A new C-ordered array of ``shape`` gathered from ``view`` (strides ``vs`` over the
    result's dimensions) at ``index`` (an integer array read with strides ``at`` over them)
    along ``axis`` of ``view``, checked: an index out of range stores ``token`` in ``flag``
    (an i32 buffer, its future or its reference, not holding ``token``). One message: the
    output's allocation and the launch."""
    dev = view.device
    n = math.prod(shape)
    width = view.dtype.itemsize
    name = D.storage_name(index.dtype)
    ndim = len(shape)
    out = dev.port.mint(shape, D.storage_name(view.dtype), "C")
    src, idx, fl = _ref_of(view._buf), _ref_of(index._buf), _ref_of(flag)
    args = (n, out, src, view._offset, idx, index._offset, fl, token, view.shape[axis],
            view.strides[axis], *shape, *vs, *at)
    grid = max(1, min((n + 255) // 256, 1 << 16))
    fut = _send(dev, ("take", width, name, ndim), lambda: _render_take(width, name, ndim),
                grid, 256, args, _distinct([src, idx]), (out, fl), out)
    return Array(fut, shape, view.dtype, dev)


def whole(x: Array) -> Array:
    """``x`` as an array that occupies its whole buffer in C order: ``x`` itself where it
    does, else a bit-exact copy (a gather; a copy through the element-wise kernels computes
    16-bit floats in float32, and a GPU's conversion back gives every NaN one payload)."""
    if x._is_contiguous() and x._offset == 0 and math.prod(x._buf_shape()) == x.size:
        return x
    if D.kind_of(x.dtype) == "c":
        return _copy(x)  # complex copies convert nothing
    dev = x.device
    out = new_array(dev, x.shape, x.dtype)
    if out.size:
        zero = new_array(dev, (1,), D.int64)
        zero._wrote(dev.memset(zero.buffer, 0))
        out._wrote(move(out, x, x._offset, zero, x.shape, x.strides, (0,) * x.ndim, False))
    return out
