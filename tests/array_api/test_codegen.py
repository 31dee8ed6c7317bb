"""The generator: the CUDA source of every element-wise function for every dtype it takes, in
both layouts and index widths, and of the reductions, is rendered, and compiled with NVRTC where
NVRTC is installed (no GPU is needed to compile). The description language's parser and its
NumPy evaluation follow C."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from array_helpers import ALL_DTYPES, nvrtc_compile_program

import gpumsg.array_api as xpm
from gpumsg.array_api import _dtypes as D
from gpumsg.array_api._codegen import (
    SHUFFLE,
    ElementwiseSpec,
    ReductionSpec,
    ew_vector,
    render_elementwise,
    render_reduction,
    scalar_bits,
    simplify,
)
from gpumsg.array_api._elementwise import TABLE
from gpumsg.array_api._expr import PRELUDE, evaluate, float_text, parse, render_c
from gpumsg.errors import InvalidMessage


def _sources(dt_name: str) -> list[tuple[str, str]]:
    dt = D.check_dtype(getattr(xpm, dt_name))
    kind = D.kind_of(dt)
    out = []
    for f in TABLE.values():
        if kind not in f.kinds:
            continue
        compute = D.float64 if f.result == "float" and kind in "iu" else dt
        res = {"bool": D.bool, "real": D.real_dtype(compute)}.get(f.result, compute)
        names = ("x", "y")[:f.nin]
        for scalar_last in (False, True):
            ins = tuple((n, dt, scalar_last and i == f.nin - 1 and f.nin == 2)
                        for i, n in enumerate(names))
            spec = ElementwiseSpec(f.name, f.text(D.kind_of(compute)), ins,
                                   (compute,) * f.nin, (("out", res),))
            for layout, wide in (("contig", False), (3, True), (2, False)):
                name, src, kinds = render_elementwise(spec, layout, wide)
                assert src.startswith(PRELUDE)
                assert kinds[0] == "i64" and kinds.count("ptr") >= 2
                out.append((name, src[len(PRELUDE):]))
            if ew_vector(spec) > 1:
                name, src, _ = render_elementwise(spec, "contig", False, ew_vector(spec))
                out.append((name, src[len(PRELUDE):]))
    if kind != "b":
        acc = D.float32 if dt in (D.float16, D.bfloat16) else dt
        spec = ReductionSpec("sum", "x", "a + b", "out = a / _n", (("x", dt, False),),
                             (acc,), acc, ("out", dt))
        for ndo, ndr in ((0, 1), (2, 2)):
            for cols, partial in ((False, False), (True, False), (False, True), (True, True)):
                name, src, _ = render_reduction(spec, ndo, ndr, ndo == 2, cols, partial)
                out.append((name, src[len(PRELUDE) + len(SHUFFLE):]))
        vec = 16 // np.dtype(dt).itemsize
        if vec > 1:  # rows of one stride-1 reduced dimension read 16 bytes a load
            for ndo, partial in ((0, True), (1, False)):
                name, src, _ = render_reduction(spec, ndo, 1, False, False, partial, vec)
                out.append((name, src[len(PRELUDE) + len(SHUFFLE):]))
    # the accumulator types of the other reductions (bool, int64, and the half types' float32)
    for acc, mapped in ((D.bool, "x != 0"), (D.int64, "x != 0 ? 1 : 0")):
        spec = ReductionSpec("any", mapped, "a || b" if acc == D.bool else "a + b", "out = a",
                             (("x", dt, False),), (dt,), acc, ("out", acc))
        name, src, _ = render_reduction(spec, 1, 1, False, kind != "b", True)
        out.append((name, src[len(PRELUDE) + len(SHUFFLE):]))
    return out


@pytest.mark.parametrize("dt", ALL_DTYPES)
def test_every_function_renders_and_compiles(dt: str) -> None:
    """All kernels of one dtype in one translation unit: NVRTC must accept every one."""
    bodies = list(dict(_sources(dt)).items())  # a unary function renders once per layout
    assert bodies
    compile_program = nvrtc_compile_program()
    source = PRELUDE + SHUFFLE + "\n".join(body for _, body in bodies)
    prog = compile_program(source, bodies[0][0], "sm_90", (), None,
                           tuple(name for name, _ in bodies[1:]))
    assert prog.image


def test_contiguous_layout_has_no_index_math() -> None:
    spec = ElementwiseSpec("add", "out = x + y", (("x", D.float32, False),
                                                  ("y", D.float32, False)),
                           (D.float32, D.float32), (("out", D.float32),))
    _, src, kinds = render_elementwise(spec, "contig", False)
    body = src[len(PRELUDE):]
    assert "%" not in body and "int i = " in body
    assert kinds == ("i64", "ptr", "ptr", "ptr", "i64", "i64", "i64")
    _, src, _ = render_elementwise(spec, 2, True)
    assert "long long i = " in src and "r_ % " in src


def test_simplify_merges_contiguous_dims() -> None:
    shp, sts = simplify((4, 1, 5, 6), [(30, 30, 6, 1), (0, 0, 6, 1)])
    assert shp == (4, 30) and sts == [(30, 1), (0, 1)]
    shp, sts = simplify((3, 4), [(1, 3)])  # transposed: nothing merges
    assert shp == (3, 4)


def test_scalar_bits_round_trip() -> None:
    from gpumsg.array_api._codegen import _decode

    for value, dt in ((-2.5, D.float32), (np.nan, D.float64), (-7, D.int8), (True, D.bool),
                      (1.5 - 2j, D.complex64), (3 + 4j, D.complex128), (0.1, D.bfloat16)):
        bits = scalar_bits(value, dt)
        got = _decode(list(bits), dt)
        want = np.array(value).astype(D.CTYPE[dt][2])
        np.testing.assert_array_equal(got, want)


def test_scalar_bits_are_numpys_cast(rng) -> None:
    """Python floats and ints (converted without NumPy) give the bits of NumPy's conversion,
    at the edges too: -0.0, NaN, infinities, subnormals, beyond float32's range, the limits
    of each integer type."""
    floats = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, 1e-40, 3.4028235e38, 3.4028236e38,
              3.5e38, 1e308, -1e300, 5e-324]
    floats += list(rng.standard_normal(40) * 10.0 ** rng.integers(-45, 45, 40))
    for dt in (D.float32, D.float64, D.float16, D.bfloat16, D.complex64):
        for v in floats:
            with np.errstate(over="ignore"):
                want = np.array(float(v)).astype(D.CTYPE[dt][2])
            raw = np.zeros(16, np.uint8)
            raw[:want.itemsize] = np.frombuffer(want.tobytes(), np.uint8)
            n = 2 if want.itemsize == 16 else 1
            assert scalar_bits(float(v), dt) == tuple(int(b) for b in raw.view(np.uint64)[:n])
    for dt in (D.float32, D.float64):  # Python ints converted to a float type
        for v in (0, 1, -7, 2**24, -(2**24), 2**24 + 1, 2**60 + 1):
            want = np.zeros(8, np.uint8)
            got = np.array(v).astype(dt)
            want[:dt.itemsize] = np.frombuffer(got.tobytes(), np.uint8)
            assert scalar_bits(v, dt) == (int(want.view(np.uint64)[0]),)
    for dt in (*D.SIGNED, *D.UNSIGNED):
        info = np.iinfo(dt)
        for v in [0, 1, int(info.min), int(info.max), int(info.max) // 3,
                  *(int(x) for x in rng.integers(info.min, info.max, 20, dtype=dt))]:
            raw = np.zeros(8, np.uint8)
            raw[:dt.itemsize] = np.frombuffer(np.array(v).astype(dt).tobytes(), np.uint8)
            assert scalar_bits(v, dt) == (int(raw.view(np.uint64)[0]),)


def test_parser_precedence_and_c_rendering() -> None:
    prog = parse("t = a + b * c; out = t > 2 ? -t : t % 3 << 1")
    assert prog.free == ["a", "b", "c"] and prog.assigned == ["t", "out"]
    assert render_c(prog.statements[0][1]) == "(a + (b * c))"
    assert render_c(prog.statements[1][1]) == "((t > 2) ? (-t) : ((t % 3) << 1))"
    env = evaluate(prog, {"a": np.int32(7), "b": np.int32(2), "c": np.int32(-3)})
    assert env["out"] == ((7 + 2 * -3) % 3) << 1
    with pytest.raises(InvalidMessage):
        parse("out = frobnicate(a)")
    with pytest.raises(InvalidMessage):
        parse("out = a +")


def test_c_division_in_the_twin() -> None:
    """``/`` and ``%`` on integers truncate toward zero, as in C."""
    env = evaluate(parse("q = a / b; r = a % b"), {"a": np.array([-7, 7, -7], np.int32),
                                                   "b": np.array([2, -2, -2], np.int32)})
    np.testing.assert_array_equal(env["q"], [-3, -3, 3])
    np.testing.assert_array_equal(env["r"], [-1, 1, -1])


@pytest.mark.parametrize("case", ["add_f32", "exp_f32", "where", "to_f16", "add_f16",
                                  "mul_i8", "mul_c64", "sqrt_f64"])
def test_vector_loop_on_the_host(folder, rng, case: str) -> None:
    """A contiguous kernel's vector rounds (one load or store per operand moves 16 bytes of the
    widest), built for the host with g++ and run as one thread: every element of every length
    (whole vectors, a tail, fewer than one vector) is right, and operands starting off their
    vector's alignment (one offset, or all) take the element loop and are right too."""
    import prelude_host as host

    f32, f16, f64 = np.dtype(np.float32), np.dtype(np.float16), np.dtype(np.float64)
    ins, text, out_dt, ref = {
        "add_f32": ((f32, f32), "out = x + y", f32, lambda a, b: a + b),
        "exp_f32": ((f32,), "out = exp(x)", f32, np.exp),
        "where": ((np.dtype(bool), f32, f32), "out = c ? x : y", f32, np.where),
        "to_f16": ((f32,), "out = x", f16, lambda a: a.astype(f16)),
        "add_f16": ((f16, f16), "out = x + y", f16, lambda a, b: a + b),
        "mul_i8": ((np.dtype(np.int8),) * 2, "out = x * y", np.dtype(np.int8),
                   lambda a, b: a * b),
        "mul_c64": ((np.dtype(np.complex64),) * 2, "out = x * y", np.dtype(np.complex64),
                    lambda a, b: a * b),
        "sqrt_f64": ((f64,), "out = sqrt(x)", f64, np.sqrt),
    }[case]
    names = ("c", "x", "y") if case == "where" else ("x", "y")[:len(ins)]
    casts = tuple(D.float32 if dt == f16 else dt for dt in ins)
    spec = ElementwiseSpec(case, text, tuple((nm, dt, False) for nm, dt in zip(names, ins)),
                           casts, (("out", out_dt),))
    vec = ew_vector(spec)
    assert vec == 16 // max(out_dt.itemsize, *(dt.itemsize for dt in ins)) > 1
    kernels = []
    for wide in (False, True):
        name, src, kinds = render_elementwise(spec, "contig", wide, vec)
        kernels.append(host.build_kernel(folder, name, src))
    for kernel, n in itertools.product(kernels, (1, vec - 1, vec, 3 * vec + 1, 100)):
        for shift in ((0,) * (len(ins) + 1), (1,) + (0,) * len(ins), (1,) * (len(ins) + 1)):
            arrays = []
            for dt in ins:
                if dt.kind == "b":
                    a = rng.integers(0, 2, n + 4).astype(bool)
                elif dt.kind == "i":
                    a = rng.integers(-100, 100, n + 4).astype(dt)
                elif dt.kind == "c":
                    a = (rng.standard_normal(n + 4) + 1j * rng.standard_normal(n + 4)).astype(dt)
                else:
                    a = (np.abs(rng.standard_normal(n + 4)) + 0.5).astype(dt)
                arrays.append(a)
            out = np.zeros(n + 4, out_dt)
            host.launch_host(kernel, kinds, (n, out, *arrays, *shift))
            views = [a[k:k + n] for a, k in zip(arrays, shift[1:])]
            want = np.asarray(ref(*views)).astype(out_dt)
            got = out[shift[0]:shift[0] + n]
            tol = 4 * np.finfo(out_dt).eps if out_dt.kind in "fc" else 0
            np.testing.assert_allclose(got, want, rtol=tol, atol=0)
            # nothing outside the output's n elements is written
            assert not out[:shift[0]].any() and not out[shift[0] + n:].any()


