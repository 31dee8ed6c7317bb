"""cuRAND: device-side random number generators as messages (``dev.random``).

The folder holds everything of one library: ``bindings.py`` (the C functions as data),
``handle.py`` (the device's generators, device thread), ``handlers.py`` (message -> handle call,
device thread), ``sim.py`` (the simulator's deterministic NumPy/SciPy streams) and ``client.py``
(``dev.random`` and the :class:`Generator` objects, caller's thread). The messages live in
:mod:`gpumsg.messages.rng`.
"""

from ...service.registry import register_library
from . import handlers  # noqa: F401  (registers the message handlers)
from .bindings import SPEC
from .client import Generator, Random
from .handle import CurandHandle
from .sim import SimCurand

LIBRARY = register_library("curand", cuda=CurandHandle, sim=SimCurand, namespace="random",
                           client=Random, specs=(SPEC,))

__all__ = ["LIBRARY", "SPEC", "CurandHandle", "Generator", "Random", "SimCurand"]
