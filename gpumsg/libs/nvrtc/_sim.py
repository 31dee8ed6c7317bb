"""The simulator's stand-in for NVRTC: a registry of Python/NumPy kernels keyed by kernel name.

A simulated kernel is ``fn(launch, *args)``: ``launch`` carries ``grid``, ``block`` and
``shared``; each pointer argument arrives as a writable flat NumPy view of the whole buffer (its
dtype, bounds-checked like every simulated access), each scalar as a NumPy scalar of the
parameter's type. It runs on the simulated compute stream, in order with the other work there.
Register one with ``@sim_kernel("saxpy")`` (the name a ``dev.compile`` call asks for; a template
instance is registered under its expression, ``"scale<float>"``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np

from ...backends.sim._views import vector
from ...dtypes import dtype_of
from ...errors import InvalidMessage
from ._functions import LoadedFunctions

__all__ = ["SIM_KERNELS", "sim_kernel", "SimNvrtc", "SimLaunch"]

#: kernel name -> NumPy implementation
SIM_KERNELS: dict[str, Callable[..., None]] = {}


def sim_kernel(name: str) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Register the simulator's implementation of kernel ``name``."""

    def wrap(fn: Callable[..., None]) -> Callable[..., None]:
        SIM_KERNELS[name] = fn
        return fn

    return wrap


@dataclasses.dataclass(frozen=True)
class SimLaunch:
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared: int


class SimNvrtc:
    """Simulated modules: each is the list of its kernel names, resolved in the registry."""

    raw_handle = 0

    def __init__(self, ctx: Any) -> None:
        self.sim = ctx.backend
        self.functions = LoadedFunctions()

    def load(self, key: str, image: bytes, kind: str, symbols: tuple[str, ...]) -> None:
        for sym in symbols:
            fn = SIM_KERNELS.get(sym)
            if fn is None:
                raise InvalidMessage(f"symbols: the simulator has no kernel {sym!r}; register "
                                     "its NumPy version with gpumsg.libs.nvrtc.sim_kernel",
                                     field="symbols")
            self.functions[(key, sym)] = fn

    def function(self, module: str, symbol: str) -> Any:
        return self.functions.lookup(module, symbol)

    def launch(self, stream: Any, fn: Any, grid: tuple, block: tuple, shared: int,
               kinds: tuple[str, ...], values: list[Any], refs: list[Any]) -> None:
        sim = self.sim
        info = SimLaunch(grid, block, shared)

        def run() -> None:
            args = []
            for kind, v, ref in zip(kinds, values, refs):
                if kind == "ptr":
                    t = dtype_of(ref.dtype)
                    args.append(vector(sim, v, ref.nbytes // t.itemsize, 1, t))
                else:
                    args.append(np.dtype(dtype_of(kind) if kind != "bool" else np.bool_)
                                .type(v))
            fn(info, *args)

        stream.put(run)

    def bound(self, fn: Any, grid: tuple, block: tuple, shared: int, kinds: tuple[str, ...],
              values: list[Any], refs: list[Any]) -> Callable[[Any], None]:
        """``launch(stream)``: :meth:`launch` with these arguments (the CUDA handle's
        interface; the simulator has nothing to pack)."""

        def launch(stream: Any) -> None:
            self.launch(stream, fn, grid, block, shared, kinds, values, refs)

        return launch

    def close(self) -> None:
        self.functions.clear()
