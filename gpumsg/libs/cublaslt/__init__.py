"""cuBLASLt: matmuls with epilogues (bias, ReLU, GELU and their gradients), fp8 with scales,
and the cached plans that small GEMMs of cuBLAS go through.

Same layout as every library folder (see :mod:`gpumsg.libs.cublas`). Its client methods
(``lt_matmul``, ``lt_cache_info``) join ``dev.blas``. Messages: :mod:`gpumsg.messages.blaslt`.
"""

from ...messages.blaslt import Matmul
from ...messages.graph import capturable
from ...service.registry import register_library
from . import handlers  # noqa: F401  (registers the message handlers)
from .bindings import SPEC
from .client import BlasLt
from .handle import LtHandle
from .sim import SimLt

LIBRARY = register_library("cublaslt", cuda=LtHandle, sim=SimLt, namespace="blas",
                           client=BlasLt, specs=(SPEC,))

capturable(Matmul, libraries=("cublaslt",))  # dev.graph() may record it

__all__ = ["LIBRARY", "SPEC", "BlasLt", "LtHandle", "SimLt"]
