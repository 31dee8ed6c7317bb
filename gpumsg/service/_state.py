"""DeviceState: what the client and the device thread share about a device's life."""

from __future__ import annotations

import threading
from typing import Any

from ..errors import DeviceClosed, GpuError

__all__ = ["DeviceState"]


class DeviceState:
    """The generation, whether the device accepts work, and why not.

    ``generation`` counts context rebuilds: every buffer records the generation it was made in
    and is stale once it changes. ``refusal`` is the error new calls raise when ``accepting`` is
    False (``DeviceClosed``, ``ContextPoisoned``, ``Unrecoverable``). Writers hold ``lock``;
    readers on the hot path read the attributes without it.
    """

    __slots__ = ("ordinal", "token", "generation", "accepting", "refusal", "poisoned", "lock",
                 "_watchers")

    def __init__(self, ordinal: int, token: int) -> None:
        self.ordinal = ordinal
        self.token = token
        self.generation = 0
        self.accepting = True
        self.refusal: GpuError = DeviceClosed(f"device {ordinal} is closed")
        self.poisoned: GpuError | None = None
        self.lock = threading.Lock()
        self._watchers: list[tuple[int, Any]] = []

    def refuse(self, error: GpuError) -> None:
        """Stop accepting work; new calls raise ``error``."""
        with self.lock:
            self.refusal = error
            self.accepting = False

    def bump(self, generation: int | None = None) -> int:
        """Move to the next generation (or to ``generation``) and tell the watchers."""
        with self.lock:
            self.generation = self.generation + 1 if generation is None else generation
            gen = self.generation
            ready = [w for w in self._watchers if w[0] < gen]
            self._watchers = [w for w in self._watchers if w[0] >= gen]
        for _, reply in ready:
            reply.set_result(gen)
        return gen

    def watch(self, after: int | None, reply: Any) -> None:
        """Answer ``reply`` with the generation once it exceeds ``after`` (None: the current)."""
        with self.lock:
            gen = self.generation
            after = gen if after is None else after
            if gen <= after:
                self._watchers.append((after, reply))
                return
        reply.set_result(gen)

    def drop_watchers(self, error: GpuError) -> None:
        with self.lock:
            watchers, self._watchers = self._watchers, []
        for _, reply in watchers:
            reply.set_exception(error)
