"""The fuzz campaign: every target of fuzz_targets.py (every public ``Device`` method, every
method of every library namespace, every exported ``Message`` subclass and every function of the
array layer) called with arguments drawn from a seed: wrong types, negative, NaN, huge and zero
sizes, mismatched dtypes and shapes, bad leading dimensions and strides, freed, closed-device,
foreign-device buffers and arrays, failed futures; and, one case in four, a *valid* call with
random arguments inside its contract.

Each case must end in a success or a typed error within a bounded wait: a
:class:`gpumsg.GpuError`, raised at the call or through the future (for the array layer also the
standard's TypeError, ValueError and IndexError, and NotImplementedError for its documented
limits); then the device must answer a correct SGEMM. A success must also be right: the answer
is recomputed from the host arrays the inputs were made from and compared (``oracles.py`` for
single BLAS, copy and memset messages, ``fuzz_arrays.py`` for the array layer,
``fuzz_answers.py`` for the libraries' namespaces and the valid calls); a mismatch is a defect
("wrong"). A case that breaks the rule is recorded (its plan entry, what escaped) instead of
stopping the campaign, so one run reports every defect it finds.

:func:`run_cases` runs a list of planned cases and reports each as it ends (the campaign tool,
``tools/fuzz_campaign.py``, runs chunks of a plan in interpreters of their own so that a crash
is counted, not fatal); :func:`campaign` runs a whole plan here.
"""

from __future__ import annotations

import dataclasses
import math
import os
import threading
import time
import traceback
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

import fuzz_answers
import fuzz_arrays
import fuzz_objects
import numpy as np
import oracles
from fuzz_objects import SparseAnswer
from fuzz_targets import DEFAULT, Case, Target, plan, target_by_name, targets
from fuzz_tokens import ARRAY_STR_VALUES, STR_VALUES

import gpumsg
import gpumsg.array_api as xp
from gpumsg.array_api.sparse import SparseMatrix
from gpumsg.client._device import Device

#: a future not answered within this many seconds counts as a hang
WAIT_S = 20.0
#: what the array layer may raise besides GpuErrors: the standard's errors for bad arguments,
#: OverflowError for a Python integer outside the array's dtype (as NumPy raises), and
#: NotImplementedError for its documented limits (sorts of rows over 4,096 elements)
ARRAY_ERRORS = (TypeError, ValueError, IndexError, OverflowError, NotImplementedError)


class Materializer:
    """Turns tokens into objects on a device: fresh buffers and arrays per case, plus the
    long-lived bad ones (a closed device's buffer and array, another device's)."""

    def __init__(self, dev: Device, foreign: Device, closed_buf: Any, closed_arr: Any,
                 rng: np.random.Generator) -> None:
        self.dev, self.foreign, self.closed_buf, self.rng = dev, foreign, closed_buf, rng
        self.closed_arr = closed_arr
        self.backend = "sim"
        #: BufRef id -> the host array the buffer was made from, and the buffer: the inputs of
        #: the references of accepted calls (cleared per case)
        self.snapshots: dict[int, np.ndarray] = {}
        self.buffers: dict[int, Any] = {}
        #: id(Array) -> the host array it shows (cleared per case)
        self.hosts: dict[int, np.ndarray] = {}
        self._foreign_buf = foreign.to_device(np.ones((8, 8), np.float32, order="F")).result()
        self._foreign_arr = xp.asarray(np.ones(8), device=foreign)

    def reset(self, rng: np.random.Generator) -> None:
        self.rng = rng
        self.snapshots.clear()
        self.buffers.clear()
        self.hosts.clear()

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
            "dt_object": np.dtype(object), "t_64": (64,), "t_2x32": (2, 32),
            "t_neg1_8": (-1, 8), "t_01": (0, 1), "t_dup": (0, 0), "dt_i32": xp.int32,
            "dt_bool": xp.bool, "dt_f16": xp.float16, "dt_u8": xp.uint8,
        }
        if token in simple:
            return simple[token]
        if token in STR_VALUES or token in ARRAY_STR_VALUES:
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
        if token == "a_freed":
            arr = xp.asarray(np.ones(8), device=dev)
            buf = arr.buffer
            (buf.result(WAIT_S) if isinstance(buf, Future) else buf).free().result(WAIT_S)
            return arr
        if token == "a_foreign":
            return self._foreign_arr
        if token == "a_closed":
            return self.closed_arr
        if token.startswith("a_"):
            return fuzz_arrays.make_array(token, dev, self.rng, self.hosts)
        if token.startswith("l_"):
            return fuzz_arrays.make_list(token, dev, self.rng, self.hosts)
        return self._buf(token)

    def args(self, target: Target, tokens: dict[str, str]) -> tuple[list, dict[str, Any]]:
        """Positional and keyword arguments: a positional-only parameter left at its default
        is passed its default when a later one is given."""
        positional: list = []
        given = [n for n in target.positional if tokens.get(n, DEFAULT) != DEFAULT]
        last = target.positional.index(given[-1]) if given else -1
        defaults = dict(target.params)
        for k, n in enumerate(target.positional):
            if k > last:
                break
            t = tokens.get(n, DEFAULT)
            positional.append(defaults[n] if t == DEFAULT else self.value(t))
        keywords = {n: self.value(t) for n, t in tokens.items()
                    if t != DEFAULT and n not in target.positional}
        return positional, keywords


