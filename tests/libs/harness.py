"""The shared harness of library tests: random inputs of every dtype, float64 references,
tolerances by precision and bad-argument tables, so that a library's tests are mostly tables of
cases.

Fixtures (from ``tests/conftest.py``, visible here): ``backend`` (sim always, cuda where a GPU
is), ``dev`` (an open device on that backend, fault injection allowed), ``rng`` (fresh random
state every run: never zeros, never a fixed seed).

Typical use::

    from tests.libs.harness import BadArg, assert_close, check_bad_args, random_array

    def test_axpy(dev, rng):
        x, y = random_array(rng, (50,), "f32"), random_array(rng, (50,), "f32")
        dy = dev.to_device(y)
        dev.cublas.axpy(dev.to_device(x), dy, 2.0)
        assert_close(dev.copy_to_host(dy).result(), 2.0 * wide(x) + wide(y), "f32")

    BAD = [BadArg("dtype mix", lambda dev: dev.cublas.dot(f32(dev), f64(dev)), field="y")]

    @pytest.mark.parametrize("case", BAD, ids=str)
    def test_bad_arguments(dev, case):
        check_bad_args(dev, case)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import gpumsg

__all__ = ["FLOAT_DTYPES", "REAL_DTYPES", "COMPLEX_DTYPES", "HALF_DTYPES", "ALL_FLOAT_DTYPES",
           "TOLERANCE", "tolerance", "random_array", "random_scalars", "wide", "rel_err",
           "assert_close", "BadArg", "check_bad_args", "device_still_serves", "FakeGraphDriver"]

#: the four BLAS/LAPACK precisions
FLOAT_DTYPES = ("f32", "f64", "c64", "c128")
REAL_DTYPES = ("f32", "f64")
COMPLEX_DTYPES = ("c64", "c128")
HALF_DTYPES = ("f16", "bf16")
ALL_FLOAT_DTYPES = FLOAT_DTYPES + HALF_DTYPES

#: relative Frobenius error ||out - ref|| / ||ref|| that a correct result of a well-conditioned
#: problem lands under, by the precision it was computed in ("tf32": float32 data on the tensor
#: cores). Scale it with ``tolerance(dtype, factor)`` for ill-conditioned or long reductions.
TOLERANCE = {"f64": 1e-12, "c128": 1e-12, "f32": 2e-5, "c64": 2e-5, "tf32": 5e-3,
             "f16": 5e-3, "bf16": 3e-2, "e4m3": 1.5e-1, "e5m2": 2.5e-1}


def tolerance(precision: str, factor: float = 1.0) -> float:
    """The tolerance of ``precision`` (a gpumsg dtype name or "tf32"), times ``factor``."""
    return TOLERANCE[precision] * factor


def random_array(rng: np.random.Generator, shape: Any, dtype: Any, order: str = "C",
                 low: float | None = None) -> np.ndarray:
    """Random data of any gpumsg dtype, never zero: integers over their whole range (zeros
    replaced by 1), floats standard normal plus 0.1 (or uniform on [low, low + 1) when ``low``
    is given: positive data for logs and square roots), complex with both parts random."""
    dt = gpumsg.as_dtype(dtype)
    if dt.kind in "iu":
        info = np.iinfo(dt)
        out = rng.integers(info.min, info.max, size=shape, dtype=dt, endpoint=True)
        out[out == 0] = 1
    elif dt.kind == "c":
        out = (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dt)
    elif low is not None:
        out = (low + rng.random(shape)).astype(dt)
    else:
        out = (rng.standard_normal(shape) + 0.1).astype(dt)
    return np.asarray(out, order=order)  # type: ignore[call-overload]


def random_scalars(rng: np.random.Generator, dtype: str) -> tuple[Any, Any]:
    """An (alpha, beta) pair of the right kind for ``dtype``, both non-zero."""
    if dtype in COMPLEX_DTYPES:
        return complex(rng.uniform(0.5, 1.5), rng.uniform(-1, 1)), complex(-0.5, 0.25)
    return float(rng.uniform(0.5, 1.5)), float(rng.uniform(-1.0, -0.25))


def wide(x: Any) -> np.ndarray:
    """``x`` in float64 or complex128: the precision every reference is computed in."""
    x = np.asarray(x)
    return x.astype(np.complex128 if np.iscomplexobj(x) else np.float64)


def rel_err(out: Any, ref: Any) -> float:
    """||out - ref|| / ||ref|| in float64 (absolute error when ref is all zeros)."""
    out = wide(out)
    ref = wide(ref)
    denom = np.linalg.norm(ref)
    return float(np.linalg.norm(out - ref) / (denom if denom else 1.0))


def assert_close(out: Any, ref: Any, precision: str, factor: float = 1.0) -> None:
    """Fail unless ``out`` matches the float64 reference ``ref`` within the tolerance of
    ``precision``. NaN never passes; shapes must agree."""
    out = np.asarray(out)
    ref = np.asarray(ref)
    assert out.shape == ref.shape, f"shape {out.shape} != reference {ref.shape}"
    assert not np.isnan(wide(out)).any(), "NaN in the result"
    err = rel_err(out, ref)
    tol = tolerance(precision, factor)
    assert err < tol, f"relative error {err:.3g} >= {tol:.3g} ({precision})"


@dataclasses.dataclass(frozen=True)
class BadArg:
    """One row of a bad-argument table: ``call(dev)`` must raise ``error`` at the call site,
    naming ``field`` (when given) and matching ``match`` (a regex, when given). With
    ``deferred`` the refusal may come on the returned future instead (checks only the device
    can make, such as a buffer freed by an earlier message)."""

    name: str
    call: Callable[[Any], Any]
    field: str | None = None
    error: type[BaseException] = gpumsg.InvalidMessage
    match: str | None = None
    deferred: bool = False

    def __str__(self) -> str:
        return self.name


def ones_array(dev: Any, n: int) -> Any:
    """A ``gpumsg.array_api`` array of ``n`` ones on ``dev``: where a call wants a flag, asking
    it for its truth value raises TypeError (n > 1), so the call must refuse it first."""
    import gpumsg.array_api as xp

    return xp.ones(n, device=dev)


def device_still_serves(dev: Any) -> None:
    """The device answers a round trip with the right data (after a refused call)."""
    x = np.arange(7.0) + 0.5
    assert np.array_equal(dev.copy_to_host(dev.to_device(x)).result(), x)


def check_bad_args(dev: Any, case: BadArg) -> None:
    """Run one :class:`BadArg` row: the typed error, its field, and the device unharmed."""
    with pytest.raises(case.error, match=case.match) as info:
        fut = case.call(dev)
        if case.deferred and hasattr(fut, "result"):
            fut.result(timeout=30)
        else:
            pytest.fail(f"{case.name}: not refused at the call site (returned {fut!r})")
    if case.field is not None:
        assert getattr(info.value, "field", None) == case.field, \
            f"{case.name}: error names field {getattr(info.value, 'field', None)!r}, " \
            f"expected {case.field!r}: {info.value}"
    device_still_serves(dev)


class FakeGraphDriver:
    """Stands in for cuda.bindings.driver in GraphReplays (backends/cuda/replays.py): records
    captures and launches; a capture ended while ``refuse`` is set fails, as an engine that
    cannot be captured makes it fail."""

    class CUstreamCaptureMode:
        CU_STREAM_CAPTURE_MODE_THREAD_LOCAL = 1

    def __init__(self) -> None:
        self.capturing, self.refuse, self.launched, self.destroyed = False, False, [], []
        self.graphs = 0
        #: the node types every captured graph holds (cuGraphGetNodes, cuGraphNodeGetType)
        self.node_types = ["CU_GRAPH_NODE_TYPE_KERNEL"]

    def cuStreamBeginCapture(self, stream, mode):
        assert mode == 1 and not self.capturing
        self.capturing = True
        return (0,)

    def cuStreamEndCapture(self, stream):
        self.capturing = False
        if self.refuse:
            return 900, None  # cudaErrorStreamCaptureUnsupported; no graph
        self.graphs += 1
        return 0, self.graphs

    def cuGraphInstantiate(self, graph, flags):
        return 0, ("exec", graph)

    def cuGraphGetNodes(self, graph, count):
        nodes = list(self.node_types)
        return 0, (nodes[:count] if count else None), len(nodes)

    def cuGraphNodeGetType(self, node):
        return 0, type("CUgraphNodeType", (), {"name": node})()

    def cuGraphDestroy(self, graph) -> None: ...

    def cuGraphExecDestroy(self, exec_) -> None:
        self.destroyed.append(exec_)

    def cuGraphLaunch(self, exec_, stream):
        assert not self.capturing
        self.launched.append((exec_, stream))
        return (0,)
