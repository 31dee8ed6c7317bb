"""cuBLASLt: matmuls with epilogues (bias, ReLU, GELU and their gradients), fp8 with scales,
and the cached plans that small GEMMs of cuBLAS go through.

Same layout as every library folder (see :mod:`gpumsg.libs.cublas`). Its client namespace:
``dev.cublaslt`` (``matmul``, ``cache_info``). Messages: :mod:`gpumsg.messages.cublaslt`.
"""

from ...messages.cublaslt import Matmul
from ...messages.graph import capturable
from ...service._registry import placed, register_library
from . import _handlers as handlers  # noqa: F401  (registers the message handlers)
from ._bindings import SPEC
from ._client import CublasLt
from ._handle import LtHandle
from ._sim import SimLt

LIBRARY = register_library("cublaslt", cuda=LtHandle, sim=SimLt, namespace="cublaslt",
                           client=CublasLt, specs=(SPEC,), per_stream=True)

capturable(Matmul, libraries=("cublaslt",))  # dev.graph() may record it
placed(Matmul)  # on any compute stream of the pool (each has its own handle and workspace)

__all__ = ["LIBRARY", "SPEC", "CublasLt", "LtHandle", "SimLt"]
