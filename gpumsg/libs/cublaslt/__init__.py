"""cuBLASLt: matmuls with epilogues (bias, ReLU, GELU and their gradients), fp8 with scales,
and the cached plans that small GEMMs of cuBLAS go through.

Same layout as every library folder (see :mod:`gpumsg.libs.cublas`). Its client namespace:
``dev.cublaslt`` (``matmul``, ``cache_info``). Messages: :mod:`gpumsg.messages.blaslt`.
"""

from ...messages.blaslt import Matmul
from ...messages.graph import capturable
from ...service.registry import register_library
from . import handlers  # noqa: F401  (registers the message handlers)
from .bindings import SPEC
from .client import CublasLt
from .handle import LtHandle
from .sim import SimLt

LIBRARY = register_library("cublaslt", cuda=LtHandle, sim=SimLt, namespace="cublaslt",
                           client=CublasLt, specs=(SPEC,))

capturable(Matmul, libraries=("cublaslt",))  # dev.graph() may record it

__all__ = ["LIBRARY", "SPEC", "CublasLt", "LtHandle", "SimLt"]
