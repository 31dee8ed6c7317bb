"""Every message type, built with extreme field values, is either refused with InvalidMessage
or accepted with Python ints in its integer fields and then touches only its own buffers.

Seeded loops generate the fields of every message class that ``gpumsg.messages`` exports (and
of the nested specs it exports: SparseRef, FftSpec, RnnSpec, ...), from the field annotations:
buffers from a pool of live simulator buffers of several dtypes and shapes, integers from an
extreme pool (0, 1, negatives, 2**31±1, 2**63-1, NumPy scalars of every width, bools), strings
from the names the message modules define. An accepted message of a library or copy type is
then run on the simulator, whose memory is bounds-checked per allocation with a 256 GiB unmapped
guard after each: a byte touched outside the buffers would be an illegal-address fault, which
the test reports naming the message. ``GPUMSG_BOUNDS_SEED`` and ``GPUMSG_BOUNDS_TRIALS``
change the seed and the number of trials per type.
"""

from __future__ import annotations

import dataclasses
import inspect
import os
import random
from typing import Any

import numpy as np
import pytest

import gpumsg
import gpumsg.messages as M
from gpumsg.errors import ContextPoisoned, CudaError, InvalidMessage
from gpumsg.messages._base import BufRef, Message

SEED = int(os.environ.get("GPUMSG_BOUNDS_SEED", "20261127"))
TRIALS = int(os.environ.get("GPUMSG_BOUNDS_TRIALS", "150"))
#: valid messages found per type, each the start of TRIALS mutants
SEEDS = 2
#: accepted messages run on the simulator, per type
RUNS = 16

#: every dataclass the message package exports: the messages and the specs inside them
TYPES = sorted((c for c in vars(M).values()
                if isinstance(c, type) and dataclasses.is_dataclass(c) and c is not BufRef),
               key=lambda c: c.__name__)
MESSAGES = [c for c in TYPES if issubclass(c, Message)]

NP_INTS = [np.int8(100), np.int8(-1), np.int8(127), np.uint8(200), np.uint8(8), np.int16(32767),
           np.int16(-32768), np.uint16(65535), np.int32(2**31 - 1), np.int32(-2**31),
           np.int32(8), np.uint32(2**32 - 1), np.uint32(4), np.int64(2**63 - 1),
           np.int64(-1), np.int64(2), np.uint64(2**64 - 1), np.uint64(1)]
EXTREME = [-1, -2, -2**31, 2**31 - 1, 2**31, 2**31 + 1, 2**32, 2**32 + 1, 2**48, 2**62,
           2**63 - 1, 2**63, -2**63, 2**64, True, False, np.bool_(True)]
SMALL = [0, 1, 2, 3, 4, 5, 7, 8, 16, 32, 63, 64, 128, 256]

#: strings the message modules name (dtypes, modes, layouts, kinds, ...)
STRINGS = sorted({s for mod in (M.cublas, M.cublaslt, M.cudnn, M.cudnn_rnn, M.cufft, M.curand,
                                M.cusparse, M.nccl, M.device, M.cudnn_attention, M.nvrtc)
                  for v in vars(mod).values() if isinstance(v, tuple)
                  for s in v if isinstance(s, str)}
                 | {"N", "T", "C", "L", "U", "R", "f32", "f64", "c64", "c128", "f16", "bf16",
                    "i32", "i64", "u8", "csr", "coo", "csc", "bsr", "F", "relu", "tanh",
                    "sigmoid", "max", "avg", "instance", "channel", "sum"})

#: message types that are not run (they change the device itself, need a peer or a
#: communicator, run code the test did not write, or map memory the caller vouches for:
#: Adopt's pointer is the DLPack producer's); they are still built and checked
NOT_RUN = {"Adopt", "Alloc", "AllocThen", "Free", "InjectFault", "TrimMemory", "CaptureGraph",
           "UpdateGraph", "LaunchGraph", "DestroyGraph", "RegisterHostMemory",
           "UnregisterHostMemory", "AllocPinned", "FreePinned", "CopyFromHost", "CopyToHost",
           "PeerCopySend", "PeerCopyRecv", "Collective", "CommInit", "CommAbort", "CommPoll",
           "Launch", "LoadModule", "ExportDlpack", "ImportDlpack", "WatchGeneration",
           "OpenLibraries", "SnapshotContext", "SnapshotStream", "SnapshotChildren"}

