"""cuFFT: C2C/Z2Z, R2C/D2Z and C2R/Z2D transforms of rank 1 to 3, batched with cuFFT's advanced
layout, as messages (``dev.cufft``), with NumPy's ``fft``/``rfft``/``fftn``/... on top
(``dev.fft``).

The folder holds everything of one library: ``bindings.py`` (the C functions as data),
``handle.py`` (the device's plan cache and work areas, device thread), ``handlers.py`` (message
-> plan lookup and execution, device thread), ``sim.py`` (the numpy.fft semantics of the
simulator) and ``client.py`` (the ``dev.cufft`` and ``dev.fft`` methods, caller's thread). The
messages live in :mod:`gpumsg.messages.cufft`.
"""

from ...messages import cufft as fft
from ...messages.graph import capturable
from ...service._registry import placed, register_library
from .._namespace import register_namespace
from . import _handlers as handlers  # noqa: F401  (registers the message handlers)
from ._bindings import SPEC
from ._client import Cufft, Fft, Plan
from ._handle import CufftHandle
from ._sim import SimCufft

LIBRARY = register_library("cufft", cuda=CufftHandle, sim=SimCufft, namespace="cufft",
                           client=Cufft, specs=(SPEC,), per_stream=True)
register_namespace("fft", Fft)

# an execution only enqueues work on the compute stream (its plan must exist before recording;
# the scaling, when asked for, is a cuBLAS scal)
capturable(fft.FftExec, libraries=("cufft", "cublas"))
# on any compute stream of the pool: each has its own plans (a plan's work area is its own);
# the placement takes x as written (a complex-to-real execution overwrites its input)
placed(fft.FftExec, fields=((), ("out", "x")))

__all__ = ["LIBRARY", "SPEC", "Cufft", "CufftHandle", "Fft", "Plan", "SimCufft"]
