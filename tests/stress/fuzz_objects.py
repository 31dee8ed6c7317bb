"""The fuzz campaign's calls on objects made per case, and their references: a random
``Generator``'s methods (held to NumPy's ``Generator`` on the same arguments: shape, dtype, NaN)
and a sparse matrix's methods and operators, and the sparse package's functions (held to SciPy's
answer on the same matrix and arguments)."""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import oracles
from fuzz_arrays import NoReference, _np_args

import gpumsg.array_api as xp
import gpumsg.array_api.sparse as xsp

__all__ = ["invoke", "SparseAnswer", "check_random_call", "check_sparse_call",
           "check_sparse_function", "sparse_host", "sparse_matrix", "call_sparse"]


def _np_call(positional: Any, keywords: dict, hosts: Any, drop: str | None = None
             ) -> tuple[list, dict]:
    """A call's arguments with the case's arrays as their host copies (the keyword ``drop``
    left out); raises NoReference where one has none."""
    args = _np_args(list(positional), hosts)
    kwargs = {k: _np_args(v, hosts) for k, v in keywords.items() if k != drop}
    return args, kwargs


def invoke(kind: str, name: str, positional: list, keywords: dict) -> Any:
    """Call target ``name`` of ``kind`` "random" (a method of a generator made for the case) or
    "sparse" (``<format>.<method>`` of a matrix made for the case)."""
    if kind == "random":
        return getattr(xp.random.default_rng(1729), name)(*positional, **keywords)
    fmt, meth = name.split(".")
    return call_sparse(sparse_matrix(fmt), meth, positional, keywords)


# -- random generators ------------------------------------------------------------------------
#: random methods whose answer is not an array of draws (a list of generators, bytes, None)
RANDOM_NOT_ARRAYS = {"spawn", "bytes", "shuffle"}


def check_random_call(name: str, positional: list, keywords: dict, answer: Any,
                      hosts: dict[int, np.ndarray]) -> bool:
    """Compare the answer of ``Generator.<name>(*positional, **keywords)`` with NumPy's
    ``Generator`` on the same arguments, where NumPy accepts them: the draws differ (another
    bit generator), but the shape must be NumPy's, the dtype NumPy's where no dtype was asked
    for, and a draw may be NaN only where NumPy's draws are (NaN parameters). False where
    nothing was compared; raises ``oracles.Mismatch``."""
    if name in RANDOM_NOT_ARRAYS or not isinstance(answer, np.ndarray):
        return False
    try:
        args, kwargs = _np_call(positional, keywords, hosts, "out")
    except NoReference:
        return False
    if "out" in keywords or any(isinstance(v, np.ndarray) and v.size > 4096
                                for v in list(args) + list(kwargs.values())):
        return False
    try:
        elements = np.prod(np.atleast_1d(np.asarray(kwargs.get("size", 1), dtype=object)))
        if elements > 1 << 16:
            return False  # NumPy would draw it all on the host
    except (TypeError, ValueError):
        return False  # not a size NumPy takes
    fn = getattr(np.random.default_rng(0), name, None)
    if fn is None:
        return False
    with np.errstate(all="ignore"):
        try:
            ref = np.asarray(fn(*args, **kwargs))
        except Exception:  # noqa: BLE001 - NumPy refuses: no reference (gpumsg may extend)
            return False
    if answer.shape != ref.shape:
        raise oracles.Mismatch(f"random.{name}: shape {answer.shape}, NumPy's {ref.shape}")
    if "dtype" not in kwargs and answer.dtype != ref.dtype:
        raise oracles.Mismatch(f"random.{name}: dtype {answer.dtype}, NumPy's {ref.dtype}")
    if answer.dtype.kind in "fc" and np.isnan(answer).any() and not (
            ref.dtype.kind in "fc" and np.isnan(ref).any()):
        raise oracles.Mismatch(f"random.{name}: NaN drawn where NumPy's draws have none")
    return True


# -- sparse matrices --------------------------------------------------------------------------
class SparseAnswer(NamedTuple):
    """A sparse answer read back: its format and its dense values."""

    format: str
    dense: np.ndarray


def sparse_host(fmt: str) -> Any:
    """The SciPy matrix every sparse case of format ``fmt`` starts from: 8 x 8, float64, 19
    stored values (a fixed seed, so the case and its check see the same one)."""
    import scipy.sparse as ss

    return ss.random(8, 8, density=0.3, format=fmt, random_state=7)


#: the operators fuzzed on sparse matrices, called as Python calls them (a method returning
#: NotImplemented hands the operation to the other operand, or raises TypeError)
SPARSE_OPERATOR_CALLS: dict[str, Any] = {
    "__matmul__": lambda m, o: m @ o, "__rmatmul__": lambda m, o: o @ m,
    "__mul__": lambda m, o: m * o, "__rmul__": lambda m, o: o * m,
    "__add__": lambda m, o: m + o, "__radd__": lambda m, o: o + m,
    "__sub__": lambda m, o: m - o, "__rsub__": lambda m, o: o - m,
    "__truediv__": lambda m, o: m / o, "__neg__": lambda m: -m,
    "__pow__": lambda m, o: m ** o, "__getitem__": lambda m, k: m[k]}


