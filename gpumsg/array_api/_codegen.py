"""The kernel generator: one description -> CUDA source (compiled with NVRTC) and its NumPy twin.

A kernel is specialised by the dtypes of its operands, by its layout (``contig``: every array
operand is C-contiguous over the iteration space, indexed by the loop counter alone; else the
number of dimensions left after merging the dimensions that every operand walks contiguously,
with the extents and each operand's strides as arguments, broadcast dimensions having stride 0)
and by its index width (32-bit unless an offset can pass 2**31). The loop is grid-stride.

Arguments of a generated kernel, in order: the element count(s); a pointer per array operand
(outputs first); the bits of each scalar operand as ``unsigned long long`` (two for complex128);
each array operand's element offset; the extents; the strides. The simulator registers the
NumPy twin of each kernel under its name (:func:`gpumsg.libs.nvrtc._sim.sim_kernel`): it takes
the same arguments, rebuilds each operand as a strided NumPy view and evaluates the same parsed
description (:mod:`._expr`).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import math
import struct
import threading
import warnings
import weakref
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
from numpy.lib.stride_tricks import as_strided

from ..errors import InvalidMessage
from ..libs.nvrtc._sim import SIM_CHECKS, SIM_KERNELS, Recipe, sim_kernel
from ..messages._base import BufRef
from ..messages.nvrtc import Launch
from . import _dtypes as D
from ._expr import PRELUDE, Program, parse, render_c, run_program

__all__ = ["ElementwiseSpec", "ReductionSpec", "Operand", "launch_elementwise",
           "elementwise_new", "launch_reduction", "reduction_new", "render_elementwise",
           "render_reduction", "scalar_bits"]

BLOCK = 256
#: cap of the grid of a grid-stride loop (enough to fill any current GPU many times over)
MAX_GRID = 1 << 16
#: 32-bit indexing below this: a grid-stride step (at most MAX_GRID * BLOCK * UNROLL) past
#: the last index must not overflow
_INT32_LIMIT = (1 << 31) - (1 << 27)

_parsed: dict[str, Program] = {}
_sources: dict[tuple, tuple[str, str]] = {}
#: device -> {kernel name: future of its Kernel}; a closed device's entries go with it
_kernels: weakref.WeakKeyDictionary[Any, dict[str, Any]] = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def program(text: str) -> Program:
    found = _parsed.get(text)
    if found is None:
        found = _parsed[text] = parse(text)
    return found


@dataclass(frozen=True)
class Operand:
    """An array operand as a kernel sees it: its buffer (a GpuBuffer or its future), its
    dtype, its element offset in the buffer and its strides (elements) over the iteration
    dimensions."""

    buffer: Any
    dtype: np.dtype
    offset: int
    strides: tuple[int, ...]


def check_names(prog: Program, allowed: Any, field: str, what: str) -> None:
    """Raise InvalidMessage (``field``) where ``prog`` reads a name that is none of
    ``allowed`` and none of the language's constants: the kernel would not compile on a GPU,
    and its simulator twin would fail when it ran (a launch failure, which poisons the
    device), so it is refused before anything is sent."""
    for name in prog.free:
        if name not in allowed:
            raise InvalidMessage(f"{field}: {what} reads {name!r}, which is not one of "
                                 f"{', '.join(sorted(allowed))}", field=field)


def _field_names(cls: type) -> tuple[str, ...]:
    """A spec class's dataclass field names, in order."""
    names = _FIELD_NAMES.get(cls)
    if names is None:
        names = _FIELD_NAMES[cls] = tuple(f.name for f in dataclasses.fields(cls))
    return names


#: spec class -> its dataclass field names, in order
_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


def _hash_once(spec: Any) -> int:
    """A spec's hash, computed on first use and kept: specs key the plan caches on every call,
    and hashing their dtypes each time cost more than the rest of a cache lookup. The fields
    are read by name: the instance dict also holds what is kept beside them (``_hash``,
    ew_vector's ``_vec``), which another thread may add meanwhile, so it is never iterated (a
    dict that grows under an iteration raises)."""
    fields = spec.__dict__
    h = fields.get("_hash")
    if h is None:
        h = hash(tuple([fields[name] for name in _field_names(type(spec))]))
        object.__setattr__(spec, "_hash", h)
    return h


def _state_without_hash(spec: Any) -> dict[str, Any]:
    """A spec's pickled state: its fields, not what is kept beside them (strings hash
    differently in another process); read by name, as :func:`_hash_once` does."""
    fields = spec.__dict__
    return {name: fields[name] for name in _field_names(type(spec))}


@dataclass(frozen=True)
class ElementwiseSpec:
    """``out_i = f(in_j)``: ``text`` is the operation (statements), ``ins`` the input names with
    their dtypes and whether each is a scalar argument, ``casts`` the compute dtype each input is
    converted to before the operation, ``outs`` the output names and dtypes."""

    name: str
    text: str
    ins: tuple[tuple[str, np.dtype, bool], ...]
    casts: tuple[np.dtype, ...]
    outs: tuple[tuple[str, np.dtype], ...]

    __hash__ = _hash_once
    __getstate__ = _state_without_hash


@dataclass(frozen=True)
class ReductionSpec:
    """``out = post(reduce over the reduced dims of map(in_j)))``: ``map_expr`` is an
    expression of the inputs, ``_j`` (the linear index in the reduced dims) and ``_n`` (their
    element count); ``reduce_expr`` combines ``a`` and ``b``; ``post`` is statements assigning
    the output from ``a`` (the result) and ``_n``; ``acc`` the accumulator dtype; the identity
    is passed as a scalar (its value is not part of the kernel). ``pre``: statements run on
    each element's inputs before the map (a fused element-wise chain defining ``x``)."""

    name: str
    map_expr: str
    reduce_expr: str
    post: str
    ins: tuple[tuple[str, np.dtype, bool], ...]
    casts: tuple[np.dtype, ...]
    acc: np.dtype
    out: tuple[str, np.dtype]
    pre: str = ""

    __hash__ = _hash_once
    __getstate__ = _state_without_hash


# -- scalars --------------------------------------------------------------------------------------
def _compute(dt: np.dtype) -> np.dtype:
    return D.CTYPE[dt][2]


#: struct formats of the compute types whose Python scalars convert without NumPy
_PACK = {np.dtype(np.float32): struct.Struct("<f").pack,
         np.dtype(np.float64): struct.Struct("<d").pack}
_INT_BITS = {dt: 8 * dt.itemsize for dt in (*D.SIGNED, *D.UNSIGNED)}


def scalar_bits(value: Any, dtype: np.dtype) -> tuple[int, ...]:
    """The bits of ``value`` converted to ``dtype``'s compute type, as kernel arguments."""
    cdt = _compute(dtype)
    t = type(value)
    # the common cases without NumPy (the same bits: a float rounded to nearest as NumPy's
    # cast rounds it, an int that fits its type taken modulo 2**bits)
    if t is float:
        pack = _PACK.get(cdt)
        if pack is not None:
            try:
                return (int.from_bytes(pack(value), "little"),)
            except OverflowError:  # beyond float32's range: NumPy's cast answers inf
                pass
    elif t is int:
        bits = _INT_BITS.get(cdt)
        if bits is not None:
            signed = cdt.kind == "i"
            lo = -(1 << (bits - 1)) if signed else 0
            if lo <= value < lo + (1 << bits):
                return (value & ((1 << bits) - 1),)
        else:
            pack = _PACK.get(cdt)
            if pack is not None and -(1 << 24) <= value <= 1 << 24:  # exact in either float
                return (int.from_bytes(pack(float(value)), "little"),)
    raw = np.array(value).astype(cdt).reshape(1).view(np.uint8)
    if cdt.itemsize == 16:
        return tuple(int(v) for v in raw.view(np.uint64))
    padded = np.zeros(8, np.uint8)
    padded[:cdt.itemsize] = raw
    return (int(padded.view(np.uint64)[0]),)


def _decode(bits: list[Any], dtype: np.dtype) -> Any:
    cdt = _compute(dtype)
    raw = np.array([int(b) for b in bits], np.uint64).view(np.uint8)[:cdt.itemsize]
    return raw.view(cdt)[0]


def _scalar_decl(var: str, dt: np.dtype, params: list[str], cparams: list[str]) -> str:
    """C statements that make scalar ``var`` of compute type from its bits arguments."""
    cdt = _compute(dt)
    ctype = D.CTYPE[dt][1]
    if cdt.itemsize == 16:
        params += [f"{var}_b0", f"{var}_b1"]
        cparams += [f"unsigned long long {var}_b0", f"unsigned long long {var}_b1"]
        return (f"const {ctype} {var}_s(__longlong_as_double((long long){var}_b0), "
                f"__longlong_as_double((long long){var}_b1));")
    params.append(f"{var}_b")
    cparams.append(f"unsigned long long {var}_b")
    b = f"{var}_b"
    if cdt == np.complex64:
        return (f"const {ctype} {var}_s(__int_as_float((int)(unsigned int)({b} & 0xffffffffULL)),"
                f" __int_as_float((int)(unsigned int)({b} >> 32)));")
    if cdt == np.float32:
        return f"const float {var}_s = __int_as_float((int)(unsigned int){b});"
    if cdt == np.float64:
        return f"const double {var}_s = __longlong_as_double((long long){b});"
    if cdt == np.bool_:
        return f"const bool {var}_s = ({b} & 1ULL) != 0;"
    return f"const {ctype} {var}_s = ({ctype}){b};"


