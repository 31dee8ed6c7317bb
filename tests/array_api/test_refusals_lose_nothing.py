"""A call refused because its input failed loses nothing else: the same call on sound arrays
answers afterwards. Each function is called on an array whose allocation the device's budget
refused (its failure typed, raised where the result is read), then twice on a sound array. A
device-wide cache that kept the failure (a shared workspace, a cached constant) would fail the
later calls."""

from __future__ import annotations

import numpy as np
import pytest
from array_helpers import random_values

import gpumsg
import gpumsg.array_api as xpm

MiB = 1 << 20


def _flat(a):
    return xpm.reshape(a, (-1,))


#: name -> the call, on a square float32 array with a dominant diagonal
CALLS = {
    "sum": lambda a: xpm.sum(a), "sum axis 0": lambda a: xpm.sum(a, axis=0),
    "max": lambda a: xpm.max(a), "argmax": lambda a: xpm.argmax(a),
    "mean": lambda a: xpm.mean(a), "std": lambda a: xpm.std(a),
    "var axis 0": lambda a: xpm.var(a, axis=0), "prod axis 1": lambda a: xpm.prod(a, axis=1),
    "any": lambda a: xpm.any(a > 0), "count_nonzero": lambda a: xpm.count_nonzero(a),
    "cumulative_sum": lambda a: xpm.cumulative_sum(_flat(a)),
    "cumulative_prod": lambda a: xpm.cumulative_prod(a, axis=1),
    "sort": lambda a: xpm.sort(_flat(a)), "argsort": lambda a: xpm.argsort(_flat(a)),
    "unique_values": lambda a: xpm.unique_values(a),
    "unique_counts": lambda a: xpm.unique_counts(a)[1],
    "nonzero": lambda a: xpm.nonzero(a > 0)[0], "mask": lambda a: a[a > 0],
    "searchsorted": lambda a: xpm.searchsorted(xpm.sort(_flat(a)), a[0]),
    "take": lambda a: xpm.take(_flat(a), xpm.asarray(np.arange(10), device=a.device), axis=0),
    "where": lambda a: xpm.where(a > 0, a, 0.0), "exp": lambda a: xpm.exp(a),
    "astype": lambda a: xpm.astype(a, xpm.float64), "concat": lambda a: xpm.concat([a, a]),
    "matmul": lambda a: a @ a, "inv": lambda a: xpm.linalg.inv(a),
    "solve": lambda a: xpm.linalg.solve(a, a),
    "fft": lambda a: xpm.fft.fft(xpm.astype(a, xpm.complex64)),
    "rfft2": lambda a: xpm.fft.rfft2(a),
}


@pytest.fixture(scope="module")
def reference():
    """A simulator device of its own, unbudgeted: the calls' answers on sound arrays."""
    d = gpumsg.open_device(0, backend="sim")
    yield d
    d.close()


@pytest.mark.parametrize("name", list(CALLS))
def test_a_refused_call_loses_nothing(backend, rng, reference, name) -> None:
    call = CALLS[name]
    n = 1024
    h = random_values(rng, (n, n), np.float32, False) + 3 * n * np.eye(n, dtype=np.float32)
    sound = h[:64, :64].copy()
    with xpm.fusion(False):
        want = np.asarray(call(xpm.asarray(sound, device=reference)))
        with gpumsg.open_device(0, backend=backend,
                                memory=gpumsg.MemoryConfig(budget=12 * MiB)) as d:
            a = xpm.asarray(h, device=d)  # 4 MiB
            b = a * 2
            c = a + b  # the budget is spent: the next allocation is refused
            with pytest.raises(gpumsg.GpuError):
                np.asarray(call(c))
            del b, c
            small = xpm.asarray(sound, device=d)
            # float32 roundoff scales with the largest term (an FFT's entries all carry the
            # sum's error): the absolute bound follows the answer's largest finite magnitude
            # (exp of the diagonal overflows to inf, which must match exactly)
            finite = np.abs(want[np.isfinite(want)])
            atol = 1e-6 * max(1.0, float(finite.max(initial=0.0)))
            for _ in range(2):
                np.testing.assert_allclose(np.asarray(call(small)), want, rtol=1e-3, atol=atol)
