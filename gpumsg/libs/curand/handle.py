"""The cuRAND generators of one device (device thread).

cuRAND has no library handle: each generator is its own object. This class keeps the device's
generators by the id the client minted, creates and configures them with the host API, binds
each to the issuing stream before it generates (``curandSetStream``, only when it changed), and
destroys them when asked and at device shutdown. Every status is checked and becomes a
:class:`~gpumsg.errors.LibraryError`.

Blocking: creating a generator (cuRAND allocates its state with ``cudaMalloc``) and destroying
one (``cudaFree``, which waits for the device's work) are synchronous host calls; generation
only enqueues kernels. Keep generators for many calls.

Odd counts: cuRAND's pseudo-random generators make normal and log-normal values in pairs
(Box-Muller) and refuse an odd ``n`` (CURAND_STATUS_LENGTH_NOT_MULTIPLE). An odd ``n`` is made
as ``n - 1`` values into the output and a pair into a 16-byte block of the device pool, whose
first value is copied after them (stream-ordered; the block is freed behind the copy). The
stream advances by ``n + 1`` values, the same on every run.
"""

from __future__ import annotations

import ctypes
from typing import Any

from ...errors import InvalidMessage, LibraryError
from ...messages.rng import NO_OFFSET_KINDS, is_quasi
from ..loader import LoadedLibrary, c_void_p, load
from .bindings import ORDERING, RNG_TYPE, STATUS_NAMES

__all__ = ["CurandHandle", "status_error", "unknown_generator", "lookup", "PAIRED"]

#: distributions cuRAND's pseudo-random generators make in pairs (n must be even)
PAIRED = ("normal", "lognormal")

_FUNCTION = {
    ("uniform", "f32"): "curandGenerateUniform", ("uniform", "f64"): "curandGenerateUniformDouble",
    ("normal", "f32"): "curandGenerateNormal", ("normal", "f64"): "curandGenerateNormalDouble",
    ("lognormal", "f32"): "curandGenerateLogNormal",
    ("lognormal", "f64"): "curandGenerateLogNormalDouble",
    ("poisson", "u32"): "curandGeneratePoisson",
    ("bits", "u32"): "curandGenerate", ("bits", "u64"): "curandGenerateLongLong",
}
_ITEM = {"f32": 4, "f64": 8, "u32": 4, "u64": 8}


def status_error(status: int, function: str) -> LibraryError:
    return LibraryError("curand", status, STATUS_NAMES.get(status, str(status)), function)


def unknown_generator(generator: int) -> InvalidMessage:
    return InvalidMessage(f"generator: no generator {generator} on this device (destroyed, never "
                          "created, or lost with a device restart)", field="generator")


def lookup(generators: dict[int, Any], generator: int, kind: str | None = None,
           dimensions: int | None = None) -> Any:
    """Generator ``generator`` of a handle's table; InvalidMessage when it does not exist or
    is not of ``kind`` with ``dimensions`` (the message's view of it)."""
    g = generators.get(generator)
    if g is None:
        raise unknown_generator(generator)
    if (kind is not None and g.kind != kind) or \
            (dimensions is not None and g.dimensions != dimensions):
        raise InvalidMessage(f"generator: generator {generator} is {g.kind} in "
                             f"{g.dimensions} dimension(s), not {kind} in {dimensions}",
                             field="generator")
    return g


class _Generator:
    __slots__ = ("ptr", "kind", "dimensions", "seed", "ordering", "stream")

    def __init__(self, ptr: int, kind: str, dimensions: int, seed: int | None,
                 ordering: str) -> None:
        self.ptr = ptr
        self.kind = kind
        self.dimensions = dimensions
        self.seed = seed
        self.ordering = ordering
        self.stream: Any = None


