"""``concat`` in one launch: a kernel that reads up to :data:`GROUP` inputs and writes the new
C-ordered output, allocated by the launch's own message (one message for a concatenation of
up to eight arrays, where a copy per input took one each).

Thread ``i`` walks the output's C order over a slab of the output (the dimensions of the output,
with the concatenated axis cut to one group's inputs), finds its input by the axis coordinate
(the inputs' ends along the axis, in order) and moves one element from the input's strided
layout. Elements are moved as words of their width, so the copy is bit-exact for every dtype;
inputs of another dtype than the result's are converted first (:func:`concat` in
``_manipulation``). The simulator runs the NumPy twin."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..libs.nvrtc._sim import SIM_KERNELS, Recipe, sim_kernel
from . import _dtypes as D
from ._array import Array
from ._codegen import _c_strides, _distinct, _ref_of, _send
from ._gather import _NPWORD, _WORD

__all__ = ["concat_new", "GROUP"]

#: inputs one launch reads (its parameters stay far below CUDA's 4 KiB)
GROUP = 8
_BLOCK = 256
_MAX_GRID = 1 << 16


def _render(width: int, ndim: int, axis: int, k: int) -> tuple[str, str, tuple[str, ...]]:
    """The kernel that concatenates ``k`` inputs of ``ndim`` dimensions along ``axis``,
    elements ``width`` bytes wide."""
    w = _WORD[width]
    name = f"gm_concat_{width}_{ndim}_{axis}_{k}"
    params = ["long long n", f"{w}* __restrict__ dst", "long long base"]
    kinds: list[str] = ["i64", "ptr", "i64"]
    for j in range(k):
        params += [f"const {w}* __restrict__ s{j}", f"long long f{j}", f"long long e{j}"]
        params += [f"long long t{j}_{d}" for d in range(ndim)]
        kinds += ["ptr", "i64", "i64"] + ["i64"] * ndim
    params += [f"long long d{d}" for d in range(ndim)] + [f"long long o{d}" for d in range(ndim)]
    kinds += ["i64"] * (2 * ndim)
    lines = ["    long long r_ = i;"]
    for d in range(ndim - 1, 0, -1):
        lines.append(f"    long long c{d} = r_ % d{d}; r_ /= d{d};")
    lines.append("    long long c0 = r_;")
    out = " + ".join(f"c{d} * o{d}" for d in range(ndim))
    lines.append(f"    long long at = base + {out};")
    # the input whose span along the axis holds the coordinate, and where in it
    for j in range(k):
        start = "0" if j == 0 else f"e{j - 1}"
        src = " + ".join(f"c{d} * t{j}_{d}" if d != axis else f"(c{d} - {start}) * t{j}_{d}"
                         for d in range(ndim))
        test = f"if (c{axis} < e{j})" if j < k - 1 else ""
        lead = "    " if j == 0 else "    else "
        lines.append(f"{lead}{test} {{ dst[at] = s{j}[f{j} + {src}]; }}")
    body = "\n".join(lines)
    src = f"""
extern "C" __global__ void {name}({", ".join(params)}) {{
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (long long)blockDim.x * gridDim.x) {{
{body}
  }}
}}
"""
    if name not in SIM_KERNELS:
        sim_kernel(name)(Recipe(_twin, width, ndim, axis, k))
    return name, src, tuple(kinds)


def _twin(width: int, ndim: int, axis: int, k: int) -> Any:
    """The simulator's version of :func:`_render`'s kernel."""
    wt = _NPWORD[width]

    def run(info: Any, n: Any, dst: np.ndarray, base: Any, *rest: Any) -> None:
        per = 3 + ndim
        inputs = [rest[j * per:(j + 1) * per] for j in range(k)]
        tail = rest[k * per:]
        dims = tuple(int(v) for v in tail[:ndim])
        ostr = np.array([int(v) for v in tail[ndim:]], np.int64)
        n = int(n)
        coords = np.stack(np.unravel_index(np.arange(n), dims)).astype(np.int64)
        at = int(base) + ostr @ coords
        d = dst.view(wt)
        start = 0
        for j, (src, first, end, *strides) in enumerate(inputs):
            end = int(end)
            a = coords[axis]
            mine = (a >= start) & (a < end) if j < k - 1 else a >= start
            c = coords[:, mine].copy()
            c[axis] -= start
            where = int(first) + np.array([int(s) for s in strides], np.int64) @ c
            d[at[mine]] = src.view(wt)[where]
            start = end

    return run


def concat_new(dev: Any, arrays: list[Array], axis: int, shape: tuple[int, ...],
               dtype: np.dtype) -> Array:
    """The concatenation of ``arrays`` (each of ``dtype``, none empty along ``axis``, ``axis``
    normalized) as a new C-ordered array of ``shape``: one launch per :data:`GROUP` inputs, the
    first allocating the output in its own message."""
    ndim = len(shape)
    ostr = _c_strides(shape)
    width = dtype.itemsize
    out_ref = dev.port.mint(shape, D.storage_name(dtype), "C")
    first: Any = None
    start = 0
    for g in range(0, len(arrays), GROUP):
        group = arrays[g:g + GROUP]
        ends: list[int] = []
        end = 0
        for a in group:
            end += a.shape[axis]
            ends.append(end)
        dims = shape[:axis] + (end,) + shape[axis + 1:]
        n = math.prod(dims)
        args: list[Any] = [n, out_ref, start * ostr[axis]]
        refs = []
        for a, e in zip(group, ends):
            ref = _ref_of(a._buf)  # computes a pending input first
            refs.append(ref)
            args += [ref, a._offset, e, *a._strides]
        args += [*dims, *ostr]
        k = len(group)
        grid = max(1, min(-(-n // _BLOCK), _MAX_GRID))
        # a later group reads the output too: a group that failed marked it failed, and the
        # next one then fails with that cause (the last one's future is the array's)
        fut = _send(dev, ("concat", width, ndim, axis, k),
                    lambda k=k: _render(width, ndim, axis, k), grid, _BLOCK, tuple(args),
                    _distinct(refs if first is None else [*refs, out_ref]), (out_ref,),
                    out_ref if first is None else None)
        if first is None:
            first = fut
        start += end
    out = Array(first, shape, dtype, dev)
    if len(arrays) > GROUP:
        out._wrote(fut)
    return out