@dataclasses.dataclass
class FuzzReport:
    cases: int = 0
    typed_at_call: int = 0
    typed_in_future: int = 0
    succeeded: int = 0
    #: accepted cases whose answer was compared with a reference, and those it missed
    checked: int = 0
    wrong: int = 0
    #: errors that are not typed (at the call or through the future), and hangs
    untyped: int = 0
    hangs: int = 0
    #: interpreters that died (counted by the campaign tool, which runs chunks in their own)
    crashes: int = 0
    #: refusals by error type, at the call or through the future
    refused: dict[str, int] = dataclasses.field(default_factory=dict)
    #: the answers checked, by message type, array function or valid call
    checked_types: dict[str, int] = dataclasses.field(default_factory=dict)
    #: the valid calls made (each must succeed and be right), and those that succeeded
    valid_cases: int = 0
    valid_ok: int = 0
    defects: list[str] = dataclasses.field(default_factory=list)
    by_target: dict[str, int] = dataclasses.field(default_factory=dict)
    seconds: float = 0.0

    def figures(self) -> dict[str, Any]:
        return {"cases": self.cases, "tried": self.cases + self.valid_cases,
                "accepted": self.succeeded + self.valid_ok,
                "refused": sum(self.refused.values()),
                "valid_cases": self.valid_cases, "valid_ok": self.valid_ok, "checked": self.checked,
                "wrong": self.wrong, "untyped": self.untyped, "crashes": self.crashes,
                "hangs": self.hangs, "typed_at_call": self.typed_at_call,
                "typed_in_future": self.typed_in_future, "succeeded": self.succeeded,
                "refused_by_type": dict(sorted(self.refused.items())),
                "checked_types": dict(sorted(self.checked_types.items())),
                "defects": len(self.defects), "targets": len(self.by_target),
                "seconds": round(self.seconds, 1)}

    def refuse(self, exc: BaseException) -> None:
        name = type(exc).__name__
        self.refused[name] = self.refused.get(name, 0) + 1

    def count_checked(self, name: str) -> None:
        self.checked += 1
        self.checked_types[name] = self.checked_types.get(name, 0) + 1

    def merge(self, other: FuzzReport) -> None:
        """Add ``other``'s counts (a case's, or a chunk's) to these."""
        for f in ("cases", "typed_at_call", "typed_in_future", "succeeded", "checked",
                  "wrong", "untyped", "hangs", "crashes", "valid_cases", "valid_ok"):
            setattr(self, f, getattr(self, f) + getattr(other, f))
        for mine, theirs in ((self.refused, other.refused),
                             (self.checked_types, other.checked_types),
                             (self.by_target, other.by_target)):
            for k, v in theirs.items():
                mine[k] = mine.get(k, 0) + v
        self.defects.extend(other.defects)
        self.seconds += other.seconds

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> FuzzReport:
        return cls(**doc)


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


