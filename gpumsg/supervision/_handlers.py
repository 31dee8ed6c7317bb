"""Handlers of the messages only a worker process answers: mapping and page-locking the
client's shared-memory segments (device thread of the worker process)."""

from __future__ import annotations

from typing import Any

from ..errors import InvalidMessage
from ..messages.device import RegisterHostMemory, UnregisterHostMemory
from ..service._registry import handles
from ._shm import attach

__all__: list[str] = []


@handles(RegisterHostMemory)
def _register_host(ctx: Any, msg: RegisterHostMemory, reply: Any) -> None:
    if not ctx.in_worker_process:
        raise InvalidMessage("RegisterHostMemory is for worker processes (isolation='process')")
    held = ctx.host_registry.get(msg.block)
    if held is not None:
        # Told twice (a registration replayed after a restart): mapping again and dropping the
        # first mapping while it is page-locked would leave the driver's registration behind,
        # over an address a later segment may be mapped at.
        if held.shm.name.lstrip("/") != msg.name.lstrip("/") or held.nbytes != msg.nbytes:
            raise InvalidMessage(f"host block {msg.block} is registered as another segment",
                                 field="block")
        ctx.reply_now(reply, None)
        return
    try:
        ctx.host_registry[msg.block] = attach(ctx.backend, msg.name, msg.nbytes)
    except Exception as exc:  # its reply is usually None: keep the reason for the copies
        ctx.host_register_errors[msg.block] = f"{type(exc).__name__}: {exc}"
        raise
    ctx.host_register_errors.pop(msg.block, None)
    ctx.reply_now(reply, None)


@handles(UnregisterHostMemory)
def _unregister_host(ctx: Any, msg: UnregisterHostMemory, reply: Any) -> None:
    seg = ctx.host_registry.pop(msg.block, None)
    if seg is not None:
        seg.close(ctx.backend)
    ctx.reply_now(reply, None)
