"""cuRAND: device-side random number generators as messages (``dev.curand``), and NumPy's
``random`` API on top of them (``dev.random``).

The folder holds everything of one library: ``bindings.py`` (the C functions as data),
``handle.py`` (the device's generators, device thread), ``handlers.py`` (message -> handle call,
device thread), ``sim.py`` (the simulator's deterministic NumPy/SciPy streams) and ``client.py``
(``dev.curand`` and its :class:`Generator` objects, caller's thread), ``numpy_random.py``
(``dev.random``, caller's thread). The messages live in
:mod:`gpumsg.messages.curand`.
"""

from ...service._registry import register_library
from .._namespace import register_namespace
from . import _handlers as handlers  # noqa: F401  (registers the message handlers)
from ._bindings import SPEC
from ._client import Curand, Generator
from ._handle import CurandHandle
from ._numpy_random import Random
from ._sim import SimCurand

LIBRARY = register_library("curand", cuda=CurandHandle, sim=SimCurand, namespace="curand",
                           client=Curand, specs=(SPEC,))
register_namespace("random", Random)

__all__ = ["LIBRARY", "SPEC", "Curand", "CurandHandle", "Generator", "Random", "SimCurand"]
