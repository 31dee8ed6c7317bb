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
# on any compute stream of the pool (each has its own handle and workspace). ``written`` is the
# message's own (bias and aux are outputs of some epilogues): the placement reads the fields,
# taking bias, aux and scale_d as written (a written field follows every use in flight)
placed(Matmul, fields=(("a", "b", "c", "scale_a", "scale_b", "scale_c"),
                       ("d", "bias", "aux", "scale_d")))

__all__ = ["LIBRARY", "SPEC", "CublasLt", "LtHandle", "SimLt"]
