"""Library workspaces that degrade instead of failing (device thread).

cuBLAS and cuBLASLt run with a workspace of any size, none included (a smaller one only
narrows the kernels they may pick: split-K and some Lt algorithms need scratch). A handle made
when the memory budget or the device is full must not make a call on existing buffers fail for
want of that optional scratch: :func:`optional_workspace` takes the first of a list of sizes,
largest first, that the device's memory resource gives, down to none. A workspace a library
cannot do without (a cuFFT plan's work area: the minimum the plan asks for) comes from
:func:`required_workspace`, which first gives back what the library keeps idle. What each
library holds shows in ``Stats`` (``DeviceLoad.workspaces``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..errors import OutOfBudget, OutOfMemory

__all__ = ["optional_workspace", "release_workspace", "required_workspace", "count", "held",
           "WORKSPACE_STEPS"]

#: the sizes tried after a library's preferred one, largest first (bytes); 0 ends the list
WORKSPACE_STEPS = (4 << 20, 1 << 20, 0)


def held(ctx: Any) -> dict[str, int]:
    """The device's workspace bytes by library (a dict kept on the device context)."""
    table = getattr(ctx, "workspace_bytes", None)
    if table is None:
        table = {}
        ctx.workspace_bytes = table
    return table


def optional_workspace(ctx: Any, library: str, preferred: int,
                       steps: tuple[int, ...] = WORKSPACE_STEPS) -> tuple[int, int]:
    """``(pointer, nbytes)`` of a workspace for ``library`` from the device's memory resource
    on the compute stream: ``preferred`` bytes, or else the first size of ``steps`` smaller
    than it that the budget and the device give; ``(0, 0)`` when none does (the library then
    runs without). Counted in :func:`held` until :func:`release_workspace`."""
    for nbytes in (preferred, *(s for s in steps if s < preferred)):
        if nbytes <= 0:
            break
        try:
            ptr = ctx.memory.allocate(nbytes, ctx.compute.obj)
        except (OutOfBudget, OutOfMemory):
            continue
        table = held(ctx)
        table[library] = table.get(library, 0) + nbytes
        return ptr, nbytes
    held(ctx).setdefault(library, 0)
    return 0, 0


def release_workspace(ctx: Any, library: str, ptr: int, nbytes: int) -> None:
    """Give back a workspace of :func:`optional_workspace` (stream-ordered on the compute
    stream, after the work that used it)."""
    if ptr:
        ctx.memory.deallocate(ptr, nbytes, ctx.compute.obj)
    table = held(ctx)
    left = table.get(library, 0) - (nbytes if ptr else 0)
    if left > 0:
        table[library] = left
    else:
        table.pop(library, None)


def count(ctx: Any, library: str, nbytes: int) -> None:
    """Add ``nbytes`` (negative: remove) to what :func:`held` shows for ``library``."""
    table = held(ctx)
    left = table.get(library, 0) + nbytes
    if left > 0:
        table[library] = left
    else:
        table.pop(library, None)


def required_workspace(ctx: Any, library: str, nbytes: int, stream: Any,
                       make_room: Callable[[], None] | None = None) -> int:
    """A workspace ``library`` cannot run without (its size is the minimum the library asked
    for): ``nbytes`` from the memory resource on ``stream``; when the budget or the device
    refuses, ``make_room()`` gives back what the library keeps idle (cached plans' work areas)
    and the allocation is tried once more. Counted in :func:`held`; the refusal if it still
    fails."""
    try:
        ptr = ctx.memory.allocate(nbytes, stream)
    except (OutOfBudget, OutOfMemory):
        if make_room is None:
            raise
        make_room()
        ptr = ctx.memory.allocate(nbytes, stream)
    count(ctx, library, nbytes)
    return ptr
