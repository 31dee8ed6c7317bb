"""The plain data a remote call carries for a buffer: its key on the actor, the actor life
(incarnation) it belongs to, and its description. Picklable, imported on both sides."""

from __future__ import annotations

from typing import Any, NamedTuple

__all__ = ["Handle", "is_handle"]


class Handle(NamedTuple):
    """A buffer on a device actor. ``key`` is ``(call_id, k)``: the k-th buffer of the result of
    call ``call_id``. ``incarnation`` is the actor life that made it (None while the call that
    makes it is in flight: the actor then only checks the key). ``shape``/``dtype``
    (``np.dtype.str``)/``order`` describe it once known."""

    key: tuple
    incarnation: str | None = None
    shape: tuple | None = None
    dtype: str | None = None
    order: str | None = None


def is_handle(value: Any) -> bool:
    return type(value) is Handle
