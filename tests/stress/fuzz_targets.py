"""What the fuzz campaign calls, and the plan of its cases, drawn from the seed alone.

The targets are found by introspection: every public ``Device`` method, every method of every
library namespace, every exported ``Message`` subclass, every function of the array layer
(``gpumsg.array_api`` and its ``linalg``, ``fft`` and ``sparse``), every method of its random
``Generator`` (called on a generator made for the case) and every method and operator of its
sparse matrices (called on a CSR, CSC or COO matrix made for the case). A case is a target and
one *token* per parameter (a short name such as ``"f32_8x8_F"``, ``"freed"``, ``"nan"`` that the
Materializer turns into an object), or a *valid* call (random arguments inside a call's
contract, whose answer is compared with NumPy).

:func:`plan` draws case ``i`` from ``random.Random(f"{seed}:{i}")`` and nothing else: the same
seed gives the same calls on every backend and machine, whether or not hypothesis is installed,
and any slice of the plan (a chunk run in its own interpreter, or one case) is drawn alike.
:func:`digest` fingerprints a plan so that two runs can show they made the same calls.
"""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import json
import random
from typing import Any

from fuzz_tokens import (
    ALL_TOKENS,
    ARR_LISTS,
    ARRAY_BOOL_NAMES,
    ARRAY_LIST_NAMES,
    ARRAY_NAMES,
    ARRAY_SCALAR_NAMES,
    ARRAY_SCALAR_VALUES,
    ARRAY_STR_VALUES,
    ARRAY_TOKENS,
    ARRAY_TUPLE_NAMES,
    ARRAY_TUPLE_VALUES,
    AXIS_NAMES,
    AXIS_VALUES,
    BAD_ARRS,
    BAD_BUFS,
    DTYPE_NAMES,
    DTYPE_VALUES,
    FLOAT_NAMES,
    FLOAT_VALUES,
    GOOD_ARRS,
    GOOD_BUFS,
    INT_NAMES,
    INT_VALUES,
    RANDOM_ARRAY_NAMES,
    RANDOM_SIZE_NAMES,
    RANDOM_SIZE_VALUES,
    STR_NAMES,
    STR_VALUES,
    TUPLE_NAMES,
    TUPLE_VALUES,
)

import gpumsg
import gpumsg.array_api as xp
import gpumsg.array_api.sparse as xsp
from gpumsg.client._device import _NAMESPACES, Device
from gpumsg.messages._base import Message

#: Device attributes that are not operations to fuzz: closing ends the campaign's device (the
#: shutdown tests cover it); ``watch_generation`` waits, by contract, for a restart that a thread
#: device never has (its refusals are fuzzed through the WatchGeneration message with a past
#: generation).
SKIP_DEVICE = {"close", "watch_generation"}
#: messages not fuzzed by construction: WatchGeneration waits for a restart by contract (see
#: above); the rest are fuzzed.
SKIP_MESSAGES = {"Message", "WatchGeneration"}
#: array-layer names that are not operations on arrays: changing the default device would move
#: the campaign off its device; the rest (dtypes, constants, classes other than
#: :data:`USER_KERNELS`) are not functions
SKIP_ARRAY = {"set_default_device", "default_device"}

#: the classes of the array layer fuzzed as calls: user kernels made from a description
USER_KERNELS = ("ElementwiseKernel", "ReductionKernel")

#: the default marker of a parameter left out
DEFAULT = "<default>"


@dataclasses.dataclass
class Target:
    """One callable to fuzz: ``kind`` is "device", "namespace", "message", "array", "random"
    (a method of ``gpumsg.array_api.random.Generator``) or "sparse" (``<format>.<method>`` of
    a sparse matrix of that format)."""

    kind: str
    name: str
    params: list[tuple[str, Any]]  # (name, default or inspect.Parameter.empty)
    #: the parameters that must be passed by position (the array layer's ``/`` parameters)
    positional: tuple[str, ...] = ()

    def __str__(self) -> str:
        return f"{self.kind}:{self.name}"


def _params(fn: Any, skip_self: bool) -> tuple[list[tuple[str, Any]], tuple[str, ...]]:
    sig = inspect.signature(fn)
    out, positional = [], []
    for i, p in enumerate(sig.parameters.values()):
        if skip_self and i == 0:
            continue
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        out.append((p.name, p.default))
        if p.kind == p.POSITIONAL_ONLY:
            positional.append(p.name)
    return out, tuple(positional)


