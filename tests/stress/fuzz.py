"""The fuzz campaign: every public ``Device`` method, every method of every library namespace
(``dev.cublas``, ``dev.linalg``, ``dev.cudnn``, ``dev.nvrtc``, ...) and every ``Message`` subclass
exported by :mod:`gpumsg.messages`, found by introspection (a library added later is fuzzed
without touching this file), called with arguments drawn by hypothesis: wrong types, negative,
NaN, huge and zero sizes, mismatched dtypes and shapes, bad leading dimensions and strides,
freed, closed-device, foreign-device buffers and failed futures.

Each case must end in a success or a typed gpumsg error (a :class:`gpumsg.GpuError`), raised at
the call or through the future, within a bounded wait; then the device must answer a correct
SGEMM. A success must also be right: the message the case posted is recomputed in float64 from
the host arrays its buffers were made from (see oracles.py) and compared with what the device
wrote or answered; a mismatch is a defect ("wrong"). A case that breaks the rule is recorded
(target, arguments, what escaped) instead of stopping the campaign, so one run reports every
defect it finds.

Arguments are drawn as *tokens* (short names such as ``"f32_8x8_F"``, ``"freed"``, ``"nan"``)
that are materialized into objects per case, so a failing case prints reproducibly.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
import os
import threading
import time
import traceback
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

import numpy as np
import oracles
from fuzz_tokens import (
    ALL_TOKENS,
    BAD_BUFS,
    DTYPE_NAMES,
    DTYPE_VALUES,
    FLOAT_NAMES,
    FLOAT_VALUES,
    GOOD_BUFS,
    INT_NAMES,
    INT_VALUES,
    STR_NAMES,
    STR_VALUES,
    TUPLE_NAMES,
    TUPLE_VALUES,
)

try:
    from hypothesis import HealthCheck, given, seed, settings
    from hypothesis import strategies as st

    HAVE_HYPOTHESIS = True
except ImportError:  # the lent GPU machine may lack it: the same strategies, drawn by random
    HAVE_HYPOTHESIS = False

    class _Strategy:
        def __init__(self, draw: Any) -> None:
            self.draw = draw

        def flatmap(self, fn: Any) -> _Strategy:
            return _Strategy(lambda r: fn(self.draw(r)).draw(r))

    class st:  # type: ignore[no-redef]  # noqa: N801 - stands in for hypothesis.strategies
        SearchStrategy = _Strategy

        @staticmethod
        def sampled_from(values: Any) -> _Strategy:
            values = list(values)
            return _Strategy(lambda r: r.choice(values))

        @staticmethod
        def just(value: Any) -> _Strategy:
            return _Strategy(lambda r: value)

        @staticmethod
        def one_of(*options: _Strategy) -> _Strategy:
            return _Strategy(lambda r: r.choice(options).draw(r))

        @staticmethod
        def fixed_dictionaries(spec: dict) -> _Strategy:
            return _Strategy(lambda r: {k: v.draw(r) for k, v in spec.items()})

import gpumsg
from gpumsg.client._device import _NAMESPACES, Device
from gpumsg.messages._base import Message

#: a future not answered within this many seconds counts as a hang
WAIT_S = 20.0

#: Device attributes that are not operations to fuzz: closing ends the campaign's device (the
#: shutdown tests cover it); ``watch_generation`` waits, by contract, for a restart that a thread
#: device never has (its refusals are fuzzed through the WatchGeneration message with a past
#: generation).
SKIP_DEVICE = {"close", "watch_generation"}
#: messages not fuzzed by construction: WatchGeneration waits for a restart by contract (see
#: above); the rest are fuzzed.
SKIP_MESSAGES = {"Message", "WatchGeneration"}


@dataclasses.dataclass
class Target:
    """One callable to fuzz: ``kind`` is "device", "namespace" or "message"."""

    kind: str
    name: str
    params: list[tuple[str, Any]]  # (name, default or inspect.Parameter.empty)

    def __str__(self) -> str:
        return f"{self.kind}:{self.name}"


def _kind_of(name: str, default: Any) -> str:
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


def _params(fn: Any, skip_self: bool) -> list[tuple[str, Any]]:
    sig = inspect.signature(fn)
    out = []
    for i, p in enumerate(sig.parameters.values()):
        if skip_self and i == 0:
            continue
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        out.append((p.name, p.default))
    return out


def targets() -> list[Target]:
    """Every public Device method, namespace method and exported Message subclass."""
    out: list[Target] = []
    for name, member in inspect.getmembers(Device):
        if name.startswith("_") or name in SKIP_DEVICE or not inspect.isfunction(member):
            continue
        static = isinstance(inspect.getattr_static(Device, name), staticmethod)
        out.append(Target("device", name, _params(member, skip_self=not static)))
    for ns, cls in sorted(_NAMESPACES.items()):
        for name, member in inspect.getmembers(cls):
            if name.startswith("_") or not inspect.isfunction(member):
                continue
            out.append(Target("namespace", f"{ns}.{name}", _params(member, skip_self=True)))
    for name in sorted(gpumsg.messages.__all__):
        cls = getattr(gpumsg.messages, name)
        if not (isinstance(cls, type) and issubclass(cls, Message)) or name in SKIP_MESSAGES:
            continue
        fields = [(f.name, f.default if f.default is not dataclasses.MISSING
                   else inspect.Parameter.empty)
                  for f in dataclasses.fields(cls) if f.init]
        out.append(Target("message", name, fields))
    return out


def _arg_strategy(name: str, default: Any) -> st.SearchStrategy:
    kind = _kind_of(name, default)
    plausible = {"int": INT_VALUES, "float": FLOAT_VALUES, "tuple": TUPLE_VALUES,
                 "dtype": DTYPE_VALUES, "str": STR_VALUES, "bool": ["true", "false", "int3"],
                 "buffer": GOOD_BUFS + BAD_BUFS}[kind]
    choices = [st.sampled_from(plausible), st.sampled_from(ALL_TOKENS)]
    if default is not inspect.Parameter.empty:
        choices.insert(0, st.just("<default>"))
    return st.one_of(*choices)


GOOD = {"int": ["4", "8", "1"], "float": ["1.0", "0.5"], "tuple": ["t_8x8", "t_2x3x6x6"],
        "dtype": ["dt_f32", "dt_f64"], "bool": ["false", "true"],
        "buffer": ["f32_8x8_F", "f32_8x8_C", "f64_8x8_F", "f32_8", "f32_2x3x6x6_C",
                   "f32_8_future"]}


def _good_strategy(name: str, default: Any) -> st.SearchStrategy:
    if default is not inspect.Parameter.empty:
        return st.just("<default>")
    kind = _kind_of(name, default)
    return st.sampled_from(GOOD.get(kind, STR_VALUES))


def case_strategy(target: Target) -> st.SearchStrategy:
    """A dict parameter name -> token (or "<default>"): half the cases draw every argument
    freely, half keep plausible arguments and spoil one (so the checks past the first are
    reached too)."""
    free = st.fixed_dictionaries({n: _arg_strategy(n, d) for n, d in target.params})
    if not target.params:
        return free
    names = [n for n, _ in target.params]

    def spoil_one(focus: str) -> st.SearchStrategy:
        return st.fixed_dictionaries({
            n: st.sampled_from(ALL_TOKENS) if n == focus else _good_strategy(n, d)
            for n, d in target.params})

    return st.one_of(free, st.sampled_from(names).flatmap(spoil_one))


class Materializer:
    """Turns tokens into objects on a device: fresh buffers per case, plus the long-lived bad
    ones (a closed device's buffer, another device's buffer)."""

    def __init__(self, dev: Device, foreign: Device, closed_buf: Any, rng: np.random.Generator
                 ) -> None:
        self.dev, self.foreign, self.closed_buf, self.rng = dev, foreign, closed_buf, rng
        #: BufRef id -> (the host array the buffer was made from, the buffer): the inputs of
        #: the float64 references of accepted calls (cleared per case)
        self.snapshots: dict[int, np.ndarray] = {}
        self.buffers: dict[int, Any] = {}
        self._foreign_buf = foreign.to_device(np.ones((8, 8), np.float32, order="F")).result()

    def _buf(self, spec: str) -> Any:
        dt, _, rest = spec.partition("_")
        parts = rest.split("_")
        shape = tuple(int(d) for d in parts[0].split("x"))
        order = parts[1] if len(parts) > 1 and parts[1] in "CF" else "F"
        dtype = gpumsg.as_dtype(dt)
        if dtype.kind == "c":
            host = (self.rng.standard_normal(shape) + 1j * self.rng.standard_normal(shape))
        else:
            host = self.rng.standard_normal(shape) + 2.0
        host = np.asarray(host.astype(dtype), order=order)
        fut = self.dev.to_device(host, order=order)
        buf = fut.result(WAIT_S)
        self.snapshots[buf.ref.id] = host
        self.buffers[buf.ref.id] = buf
        return fut if spec.endswith("future") else buf

    def value(self, token: str) -> Any:
        dev = self.dev
        simple = {
            "0": 0, "1": 1, "2": 2, "4": 4, "8": 8, "64": 64, "neg1": -1, "huge": 2**31 + 1,
            "huge63": 2**63, "zero": 0, "nan": math.nan, "inf": math.inf, "true": True,
            "false": False, "float_half": 0.5, "complex": 1 + 2j, "np_int64": np.int64(4),
            "list": [1, 2], "dict": {"a": 1}, "bytes": b"\x00\x01", "tuple_bad": ("a", None),
            "none": None, "str_bad": "bogus", "int3": 3, "1.0": 1.0, "0.5": 0.5, "-2.0": -2.0,
            "0.0": 0.0, "t_8x8": (8, 8), "t_2x3x6x6": (2, 3, 6, 6), "t_1": (1,), "t_0": (0,),
            "t_neg": (-1, 4), "t_huge": (2**40, 2**40), "t_float": (1.5, 2), "t_empty": (),
            "t_3": (3, 3, 3), "t_nested": ((1, 2), 3), "dt_f32": np.float32, "dt_f64": "f64",
            "dt_c64": np.complex64, "dt_i8": np.int8, "dt_bad": "float17",
            "dt_object": np.dtype(object),
        }
        if token in simple:
            return simple[token]
        if token in STR_VALUES:
            return token
        if token == "object":
            return object()
        if token == "lambda":
            return lambda: None
        if token == "np_f32":
            return np.ones(8, np.float32)
        if token == "np_f32_8x8":
            return np.ones((8, 8), np.float32, order="F")
        if token == "freed":
            buf = dev.alloc((8, 8), np.float32).result(WAIT_S)
            buf.free().result(WAIT_S)
            return buf
        if token == "closed_dev":
            return self.closed_buf
        if token == "foreign":
            return self._foreign_buf
        if token == "bufref_forged":
            return gpumsg.messages.BufRef(12345, 999_999_999, 0, "f32", (8, 8), "F", 256)
        if token == "failed_future":
            # a Cholesky of a negative definite matrix: the future and its buffer fail
            return dev.linalg.cholesky(dev.to_device(-np.eye(8)))
        if token == "failed_content":
            fut = dev.linalg.cholesky(dev.to_device(-np.eye(8)))
            try:
                fut.result(WAIT_S)
            except gpumsg.GpuError:
                pass
            return fut.buffer
        return self._buf(token)

    def args(self, target: Target, tokens: dict[str, str]) -> dict[str, Any]:
        return {n: self.value(t) for n, t in tokens.items() if t != "<default>"}


@dataclasses.dataclass
class FuzzReport:
    cases: int = 0
    typed_at_call: int = 0
    typed_in_future: int = 0
    succeeded: int = 0
    #: accepted cases whose answer was compared with a float64 reference, and those it missed
    checked: int = 0
    wrong: int = 0
    #: errors that are not GpuErrors (at the call or through the future), and hangs
    untyped: int = 0
    hangs: int = 0
    #: refusals by error type, at the call or through the future
    refused: dict[str, int] = dataclasses.field(default_factory=dict)
    #: the accepted message types that were checked, with counts
    checked_types: dict[str, int] = dataclasses.field(default_factory=dict)
    #: the differential pass: valid random calls, each compared with float64
    valid_cases: int = 0
    defects: list[str] = dataclasses.field(default_factory=list)
    by_target: dict[str, int] = dataclasses.field(default_factory=dict)
    seconds: float = 0.0

    def figures(self) -> dict[str, Any]:
        return {"cases": self.cases, "tried": self.cases, "accepted": self.succeeded,
                "valid_cases": self.valid_cases, "checked": self.checked,
                "wrong": self.wrong, "untyped": self.untyped,
                "hangs": self.hangs, "typed_at_call": self.typed_at_call,
                "typed_in_future": self.typed_in_future, "succeeded": self.succeeded,
                "refused_by_type": dict(sorted(self.refused.items())),
                "checked_types": dict(sorted(self.checked_types.items())),
                "defects": len(self.defects), "targets": len(self.by_target),
                "seconds": round(self.seconds, 1)}

    def refuse(self, exc: BaseException) -> None:
        name = type(exc).__name__
        self.refused[name] = self.refused.get(name, 0) + 1


def sgemm_ok(dev: Device, rng: np.random.Generator) -> None:
    """The device answers a correct SGEMM (raises AssertionError otherwise)."""
    m, n, k = 5, 4, 3
    a = rng.standard_normal((m, k)).astype(np.float32, order="F")
    b = rng.standard_normal((k, n)).astype(np.float32, order="F")
    c = dev.alloc((m, n), np.float32)
    dev.sgemm(dev.to_device(a), dev.to_device(b), c, m, n, k)
    out = dev.copy_to_host(c).result(WAIT_S)
    ref = a.astype(np.float64) @ b
    err = np.linalg.norm(out - ref) / np.linalg.norm(ref)
    assert err < 1e-5, f"SGEMM after the case is wrong (rel. err. {err:.2e})"


def _invoke(dev: Device, target: Target, args: dict[str, Any]) -> Any:
    if target.kind == "device":
        return getattr(dev, target.name)(**args)
    if target.kind == "namespace":
        ns, meth = target.name.split(".")
        return getattr(getattr(dev, ns), meth)(**args)
    cls = getattr(gpumsg.messages, target.name)
    return dev.send(cls(**args))


def run_case(mat: Materializer, target: Target, tokens: dict[str, str],
             report: FuzzReport) -> None:
    """One case on a helper thread, so that a call that blocks (not only a future that is
    never answered) is caught: past ``3 * WAIT_S`` it is recorded as a hang and the device is
    abandoned for a fresh one."""
    done = threading.Event()

    def body() -> None:
        try:
            _run_case(mat, target, tokens, report)
        finally:
            done.set()

    threading.Thread(target=body, daemon=True, name="fuzz-case").start()
    if not done.wait(3 * WAIT_S):
        report.hangs += 1
        report.defects.append(f"{target}({tokens}): the case blocked for {3 * WAIT_S} s "
                              "(hang)")
        mat.dev = gpumsg.open_device(0, backend=mat.backend)


def _run_case(mat: Materializer, target: Target, tokens: dict[str, str],
              report: FuzzReport) -> None:
    """One case: call, wait, classify; then the SGEMM check. Never raises. A device that
    fails the check is replaced, so that one defect does not hide the next."""
    dev = mat.dev
    report.cases += 1
    report.by_target[str(target)] = report.by_target.get(str(target), 0) + 1
    where = f"{target}({', '.join(f'{k}={v}' for k, v in tokens.items())})"
    mat.snapshots.clear()
    mat.buffers.clear()
    try:
        args = mat.args(target, tokens)
    except Exception as exc:  # noqa: BLE001 - a fixture failure is a defect too
        report.defects.append(f"{where}: building arguments raised {exc!r}")
        return
    sent: list = []
    real_post = dev._post

    def record(msg: Any, reply: Any) -> None:
        sent.append(msg)
        real_post(msg, reply)

    dev._post = record  # every send path ends here: the messages this case sends
    accepted, answer = False, None
    try:
        try:
            out = _invoke(dev, target, args)
        except gpumsg.GpuError as exc:
            report.typed_at_call += 1
            report.refuse(exc)
            out = None
        except Exception as exc:  # noqa: BLE001
            report.untyped += 1
            report.defects.append(f"{where}: {type(exc).__name__} escaped at the call: {exc}\n"
                                  + "".join(traceback.format_exception(exc)[-3:]))
            out = None
        else:
            if isinstance(out, Future):
                try:
                    answer = out.result(WAIT_S)
                except FutureTimeout:
                    report.hangs += 1
                    report.defects.append(f"{where}: no answer within {WAIT_S} s (hang)")
                except gpumsg.GpuError as exc:
                    report.typed_in_future += 1
                    report.refuse(exc)
                except Exception as exc:  # noqa: BLE001
                    report.untyped += 1
                    report.defects.append(f"{where}: {type(exc).__name__} through the "
                                          f"future: {exc}")
                else:
                    report.succeeded += 1
                    accepted = True
            else:
                report.succeeded += 1
                accepted, answer = True, out
    finally:
        dev._post = real_post
    if accepted:
        _check_answer(mat, sent, answer, where, report)
    try:
        sgemm_ok(dev, mat.rng)
    except Exception as exc:  # noqa: BLE001
        report.defects.append(f"{where}: the device then failed a SGEMM: {exc!r}")
        dev.close(timeout=10)
        mat.dev = gpumsg.open_device(0, backend=mat.backend)


def _check_answer(mat: Materializer, sent: list, answer: Any, where: str,
                  report: FuzzReport) -> None:
    """Compare an accepted case's answer with its float64 reference, when the case sent
    exactly one message that has one (oracles.py) and nothing else that writes."""
    known = [m for m in sent if type(m).__name__ in oracles.ORACLES]
    others = [m for m in sent if type(m).__name__ not in oracles.ORACLES
              and type(m).__name__ not in READ_ONLY_MESSAGES]
    if len(known) != 1 or others:
        return
    msg = known[0]

    def read(ref: Any) -> Any:
        return mat.dev.copy_to_host(mat.buffers[ref.id]).result(WAIT_S)

    try:
        checked = oracles.check_message(msg, mat.snapshots, read, answer)
    except oracles.Mismatch as exc:
        report.wrong += 1
        report.defects.append(f"{where}: wrong answer: {exc}")
        return
    except Exception as exc:  # noqa: BLE001 - reading back the answer must work too
        report.defects.append(f"{where}: checking the answer raised {exc!r}")
        return
    if checked:
        report.checked += 1
        name = type(msg).__name__
        report.checked_types[name] = report.checked_types.get(name, 0) + 1


#: messages a case may send besides the one checked without changing any buffer's contents
READ_ONLY_MESSAGES = {"Free", "Stats", "CopyToHost", "Synchronize"}


def differential(mat: Materializer, cases: int, report: FuzzReport) -> None:
    """``cases`` calls with valid random arguments (oracles.valid_call), spread over the
    calls that have a float64 reference: each must succeed and be right."""
    calls = oracles.VALID_CALLS
    for i in range(cases):
        call = calls[i % len(calls)]
        kwargs = oracles.valid_call(mat.rng, call)
        dev = mat.dev
        mat.snapshots.clear()
        mat.buffers.clear()
        args = {}
        for name, value in kwargs.items():
            if oracles.is_buffer_arg(name):
                buf = dev.to_device(value).result(WAIT_S)
                mat.snapshots[buf.ref.id], mat.buffers[buf.ref.id] = value, buf
                args[name] = buf
            else:
                args[name] = value
        where = f"valid {call}({', '.join(f'{k}={v!r}' for k, v in kwargs.items() if not oracles.is_buffer_arg(k))})"  # noqa: E501
        report.valid_cases += 1
        sent: list = []
        real_post = dev._post

        def record(msg: Any, reply: Any, sent: list = sent, real_post: Any = real_post) -> None:
            sent.append(msg)
            real_post(msg, reply)

        dev._post = record
        try:
            target = dev
            for part in call.split("."):
                target = getattr(target, part)
            answer = target(**args).result(WAIT_S)
        except Exception as exc:  # noqa: BLE001 - a valid call must succeed
            report.defects.append(f"{where}: a valid call failed: {exc!r}")
            continue
        finally:
            dev._post = real_post
        checked, found = report.checked, len(report.defects)
        _check_answer(mat, sent, answer, where, report)
        if report.checked == checked and len(report.defects) == found:
            report.defects.append(f"{where}: the valid call's answer was not checked "
                                  f"(sent {[type(m).__name__ for m in sent]})")


def _runner(mat: Materializer, target: Target, report: FuzzReport) -> Any:
    def one(tokens: dict[str, str]) -> None:
        run_case(mat, target, tokens, report)
    return one


def _fuzz_target(mat: Materializer, target: Target, n: int, seed_value: int | None,
                 report: FuzzReport) -> None:
    """``n`` cases of one target (derandomized hypothesis when ``seed_value`` is None)."""
    if not HAVE_HYPOTHESIS:
        import random

        rnd = random.Random(f"{seed_value or 0}:{target}")
        strategy = case_strategy(target)
        for _ in range(n):
            run_case(mat, target, strategy.draw(rnd), report)
        return
    cfg = settings(max_examples=n, deadline=None, database=None,
                   derandomize=seed_value is None, suppress_health_check=list(HealthCheck))
    one = cfg(given(case_strategy(target))(_runner(mat, target, report)))
    if seed_value is not None:
        one = seed(seed_value)(one)
    one()


def campaign(cases: int, backend: str = "sim", seed_value: int | None = None,
             log: Any = print) -> FuzzReport:
    """Run about ``cases`` cases spread evenly over every target. Hypothesis draws the
    arguments; derandomized (a fixed, printed seed when ``seed_value`` is given)."""
    report = FuzzReport()
    tlist = targets()
    per = max(1, -(-cases // len(tlist)))
    engine = "hypothesis" if HAVE_HYPOTHESIS else "random (no hypothesis here)"
    log(f"fuzz: {len(tlist)} targets x {per} cases, backend {backend}, {engine}, "
        + ("derandomized" if seed_value is None else f"seed {seed_value}"))
    # the data (and the valid calls' arguments) from a logged seed, so a wrong answer repeats
    data_seed = seed_value if seed_value is not None else \
        int(os.environ.get("GPUMSG_TEST_SEED") or np.random.SeedSequence().entropy % (1 << 63))
    log(f"fuzz: data seed {data_seed}")
    rng = np.random.default_rng(data_seed)
    dev = gpumsg.open_device(0, backend=backend)
    foreign = gpumsg.open_device(0, backend=backend)
    closing = gpumsg.open_device(0, backend=backend)
    closed_buf = closing.alloc((8, 8), np.float32).result(WAIT_S)
    closing.close()
    mat = Materializer(dev, foreign, closed_buf, rng)
    mat.backend = backend
    t0 = time.perf_counter()
    try:
        # hypothesis stops early on targets with few distinct cases (no argument: one), so
        # further passes, with the next seeds, spread what is missing over the others
        passes, todo, n = 0, tlist, per
        while todo and report.cases < cases and passes < 20:
            pass_seed = None if seed_value is None and passes == 0 else \
                (seed_value or 0) + passes
            for target in todo:
                _fuzz_target(mat, target, n, pass_seed, report)
            passes += 1
            todo = [t for t in tlist if t.params]
            n = max(1, -(-(cases - report.cases) // max(len(todo), 1)))
        # then valid calls with random arguments, every answer compared with float64
        differential(mat, max(len(oracles.VALID_CALLS), cases // 10), report)
    finally:
        report.seconds = time.perf_counter() - t0
        mat.dev.close()
        foreign.close()
    return report


def cases_from_env(default: int) -> int:
    return int(os.environ.get("GPUMSG_STRESS_CASES", default))
