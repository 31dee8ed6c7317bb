"""NCCL: communicators and collectives across devices, as messages (one per member device).

``bindings.py`` (the C API as data), ``handle.py`` (a device's communicators, device thread),
``sim.py`` (the rendezvous of the simulated devices), ``simnet.py`` (the rendezvous of
process-isolated simulated members), ``semantics.py`` (NCCL's semantics on NumPy, which both
rendezvous run), ``handlers.py``. The group-level API
(``group.nccl()``) lives in :mod:`gpumsg.multi`; the messages in
:mod:`gpumsg.messages.collective`.
"""

import os

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # before NCCL loads, in every gpumsg process

from ...service.registry import register_library  # noqa: E402
from . import handlers  # noqa: F401,E402  (registers the message handlers)
from .bindings import SPEC  # noqa: E402
from .handle import NcclHandle  # noqa: E402
from .sim import SimNccl  # noqa: E402

LIBRARY = register_library("nccl", cuda=NcclHandle, sim=SimNccl, specs=(SPEC,))

__all__ = ["LIBRARY", "SPEC", "NcclHandle", "SimNccl"]