def array_functions() -> dict[str, Any]:
    """name -> function of the array layer: the namespace's functions and user-kernel classes,
    then ``linalg.*``, ``fft.*`` and ``sparse.*`` (their public functions; the sparse formats'
    constructors)."""
    out = {}
    for name in sorted(xp.__all__):
        fn = getattr(xp, name)
        if (inspect.isfunction(fn) or name in USER_KERNELS) and name not in SKIP_ARRAY:
            out[name] = fn
    for sub in ("linalg", "fft"):
        mod = getattr(xp, sub)
        for name in sorted(getattr(mod, "__all__", dir(mod))):
            fn = getattr(mod, name)
            if (not name.startswith("_") and inspect.isfunction(fn)
                    and fn.__module__.startswith("gpumsg.array_api")
                    and fn.__module__.endswith(sub)):
                out[f"{sub}.{name}"] = fn
    # the sparse package: its functions and the constructors of its three formats
    for name in sorted(xsp.__all__):
        fn = getattr(xsp, name)
        if inspect.isfunction(fn) or name in SPARSE_CLASSES:
            out[f"sparse.{name}"] = fn
    return out


#: the sparse formats a matrix method is called on, and their constructors
SPARSE_FORMATS = ("csr", "csc", "coo")
SPARSE_CLASSES = tuple(f"{f}_matrix" for f in SPARSE_FORMATS)
#: the operators of a sparse matrix fuzzed beside its methods
SPARSE_OPERATORS = ("__matmul__", "__rmatmul__", "__mul__", "__rmul__", "__add__", "__radd__",
                    "__sub__", "__rsub__", "__truediv__", "__neg__", "__pow__", "__getitem__")


def targets() -> list[Target]:
    """Every public Device method, namespace method, exported Message subclass, array
    function, random Generator method and sparse matrix method (per format), in a fixed
    order."""
    out: list[Target] = []
    for name, member in inspect.getmembers(Device):
        if name.startswith("_") or name in SKIP_DEVICE or not inspect.isfunction(member):
            continue
        static = isinstance(inspect.getattr_static(Device, name), staticmethod)
        out.append(Target("device", name, _params(member, skip_self=not static)[0]))
    for ns, cls in sorted(_NAMESPACES.items()):
        for name, member in inspect.getmembers(cls):
            if name.startswith("_") or not inspect.isfunction(member):
                continue
            out.append(Target("namespace", f"{ns}.{name}", _params(member, skip_self=True)[0]))
    for name in sorted(gpumsg.messages.__all__):
        cls = getattr(gpumsg.messages, name)
        if not (isinstance(cls, type) and issubclass(cls, Message)) or name in SKIP_MESSAGES:
            continue
        fields = [(f.name, f.default if f.default is not dataclasses.MISSING
                   else inspect.Parameter.empty)
                  for f in dataclasses.fields(cls) if f.init]
        out.append(Target("message", name, fields))
    for name, fn in array_functions().items():
        params, positional = _params(fn, skip_self=False)
        out.append(Target("array", name, params, positional))
    for name, member in inspect.getmembers(xp.random.Generator):
        if not name.startswith("_") and inspect.isfunction(member):
            params, positional = _params(member, skip_self=True)
            out.append(Target("random", name, params, positional))
    for fmt in SPARSE_FORMATS:
        for name, member in inspect.getmembers(getattr(xsp, f"{fmt}_matrix")):
            if ((not name.startswith("_") or name in SPARSE_OPERATORS)
                    and inspect.isfunction(member)):
                params, positional = _params(member, skip_self=True)
                out.append(Target("sparse", f"{fmt}.{name}", params, positional))
    return out


# -- drawing one case ----------------------------------------------------------------------------
def kind_of(name: str, default: Any, family: str = "buffer") -> str:
    """The kind of argument a parameter takes, by its name and default."""
    if family == "random":
        if name in RANDOM_SIZE_NAMES:
            return "rsize"
        if name in RANDOM_ARRAY_NAMES:
            return "array"
        family = "array"
    if family == "array":
        if name in ARRAY_NAMES:
            return "array"
        if name in ARRAY_LIST_NAMES:
            return "arrays"
        if name in AXIS_NAMES:
            return "axis"
        if name in ARRAY_TUPLE_NAMES:
            return "atuple"
        if name in ARRAY_BOOL_NAMES or isinstance(default, bool):
            return "bool"
        if name in DTYPE_NAMES:
            return "dtype"
        if name in ARRAY_SCALAR_NAMES:
            return "scalar"
        if isinstance(default, str):
            return "astr"
        return "scalar"
    if name in DTYPE_NAMES:
        return "dtype"
    if name in TUPLE_NAMES:
        return "tuple"
    if isinstance(default, bool):
        return "bool"
    if isinstance(default, int) or name in INT_NAMES:
        return "int"
    if isinstance(default, float) or name in FLOAT_NAMES:
        return "float"
    if isinstance(default, str) or name in STR_NAMES:
        return "str"
    return "buffer"


PLAUSIBLE = {"int": INT_VALUES, "float": FLOAT_VALUES, "tuple": TUPLE_VALUES,
             "dtype": DTYPE_VALUES, "str": STR_VALUES, "bool": ["true", "false", "int3"],
             "buffer": GOOD_BUFS + BAD_BUFS, "array": GOOD_ARRS + BAD_ARRS, "arrays": ARR_LISTS,
             "axis": AXIS_VALUES, "atuple": ARRAY_TUPLE_VALUES, "scalar": ARRAY_SCALAR_VALUES,
             "astr": ARRAY_STR_VALUES, "rsize": RANDOM_SIZE_VALUES}
