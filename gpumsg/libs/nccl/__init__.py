"""NCCL: communicators and collectives across devices (a batch per member device, issued by
the caller for all members in one group call, or as one message per member).

``bindings.py`` (the C API as data), ``handle.py`` (a device's communicators, device thread),
``sim.py`` (the rendezvous of the simulated devices), ``simnet.py`` (the rendezvous of
process-isolated simulated members), ``semantics.py`` (NCCL's semantics on NumPy, which both
rendezvous run), ``handlers.py``. The group-level API
(``group.nccl()``) lives in :mod:`gpumsg.multi`; the messages in
:mod:`gpumsg.messages.nccl`.
"""

import os

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # before NCCL loads, in every gpumsg process

from ...service._registry import register_library  # noqa: E402
from . import _handlers as handlers  # noqa: F401,E402  (registers the message handlers)
from ._bindings import SPEC  # noqa: E402
from ._handle import NcclHandle  # noqa: E402
from ._sim import SimNccl  # noqa: E402

LIBRARY = register_library("nccl", cuda=NcclHandle, sim=SimNccl, specs=(SPEC,))

__all__ = ["LIBRARY", "SPEC", "NcclHandle", "SimNccl"]
