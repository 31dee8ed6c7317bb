"""CUDA libraries: one module per library, each holding its ctypes bindings, its per-device
handle class and the handlers that turn messages into library calls."""

from . import cublas, cublaslt

#: every module that declares a library spec and registers message handlers
ALL_MODULES = (cublas, cublaslt)

#: handle name -> factory of the per-device handle on the CUDA backend (called with the
#: DeviceContext)
CUDA_HANDLES = {
    "cublas": cublas.CublasHandle,
    "cublaslt": cublaslt.LtHandle,
}
