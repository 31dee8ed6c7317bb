"""User kernels: ElementwiseKernel and ReductionKernel on the generator."""

from __future__ import annotations

import random

import numpy as np
import pytest
from array_helpers import random_values

import gpumsg
from gpumsg.array_api import ElementwiseKernel, ReductionKernel
from gpumsg.errors import InvalidMessage


def test_elementwise_kernel(xp, rng) -> None:
    sqdiff = ElementwiseKernel("T x, T y", "T z", "d = x - y; z = d * d", "sqdiff")
    a = random_values(rng, (4, 5), np.float32, False)
    b = random_values(rng, (5,), np.float32, False)
    got = sqdiff(xp.asarray(a), xp.asarray(b))
    assert got.dtype == xp.float32
    np.testing.assert_allclose(np.asarray(got), (a - b) ** 2, rtol=1e-6)
    got = sqdiff(xp.asarray(a), 1.5)  # a scalar takes the type T binds to
    np.testing.assert_allclose(np.asarray(got), (a - np.float32(1.5)) ** 2, rtol=1e-6)


def test_elementwise_kernel_outputs_and_types(xp, rng) -> None:
    k = ElementwiseKernel("int32 a, float64 s", "float64 lo, bool big",
                          "lo = a * s; big = a > 10 && s > 0", "two_outs")
    a = rng.integers(-20, 20, 9).astype(np.int32)
    lo = xp.empty((9,), dtype=xp.float64)
    big = xp.empty((9,), dtype=xp.bool)
    r = k(xp.asarray(a), 0.5, lo, big)
    assert r[0] is lo and r[1] is big
    np.testing.assert_allclose(np.asarray(lo), a * 0.5)
    np.testing.assert_array_equal(np.asarray(big), a > 10)


def test_elementwise_kernel_is_checked_when_made() -> None:
    with pytest.raises(InvalidMessage):
        ElementwiseKernel("T x", "T y", "y = x +", "bad")
    with pytest.raises(InvalidMessage):
        ElementwiseKernel("T x", "T y", "z = x", "unassigned")
    with pytest.raises(InvalidMessage):
        ElementwiseKernel("T x", "T y", "y = x + w", "unknown_name")
    with pytest.raises(TypeError):
        ElementwiseKernel("float33 x", "T y", "y = x", "bad_type")
    # a function given the wrong number of arguments: the device has no such overload, and
    # NumPy's exp(x, x) would take its second argument as the output
    for op, msg in [("y = exp(x, x)", "exp\\(\\) takes 1 argument, got 2"),
                    ("y = maximum(x)", "takes 2 arguments, got 1"),
                    ("y = pow(x, 2, 3)", "takes 2 arguments, got 3"),
                    ("y = cast_float32()", "takes 1 argument, got 0")]:
        with pytest.raises(InvalidMessage, match=msg):
            ElementwiseKernel("T x", "T y", op, "arity")
    with pytest.raises(InvalidMessage, match="takes 2 arguments"):
        ReductionKernel("T x", "T y", "x", "maximum(a)", "y = a", 0, "arity")


@pytest.mark.parametrize("args,field", [
    ((1, "T y", "y = x"), "in_params"), (("T x", ["T y"], "y = x"), "out_params"),
    (("T x", "T y", 7), "operation"), (("T x", "T y", "y = x", 3), "name")])
def test_elementwise_kernel_refuses_descriptions_that_are_not_text(args, field) -> None:
    with pytest.raises(InvalidMessage) as err:
        ElementwiseKernel(*args)
    assert err.value.field == field


@pytest.mark.parametrize("args,field", [
    ((b"T x", "T y", "x", "a + b", "y = a", 0), "in_params"),
    (("T x", "T y", 3, "a + b", "y = a", 0), "map_expr"),
    (("T x", "T y", "x", None, "y = a", 0), "reduce_expr"),
    (("T x", "T y", "x", "a + b", "y = a", "zero"), "identity"),
    (("T x", "T y", "x", "a + b", "y = a", None), "identity"),
    (("T x", "T y", "x", "a + b", "y = a", [0]), "identity"),
    # a name that is not the input (or _j, _n), not a/b, not a/_n: refused when made
    (("T x", "T y", "x * zz", "a + b", "y = a", 0), "map_expr"),
    (("T x", "T y", "x", "a + c", "y = a", 0), "reduce_expr"),
    (("T x", "T y", "x", "a + b", "y = a / n", 0), "post_map_expr"),
    (("T x", "T y", "x + nan", "a + b", "y = a", 0), "map_expr")])
