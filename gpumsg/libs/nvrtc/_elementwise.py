"""Small elementwise kernels that the NumPy-level namespaces launch from the caller's side
(``dev.random``'s transforms of cuRAND's draws, ``dev.fft``'s upcast of real input, the solvers'
identity matrices): one CUDA
C++ program compiled with NVRTC once per device (through the disk cache), and the NumPy twin of
each kernel for the simulator (registered with :func:`~gpumsg.libs.nvrtc._sim.sim_kernel`).

Every kernel takes the element count ``n`` and covers it with a grid-stride loop, so any launch
shape is correct; :func:`launch` uses 256-thread blocks and at most 65535 blocks.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import numpy as np

from ...messages.nvrtc import Launch
from ._sim import sim_kernel

__all__ = ["KERNELS", "SOURCE", "launch"]

SOURCE = r"""
#define GRID_STRIDE(i, n) \
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; \
         i += (long long)blockDim.x * gridDim.x)

// x = a * x + b, in place
extern "C" __global__ void gm_affine_f32(float* x, long long n, float a, float b) {
    GRID_STRIDE(i, n) x[i] = a * x[i] + b;
}
extern "C" __global__ void gm_affine_f64(double* x, long long n, double a, double b) {
    GRID_STRIDE(i, n) x[i] = a * x[i] + b;
}
// cuRAND's u in (0, 1] made NumPy's [low, high): high - (high - low) u, kept inside the interval
// where rounding reaches an end (1 - u rounds to 1 in float32 for u < 2^-24)
extern "C" __global__ void gm_uniform_f32(float* x, long long n, float low, float high) {
    GRID_STRIDE(i, n) {
        float r = high - (high - low) * x[i];
        x[i] = r >= high ? nextafterf(high, low) : (r < low ? low : r);
    }
}
extern "C" __global__ void gm_uniform_f64(double* x, long long n, double low, double high) {
    GRID_STRIDE(i, n) {
        double r = high - (high - low) * x[i];
        x[i] = r >= high ? nextafter(high, low) : (r < low ? low : r);
    }
}
// out = x as a 64-bit signed integer (cuRAND's Poisson draws are u32)
extern "C" __global__ void gm_u32_to_i64(const unsigned int* x, long long* out, long long n) {
    GRID_STRIDE(i, n) out[i] = (long long)x[i];
}
// out = low + (64 random bits) mod range: integers in [low, low + range)
extern "C" __global__ void gm_integers_i64(const unsigned int* bits, long long* out,
                                          long long n, long long low,
                                          unsigned long long range) {
    GRID_STRIDE(i, n) {
        unsigned long long r = ((unsigned long long)bits[2 * i] << 32) | bits[2 * i + 1];
        out[i] = (long long)((unsigned long long)low + r % range);
    }
}
extern "C" __global__ void gm_integers_i32(const unsigned int* bits, int* out, long long n,
                                          long long low, unsigned long long range) {
    GRID_STRIDE(i, n) {
        unsigned long long r = ((unsigned long long)bits[2 * i] << 32) | bits[2 * i + 1];
        out[i] = (int)((unsigned long long)low + r % range);
    }
}
// out = (x, 0): a real array made complex (interleaved real and imaginary parts)
extern "C" __global__ void gm_real_to_complex_f32(const float* x, float2* out, long long n) {
    GRID_STRIDE(i, n) { out[i] = make_float2(x[i], 0.0f); }
}
extern "C" __global__ void gm_real_to_complex_f64(const double* x, double2* out, long long n) {
    GRID_STRIDE(i, n) { out[i] = make_double2(x[i], 0.0); }
}
// out = the m x m identity (either memory order), n = m * m elements
extern "C" __global__ void gm_identity_f32(float* out, long long n, long long m) {
    GRID_STRIDE(i, n) out[i] = i % (m + 1) == 0 ? 1.0f : 0.0f;
}
extern "C" __global__ void gm_identity_f64(double* out, long long n, long long m) {
    GRID_STRIDE(i, n) out[i] = i % (m + 1) == 0 ? 1.0 : 0.0;
}
extern "C" __global__ void gm_identity_c64(float2* out, long long n, long long m) {
    GRID_STRIDE(i, n) out[i] = make_float2(i % (m + 1) == 0 ? 1.0f : 0.0f, 0.0f);
}
extern "C" __global__ void gm_identity_c128(double2* out, long long n, long long m) {
    GRID_STRIDE(i, n) out[i] = make_double2(i % (m + 1) == 0 ? 1.0 : 0.0, 0.0);
}
"""

#: the kernels of SOURCE
KERNELS = ("gm_affine_f32", "gm_affine_f64", "gm_uniform_f32", "gm_uniform_f64",
           "gm_u32_to_i64", "gm_integers_i64", "gm_integers_i32", "gm_real_to_complex_f32",
           "gm_real_to_complex_f64", "gm_identity_f32", "gm_identity_f64", "gm_identity_c64",
           "gm_identity_c128")
_BLOCK = 256
_MAX_GRID = 65535


# -- the simulator's twins (flat views of whole buffers; only the first n elements are set) ----
@sim_kernel("gm_affine_f32")
@sim_kernel("gm_affine_f64")
def _affine(launch: Any, x: np.ndarray, n: Any, a: Any, b: Any) -> None:
    m = int(n)
    x[:m] = a * x[:m] + b


@sim_kernel("gm_uniform_f32")
@sim_kernel("gm_uniform_f64")
def _uniform(launch: Any, x: np.ndarray, n: Any, low: Any, high: Any) -> None:
    m = int(n)
    t = x.dtype.type
    lo, hi = t(low), t(high)
    r = hi - (hi - lo) * x[:m]
    r = np.where(r >= hi, np.nextafter(hi, lo), r)
    x[:m] = np.maximum(r, lo)


@sim_kernel("gm_u32_to_i64")
def _u32_to_i64(launch: Any, x: np.ndarray, out: np.ndarray, n: Any) -> None:
    m = int(n)
    out[:m] = x[:m].astype(np.int64)


def _integers(bits: np.ndarray, out: np.ndarray, n: Any, low: Any, range_: Any) -> None:
    m = int(n)
    pairs = bits[:2 * m].astype(np.uint64)
    r = (pairs[0::2] << np.uint64(32)) | pairs[1::2]
    # modulo in unsigned 64-bit arithmetic, then the wrap-around add of the CUDA kernel
    value = (np.uint64(int(low) & 0xFFFFFFFFFFFFFFFF) + r % np.uint64(int(range_)))
    out[:m] = value.view(np.int64).astype(out.dtype, casting="unsafe")


@sim_kernel("gm_integers_i64")
@sim_kernel("gm_integers_i32")
def _integers_kernel(launch: Any, bits: np.ndarray, out: np.ndarray, n: Any, low: Any,
                     range_: Any) -> None:
    with np.errstate(over="ignore"):
        _integers(bits, out, n, low, range_)


@sim_kernel("gm_real_to_complex_f32")
@sim_kernel("gm_real_to_complex_f64")
def _real_to_complex(launch: Any, x: np.ndarray, out: np.ndarray, n: Any) -> None:
    m = int(n)  # ``out`` arrives as the complex buffer's own dtype
    out[:m] = x[:m]


@sim_kernel("gm_identity_f32")
@sim_kernel("gm_identity_f64")
@sim_kernel("gm_identity_c64")
@sim_kernel("gm_identity_c128")
def _identity(launch: Any, out: np.ndarray, n: Any, m: Any) -> None:
    count = int(n)  # ``out`` arrives as the buffer's own dtype
    out[:count] = 0
    out[:count:int(m) + 1] = 1


# -- compiling once per device, launching --------------------------------------------------
_LOCK = threading.Lock()
#: device -> {kernel name: the future of its Kernel}
_COMPILED: weakref.WeakKeyDictionary[Any, dict[str, Future]] = weakref.WeakKeyDictionary()


def _kernel(dev: Any, name: str) -> Any:
    """Kernel ``name`` of :data:`SOURCE` on ``dev``, compiled and loaded on its first use (that
    caller waits for NVRTC or the disk cache; a failed compile is tried again next time)."""
    with _LOCK:
        table = _COMPILED.setdefault(dev, {})
        fut = table.get(name)
        if fut is None:
            fut = table[name] = dev.nvrtc.compile(SOURCE, name)
    try:
        return fut.result()
    except BaseException:
        with _LOCK:
            if table.get(name) is fut:
                del table[name]
        raise


def _grid(n: int) -> int:
    """Blocks of :data:`_BLOCK` threads for ``n`` elements (grid-stride beyond the cap)."""
    return max(1, min(_MAX_GRID, -(-n // _BLOCK)))


def launch(dev: Any, name: str, n: int, args: tuple, reads: tuple, writes: tuple) -> Future:
    """Launch kernel ``name`` of :data:`SOURCE` over ``n`` elements on ``dev`` (``args`` as the
    kernel takes them); a future of None, ordered on the compute stream like every message."""
    return dev.nvrtc.launch(_kernel(dev, name), _grid(n), _BLOCK, args, reads=reads, writes=writes)


def launch_new(dev: Any, name: str, n: int, shape: tuple[int, ...], dtype: str,
               build: Callable[[Any], tuple[tuple, tuple, tuple]]) -> Future:
    """:func:`launch` into a new C-ordered buffer of ``shape`` and ``dtype``, allocated by the
    launch's own message: ``build(ref)`` gives ``(args, reads, writes)`` naming the new
    buffer's reference. The future resolves to the buffer once the kernel has run."""
    port = dev.port
    ref = port.mint(shape, dtype, "C")
    args, reads, writes = build(ref)
    return port.send_new(ref, Launch(_kernel(dev, name), _grid(n), _BLOCK, args, 0, reads, writes))
