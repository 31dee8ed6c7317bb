"""The registry: which handler answers each message type, and how each library's per-device
handle is made on each backend.

The service imports no library. Libraries register themselves when :mod:`gpumsg.libs` is
imported (the client and the worker process do that): their handlers with :func:`handles`, their
handle factories and client namespace with :func:`register_library`.

A handler is ``handler(ctx, msg, reply)``: ``ctx`` is the device's
:class:`~gpumsg.service._context.DeviceContext`, ``reply`` the future (or any object with
``set_result``/``set_exception``) to answer, or None when nobody waits for the answer. A handler
either answers at once (``ctx.reply_now``) or issues work through the envelope (``ctx.run``),
whose completion answers. Raising a :class:`~gpumsg.errors.GpuError` fails only that message.
Handlers run in an executor turn (one at a time): on the device thread, or, for the types
``service/_executor.py`` lets, on a caller's thread that found the device idle.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

__all__ = ["HANDLERS", "LIBRARIES", "Library", "handles", "register_library", "COMPUTE", "H2D",
           "D2H", "STREAM_INDEX"]

#: stream indices of every device
COMPUTE, H2D, D2H = 0, 1, 2
STREAM_INDEX = {"compute": COMPUTE, "h2d": H2D, "d2h": D2H}

Handler = Callable[[Any, Any, Any], None]
#: message type -> handler; the device loop looks handlers up here (one dict lookup)
HANDLERS: dict[type, Handler] = {}


def handles(*types: type) -> Callable[[Handler], Handler]:
    """Register a handler for one or more message types (at import time)."""

    def wrap(fn: Handler) -> Handler:
        for t in types:
            if t in HANDLERS:
                raise RuntimeError(f"two handlers for {t.__name__}")
            HANDLERS[t] = fn
        return fn

    return wrap


@dataclasses.dataclass(frozen=True)
class Library:
    """One CUDA library as the service and the client see it.

    ``handles`` maps a backend kind (``"cuda"``, ``"sim"``) to the factory of this device's
    handle object, called once on the device thread with the DeviceContext (the service caches
    it and calls its ``close()`` when the device shuts down). ``namespace``/``client`` name the
    attribute of :class:`~gpumsg.Device` (``dev.cublas``) and the class built with the
    Device; several libraries may add methods to one namespace (cuBLAS and cuBLASLt both serve
    ``dev.cublas``). ``specs`` are the ctypes binding tables (for ``python -m gpumsg info``).
    """

    name: str
    handles: dict[str, Callable[[Any], Any]]
    namespace: str | None = None
    client: type | None = None
    specs: tuple = ()


#: library name -> Library, in registration order
LIBRARIES: dict[str, Library] = {}


def register_library(name: str, *, cuda: Callable[[Any], Any], sim: Callable[[Any], Any],
                     namespace: str | None = None, client: type | None = None,
                     specs: tuple = ()) -> Library:
    """Declare a library: its handle factory per backend, its client namespace, its bindings."""
    if name in LIBRARIES:
        raise RuntimeError(f"library {name!r} registered twice")
    lib = Library(name, {"cuda": cuda, "sim": sim}, namespace, client, specs)
    LIBRARIES[name] = lib
    return lib


def library_handle(name: str, kind: str, ctx: Any) -> Any:
    """Make the per-device handle of library ``name`` for a backend of ``kind``."""
    lib = LIBRARIES.get(name)
    if lib is None:
        from ..errors import InvalidMessage

        raise InvalidMessage(f"no library {name!r} is registered (import gpumsg.libs)")
    return lib.handles[kind](ctx)
