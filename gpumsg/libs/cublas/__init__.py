"""cuBLAS: level 1, 2 and 3 BLAS and the GEMM family as messages.

The folder holds everything of one library: ``bindings.py`` (the C functions as data),
``handle.py`` (the per-device handle, device thread), ``handlers.py`` (message -> handle call,
device thread), ``sim.py`` (the NumPy semantics of the simulator) and ``client.py`` (the
``dev.cublas`` methods and NumPy's ``dev.linalg.matmul``, caller's thread). The messages live
in :mod:`gpumsg.messages.cublas`.
"""

from ...messages import cublas as blas
from ...messages.graph import capturable
from ...service._registry import messages_in, placed, register_library
from .._namespace import register_namespace
from .._numpy_order import any_order
from . import _handlers as handlers  # noqa: F401  (registers the message handlers)
from ._bindings import SPEC
from ._client import Blas, Cublas, Matmul
from ._handle import CublasHandle
from ._sim import SimCublas

LIBRARY = register_library("cublas", cuda=CublasHandle, sim=SimCublas, namespace="cublas",
                           client=Cublas, specs=(SPEC,), per_stream=True)
register_namespace("linalg", any_order(Matmul))  # F-ordered operands copied to C

# what dev.graph() may record; small GEMMs go through cuBLASLt's cached plans
capturable(blas.Sgemm, blas.Gemm, blas.GemmStridedBatched, libraries=("cublas", "cublaslt"))
capturable(blas.Axpy, blas.Scal, blas.Copy, blas.Swap, blas.Rot, blas.Gemv, blas.Ger, blas.Symv,
           blas.Trsv, blas.Geam, blas.Syrk, blas.Symm, blas.Trmm, blas.Trsm, libraries=("cublas",))

# each compute stream of the pool has its own handle and workspace: any stream may run them
placed(*messages_in(blas, blas.BlasReplayInfo))

__all__ = ["LIBRARY", "SPEC", "Blas", "Cublas", "CublasHandle", "Matmul", "SimCublas"]
