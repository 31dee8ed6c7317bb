"""cuSOLVER dense: LU and Cholesky factorizations and solves as messages (``dev.linalg``).

The folder holds everything of one library: ``bindings.py`` (the C functions as data),
``handle.py`` (the per-device handle, device thread), ``handlers.py`` (message -> handle call,
device thread; ``info`` read back at completion), ``sim.py`` (the NumPy/SciPy semantics of the
simulator) and ``client.py`` (the ``dev.linalg`` methods, caller's thread). The messages live in
:mod:`gpumsg.messages.solver`.
"""

from ...service.registry import register_library
from . import handlers  # noqa: F401  (registers the message handlers)
from .bindings import SPEC
from .client import Linalg
from .handle import CusolverHandle
from .sim import SimCusolver

LIBRARY = register_library("cusolver", cuda=CusolverHandle, sim=SimCusolver, namespace="linalg",
                           client=Linalg, specs=(SPEC,))

__all__ = ["LIBRARY", "SPEC", "CusolverHandle", "Linalg", "SimCusolver"]