def test_reduction_kernel_refuses_bad_descriptions_by_name(args, field) -> None:
    with pytest.raises(InvalidMessage) as err:
        ReductionKernel(*args)
    assert err.value.field == field


def test_reduction_kernel_takes_an_identity_as_text_or_number(xp, rng) -> None:
    h = random_values(rng, (5, 7), np.float64, False)
    for ident in ("-inf", float("-inf"), np.float64(-np.inf)):
        top = ReductionKernel("T x", "T y", "x", "maximum(a, b)", "y = a", ident, "top")
        np.testing.assert_array_equal(np.asarray(top(xp.asarray(h), axis=1)), h.max(1))


def test_reduction_kernel(xp, rng) -> None:
    l2 = ReductionKernel("T x", "T y", "x * x", "a + b", "y = sqrt(a)", 0, "l2")
    h = random_values(rng, (6, 9), np.float64, False)
    x = xp.asarray(h)
    np.testing.assert_allclose(np.asarray(l2(x, axis=1)), np.linalg.norm(h, axis=1))
    np.testing.assert_allclose(float(l2(x)), np.linalg.norm(h))
    amax = ReductionKernel("T x", "T y", "abs(x)", "maximum(a, b)", "y = a", "0", "absmax")
    np.testing.assert_array_equal(np.asarray(amax(x, axis=0, keepdims=True)),
                                  np.abs(h).max(0, keepdims=True))


def test_exported_from_gpumsg() -> None:
    assert gpumsg.ElementwiseKernel is ElementwiseKernel
    assert gpumsg.ReductionKernel is ReductionKernel


def test_a_literal_wider_than_the_operand(xp) -> None:
    """C computes ``x + 1000`` for an int8 ``x`` in int and wraps at the store."""
    k = ElementwiseKernel("int8 x", "int8 y", "y = x + 1000", "wide_literal")
    h = np.array([-128, -1, 0, 5, 127], np.int8)
    got = k(xp.asarray(h))
    np.testing.assert_array_equal(np.asarray(got), (h.astype(np.int64) + 1000).astype(np.int8))


def test_a_generated_description_reading_an_unknown_name_is_refused_at_the_call(xp) -> None:
    """The generator's own check (behind the kernels' checks when made): a description that
    reads a name it does not define is refused where it is launched, with a typed error, and
    the device keeps serving (its simulator twin would otherwise fail as a launch and poison
    the device; on a GPU it would not compile)."""
    from gpumsg.array_api import _dtypes as D
    from gpumsg.array_api._codegen import (
        ElementwiseSpec,
        ReductionSpec,
        elementwise_new,
        reduction_new,
    )

    x = xp.asarray(np.arange(1.0, 9.0))
    dev = x.device
    spec = ReductionSpec("typo", "x * nan", "a + b", "out = a", (("x", D.float64, False),),
                         (D.float64,), D.float64, ("out", D.float64))
    with pytest.raises(InvalidMessage, match="'nan'") as err:
        reduction_new(dev, spec, (), (8,), [x._operand((8,))], 0.0)
    assert err.value.field == "map_expr"
    ew = ElementwiseSpec("typo", "out = x + inf", (("x", D.float64, False),), (D.float64,),
                         (("out", D.float64),))
    with pytest.raises(InvalidMessage, match="'inf'"):
        elementwise_new(dev, ew, (8,), [x._operand((8,))])
    assert float(xp.sum(x)) == 36.0


@pytest.mark.parametrize("op,dtype", [("y = x & 1", "float64"), ("y = x % 2", "complex128"),
                                      ("y = signbit(x)", "complex64")])