def _invoke(dev: Device, target: Target, positional: list, keywords: dict[str, Any]) -> Any:
    if target.kind == "device":
        return getattr(dev, target.name)(**keywords)
    if target.kind == "namespace":
        ns, meth = target.name.split(".")
        return getattr(getattr(dev, ns), meth)(**keywords)
    if target.kind == "array":
        fn = xp
        for part in target.name.split("."):
            fn = getattr(fn, part)
        return fn(*positional, **keywords)
    if target.kind in ("random", "sparse"):  # on an object made for the case
        return fuzz_objects.invoke(target.kind, target.name, positional, keywords)
    cls = getattr(gpumsg.messages, target.name)
    return dev.send(cls(**keywords))


def _host_answer(dev: Device, answer: Any) -> Any:
    """An array answer (or a tuple of them) read back: reading waits for the launches that
    write it and raises their errors, as a user's read would."""
    if isinstance(answer, xp.Array):
        return np.asarray(answer)
    if isinstance(answer, SparseMatrix):
        return SparseAnswer(answer.format, np.asarray(answer.toarray()))
    if isinstance(answer, tuple) and hasattr(answer, "_fields"):
        return type(answer)(*(_host_answer(dev, a) for a in answer))
    if isinstance(answer, (tuple, list)):
        return type(answer)(_host_answer(dev, a) for a in answer)
    return answer


def run_case(mat: Materializer, target: Target, tokens: dict[str, str],
             report: FuzzReport, where: str = "") -> None:
    """One case on a helper thread, so that a call that blocks (not only a future that is
    never answered) is caught: past ``3 * WAIT_S`` it is recorded as a hang and the device is
    abandoned for a fresh one."""
    done = threading.Event()

    def body() -> None:
        try:
            _run_case(mat, target, tokens, report, where)
        finally:
            done.set()

    threading.Thread(target=body, daemon=True, name="fuzz-case").start()
    if not done.wait(3 * WAIT_S):
        report.hangs += 1
        report.defects.append(f"{where or target}({tokens}): the case blocked for "
                              f"{3 * WAIT_S} s (hang)")
        _replace_device(mat)


def _replace_device(mat: Materializer) -> None:
    mat.dev = gpumsg.open_device(0, backend=mat.backend)
    xp.set_default_device(mat.dev)


def _record_posts(dev: Device, sent: list) -> Callable[[], None]:
    """Record every message ``dev`` posts (every send path ends in ``_post``) until the
    returned undo is called."""
    real_post = dev._post

    def record(msg: Any, reply: Any) -> None:
        sent.append(msg)
        real_post(msg, reply)

    dev._post = record

    def undo() -> None:
        dev._post = real_post

    return undo


def _run_case(mat: Materializer, target: Target, tokens: dict[str, str],
              report: FuzzReport, where: str) -> None:
    """One case: call, wait, classify, check the answer; then the SGEMM check. Never raises.
    A device that fails the check is replaced, so that one defect does not hide the next."""
    dev = mat.dev
    report.cases += 1
    report.by_target[str(target)] = report.by_target.get(str(target), 0) + 1
    where = where or f"{target}({', '.join(f'{k}={v}' for k, v in tokens.items())})"
    arrays = target.kind in ("array", "random", "sparse")
    typed: tuple = (gpumsg.GpuError,) + (ARRAY_ERRORS if arrays else ())
    try:
        positional, keywords = mat.args(target, tokens)
    except Exception as exc:  # noqa: BLE001 - a fixture failure is a defect too
        report.defects.append(f"{where}: building arguments raised {exc!r}")
        return
    sent: list = []
    undo = _record_posts(dev, sent)
    accepted, answer = False, None
    try:
        try:
            out = _invoke(dev, target, positional, keywords)
        except typed as exc:
            report.typed_at_call += 1
            report.refuse(exc)
            out = None
        except Exception as exc:  # noqa: BLE001
            report.untyped += 1
            report.defects.append(f"{where}: {type(exc).__name__} escaped at the call: {exc}\n"
                                  + "".join(traceback.format_exception(exc)[-3:]))
            out = None
        else:
            try:
                if isinstance(out, Future):
                    out = out.result(WAIT_S)
                answer = _host_answer(dev, out) if arrays else out
            except FutureTimeout:
                report.hangs += 1
                report.defects.append(f"{where}: no answer within {WAIT_S} s (hang)")
            except typed as exc:
                report.typed_in_future += 1
                report.refuse(exc)
            except Exception as exc:  # noqa: BLE001
                report.untyped += 1
                report.defects.append(f"{where}: {type(exc).__name__} through the "
                                      f"future: {exc}")
            else:
                report.succeeded += 1
                accepted = True
    finally:
        undo()
    for msg in sent:  # every message posted got past its checks
        bad = oracles.field_kinds(msg)
        if bad:
            report.untyped += 1
            report.defects.append(f"{where}: a message was posted with fields of the wrong "
                                  f"kind: {', '.join(bad)}")
    if accepted:
        _check_accepted(mat, target, positional, keywords, sent, answer, where, report)
    try:
        sgemm_ok(dev, mat.rng)
    except Exception as exc:  # noqa: BLE001
        report.defects.append(f"{where}: the device then failed a SGEMM: {exc!r}")
        dev.close(timeout=10)
        _replace_device(mat)


