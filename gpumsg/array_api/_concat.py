"""``concat`` in one launch: a kernel that reads up to :data:`GROUP` inputs and writes the new
C-ordered output, allocated by the launch's own message (one message for a concatenation of
up to eight arrays, where a copy per input took one each).

Two kernels, chosen by the inputs' layouts:

- **Runs** (every input of the group C-contiguous, as ``stack`` and most ``concat`` calls
  have them): along the output's C order an input is ``outer`` runs of ``run`` elements, one
  per index of the dimensions before the axis, ``row`` elements apart. Grid row ``y`` copies
  input ``y``; it moves 16-byte vectors where its source, its destination and the run and row
  lengths in bytes are multiples of 16 (checked on the device, per input), else elements, and
  divides in 32 bits where the input has fewer than 2^31 elements. A stack of four 1 Mi f32
  arrays took 33 µs of GPU time in the strided kernel (64-bit division for every element)
  against torch's 6.6 (H200).
- **Strided** (any layout): thread ``i`` walks the output's C order over a slab of the output
  (the dimensions of the output, with the concatenated axis cut to one group's inputs), finds
  its input by the axis coordinate (the inputs' ends along the axis, in order) and moves one
  element from the input's strided layout.

Elements are moved as words of their width, so the copy is bit-exact for every dtype; inputs
of another dtype than the result's are converted first (:func:`concat` in ``_manipulation``).
The simulator runs the NumPy twins."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..libs.nvrtc._sim import SIM_KERNELS, Recipe, sim_kernel
from . import _dtypes as D
from ._array import Array, is_c_contiguous
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


def _render_runs(width: int, k: int) -> tuple[str, str, tuple[str, ...]]:
    """The kernel that copies ``k`` C-contiguous inputs as runs (see the module's docstring);
    its parameters: ``outer``, the output, ``row``, then per input its pointer, first element,
    run length and where its first run starts in the output (all in elements)."""
    w = _WORD[width]
    name = f"gm_concat_runs_{width}_{k}"
    params = ["long long outer", f"{w}* __restrict__ dst", "long long row"]
    kinds: list[str] = ["i64", "ptr", "i64"]
    pick = []
    for j in range(k):
        params += [f"const {w}* __restrict__ s{j}", f"long long f{j}", f"long long r{j}",
                   f"long long a{j}"]
        kinds += ["ptr", "i64", "i64", "i64"]
        case = "default" if j == k - 1 else f"case {j}"
        pick.append(f"    {case}: src = s{j} + f{j}; run = r{j}; to = dst + a{j}; break;")
    picks = "\n".join(pick)
    src = f"""
template <typename T>
__device__ __forceinline__ void gm_runs(const T* __restrict__ s, T* __restrict__ d,
                                        long long outer, long long run, long long row,
                                        long long first, long long step) {{
  const long long total = outer * run;
  if (outer == 1) {{
    for (long long i = first; i < total; i += step) d[i] = s[i];
  }} else if (total <= 0x7fffffffLL) {{
    const unsigned int n = (unsigned int)total, r32 = (unsigned int)run;
    for (unsigned int i = (unsigned int)first; i < n; i += (unsigned int)step) {{
      const unsigned int r = i / r32;
      d[(long long)r * row + (i - r * r32)] = s[i];
    }}
  }} else {{
    for (long long i = first; i < total; i += step) {{
      const long long r = i / run;
      d[r * row + (i - r * run)] = s[i];
    }}
  }}
}}

extern "C" __global__ void {name}({", ".join(params)}) {{
  const {w}* src; {w}* to; long long run;
  switch (blockIdx.y) {{
{picks}
  }}
  const long long first = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  const long long step = (long long)blockDim.x * gridDim.x;
  const unsigned long long bytes = (unsigned long long)run * {width};
  const unsigned long long row_bytes = outer == 1 ? 0 : (unsigned long long)row * {width};
  if ((((unsigned long long)src | (unsigned long long)to | bytes | row_bytes) & 15) == 0) {{
    gm_runs<uint4>((const uint4*)src, (uint4*)to, outer, run * {width} / 16,
                   row * {width} / 16, first, step);
  }} else {{
    gm_runs<{w}>(src, to, outer, run, row, first, step);
  }}
}}
"""
    if name not in SIM_KERNELS:
        sim_kernel(name)(Recipe(_runs_twin, width, k))
    return name, src, tuple(kinds)


def _runs_twin(width: int, k: int) -> Any:
    """The simulator's version of :func:`_render_runs`'s kernel."""
    wt = _NPWORD[width]

    def run(info: Any, outer: Any, dst: np.ndarray, row: Any, *rest: Any) -> None:
        d = dst.view(wt)
        outer, row = int(outer), int(row)
        for j in range(k):
            src, first, length, at = rest[4 * j:4 * j + 4]
            first, length, at = int(first), int(length), int(at)
            runs = src.view(wt)[first:first + outer * length].reshape(outer, length)
            spots = at + row * np.arange(outer, dtype=np.int64)[:, None] + np.arange(length)
            d[spots] = runs

    return run


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
        refs = [_ref_of(a._buf) for a in group]  # computes pending inputs first
        # a later group reads the output too: a group that failed marked it failed, and the
        # next one then fails with that cause (the last one's future is the array's)
        reads = _distinct(refs if first is None else [*refs, out_ref])
        new = out_ref if first is None else None
        if all(is_c_contiguous(a.shape, a._strides) for a in group):
            fut = _send_runs(dev, group, refs, axis, shape, start, out_ref, reads, new)
        else:
            fut = _send_strided(dev, group, refs, axis, shape, start, ends, out_ref, reads,
                                new)
        if first is None:
            first = fut
        start += end
    out = Array(first, shape, dtype, dev)
    if len(arrays) > GROUP:
        out._wrote(fut)
    return out


def _send_runs(dev: Any, group: list[Array], refs: list[Any], axis: int,
               shape: tuple[int, ...], start: int, out_ref: Any, reads: tuple,
               new: Any) -> Any:
    """Launch the runs kernel for ``group`` (C-contiguous inputs, read through ``refs``), the
    first of which lands at ``start`` along ``axis`` of the output; ``new``: the output's
    reference where this launch allocates it."""
    width = group[0].dtype.itemsize
    tail = math.prod(shape[axis + 1:])
    outer = math.prod(shape[:axis])
    args: list[Any] = [outer, out_ref, shape[axis] * tail]
    longest = 0
    at = start
    for a, ref in zip(group, refs):
        run = a.shape[axis] * tail
        args += [ref, a._offset, run, at * tail]
        at += a.shape[axis]
        longest = max(longest, outer * run)
    k = len(group)
    # a thread a 16-byte vector of the longest input
    grid = (max(1, min(-(-longest * width // (_BLOCK * 16)), _MAX_GRID - 1)), k, 1)
    return _send(dev, ("concat_runs", width, k), lambda: _render_runs(width, k), grid, _BLOCK,
                 tuple(args), reads, (out_ref,), new)


def _send_strided(dev: Any, group: list[Array], refs: list[Any], axis: int,
                  shape: tuple[int, ...], start: int, ends: list[int], out_ref: Any,
                  reads: tuple, new: Any) -> Any:
    """Launch the strided kernel for ``group`` (any layouts; ``ends``: the inputs' ends along
    ``axis``, counted from ``start``)."""
    ndim = len(shape)
    ostr = _c_strides(shape)
    width = group[0].dtype.itemsize
    dims = shape[:axis] + (ends[-1],) + shape[axis + 1:]
    n = math.prod(dims)
    args: list[Any] = [n, out_ref, start * ostr[axis]]
    for a, ref, e in zip(group, refs, ends):
        args += [ref, a._offset, e, *a._strides]
    args += [*dims, *ostr]
    k = len(group)
    grid = max(1, min(-(-n // _BLOCK), _MAX_GRID))
    return _send(dev, ("concat", width, ndim, axis, k),
                 lambda: _render(width, ndim, axis, k), grid, _BLOCK, tuple(args), reads,
                 (out_ref,), new)
