"""The property behind "a failure reaches every reader", drawn at random: for every kind of
producer whose failure is known only at completion (cuSOLVER's info: Cholesky, LU, their
batched forms, the inverse; a generated kernel's index check; a launch that faults) and for
chains through every library that computes on a failed buffer (cuBLAS, cuSPARSE, cuDNN,
generated NVRTC kernels, copies), any operation reading the failed output, directly or
through the chain, raises, whether it was pipelined before the failure was seen or sent
after; nothing of it reaches the host."""

from __future__ import annotations

import numpy as np
import pytest

import gpumsg
from gpumsg.errors import (
    ContextPoisoned,
    DependencyFailed,
    IndexOutOfRange,
    NotPositiveDefinite,
    SingularMatrix,
)
from gpumsg.libs.nvrtc import sim_kernel

F32 = np.float32
#: the simulator computes the gated operations on the failed data (NaN) before failing them
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


def _cholesky(dev, rng):
    """Cholesky of a symmetric indefinite matrix (potrf's info > 0)."""
    n = int(rng.integers(2, 6))
    a = rng.standard_normal((n, n)).astype(F32)
    return dev.linalg.cholesky(dev.to_device(a + a.T - 3 * n * np.eye(n, dtype=F32))), \
        NotPositiveDefinite


def _singular(rng, n):
    """A random matrix with a zero column: LU meets an exact zero pivot."""
    a = rng.standard_normal((n, n)).astype(F32)
    a[:, int(rng.integers(n))] = 0
    return a


def _solve(dev, rng):
    """LU of a singular matrix (getrf's info > 0)."""
    n = int(rng.integers(2, 6))
    b = rng.standard_normal((n, n)).astype(F32)
    return dev.linalg.solve(dev.to_device(_singular(rng, n)), dev.to_device(b)), SingularMatrix


def _inv(dev, rng):
    n = int(rng.integers(2, 6))
    return dev.linalg.inv(dev.to_device(_singular(rng, n))), SingularMatrix


def _cholesky_batched(dev, rng):
    """potrfBatched with one indefinite item among positive definite ones."""
    n, batch = int(rng.integers(2, 5)), int(rng.integers(2, 5))
    stack = np.stack([np.eye(n, dtype=F32) * 2] * batch)
    stack[int(rng.integers(batch))] *= -1
    return dev.linalg.cholesky(dev.to_device(stack)), NotPositiveDefinite


def _solve_batched(dev, rng):
    n, batch = int(rng.integers(2, 5)), int(rng.integers(2, 5))
    stack = np.stack([np.eye(n, dtype=F32) * 3] * batch)
    stack[int(rng.integers(batch))] = _singular(rng, n)
    rhs = rng.standard_normal((batch, n, n)).astype(F32)
    return dev.linalg.solve(dev.to_device(stack), dev.to_device(rhs)), SingularMatrix


def _raw_getrf(dev, rng):
    """The raw call's buffer (written in place) as the failed output."""
    n = int(rng.integers(2, 6))
    a = dev.to_device(np.asfortranarray(_singular(rng, n)))
    return dev.buffer_after(dev.cusolver.getrf(a, n, n), a), SingularMatrix


def _embedding(dev, rng):
    """A generated kernel whose index check fails at completion (an index out of range)."""
    n, rows = int(rng.integers(2, 6)), int(rng.integers(2, 6))
    idx = rng.integers(0, rows, n)
    idx[int(rng.integers(n))] = rows + int(rng.integers(3))
    return dev.nn.embedding(dev.to_device(idx), dev.to_device(
        rng.standard_normal((rows, n)).astype(F32))), IndexOutOfRange


PRODUCERS = {"cholesky": _cholesky, "solve": _solve, "inv": _inv,
             "cholesky_batched": _cholesky_batched, "solve_batched": _solve_batched,
             "raw getrf": _raw_getrf, "embedding": _embedding}


def _new(dev, x):
    """A copy of x (the same order)."""
    y = dev.alloc(x.shape, x.dtype, order=x.order)
    return dev.buffer_after(dev.copy(y, x), y)


def _product(dev, x):
    """x x: NumPy's matmul for C order, cuBLAS's gemm on the column-major buffer for F."""
    if x.order == "C":
        return dev.linalg.matmul(x, x)
    c = dev.alloc(x.shape, x.dtype, order="F")
    return dev.buffer_after(dev.cublas.gemm(x, x, c), c)


#: one step of a chain: (library, op on the previous output giving a new buffer's future)
STEPS = {
    "cublas matmul": _product,
    "cusparse spmm": lambda dev, x: dev.cusparse.spmm(
        dev.cusparse.csr(np.eye(x.shape[0], dtype=F32)), x) if len(x.shape) == 2
    and x.order == "C" else None,
    "cudnn softmax": lambda dev, x: dev.nn.softmax(x, dim=-1) if x.order == "C" else None,
    "nvrtc kernel": lambda dev, x: dev.nn.leaky_relu(x, 0.1) if x.order == "C" else None,
    "copy": _new,
}

