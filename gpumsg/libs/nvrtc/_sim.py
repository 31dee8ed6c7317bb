"""The simulator's stand-in for NVRTC: a registry of Python/NumPy kernels keyed by kernel name.

A simulated kernel is ``fn(launch, *args)``: ``launch`` carries ``grid``, ``block`` and
``shared``; each pointer argument arrives as a writable flat NumPy view of the whole buffer (its
dtype, bounds-checked like every simulated access), each scalar as a NumPy scalar of the
parameter's type. It runs on the simulated compute stream, in order with the other work there.
Register one with ``@sim_kernel("saxpy")`` (the name a ``dev.compile`` call asks for; a template
instance is registered under its expression, ``"scale<float>"``).

A process-isolated simulator runs kernels in a worker process, which has none of the versions
registered in the client after it started (the array layer builds its kernels' versions on
first use). So a simulated module's image carries the pickled version of its kernel
(:func:`sim_image`) where it pickles: a module-level function, or a :class:`Recipe` (a factory
and its arguments, built on first use); the worker registers what it lacks from there.
"""

from __future__ import annotations

import dataclasses
import pickle
from collections.abc import Callable
from typing import Any

import numpy as np

from ...backends.sim._views import vector
from ...dtypes import dtype_of
from ...errors import InvalidMessage
from ._functions import LoadedFunctions

__all__ = ["SIM_KERNELS", "SIM_CHECKS", "sim_kernel", "SimNvrtc", "SimLaunch", "Recipe",
           "sim_image"]

#: kernel name -> NumPy implementation
SIM_KERNELS: dict[str, Callable[..., None]] = {}
#: kernel name -> a check the simulator runs when the kernel is compiled (after NVRTC, where
#: it is installed): it raises (InvalidMessage) for a kernel whose NumPy version would fail
#: when it ran, as NVRTC refuses source that does not compile; a kernel failing on the
#: simulated stream is a launch failure, which poisons the device
SIM_CHECKS: dict[str, Callable[[], None]] = {}


def sim_kernel(name: str) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Register the simulator's implementation of kernel ``name``."""

    def wrap(fn: Callable[..., None]) -> Callable[..., None]:
        SIM_KERNELS[name] = fn
        return fn

    return wrap


class Recipe:
    """A kernel's NumPy version made by ``factory(*args)`` on first use; it pickles as the
    factory (a module-level function) and its arguments, so another process can rebuild it."""

    __slots__ = ("factory", "args", "_fn")

    def __init__(self, factory: Callable[..., Callable[..., None]], *args: Any) -> None:
        self.factory, self.args = factory, args
        self._fn: Callable[..., None] | None = None

    def __call__(self, *args: Any) -> None:
        fn = self._fn
        if fn is None:
            fn = self._fn = self.factory(*self.args)
        fn(*args)

    def __reduce__(self) -> tuple:
        return (Recipe, (self.factory, *self.args))


def sim_image(name: str) -> bytes:
    """The image of a simulated module of kernel ``name``: its registered version pickled, or
    nothing where it does not pickle (a closure) or is not registered."""
    fn = SIM_KERNELS.get(name)
    if fn is None:
        return b""
    try:
        return pickle.dumps({name: fn})
    except Exception:  # noqa: BLE001 - not picklable: the worker's own registry alone
        return b""


def _adopt(image: bytes) -> None:
    """Register the versions a simulated module's image carries (made by :func:`sim_image` in
    this program's client process) that this process lacks."""
    try:
        found = pickle.loads(image)  # noqa: S301 - from this program's own client process
    except Exception:  # noqa: BLE001 - e.g. a function of a module this process cannot import
        return
    if isinstance(found, dict):
        for name, fn in found.items():
            if isinstance(name, str) and callable(fn):
                SIM_KERNELS.setdefault(name, fn)


@dataclasses.dataclass(frozen=True)
class SimLaunch:
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared: int


_SCALAR_TYPES: dict[str, Any] = {}


def _scalar_type(kind: str) -> Any:
    """The NumPy scalar type of a parameter kind (``"f32"`` -> ``np.float32``)."""
    found = _SCALAR_TYPES.get(kind)
    if found is None:
        found = _SCALAR_TYPES[kind] = np.dtype(dtype_of(kind) if kind != "bool"
                                               else np.bool_).type
    return found


class SimNvrtc:
    """Simulated modules: each is the list of its kernel names, resolved in the registry."""

    raw_handle = 0

    def __init__(self, ctx: Any) -> None:
        self.sim = ctx.backend
        self.functions = LoadedFunctions()

    def load(self, key: str, image: bytes, kind: str, symbols: tuple[str, ...]) -> None:
        if image and any(sym not in SIM_KERNELS for sym in symbols):
            _adopt(image)
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
        # the scalars converted now (they are values); the buffers viewed when the kernel
        # runs, in stream order, where a bad range is a fault of the stream
        args: list[Any] = [None if kind == "ptr" else _scalar_type(kind)(v)
                           for kind, v in zip(kinds, values)]

        def run() -> None:
            for i, (kind, v, ref) in enumerate(zip(kinds, values, refs)):
                if kind == "ptr":
                    t = dtype_of(ref.dtype)
                    if t.isbuiltin == 1:  # the whole buffer, bounds-checked by the view
                        args[i] = sim.view(v, ref.nbytes).view(t)
                    else:  # bf16, fp8: through a same-size unsigned view
                        args[i] = vector(sim, v, ref.nbytes // t.itemsize, 1, t)
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