# -- layout ---------------------------------------------------------------------------------------
def simplify(shape: tuple[int, ...], strides: list[tuple[int, ...]]) -> tuple[
        tuple[int, ...], list[tuple[int, ...]]]:
    """Drop extent-1 dimensions and merge neighbours that every operand walks as one."""
    keep = [k for k, d in enumerate(shape) if d != 1]
    shp = [shape[k] for k in keep]
    sts = [[s[k] for k in keep] for s in strides]
    k = len(shp) - 1
    while k > 0:
        if all(s[k - 1] == s[k] * shp[k] for s in sts):
            shp[k - 1] *= shp[k]
            del shp[k]
            for s in sts:
                s[k - 1] = s[k]
                del s[k]
        k -= 1
    return tuple(shp), [tuple(s) for s in sts]


def _reach(op: Operand, shape: tuple[int, ...]) -> int:
    return op.offset + sum(abs(s) * (d - 1) for s, d in zip(op.strides, shape) if d > 0)


def _wide(n: int, ops: list[Operand], shape: tuple[int, ...]) -> bool:
    return n >= _INT32_LIMIT or any(_reach(op, shape) >= _INT32_LIMIT for op in ops)


# -- elementwise ----------------------------------------------------------------------------------
def _index_code(idx: str, counter: str, ndim: int, names: list[str], dims: str,
                strides: str, itype: str, indent: str) -> list[str]:
    """C lines that split ``counter`` over ``ndim`` extents ``{dims}{k}`` and sum each operand's
    ``{strides}{op}_{k}`` into ``{idx}{op}``."""
    lines = [f"{indent}{itype} {idx}{op} = 0;" for op in names]
    if ndim == 0:
        return lines
    lines.append(f"{indent}{{ {itype} r_ = {counter};")
    for k in range(ndim - 1, 0, -1):
        ext = f"({itype}){dims}{k}"
        lines.append(f"{indent}  {{ {itype} c_ = r_ % {ext}; r_ /= {ext};")
        lines += [f"{indent}    {idx}{op} += c_ * ({itype}){strides}{op}_{k};" for op in names]
        lines.append(f"{indent}  }}")
    lines += [f"{indent}  {idx}{op} += r_ * ({itype}){strides}{op}_0;" for op in names]
    lines.append(f"{indent}}}")
    return lines


def _statements(prog: Program, declared: set[str], indent: str) -> list[str]:
    lines = []
    for name, node in prog.statements:
        if name in declared:
            lines.append(f"{indent}{name} = {render_c(node)};")
        else:
            declared.add(name)
            lines.append(f"{indent}auto {name} = {render_c(node)};")
    return lines


def render_elementwise(spec: ElementwiseSpec, layout: Any, wide: bool,
                       vec: int = 1) -> tuple[str, str, tuple[str, ...]]:
    """(kernel name, CUDA source, parameter kinds) of ``spec`` for ``layout`` (``"contig"`` or
    the number of dimensions) and index width. ``vec`` > 1 (``contig`` only): where every array
    operand starts aligned to its ``vec`` elements' bytes, a thread moves ``vec`` elements of
    each with one load or store (16 bytes for the widest operand), the last ``n % vec`` one by
    one; otherwise the element loop runs."""
    key = ("ew", spec, layout, wide) if vec == 1 else ("ew", spec, layout, wide, vec)
    found = _sources.get(key)
    if found is not None:
        return found  # type: ignore[return-value]
    prog = program(spec.text)
    check_names(prog, {n for n, _, _ in spec.ins} | {n for n, _ in spec.outs}, "operation",
                f"the element-wise operation {spec.name!r}")
    itype = "long long" if wide else "int"
    arrays = [(f"o{i}", dt) for i, (_, dt) in enumerate(spec.outs)]
    arrays += [(f"i{j}", dt) for j, (_, dt, sc) in enumerate(spec.ins) if not sc]
    cparams = ["long long n"]
    kinds = ["i64"]
    for i, (_, dt) in enumerate(spec.outs):
        cparams.append(f"{D.CTYPE[dt][0]}* __restrict__ p_o{i}")
        kinds.append("ptr")
    for j, (_, dt, sc) in enumerate(spec.ins):
        if not sc:
            cparams.append(f"const {D.CTYPE[dt][0]}* __restrict__ p_i{j}")
            kinds.append("ptr")
    scal_lines: list[str] = []
    for j, (_, dt, sc) in enumerate(spec.ins):
        if sc:
            params: list[str] = []
            scal_lines.append("  " + _scalar_decl(f"i{j}", dt, params, cparams))
            kinds += ["u64"] * len(params)
    for op, _ in arrays:
        cparams.append(f"long long off_{op}")
        kinds.append("i64")
    names = [op for op, _ in arrays]
    ndim = 0 if layout == "contig" else int(layout)
    for k in range(ndim):
        cparams.append(f"long long d{k}")
        kinds.append("i64")
    for op in names:
        for k in range(ndim):
            cparams.append(f"long long s{op}_{k}")
            kinds.append("i64")
    digest = hashlib.sha256(repr(key).encode()).hexdigest()[:16]
    kname = f"gm_{spec.name}_{digest}"
    body = [f'extern "C" __global__ void {kname}({", ".join(cparams)}) {{', *scal_lines]
    if layout == "contig":
        body += [f"  const {itype} T_ = ({itype})blockDim.x * gridDim.x;",
                 f"  {itype} i = ({itype})blockIdx.x * blockDim.x + threadIdx.x;"]
        if vec > 1:
            body += _vector_loop(spec, prog, vec, itype)
        # UNROLL elements a thread, T_ apart (coalesced), every load issued before any
        # arithmetic so that they are in flight together; then the rest one at a time
        body += [f"  for (; (long long)i + {UNROLL - 1}LL * T_ < n; i += {UNROLL} * T_) {{"]
        for k in range(UNROLL):
            at = "i" if k == 0 else f"i + {k} * T_"
            body += [f"    const {itype} x{op}_u{k} = {at};" for op in names]
            body += _loads(spec, f"_u{k}", "    ", lambda j, k=k: f"xi{j}_u{k}")
        for k in range(UNROLL):
            body.append("    {")
            body += _element(spec, prog, f"_u{k}", "      ", lambda op, k=k: f"x{op}_u{k}")
            body.append("    }")
        body += ["  }", f"  for (; i < ({itype})n; i += T_) {{"]
        body += _loads(spec, "_u", "    ", lambda j: "i")
        body += _element(spec, prog, "_u", "    ", lambda op: "i")
        body += ["  }", "}"]
    else:
        body += [f"  for ({itype} i = ({itype})blockIdx.x * blockDim.x + threadIdx.x;"
                 f" i < ({itype})n; i += ({itype})blockDim.x * gridDim.x) {{"]
        body += _index_code("x", "i", ndim, names, "d", "s", itype, "    ")
        body += _loads(spec, "_u", "    ", lambda j: f"xi{j}")
        body += _element(spec, prog, "_u", "    ", lambda op: f"x{op}")
        body += ["  }", "}"]
    source = PRELUDE + "\n" + "\n".join(body) + "\n"
    result = (kname, source, tuple(kinds))
    _sources[key] = result
    if kname not in SIM_KERNELS:
        sim_kernel(kname)(Recipe(_elementwise_twin, spec, layout))
        SIM_CHECKS[kname] = functools.partial(_probe_elementwise, spec)
    return result


#: elements a thread of a contiguous element-wise kernel handles per round
UNROLL = 4
#: the unsigned type moving a vector of each byte width in one load or store
_WORD = {1: "unsigned char", 2: "unsigned short", 4: "unsigned int", 8: "uint2", 16: "uint4"}


