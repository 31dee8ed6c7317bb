"""Float64 references for the fuzz campaign's accepted calls: a call that succeeds must also
give the right numbers.

The campaign records the messages a case posts (every send path ends in ``Device._post``) and,
for a case that posted exactly one message of a type listed here, recomputes that message's
effect in NumPy from the host arrays its input buffers were made from, then compares the
device's output buffers (the whole allocation: what must stay untouched is compared exactly)
or the scalar the future resolved to (CopyDevice and Memset: byte for byte). The messages are
already validated and normalized (leading dimensions, ``n`` and transposes filled in), so a
reference only has to follow cuBLAS's column-major semantics.

Tolerances come from tests/tolerance.py: the unit roundoff of the type the arithmetic happens
in, the reduction length, and one rounding of a 16-bit output."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

# the tree's root, for tests/tolerance.py (this module is also imported by the benchmarks)
_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from tests.tolerance import bound, unit_roundoff  # noqa: E402

__all__ = ["ORACLES", "Mismatch", "check_message"]

_HALF = ("f16", "bf16")


class Mismatch(AssertionError):
    """The device's answer differs from the float64 reference beyond the tolerance."""


def _wide(x: Any) -> np.ndarray:
    x = np.asarray(x)
    if x.dtype.kind == "c":
        return x.astype(np.complex128)
    return x.astype(np.float64)


def _flat(host: np.ndarray) -> np.ndarray:
    """A buffer's elements in memory order (its host array raveled in its own order)."""
    return _wide(np.asarray(host).ravel(order="K"))


def _matrix(mem: np.ndarray, rows: int, cols: int, ld: int) -> np.ndarray:
    idx = np.arange(rows)[:, None] + ld * np.arange(cols)[None, :]
    return mem[idx]


def _vector(mem: np.ndarray, n: int, inc: int) -> np.ndarray:
    return mem[np.arange(n) * inc]


def _op(x: np.ndarray, trans: str) -> np.ndarray:
    return x if trans == "N" else x.T if trans == "T" else x.T.conj()


def _tol(dtype: str, n: int) -> float:
    work = "f32" if dtype in _HALF else dtype
    extra = 2 * unit_roundoff(dtype) if dtype in _HALF else 0.0
    return bound(work, max(n, 1), c=8) + extra


class _Expect:
    """What one message must have written: per output buffer, the expected memory (a flat
    array), the element positions computed in floating point (the rest must be unchanged
    bit for bit) and the tolerance; or the expected scalar result."""

    def __init__(self) -> None:
        self.buffers: list[tuple[Any, np.ndarray, np.ndarray, float]] = []
        self.result: tuple[Any, float, str] | None = None

    def buffer(self, ref: Any, mem: np.ndarray, computed: np.ndarray, tol: float) -> None:
        self.buffers.append((ref, mem, computed, tol))


def _gemm(msg: Any, hosts: Callable[[Any], np.ndarray]) -> _Expect | None:
    if getattr(msg, "compute", "default") != "default":
        return None
    a, b, c = hosts(msg.a), hosts(msg.b), hosts(msg.c)
    ar, ac = (msg.m, msg.k) if msg.transa == "N" else (msg.k, msg.m)
    br, bc = (msg.k, msg.n) if msg.transb == "N" else (msg.n, msg.k)
    opa = _op(_matrix(a, ar, ac, msg.lda), msg.transa)
    opb = _op(_matrix(b, br, bc, msg.ldb), msg.transb)
    prod = opa @ opb
    out = c.copy()
    idx = np.arange(msg.m)[:, None] + msg.ldc * np.arange(msg.n)[None, :]
    block = msg.alpha * prod
    # the sizes of the terms each entry sums: a GEMM's rounding error is bounded by them, not
    # by the entry, which alpha A B and beta C may cancel to near zero
    mags = abs(msg.alpha) * (np.abs(opa) @ np.abs(opb))
    if msg.beta != 0:
        block = block + msg.beta * c[idx]
        mags = mags + abs(msg.beta) * np.abs(c[idx])
    out = out.astype(np.result_type(out, block))
    out[idx] = block
    e = _Expect()
    e.buffer(msg.c, out, idx.ravel(), _tol(msg.c.dtype, msg.k + 1) * _cancel(mags, block))
    return e


