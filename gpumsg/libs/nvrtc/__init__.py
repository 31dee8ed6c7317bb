"""NVRTC: users' own CUDA C++ kernels, compiled at run time, loaded per device and launched as
messages.

``bindings.py`` (NVRTC's C functions as data), ``compiler.py`` (compile on the caller's side, the
on-disk image cache), ``signature.py`` (parameter types from the source), ``handle.py`` (modules
and launches on CUDA, device thread), ``sim.py`` (the simulator's registry of NumPy kernels),
``handlers.py`` and ``client.py`` (``dev.nvrtc``). The messages live in
:mod:`gpumsg.messages.nvrtc`.
"""

from ...messages.graph import capturable
from ...messages.nvrtc import Launch
from ...service._registry import placed, register_library
from . import _handlers as handlers  # noqa: F401  (registers the message handlers)
from ._bindings import SPEC
from ._client import Nvrtc
from ._handle import NvrtcHandle
from ._sim import SIM_KERNELS, Recipe, SimNvrtc, sim_kernel

LIBRARY = register_library("nvrtc", cuda=NvrtcHandle, sim=SimNvrtc, namespace="nvrtc",
                           client=Nvrtc, specs=(SPEC,))

capturable(Launch)  # dev.graph() may record kernel launches
# a launch takes its stream and no scratch: any compute stream may run it
placed(Launch, fields=(("reads",), ("writes",)))

__all__ = ["LIBRARY", "SPEC", "Nvrtc", "NvrtcHandle", "SimNvrtc", "SIM_KERNELS", "sim_kernel",
           "Recipe"]
