"""Numeric trouble fails as the GPU fails, on both backends: inf/NaN in the output, or the
LinAlgError the library reports through its info word — never a fault that breaks the device.

Each case runs on the simulator and (marked gpu) on CUDA, then checks that the device still
serves. Where the libraries answer without an error (cuBLAS's trsv/trsm and cuSPARSE's
SpSV/SpSM divide by a zero pivot; cuSOLVER's eigen/SVD drivers on NaN input), the test
checks the finite part against a float64 reference and the rest for inf/NaN.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import gpumsg
from gpumsg.errors import ContextPoisoned, DependencyFailed, LibraryError, LinAlgError

N = 6
#: the row whose pivot is zero
K = 3


def _ns(dev, *names: str):
    for name in names:
        if hasattr(dev, name):
            return getattr(dev, name)
    raise AssertionError(f"no namespace among {names}")


def _serving(dev) -> None:
    x = np.arange(10, dtype=np.int64)
    assert np.array_equal(dev.copy_to_host(dev.to_device(x)).result(timeout=60), x)


def _host(dev, buf) -> np.ndarray:
    return dev.copy_to_host(buf).result(timeout=60)


def _singular_lower(rng) -> np.ndarray:
    """A well-conditioned lower triangle (column-major use) whose pivot K is exactly 0."""
    a = np.tril(rng.standard_normal((N, N))) * 0.3 + np.eye(N) * 2.0
    a[K, K] = 0.0
    return a


def _check_substitution(x: np.ndarray, a: np.ndarray, b: np.ndarray, tol: float) -> None:
    """Rows before the zero pivot solve exactly; the pivot's row is not finite (cuBLAS and
    cuSPARSE divide by it without a check)."""
    ref = np.linalg.solve(a[:K, :K], b[:K])
    np.testing.assert_allclose(x[:K], ref, rtol=tol, atol=tol)
    assert not np.all(np.isfinite(x[K:])), x


@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_trsv_zero_pivot_gives_inf(dev, rng, dtype: str) -> None:
    a = _singular_lower(rng)
    b = rng.standard_normal(N) + 0.5
    t = gpumsg.as_dtype(dtype)
    blas = _ns(dev, "cublas", "blas")
    da = dev.to_device(np.asfortranarray(a.astype(t)))
    x = dev.to_device(b.astype(t))
    blas.trsv(da, x, N, uplo="L").result(timeout=60)
    _check_substitution(_host(dev, x).astype(np.float64), a, b, 1e-4 if dtype == "f32" else 1e-10)
    _serving(dev)


@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_trsm_zero_pivot_gives_inf(dev, rng, dtype: str) -> None:
    a = _singular_lower(rng)
    b = rng.standard_normal((N, 2)) + 0.5
    t = gpumsg.as_dtype(dtype)
    blas = _ns(dev, "cublas", "blas")
    da = dev.to_device(np.asfortranarray(a.astype(t)))
    db = dev.to_device(np.asfortranarray(b.astype(t)))
    blas.trsm(da, db, N, 2, uplo="L").result(timeout=60)
    _check_substitution(_host(dev, db).astype(np.float64), a, b, 1e-4 if dtype == "f32" else 1e-10)
    _serving(dev)


@pytest.mark.parametrize("what", ["spsv", "spsm"])
def test_sparse_triangular_zero_pivot_gives_inf(dev, rng, what: str) -> None:
    a = _singular_lower(rng)
    # the zero pivot is stored (cuSPARSE divides by it): built nonzero, then zeroed in place,
    # since SciPy drops zeros when it builds a matrix
    stored = a.copy()
    stored[K, K] = 1.0
    m = sp.csr_matrix(stored)
    m[K, K] = 0.0
    assert m.nnz == sp.csr_matrix(stored).nnz
    sparse = _ns(dev, "cusparse", "sparse")
    mat = sparse.csr(m, index_dtype="i32")
    if what == "spsv":
        b = rng.standard_normal(N) + 0.5
        y = sparse.spsv(mat, dev.to_device(b), uplo="L")
    else:
        b = rng.standard_normal((N, 3)) + 0.5
        y = sparse.spsm(mat, dev.to_device(b), uplo="L")
    _check_substitution(_host(dev, y).astype(np.float64), a, b, 1e-10)
    _serving(dev)


def _nan_or_linalg_error(dev, call) -> None:
    """The call answers NaN (or inf) somewhere, or fails with a LinAlgError; the device
    serves on."""
    try:
        out = call()
        parts = out.result(timeout=60) if hasattr(out, "result") else out
        parts = parts if isinstance(parts, tuple) else (parts,)
        values = [_host(dev, p) for p in parts]
        assert any(not np.all(np.isfinite(v)) for v in values), values
    except LinAlgError:
        pass
    except ContextPoisoned as exc:  # the fault this test exists to rule out
        raise AssertionError(f"numeric trouble broke the device: {exc}") from exc
    _serving(dev)


def _nan_matrix(rng, n: int = N) -> np.ndarray:
    a = rng.standard_normal((n, n))
    a = a + a.T
    a[1, 2] = a[2, 1] = np.nan
    return a


def test_eigh_of_nan(dev, rng) -> None:
    a = dev.to_device(_nan_matrix(rng))
    _nan_or_linalg_error(dev, lambda: dev.linalg.eigh(a))


def test_syevd_of_nan(dev, rng) -> None:
    solver = _ns(dev, "cusolver", "linalg")
    a = dev.to_device(np.asfortranarray(_nan_matrix(rng)))
    w = dev.alloc((N,), np.float64)

    def call():
        solver.syevd(a, w, N).result(timeout=60)
        return (w, a)

    _nan_or_linalg_error(dev, call)


@pytest.mark.parametrize("method", ["gesvdj", "gesvd"])
def test_svd_of_nan(dev, rng, method: str) -> None:
    a = dev.to_device(_nan_matrix(rng))
    _nan_or_linalg_error(dev, lambda: dev.linalg.svd(a, method=method))


def test_eigh_of_unwritten_memory(dev) -> None:
    """A fresh allocation holds whatever it holds (NaN-filled on the simulator): the eigen
    solver answers something, and the device serves on."""
    a = dev.alloc((N, N), np.float64, order="C")
    try:
        w, v = dev.linalg.eigh(a).result(timeout=60)
        _host(dev, w)
    except LinAlgError:
        pass
    _serving(dev)


def test_poisson_of_huge_mean(dev) -> None:
    rand = _ns(dev, "curand", "random")
    g = rand.generator("philox", seed=7)
    try:
        values = _host(dev, g.poisson((64,), lam=1e308))
        assert values.dtype == np.uint32 and values.shape == (64,)
    except DependencyFailed as exc:  # cuRAND refuses such a mean by its status (on an H200:
        # CURAND_STATUS_OUT_OF_RANGE): typed, not a fault; the reader names the cause
        assert isinstance(exc.__cause__, LibraryError), exc
        assert dev.stats().result(timeout=60).backend == "cuda"
    _serving(dev)
    # a large mean the simulator draws by the normal approximation stays near it (cuRAND
    # refuses means this large by its status, as above: on an H200, lam=1e9 too)
    try:
        big = _host(dev, g.poisson((4096,), lam=1e9))
    except DependencyFailed as exc:
        assert isinstance(exc.__cause__, LibraryError), exc
        assert dev.stats().result(timeout=60).backend == "cuda"
    else:
        assert abs(big.astype(np.float64).mean() - 1e9) < 5 * np.sqrt(1e9 / 4096) + 1


def test_an_event_query_racing_a_fault_never_answers_complete() -> None:
    """A fault that runs between the query's two reads (the context's state and the event's)
    must not let the query answer "complete" for work behind the fault: it answers "not yet",
    and the next query raises the fault, as cuEventQuery does on a broken context."""
    import threading

    from gpumsg.backends.sim import SimBackend
    from gpumsg.errors import CudaError

    sim = SimBackend()
    stream = sim.stream_create()
    held = threading.Event()
    stream.put(held.wait, always=True)  # the stream waits here until released
    sim.inject_illegal_address(stream)
    ev = sim.event_create()
    sim.event_record(ev, stream)
    check = sim._check_sticky
    released = []

    def check_then_run_the_stream(function: str) -> None:
        check(function)
        if not released:  # the stream runs the fault and the marker between the two reads
            released.append(True)
            held.set()
            ev.marker.wait(10)

    sim._check_sticky = check_then_run_the_stream
    assert sim.event_query(ev) is False
    with pytest.raises(CudaError):
        sim.event_query(ev)
    stream.close()
