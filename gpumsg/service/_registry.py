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
           "D2H", "STREAM_INDEX", "PLACED", "PLACED_FIELDS", "placed", "messages_in"]

#: stream indices of every device. A handler passes COMPUTE for "the compute stream this
#: message was placed on" (``service/_placement.py``): the device's first compute stream, or
#: another stream of its pool; the pool's other streams follow the copy streams (3, 4, ...)
COMPUTE, H2D, D2H = 0, 1, 2
STREAM_INDEX = {"compute": COMPUTE, "h2d": H2D, "d2h": D2H}
#: message types that may run on any compute stream of the pool (see :func:`placed`)
PLACED: set[type] = set()
#: message type -> (fields it reads, fields it writes) where its ``refs``/``written`` are its own
PLACED_FIELDS: dict[type, tuple[tuple[str, ...], tuple[str, ...]]] = {}


def placed(*types: type, fields: tuple[tuple[str, ...], tuple[str, ...]] | None = None
           ) -> None:
    """Let messages of ``types`` run on any compute stream of the device's pool: their
    handlers reach the GPU only through the envelope on COMPUTE, ``ctx.compute`` and the
    handles of per-stream libraries (``register_library(per_stream=True)``) or of libraries
    that keep no device state (kernel launches), so two of them on two streams share no
    scratch memory. Every other message runs on the first compute stream. ``fields``: for
    types whose ``refs``/``written`` are their own, the fields (holding a buffer or a tuple of
    buffers) that name what they read and what they write, for the placement to look at
    directly."""
    PLACED.update(types)
    if fields is not None:
        for t in types:
            PLACED_FIELDS[t] = fields


def messages_in(module: Any, *leave_out: type) -> list[type]:
    """The message classes ``module`` defines, but ``leave_out`` (for :func:`placed`)."""
    from ..messages._base import Message

    return [v for v in vars(module).values() if isinstance(v, type) and issubclass(v, Message)
            and v.__module__ == module.__name__ and not v.__name__.startswith("_")
            and v not in leave_out]

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
    ``per_stream``: each compute stream of the device's pool gets a handle of its own (its
    library handle bound to that stream, its workspaces and plans), made on first use there;
    otherwise one handle serves the device.
    """

    name: str
    handles: dict[str, Callable[[Any], Any]]
    namespace: str | None = None
    client: type | None = None
    specs: tuple = ()
    per_stream: bool = False


#: library name -> Library, in registration order
LIBRARIES: dict[str, Library] = {}


def register_library(name: str, *, cuda: Callable[[Any], Any], sim: Callable[[Any], Any],
                     namespace: str | None = None, client: type | None = None,
                     specs: tuple = (), per_stream: bool = False) -> Library:
    """Declare a library: its handle factory per backend, its client namespace, its bindings,
    and whether each compute stream gets a handle of its own (``per_stream``)."""
    if name in LIBRARIES:
        raise RuntimeError(f"library {name!r} registered twice")
    lib = Library(name, {"cuda": cuda, "sim": sim}, namespace, client, specs, per_stream)
    LIBRARIES[name] = lib
    return lib


def library_handle(name: str, kind: str, ctx: Any) -> Any:
    """Make the per-device handle of library ``name`` for a backend of ``kind``."""
    lib = LIBRARIES.get(name)
    if lib is None:
        from ..errors import InvalidMessage

        raise InvalidMessage(f"no library {name!r} is registered (import gpumsg.libs)")
    return lib.handles[kind](ctx)