SHAPES = [("f32", (8,)), ("f32", (8, 8)), ("f32", (64,)), ("f32", (2, 3, 4, 4)),
          ("f32", (2, 4, 8)), ("f64", (8, 8)), ("f64", (16,)), ("c64", (16,)),
          ("c128", (4, 4)), ("f16", (8, 8)), ("bf16", (4, 8)), ("i32", (16,)), ("i64", (16,)),
          ("u8", (256,)), ("u32", (16,)), ("f32", (1,)), ("f32", (3,)), ("f32", (2,)),
          ("f32", (4, 3, 3, 3)), ("f32", (2, 4, 2, 2)), ("f16", (1, 2, 8, 8)),
          ("f32", (2, 3, 2, 2)), ("i32", (9,)), ("i64", (9,))]


class Pool:
    """Live buffers of a simulator device, refilled when the device is replaced."""

    def __init__(self) -> None:
        self.dev = None
        self.open()

    def open(self) -> None:
        if self.dev is not None:
            self.dev.close()
        self.dev = gpumsg.open_device(0, backend="sim")
        rng = np.random.default_rng(0)
        self.bufs = []  # the buffers themselves: a dropped one would be freed
        self.refs = []
        for dtype, shape in SHAPES * 2:  # two of each: an output distinct from its input
            host = (rng.standard_normal(shape) + 2.0).astype(gpumsg.as_dtype(dtype)) \
                if dtype[0] in "fcb" else np.ones(shape, gpumsg.as_dtype(dtype))
            self.bufs.append(self.dev.to_device(host).result())
            self.refs.append(self.bufs[-1].ref)


def _annotation(f: dataclasses.Field) -> str:
    return str(f.type)


def _int_value(r: random.Random, good: bool) -> Any:
    if good:
        return r.choice(SMALL)
    pick = r.random()
    if pick < 0.15:
        return r.choice(SMALL)
    if pick < 0.6:
        return r.choice(EXTREME)
    return r.choice(NP_INTS)


def _value(r: random.Random, f: dataclasses.Field, pool: Pool, depth: int,
           good: bool = True) -> Any:
    """A value for field ``f``: ``good`` draws plausible ones (small sizes, known names),
    otherwise integers come from the extreme pool."""
    kind = _annotation(f)
    has_default = f.default is not dataclasses.MISSING
    if has_default and r.random() < (0.5 if good else 0.1):
        return f.default
    if kind in ("int", "int | None"):
        if kind.endswith("None") and r.random() < 0.3:
            return None
        return _int_value(r, good)
    if kind in ("BufRef", "BufRef | None"):
        if kind.endswith("None") and r.random() < 0.3:
            return None
        return r.choice(pool.refs)
    if kind in ("str", "str | None", "bool | str"):
        return r.choice(STRINGS)
    if kind in ("float", "float | None", "float | complex"):
        return r.choice([1.0, 0.5, 0.1, 2])
    if kind == "bool":
        return r.choice([True, False])
    if kind.startswith("tuple[int") or (kind == "Any" and f.name not in (
            "alpha", "beta", "s", "src", "reads", "writes")):
        if r.random() < 0.4:
            return _int_value(r, good)
        return tuple(_int_value(r, good) for _ in range(r.choice([1, 2, 3])))
    if kind == "Any":
        if f.name in ("reads", "writes"):
            return ()
        if f.name == "src":
            return np.ones(8, np.float32)
        return r.choice([1.0, 0.5, 2, np.float32(1.5), np.int8(3)])
    if kind == "tuple[int, int]":
        return (_int_value(r, good), _int_value(r, good))
    if kind == "tuple[str, ...]":
        return ("k",)
    if kind == "bytes":
        return bytes(128)
    if kind == "tuple":
        if f.name in ("a", "b", "c"):
            return tuple(r.choice(pool.refs) for _ in range(r.choice([1, 2])))
        if f.name == "ops" and depth < 2:
            found = valid(r, M.CollOp, pool, depth + 1)
            return (found[0],) if found else ()
        return ()
    if kind == "Message":
        return M.Synchronize()
    nested = getattr(M, kind, None)
    if isinstance(nested, type) and dataclasses.is_dataclass(nested) and depth < 2:
        found = valid(r, nested, pool, depth + 1)
        return found[0] if found else None
    return f.default if has_default else None


