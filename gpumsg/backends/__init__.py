"""Device backends: ``cuda`` (a real GPU through the driver API) and ``sim`` (NumPy)."""

from __future__ import annotations

from ..errors import InvalidMessage
from .base import Backend, DeviceProperties

__all__ = ["Backend", "DeviceProperties", "make_backend", "cuda_available"]


def cuda_available(ordinal: int = 0) -> tuple[bool, str]:
    """Whether the CUDA backend can drive device ``ordinal`` here, and if not, why."""
    from .cuda import cuda_available as probe

    return probe(ordinal)


def make_backend(spec: str | Backend, ordinal: int = 0) -> Backend:
    """A backend for ``spec``: ``"cuda"``, ``"sim"``, ``"auto"`` (cuda when a driver and the
    device are present, else sim) or an unopened :class:`Backend` instance."""
    if isinstance(spec, Backend):
        return spec
    if spec == "auto":
        spec = "cuda" if cuda_available(ordinal)[0] else "sim"
    if spec == "cuda":
        from .cuda import CudaBackend

        return CudaBackend(ordinal)
    if spec == "sim":
        from .sim import SimBackend

        return SimBackend(ordinal)
    raise InvalidMessage(f"backend must be 'auto', 'cuda', 'sim' or a Backend, got {spec!r}",
                         field="backend")