def _cancel(mags: np.ndarray, values: np.ndarray) -> float:
    """How much the entries' terms cancel: the norm of the terms' magnitudes over the norm of
    the entries (at least 1; 1 where either is not finite or the entries are all zero)."""
    with np.errstate(all="ignore"):
        num = float(np.linalg.norm(np.asarray(mags, np.float64)))
        den = float(np.linalg.norm(np.asarray(values)))
    if not (np.isfinite(num) and np.isfinite(den)) or den == 0:
        return 1.0
    return max(1.0, num / den)


def _axpy(msg: Any, hosts: Callable[[Any], np.ndarray]) -> _Expect:
    x, y = hosts(msg.x), hosts(msg.y)
    idx = np.arange(msg.n) * msg.incy
    out = y.astype(np.result_type(y, x, msg.alpha))
    xs = _vector(x, msg.n, msg.incx)
    mags = np.abs(out[idx]) + abs(msg.alpha) * np.abs(xs)
    out[idx] = out[idx] + msg.alpha * xs
    e = _Expect()
    e.buffer(msg.y, out, idx, _tol(msg.y.dtype, 2) * _cancel(mags, out[idx]))
    return e


def _scal(msg: Any, hosts: Callable[[Any], np.ndarray]) -> _Expect:
    x = hosts(msg.x)
    idx = np.arange(msg.n) * msg.incx
    out = x.astype(np.result_type(x, msg.alpha))
    out[idx] = msg.alpha * out[idx]
    e = _Expect()
    e.buffer(msg.x, out, idx, _tol(msg.x.dtype, 1))
    return e


def _copy(msg: Any, hosts: Callable[[Any], np.ndarray]) -> _Expect:
    x, y = hosts(msg.x), hosts(msg.y)
    idx = np.arange(msg.n) * msg.incy
    out = y.copy()
    out[idx] = _vector(x, msg.n, msg.incx)
    e = _Expect()
    e.buffer(msg.y, out, np.zeros(0, int), 0.0)  # a copy is exact
    return e


def _swap(msg: Any, hosts: Callable[[Any], np.ndarray]) -> _Expect:
    x, y = hosts(msg.x), hosts(msg.y)
    ix, iy = np.arange(msg.n) * msg.incx, np.arange(msg.n) * msg.incy
    ox, oy = x.copy(), y.copy()
    ox[ix], oy[iy] = y[iy], x[ix]
    e = _Expect()
    e.buffer(msg.x, ox, np.zeros(0, int), 0.0)
    e.buffer(msg.y, oy, np.zeros(0, int), 0.0)
    return e


def _reduction(kind: str) -> Callable[[Any, Callable[[Any], np.ndarray]], _Expect]:
    def ref(msg: Any, hosts: Callable[[Any], np.ndarray]) -> _Expect:
        x = _vector(hosts(msg.x), msg.n, msg.incx)
        e = _Expect()
        mag = np.abs(x.real) + np.abs(x.imag)
        if kind == "dot":
            y = _vector(hosts(msg.y), msg.n, msg.incy)
            value = np.sum((x.conj() if msg.conjugate else x) * y)
            scale = float(np.linalg.norm(x) * np.linalg.norm(y))
        elif kind == "nrm2":
            value = np.linalg.norm(x)
            scale = float(value)
        elif kind == "asum":
            value = np.sum(mag)
            scale = float(value)
        else:  # iamax / iamin: 0-based, exact (ties broken by the first, as cuBLAS)
            e.result = (int(np.argmax(mag) if kind == "iamax" else np.argmin(mag))
                        if msg.n else -1, 0.0, kind)
            return e
        e.result = (value, _tol(msg.x.dtype, msg.n) * max(scale, 1e-300), kind)
        return e

    return ref


def _gemv(msg: Any, hosts: Callable[[Any], np.ndarray]) -> _Expect:
    a, x, y = hosts(msg.a), hosts(msg.x), hosts(msg.y)
    xn, yn = (msg.n, msg.m) if msg.trans == "N" else (msg.m, msg.n)
    opa, xs = _op(_matrix(a, msg.m, msg.n, msg.lda), msg.trans), _vector(x, xn, msg.incx)
    prod = opa @ xs
    idx = np.arange(yn) * msg.incy
    block = msg.alpha * prod
    mags = abs(msg.alpha) * (np.abs(opa) @ np.abs(xs))
    if msg.beta != 0:
        block = block + msg.beta * y[idx]
        mags = mags + abs(msg.beta) * np.abs(y[idx])
    out = y.astype(np.result_type(y, block))
    out[idx] = block
    e = _Expect()
    e.buffer(msg.y, out, idx, _tol(msg.y.dtype, max(msg.m, msg.n) + 1) * _cancel(mags, block))
    return e


