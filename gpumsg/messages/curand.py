"""Random numbers (cuRAND) as messages: device-side generators named by a client-minted id.

A generator lives on the device thread, in the cuRAND handle of its device, from
:class:`CreateGenerator` until :class:`DestroyGenerator` (or the device's shutdown). It is named
by ``generator``, an integer the client mints, so that messages naming it can be pipelined behind
its creation. Each :class:`Generate` fills a buffer from the generator's stream on the compute
stream; the generator's position advances in message order.

Generators (``kind``): the pseudo-random ``xorwow``, ``mrg32k3a``, ``mtgp32``, ``mt19937``,
``philox`` (Philox4x32-10) and the quasi-random ``sobol32``, ``scrambled_sobol32``, ``sobol64``,
``scrambled_sobol64`` (in ``dimensions`` dimensions: an n-value output holds n/d values of the
first dimension, then n/d of the second, ...). Distributions: ``uniform`` (0, 1], ``normal``,
``lognormal`` (f32/f64), ``poisson`` (u32) and ``bits``: the raw 32-bit integers (u32) of the
32-bit generators, the raw 64-bit integers (u64) of ``sobol64`` and ``scrambled_sobol64``.
"""

from __future__ import annotations

import math

from ._base import BufRef, Message, _choice, _fail, _int, _real, _ref, _set, check_extent, message

__all__ = ["PSEUDO_KINDS", "QUASI_KINDS", "RNG_KINDS", "SOBOL64_KINDS", "PSEUDO_ORDERINGS",
           "QUASI_ORDERINGS", "ORDERINGS", "NO_OFFSET_KINDS", "DISTRIBUTIONS", "MAX_DIMENSIONS",
           "is_quasi", "bits_dtype",
           "CreateGenerator", "SeedGenerator", "Generate", "DestroyGenerator"]

PSEUDO_KINDS = ("xorwow", "mrg32k3a", "mtgp32", "mt19937", "philox")
QUASI_KINDS = ("sobol32", "scrambled_sobol32", "sobol64", "scrambled_sobol64")
RNG_KINDS = PSEUDO_KINDS + QUASI_KINDS
#: the generators whose raw output is 64-bit (curandGenerateLongLong)
SOBOL64_KINDS = ("sobol64", "scrambled_sobol64")
PSEUDO_ORDERINGS = ("default", "best", "seeded", "legacy", "dynamic")
QUASI_ORDERINGS = ("default",)
#: the orderings each generator takes (cuRAND 10.3 / CUDA 13 on an H100 refused the others with
#: a status: "seeded" is XORWOW's alone, MT19937 has no "dynamic")
ORDERINGS = {
    **{k: ("default", "best", "legacy", "dynamic") for k in ("mrg32k3a", "mtgp32", "philox")},
    "xorwow": PSEUDO_ORDERINGS, "mt19937": ("default", "best", "legacy"),
    **{k: QUASI_ORDERINGS for k in QUASI_KINDS},
}
#: generators that take no offset (cuRAND refuses curandSetGeneratorOffset for the Mersenne
#: Twisters; checked on the H100)
NO_OFFSET_KINDS = ("mtgp32", "mt19937")
DISTRIBUTIONS = ("uniform", "normal", "lognormal", "poisson", "bits")
#: cuRAND's Sobol direction vectors cover 20000 dimensions
MAX_DIMENSIONS = 20000
_U64 = (1 << 64) - 1
_FLOATS = ("f32", "f64")


def is_quasi(kind: str) -> bool:
    return kind in QUASI_KINDS


def bits_dtype(kind: str) -> str:
    """The dtype of a generator's raw integers: u64 for the Sobol64 family, else u32."""
    return "u64" if kind in SOBOL64_KINDS else "u32"


def _generator_fields(msg: object, kind: str, dimensions: int | None) -> int:
    """Check ``kind`` and ``dimensions``; return the dimension count (1 for pseudo)."""
    _choice(msg, "kind", kind, RNG_KINDS)
    if kind in QUASI_KINDS:
        return 1 if dimensions is None else _int(msg, "dimensions", dimensions, 1,
                                                  MAX_DIMENSIONS)
    if dimensions is not None and not (type(dimensions) is int and dimensions == 1):
        raise _fail(msg, "dimensions", f"only quasi-random generators have dimensions; {kind} "
                    "is pseudo-random")
    return 1


def _offset(msg: object, kind: str, offset: int) -> int:
    offset = _int(msg, "offset", offset, 0, _U64)
    if offset and kind in NO_OFFSET_KINDS:
        raise _fail(msg, "offset", f"{kind} takes no offset (cuRAND skips ahead only in the "
                    "other generators); use a different seed")
    return offset


def _seed(msg: object, kind: str, seed: int | None) -> int | None:
    if seed is None:
        return 0 if kind in PSEUDO_KINDS else None
    if kind in QUASI_KINDS:
        raise _fail(msg, "seed", f"{kind} is quasi-random and takes no seed (cuRAND's "
                    "scrambled Sobol generators use fixed scramble constants)")
    return _int(msg, "seed", seed, 0, _U64)