def _check_accepted(mat: Materializer, target: Target, positional: list, keywords: dict,
                    sent: list, answer: Any, where: str, report: FuzzReport) -> None:
    """An accepted case's answer against its reference: the array layer's against NumPy's
    same call, a namespace call with a reference in fuzz_answers against it, otherwise a lone
    message with an oracle (BLAS, copies, memset) against oracles.py."""
    try:
        checks = {"array": fuzz_arrays.check_array_call,
                  "random": fuzz_objects.check_random_call,
                  "sparse": fuzz_objects.check_sparse_call}
        if target.kind == "array" and target.name.startswith("sparse."):
            checks["array"] = fuzz_objects.check_sparse_function
        check = checks.get(target.kind)
        if check is not None:
            if check(target.name, positional, keywords, answer, mat.hosts):
                report.count_checked(f"{'xp' if target.kind == 'array' else target.kind}."
                                     f"{target.name}")
            return
        if target.kind == "namespace" and target.name in fuzz_answers.NAMESPACE_CHECKS:
            def host(value: Any) -> Any:
                ref = getattr(value, "ref", None)
                return mat.snapshots.get(getattr(ref, "id", None)) if ref is not None else value

            def read(buf: Any) -> np.ndarray:
                return mat.dev.copy_to_host(getattr(buf, "buffer", buf)).result(WAIT_S)

            if fuzz_answers.check_namespace_call(target.name, keywords, host, read, answer):
                report.count_checked(target.name)
            return
    except oracles.Mismatch as exc:
        report.wrong += 1
        report.defects.append(f"{where}: wrong answer: {exc}")
        return
    except Exception as exc:  # noqa: BLE001 - reading back the answer must work too
        report.defects.append(f"{where}: checking the answer raised {exc!r}\n"
                              + "".join(traceback.format_exception(exc)[-3:]))
        return
    _check_message(mat, sent, answer, where, report)


