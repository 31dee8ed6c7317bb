"""cuRAND: device-side random number generators as messages (``dev.curand``), and NumPy's
``random`` API on top of them (``dev.random``).

The folder holds everything of one library: ``bindings.py`` (the C functions as data),
``handle.py`` (the device's generators, device thread), ``handlers.py`` (message -> handle call,
device thread), ``sim.py`` (the simulator's deterministic NumPy/SciPy streams) and ``client.py``
(``dev.curand`` and its :class:`Generator` objects, caller's thread), ``numpy_random.py``
(``dev.random``, caller's thread). The messages live in
:mod:`gpumsg.messages.rng`.
"""

from ...service.registry import register_library
from ..namespace import register_namespace
from . import handlers  # noqa: F401  (registers the message handlers)
from .bindings import SPEC
from .client import Curand, Generator
from .handle import CurandHandle
from .numpy_random import Random
from .sim import SimCurand

LIBRARY = register_library("curand", cuda=CurandHandle, sim=SimCurand, namespace="curand",
                           client=Curand, specs=(SPEC,))
register_namespace("random", Random)

__all__ = ["LIBRARY", "SPEC", "Curand", "CurandHandle", "Generator", "Random", "SimCurand"]