def test_float_text_reads_back_as_the_same_value() -> None:
    """Floats written into a description (a correction, a norm's order) read back exactly,
    the non-finite ones included (Python spells them ``nan``/``inf``, names the language does
    not know), in the simulator's evaluation and in the C rendering."""
    for v in (np.nan, np.inf, -np.inf, 0.5, -0.0, 1e300, 5e-324, -2.5, 3.0, 1 / 3):
        text = float_text(v)
        got = evaluate(parse(f"out = {text}"), {})["out"]
        if np.isnan(v):
            assert np.isnan(got)
        else:
            assert got == v and np.signbit(got) == np.signbit(v), (v, text)
        c = render_c(parse(f"out = {text}").statements[0][1])
        bare = c.replace("gm_nan()", "").replace("gm_inf()", "")
        assert "nan" not in bare and "inf" not in bare, c


class _NoIteration(dict):
    """An instance dict that fails when iterated: another thread may add a kept value (the
    hash, ew_vector's width) to a spec's dict at any time, and a dict that grows under an
    iteration raises RuntimeError."""

    def items(self):
        raise AssertionError("a spec's instance dict was iterated")

    __iter__ = keys = values = items


@pytest.mark.parametrize("kind", ["elementwise", "reduction"])
def test_spec_hash_and_pickle_read_fields_by_name(kind) -> None:
    import pickle

    f32 = np.dtype(np.float32)
    if kind == "elementwise":
        spec = ElementwiseSpec("t", "out = x", (("x", f32, False),), (f32,), (("out", f32),))
    else:
        spec = ReductionSpec("t", "a = x", "a = a + b", "out = a", (("x", f32, False),), (f32,),
                             f32, ("out", f32))
    object.__setattr__(spec, "__dict__", _NoIteration(spec.__dict__))
    copy = pickle.loads(pickle.dumps(spec))
    assert copy == spec and hash(copy) == hash(spec)