#: the final readers: each returns a future that must raise
READERS = {
    "copy_to_host": lambda dev, x: dev.copy_to_host(x),
    "copy": lambda dev, x: dev.copy(dev.alloc(x.shape, x.dtype, order=x.order), x),
    "cudnn": lambda dev, x: dev.nn.relu(x) if x.order == "C" else None,
    "kernel then host": lambda dev, x: dev.copy_to_host(dev.nn.leaky_relu(x))
    if x.order == "C" else None,
}


def _draw_chain(rng):
    names = list(STEPS)
    return [names[int(i)] for i in rng.integers(0, len(names), int(rng.integers(0, 4)))]


def _expect_failure(fut, root: type, what: str) -> None:
    with pytest.raises((DependencyFailed, root)) as info:
        fut.result(timeout=60)
    assert root.__name__ in str(info.value), (what, info.value)


@pytest.mark.parametrize("producer", sorted(PRODUCERS))
@pytest.mark.parametrize("when", ["pipelined", "after"])
def test_any_reader_of_a_failed_output_raises(dev, rng, producer, when):
    """For each producer: random chains of operations of every library, then a final reader;
    each raises, naming the first failure."""
    checked = 0
    for _ in range(6):
        out, root = PRODUCERS[producer](dev, rng)
        if when == "after":
            with pytest.raises(root):
                out.result(timeout=60)
        x = out
        path = []
        for step in _draw_chain(rng):
            nxt = STEPS[step](dev, x)
            if nxt is None:  # the step does not take this buffer (order, rank)
                continue
            path.append(step)
            x = nxt
        for name, read in READERS.items():
            fut = read(dev, x)
            if fut is None:
                continue
            _expect_failure(fut, root, f"{producer} -> {' -> '.join(path)} -> {name}")
            checked += 1
        if x is not out:
            _expect_failure(x, root, f"{producer} -> {' -> '.join(path)} (its future)")
    assert checked >= 6
    # the device keeps serving; an entry of a @ a may cancel to near zero, so the tolerance is
    # float32's rounding of the products' magnitude, not of the entry
    a = rng.standard_normal((3, 3)).astype(F32)
    np.testing.assert_allclose(dev.copy_to_host(dev.linalg.matmul(
        dev.to_device(a), dev.to_device(a))).result(60), a @ a, rtol=1e-5,
        atol=1e-6 * float(np.abs(a).max()) ** 2 * 3)


@pytest.mark.parametrize("step", sorted(STEPS))
@pytest.mark.parametrize("when", ["pipelined", "after"])
def test_every_library_passes_the_failure_on(dev, rng, step, when):
    """Each library's operation on a failed output fails, and so does every reader of what
    it wrote, for a C-ordered failed matrix."""
    out, root = _cholesky(dev, rng)
    if when == "after":
        with pytest.raises(root):
            out.result(timeout=60)
    y = STEPS[step](dev, out)
    assert y is not None
    for name, read in READERS.items():
        _expect_failure(read(dev, y), root, f"{step} -> {name}")
    _expect_failure(y, root, step)


@sim_kernel("gm_test_faulting")
def _faulting(launch, x, n):
    raise ArithmeticError("the simulated kernel faults")


_FAULTING = ('extern "C" __global__ void gm_test_faulting(float* x, long long n) '
             '{ if (n > 0) x[n * 1000000000LL] = 0.0f; }')


@pytest.mark.parametrize("when", ["pipelined", "after"])
def test_a_launch_that_faults_fails_every_reader(rng, when):
    """A generated kernel that faults at completion (simulated: its NumPy twin raises)
    poisons the context: the readers queued behind it and those sent after raise, nothing
    reaches the host. Simulator only (on a GPU the poisoned context ends the process's use of
    CUDA; tests/service/test_poison.py covers it in a subprocess)."""
    dev = gpumsg.open_device(0, backend="sim")
    try:
        x = dev.to_device(rng.standard_normal(8).astype(F32)).result()
        kernel = dev.nvrtc.compile(_FAULTING, "gm_test_faulting").result(60)
        eye = dev.to_device(np.eye(2, dtype=F32)).result()
        launched = dev.nvrtc.launch(kernel, 1, 1, (x, 8))
        reads = [lambda: dev.copy_to_host(x), lambda: dev.nn.relu(x),
                 lambda: dev.linalg.matmul(eye, eye), lambda: dev.copy_to_host(x)]
        if when == "after":
            with pytest.raises(ContextPoisoned):
                launched.result(timeout=60)
        sent = []
        for read in reads:  # a call sent once the poison is seen raises at once
            try:
                sent.append(read())
            except gpumsg.GpuError:
                continue
        for fut in sent:
            with pytest.raises(gpumsg.GpuError):
                fut.result(timeout=60)
    finally:
        dev.close()