def ew_vector(spec: ElementwiseSpec) -> int:
    """Elements a thread of a contiguous element-wise kernel moves per load: 16 bytes of the
    widest array operand (1: no vector loads, for 16-byte elements). Kept on the spec: every
    contiguous launch asks."""
    vec = spec.__dict__.get("_vec")
    if vec is None:
        widest = max([dt.itemsize for _, dt in spec.outs] +
                     [dt.itemsize for _, dt, sc in spec.ins if not sc])
        vec = max(1, 16 // widest)
        object.__setattr__(spec, "_vec", vec)
    return vec


def _vector_loop(spec: ElementwiseSpec, prog: Program, vec: int, itype: str) -> list[str]:
    """The vector rounds of a contiguous kernel (see :func:`render_elementwise`): a uniform
    check of every operand's alignment, one vector a thread a round, then ``i`` set past the
    vectors for the element loop that follows, which finishes the last ``n % vec``."""
    ops = [(f"o{i}", dt) for i, (_, dt) in enumerate(spec.outs)]
    ops += [(f"i{j}", dt) for j, (_, dt, sc) in enumerate(spec.ins) if not sc]
    word = {op: _WORD[vec * dt.itemsize] for op, dt in ops}
    aligned = " && ".join(f"((unsigned long long)(p_{op} + off_{op}) % {vec * dt.itemsize}"
                          " == 0)" for op, dt in ops)
    lines = [f"  if ({aligned}) {{",
             f"    const {itype} nv_ = ({itype})(n / {vec});",
             f"    for ({itype} v_ = i; v_ < nv_; v_ += T_) {{"]
    for j, (_, _, sc) in enumerate(spec.ins):
        if not sc:
            lines.append(f"      const {word[f'i{j}']} r_i{j} = *(const {word[f'i{j}']}*)"
                         f"(p_i{j} + off_i{j} + v_ * {vec});")
    lines += [f"      {word[f'o{i}']} w_o{i};" for i in range(len(spec.outs))]
    for e in range(vec):
        lines.append("      {")
        for j, ((var, dt, sc), cdt) in enumerate(zip(spec.ins, spec.casts)):
            if not sc:
                ctype = D.CTYPE[cdt][1]
                load = D.CTYPE[dt][3].format(f"((const {D.CTYPE[dt][0]}*)&r_i{j})[{e}]")
                lines.append(f"        const {ctype} {var}_v{e} = ({ctype})({load});")
        lines += _element(spec, prog, f"_v{e}", "        ", None,
                          lambda i, e=e: f"(({D.CTYPE[spec.outs[i][1]][0]}*)&w_o{i})[{e}]")
        lines.append("      }")
    lines += [f"      *({word[f'o{i}']}*)(p_o{i} + off_o{i} + v_ * {vec}) = w_o{i};"
              for i in range(len(spec.outs))]
    lines += ["    }", f"    i = ({itype})(n / {vec} * {vec}) + i;", "  }"]
    return lines


def _loads(spec: ElementwiseSpec, suffix: str, indent: str, index: Any) -> list[str]:
    """C lines loading each array input into ``<name><suffix>`` (its compute type);
    ``index(j)`` is input j's element index expression."""
    lines = []
    for j, ((var, dt, sc), cdt) in enumerate(zip(spec.ins, spec.casts)):
        if not sc:
            ctype = D.CTYPE[cdt][1]
            load = D.CTYPE[dt][3].format(f"p_i{j}[off_i{j} + {index(j)}]")
            lines.append(f"{indent}const {ctype} {var}{suffix} = ({ctype})({load});")
    return lines


def _element(spec: ElementwiseSpec, prog: Program, suffix: str, indent: str,
             index: Any, lvalue: Any = None) -> list[str]:
    """C lines computing one element from the loaded ``<name><suffix>`` values and storing
    the outputs (``index(op)``: output op's element index expression; or ``lvalue(i)``: where
    output i's value goes)."""
    lines = []
    declared: set[str] = set()
    for j, ((var, _, sc), cdt) in enumerate(zip(spec.ins, spec.casts)):
        ctype = D.CTYPE[cdt][1]
        value = f"({ctype})(i{j}_s)" if sc else f"{var}{suffix}"
        lines.append(f"{indent}{ctype} {var} = {value};")
        declared.add(var)
    for var, dt in spec.outs:
        if var not in declared:
            lines.append(f"{indent}{D.CTYPE[dt][1]} {var};")
            declared.add(var)
    lines += _statements(prog, declared, indent)
    for i, (var, dt) in enumerate(spec.outs):
        store = D.CTYPE[dt][4].format(f"({D.CTYPE[dt][1]})({var})")
        target = lvalue(i) if lvalue is not None else f"p_o{i}[off_o{i} + {index(f'o{i}')}]"
        lines.append(f"{indent}{target} = {store};")
    return lines


def _view(flat: np.ndarray, dt: np.dtype, offset: int, shape: tuple[int, ...],
          strides: tuple[int, ...]) -> np.ndarray:
    if dt == D.bool:
        flat = flat.view(np.bool_)
    if any(d == 0 for d in shape):
        return np.empty(shape, flat.dtype)
    if strides == _c_strides(shape):  # a slice: no as_strided (a short one fails to reshape)
        return flat[offset:offset + math.prod(shape)].reshape(shape)
    item = flat.dtype.itemsize
    return as_strided(flat[offset:], shape, tuple(s * item for s in strides))


def _probe(name: str, field: str, run: Any) -> None:
    """Run ``run`` (a description evaluated on one element of each input); what it raises is
    an InvalidMessage of ``field`` (see ``SIM_CHECKS``)."""
    try:
        # quiet, as the twin's evaluation is: a check has nothing to warn about
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            run()
    except InvalidMessage:
        raise
    except Exception as exc:  # noqa: BLE001 - NumPy refusing the types, named to the caller
        raise InvalidMessage(f"{field}: {name!r} cannot be computed for its operands' dtypes "
                             f"({type(exc).__name__}: {exc})", field=field) from None


def _one(dt: np.dtype) -> np.ndarray:
    return np.ones(1, _compute(dt))


def _probe_elementwise(spec: ElementwiseSpec) -> None:
    """The simulator's stand-in for compiling ``spec`` (``SIM_CHECKS``): its twin's program on
    one element of each input, converted as the twin converts."""
    def run() -> None:
        env: dict[str, Any] = {var: _one(cdt) for (var, _, _), cdt in zip(spec.ins, spec.casts)}
        run_program(program(spec.text), env)
        for var, dt in spec.outs:
            np.asarray(env[var]).astype(_compute(dt))

    _probe(spec.name, "operation", run)


def _probe_reduction(spec: ReductionSpec) -> None:
    """:func:`_probe_elementwise` for a reduction: the pre-statements and the map on one
    element, the combiner on two mapped values, the post-statements on the result."""
    def run() -> None:
        env: dict[str, Any] = {var: _one(cdt) for (var, _, _), cdt in zip(spec.ins, spec.casts)}
        env.update(_j=np.zeros(1, np.int64), _n=np.int64(1))
        if spec.pre:
            run_program(program(spec.pre), env)
        run_program(program(f"v_ = {spec.map_expr}"), env)
        acc = _compute(spec.acc)
        mapped = np.asarray(env["v_"]).astype(acc)
        both = {"a": mapped, "b": mapped}
        run_program(program(f"r_ = {spec.reduce_expr}"), both)
        after = {"a": np.asarray(both["r_"]).astype(acc), "_n": np.int64(1)}
        run_program(program(spec.post), after)
        np.asarray(after[spec.out[0]]).astype(_compute(spec.out[1]))

    _probe(spec.name, "map_expr", run)


def _elementwise_twin(spec: ElementwiseSpec, layout: Any) -> Any:
    prog = program(spec.text)
    ndim = 0 if layout == "contig" else int(layout)
    nout = len(spec.outs)
    n_arr_in = sum(1 for _, _, sc in spec.ins if not sc)
    nscal = [2 if _compute(dt).itemsize == 16 else 1 for _, dt, sc in spec.ins if sc]
    nptr = nout + n_arr_in
    # per input: (name, scalar?, its dtype, the compute dtype it is converted to)
    inputs = [(var, sc, dt, _compute(cdt)) for (var, dt, sc), cdt in zip(spec.ins, spec.casts)]
    outputs = [(var, dt, _compute(dt)) for var, dt in spec.outs]

    def run(info: Any, n: Any, *args: Any) -> None:
        n = int(n)
        ptrs = args[:nptr]
        pos = nptr
        scal_bits = []
        for c in nscal:
            scal_bits.append(args[pos:pos + c])
            pos += c
        offs = [int(v) for v in args[pos:pos + nptr]]
        pos += nptr
        if ndim == 0:
            shape: tuple[int, ...] = (n,)
            strides = None
        else:
            shape = tuple(int(v) for v in args[pos:pos + ndim])
            pos += ndim
            strides = []
            for _ in range(nptr):
                strides.append(tuple(int(v) for v in args[pos:pos + ndim]))
                pos += ndim

        def view(k: int, dt: np.dtype) -> np.ndarray:
            if strides is None:  # contiguous: a slice (a short one fails the store)
                flat = ptrs[k].view(np.bool_) if dt == D.bool else ptrs[k]
                return flat[offs[k]:offs[k] + n]
            return _view(ptrs[k], dt, offs[k], shape, strides[k])

        env: dict[str, Any] = {}
        a = nout
        s = 0
        for var, sc, dt, comp in inputs:
            if sc:
                env[var] = np.asarray(_decode(scal_bits[s], dt)).astype(comp)
                s += 1
            else:
                # a view where no conversion is needed: the program only reads its inputs
                env[var] = view(a, dt).astype(comp, copy=False)
                a += 1
        with np.errstate(all="ignore"):
            run_program(prog, env)
            for i, (var, dt, comp) in enumerate(outputs):
                dst = view(i, dt)
                val = np.asarray(env[var]).astype(comp, copy=False).astype(dst.dtype,
                                                                             copy=False)
                dst[...] = val if val.shape == shape else np.broadcast_to(val, shape)

    return run


# -- reductions -----------------------------------------------------------------------------------
#: warp shuffles of every accumulator type (a reduction's block combines its warps' values)
SHUFFLE = r"""
#define GM_SH(T, W) __device__ __forceinline__ T gm_shfl(T v, int d) { \
  return (T)__shfl_down_sync(0xffffffffu, (W)v, d); }
GM_SH(float, float) GM_SH(double, double) GM_SH(int, int) GM_SH(unsigned int, unsigned int)
GM_SH(long long, long long) GM_SH(unsigned long long, unsigned long long)
GM_SH(signed char, int) GM_SH(short, int) GM_SH(unsigned char, unsigned int)
GM_SH(unsigned short, unsigned int)
__device__ __forceinline__ bool gm_shfl(bool v, int d) {
  return __shfl_down_sync(0xffffffffu, (int)v, d) != 0; }
template <class F> __device__ __forceinline__ gm_cplx<F> gm_shfl(gm_cplx<F> v, int d) {
  return gm_cplx<F>(gm_shfl(v.re, d), gm_shfl(v.im, d)); }
template <class T> __device__ __forceinline__ T gm_ldv(const T* p) {
  return *(const volatile T*)p; }
template <class F> __device__ __forceinline__ gm_cplx<F> gm_ldv(const gm_cplx<F>* p) {
  const volatile F* q = (const volatile F*)p; return gm_cplx<F>(q[0], q[1]); }
"""
#: threads of a column reduction's block: COLS outputs side by side, BLOCK // COLS lanes each
COLS = 32
#: about how many blocks a reduction should keep busy before it splits its rows over blocks
FILL_BLOCKS = 1024
#: the same for a vectorised reduction: its blocks read 16 bytes a load, and with the whole
#: grid resident at once (4 blocks an SM on a 132-SM H100/H200) no wave of blocks trails the
#: others. Measured on an H200 (GPU time, 64 Mi f32): a whole sum 65 µs at 512-528 blocks
#: against 70 µs for the element loop at 1024 (CuPy 66, torch 70); sum(exp(x*y+z)*w) 244 µs
#: against 270; 1056 blocks of the 40-register chain kernel ran as 1.3 waves (262 µs). The
#: element loop needs its 1024 (87 µs at 528, 131 at 264), and so do columns (83 µs at 512
#: blocks, 67 at 1024). That chain kernel reads at the memory's pace: a hand-written kernel of
#: the same chain (H200, 2026-11-28), swept over chunked and grid-strided blocks, 2-8 loads in
#: flight, plain, read-only, streaming and no-L1-allocate loads and 128-512 threads, did no
#: better than 243.9 µs (4.40 TB/s); 2112 blocks took 270-288.
VEC_FILL_BLOCKS = 512
#: bytes at the start of a device's reduction workspace holding one arrival counter per output
#: group of a split reduction (a split has fewer than FILL_BLOCKS groups); the chunks' partial
#: results follow
WS_COUNTERS = 4 * FILL_BLOCKS
#: 16-byte loads a thread of a vectorised reduction issues before it combines their elements
#: (per array input; at 528 blocks on an H200 a whole sum took 65.2 µs with 4, 67.3 with 2
#: and 75.4 with 1, while the four-input fused chain took 243-244 µs with any of them)
VEC_UNROLL = 4


def render_reduction(spec: ReductionSpec, ndo: int, ndr: int, wide: bool,
                     cols: bool = False, split: bool = False, vec: int = 1) -> tuple[
        str, str, tuple[str, ...]]:
    """(name, source, parameter kinds) of a reduction over ``ndr`` reduced dimensions with
    ``ndo`` output dimensions.

    Rows (``cols`` false): a block per (output element, chunk of its reduced elements); each
    thread combines a strided share, then the block combines by warp shuffles and one shared
    slot per warp. Columns: a block per (COLS neighbouring outputs, chunk): the threads of a
    warp read COLS neighbouring outputs' elements (coalesced where outputs are contiguous in the
    input and the reduced dimensions are not), BLOCK // COLS lanes split the reduced elements
    and shared memory combines the lanes. ``split``: the reduced elements of each output are cut
    into ``nsplit`` chunks, one block each, in one launch: a block stores its chunk's unfinished
    result (accumulator type, ``[output, chunk]``) in the workspace (the last parameter: one
    counter per output group, then the chunks' results), and the block that arrives last at its
    group's counter (fenced, counted atomically) combines the group's chunks, post-processes and
    stores the outputs, and sets the counter back to zero for the next launch. The counters are
    zero when the workspace is made; the stream's order keeps two launches from sharing them.

    ``vec`` > 1 (rows, one reduced dimension of stride 1 in every array input, inputs of one
    item size, chunks a multiple of ``vec``): a block whose inputs all start 16-byte aligned
    reads them 16 bytes (``vec`` elements) a load, VEC_UNROLL loads a round in flight, and the
    last elements one by one; a misaligned block (an offset view) takes the element loop.
    """
    key = ("red", spec, ndo, ndr, wide, cols, split, vec)
    found = _sources.get(key)
    if found is not None:
        return found  # type: ignore[return-value]
    itype = "long long" if wide else "int"
    acc_t = D.CTYPE[spec.acc][1]
    out_var, out_dt = spec.out
    o_ct = D.CTYPE[out_dt][0]
    cparams = ["long long nout", "long long nred", "long long nn", "long long nsplit",
               "long long chunk", f"{o_ct}* __restrict__ p_o0"]
    kinds = ["i64", "i64", "i64", "i64", "i64", "ptr"]
    arr = [j for j, (_, _, sc) in enumerate(spec.ins) if not sc]
    for j in arr:
        cparams.append(f"const {D.CTYPE[spec.ins[j][1]][0]}* __restrict__ p_i{j}")
        kinds.append("ptr")
    scal_lines = []
    params: list[str] = []
    scal_lines.append("  " + _scalar_decl("ident", spec.acc, params, cparams))
    kinds += ["u64"] * len(params)
    for j, (_, dt, sc) in enumerate(spec.ins):
        if sc:
            params = []
            scal_lines.append("  " + _scalar_decl(f"i{j}", dt, params, cparams))
            kinds += ["u64"] * len(params)
    names_o = ["o0"] + [f"i{j}" for j in arr]
    names_i = [f"i{j}" for j in arr]
    for op in names_o:
        cparams.append(f"long long off_{op}")
        kinds.append("i64")
    for k in range(ndo):
        cparams.append(f"long long d{k}")
        kinds.append("i64")
    for k in range(ndr):
        cparams.append(f"long long e{k}")
        kinds.append("i64")
    for op in names_o:
        for k in range(ndo):
            cparams.append(f"long long s{op}_{k}")
            kinds.append("i64")
    for op in names_i:
        for k in range(ndr):
            cparams.append(f"long long t{op}_{k}")
            kinds.append("i64")
    if split:
        cparams.append("unsigned char* __restrict__ p_ws")
        kinds.append("ptr")
    digest = hashlib.sha256(repr(key).encode()).hexdigest()[:16]
    kname = f"gm_{spec.name}_{digest}"
    _check_reduction_names(spec)
    mapped = render_c(program(f"v_ = {spec.map_expr}").statements[0][1])
    reduced = render_c(program(f"r_ = {spec.reduce_expr}").statements[0][1])

    def combine(other: str, ind: str) -> list[str]:
        return [f"{ind}{{ const {acc_t} a = acc; const {acc_t} b = {other};",
                f"{ind}  acc = ({acc_t})({reduced}); }}"]

    lanes = "blockDim.x" if not cols else f"(blockDim.x / {COLS})"
    body = [f'extern "C" __global__ void {kname}({", ".join(cparams)}) {{', *scal_lines,
            f"  __shared__ __align__(16) unsigned char sh_raw[{BLOCK} * sizeof({acc_t})];",
            f"  {acc_t}* sh = ({acc_t}*)sh_raw;",
            *(["  __shared__ bool last_block_;",
               "  unsigned int* const cnt_ = (unsigned int*)p_ws;",
               f"  {acc_t}* const part_ = ({acc_t}*)(p_ws + {WS_COUNTERS});"] if split else []),
            "  const long long _n = nn;",
            f"  const {itype} groups = " + (f"({itype})nout;" if not cols else
                                            f"({itype})((nout + {COLS - 1}) / {COLS});"),
            f"  const {itype} lane = " + ("threadIdx.x;" if not cols else
                                          f"threadIdx.x / {COLS};"),
            f"  for ({itype} bo = blockIdx.x; bo < groups * ({itype})nsplit; bo += gridDim.x) {{",
            f"    const {itype} g = bo / ({itype})nsplit;",
            f"    const {itype} c = bo - g * ({itype})nsplit;",
            f"    const {itype} o = " + ("g;" if not cols else
                                         f"g * {COLS} + (threadIdx.x % {COLS});"),
            f"    const {itype} jlo = c * ({itype})chunk;",
            # compared in 64 bits: the last chunk's end may pass a 32-bit index
            f"    const {itype} jhi = (long long)jlo + chunk < nred ? "
            f"({itype})(jlo + chunk) : ({itype})nred;",
            f"    {acc_t} acc = ident_s;",
            "    if (o < nout) {"]
    body += _index_code("x", "o", ndo, names_o, "d", "s", itype, "      ")
    def loads(suffix: str, at: str, ind: str) -> list[str]:
        lines = [f"{ind}const {itype} j{suffix} = {at};"]
        lines += _index_code(f"y{suffix}_", f"j{suffix}", ndr, names_i, "e", "t", itype, ind)
        for j, ((var, dt, sc), cdt) in enumerate(zip(spec.ins, spec.casts)):
            if not sc:
                ctype = D.CTYPE[cdt][1]
                load = D.CTYPE[dt][3].format(f"p_i{j}[off_i{j} + xi{j} + y{suffix}_i{j}]")
                lines.append(f"{ind}const {ctype} {var}{suffix} = ({ctype})({load});")
        return lines

    def step(suffix: str, ind: str) -> list[str]:
        lines = [f"{ind}{{", f"{ind}  const long long _j = j{suffix};"]
        for j, ((var, _, sc), cdt) in enumerate(zip(spec.ins, spec.casts)):
            ctype = D.CTYPE[cdt][1]
            value = f"({ctype})(i{j}_s)" if sc else f"{var}{suffix}"
            lines.append(f"{ind}  const {ctype} {var} = {value};")
        if spec.pre:
            lines += _statements(program(spec.pre), {var for var, _, _ in spec.ins},
                                 ind + "  ")
        return lines + [f"{ind}  const {acc_t} b = ({acc_t})({mapped});",
                        f"{ind}  const auto a = acc;",
                        f"{ind}  acc = ({acc_t})({reduced});",
                        f"{ind}}}"]

    def vector_round(count: int, ind: str) -> list[str]:
        """``count`` vectors a thread, ``lanes * vec`` elements apart: every load, then every
        element combined in index order."""
        lines = []
        for k in range(count):
            at = "j" if k == 0 else f"j + {k} * {lanes} * {vec}"
            lines.append(f"{ind}const {itype} j_v{k} = {at};")
            lines += [f"{ind}const uint4 r{j}_v{k} = *(const uint4*)(p_i{j} + off_i{j} + xi{j}"
                      f" + j_v{k});" for j in arr]
        for k in range(count):
            for e in range(vec):
                sfx = f"_v{k}_{e}"
                lines.append(f"{ind}const {itype} j{sfx} = j_v{k} + {e};")
                for j, ((var, dt, sc), cdt) in enumerate(zip(spec.ins, spec.casts)):
                    if not sc:
                        ctype = D.CTYPE[cdt][1]
                        load = D.CTYPE[dt][3].format(
                            f"((const {D.CTYPE[dt][0]}*)&r{j}_v{k})[{e}]")
                        lines.append(f"{ind}const {ctype} {var}{sfx} = ({ctype})({load});")
                lines += step(sfx, ind)
        return lines

    ind = "      "
    if vec > 1:
        aligned = " && ".join(f"(((unsigned long long)(p_i{j} + off_i{j} + xi{j} + jlo) & 15)"
                              " == 0" + ")" for j in arr)
        body += [f"      if ({aligned}) {{",
                 f"        const {itype} jv = jhi > jlo ? jlo + (jhi - jlo) / {vec} * {vec}"
                 " : jlo;",
                 f"        {itype} j = jlo + lane * {vec};",
                 f"        for (; (long long)j + {VEC_UNROLL - 1}LL * {lanes} * {vec} <"
                 f" (long long)jv; j += {VEC_UNROLL} * {lanes} * {vec}) {{"]
        body += vector_round(VEC_UNROLL, "          ")
        body += ["        }", f"        for (; j < jv; j += {lanes} * {vec}) {{"]
        body += vector_round(1, "          ")
        body += ["        }", f"        for (j = jv + lane; j < jhi; j += {lanes}) {{"]
        body += loads("_u", "j", "          ") + step("_u", "          ")
        body += ["        }", "      } else {"]
        ind = "        "
    # UNROLL elements a round, their loads issued before any is combined; then one at a time
    body += [f"{ind}{itype} j = jlo + lane;",
             f"{ind}for (; (long long)j + {UNROLL - 1}LL * {lanes} < (long long)jhi;"
             f" j += {UNROLL} * {lanes}) {{"]
    for k in range(UNROLL):
        body += loads(f"_u{k}", "j" if k == 0 else f"j + {k} * {lanes}", ind + "  ")
    for k in range(UNROLL):
        body += step(f"_u{k}", ind + "  ")
    body += [f"{ind}}}", f"{ind}for (; j < jhi; j += {lanes}) {{"]
    body += loads("_u", "j", ind + "  ") + step("_u", ind + "  ")
    body += [f"{ind}}}"] + (["      }"] if vec > 1 else []) + ["    }"]
    def gather(ind: str) -> list[str]:
        """The block's values combined: into thread 0 (rows) or threads < COLS (columns), and
        ``last_`` set in the threads that hold an output's result."""
        if not cols:
            # warps by shuffles, then the first warp over one slot per warp
            return [f"{ind}for (int d_ = 16; d_ > 0; d_ >>= 1)",
                    *combine("gm_shfl(acc, d_)", ind + "  "),
                    f"{ind}if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = acc;",
                    f"{ind}__syncthreads();",
                    f"{ind}if (threadIdx.x < 32) {{",
                    f"{ind}  acc = threadIdx.x < (blockDim.x >> 5) ? sh[threadIdx.x] : ident_s;",
                    f"{ind}  for (int d_ = 16; d_ > 0; d_ >>= 1)",
                    *combine("gm_shfl(acc, d_)", ind + "    "),
                    f"{ind}}}",
                    f"{ind}const bool last_ = threadIdx.x == 0;"]
        return [f"{ind}sh[threadIdx.x] = acc;",
                f"{ind}__syncthreads();",
                f"{ind}const bool last_ = threadIdx.x < {COLS} && o < nout;",
                f"{ind}if (last_) {{",
                f"{ind}  for (int l_ = 1; l_ < (int)(blockDim.x / {COLS}); ++l_)",
                *combine(f"sh[l_ * {COLS} + threadIdx.x]", ind + "    "),
                f"{ind}}}"]

    def finish(ind: str) -> list[str]:
        """The post-processing of ``acc`` and the store of output ``o``."""
        lines = [f"{ind}if (last_) {{",
                 f"{ind}  const {acc_t} a = acc;",
                 f"{ind}  {D.CTYPE[out_dt][1]} {out_var};"]
        lines += _statements(program(spec.post), {out_var, "a"}, ind + "  ")
        if ndo:
            lines += _index_code("x", "o", ndo, ["o0"], "d", "s", itype, ind + "  ")
        else:
            lines.append(f"{ind}  const {itype} xo0 = 0;")
        store = D.CTYPE[out_dt][4].format(f"({D.CTYPE[out_dt][1]})({out_var})")
        return lines + [f"{ind}  p_o0[off_o0 + xo0] = {store};", f"{ind}}}"]

    body += gather("    ")
    if not split:
        body += finish("    ")
    else:
        lane = "threadIdx.x" if not cols else f"threadIdx.x / {COLS}"
        # every writer fences its store before the block's arrival is counted; the last block
        # to arrive reads the other blocks' results past its own cache (volatile loads)
        body += ["    if (last_) part_[(long long)o * nsplit + c] = acc;",
                 "    __threadfence();",
                 "    __syncthreads();",
                 "    if (threadIdx.x == 0)",
                 "      last_block_ = atomicAdd(cnt_ + g, 1u) == (unsigned int)(nsplit - 1);",
                 "    __syncthreads();",
                 "    if (last_block_) {",
                 "      __threadfence();",
                 "      acc = ident_s;",
                 "      if (o < nout)",
                 f"        for (long long c_ = {lane}; c_ < nsplit; c_ += {lanes})",
                 *combine("gm_ldv(part_ + (long long)o * nsplit + c_)", "          ")]
        body.append("      {")
        body += gather("        ")
        body += finish("        ")
        body += ["      }",
                 "      if (threadIdx.x == 0) cnt_[g] = 0u;",
                 "    }"]
    body += ["    __syncthreads();",
             "  }", "}"]
    source = PRELUDE + SHUFFLE + "\n" + "\n".join(body) + "\n"
    result = (kname, source, tuple(kinds))
    _sources[key] = result
    if kname not in SIM_KERNELS:
        sim_kernel(kname)(Recipe(_reduction_twin, spec, ndo, ndr, split))
        SIM_CHECKS[kname] = functools.partial(_probe_reduction, spec)
    return result


def _check_reduction_names(spec: ReductionSpec) -> None:
    """What each part of a reduction's description may read (see :func:`check_names`): the
    pre-statements and the map the inputs, ``_j`` and ``_n`` (the map also what ``pre``
    assigns), the combiner ``a`` and ``b``, the post-statements ``a`` and ``_n``."""
    element = {n for n, _, _ in spec.ins} | {"_j", "_n"}
    if spec.pre:
        pre = program(spec.pre)
        check_names(pre, element, "map_expr", f"the reduction {spec.name!r}")
        element |= set(pre.assigned)
    check_names(program(f"v_ = {spec.map_expr}"), element, "map_expr",
                f"the reduction {spec.name!r}")
    check_names(program(f"r_ = {spec.reduce_expr}"), {"a", "b"}, "reduce_expr",
                f"the reduction {spec.name!r}")
    check_names(program(spec.post), {"a", "_n"}, "post_map_expr",
                f"the reduction {spec.name!r}")


def _reduction_twin(spec: ReductionSpec, ndo: int, ndr: int, split: bool) -> Any:
    mapped = program(f"v_ = {spec.map_expr}")
    reduced = program(f"r_ = {spec.reduce_expr}")
    post = program(spec.post)
    pre = program(spec.pre) if spec.pre else None
    arr = [j for j, (_, _, sc) in enumerate(spec.ins) if not sc]
    sc_sizes = [2 if _compute(dt).itemsize == 16 else 1 for _, dt, sc in spec.ins if sc]
    acc = _compute(spec.acc)
    ident_n = 2 if acc.itemsize == 16 else 1

    uses_j = "_j" in mapped.free or (pre is not None and "_j" in pre.free)

    def tree(vals: np.ndarray, ident: np.ndarray) -> np.ndarray:
        """Combine each row of ``vals`` pairwise (the identity for an empty row)."""
        rows = vals.shape[0]
        while vals.shape[1] > 1:
            if vals.shape[1] % 2:
                vals = np.concatenate([vals, np.broadcast_to(ident, (rows, 1))], axis=1)
            env = {"a": vals[:, 0::2], "b": vals[:, 1::2]}
            run_program(reduced, env)
            vals = np.asarray(env["r_"]).astype(acc, copy=False)
        return vals[:, 0] if vals.shape[1] == 1 else np.broadcast_to(ident, (rows,))

    def run(info: Any, nout: Any, nred: Any, nn: Any, nsplit: Any, chunk: Any,
            *args: Any) -> None:
        nout, nred, nn = int(nout), int(nred), int(nn)
        nsplit, chunk = int(nsplit), int(chunk)
        args = list(args)
        ptrs = args[:1 + len(arr)]
        pos = 1 + len(arr)
        ident = np.asarray(_decode(args[pos:pos + ident_n], spec.acc)).astype(acc)
        pos += ident_n
        scal = []
        for c in sc_sizes:
            scal.append(args[pos:pos + c])
            pos += c
        nops = 1 + len(arr)
        offs = [int(v) for v in args[pos:pos + nops]]
        pos += nops
        dims = tuple(int(v) for v in args[pos:pos + ndo])
        pos += ndo
        rdims = tuple(int(v) for v in args[pos:pos + ndr])
        pos += ndr
        ost = []
        for _ in range(nops):
            ost.append(tuple(int(v) for v in args[pos:pos + ndo]))
            pos += ndo
        rst = []
        for _ in range(len(arr)):
            rst.append(tuple(int(v) for v in args[pos:pos + ndr]))
            pos += ndr
        env: dict[str, Any] = {"_n": np.int64(nn)}
        if uses_j:
            env["_j"] = np.arange(nred, dtype=np.int64)[None, :]
        a = 1
        s = 0
        for (var, dt, sc), cdt in zip(spec.ins, spec.casts):
            comp = _compute(cdt)
            if sc:
                env[var] = np.asarray(_decode(scal[s], dt)).astype(comp)
                s += 1
            else:
                v = _view(ptrs[a], dt, offs[a], dims + rdims, ost[a] + rst[a - 1])
                # no copy where no conversion is needed: the programs only read their inputs
                env[var] = v.reshape(nout, nred).astype(comp, copy=False)
                a += 1
        with np.errstate(all="ignore"):
            if pre is not None:
                run_program(pre, env)
            run_program(mapped, env)
            vals = np.asarray(env["v_"]).astype(acc, copy=False)
            vals = np.broadcast_to(vals, (nout, nred))
            if split:  # each chunk apart, then the chunks' results, as the blocks do
                pad = nsplit * chunk - nred
                if pad:
                    vals = np.concatenate([vals, np.broadcast_to(ident, (nout, pad))], axis=1)
                vals = tree(vals.reshape(nout * nsplit, chunk), ident).reshape(nout, nsplit)
            res = tree(vals, ident)
            out_var, out_dt = spec.out
            penv = {"a": res, "_n": np.int64(nn)}
            run_program(post, penv)
            dst = _view(ptrs[0], out_dt, offs[0], dims, ost[0])
            val = np.asarray(penv[out_var]).astype(_compute(out_dt)).astype(dst.dtype)
        dst[...] = np.broadcast_to(val, (nout,)).reshape(dims)

    return run


# -- compiling and launching ----------------------------------------------------------------------
#: NVRTC options of the element-wise and reduction kernels: no contraction of a product and a sum
#: into one fused multiply-add, so that each operation rounds as it would in its own kernel and
#: a fused chain answers the same bits as the operations one by one (and as NumPy's float32)
EXACT = ("--fmad=false",)


def kernel_for(dev: Any, name: str, source: str, kinds: tuple[str, ...],
               options: tuple[str, ...] = ()) -> Any:
    """The compiled kernel ``name`` on ``dev`` (compiled once per device; NVRTC's disk cache
    keeps the image across processes)."""
    with _lock:
        mine = _kernels.get(dev)
        if mine is None:
            mine = _kernels[dev] = {}
        fut = mine.get(name)
        if fut is None:
            fut = mine[name] = dev.compile(source, name, options=options, signature=kinds)
    try:
        return fut.result()
    except BaseException:
        with _lock:
            mine.pop(name, None)
        raise


def _grid(n: int) -> int:
    return max(1, min(math.ceil(n / BLOCK), MAX_GRID))


def launch_elementwise(dev: Any, spec: ElementwiseSpec, shape: tuple[int, ...],
                       outs: list[Operand], ins: list[Any]) -> Any:
    """Launch ``spec`` over ``shape``; ``ins`` are Operands or (for scalar inputs) values.
    Returns the launch's future (None when there is nothing to do)."""
    if math.prod(shape) == 0:
        return None
    return _launch_ew(dev, spec, shape, outs, ins, None)


def elementwise_new(dev: Any, spec: ElementwiseSpec, shape: tuple[int, ...],
                    ins: list[Any]) -> list[Any]:
    """Launch ``spec`` over ``shape`` into new C-ordered outputs, one per ``spec.outs``; their
    futures (each resolves to its buffer once the launch has completed, or fails with its
    error). The first output is allocated by the launch's own message (``AllocThen``), the
    others by an allocation each, posted first."""
    if math.prod(shape) == 0:
        return [dev.alloc(shape, D.storage_name(dt), order="C") for _, dt in spec.outs]
    cst = _c_strides(shape)
    first = dev.port.mint(shape, D.storage_name(spec.outs[0][1]), "C")
    rest = [dev.alloc(shape, D.storage_name(dt), order="C") for _, dt in spec.outs[1:]]
    outs = [Operand(first, spec.outs[0][1], 0, cst)]
    outs += [Operand(buf, dt, 0, cst) for buf, (_, dt) in zip(rest, spec.outs[1:])]
    return [_launch_ew(dev, spec, shape, outs, ins, first), *rest]


class _EwPlan(NamedTuple):
    """What an element-wise launch derives from its layout alone (no buffer, no scalar value):
    the kernel's plan key and renderer, the grid, the element count and the trailing integer
    arguments (the array operands' offsets, outputs first, then the extents and strides)."""

    key: tuple
    render: Any
    grid: int
    n: int
    tail: tuple[int, ...]


def _ew_plan(spec: ElementwiseSpec, shape: tuple[int, ...], arrays: list[Operand]) -> _EwPlan:
    n = math.prod(shape)
    cst = _c_strides(shape)
    dims: list[int] = []
    if all(op.strides == cst for op in arrays):  # the common case: every operand C-ordered
        contig = True
        wide = n >= _INT32_LIMIT or any(op.offset + n - 1 >= _INT32_LIMIT for op in arrays)
    else:
        shp, sts = simplify(shape, [op.strides for op in arrays])
        contig = len(shp) <= 1 and all(s == (1,) * len(shp) for s in sts)
        wide = _wide(n, arrays, shape)
        if not contig:
            dims += shp
            for st in sts:
                dims += st
    layout: Any = "contig" if contig else len(dims) // (len(arrays) + 1)
    if contig:
        vec = ew_vector(spec)
        grid = _grid(-(-n // max(UNROLL, vec)))
        key = ("ew", spec, layout, wide) if vec == 1 else ("ew", spec, layout, wide, vec)
    else:
        vec, grid, key = 1, _grid(n), ("ew", spec, layout, wide)
    return _EwPlan(key, lambda: render_elementwise(spec, layout, wide, vec), grid, n,
                   (*[op.offset for op in arrays], *dims))


#: (spec, shape, each array operand's strides and offset, outputs first) -> its _EwPlan: a
#: loop's launches of one layout derive it once
_ew_plans: dict[tuple, _EwPlan] = {}
_EW_PLANS_SIZE = 4096


def _launch_ew(dev: Any, spec: ElementwiseSpec, shape: tuple[int, ...], outs: list[Operand],
               ins: list[Any], new: Any) -> Any:
    arrays = list(outs)
    bits: list[int] = []
    for value, (_, dt, sc) in zip(ins, spec.ins):
        if sc:
            bits += scalar_bits(value, dt)
        else:
            arrays.append(value)
    memo = (spec, shape, *[(op.strides, op.offset) for op in arrays])
    plan = _ew_plans.get(memo)
    if plan is None:
        plan = _ew_plan(spec, shape, arrays)
        if len(_ew_plans) >= _EW_PLANS_SIZE:
            _ew_plans.clear()
        _ew_plans[memo] = plan
    refs = [_ref_of(op.buffer) for op in arrays]
    args = (plan.n, *refs, *bits, *plan.tail)
    nout = len(outs)
    written = (refs[0],) if nout == 1 else _distinct(refs[:nout])
    return _send(dev, plan.key, plan.render, plan.grid, BLOCK, args, _distinct(refs), written,
                 new)


#: the device attribute holding {(spec, shape, each array operand's shape, strides and
#: offset): (_EwPlan, Kernel, the output's storage name)} of the new-output launches of
#: :func:`elementwise_new_of` sent once: a repeated kind of call derives nothing again. It
#: lives and dies with its device, and names no buffer.
_EW_PLANS_ATTR = "_array_elementwise_plans"
_BLOCK3 = (BLOCK, 1, 1)


def elementwise_new_of(dev: Any, spec: ElementwiseSpec, shape: tuple[int, ...],
                       args: Any) -> Any:
    """:func:`elementwise_new` of a one-output ``spec`` over ``args``: Arrays (anything with
    the array's ``_shape``, ``_strides``, ``_offset`` and ``_buf``), each broadcast to
    ``shape``, and Python scalars, in the order of ``spec.ins``. The new buffer's future."""
    memo: list[Any] = [spec, shape]
    bufs: list[Any] = []
    bits: list[int] = []
    for a, (_, dt, sc) in zip(args, spec.ins):
        if sc:
            bits += scalar_bits(a, dt)
        else:
            memo += (a._shape, a._strides, a._offset)
            bufs.append(a._buf)
    plans = getattr(dev, _EW_PLANS_ATTR, None)
    found = plans.get(tuple(memo)) if plans is not None else None
    if found is None:
        return _elementwise_new_first(dev, spec, shape, args, tuple(memo))
    plan, kernel, storage = found
    # _ref_of written out: a freed or stale buffer raises here
    refs = [b if type(b) is BufRef else b.ref for b in bufs]
    ref = dev.port.mint(shape, storage, "C")
    if len(refs) == 1:
        reads: tuple = (ref, refs[0])
    elif len(refs) == 2:
        reads = (ref, refs[0]) if refs[0] is refs[1] else (ref, refs[0], refs[1])
    else:
        reads = (ref, *_distinct(refs))
    msg = _UNCHECKED(kernel, (plan.grid, 1, 1), _BLOCK3, (plan.n, ref, *refs, *bits, *plan.tail),
                     0, reads, (ref,), ())
    return dev.port.send_new(ref, msg)


def _elementwise_new_first(dev: Any, spec: ElementwiseSpec, shape: tuple[int, ...], args: Any,
                           memo: tuple) -> Any:
    """:func:`elementwise_new_of` of a kind of call not sent before on ``dev``: through
    :func:`elementwise_new` (whose first launch of a kernel is checked), its plan kept once
    the kernel is ready."""
    ins = [a if sc else a._operand(shape) for a, (_, _, sc) in zip(args, spec.ins)]
    (buf,) = elementwise_new(dev, spec, shape, ins)
    if math.prod(shape) == 0:
        return buf
    out_dt = spec.outs[0][1]
    arrays = [Operand(None, out_dt, 0, _c_strides(shape))]
    arrays += [op for op, (_, _, sc) in zip(ins, spec.ins) if not sc]
    _keep_plan(dev, _EW_PLANS_ATTR, _EW_PLANS_SIZE, memo, _ew_plan(spec, shape, arrays), out_dt)
    return buf


def _keep_plan(dev: Any, attr: str, size: int, memo: tuple, plan: Any, out_dt: np.dtype) -> None:
    """Keep ``plan`` (its kernel and the output's storage name beside it) under ``memo`` in the
    device's table ``attr``, once its kernel is ready (a first launch that failed to compile or
    to send keeps nothing); a full table starts again."""
    mine = getattr(dev, _READY_ATTR, None)
    kernel = mine.get(plan.key) if mine is not None else None
    if kernel is not None:
        with _lock:
            plans = getattr(dev, attr, None)
            if plans is None or len(plans) >= size:
                plans = {}
                setattr(dev, attr, plans)
            plans[memo] = (plan, kernel, D.storage_name(out_dt))


def _ref_of(buffer: Any) -> BufRef:
    """A buffer's reference (a GpuBuffer's or its future's: raises GpuRefStale for a freed or
    stale one); a reference minted for a new output as it is."""
    return buffer if type(buffer) is BufRef else buffer.ref


def _distinct(refs: list[BufRef]) -> tuple[BufRef, ...]:
    """``refs`` without repeats (a buffer's views share its one reference object)."""
    out: list[BufRef] = []
    for r in refs:
        for o in out:
            if o is r:
                break
        else:
            out.append(r)
    return tuple(out)


#: the device attribute holding {plan key: Kernel} of the generated kernels whose launch
#: message passed :class:`Launch`'s checks once; later launches of the same plan build the
#: message unchecked (the arguments have the same kinds: buffer references taken here, ints in
#: range). An attribute, not a weak dictionary keyed by the device: it is read at every launch,
#: and it lives and dies with its device.
_READY_ATTR = "_array_kernels_ready"
_READY_SIZE = 4096
_UNCHECKED = Launch.unchecked  # type: ignore[attr-defined]


def _send(dev: Any, key: tuple, render: Any, grid: int | tuple, block: int, args: tuple,
          reads: tuple, writes: tuple, new: Any = None, make: Any = None,
          scratch: tuple = ()) -> Any:
    """Post the launch of the kernel of plan ``key`` (``render()`` gives its name, source and
    parameter kinds the first time; ``grid``: blocks along x, or the (x, y, z) grid;
    ``make(dev, name, source, kinds)`` compiles it, by default
    :func:`kernel_for` with the exact-math options); ``new``: a reference minted for an output
    that the launch's message allocates; ``scratch``: the launch's workspace (``Launch``'s
    field). The future of the launch (of the new buffer with ``new``)."""
    mine = getattr(dev, _READY_ATTR, None)
    kernel = mine.get(key) if mine is not None else None
    if kernel is None:
        name, source, kinds = render()
        kernel = kernel_for(dev, name, source, kinds, EXACT) if make is None else \
            make(dev, name, source, kinds)
        msg = Launch(kernel, grid, block, args, 0, reads, writes, scratch)  # checked, once
        with _lock:
            mine = getattr(dev, _READY_ATTR, None)
            if mine is None:
                mine = {}
                setattr(dev, _READY_ATTR, mine)
            elif len(mine) >= _READY_SIZE:
                mine.clear()
            mine[key] = kernel
    else:
        msg = _UNCHECKED(kernel, grid if isinstance(grid, tuple) else (grid, 1, 1),
                         (block, 1, 1), args, 0, reads, writes, scratch)
    port = dev.port
    return port.send(msg) if new is None else port.send_new(new, msg)


def launch_reduction(dev: Any, spec: ReductionSpec, out_shape: tuple[int, ...],
                     red_shape: tuple[int, ...], out: Operand, ins: list[Any],
                     identity: Any) -> Any:
    """Launch ``spec``: ``out`` has strides over ``out_shape``; each array input has strides
    over ``out_shape + red_shape``. Columns or rows, and whether the reduced elements are split
    over blocks (the last block of a group combines its chunks), are chosen here from the layout
    (see :func:`render_reduction`). The future of the (last) launch; None for no output."""
    if math.prod(out_shape) == 0:
        return None
    return _launch_red(dev, spec, out_shape, red_shape, out, ins, identity, None)


def reduction_new(dev: Any, spec: ReductionSpec, out_shape: tuple[int, ...],
                  red_shape: tuple[int, ...], ins: list[Any], identity: Any) -> Any:
    """:func:`launch_reduction` into a new C-ordered output, allocated by the message of the
    launch that writes it; the output's future (it resolves once that launch has completed)."""
    name = D.storage_name(spec.out[1])
    if math.prod(out_shape) == 0:
        return dev.alloc(out_shape, name, order="C")
    ref = dev.port.mint(out_shape, name, "C")
    out = Operand(ref, spec.out[1], 0, _c_strides(out_shape))
    return _launch_red(dev, spec, out_shape, red_shape, out, ins, identity, ref)


class _RedPlan(NamedTuple):
    """What a reduction's launch derives from its layout alone (no buffer, no scalar value):
    the kernel's plan key and renderer, the grid and block, the leading and trailing integer
    arguments, and the workspace bytes a split needs (0: not split)."""

    key: tuple
    render: Any
    grid: int
    block: int
    head: tuple[int, ...]
    shape_args: tuple[int, ...]
    ws_bytes: int


#: (spec, shapes, the operands' strides and offsets) -> its _RedPlan: a loop's reductions of
#: one layout derive it once
_red_plans: dict[tuple, _RedPlan] = {}
_RED_PLANS_SIZE = 4096


def _red_plan(spec: ReductionSpec, out_shape: tuple[int, ...], red_shape: tuple[int, ...],
              out: Operand, arrays: list[Operand]) -> _RedPlan:
    nout = math.prod(out_shape)
    nred = math.prod(red_shape)
    ndo = len(out_shape)
    oshp, osts = simplify(out_shape, [out.strides] + [op.strides[:ndo] for op in arrays])
    rshp, rsts = simplify(red_shape, [op.strides[ndo:] for op in arrays]) if arrays else \
        (red_shape, [])
    if not arrays:
        rshp = ()
    wide = max(nout, nred) >= _INT32_LIMIT or _reach(out, out_shape) >= _INT32_LIMIT or any(
        _reach(op, out_shape + red_shape) >= _INT32_LIMIT for op in arrays)
    # columns: neighbouring outputs are neighbouring elements of the inputs, the reduced ones
    # are not (a sum over axis 0 of a C-ordered matrix): a warp reads across outputs
    cols = (nout >= COLS and bool(oshp) and bool(rshp) and
            all(s[-1] in (0, 1) for s in osts[1:]) and any(s[-1] == 1 for s in osts[1:]) and
            all(s[-1] != 1 for s in rsts))
    groups = -(-nout // COLS) if cols else nout
    # 16-byte loads: rows whose one reduced dimension every array input walks with stride 1,
    # the inputs of one item size (whether a block's inputs start aligned is its own check)
    sizes = {op.dtype.itemsize for op in arrays}
    vec = 1
    if not cols and len(rshp) == 1 and all(s[0] == 1 for s in rsts) and len(sizes) == 1:
        vec = max(1, 16 // sizes.pop())
    nsplit = 1
    fill = VEC_FILL_BLOCKS if vec > 1 else FILL_BLOCKS
    if groups < fill and nred > 4 * BLOCK:
        nsplit = max(1, min(-(-fill // groups), -(-nred // (4 * BLOCK))))
    chunk = -(-nred // nsplit) if nred else 0
    if nsplit > 1 and vec > 1:  # chunks start on a vector, and none is left empty
        chunk = -(-chunk // vec) * vec
        nsplit = -(-nred // chunk)
    if cols:
        block = BLOCK
    else:
        # as many threads as there are elements to combine (a power of two from a warp up to
        # BLOCK), so that short reductions do not idle most of the block
        block = 32
        while block < BLOCK and block < chunk:
            block *= 2
    ndr = len(rshp)
    shape_args: list[int] = [*oshp, *rshp]
    for st in osts:
        shape_args += st
    for st in rsts:
        shape_args += st
    split = nsplit > 1
    return _RedPlan(("red", spec, len(oshp), ndr, wide, cols, split, vec),
                    lambda: render_reduction(spec, len(oshp), ndr, wide, cols, split, vec),
                    min(groups * nsplit, 1 << 30), block, (nout, nred, nred, nsplit, chunk),
                    tuple(shape_args),
                    WS_COUNTERS + nout * nsplit * _compute(spec.acc).itemsize if split else 0)


def _launch_red(dev: Any, spec: ReductionSpec, out_shape: tuple[int, ...],
                red_shape: tuple[int, ...], out: Operand, ins: list[Any], identity: Any,
                new: Any) -> Any:
    arrays = [op for op, (_, _, sc) in zip(ins, spec.ins) if not sc]
    memo = (spec, out_shape, red_shape, out.strides, out.offset,
            tuple([(op.strides, op.offset) for op in arrays]))
    plan = _red_plans.get(memo)
    if plan is None:
        plan = _red_plan(spec, out_shape, red_shape, out, arrays)
        if len(_red_plans) >= _RED_PLANS_SIZE:
            _red_plans.clear()
        _red_plans[memo] = plan
    ident = scalar_bits(identity, spec.acc)
    refs = [_ref_of(op.buffer) for op in arrays]
    out_ref = _ref_of(out.buffer)
    bits: list[int] = []
    for value, (_, dt, sc) in zip(ins, spec.ins):
        if sc:
            bits += scalar_bits(value, dt)
    offsets = [op.offset for op in arrays]
    if not plan.ws_bytes:
        args = (*plan.head, out_ref, *refs, *ident, *bits, out.offset, *offsets,
                *plan.shape_args)
        return _send(dev, plan.key, plan.render, plan.grid, plan.block, args,
                     _distinct([*refs, out_ref]), (out_ref,), new)
    ws = _workspace(dev, plan.ws_bytes)
    args = (*plan.head, out_ref, *refs, *ident, *bits, out.offset, *offsets,
            *plan.shape_args, ws)
    return _send(dev, plan.key, plan.render, plan.grid, plan.block, args,
                 _distinct([*refs, out_ref, ws]), (out_ref, ws), new, scratch=(ws,))


#: the device attribute holding {(spec, output shape, reduced shape, the input's offset and
#: strides): (_RedPlan, Kernel, the output's storage name)} of the one-input reductions into a
#: new output that :func:`reduction_new_of` sent once. It lives and dies with its device, and
#: names no buffer.
_RED_NEW_ATTR = "_array_reduction_plans"


def reduction_new_of(dev: Any, spec: ReductionSpec, out_shape: tuple[int, ...],
                     red_shape: tuple[int, ...], buf: Any, offset: int,
                     strides: tuple[int, ...], identity: Any) -> Any:
    """:func:`reduction_new` of a ``spec`` whose one input (no scalar) is ``buf`` (a GpuBuffer
    or its future) read from element ``offset`` with ``strides`` over
    ``out_shape + red_shape``."""
    memo = (spec, out_shape, red_shape, offset, strides)
    plans = getattr(dev, _RED_NEW_ATTR, None)
    found = plans.get(memo) if plans is not None else None
    if found is None:
        return _reduction_new_first(dev, spec, out_shape, red_shape, buf, offset, strides,
                                    identity, memo)
    plan, kernel, storage = found
    src = _ref_of(buf)  # a freed or stale buffer raises here
    ref = dev.port.mint(out_shape, storage, "C")
    head = (*plan.head, ref, src, *scalar_bits(identity, spec.acc), 0, offset, *plan.shape_args)
    if not plan.ws_bytes:
        msg = _UNCHECKED(kernel, (plan.grid, 1, 1), (plan.block, 1, 1), head, 0,
                         (src, ref), (ref,), ())
    else:
        ws = _workspace(dev, plan.ws_bytes)
        msg = _UNCHECKED(kernel, (plan.grid, 1, 1), (plan.block, 1, 1), (*head, ws), 0,
                         _distinct([src, ref, ws]), (ref, ws), (ws,))
    return dev.port.send_new(ref, msg)


def _reduction_new_first(dev: Any, spec: ReductionSpec, out_shape: tuple[int, ...],
                         red_shape: tuple[int, ...], buf: Any, offset: int,
                         strides: tuple[int, ...], identity: Any, memo: tuple) -> Any:
    """:func:`reduction_new_of` of a kind of reduction not sent before on ``dev``: through
    :func:`reduction_new` (whose first launch of a kernel is checked), its plan kept once the
    kernel is ready."""
    op = Operand(buf, spec.ins[0][1], offset, strides)
    out = reduction_new(dev, spec, out_shape, red_shape, [op], identity)
    if math.prod(out_shape) == 0:
        return out
    out_dt = spec.out[1]
    plan = _red_plan(spec, out_shape, red_shape, Operand(None, out_dt, 0, _c_strides(out_shape)),
                     [op])
    _keep_plan(dev, _RED_NEW_ATTR, _RED_PLANS_SIZE, memo, plan, out_dt)
    return out


#: device -> (generation, bytes, buffer, its zeroing's future) of its reduction workspace, kept
#: as an attribute of the device (it lives and dies with it)
_WS_ATTR = "_array_reduction_workspace"
_ws_lock = threading.RLock()


def _workspace(dev: Any, nbytes: int) -> BufRef:
    """The reference of ``dev``'s reduction workspace of at least ``nbytes`` (made, or grown,
    here: allocated and zeroed by two messages; a replaced one is freed behind the launches
    naming it). Every split reduction names it as read and written, so that launches sharing
    its counters never overlap, whichever streams they are placed on. One whose allocation or
    zeroing failed (a budget or memory refusal) is made again: kept, it would fail every split
    reduction after."""
    with _ws_lock:
        found = getattr(dev, _WS_ATTR, None)
        if found is None or found[0] != dev.generation or found[1] < nbytes or \
                _failed(found[2]) or _failed(found[3]):
            size = max(nbytes, 2 * WS_COUNTERS, found[1] if found else 0)
            buf = dev.alloc((size,), "u1")
            found = (dev.generation, size, buf, dev.memset(buf, 0))
            setattr(dev, _WS_ATTR, found)
        return _ref_of(found[2])


def _failed(fut: Any) -> bool:
    """Whether ``fut`` (a future, or a buffer already answered) has failed, without waiting."""
    return isinstance(fut, Future) and fut.done() and fut.exception() is not None


def _c_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    found = _C_STRIDES.get(shape)
    if found is None:
        out, acc = [], 1
        for d in reversed(shape):
            out.append(acc)
            acc *= max(d, 1)
        found = tuple(reversed(out))
        if len(_C_STRIDES) >= 1024:
            _C_STRIDES.clear()
        _C_STRIDES[shape] = found
    return found


#: shape -> its C-order strides (element-wise calls repeat a few shapes)
_C_STRIDES: dict[tuple[int, ...], tuple[int, ...]] = {}