def valid(r: random.Random, cls: type, pool: Pool, depth: int = 0,
          tries: int = 400) -> tuple[Any, dict[str, Any]] | None:
    """A valid instance of ``cls`` and its arguments, found by drawing plausible fields and
    redrawing the one each refusal names (or, when it names none of them, a random one);
    None if ``tries`` draws find none."""
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    kwargs = {name: _value(r, f, pool, depth) for name, f in fields.items()}
    for _ in range(tries):
        try:
            return cls(**kwargs), kwargs
        except InvalidMessage as exc:
            named = (exc.field or "").split(".")[0].split("[")[0]
            names = [named] if named in fields else []
            if not names or r.random() < 0.3:
                names.append(r.choice(list(fields)))
            for name in names:
                kwargs[name] = _value(r, fields[name], pool, depth)
    return None


def _mutable(f: dataclasses.Field) -> bool:
    kind = _annotation(f)
    return kind in ("int", "int | None") or kind.startswith("tuple[int") or (
        kind == "Any" and f.name not in ("alpha", "beta", "s", "src", "reads", "writes"))


def mutants(r: random.Random, cls: type, kwargs: dict[str, Any], pool: Pool) -> Any:
    """Arguments of a valid message with one to three integer fields made extreme: NumPy
    scalars of every width (of the valid value too), negatives, 2**31±1, 2**63-1, bools."""
    fields = [f for f in dataclasses.fields(cls) if f.init and _mutable(f)]
    if not fields:
        return
    for _ in range(TRIALS):
        out = dict(kwargs)
        for f in r.sample(fields, min(len(fields), r.choice([1, 1, 2, 3]))):
            old = out.get(f.name, f.default)
            if type(old) is int and r.random() < 0.3:
                widths = [w for w in (np.int8, np.int16, np.int32, np.int64, np.uint8,
                                      np.uint16, np.uint32, np.uint64)
                          if np.iinfo(w).min <= old <= np.iinfo(w).max]
                out[f.name] = r.choice(widths)(old) if widths else old
            else:
                out[f.name] = _value(r, f, pool, 0, good=False)
        yield out


def _hand_seeds(pool: Pool) -> dict[str, dict[str, Any]]:
    """Valid arguments of the types the field-by-field search does not find within its
    draws (fields that must agree with each other across several buffers)."""
    def g(dtype: str, shape: tuple, i: int = 0) -> BufRef:
        return [r for r in pool.refs if r.dtype == dtype and r.shape == shape][i]

    nchw, c = ("f32", (2, 3, 4, 4)), ("f32", (3,))
    sparse = M.SparseRef(1, "csr", (8, 8), 8, g("i32", (9,)), g("i32", (9,), 1),
                         g("f32", (8,)))
    v, v2, m, m2 = g("f32", (8,)), g("f32", (8,), 1), g("f32", (8, 8)), g("f32", (8, 8), 1)
    return {
        "BatchNormInference": dict(x=g(*nchw), gamma=g(*c), beta=g(*c, 1), mean=g(*c),
                                   var=g(*c, 1), y=g(*nchw, 1)),
        "LayerNorm": dict(x=g("f32", (2, 4, 8)), y=g("f32", (2, 4, 8), 1), mean=v,
                          invstd=v2),
        "GemmBatched": dict(a=(m,), b=(m2,), c=(g("f32", (64,)),), m=8, n=8, k=8, ldc=8),
        "SparseRef": dict(id=1, format="csr", shape=(8, 8), nnz=8, ptr=g("i32", (9,)),
                          idx=g("i32", (9,), 1), val=v),
        "SpMV": dict(a=sparse, x=v, y=v2),
        "SpSV": dict(a=sparse, x=v, y=v2),
        "SpMM": dict(a=sparse, b=m, c=m2),
        "SpSM": dict(a=sparse, b=m, c=m2),
        "SparseToDense": dict(a=sparse, out=m),
        "FftExec": dict(spec=M.FftSpec((8,)), x=g("c64", (16,)), out=g("c64", (16,), 1)),
    }


