"""The kernels loaded on one device, by (module key, symbol); shared by the CUDA handle and the
simulator's (device thread)."""

from __future__ import annotations

from typing import Any

from ...errors import InvalidMessage

__all__ = ["LoadedFunctions"]


class LoadedFunctions(dict):
    """``{(module key, symbol): function}``; ``lookup`` says what to do when one is missing."""

    def lookup(self, module: str, symbol: str) -> Any:
        """The function ``symbol`` of module ``module``; InvalidMessage (field ``kernel``) if this
        device has not loaded it."""
        fn = self.get((module, symbol))
        if fn is None:
            raise InvalidMessage(f"kernel: {symbol!r} is not loaded on this device "
                                 "(compile or load it with this device)", field="kernel")
        return fn