GOOD = {"int": ["4", "8", "1"], "float": ["1.0", "0.5"], "tuple": ["t_8x8", "t_2x3x6x6"],
        "dtype": ["dt_f32", "dt_f64"], "bool": ["false", "true"],
        "buffer": ["f32_8x8_F", "f32_8x8_C", "f64_8x8_F", "f32_8", "f32_2x3x6x6_C",
                   "f32_8_future"],
        "array": ["a_f32_8x8", "a_f64_8", "a_i32_8", "a_f32_8x8_T", "a_f64_2x8", "a_c64_4x4",
                  "a_bool_8", "a_f64_16_s2"],
        "arrays": ["l_f32_8x8_x2", "l_f64_8_x3"], "atuple": ["t_64", "t_8x8"],
        "axis": ["0", "1", "neg1", "none"],
        "scalar": ["1", "0.5", "-2.0"], "astr": ["left", "right", "ortho", "reduced"],
        "rsize": ["none", "8", "t_2x32"]}


def draw_tokens(target: Target, rnd: random.Random) -> dict[str, str]:
    """A dict parameter name -> token (or DEFAULT): half the cases draw every argument
    freely, half keep plausible arguments and spoil one (so the checks past the first are
    reached too)."""
    family = target.kind if target.kind in ("array", "random") else \
        "array" if target.kind == "sparse" else "buffer"
    tokens = ALL_TOKENS if family == "buffer" else ARRAY_TOKENS
    names = [n for n, _ in target.params]
    if not names:
        return {}

    def everything(name: str) -> list[str]:
        """What a parameter draws when anything goes (a random draw's count: its sizes)."""
        return RANDOM_SIZE_VALUES if family == "random" and name in RANDOM_SIZE_NAMES else \
            tokens
    if rnd.random() < 0.5:
        out = {}
        for n, d in target.params:
            options = ["plausible", "any"] + (["default"] if d is not inspect.Parameter.empty
                                              else [])
            pick = rnd.choice(options)
            out[n] = (DEFAULT if pick == "default" else
                      rnd.choice(PLAUSIBLE[kind_of(n, d, family)]) if pick == "plausible" else
                      rnd.choice(everything(n)))
        return out
    focus = rnd.choice(names)
    out = {}
    for n, d in target.params:
        if n == focus:
            out[n] = rnd.choice(everything(n))
        elif d is not inspect.Parameter.empty:
            out[n] = DEFAULT
        else:
            kind = kind_of(n, d, family)
            out[n] = rnd.choice(GOOD.get(kind, STR_VALUES))
    return out


@dataclasses.dataclass(frozen=True)
class Case:
    """Case ``index`` of a plan: ``kind`` "fuzz" (a target and its tokens) or "valid" (a
    valid call, named in ``target``, with random arguments drawn from the case's seed)."""

    index: int
    kind: str
    target: str
    tokens: tuple[tuple[str, str], ...] = ()

    def describe(self) -> str:
        args = ", ".join(f"{k}={v}" for k, v in self.tokens)
        return f"#{self.index} {self.kind} {self.target}({args})"


#: one case in this many is a valid call whose answer is checked
VALID_EVERY = 4


def plan(seed: int, cases: int, valid_calls: list[str], start: int = 0,
         stop: int | None = None) -> list[Case]:
    """Cases ``start`` to ``stop`` (default ``cases``) of the plan of ``cases`` cases for
    ``seed``. Every ``VALID_EVERY``-th case is a valid call (round-robin over
    ``valid_calls``); the others fuzz the targets, each round over all targets in an order
    shuffled by the round's seed."""
    tlist = targets()
    stop = cases if stop is None else min(stop, cases)
    out = []
    for i in range(start, stop):
        if i % VALID_EVERY == VALID_EVERY - 1:
            j = i // VALID_EVERY
            out.append(Case(i, "valid", valid_calls[j % len(valid_calls)]))
            continue
        j = i - i // VALID_EVERY  # the index among the fuzz cases
        rnd_round, pos = divmod(j, len(tlist))
        order = list(range(len(tlist)))
        random.Random(f"{seed}:round:{rnd_round}").shuffle(order)
        target = tlist[order[pos]]
        tokens = draw_tokens(target, random.Random(f"{seed}:{i}"))
        out.append(Case(i, "fuzz", str(target), tuple(tokens.items())))
    return out


def digest(cases: list[Case]) -> str:
    """A fingerprint of the calls of a plan (equal on every backend for one seed)."""
    text = json.dumps([dataclasses.astuple(c) for c in cases])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def target_by_name(tlist: list[Target]) -> dict[str, Target]:
    return {str(t): t for t in tlist}