def _check_message(mat: Materializer, sent: list, answer: Any, where: str,
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
        report.count_checked(type(msg).__name__)


#: messages a case may send besides the one checked without changing any buffer's contents
READ_ONLY_MESSAGES = {"Free", "Stats", "CopyToHost", "Synchronize"}


def valid_calls() -> list[str]:
    """The valid calls of a plan: the BLAS calls checked message by message (oracles.py),
    then every call of fuzz_answers.py."""
    return list(oracles.VALID_CALLS) + list(fuzz_answers.VALID)


def run_valid(mat: Materializer, call: str, report: FuzzReport, where: str = "") -> None:
    """One valid call with random arguments (from ``mat.rng``): it must succeed and its answer
    must match the reference. Never raises."""
    report.valid_cases += 1
    report.by_target[f"valid:{call}"] = report.by_target.get(f"valid:{call}", 0) + 1
    where = where or f"valid {call}"
    if call in fuzz_answers.VALID:
        try:
            checked = fuzz_answers.VALID[call](mat.dev, mat.rng)
        except oracles.Mismatch as exc:
            report.wrong += 1
            report.defects.append(f"{where}: wrong answer: {exc}")
            return
        except Exception as exc:  # noqa: BLE001 - a valid call must succeed
            report.defects.append(f"{where}: a valid call failed: {exc!r}\n"
                                  + "".join(traceback.format_exception(exc)[-4:]))
            return
        report.valid_ok += 1
        for _ in range(checked):
            report.count_checked(f"valid {call}")
        return
    kwargs = oracles.valid_call(mat.rng, call)
    dev = mat.dev
    args = {}
    try:
        for name, value in kwargs.items():
            if oracles.is_buffer_arg(name):
                buf = dev.to_device(value).result(WAIT_S)
                mat.snapshots[buf.ref.id], mat.buffers[buf.ref.id] = value, buf
                args[name] = buf
            else:
                args[name] = value
    except Exception as exc:  # noqa: BLE001
        report.defects.append(f"{where}: uploading the inputs failed: {exc!r}")
        return
    where += "(" + ", ".join(f"{k}={v!r}" for k, v in kwargs.items()
                             if not oracles.is_buffer_arg(k)) + ")"
    sent: list = []
    undo = _record_posts(dev, sent)
    try:
        target: Any = dev
        for part in call.split("."):
            target = getattr(target, part)
        answer = target(**args).result(WAIT_S)
    except Exception as exc:  # noqa: BLE001 - a valid call must succeed
        report.defects.append(f"{where}: a valid call failed: {exc!r}")
        return
    finally:
        undo()
    report.valid_ok += 1
    checked, found = report.checked, len(report.defects)
    _check_message(mat, sent, answer, where, report)
    if report.checked == checked and len(report.defects) == found:
        report.defects.append(f"{where}: the valid call's answer was not checked "
                              f"(sent {[type(m).__name__ for m in sent]})")


def _run_valid_guarded(mat: Materializer, call: str, report: FuzzReport, where: str) -> None:
    done = threading.Event()

    def body() -> None:
        try:
            run_valid(mat, call, report, where)
        finally:
            done.set()

    threading.Thread(target=body, daemon=True, name="fuzz-valid").start()
    if not done.wait(3 * WAIT_S):
        report.hangs += 1
        report.defects.append(f"{where}: the valid call blocked for {3 * WAIT_S} s (hang)")
        _replace_device(mat)


def run_cases(backend: str, seed: int, cases: list[Case],
              emit: Callable[[Case, FuzzReport], None] = lambda case, rep: None,
              started: Callable[[Case], None] = lambda case: None) -> FuzzReport:
    """Run planned ``cases`` on a fresh device of ``backend``; case ``i`` draws its data from
    ``default_rng([seed, i])`` alone. ``started(case)`` before and ``emit(case, its report)``
    after each case."""
    total = FuzzReport()
    by_name = target_by_name(targets())
    dev = gpumsg.open_device(0, backend=backend)
    foreign = gpumsg.open_device(0, backend=backend)
    closing = gpumsg.open_device(0, backend=backend)
    closed_buf = closing.alloc((8, 8), np.float32).result(WAIT_S)
    closed_arr = xp.asarray(np.ones(8), device=closing)
    closing.close()
    mat = Materializer(dev, foreign, closed_buf, closed_arr, np.random.default_rng(seed))
    mat.backend = backend
    old_default = xp.set_default_device(dev)
    t0 = time.perf_counter()
    try:
        for case in cases:
            started(case)
            one = FuzzReport()
            t1 = time.perf_counter()
            mat.reset(np.random.default_rng([seed, case.index]))
            if case.kind == "valid":
                _run_valid_guarded(mat, case.target, one, case.describe())
            else:
                run_case(mat, by_name[case.target], dict(case.tokens), one, case.describe())
            one.seconds = time.perf_counter() - t1
            total.merge(one)
            emit(case, one)
    finally:
        total.seconds = time.perf_counter() - t0
        xp.set_default_device(old_default)
        mat.dev.close()
        foreign.close()
    return total


def campaign(cases: int, backend: str = "sim", seed_value: int | None = None,
             log: Any = print) -> FuzzReport:
    """The plan of ``cases`` cases for ``seed_value`` (default: $GPUMSG_TEST_SEED, else a
    fresh one, printed), run here."""
    seed = seed_value if seed_value is not None else int(
        os.environ.get("GPUMSG_TEST_SEED") or np.random.SeedSequence().entropy % (1 << 63))
    log(f"fuzz: {cases} cases over {len(targets())} targets and {len(valid_calls())} valid "
        f"calls, backend {backend}, seed {seed}")
    return run_cases(backend, seed, plan(seed, cases, valid_calls()))


def cases_from_env(default: int) -> int:
    return int(os.environ.get("GPUMSG_STRESS_CASES", default))
