"""A spectral time step, repeated: advection-diffusion of a periodic 2-D field in float32.

Each step is ``u <- irfft2(rfft2(u) * K)``: a real-to-complex FFT (cuFFT), a pointwise complex
multiply by the step's transfer function ``K = exp(-nu dt |k|^2 - i dt (c . k))`` (damping and a
shift) in a small CUDA kernel compiled at run time with NVRTC, and the inverse FFT back to real.
The field stays on the device between steps; one download at the end.

On the simulator the kernel runs its NumPy twin (registered below under the kernel's name); it
covers only the elements the launch's threads reach, as the CUDA kernel does, so a launch too
small for the array is caught there too.

The answer is checked against the same steps in NumPy float64::

    python examples/spectral_step.py               # on a GPU: 256^2, 50 steps
    python examples/spectral_step.py --backend sim # the NumPy simulator: 32^2, 5 steps
    python examples/spectral_step.py --size full   # 256^2 wherever it runs

Exit status 0 when the field agrees with NumPy, 1 otherwise.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

import gpumsg
from gpumsg.libs.nvrtc import sim_kernel

#: (grid side, steps) of a full run (on a GPU) and of a small one (the simulator, CI)
FULL = (256, 50)
SMALL = (32, 5)
#: float32 FFTs against float64: relative error of the field after the steps (each step's
#: round trip adds a few times log2(n) f32 roundoffs; 1.0e-05 was measured on an H200 at 50
#: steps of 256^2, so the bound leaves 4x room)
TOLERANCE = 4e-5
#: threads per block of the multiply
BLOCK = 256

SOURCE = r"""
extern "C" __global__ void spectral_multiply(float2* u, const float2* k, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float2 a = u[i], b = k[i];
        u[i] = make_float2(a.x * b.x - a.y * b.y, a.x * b.y + a.y * b.x);
    }
}
"""

@sim_kernel("spectral_multiply")
def _spectral_multiply(launch: Any, u: np.ndarray, k: np.ndarray, n: np.int32) -> None:
    """The simulator's twin of the CUDA kernel: u[i] *= k[i] for the threads launched."""
    reach = min(int(n), launch.grid[0] * launch.block[0])
    u[:reach] *= k[:reach]


def transfer_function(n: int, nu: float = 0.05, dt: float = 0.1,
                      velocity: tuple[float, float] = (1.0, 0.5)) -> np.ndarray:
    """``K`` on rfft2's half spectrum ``(n, n // 2 + 1)`` of an ``n x n`` grid of spacing 1
    (complex128): diffusion ``nu`` and advection at ``velocity`` over a step ``dt``."""
    ky = 2 * np.pi * np.fft.fftfreq(n)[:, None]
    kx = 2 * np.pi * np.fft.rfftfreq(n)[None, :]
    return np.exp(-nu * dt * (kx ** 2 + ky ** 2) - 1j * dt * (velocity[0] * kx + velocity[1] * ky))


def steps_numpy(u0: np.ndarray, k: np.ndarray, steps: int) -> np.ndarray:
    """The same steps in NumPy float64."""
    u = u0.astype(np.float64)
    for _ in range(steps):
        u = np.fft.irfft2(np.fft.rfft2(u) * k, s=u.shape)
    return u


@dataclass
class Spectral:
    """A field and its step's transfer function on a device, with the compiled multiply."""

    n: int
    u0_host: np.ndarray  # float32 (n, n)
    k_host: np.ndarray   # complex128 (n, n // 2 + 1)
    u0: Any              # the initial field on the device
    k: Any               # K as complex64 on the device
    kernel: Any          # the compiled spectral_multiply

    @property
    def spectrum_size(self) -> int:
        return self.n * (self.n // 2 + 1)

    def free(self) -> None:
        self.u0.free()
        self.k.free()


def setup(dev: gpumsg.Device, n: int, seed: int | None = None) -> Spectral:
    """A random field on an ``n x n`` grid, ``K`` for it, and the kernel compiled for ``dev``."""
    rng = np.random.default_rng(seed)
    u0 = rng.standard_normal((n, n)).astype(np.float32)
    k = transfer_function(n)
    kernel = dev.compile(SOURCE, "spectral_multiply")
    return Spectral(n, u0, k, dev.to_device(u0).result(),
                    dev.to_device(k.astype(np.complex64)).result(), kernel.result())


def step(dev: gpumsg.Device, s: Spectral, u: Any) -> Any:
    """One step from the field ``u`` (a buffer or its future): the future of the new field."""
    spectrum = dev.fft.rfft2(u)
    size = s.spectrum_size
    dev.launch(s.kernel, (-(-size // BLOCK),), (BLOCK,), (spectrum, s.k, size),
               reads=(spectrum, s.k), writes=(spectrum,))
    return dev.fft.irfft2(spectrum, s=(s.n, s.n))


def run(dev: gpumsg.Device, s: Spectral, steps: int) -> Any:
    """``steps`` steps from the initial field; the future of the last field. Nothing waits."""
    u = s.u0
    for _ in range(steps):
        u = step(dev, s, u)
    return u


def check(u: np.ndarray, s: Spectral, steps: int) -> tuple[bool, float]:
    ref = steps_numpy(s.u0_host, s.k_host, steps)
    err = float(np.linalg.norm(u - ref) / np.linalg.norm(ref))
    return err < TOLERANCE, err


def small_sizes(size: str, backend: str) -> bool:
    """``--size small`` or ``full`` as asked; ``auto`` (the default; ``GPUMSG_EXAMPLES_SIZE``
    overrides it): full on a GPU, small on the simulator."""
    if size == "auto":
        size = os.environ.get("GPUMSG_EXAMPLES_SIZE", "auto")
    return size == "small" or (size != "full" and backend != "cuda")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", default="auto", choices=("auto", "cuda", "sim"))
    ap.add_argument("--device", type=int, default=0)
    ap.add_argument("--size", default="auto", choices=("auto", "small", "full"),
                    help="full on a GPU and small on the simulator unless told")
    args = ap.parse_args(argv)
    with gpumsg.open_device(args.device, backend=args.backend) as dev:
        n, steps = SMALL if small_sizes(args.size, dev.backend) else FULL
        s = setup(dev, n)
        run(dev, s, 1).result()  # untimed: cuFFT plans and the module load on first use
        t0 = time.perf_counter()
        u = dev.copy_to_host(run(dev, s, steps).result()).result()
        dt = time.perf_counter() - t0
        ok, err = check(u, s, steps)
        s.free()
        print(f"spectral_step {n}x{n}, {steps} steps, float32 [{dev.backend}]: error vs NumPy "
              f"{err:.1e} ({'ok' if ok else 'WRONG'}), {dt * 1e3 / steps:.3f} ms/step")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