def test_descriptions_numpy_cannot_compute_are_refused_without_nvrtc(xp, monkeypatch, op,
                                                                     dtype) -> None:
    """Where NVRTC is not installed the simulator cannot compile a kernel's source, and its
    NumPy version would fail only when it ran (a launch failure, which poisons the device):
    the description is evaluated on one element instead, and what NumPy refuses for the
    operands' dtypes is refused at the call, typed; the device keeps serving."""
    import gpumsg.libs.nvrtc._client as client
    from gpumsg.libs._loader import LibraryNotFound

    x = xp.asarray(np.arange(1, 9).astype(dtype))
    if x.device.backend == "cuda":
        pytest.skip("NVRTC compiles the source on a GPU (and refuses it)")

    def no_nvrtc(*args, **kwargs):
        raise LibraryNotFound("nvrtc")

    monkeypatch.setattr(client, "compile_program", no_nvrtc)
    k = ElementwiseKernel("T x", "T y", op, f"probe_{abs(hash((op, dtype)))}")
    with pytest.raises(InvalidMessage, match="cannot be computed for its operands' dtypes"):
        k(x)
    good = ElementwiseKernel("T x", "T y", "y = x + x", f"fine_{abs(hash((op, dtype)))}")
    np.testing.assert_array_equal(np.asarray(good(x)), np.arange(1, 9).astype(dtype) * 2)


def _description(r: random.Random, depth: int = 0) -> str:
    """A random element-wise expression of ``x`` and ``y``: mostly well formed, sometimes a
    function given the wrong number of arguments or a name that is not defined."""
    from gpumsg.array_api._expr import BINARY, FUNCTIONS

    if depth >= 3 or r.random() < 0.3:
        return r.choice(["x", "y", "x", "y", "2", "0.5", "-3", "NAN", "INFINITY", "true",
                         "zz", "nan"])
    kind = r.random()
    if kind < 0.35:
        op = r.choice(["+", "-", "*", "/", "%", "&", "|", "^", "<<", ">>", "<", "==", "&&"])
        return f"({_description(r, depth + 1)} {op} {_description(r, depth + 1)})"
    if kind < 0.45:
        return (f"({_description(r, depth + 1)} ? {_description(r, depth + 1)} : "
                f"{_description(r, depth + 1)})")
    if kind < 0.55:
        return f"{r.choice(['-', '!', '~'])}{_description(r, depth + 1)}"
    name = r.choice(sorted(FUNCTIONS))
    n = 2 if name in BINARY else 1
    if r.random() < 0.1:
        n = r.choice([0, 1, 2, 3])
    return f"{name}({', '.join(_description(r, depth + 1) for _ in range(n))})"


@pytest.mark.parametrize("nvrtc", ["as installed", "missing"])
def test_random_user_kernels_are_answered_or_refused_and_never_break_the_device(
        xp, rng, monkeypatch, nvrtc) -> None:
    """Random descriptions (operators, ternaries, every function, wrong arities, undefined
    names) over random dtypes: each kernel is refused with a typed error or answers, and the
    device keeps serving after every one, with NVRTC as installed (16 kernels) and, on the
    simulator, without it (40)."""
    import gpumsg.libs.nvrtc._client as client
    from gpumsg.errors import GpuError
    from gpumsg.libs._loader import LibraryNotFound

    probe = xp.asarray(np.arange(1.0, 5.0))
    if nvrtc == "missing":
        if probe.device.backend == "cuda":
            pytest.skip("a GPU compiles with NVRTC")

        def no_nvrtc(*args, **kwargs):
            raise LibraryNotFound("nvrtc")
        monkeypatch.setattr(client, "compile_program", no_nvrtc)
    r = random.Random(int(rng.integers(1 << 31)))
    # each kernel is compiled where NVRTC is installed (a fraction of a second each)
    for case in range(16 if nvrtc == "as installed" else 40):
        dtype = r.choice(["float32", "float64", "int32", "int64", "uint8", "complex64", "bool"])
        h = random_values(rng, (5,), getattr(xp, dtype), specials=False)
        x, y = xp.asarray(h), xp.asarray(h[::-1].copy())
        text = f"z = {_description(r)}"
        try:
            k = ElementwiseKernel("T x, T y", "T z", text, f"rk_{case}_{r.randrange(1 << 30)}")
            np.asarray(k(x, y))
        except (GpuError, TypeError, ValueError, OverflowError):
            pass  # refused, typed (InvalidMessage and CompileError are GpuErrors)
        assert float(xp.sum(probe)) == 10.0, (text, dtype)
