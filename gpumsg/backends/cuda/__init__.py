"""The CUDA backend (``backend="cuda"``): the driver API through cuda.bindings."""

from .driver import CudaBackend, cuda_available

__all__ = ["CudaBackend", "cuda_available"]