def _geam(msg: Any, hosts: Callable[[Any], np.ndarray]) -> _Expect:
    a, b, c = hosts(msg.a), hosts(msg.b), hosts(msg.c)
    ar, ac = (msg.m, msg.n) if msg.transa == "N" else (msg.n, msg.m)
    br, bc = (msg.m, msg.n) if msg.transb == "N" else (msg.n, msg.m)
    block = msg.alpha * _op(_matrix(a, ar, ac, msg.lda), msg.transa)
    mags = np.abs(block)
    if msg.beta != 0:
        term = msg.beta * _op(_matrix(b, br, bc, msg.ldb), msg.transb)
        block = block + term
        mags = mags + np.abs(term)
    idx = np.arange(msg.m)[:, None] + msg.ldc * np.arange(msg.n)[None, :]
    out = c.astype(np.result_type(c, block))
    out[idx] = block
    e = _Expect()
    e.buffer(msg.c, out, idx.ravel(), _tol(msg.c.dtype, 2) * _cancel(mags, block))
    return e


#: message class name -> reference
ORACLES: dict[str, Callable[[Any, Callable[[Any], np.ndarray]], _Expect | None] | None] = {
    "Sgemm": _gemm, "Gemm": _gemm, "Axpy": _axpy, "Scal": _scal, "Copy": _copy,
    "Swap": _swap, "Dot": _reduction("dot"), "Nrm2": _reduction("nrm2"),
    "Asum": _reduction("asum"), "Iamax": _reduction("iamax"), "Iamin": _reduction("iamin"),
    "Gemv": _gemv, "Geam": _geam,
    "CopyDevice": None, "Memset": None,  # byte for byte: _check_bytes
}


def _memory(host: np.ndarray, order: str) -> np.ndarray:
    """A buffer's bytes as the device holds them: its host array laid out in ``order``."""
    return np.frombuffer(np.asarray(host).ravel(order=order).tobytes(), np.uint8).copy()