def _check_ints(obj: Any, where: str) -> None:
    """Every int field of an accepted message (and of its nested specs) is a Python int."""
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        kind = _annotation(f)
        if kind in ("int", "int | None"):
            assert value is None or type(value) is int, \
                f"{where}.{f.name} kept {type(value).__name__} {value!r}"
        elif kind.startswith("tuple[int") and value is not None:
            assert all(type(v) is int for v in value), f"{where}.{f.name} kept {value!r}"
        elif dataclasses.is_dataclass(value) and not isinstance(value, type):
            _check_ints(value, f"{where}.{f.name}")


@pytest.fixture(scope="module")
def pool():
    p = Pool()
    yield p
    p.dev.close()


def _run(pool: Pool, msg: Message) -> None:
    """Send ``msg`` to the simulator; any typed failure is fine except a stray access."""
    try:
        fut = pool.dev.send(msg)
        fut.result(timeout=60)
    except (ContextPoisoned, CudaError) as exc:
        code = getattr(exc, "code", None)
        text = str(exc)
        pool.open()
        assert code != 700 and "ILLEGAL_ADDRESS" not in text, \
            f"{msg!r} was accepted but touched memory outside its buffers: {text}"
    except gpumsg.GpuError:
        pass


@pytest.mark.parametrize("cls", TYPES, ids=[c.__name__ for c in TYPES])
def test_refused_or_inside(pool, cls: type) -> None:
    r = random.Random(f"{SEED}-{cls.__name__}")
    runs = 0
    hand = _hand_seeds(pool).get(cls.__name__)
    for i in range(SEEDS):
        found = (cls(**hand), hand) if hand is not None and i == 0 else \
            valid(r, cls, pool, tries=1500)
        if found is None:  # no valid start found: mutate plausible arguments all the same
            fields = [f for f in dataclasses.fields(cls) if f.init]
            kwargs = {f.name: _value(r, f, pool, 0) for f in fields}
        else:
            msg, kwargs = found
            _check_ints(msg, cls.__name__)
        for args in mutants(r, cls, kwargs, pool):
            try:
                msg = cls(**args)
            except InvalidMessage:
                continue
            except Exception as exc:  # an untyped error is a defect of the validation
                raise AssertionError(f"{cls.__name__}({args}): untyped {type(exc).__name__}: "
                                     f"{exc}") from exc
            _check_ints(msg, cls.__name__)
            if (runs < RUNS and isinstance(msg, Message) and msg.refs()
                    and cls.__name__ not in NOT_RUN):
                runs += 1
                _run(pool, msg)


@pytest.mark.parametrize("value", NP_INTS + [np.bool_(True), True], ids=repr)
def test_numpy_integers_become_python_ints(value) -> None:
    """Every NumPy integer width is taken as its value (or refused); bools are refused."""
    ref = BufRef(owner=1, id=1, generation=0, dtype="f32", shape=(64,), order="C", nbytes=256)
    try:
        msg = M.Nrm2(ref, n=2, incx=value)
    except InvalidMessage as exc:
        assert exc.field in ("incx", "x")
        assert isinstance(value, (bool, np.bool_)) or not 1 <= int(value) <= 63
        return
    assert type(msg.incx) is int and msg.incx == int(value)


def test_every_message_type_is_enumerated() -> None:
    exported = [c for c in vars(M).values()
                if inspect.isclass(c) and issubclass(c, Message) and c is not Message]
    assert len(MESSAGES) == len(exported) > 100


# -- the call-site cases: NumPy integers and odd arguments on both backends -------------------


def _ns(dev, *names: str):
    """The first of the namespaces ``names`` the device has (raw library names first)."""
    for name in names:
        if hasattr(dev, name):
            return getattr(dev, name)
    raise AssertionError(f"no namespace among {names}")


def _serving(dev) -> None:
    x = np.arange(10, dtype=np.int64)
    assert np.array_equal(dev.copy_to_host(dev.to_device(x)).result(), x)