@message()
class CreateGenerator(Message):
    """Create generator ``generator`` of ``kind`` on the device: seed (pseudo-random only,
    default 0), absolute ``offset`` (values skipped from the start of the stream; points for
    quasi-random kinds; 0 for mtgp32 and mt19937, which take none), ``ordering`` (None =
    default; :data:`ORDERINGS` lists what each kind takes: default, best, legacy and dynamic for
    most pseudo kinds, seeded for xorwow only, no dynamic for mt19937; quasi: default) and
    ``dimensions`` (quasi only, 1..20000, default 1). Replies None once it exists."""

    generator: int
    kind: str
    seed: int | None = None
    offset: int = 0
    ordering: str | None = None
    dimensions: int | None = None

    def __post_init__(self) -> None:
        _int(self, "generator", self.generator, 1)
        dims = _generator_fields(self, self.kind, self.dimensions)
        _set(self, "dimensions", dims)
        _set(self, "seed", _seed(self, self.kind, self.seed))
        _set(self, "offset", _offset(self, self.kind, self.offset))
        _set(self, "ordering", "default" if self.ordering is None else
             _choice(self, "ordering", self.ordering, ORDERINGS[self.kind]))


@message()
class SeedGenerator(Message):
    """Reset generator ``generator`` (of ``kind``) to ``seed`` (pseudo only; None keeps it) and
    the absolute ``offset``: the next values are those a fresh generator with this seed and
    offset would give. Replies None. Ordered with the generator's other messages."""

    generator: int
    kind: str
    seed: int | None
    offset: int = 0

    def __post_init__(self) -> None:
        _int(self, "generator", self.generator, 1)
        _choice(self, "kind", self.kind, RNG_KINDS)
        if self.seed is not None:
            _set(self, "seed", _seed(self, self.kind, self.seed))
        _set(self, "offset", _offset(self, self.kind, self.offset))


@message(buffers=("out",), writes=("out",))
class Generate(Message):
    """Fill the first ``n`` elements of ``out`` from generator ``generator`` (of ``kind`` with
    ``dimensions``), on the compute stream.

    ``distribution``: ``uniform`` (f32/f64, in (0, 1]), ``normal`` and ``lognormal`` (f32/f64;
    ``mean`` and ``std`` > 0 of the normal), ``poisson`` (u32, mean ``lam`` > 0) or ``bits`` (the
    raw integers: u32, or u64 for the Sobol64 generators). For quasi-random generators ``n`` is a
    multiple of ``dimensions``. An odd ``n`` of normal/lognormal values from a pseudo-random
    generator (cuRAND generates those in pairs) consumes ``n + 1`` values of the stream; the
    result is deterministic all the same. Replies None when the values are written.

    The message holds no position in the stream (the generator's state, on the device,
    advances at each draw), so the same message sent again draws the next values: the client
    posts one message for a draw it repeats into the same ``out`` (``Generator._draw``)."""

    generator: int
    kind: str
    dimensions: int
    distribution: str
    out: BufRef
    n: int
    mean: float = 0.0
    std: float = 1.0
    lam: float = 1.0

    def __post_init__(self) -> None:
        _int(self, "generator", self.generator, 1)
        dims = _generator_fields(self, self.kind, self.dimensions)
        _set(self, "dimensions", dims)
        dist = _choice(self, "distribution", self.distribution, DISTRIBUTIONS)
        out = _ref(self, "out", self.out)
        _set(self, "out", out)
        if dist == "poisson":
            allowed: tuple[str, ...] = ("u32",)
        elif dist == "bits":
            allowed = (bits_dtype(self.kind),)
        else:
            allowed = _FLOATS
        if out.dtype not in allowed:
            extra = ""
            if dist == "bits":
                extra = (" (64-bit integers come only from sobol64 and scrambled_sobol64)"
                         if out.dtype == "u64" else
                         " (the Sobol64 generators give 64-bit integers only)")
            raise _fail(self, "out", f"{out.describe()} has dtype {out.dtype}; {dist} values of "
                        f"{self.kind} are " + " or ".join(allowed) + extra)
        n = _int(self, "n", self.n)
        check_extent(self, "out", out, 0, ((n, 1),), f"{n} values")
        if dims > 1 and n % dims:
            raise _fail(self, "n", f"{n} values are not a whole number of {dims}-dimensional "
                        f"points ({self.kind} writes n/d values per dimension)")
        _set(self, "mean", _finite(self, "mean", self.mean))
        std = _finite(self, "std", self.std)
        if dist in ("normal", "lognormal") and not std > 0:
            raise _fail(self, "std", f"must be > 0, got {std}")
        _set(self, "std", std)
        lam = _finite(self, "lam", self.lam)
        if dist == "poisson" and not lam > 0:
            raise _fail(self, "lam", f"must be > 0, got {lam}")
        _set(self, "lam", lam)


def _finite(msg: object, field: str, value: object) -> float:
    v = _real(msg, field, value)
    if math.isinf(v):
        raise _fail(msg, field, "must be finite")
    return v


@message()
class DestroyGenerator(Message):
    """Destroy generator ``generator`` (its cuRAND state). Replies None; later messages naming
    it fail with InvalidMessage."""

    generator: int

    def __post_init__(self) -> None:
        _int(self, "generator", self.generator, 1)

