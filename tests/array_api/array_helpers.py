"""Helpers of the array tests (the ``xp`` fixture is in the suite's conftest): dtype lists,
tolerances and random inputs with the standard's special values.

Not a ``conftest.py``: the suite's own conftest is imported by name (``from conftest import``),
and a second module of that name would shadow it."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

#: dtypes the tests run over, with the relative tolerance of a result of that dtype
FLOAT_TOL = {"float16": 2e-3, "bfloat16": 1.6e-2, "float32": 2e-5, "float64": 1e-12,
             "complex64": 2e-5, "complex128": 1e-12}
INT_DTYPES = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"]
FLOAT_DTYPES = ["float16", "bfloat16", "float32", "float64"]
COMPLEX_DTYPES = ["complex64", "complex128"]
ALL_DTYPES = ["bool"] + INT_DTYPES + FLOAT_DTYPES + COMPLEX_DTYPES


def special_values(dtype: np.dtype) -> np.ndarray:
    """The values the standard names for special cases: NaN, +-inf, +-0, the extremes."""
    dtype = np.dtype(dtype)
    if dtype.kind == "f" or dtype.name == "bfloat16":
        return np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 0.5, -2.5],
                        np.float64)
    if dtype.kind == "c":
        re = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0])
        out = np.empty((len(re), len(re)), np.complex128)
        out.real = re[:, None]
        out.imag = re[None, :]
        return out.ravel()
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return np.array([info.min, info.max, 1, info.max - 1], dtype)
    return np.array([True, False])


def random_values(rng: np.random.Generator, shape, dtype, specials: bool = True) -> np.ndarray:
    """Random, non-zero values of ``dtype`` (with the special values mixed in)."""
    dtype = np.dtype(dtype)
    n = int(np.prod(shape))
    if dtype == np.bool_:
        out = rng.integers(0, 2, n).astype(bool)
    elif dtype.kind in "iu":
        info = np.iinfo(dtype)
        out = rng.integers(info.min, info.max, size=n, dtype=dtype, endpoint=True)
        out[out == 0] = 1
    elif dtype.kind == "c":
        out = (rng.standard_normal(n) * 3 + 1j * rng.standard_normal(n) * 3)
    else:
        out = rng.standard_normal(n) * 3 + 0.25
    if specials and n:
        sp = special_values(dtype)
        k = min(len(sp), n // 2)
        idx = rng.choice(n, size=k, replace=False)
        out = out.astype(np.result_type(out.dtype, sp.dtype)) if dtype.kind != "b" else out
        out[idx] = sp[:k]
    return np.asarray(out).astype(dtype).reshape(shape)


def nvrtc_compile_program() -> Any:
    """NVRTC's ``compile_program`` (kernels compile without a GPU), or a skip where the NVRTC
    library is not installed."""
    from gpumsg.libs._loader import LibraryNotFound
    from gpumsg.libs.nvrtc._compiler import compile_program, nvrtc_version

    try:
        nvrtc_version()
    except LibraryNotFound:
        pytest.skip("NVRTC is not installed here")
    return compile_program


def in_threads(work: Callable[[int], None], count: int = 4) -> None:
    """Run ``work(k)`` on ``count`` threads at once (k = 0, 1, ...) and raise the first
    exception one of them raised, once all have ended."""
    errors: list[BaseException] = []

    def run(k: int) -> None:
        try:
            work(k)
        except BaseException as exc:  # noqa: BLE001 - raised on the caller's thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(k,)) for k in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
