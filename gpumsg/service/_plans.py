"""Plan caches: bounded LRU maps that library handles keep on the device thread (cuBLASLt
plans, cuFFT plans, cuDNN algorithm choices). Keyed by everything that changes the plan; each
plan that leaves the cache is released through the owner's callback."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Any

__all__ = ["PlanCache", "merge_info"]

#: counters that say how a cache is configured rather than what it did: not added up
_SETTINGS = frozenset({"capacity"})


def merge_info(infos: list[dict[str, Any]]) -> dict[str, Any]:
    """The counters of several handles of one library (one per compute stream, see
    ``register_library(per_stream=True)``) as the device's: counts added up, settings
    (``capacity``) and texts taken from the first handle, flags true if any is, lists joined,
    nested dicts merged the same way."""
    if len(infos) == 1:
        return infos[0]
    out: dict[str, Any] = {}
    for info in infos:
        for key, value in info.items():
            have = out.get(key)
            if key not in out:
                out[key] = list(value) if isinstance(value, list) else value
            elif isinstance(value, bool) or isinstance(have, bool):
                out[key] = bool(have) or bool(value)
            elif isinstance(value, int) and isinstance(have, int) and key not in _SETTINGS:
                out[key] = have + value
            elif isinstance(value, dict) and isinstance(have, dict):
                out[key] = merge_info([have, value])
            elif isinstance(value, list) and isinstance(have, list):
                have.extend(value)
            elif not have and value:
                out[key] = value
    return out


class PlanCache:
    """An LRU map from plan keys to plans that counts hits, misses and evictions; ``release``
    is called on every plan that leaves it (evicted, or at :meth:`clear`). Device thread only."""

    def __init__(self, capacity: int = 256, release: Callable[[Any], None] = lambda p: None
                 ) -> None:
        self.capacity = capacity
        self._plans: OrderedDict[Any, Any] = OrderedDict()
        self._release = release
        self.hits = self.misses = self.evictions = 0

    def get(self, key: Any) -> Any:
        plan = self._plans.get(key)
        if plan is None:
            self.misses += 1
            return None
        self.hits += 1
        self._plans.move_to_end(key)
        return plan

    def hit(self, key: Any = None) -> None:
        """Count a hit on a plan the caller kept and knows to be cached still (cuFFT's
        ExecCall: the cache's evictions are counted apart); with ``key``, make it the most
        recent, as :meth:`get` does."""
        self.hits += 1
        if key is not None:
            self._plans.move_to_end(key)

    def __contains__(self, key: Any) -> bool:
        """Whether ``key`` has a plan (not counted as a hit or a miss, not made recent)."""
        return key in self._plans

    def put(self, key: Any, plan: Any) -> None:
        self._plans[key] = plan
        while len(self._plans) > self.capacity:
            _, old = self._plans.popitem(last=False)
            self.evictions += 1
            self._release(old)

    def resize(self, capacity: int) -> None:
        """Change the capacity; plans beyond it are evicted, least recently used first."""
        self.capacity = capacity
        while len(self._plans) > capacity:
            _, old = self._plans.popitem(last=False)
            self.evictions += 1
            self._release(old)

    def info(self) -> dict[str, int]:
        return {"hits": self.hits, "misses": self.misses, "size": len(self._plans),
                "capacity": self.capacity, "evictions": self.evictions}

    def values(self) -> list[Any]:
        """The plans held now, least recently used first."""
        return list(self._plans.values())

    def clear(self) -> None:
        while self._plans:
            self._release(self._plans.popitem()[1])
