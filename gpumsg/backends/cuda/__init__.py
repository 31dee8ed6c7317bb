"""The CUDA backend (``backend="cuda"``): the driver API through cuda.bindings."""

from ._driver import CudaBackend, cuda_available

__all__ = ["CudaBackend", "cuda_available"]