def _check_bytes(msg: Any, snapshots: dict[int, np.ndarray], read: Callable[[Any], Any]
                 ) -> bool:
    """CopyDevice and Memset, byte for byte: the written range holds the source's bytes (the
    fill pattern), every other byte of the destination is unchanged. Not compared where a
    range reaches past the bytes the host array covers (an allocation's padding)."""
    dst = msg.dst
    if dst.id not in snapshots:
        return False
    before = _memory(snapshots[dst.id], dst.order)
    expect = before.copy()
    if type(msg).__name__ == "CopyDevice":
        if msg.src.id not in snapshots:
            return False
        src = _memory(snapshots[msg.src.id], msg.src.order)
        lo, n = msg.src_offset, msg.nbytes
        if lo + n > src.size or msg.dst_offset + n > expect.size:
            return False
        expect[msg.dst_offset:msg.dst_offset + n] = src[lo:lo + n]
    else:
        lo, n = msg.offset, msg.nbytes
        if lo + n > expect.size:
            return False
        pattern = np.frombuffer(int(msg.value).to_bytes(msg.width, "little"), np.uint8)
        expect[lo:lo + n] = np.tile(pattern, n // msg.width)
    got = _memory(read(dst), dst.order)
    if got.shape != expect.shape or not np.array_equal(got, expect):
        bad = np.flatnonzero(got != expect) if got.shape == expect.shape else [-1]
        raise Mismatch(f"{type(msg).__name__}: {dst.describe()} differs at byte {bad[0]} "
                       f"({len(bad)} bytes)")
    return True


def check_message(msg: Any, snapshots: dict[int, np.ndarray], read: Callable[[Any], Any],
                  result: Any) -> bool:
    """Check one accepted message: False when it has no oracle or an input was not made
    from a known host array (nothing to compare with); True when it matched; raises
    :class:`Mismatch` when it did not. ``snapshots`` maps a BufRef's id to the host array
    its buffer was made from; ``read(ref)`` returns a buffer's current host copy."""
    if type(msg).__name__ in ("CopyDevice", "Memset"):
        return _check_bytes(msg, snapshots, read)
    oracle = ORACLES.get(type(msg).__name__)
    if oracle is None:
        return False
    refs = [getattr(msg, f) for f in ("a", "b", "c", "x", "y") if hasattr(msg, f)]
    if any(getattr(r, "id", None) not in snapshots for r in refs):
        return False
    if len({r.id for r in refs}) != len(refs):
        return False  # aliased operands: refused by the library or not meaningful here

    def hosts(ref: Any) -> np.ndarray:
        return _flat(snapshots[ref.id])

    expect = oracle(msg, hosts)
    if expect is None:
        return False
    name = type(msg).__name__
    for ref, mem, computed, tol in expect.buffers:
        got = _flat(read(ref))
        if got.shape != mem.shape:
            raise Mismatch(f"{name}: {ref.describe()} holds {got.size} elements, "
                           f"expected {mem.size}")
        keep = np.ones(mem.size, bool)
        keep[computed] = False
        if not np.array_equal(got[keep], mem[keep].astype(got.dtype), equal_nan=True):
            bad = int(np.flatnonzero(got[keep] != mem[keep])[0])
            raise Mismatch(f"{name}: {ref.describe()} changed an element it must not write "
                           f"(memory position {np.flatnonzero(keep)[bad]})")
        if computed.size:
            ref_vals, got_vals = mem[computed], got[computed]
            # where the float64 reference overflows or meets inf * 0 (an infinite alpha, say),
            # the answer must be non-finite too; which of inf and NaN depends on the order of
            # the operations, which BLAS leaves free
            wild = ~np.isfinite(ref_vals)
            if wild.any():
                if np.isfinite(got_vals[wild]).any():
                    raise Mismatch(f"{name}: finite values where the reference is not, in "
                                   f"{ref.describe()}")
                ref_vals, got_vals = ref_vals[~wild], got_vals[~wild]
            den = float(np.linalg.norm(ref_vals)) or 1.0
            err = float(np.linalg.norm(got_vals - ref_vals)) / den
            if not err <= tol:
                raise Mismatch(f"{name}: relative error {err:.3g} > {tol:.3g} in "
                               f"{ref.describe()}")
    if expect.result is not None:
        value, tol, kind = expect.result
        if kind in ("iamax", "iamin"):
            if value >= 0 and result != value:
                raise Mismatch(f"{name}: index {result!r}, expected {value}")
        elif not abs(complex(result) - complex(value)) <= tol:
            raise Mismatch(f"{name}: {result!r}, expected {value!r} (tolerance {tol:.3g})")
    return True


# -- valid calls: random arguments inside each call's contract -----------------------------------

#: the calls the differential pass draws valid arguments for (Device or namespace method)
#: a message field's annotation -> the types its value may have once the message is built:
#: what a library call is handed (ctypes refuses a str where an int is declared)
_FIELD_KINDS: dict[str, tuple[type, ...]] = {
    "int": (int,), "int | None": (int, type(None)),
    "float": (float, int), "float | None": (float, int, type(None)),
    "str": (str,), "str | None": (str, type(None)), "bool": (bool,),
}


def field_kinds(msg: Any) -> list[str]:
    """The fields of a built message (and of the messages it carries) whose values are not of
    their annotated kind, as ``Type.field=value``: a message that its checks let through with
    such a value hands it to a library call as it is. A bool where an int is annotated
    counts too."""
    import dataclasses

    out: list[str] = []
    for f in dataclasses.fields(msg):
        value = getattr(msg, f.name, None)
        if dataclasses.is_dataclass(value) and not isinstance(value, type) and \
                type(value).__module__.startswith("gpumsg.messages"):
            out += field_kinds(value)
            continue
        kinds = _FIELD_KINDS.get(str(f.type).strip())
        if kinds is None:
            continue
        ok = isinstance(value, kinds) and not (
            isinstance(value, bool) and bool not in kinds and value is not None)
        if not ok:
            out.append(f"{type(msg).__name__}.{f.name}={value!r}")
    return out


VALID_CALLS = ("sgemm", "cublas.gemm", "cublas.axpy", "cublas.scal", "cublas.dot", "cublas.nrm2",
               "cublas.asum", "cublas.iamax", "cublas.iamin", "cublas.copy", "cublas.swap",
               "cublas.gemv",
               "cublas.geam")
_BUFFER_ARGS = ("a", "b", "c", "x", "y")


def _host(rng: np.random.Generator, size: int, dtype: str) -> np.ndarray:
    import gpumsg

    x = rng.standard_normal(size) + 0.1
    if dtype in ("c64", "c128"):
        x = x + 1j * rng.standard_normal(size)
    return x.astype(gpumsg.as_dtype(dtype))


def valid_call(rng: np.random.Generator, call: str) -> dict[str, Any]:
    """Keyword arguments of a valid ``call`` (buffers as host arrays, 1-D, with slack after
    the last element the call touches): random sizes, strides, leading dimensions, every
    option value, every dtype the call takes, alpha/beta including 0."""
    dtypes = ["f32"] if call == "sgemm" else ["f32", "f64", "c64", "c128"]
    if call == "cublas.gemm":
        dtypes += ["f16", "bf16"]
    dt = str(rng.choice(dtypes))
    cplx = dt in ("c64", "c128")

    def scalar(zero_ok: bool) -> Any:
        if zero_ok and rng.random() < 0.25:
            return 0.0
        v = float(rng.uniform(-2, 2))
        return complex(v, float(rng.uniform(-1, 1))) if cplx else v

    def size(lo: int = 1, hi: int = 9) -> int:
        return int(rng.integers(lo, hi + 1))

    def trans() -> str:
        return str(rng.choice(["N", "T", "C"] if cplx or call != "sgemm" else ["N", "T"]))

    def mat(rows: int, cols: int) -> tuple[np.ndarray, int]:
        ld = rows + int(rng.integers(0, 3))
        return _host(rng, ld * (cols - 1) + rows + int(rng.integers(0, 4)), dt), ld

    def vec(n: int) -> tuple[np.ndarray, int]:
        inc = int(rng.integers(1, 4))
        return _host(rng, (n - 1) * inc + 1 + int(rng.integers(0, 3)), dt), inc

    if call in ("sgemm", "cublas.gemm", "cublas.geam"):
        m, n, k = size(), size(), size()
        ta, tb = trans(), trans()
        if call == "cublas.geam":
            a, lda = mat(*((m, n) if ta == "N" else (n, m)))
            b, ldb = mat(*((m, n) if tb == "N" else (n, m)))
            c, ldc = mat(m, n)
            return dict(a=a, b=b, c=c, m=m, n=n, alpha=scalar(False), beta=scalar(True),
                        transa=ta, transb=tb, lda=lda, ldb=ldb, ldc=ldc)
        a, lda = mat(*((m, k) if ta == "N" else (k, m)))
        b, ldb = mat(*((k, n) if tb == "N" else (n, k)))
        c, ldc = mat(m, n)
        if dt in ("f16", "bf16"):
            alpha, beta = float(rng.uniform(0.5, 1.5)), float(rng.choice([0.0, -0.5]))
        else:
            alpha, beta = scalar(False), scalar(True)
        return dict(a=a, b=b, c=c, m=m, n=n, k=k, alpha=alpha, beta=beta, transa=ta,
                    transb=tb, lda=lda, ldb=ldb, ldc=ldc)
    if call == "cublas.gemv":
        m, n, t = size(), size(), trans()
        a, lda = mat(m, n)
        x, incx = vec(n if t == "N" else m)
        y, incy = vec(m if t == "N" else n)
        return dict(a=a, x=x, y=y, m=m, n=n, alpha=scalar(False), beta=scalar(True), trans=t,
                    lda=lda, incx=incx, incy=incy)
    n = size(1, 40)
    x, incx = vec(n)
    if call in ("cublas.nrm2", "cublas.asum", "cublas.iamax", "cublas.iamin"):
        return dict(x=x, n=n, incx=incx)
    if call == "cublas.scal":
        return dict(x=x, alpha=scalar(False), n=n, incx=incx)
    y, incy = vec(n)
    if call == "cublas.axpy":
        return dict(x=x, y=y, alpha=scalar(False), n=n, incx=incx, incy=incy)
    if call == "cublas.dot":
        return dict(x=x, y=y, n=n, incx=incx, incy=incy, conjugate=bool(cplx and
                                                                       rng.random() < 0.5))
    return dict(x=x, y=y, n=n, incx=incx, incy=incy)  # copy, swap


def is_buffer_arg(name: str) -> bool:
    return name in _BUFFER_ARGS