def call_sparse(m: Any, meth: str, positional: list, keywords: dict) -> Any:
    """``m.<meth>(...)``: a method, or an operator as Python applies it."""
    op = SPARSE_OPERATOR_CALLS.get(meth)
    if op is not None:
        return op(m, *positional, *keywords.values())
    return getattr(m, meth)(*positional, **keywords)


def sparse_matrix(fmt: str) -> Any:
    """:func:`sparse_host`'s matrix on the default device, in format ``fmt``."""
    return getattr(xsp, f"{fmt}_matrix")(sparse_host(fmt))


#: sparse functions whose answer is drawn at random: no reference
SPARSE_RANDOM = {"random", "rand"}


def check_sparse_function(name: str, positional: list, keywords: dict, answer: Any,
                          hosts: dict[int, np.ndarray]) -> bool:
    """The answer of array target ``name`` (``sparse.<fname>``) against
    ``scipy.sparse.<fname>``'s on the same host arguments (where SciPy accepts them)."""
    import scipy.sparse as ss

    fname = name.split(".", 1)[1]

    if fname in SPARSE_RANDOM:
        return False
    try:
        args, kwargs = _np_call(positional, keywords, hosts, "device")
    except NoReference:
        return False
    with np.errstate(all="ignore"):
        try:
            ref = getattr(ss, fname)(*args, **kwargs)
        except Exception:  # noqa: BLE001 - SciPy refuses: no reference
            return False
    return _compare_sparse(f"sparse.{fname}", answer, ref)


def check_sparse_call(name: str, positional: list, keywords: dict, answer: Any,
                      hosts: dict[int, np.ndarray]) -> bool:
    """Compare the answer of ``<format>.<method>(*positional, **keywords)`` on
    :func:`sparse_matrix` with SciPy's same call on :func:`sparse_host`, where SciPy accepts
    the arguments: the dense values (a sparse answer densified, np.matrix as an array), to
    float64 rounding. False where nothing was compared; raises ``oracles.Mismatch``."""
    fmt, meth = name.split(".")
    if answer is None:
        return False  # in place (sort_indices, sum_duplicates)
    try:
        args, kwargs = _np_call(positional, keywords, hosts)
    except NoReference:
        return False
    host = sparse_host(fmt)
    with np.errstate(all="ignore"):
        try:
            ref = call_sparse(host, meth, args, kwargs)
        except Exception:  # noqa: BLE001 - SciPy refuses: no reference (gpumsg may extend)
            return False
    return _compare_sparse(f"sparse {name}", answer, ref)


def _compare_sparse(name: str, answer: Any, ref: Any) -> bool:
    """A sparse case's answer (read back) against SciPy's: a predicate's truth, or the dense
    values to the rounding of the coarser precision; raises ``oracles.Mismatch``."""
    if isinstance(ref, bool):
        if answer is not ref:
            raise oracles.Mismatch(f"{name}: {answer!r}, SciPy's {ref!r}")
        return True
    if ref is None or isinstance(ref, str):
        return False
    ref = np.asarray(ref.toarray() if hasattr(ref, "toarray") else ref)
    got = answer.dense if isinstance(answer, SparseAnswer) else np.asarray(answer)
    if got.shape != ref.shape:
        raise oracles.Mismatch(f"{name}: shape {got.shape}, SciPy's {ref.shape}")
    if ref.dtype.kind not in "biufc" or got.dtype.kind not in "biufc":
        return False
    if not np.array_equal(np.isnan(got), np.isnan(ref)):
        raise oracles.Mismatch(f"{name}: NaN where SciPy's answer has none, or not "
                               "where it has")
    scale = max(1.0, float(np.nanmax(np.abs(ref))) if ref.size and not np.isnan(ref).all()
                else 1.0)
    # the coarser of the two answers' precisions (a float32 sum asked for, say), over sums of
    # at most 8 terms of the 8 x 8 matrix
    floats = [np.finfo(a.dtype).eps for a in (got, ref) if a.dtype.kind in "fc"]
    tol = 64 * max(floats, default=np.finfo(np.float64).eps) * scale
    finite = np.isfinite(ref)
    if not np.array_equal(got[~finite & ~np.isnan(ref)], ref[~finite & ~np.isnan(ref)]) or \
            np.abs(got[finite] - ref[finite]).max(initial=0.0) > tol:
        raise oracles.Mismatch(f"{name}: values differ from SciPy's (largest "
                               f"difference {np.abs(got[finite] - ref[finite]).max(initial=0.0)})")
    return True