class CurandHandle:
    """The cuRAND generators of one device, by client-minted id."""

    def __init__(self, ctx: Any, lib: LoadedLibrary | None = None) -> None:
        self.lib = lib or load("curand")
        self._ctx = ctx
        self.raw_handle: int = id(self)  # cuRAND has no library handle
        self.generators: dict[int, _Generator] = {}

    # -- plumbing ------------------------------------------------------------------------------
    def _check(self, status: int, function: str) -> None:
        if status:
            raise status_error(status, function)

    def get(self, generator: int, kind: str | None = None, dimensions: int | None = None
            ) -> _Generator:
        return lookup(self.generators, generator, kind, dimensions)

    # -- lifetime ------------------------------------------------------------------------------
    def create(self, generator: int, kind: str, seed: int | None, offset: int, ordering: str,
               dimensions: int) -> None:
        if generator in self.generators:
            raise InvalidMessage(f"generator: generator {generator} already exists",
                                 field="generator")
        self.generators[generator] = self._make(kind, seed, offset, ordering, dimensions)

    def _make(self, kind: str, seed: int | None, offset: int, ordering: str,
              dimensions: int) -> _Generator:
        lib = self.lib
        h = c_void_p()
        self._check(lib.curandCreateGenerator(ctypes.byref(h), RNG_TYPE[kind]),
                    "curandCreateGenerator")
        g = _Generator(h.value or 0, kind, dimensions, seed, ordering)
        try:
            quasi = is_quasi(kind)
            if not quasi:
                self._check(lib.curandSetPseudoRandomGeneratorSeed(g.ptr, seed or 0),
                            "curandSetPseudoRandomGeneratorSeed")
            # the defaults (offset 0, default ordering, one dimension) are not set: not every
            # generator takes every option (the Mersenne Twisters refuse an offset), and a fresh
            # generator already has them
            if offset:
                self._check(lib.curandSetGeneratorOffset(g.ptr, offset),
                            "curandSetGeneratorOffset")
            if ordering != "default":
                self._check(lib.curandSetGeneratorOrdering(
                    g.ptr, ORDERING[("quasi" if quasi else "pseudo", ordering)]),
                    "curandSetGeneratorOrdering")
            if quasi and dimensions != 1:
                self._check(lib.curandSetQuasiRandomGeneratorDimensions(g.ptr, dimensions),
                            "curandSetQuasiRandomGeneratorDimensions")
        except BaseException:
            lib.curandDestroyGenerator(g.ptr)
            raise
        return g

    def reseed(self, generator: int, kind: str, seed: int | None, offset: int) -> None:
        """Restart the stream at (seed, offset). The Mersenne Twisters take no offset, so a
        fresh generator replaces theirs (the draws already enqueued used the old state, which
        curandDestroyGenerator frees after them)."""
        g = self.get(generator, kind)
        if seed is None:
            seed = g.seed
        if kind in NO_OFFSET_KINDS:
            fresh = self._make(kind, seed, 0, g.ordering, g.dimensions)
            self._check(self.lib.curandDestroyGenerator(g.ptr), "curandDestroyGenerator")
            self.generators[generator] = fresh
            return
        if not is_quasi(kind):
            self._check(self.lib.curandSetPseudoRandomGeneratorSeed(g.ptr, seed or 0),
                        "curandSetPseudoRandomGeneratorSeed")
            g.seed = seed
        self._check(self.lib.curandSetGeneratorOffset(g.ptr, offset), "curandSetGeneratorOffset")

    def destroy(self, generator: int) -> None:
        g = self.generators.pop(generator, None)
        if g is None:
            raise unknown_generator(generator)
        self._check(self.lib.curandDestroyGenerator(g.ptr), "curandDestroyGenerator")

    # -- generation ----------------------------------------------------------------------------
    def _issue(self, g: _Generator, function: str, ptr: int, n: int, params: tuple) -> None:
        self._check(getattr(self.lib, function)(g.ptr, ptr, n, *params), function)

    def generate(self, stream: Any, generator: int, distribution: str, dtype: str, out: int,
                 n: int, mean: float, std: float, lam: float) -> None:
        """Enqueue ``n`` values of ``distribution`` into ``out`` (device pointer of ``dtype``)
        on ``stream``."""
        g = self.get(generator)
        if g.stream is not stream:
            self._check(self.lib.curandSetStream(g.ptr, int(stream)), "curandSetStream")
            g.stream = stream
        if n == 0:
            return
        function = _FUNCTION[(distribution, dtype)]
        params: tuple = ()
        if distribution in PAIRED:
            params = (mean, std)
        elif distribution == "poisson":
            params = (lam,)
        if n % 2 == 0 or distribution not in PAIRED or is_quasi(g.kind):
            self._issue(g, function, out, n, params)
            return
        item = _ITEM[dtype]
        if n > 1:
            self._issue(g, function, out, n - 1, params)
        memory = self._ctx.memory
        pair = memory.allocate(16, stream)
        try:
            self._issue(g, function, pair, 2, params)
            self._ctx.backend.copy_dtod(stream, out + (n - 1) * item, pair, item)
        finally:
            memory.deallocate(pair, 16, stream)

    def close(self) -> None:
        for g in self.generators.values():
            self.lib.curandDestroyGenerator(g.ptr)
        self.generators.clear()
