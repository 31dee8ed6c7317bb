"""cuSOLVER dense: LU and Cholesky factorizations and solves as messages: raw LAPACK names in
``dev.cusolver``, NumPy's ``linalg`` names in ``dev.linalg``.

The folder holds everything of one library: ``bindings.py`` (the C functions as data),
``handle.py`` (the per-device handle, device thread), ``handlers.py`` (message -> handle call,
device thread; ``info`` read back at completion), ``sim.py`` (the NumPy/SciPy semantics of the
simulator) and ``client.py`` (the ``dev.cusolver`` and ``dev.linalg`` methods, caller's thread).
The messages live in :mod:`gpumsg.messages.cusolver`.
"""

from ...messages import cusolver as solver
from ...service._registry import messages_in, placed, register_library
from .._namespace import register_namespace
from . import _handlers as handlers  # noqa: F401  (registers the message handlers)
from ._bindings import SPEC
from ._client import Cusolver, Linalg
from ._handle import CusolverHandle
from ._sim import SimCusolver

LIBRARY = register_library("cusolver", cuda=CusolverHandle, sim=SimCusolver,
                           namespace="cusolver", client=Cusolver, specs=(SPEC,),
                           per_stream=True)
# each compute stream of the pool has its own handle and workspaces: any stream may run them
placed(*messages_in(solver, solver.SolverCacheInfo))
register_namespace("linalg", Linalg)

__all__ = ["LIBRARY", "SPEC", "Cusolver", "CusolverHandle", "Linalg", "SimCusolver"]
