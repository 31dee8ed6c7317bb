"""The array layer in the fuzz campaign: its tokens made into arrays, and every accepted call's
answer compared with the same call made by NumPy on the host arrays the inputs were made from.

NumPy 2 follows the same standard (the Array API), so the reference of ``xp.f(args)`` is
``np.f(host args)`` for nearly every function; the few that differ (``sort``/``argsort`` with
``descending``, the ``unique_*`` family, whose order NumPy leaves open) have their own
reference. Where the standard leaves a result open (integer division by zero, shifts by
negative or too large amounts, integer powers with negative exponents, NaN ordering) or NumPy
has no such call, the answer is not compared (``NoReference``). A reference that NumPy itself
refuses is not a comparison either.

Comparison: same shape; the same dtype unless the inputs mix kinds (which the standard leaves
open); integers and booleans exactly; floating results with NaN and infinity in the same places
and a norm-wise relative error within :func:`tests.tolerance.bound` of the result's precision
(the reduction length for reductions).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import oracles

import gpumsg.array_api as xp
from gpumsg import BufferFuture, GpuBuffer
from gpumsg.libs._loader import LibraryNotFound
from tests.tolerance import bound

__all__ = ["make_array", "make_list", "NoReference", "check_array_call"]


class NoReference(Exception):
    """The call's answer has nothing to be compared with (see the module's docstring)."""


def _host(rng: np.random.Generator, dtype: str, shape: tuple[int, ...]) -> np.ndarray:
    dt = np.dtype({"bool": "bool"}.get(dtype, dtype))
    if dt.kind == "b":
        return rng.random(shape) < 0.5
    if dt.kind in "iu":
        lo = 0 if dt.kind == "u" else -40
        out = rng.integers(lo, 40, size=shape).astype(dt)
        out[out == 0] = 3  # no zero divisors (integer division by zero is left open)
        return out
    if dt.kind == "c":
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dt)
    return (2.0 * rng.standard_normal(shape) + 0.5).astype(dt)


_DT = {"f32": "float32", "f64": "float64", "f16": "float16", "i32": "int32", "i64": "int64",
       "u8": "uint8", "i16": "int16", "c64": "complex64", "c128": "complex128", "bool": "bool"}


def make_array(token: str, dev: Any, rng: np.random.Generator, hosts: dict[int, np.ndarray]
               ) -> Any:
    """An Array on ``dev`` for token ``a_<dtype>_<shape>[_T|_s2]`` (or ``a_sorted_8``,
    ``a_idx_8``); ``hosts[id(array)]`` is set to the host array it shows."""
    if token == "a_sorted_8":
        host = np.sort(_host(rng, "float64", (8,)))
    elif token == "a_idx_8":
        host = rng.integers(0, 8, size=8).astype(np.int64)
    else:
        parts = token.split("_")
        dtype, shape = _DT[parts[1]], tuple(int(d) for d in parts[2].split("x"))
        extra = parts[3] if len(parts) > 3 else ""
        if extra == "s2":
            base = _host(rng, dtype, shape)
            arr = xp.asarray(base, device=dev)[::2]
            hosts[id(arr)] = base[::2]
            return arr
        host = _host(rng, dtype, shape)
        if extra == "T":
            arr = xp.asarray(host, device=dev).T
            hosts[id(arr)] = host.T
            return arr
    arr = xp.asarray(host, device=dev)
    hosts[id(arr)] = host
    return arr


def make_list(token: str, dev: Any, rng: np.random.Generator, hosts: dict[int, np.ndarray]
              ) -> list:
    """A list of arrays for an ``arrays`` parameter (concat, stack)."""
    spec = {"l_f32_8x8_x2": ["a_f32_8x8", "a_f32_8x8"],
            "l_f64_8_x3": ["a_f64_8", "a_f64_8", "a_f64_8"],
            "l_mixed_8": ["a_f64_8", "a_i32_8"], "l_empty": [],
            "l_shapes": ["a_f32_8x8", "a_f32_3x1"]}
    if token == "l_bad":
        return [make_array("a_f64_8", dev, rng, hosts), "bogus"]
    return [make_array(t, dev, rng, hosts) for t in spec[token]]


# -- references ---------------------------------------------------------------------------------
def _np_args(value: Any, hosts: dict[int, np.ndarray]) -> Any:
    if isinstance(value, xp.Array):
        if id(value) not in hosts:
            raise NoReference("an input array of unknown contents")
        return hosts[id(value)]
    if isinstance(value, (GpuBuffer, BufferFuture)):
        # a buffer is an array too: its contents, read back, are the reference's input
        return np.asarray(value)
    if isinstance(value, list):
        return [_np_args(v, hosts) for v in value]
    if isinstance(value, tuple):
        return tuple(_np_args(v, hosts) for v in value)
    return value


def _stable_argsort(x: np.ndarray, axis: int, descending: bool) -> np.ndarray:
    if not descending:
        return np.argsort(x, axis=axis, stable=True)
    n = x.shape[axis]
    return n - 1 - np.flip(np.argsort(np.flip(x, axis), axis=axis, stable=True), axis)


def _open_cases(name: str, args: list, kwargs: dict) -> None:
    """Raise NoReference where the standard leaves the result open for these inputs."""
    arrays = [a for a in list(args) + list(kwargs.values()) if isinstance(a, np.ndarray)]
    kinds = {a.dtype.kind for a in arrays}
    if name in ("bitwise_left_shift", "bitwise_right_shift") and len(args) > 1:
        shift = np.asarray(args[1])
        bits = 8 * max(np.asarray(args[0]).dtype.itemsize, 1)
        if shift.dtype.kind in "iuf" and ((shift < 0).any() or (shift >= bits).any()):
            raise NoReference("shift by a negative or too large amount")
    if name == "pow" and kinds <= set("iu") and len(args) > 1 and (np.asarray(args[1]) < 0).any():
        raise NoReference("integer power with a negative exponent")
    if name in ("sort", "argsort", "unique_values", "unique_counts", "unique_inverse",
                "unique_all", "searchsorted", "max", "min", "argmax", "argmin") and any(
            a.dtype.kind in "fc" and np.isnan(a).any() for a in arrays):
        raise NoReference("NaN ordering")
    if name == "clip" and len(kinds) > 1:
        raise NoReference("clip with bounds of another kind (left open by the standard)")
    if name in ("arange", "linspace") and any(
            isinstance(a, float) and not math.isfinite(a)
            for a in list(args) + list(kwargs.values())):
        raise NoReference("a non-finite bound or step (NumPy counts one element where the "
                          "standard's ceil((stop - start) / step) gives none)")
    if name in ("sort", "argsort", "searchsorted", "max", "min", "argmax", "argmin",
                "maximum", "minimum", "clip") and "c" in kinds:
        raise NoReference("complex ordering")


def _reference(name: str, args: list, kwargs: dict) -> Any:
    kwargs = {k: v for k, v in kwargs.items() if k != "device"}
    _open_cases(name, args, kwargs)
    if name in ("sort", "argsort"):
        x = args[0]
        axis, desc = kwargs.get("axis", -1), kwargs.get("descending", False)
        if not isinstance(axis, int) or isinstance(axis, bool) or not isinstance(desc, bool):
            raise NoReference("refused by NumPy's rules")
        idx = _stable_argsort(x, axis, desc)
        return idx if name == "argsort" else np.take_along_axis(x, idx, axis)
    if name.startswith("unique_"):
        x = np.asarray(args[0])
        vals, first, inv, counts = np.unique(x, return_index=True, return_inverse=True,
                                             return_counts=True)
        return ("unique", x, vals, counts)
    if "." in name:
        sub, fname = name.split(".")
        fn = getattr(getattr(np, sub), fname, None)
    else:
        fn = getattr(np, name, None)
    if fn is None:
        raise NoReference(f"NumPy has no {name}")
    if name == "diff" and isinstance(kwargs.get("n"), int):
        # NumPy's diff takes n steps even past an empty result (2**31 of them would not end);
        # past the axis's length (at most every element given) each step gives the same array
        bound = 1 + sum(np.size(v) for v in (*args, kwargs.get("prepend"), kwargs.get("append"))
                        if v is not None)
        kwargs = dict(kwargs, n=min(kwargs["n"], bound))
    with np.errstate(all="ignore"):
        try:
            out = fn(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - NumPy refuses: nothing to compare
            raise NoReference(f"NumPy refuses: {exc!r}") from None
    if name in ("empty", "empty_like"):
        return ("empty", out)  # contents undefined (NumPy's and the pool's): shape and dtype
    if name in ("var", "std") and args and isinstance(args[0], np.ndarray):
        # the standard: NaN where N - correction <= 0 (NumPy divides by max(N - c, 0))
        x, axis = args[0], kwargs.get("axis")
        axes = range(x.ndim) if axis is None else (axis,) if isinstance(axis, int) else axis
        count = math.prod(x.shape[a] for a in axes)
        if count - float(kwargs.get("correction", 0.0)) <= 0:
            out = np.full_like(out, np.nan)
    if name == "floor_divide" and len(args) == 2 and np.asarray(out).dtype.kind == "f":
        # an infinite operand: the standard prefers floor(x1 / x2) (inf // 2 is inf), where
        # NumPy pairs // with % (NaN); libraries may take either, this one takes the standard's
        x1, x2 = (np.asarray(a) for a in args)
        with np.errstate(all="ignore"):
            spec = np.floor(np.true_divide(x1, x2)).astype(np.asarray(out).dtype)
        out = np.where(np.isinf(x1) | np.isinf(x2), spec, out)
    return out


def _compare(name: str, got: Any, ref: Any, mixed: bool, n: int) -> None:
    if isinstance(ref, tuple) and ref and isinstance(ref[0], str) and ref[0] == "unique":
        _compare_unique(name, got, ref[1], ref[2], ref[3])
        return
    if isinstance(ref, tuple) and ref and isinstance(ref[0], str) and ref[0] == "empty":
        got, ref = np.asarray(got), ref[1]
        if got.shape != ref.shape or (not mixed and got.dtype != ref.dtype):
            raise oracles.Mismatch(f"{name}: {got.dtype}{list(got.shape)}, expected "
                                   f"{ref.dtype}{list(ref.shape)}")
        return
    if isinstance(ref, (tuple, list)):
        got_items = list(got) if isinstance(got, (tuple, list)) else None
        if got_items is None or len(got_items) != len(ref):
            raise oracles.Mismatch(f"{name}: {type(got).__name__} of "
                                   f"{len(got_items or [])} items, expected {len(ref)}")
        for g, r in zip(got_items, ref):
            _compare(name, g, r, mixed, n)
        return
    if isinstance(got, xp.Array):
        got = np.asarray(got)
    if not isinstance(got, np.ndarray) and not isinstance(ref, np.ndarray):
        if isinstance(ref, (bool, int, float, complex, np.generic)) and not isinstance(
                got, (bool, int, float, complex, np.generic)):
            raise oracles.Mismatch(f"{name}: answered {got!r}, expected {ref!r}")
    got, ref = np.asarray(got), np.asarray(ref)
    if got.shape != ref.shape:
        raise oracles.Mismatch(f"{name}: shape {got.shape}, expected {ref.shape}")
    if not mixed and got.dtype != ref.dtype and ref.dtype != object:
        raise oracles.Mismatch(f"{name}: dtype {got.dtype}, expected {ref.dtype}")
    if ref.dtype.kind in "biuO" or got.dtype.kind in "biu":
        if not np.array_equal(got.astype(ref.dtype) if ref.dtype != object else got, ref):
            bad = np.argwhere(np.asarray(got != ref))
            raise oracles.Mismatch(f"{name}: {len(bad)} elements differ from NumPy's, first "
                                   f"at {tuple(bad[0]) if len(bad) else '?'}")
        return
    if mixed and got.dtype.kind in "fc" and ref.dtype.kind in "fc" and \
            got.dtype.itemsize < ref.dtype.itemsize:
        # mixed kinds promote as the implementation chooses (float32 ** int32 is float32 here,
        # as torch's; NumPy's is float64): the reference is the exact value in the answer's
        # type, where a float64 result too large for float32 is an infinity
        with np.errstate(over="ignore", invalid="ignore"):
            ref = ref.astype(got.dtype)
    g = got.astype(np.complex128 if "c" in (got.dtype.kind + ref.dtype.kind) else np.float64)
    r = ref.astype(g.dtype)
    gn, rn = np.isnan(g), np.isnan(r)
    if (gn != rn).any():
        raise oracles.Mismatch(f"{name}: NaN in {int(gn.sum())} places, NumPy {int(rn.sum())}")
    gi, ri = np.isinf(g) & ~gn, np.isinf(r) & ~rn
    if (gi != ri).any() or (g[gi] != r[ri]).any():
        raise oracles.Mismatch(f"{name}: infinities differ from NumPy's")
    fin = ~(gn | gi)
    if not fin.any():
        return
    den = float(np.linalg.norm(r[fin])) or 1.0
    err = float(np.linalg.norm(g[fin] - r[fin])) / den
    tol = bound(str(got.dtype) if got.dtype.kind in "fc" else "f64", n, c=32)
    if not err <= tol:
        raise oracles.Mismatch(f"{name}: relative error {err:.3g} > {tol:.3g} "
                               f"({got.dtype}, n={n})")


def _compare_unique(name: str, got: Any, x: np.ndarray, vals: np.ndarray, counts: np.ndarray
                    ) -> None:
    """The unique values (in any order, each once), their counts, and indices/inverse that
    lead back to them."""
    fields = got._asdict() if hasattr(got, "_asdict") else {"values": got}
    gv = np.asarray(fields["values"])
    order = np.argsort(gv, stable=True)
    if not np.array_equal(gv[order], vals):
        raise oracles.Mismatch(f"{name}: values {gv[order][:8]}..., expected {vals[:8]}...")
    if "counts" in fields:
        gc = np.asarray(fields["counts"])[order]
        if not np.array_equal(gc, counts):
            raise oracles.Mismatch(f"{name}: counts differ from NumPy's")
    if "inverse_indices" in fields:
        inv = np.asarray(fields["inverse_indices"])
        if inv.shape != x.shape or not np.array_equal(gv[inv], x):
            raise oracles.Mismatch(f"{name}: values[inverse_indices] is not x")
    if "indices" in fields:
        idx = np.asarray(fields["indices"])
        if not np.array_equal(x.reshape(-1)[idx], gv):
            raise oracles.Mismatch(f"{name}: x[indices] is not values")


#: functions whose answers are not arrays (dtypes, limits, predicates, the info object)
NOT_ARRAYS = {"__array_namespace_info__", "finfo", "iinfo", "isdtype", "result_type",
              "can_cast"}


def check_array_call(name: str, positional: list, keywords: dict, answer: Any,
                     hosts: dict[int, np.ndarray]) -> bool:
    """Compare the answer of ``xp.<name>(*positional, **keywords)`` with NumPy's. False where
    there is no reference (nothing was compared), True when it matched; raises
    ``oracles.Mismatch`` when it did not."""
    try:
        args = _np_args(list(positional), hosts)
        kwargs = {k: _np_args(v, hosts) for k, v in keywords.items()}
        ref = _reference(name, args, kwargs)
    except NoReference:
        return False
    if not isinstance(ref, (np.ndarray, np.generic, tuple, list)) or name in NOT_ARRAYS:
        return False  # predicates, dtype functions and info objects: not array answers
    arrays = [a for a in args + list(kwargs.values()) if isinstance(a, np.ndarray)]
    arrays += [b for a in args + list(kwargs.values()) if isinstance(a, list)
               for b in a if isinstance(b, np.ndarray)]
    kinds = {"b" if a.dtype.kind == "b" else "i" if a.dtype.kind in "iu" else "f"
             for a in arrays}
    scalars = [a for a in args + list(kwargs.values())
               if isinstance(a, (int, float, complex)) and not isinstance(a, bool)]
    mixed = len(kinds) > 1 or bool(scalars) or name in ("astype", "asarray") or any(
        a.dtype.kind in "iu" for a in arrays) and name in ("linalg.vector_norm",)
    if name == "clip" and len(kinds) == 1 and args and isinstance(args[0], np.ndarray) and \
            isinstance(ref, np.ndarray):
        # the standard answers clip in x's dtype (NumPy promotes with min and max): NumPy's
        # value rounded to it is the exact answer (rounding keeps the order of x's values)
        ref = ref.astype(args[0].dtype)
    size = max((a.size for a in arrays), default=1)
    out_size = int(np.size(ref)) if isinstance(ref, np.ndarray) else 1
    n = max(2, size // max(out_size, 1)) if size > out_size else 2
    if name.startswith(("linalg.", "fft.")) or name in ("matmul", "tensordot", "vecdot"):
        n = max(n, size)  # factorizations and transforms: the whole input's length
        if name.startswith("linalg.") and name not in ("linalg.matmul", "linalg.tensordot",
                                                       "linalg.vecdot", "linalg.outer",
                                                       "linalg.cross", "linalg.diagonal",
                                                       "linalg.trace", "linalg.matrix_transpose"):
            return _check_factorization(name, args, answer, ref)
    _compare(name, answer, ref, mixed, int(n))
    return True


def _check_factorization(name: str, args: list, answer: Any, ref: Any) -> bool:
    """linalg's factorizations and solves: compared through what defines them (their inputs
    are random, so the condition number scales the tolerance)."""
    a = np.asarray(args[0]) if args else None
    if a is None or a.ndim < 2 or a.dtype.kind not in "fc":
        return False
    cond = float(np.linalg.cond(a.astype(np.complex128 if a.dtype.kind == "c" else np.float64)
                                ).max()) if a.shape[-1] == a.shape[-2] else 1.0
    if not math.isfinite(cond) or cond > 1e4:
        return False  # near singular: nothing meaningful to compare
    tol_cond = cond if name in ("linalg.det", "linalg.slogdet", "linalg.inv", "linalg.solve",
                                "linalg.matrix_power", "linalg.pinv", "linalg.eigvalsh",
                                "linalg.matrix_rank") else 1.0
    dt = str(np.asarray(answer[0] if isinstance(answer, tuple) else answer).dtype)
    dt = dt if dt in ("float32", "float64", "complex64", "complex128") else str(a.dtype)
    if name in ("linalg.qr", "linalg.svd", "linalg.eigh"):
        return _check_decomposition(name, a, answer, dt)
    if name == "linalg.matrix_rank":
        _compare(name, answer, ref, True, 2)
        return True
    _compare(name, answer, ref, True, int(a.shape[-1]) * int(max(tol_cond, 1) ** 0.5 * 4) + 2)
    return True


def _check_decomposition(name: str, a: np.ndarray, answer: Any, dt: str) -> bool:
    parts = [np.asarray(p) for p in answer]
    a64 = a.astype(np.complex128)
    n = max(a.shape[-2:])
    tol = bound(dt, n, c=32)
    if name == "linalg.qr":
        q, r = parts
        rec, basis = q @ r, q
    elif name == "linalg.svd":
        u, s, vh = parts
        k = s.shape[-1]
        rec = (u[..., :, :k] * s[..., None, :]) @ vh[..., :k, :]
        basis = u
    else:
        w, v = parts
        herm = np.tril(a64) + np.swapaxes(np.tril(a64, -1), -1, -2).conj()
        # the lower triangle read as a Hermitian matrix: a real diagonal
        diag = np.diagonal(herm, axis1=-2, axis2=-1)
        herm = herm - 1j * np.einsum("...i,ij->...ij", diag.imag, np.eye(diag.shape[-1]))
        rec, basis = herm @ v, v
        a64 = v * w[..., None, :]
    scale = np.linalg.norm(a64) or 1.0
    err = float(np.linalg.norm(rec - a64)) / scale
    eye = np.eye(basis.shape[-1])
    orth = float(np.linalg.norm(np.swapaxes(basis, -1, -2).conj() @ basis - eye))
    if not (err <= tol and orth <= tol * basis.shape[-1]):
        raise oracles.Mismatch(f"{name}: reconstruction error {err:.3g}, orthonormality "
                               f"error {orth:.3g} (tolerance {tol:.3g})")
    return True


# -- valid calls of the array layer: random arguments inside each function's contract ------------
_UNARY_F = ["abs", "acos", "asin", "atan", "cos", "cosh", "sin", "sinh", "tan", "tanh", "exp",
            "expm1", "log", "log1p", "log2", "log10", "sqrt", "square", "ceil", "floor",
            "trunc", "round", "sign", "negative", "positive", "isnan", "isfinite", "signbit",
            "reciprocal"]
_BINARY_F = ["add", "subtract", "multiply", "divide", "pow", "maximum", "minimum", "atan2",
             "hypot", "copysign", "logaddexp", "equal", "less", "greater_equal", "not_equal",
             "floor_divide", "remainder"]
_INT_F = ["bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_invert", "add", "multiply",
          "floor_divide", "remainder", "abs", "negative", "square", "maximum", "less"]
_REDUCE = ["sum", "prod", "mean", "max", "min", "std", "var", "argmax", "argmin",
           "cumulative_sum", "count_nonzero", "all", "any"]


def _valid_host(rng: np.random.Generator, kind: str, shape: tuple[int, ...]) -> np.ndarray:
    dtype = {"f": str(rng.choice(["float32", "float64"])), "c": "complex64",
             "i": str(rng.choice(["int32", "int64", "int16"])), "b": "bool"}[kind]
    host = _host(rng, dtype, shape)
    if kind == "f":  # inside every function's domain: (0.1, 0.9) for acos/asin/log...
        host = (rng.uniform(0.1, 0.9, shape)).astype(dtype)
    return host


def _up(dev: Any, host: np.ndarray, hosts: dict[int, np.ndarray], view: bool = False) -> Any:
    if view and host.ndim == 2:  # a transposed view: strides other than C order
        arr = xp.asarray(np.ascontiguousarray(host.T), device=dev).T
    else:
        arr = xp.asarray(host, device=dev)
    hosts[id(arr)] = host
    return arr


def _shape(rng: np.random.Generator, lo: int = 1) -> tuple[int, ...]:
    return tuple(int(d) for d in rng.integers(lo, 7, size=int(rng.integers(1, 4))))


def _checked(name: str, pos: list, kw: dict, answer: Any, hosts: dict[int, np.ndarray]) -> int:
    if not check_array_call(name, pos, kw, _read(answer), hosts):
        raise oracles.Mismatch(f"xp.{name}: the valid call has no reference")
    return 1


def _read(answer: Any) -> Any:
    if isinstance(answer, xp.Array):
        return np.asarray(answer)
    if isinstance(answer, tuple) and hasattr(answer, "_fields"):
        return type(answer)(*(_read(a) for a in answer))
    if isinstance(answer, (tuple, list)):
        return type(answer)(_read(a) for a in answer)
    return answer


def valid_elementwise(dev: Any, rng: np.random.Generator) -> int:
    hosts: dict[int, np.ndarray] = {}
    shape = _shape(rng)
    view = bool(rng.random() < 0.3)
    if rng.random() < 0.25:
        name = str(rng.choice(_INT_F))
        unary = name in ("bitwise_invert", "abs", "negative", "square")
        kind = "i"
    else:
        name = str(rng.choice(_UNARY_F + _BINARY_F))
        unary = name in _UNARY_F
        kind = "f"
    x1 = _up(dev, _valid_host(rng, kind, shape), hosts, view)
    if unary:
        pos = [x1]
    elif rng.random() < 0.3:  # a Python scalar operand
        pos = [x1, 3 if kind == "i" else float(rng.uniform(0.2, 0.8))]
    else:  # broadcasting against a trailing shape
        other = shape[int(rng.integers(0, len(shape))):]
        pos = [x1, _up(dev, _valid_host(rng, kind, other), hosts)]
    fn = getattr(xp, name)
    return _checked(name, pos, {}, fn(*pos), hosts)


def valid_reduction(dev: Any, rng: np.random.Generator) -> int:
    hosts: dict[int, np.ndarray] = {}
    shape = _shape(rng)
    name = str(rng.choice(_REDUCE))
    kind = "b" if name in ("all", "any") else "i" if rng.random() < 0.2 and name not in (
        "mean", "std", "var") else "f"
    x = _up(dev, _valid_host(rng, kind, shape), hosts, bool(rng.random() < 0.3))
    kw: dict[str, Any] = {}
    if name == "cumulative_sum":
        if len(shape) > 1 or rng.random() < 0.5:
            kw["axis"] = int(rng.integers(-len(shape), len(shape)))
        kw["include_initial"] = bool(rng.random() < 0.5)
    elif name in ("argmax", "argmin"):
        if rng.random() < 0.6:
            kw["axis"] = int(rng.integers(-len(shape), len(shape)))
        kw["keepdims"] = bool(rng.random() < 0.5)
    else:
        r = rng.random()
        if r < 0.4:
            kw["axis"] = int(rng.integers(-len(shape), len(shape)))
        elif r < 0.6 and len(shape) > 1:
            kw["axis"] = (0, len(shape) - 1)
        kw["keepdims"] = bool(rng.random() < 0.5)
        if name in ("std", "var") and rng.random() < 0.5:
            kw["correction"] = 1.0 if min(shape) > 1 else 0.0
    return _checked(name, [x], kw, getattr(xp, name)(x, **kw), hosts)


def valid_manipulation(dev: Any, rng: np.random.Generator) -> int:
    hosts: dict[int, np.ndarray] = {}
    shape = _shape(rng, 2)
    x = _up(dev, _valid_host(rng, str(rng.choice(["f", "i"])), shape), hosts,
            bool(rng.random() < 0.3))
    nd = len(shape)
    name = str(rng.choice(["reshape", "permute_dims", "concat", "stack", "flip", "roll",
                           "tile", "repeat", "expand_dims", "moveaxis", "broadcast_to",
                           "matrix_transpose", "diff", "tril", "triu", "unstack"]))
    if name in ("matrix_transpose", "tril", "triu") and nd < 2:
        shape = shape + (int(rng.integers(1, 5)),)
        nd = 2
        x = _up(dev, _valid_host(rng, "f", shape), hosts)
    pos: list = [x]
    kw: dict[str, Any] = {}
    if name == "reshape":
        kw["shape"] = (-1,) if rng.random() < 0.5 else (shape[0], -1)
    elif name == "permute_dims":
        kw["axes"] = tuple(int(a) for a in rng.permutation(nd))
    elif name in ("concat", "stack"):
        other = _up(dev, _valid_host(rng, "f" if x.dtype.kind == "f" else "i", shape), hosts)
        pos = [[x, other]]
        kw["axis"] = int(rng.integers(-nd, nd))
    elif name == "flip":
        kw["axis"] = None if rng.random() < 0.3 else int(rng.integers(-nd, nd))
    elif name == "roll":
        pos.append(int(rng.integers(-9, 9)))
        kw["axis"] = None if rng.random() < 0.3 else int(rng.integers(-nd, nd))
    elif name == "tile":
        pos.append(tuple(int(r) for r in rng.integers(1, 3, size=nd)))
    elif name == "repeat":
        pos.append(int(rng.integers(1, 4)))
        kw["axis"] = None if rng.random() < 0.3 else int(rng.integers(0, nd))
    elif name == "expand_dims":
        kw["axis"] = int(rng.integers(-nd - 1, nd + 1))
    elif name == "moveaxis":
        pos += [int(rng.integers(0, nd)), int(rng.integers(0, nd))]
    elif name == "broadcast_to":
        kw["shape"] = (3,) + shape
    elif name == "diff":
        kw["axis"] = int(rng.integers(-nd, nd))
    elif name in ("tril", "triu"):
        kw["k"] = int(rng.integers(-2, 3))
    elif name == "unstack":
        kw["axis"] = int(rng.integers(-nd, nd))
    return _checked(name, pos, kw, getattr(xp, name)(*pos, **kw), hosts)


def valid_indexing(dev: Any, rng: np.random.Generator) -> int:
    hosts: dict[int, np.ndarray] = {}
    shape = _shape(rng, 2)
    host = _valid_host(rng, "f", shape)
    x = _up(dev, host, hosts)
    if rng.random() < 0.5:  # basic indexing: a slice with a step per axis, an integer
        key = tuple(slice(int(rng.integers(0, d)), None, int(rng.choice([1, 2, -1])))
                    for d in shape)
        if rng.random() < 0.3:
            key = (int(rng.integers(0, shape[0])),) + key[1:]
        got = np.asarray(x[key])
        ref = host[key]
        _compare("getitem", got, ref, False, 2)
        return 1
    axis = int(rng.integers(0, len(shape)))
    idx_h = rng.integers(0, shape[axis], size=int(rng.integers(1, 9))).astype(np.int64)
    idx = _up(dev, idx_h, hosts)
    if rng.random() < 0.5:
        return _checked("take", [x, idx], {"axis": axis}, xp.take(x, idx, axis=axis), hosts)
    along = rng.integers(0, shape[-1], size=shape).astype(np.int64)
    ia = _up(dev, along, hosts)
    return _checked("take_along_axis", [x, ia], {"axis": -1},
                    xp.take_along_axis(x, ia, axis=-1), hosts)


def valid_sorting(dev: Any, rng: np.random.Generator) -> int:
    try:
        return _valid_sorting(dev, rng)
    except LibraryNotFound as exc:
        if "CCCL" in str(exc):  # a GPU machine without CUB's headers: nothing to compare
            return 0
        raise


def _valid_sorting(dev: Any, rng: np.random.Generator) -> int:
    hosts: dict[int, np.ndarray] = {}
    shape = _shape(rng)
    kind = str(rng.choice(["f", "i"]))
    host = _valid_host(rng, kind, shape)
    if kind == "i":
        host = (host % 5).astype(host.dtype)  # ties: stability shows
    x = _up(dev, host, hosts)
    name = str(rng.choice(["sort", "argsort", "searchsorted", "unique_values",
                           "unique_counts", "unique_inverse", "unique_all", "nonzero"]))
    if name in ("sort", "argsort"):
        kw = {"axis": int(rng.integers(-len(shape), len(shape))),
              "descending": bool(rng.random() < 0.5)}
        return _checked(name, [x], kw, getattr(xp, name)(x, **kw), hosts)
    if name == "searchsorted":
        sorted_h = np.sort(host.reshape(-1))
        s = _up(dev, sorted_h, hosts)
        kw = {"side": str(rng.choice(["left", "right"]))}
        return _checked(name, [s, x], kw, xp.searchsorted(s, x, **kw), hosts)
    return _checked(name, [x], {}, getattr(xp, name)(x), hosts)


ARRAY_VALID = {"array.elementwise": valid_elementwise, "array.reduction": valid_reduction,
               "array.manipulation": valid_manipulation, "array.indexing": valid_indexing,
               "array.sorting": valid_sorting}

