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
from collections.abc import Callable
from typing import Any

from ...errors import InvalidMessage, LibraryError
from ...messages.curand import NO_OFFSET_KINDS, is_quasi
from .._loader import LoadedLibrary, c_void_p, load
from ._bindings import ORDERING, RNG_TYPE, STATUS_NAMES

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


def _c_args(fn: Any, args: tuple) -> tuple:
    """``args`` as instances of ``fn``'s ctypes argument types after the first (the generator),
    made once: ctypes passes an instance of the declared type as it is, where it would convert
    a Python int or float at every call (0.3-0.5 us each on a slow host). ``args`` as they are
    where the function declares no types."""
    types = getattr(fn, "argtypes", None)
    if not types:
        return args
    return tuple(t(v) for t, v in zip(types[1:], args, strict=True))


class _Generator:
    __slots__ = ("ptr", "cptr", "kind", "dimensions", "seed", "ordering", "stream")

    def __init__(self, ptr: int, kind: str, dimensions: int, seed: int | None,
                 ordering: str) -> None:
        self.ptr = ptr
        #: ``ptr`` as a ctypes value, passed as it is by each draw
        self.cptr = c_void_p(ptr)
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
    def generate_bound(self, kind: str, distribution: str, dtype: str, out: int, n: int,
                       mean: float, std: float, lam: float) -> Callable[[Any, Any], None]:
        """``launch(stream, g)``: enqueue ``n`` values of ``distribution`` into ``out`` (device
        pointer of ``dtype``) on ``stream`` from ``g``, a generator of this handle of ``kind``.

        What does not change from one call to the next (the function, its arguments as ctypes
        values, how an odd count is split) is worked out here once: a handler keeps the
        launcher of a repeated message (service/derived.py). The generator is not bound in:
        the caller looks it up for every call, because the table changes (a destroyed
        generator, a Mersenne Twister replaced by its reseed). The launcher holds no position
        in the stream: cuRAND advances the generator's own state at each call, so every launch
        draws the next values."""
        function = _FUNCTION[(distribution, dtype)]
        fn = getattr(self.lib, function)
        params: tuple = ()
        if distribution in PAIRED:
            params = (mean, std)
        elif distribution == "poisson":
            params = (lam,)
        set_stream = self.lib.curandSetStream

        def bind(g: _Generator, stream: Any) -> None:
            status = set_stream(g.cptr, int(stream))
            if status:
                raise status_error(status, "curandSetStream")
            g.stream = stream

        if n == 0:
            def nothing(stream: Any, g: _Generator) -> None:
                if g.stream is not stream:  # bound all the same, as a call with values is
                    bind(g, stream)

            return nothing
        if n % 2 == 0 or distribution not in PAIRED or is_quasi(kind):
            args = _c_args(fn, (out, n, *params))

            def launch(stream: Any, g: _Generator) -> None:
                if g.stream is not stream:
                    bind(g, stream)
                status = fn(g.cptr, *args)
                if status:
                    raise status_error(status, function)

            return launch
        # an odd count of a paired distribution: n - 1 values into out, then a pair into a
        # 16-byte pool block whose first value is copied behind them (module docstring)
        item = _ITEM[dtype]
        head = _c_args(fn, (out, n - 1, *params)) if n > 1 else None
        ctx = self._ctx

        def launch_odd(stream: Any, g: _Generator) -> None:
            if g.stream is not stream:
                bind(g, stream)
            if head is not None:
                status = fn(g.cptr, *head)
                if status:
                    raise status_error(status, function)
            memory = ctx.memory
            pair = memory.allocate(16, stream)
            try:
                status = fn(g.cptr, pair, 2, *params)
                if status:
                    raise status_error(status, function)
                ctx.backend.copy_dtod(stream, out + (n - 1) * item, pair, item)
            finally:
                memory.deallocate(pair, 16, stream)

        return launch_odd

    def generate(self, stream: Any, generator: int, distribution: str, dtype: str, out: int,
                 n: int, mean: float, std: float, lam: float) -> None:
        """Enqueue ``n`` values of ``distribution`` into ``out`` (device pointer of ``dtype``)
        on ``stream`` (:meth:`generate_bound`, bound for this one call)."""
        g = self.get(generator)
        self.generate_bound(g.kind, distribution, dtype, out, n, mean, std, lam)(stream, g)

    def close(self) -> None:
        for g in self.generators.values():
            self.lib.curandDestroyGenerator(g.ptr)
        self.generators.clear()
