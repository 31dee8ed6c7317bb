"""cuSPARSE (generic API) as messages (``dev.cusparse``; SciPy's names in ``dev.sparse``): device
sparse matrices (CSR, CSC, COO, BSR) with their descriptors, SpMV, SpMM, SpGEMM, SpSV, SDDMM and
format conversions.

The folder holds everything of one library: ``bindings.py`` (the C functions as data),
``handle.py`` (the per-device handle with the matrices' descriptors and workspaces, device
thread), ``handlers.py`` (message -> handle call, device thread), ``sim.py`` (the SciPy semantics
of the simulator) and ``client.py`` (``dev.cusparse``, ``dev.sparse`` and :class:`SparseMatrix`,
caller's thread).
The messages live in :mod:`gpumsg.messages.cusparse`.
"""

from ...service._registry import register_library
from .._namespace import register_namespace
from . import _handlers as handlers  # noqa: F401  (registers the message handlers)
from ._bindings import SPEC
from ._client import Cusparse, Sparse, SparseMatrix
from ._handle import CusparseHandle
from ._sim import SimCusparse

LIBRARY = register_library("cusparse", cuda=CusparseHandle, sim=SimCusparse, namespace="cusparse",
                           client=Cusparse, specs=(SPEC,))
register_namespace("sparse", Sparse)

__all__ = ["LIBRARY", "SPEC", "Cusparse", "CusparseHandle", "SimCusparse", "Sparse", "SparseMatrix"]
