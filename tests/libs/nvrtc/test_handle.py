"""The CUDA handle's parameter packing, checked without a GPU: the ``void*[]`` that
``cuLaunchKernel`` reads points at each parameter's bytes, as one ctypes value a parameter would
hold them, for every kind and the edges of its range."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

from gpumsg.libs.nvrtc._handle import CTYPE_OF_KIND, pack, pack_each


def _values(rng: np.random.Generator, kind: str) -> list:
    if kind == "bool":
        return [True, False, 0, 1]
    if kind[0] == "f":
        big = 1e39 if kind == "f32" else 1e300  # beyond the type: ctypes' conversion decides
        return [0.0, -0.0, 1.5, -3.25e10, np.inf, -np.inf, np.nan, 1e-30, 3e38, big, 7,
                float(rng.standard_normal())]
    bits = 64 if kind == "ptr" else int(kind[1:])
    lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if kind[0] == "i" else (0, (1 << bits) - 1)
    return [lo, hi, 0, 1, True, int(rng.integers(0, 1 << 30)) % (hi + 1)]


@pytest.mark.filterwarnings("ignore:overflow encountered")
def test_packed_parameters_hold_each_kinds_bytes(rng) -> None:
    kinds = list(CTYPE_OF_KIND)
    for _ in range(300):
        chosen = tuple(str(rng.choice(kinds)) for _ in range(int(rng.integers(1, 12))))
        values = [v for k in chosen for v in [rng.choice(np.array(_values(rng, k),
                                                                  dtype=object))]]
        params, held = pack(chosen, values)  # what params points into lives while held does
        each, held_each = pack_each(chosen, values)
        pointers = ctypes.cast(params, ctypes.POINTER(ctypes.c_uint64))
        expected = ctypes.cast(each, ctypes.POINTER(ctypes.c_uint64))
        for i, k in enumerate(chosen):
            size = ctypes.sizeof(CTYPE_OF_KIND[k])
            got = ctypes.string_at(pointers[i], size)
            assert got == ctypes.string_at(expected[i], size), (k, values[i])
            assert pointers[i] % size == 0  # aligned for its type
