"""Device backends: ``cuda`` (a real GPU through the driver API) and ``sim`` (NumPy)."""

from __future__ import annotations

from ..errors import DriverNotFound, InvalidMessage
from ._base import Backend, DeviceProperties

__all__ = ["Backend", "DeviceProperties", "make_backend", "cuda_available", "resolve_backend",
           "cuda_device_count"]


def cuda_available(ordinal: int = 0) -> tuple[bool, str]:
    """Whether the CUDA backend can drive device ``ordinal`` here, and if not, why."""
    from .cuda import cuda_available as probe

    return probe(ordinal)


def resolve_backend(spec: str, ordinal: int = 0) -> str:
    """The backend ``spec`` names for device ``ordinal`` (``"cuda"`` or ``"sim"``), checked:
    ``"auto"`` is cuda where a driver and at least one GPU are present, else sim; the ordinal
    must name a device present (a GPU, or one of the configured simulated devices); ``"cuda"``
    without a driver raises :class:`~gpumsg.errors.DriverNotFound` saying what to install."""
    if spec not in ("auto", "cuda", "sim"):
        raise InvalidMessage(f"backend must be 'auto', 'cuda', 'sim' or a Backend, got {spec!r}",
                             field="backend")
    if spec != "sim":
        ok, why = cuda_available(0)
        if ok:
            count = cuda_device_count()
            if ordinal >= count:
                raise InvalidMessage(f"ordinal: device {ordinal} requested but {count} CUDA "
                                     f"device(s) present (ordinals 0-{count - 1})",
                                     field="ordinal")
            return "cuda"
        if spec == "cuda":
            raise DriverNotFound(
                f"backend='cuda' needs an NVIDIA GPU with its driver (libcuda) and the "
                f"cuda-bindings package: {why.rstrip('.')}. Install the NVIDIA driver and "
                "`pip install cuda-bindings cuda-pathfinder` (the CUDA libraries: "
                "`pip install gpumsg[cu12]`), or use backend='sim' (or 'auto', which falls "
                "back to the simulator)")
    from .sim._device import sim_device_count

    count = sim_device_count()
    if ordinal >= count:
        raise InvalidMessage(f"ordinal: simulated device {ordinal} requested but {count} are "
                             f"configured (ordinals 0-{count - 1}; set GPUMSG_SIM_DEVICES for "
                             "more)", field="ordinal")
    return "sim"


def cuda_device_count() -> int:
    """How many CUDA devices the driver reports (0 without a driver)."""
    from .cuda import cuda_available as probe

    ok, _ = probe(0)
    if not ok:
        return 0
    from cuda.bindings import driver as cu

    return int(cu.cuDeviceGetCount()[1])


def make_backend(spec: str | Backend, ordinal: int = 0) -> Backend:
    """A backend for ``spec``: ``"cuda"``, ``"sim"``, ``"auto"`` (cuda when a driver and a GPU
    are present, else sim) or an unopened :class:`Backend` instance. Names are checked by
    :func:`resolve_backend`."""
    if isinstance(spec, Backend):
        return spec
    spec = resolve_backend(spec, ordinal)
    if spec == "cuda":
        from .cuda import CudaBackend

        return CudaBackend(ordinal)
    from .sim import SimBackend

    return SimBackend(ordinal)