def _refused(dev, call, field: str | None = None) -> None:
    with pytest.raises(InvalidMessage) as info:
        out = call()
        if hasattr(out, "result"):
            out.result(timeout=60)
    if field is not None:
        assert info.value.field == field, str(info.value)
        assert field in str(info.value)
    _serving(dev)


def test_numpy_strides_do_not_reach_outside(dev) -> None:
    host = np.arange(1, 9, dtype=np.float32)
    x = dev.to_device(host)
    blas = _ns(dev, "cublas", "blas")
    _refused(dev, lambda: blas.nrm2(x, n=8, incx=np.int8(100)), "x")
    _refused(dev, lambda: blas.scal(x, 2.0, n=8, incx=np.int8(100)), "x")
    a = dev.to_device(np.eye(8))
    solver = _ns(dev, "cusolver", "linalg")
    _refused(dev, lambda: solver.potrf(a, n=np.int32(2**31 - 1)), "a")
    np.testing.assert_array_equal(dev.copy_to_host(x).result(), host)
    # the same NumPy integers, in range, are taken as their values
    want = float(np.linalg.norm(host[::2][:4].astype(np.float64)))
    got = blas.nrm2(x, n=np.uint8(4), incx=np.int16(2)).result()
    assert abs(got - want) <= 1e-5 * want


def test_numpy_batch_does_not_wrap(dev) -> None:
    a = dev.to_device(np.ones((4, 4), np.float32))
    b = dev.to_device(np.ones((4, 4), np.float32))
    c = dev.alloc((4, 4), np.float32)
    blas = _ns(dev, "cublas", "blas")
    _refused(dev, lambda: blas.gemm_strided_batched(
        a, b, c, 4, 4, 4, batch=np.int16(32767), stride_a=16, stride_b=16, stride_c=16))


def test_numpy_copy_range_is_refused_and_dst_stays_valid(dev) -> None:
    dst = dev.to_device(np.arange(64, dtype=np.uint8))
    src = dev.to_device(np.arange(64, dtype=np.uint8)[::-1].copy())
    _refused(dev, lambda: dev.copy_bytes(dst, src, dst_offset=np.uint8(200), nbytes=np.uint8(100)))
    np.testing.assert_array_equal(dev.copy_to_host(dst).result(), np.arange(64, dtype=np.uint8))
    dev.copy_bytes(dst, src, dst_offset=np.uint8(4), nbytes=np.uint16(8)).result()
    want = np.arange(64, dtype=np.uint8)
    want[4:12] = np.arange(64, dtype=np.uint8)[::-1][:8]
    np.testing.assert_array_equal(dev.copy_to_host(dst).result(), want)


def test_odd_arguments_are_typed(dev) -> None:
    x = dev.to_device(np.ones((2, 3, 4, 4), np.float32))
    v = dev.to_device(np.ones(3, np.float32))
    dnn = _ns(dev, "cudnn", "dnn")
    _refused(dev, lambda: dnn.batch_norm_inference(x, v, v, v, None), "var")
    _refused(dev, lambda: dev.from_dlpack(np.array([object(), object()])), "obj")
    m = dev.to_device(np.eye(4, dtype=np.float32))
    flag = memoryview(bytearray(b"N"))
    blas = _ns(dev, "cublas", "blas")
    _refused(dev, lambda: blas.gemm(m, m, dev.alloc((4, 4), np.float32), 4, 4, 4, transa=flag),
             "transa")
    z = dev.to_device(np.ones(8, np.complex64))
    _refused(dev, lambda: dev.fft.fft(z, axis=flag), "axis")
    _refused(dev, lambda: dev.fft.fft(z, norm=flag), "norm")
    _refused(dev, lambda: dev.open_libraries(np.array(["cublas"])), "names")


def test_copy_peer_offsets_are_typed(backend: str) -> None:
    d0 = gpumsg.open_device(0, backend=backend)
    d1 = gpumsg.open_device(1 if backend == "sim" else 0, backend=backend)
    try:
        dst = d0.alloc((16,), np.float32)
        src = d1.to_device(np.ones(16, np.float32))
        _refused(d0, lambda: d0.copy_peer(dst, src, src_offset="C"), "src_offset")
        _refused(d0, lambda: d0.copy_peer(dst, src, dst_offset="C"), "dst_offset")
    finally:
        d1.close()
        d0.close()
