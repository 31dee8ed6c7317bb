"""Valid calls beyond BLAS, each with a NumPy/SciPy reference: copies and fills, cuFFT, cuSOLVER
(factorizations checked by reconstruction and orthonormality), cuSPARSE, cuRAND (the
distribution at the sample size), NVRTC launches, cuDNN where a reference is cheap, and the
array layer (element-wise, reductions, manipulation, indexing, sorting).

Each entry of :data:`VALID` draws random arguments inside the call's contract from ``rng`` alone
(so one seed gives the same calls on every backend), makes the call on ``dev``, reads the answer
back and raises ``oracles.Mismatch`` when it is wrong; it returns how many answers it compared.
Any other exception is a valid call that failed.

:func:`check_namespace_call` checks the answers of the fuzz's own accepted calls to ``dev.fft``
and ``dev.linalg`` against the same references.

Tolerances come from tests/tolerance.py: the unit roundoff of the precision, the problem size
and, for solves, the condition number of the (random, well-conditioned) input."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import fuzz_arrays
import fuzz_rand_nn
import numpy as np
import scipy.sparse as sp
from fuzz_checks import _REAL, WAIT_S, _close, _dt, _exact, _get, _orthonormal, _rand, _w

import gpumsg

__all__ = ["VALID", "NAMESPACE_CHECKS", "check_namespace_call"]

# -- copies and fills ---------------------------------------------------------------------------
def _copy(dev: Any, rng: np.random.Generator) -> int:
    dt = _dt(rng, ("f32", "f64", "c64", "c128", "i32", "i8", "f16", "u8"))
    shape = tuple(int(d) for d in rng.integers(1, 9, size=int(rng.integers(1, 4))))
    order = str(rng.choice(["C", "F"]))
    src_h = np.asarray(_rand(rng, shape, "f64") * 20, order=order).astype(
        gpumsg.as_dtype(dt), order=order)
    src, dst = dev.to_device(src_h, order=order), dev.alloc(shape, dt, order=order)
    dev.copy(dst, src).result(WAIT_S)
    _exact("copy", dev.copy_to_host(dst).result(WAIT_S), src_h)
    return 1


def _copy_bytes(dev: Any, rng: np.random.Generator) -> int:
    ns, nd = int(rng.integers(1, 200)), int(rng.integers(1, 200))
    src_h = rng.integers(0, 256, ns, dtype=np.uint8)
    dst_h = rng.integers(0, 256, nd, dtype=np.uint8)
    so = int(rng.integers(0, ns))
    do = int(rng.integers(0, nd))
    nb = int(rng.integers(0, min(ns - so, nd - do) + 1))
    src, dst = dev.to_device(src_h), dev.to_device(dst_h)
    dev.copy_bytes(dst, src, nbytes=nb, dst_offset=do, src_offset=so).result(WAIT_S)
    ref = dst_h.copy()
    ref[do:do + nb] = src_h[so:so + nb]
    _exact("copy_bytes", dev.copy_to_host(dst).result(WAIT_S), ref)
    return 1


def _memset(dev: Any, rng: np.random.Generator) -> int:
    width = int(rng.choice([1, 2, 4]))
    words = int(rng.integers(1, 64))
    host = rng.integers(0, 256, words * width, dtype=np.uint8)
    off = int(rng.integers(0, words)) * width
    nb = int(rng.integers(0, words - off // width + 1)) * width
    value = int(rng.integers(0, 1 << (8 * width)))
    buf = dev.to_device(host)
    dev.memset(buf, value, offset=off, nbytes=nb, width=width).result(WAIT_S)
    ref = host.copy()
    pattern = np.array([value], dtype=f"<u{width}").view(np.uint8)
    ref[off:off + nb] = np.tile(pattern, nb // width)
    _exact("memset", dev.copy_to_host(buf).result(WAIT_S), ref)
    return 1


def _round_trip(dev: Any, rng: np.random.Generator) -> int:
    dt = _dt(rng, ("f32", "f64", "c64", "i64", "i16", "u8", "bf16", "f16"))
    shape = tuple(int(d) for d in rng.integers(1, 7, size=int(rng.integers(1, 4))))
    order = str(rng.choice(["C", "F"]))
    host = np.asarray(_rand(rng, shape, "f64") * 9, order=order).astype(
        gpumsg.as_dtype(dt), order=order)
    buf = dev.to_device(host, order=order)
    _exact("to_device/copy_to_host", dev.copy_to_host(buf).result(WAIT_S), host)
    fresh = np.asarray(_rand(rng, shape, "f64") * 9).astype(gpumsg.as_dtype(dt))
    dev.copy_from_host(buf, np.asarray(fresh, order=order)).result(WAIT_S)
    _exact("copy_from_host", dev.copy_to_host(buf).result(WAIT_S), fresh)
    return 2


# -- cuFFT through dev.fft ----------------------------------------------------------------------
_NORMS = [None, "backward", "ortho", "forward"]


def _fft(dev: Any, rng: np.random.Generator) -> int:
    real = bool(rng.random() < 0.5)
    dt = _dt(rng, ("f32", "f64") if real else ("c64", "c128"))
    nd = int(rng.integers(1, 4))
    shape = tuple(int(d) for d in rng.integers(2, 9, size=nd))
    norm = _NORMS[int(rng.integers(0, 4))]
    family = str(rng.choice(["1", "2", "n"])) if nd >= 2 else "1"
    x = _rand(rng, shape, dt)
    length = shape[-1] if family == "1" else math.prod(shape[-2:]) if family == "2" else \
        math.prod(shape)
    suffix = "" if family == "1" else family
    kw: dict[str, Any] = {"norm": norm}
    if real:
        fwd, inv = f"rfft{suffix}", f"irfft{suffix}"
    else:
        fwd, inv = f"fft{suffix}", f"ifft{suffix}"
    out = _get(dev, getattr(dev.fft, fwd)(dev.to_device(x), **kw))
    ref = getattr(np.fft, fwd)(x.astype(np.complex128 if not real else np.float64), **kw)
    _close(f"fft.{fwd} {shape} norm={norm}", out, ref, dt, n=length, c=4)
    # the inverse of that spectrum (Hermitian where real): the signal back
    spec = ref.astype(np.complex64 if dt in ("f32", "c64") else np.complex128)
    if real:
        last = {"s": shape[-2:] if family == "2" else shape} if family != "1" else \
            {"n": shape[-1]}
        back = _get(dev, getattr(dev.fft, inv)(dev.to_device(spec), norm=norm, **last))
        ref_back = getattr(np.fft, inv)(spec.astype(np.complex128), norm=norm, **last)
    else:
        back = _get(dev, getattr(dev.fft, inv)(dev.to_device(spec), norm=norm))
        ref_back = getattr(np.fft, inv)(spec.astype(np.complex128), norm=norm)
    _close(f"fft.{inv} {shape} norm={norm}", back, ref_back, dt, n=length, c=4)
    return 2


# -- cuSOLVER through dev.linalg and raw ---------------------------------------------------------
def _well_conditioned(rng: np.random.Generator, n: int, dt: str) -> np.ndarray:
    a = _rand(rng, (n, n), dt).astype(np.complex128 if dt[0] == "c" else np.float64)
    return (a + 2 * n * np.eye(n)).astype(gpumsg.as_dtype(dt))


def _spd(rng: np.random.Generator, n: int, dt: str) -> np.ndarray:
    b = _rand(rng, (n, n), dt).astype(np.complex128)
    a = b @ b.conj().T + n * np.eye(n)
    return (a if dt[0] == "c" else a.real).astype(gpumsg.as_dtype(dt))



def _linalg(dev: Any, rng: np.random.Generator) -> int:
    dt = _dt(rng)
    n = int(rng.integers(1, 13))
    which = str(rng.choice(["solve", "cholesky", "qr", "svd", "eigh", "inv", "det",
                            "slogdet", "lstsq"]))
    if which == "solve":
        a = _well_conditioned(rng, n, dt)
        b = _rand(rng, (n,) if rng.random() < 0.5 else (n, int(rng.integers(1, 5))), dt)
        x = _get(dev, dev.linalg.solve(dev.to_device(a), dev.to_device(b),
                                       pivot=bool(rng.random() < 0.7)))
        _close("linalg.solve residual", _w(a) @ _w(x), b, dt, n=n, c=16)
    elif which == "cholesky":
        a = _spd(rng, n, dt)
        lo = _w(_get(dev, dev.linalg.cholesky(dev.to_device(a))))
        _exact("linalg.cholesky upper part", np.triu(lo, 1), np.zeros_like(lo))
        _close("linalg.cholesky L L^H", lo @ lo.conj().T, a, dt, n=n)
    elif which == "qr":
        m = int(rng.integers(1, 13))
        a = _rand(rng, (m, n), dt)
        mode = str(rng.choice(["reduced", "complete", "r"]))
        out = _get(dev, dev.linalg.qr(dev.to_device(a), mode=mode))
        ref_r = np.linalg.qr(_w(a), mode=mode if mode != "r" else "r")
        if mode == "r":
            _close("linalg.qr R (|.|)", np.abs(_w(out)), np.abs(ref_r), dt, n=m)
        else:
            q, r = (_w(p) for p in out)
            _exact("linalg.qr R lower part", np.tril(r, -1), np.zeros_like(r))
            _orthonormal("linalg.qr Q", q, dt)
            _close("linalg.qr Q R", q @ r, a, dt, n=m)
    elif which == "svd":
        m = int(rng.integers(1, 13))
        a = _rand(rng, (m, n), dt)
        full, uv = bool(rng.random() < 0.5), bool(rng.random() < 0.8)
        method = str(rng.choice(["gesvdj", "gesvd"]))
        out = _get(dev, dev.linalg.svd(dev.to_device(a), full_matrices=full, compute_uv=uv,
                                       method=method))
        s_ref = np.linalg.svd(_w(a), compute_uv=False)
        s = np.asarray(out.S if uv else out)
        _close(f"linalg.svd({method}) singular values", s, s_ref, dt, n=max(m, n))
        if uv:
            u, vh = _w(out.U), _w(out.Vh)
            k = min(m, n)
            _orthonormal("linalg.svd U", u, dt)
            _orthonormal("linalg.svd V", vh.conj().T, dt)
            # the backward error of an SVD grows like the orthonormality of its factors (the
            # Jacobi method stops at a tolerance): the same k-fold margin as _orthonormal's
            _close("linalg.svd U S Vh", (u[:, :k] * s) @ vh[:k], a, dt, n=max(m, n),
                   c=16.0 * max(k, 1))
    elif which == "eigh":
        a = _rand(rng, (n, n), dt)
        uplo = str(rng.choice(["L", "U"]))
        method = str(rng.choice(["syevd", "syevj"]))
        w, v = (_w(p) for p in _get(dev, dev.linalg.eigh(dev.to_device(a), uplo=uplo,
                                                         method=method)))
        tri = np.tril(_w(a)) if uplo == "L" else np.triu(_w(a))
        herm = tri + np.tril(tri, -1).conj().T if uplo == "L" else tri + np.triu(tri, 1).conj().T
        herm = herm - np.diag(np.diag(herm).imag * 1j)
        _close(f"linalg.eigh({method}) eigenvalues", w, np.linalg.eigvalsh(herm), dt, n=n)
        _orthonormal("linalg.eigh vectors", v, dt)
        _close("linalg.eigh A V = V w", herm @ v, v * w.real, dt, n=n)
    elif which in ("inv", "det", "slogdet"):
        a = _well_conditioned(rng, n, dt)
        cond = float(np.linalg.cond(_w(a)))
        out = _get(dev, getattr(dev.linalg, which)(dev.to_device(a)))
        if which == "inv":
            _close("linalg.inv A X", _w(a) @ _w(out), np.eye(n), dt, n=n, cond=cond)
        elif which == "det":
            _close("linalg.det", out, np.linalg.det(_w(a)), dt, n=n, cond=cond)
        else:
            sign, logabs = out
            rs, rl = np.linalg.slogdet(_w(a))
            _close("linalg.slogdet sign", sign, rs, dt, n=n, cond=cond)
            _close("linalg.slogdet log|det|", logabs, rl, dt, n=n, cond=cond)
    else:
        m = n + int(rng.integers(0, 6))
        a = _rand(rng, (m, n), dt)
        b = _rand(rng, (m,) if rng.random() < 0.5 else (m, 2), dt)
        x = _get(dev, dev.linalg.lstsq(dev.to_device(a), dev.to_device(b)))
        ref = np.linalg.lstsq(_w(a), _w(b), rcond=None)[0]
        cond = float(np.linalg.cond(_w(a)))
        _close("linalg.lstsq", x, ref, dt, n=m, cond=cond * cond)
    return 1


def _cusolver(dev: Any, rng: np.random.Generator) -> int:
    """Raw cuSOLVER on column-major buffers: potrf, getrf (pivots applied back) and syevd."""
    dt = _dt(rng)
    n = int(rng.integers(1, 11))
    lda = n + int(rng.integers(0, 3))
    which = str(rng.choice(["potrf", "getrf", "syevd"]))
    pad = np.zeros((lda, n), gpumsg.as_dtype(dt), order="F")
    if which == "potrf":
        a = _spd(rng, n, dt)
        uplo = str(rng.choice(["L", "U"]))
        pad[:n] = a
        buf = dev.to_device(pad, order="F")
        dev.cusolver.potrf(buf, n, uplo=uplo, lda=lda).result(WAIT_S)
        f = _w(dev.copy_to_host(buf).result(WAIT_S))[:n]
        t = np.tril(f) if uplo == "L" else np.triu(f)
        rec = t @ t.conj().T if uplo == "L" else t.conj().T @ t
        _close(f"cusolver.potrf({uplo}) reconstruction", rec, a, dt, n=n)
    elif which == "getrf":
        a = _well_conditioned(rng, n, dt) if rng.random() < 0.5 else _rand(rng, (n, n), dt)
        pad[:n] = a
        buf = dev.to_device(pad, order="F")
        ipiv = dev.alloc((n,), "i64")
        dev.cusolver.getrf(buf, n, n, ipiv=ipiv, lda=lda).result(WAIT_S)
        f = _w(dev.copy_to_host(buf).result(WAIT_S))[:n]
        piv = dev.copy_to_host(ipiv).result(WAIT_S)
        lo, up = np.tril(f, -1) + np.eye(n), np.triu(f)
        pa = _w(a).copy()
        for i, p in enumerate(piv):  # LAPACK's row interchanges, 1-based, in order
            pa[[i, int(p) - 1]] = pa[[int(p) - 1, i]]
        _close("cusolver.getrf P A = L U", lo @ up, pa, dt, n=n,
               cond=float(np.linalg.norm(np.abs(lo) @ np.abs(up)) / np.linalg.norm(a)))
    else:
        a = _rand(rng, (n, n), dt)
        herm = _w(a) + _w(a).conj().T
        if dt[0] != "c":
            herm = herm.real
        pad[:n] = herm
        buf = dev.to_device(pad, order="F")
        w = dev.alloc((n,), _REAL[dt])
        dev.cusolver.syevd(buf, w, n, uplo=str(rng.choice(["L", "U"])), lda=lda).result(WAIT_S)
        wv = dev.copy_to_host(w).result(WAIT_S)
        v = _w(dev.copy_to_host(buf).result(WAIT_S))[:n]
        _close("cusolver.syevd eigenvalues", wv, np.linalg.eigvalsh(herm), dt, n=n)
        _orthonormal("cusolver.syevd vectors", v, dt)
        _close("cusolver.syevd A V = V w", herm @ v, v * wv, dt, n=n)
    return 1


# -- cuSPARSE -----------------------------------------------------------------------------------
def _sparse(dev: Any, rng: np.random.Generator) -> int:
    dt = _dt(rng)
    m, n = int(rng.integers(1, 20)), int(rng.integers(1, 20))
    which = str(rng.choice(["spmv", "spmm", "to_dense", "spsv"]))
    fmt = str(rng.choice(["csr", "csc", "coo"]))
    if which == "spsv":
        n = m
        fmt = "csr"
    host = sp.random(m, n, density=0.3, format="csr", random_state=np.random.RandomState(
        int(rng.integers(0, 2**31))), dtype=np.float64)
    host.data = _rand(rng, host.nnz, dt).astype(np.complex128 if dt[0] == "c" else
                                                  np.float64)
    ops = ["N", "T", "C"] if fmt != "coo" else ["N", "T"]
    op = str(rng.choice(ops))
    if which == "spsv":
        uplo = str(rng.choice(["L", "U"]))
        tri = sp.tril(host) if uplo == "L" else sp.triu(host)
        host = (tri + sp.eye(m) * (2.0 + m)).tocsr()
    mat = getattr(dev.cusparse, fmt)(host.astype(gpumsg.as_dtype(dt)))
    dense = host.toarray()
    opa = dense if op == "N" else dense.T if op == "T" else dense.T.conj()
    alpha = complex(rng.uniform(-2, 2), rng.uniform(-1, 1)) if dt[0] == "c" else \
        float(rng.uniform(-2, 2))
    if which == "to_dense":
        _close(f"cusparse.to_dense({fmt})", _get(dev, dev.cusparse.to_dense(mat)), dense, dt)
    elif which == "spmv":
        x = _rand(rng, opa.shape[1], dt)
        y = _rand(rng, opa.shape[0], dt)
        beta = 0.0 if rng.random() < 0.3 else float(rng.uniform(-1, 1))
        yb = dev.to_device(y)
        dev.cusparse.spmv(mat, dev.to_device(x), yb, alpha=alpha, beta=beta,
                          op=op).result(WAIT_S)
        _close(f"cusparse.spmv({fmt}, op={op})", dev.copy_to_host(yb).result(WAIT_S),
               alpha * (opa @ _w(x)) + beta * _w(y), dt, n=n + 1)
    elif which == "spmm":
        k = int(rng.integers(1, 6))
        b = np.ascontiguousarray(_rand(rng, (opa.shape[1], k), dt))
        out = _get(dev, dev.cusparse.spmm(mat, dev.to_device(b), alpha=alpha, op=op))
        _close(f"cusparse.spmm({fmt}, op={op})", out, alpha * (opa @ _w(b)), dt, n=n)
    else:
        x = _rand(rng, m, dt)
        y = dev.alloc((m,), dt)
        dev.cusparse.spsv(mat, dev.to_device(x), y, alpha=alpha, op=op, uplo=uplo,
                          diag="N").result(WAIT_S)
        got = _w(dev.copy_to_host(y).result(WAIT_S))
        _close(f"cusparse.spsv(op={op}, uplo={uplo}) residual", opa @ got, alpha * _w(x), dt,
               n=m)
    return 1


# -- the fuzz's own accepted calls to dev.fft and dev.linalg -------------------------------------
NAMESPACE_CHECKS = {f"fft.{f}" for f in ("fft", "ifft", "rfft", "irfft", "fft2", "ifft2",
                                         "rfft2", "irfft2", "fftn", "ifftn", "rfftn", "irfftn")}
NAMESPACE_CHECKS |= {"linalg.matmul", "linalg.solve", "linalg.inv", "linalg.det"}


def check_namespace_call(name: str, keywords: dict[str, Any], host: Callable[[Any], Any],
                         read: Callable[[Any], np.ndarray], answer: Any) -> bool:
    """Compare an accepted ``dev.<name>(**keywords)`` with NumPy's: False when an input is not
    a buffer of known contents (nothing compared), True when it matched; raises
    ``oracles.Mismatch``. ``host(v)`` is the host array a buffer was made from (None if
    unknown), ``read(buf)`` a buffer's contents now."""
    args = {k: host(v) for k, v in keywords.items()}
    if any(v is None for v in args.values()):
        return False
    a = args.get("x", args.get("a"))
    if not isinstance(a, np.ndarray) or a.dtype.kind not in "fc":
        return False
    got = read(answer) if isinstance(answer, gpumsg.GpuBuffer) else answer
    # the precision the work was done in: the buffer's (a scalar answer is a Python number)
    names = {"float32": "f32", "float64": "f64", "complex64": "c64", "complex128": "c128",
             "float16": "f32"}
    dt = names.get(str(np.asarray(got).dtype) if isinstance(got, np.ndarray) else
                   str(a.dtype), "f32")
    if name.startswith("fft."):
        kw = {k: v for k, v in args.items() if k != "x"}
        with np.errstate(all="ignore"):
            try:
                ref = getattr(np.fft, name[4:])(_w(a) if "c" in a.dtype.kind else
                                                a.astype(np.float64), **kw)
            except Exception:  # noqa: BLE001 - NumPy refuses: nothing to compare
                return False
        _close(name, got, ref, dt, n=max(np.size(ref), 2), c=4)
        return True
    b = args.get("b")
    a64 = _w(a)
    if name == "linalg.matmul":
        if not isinstance(b, np.ndarray):
            return False
        _close(name, got, a64 @ _w(b), dt, n=a.shape[-1] + 1)
        return True
    if a.ndim != 2 or a.shape[0] != a.shape[1]:
        return False
    cond = float(np.linalg.cond(a64))
    if not math.isfinite(cond) or cond > 1e4:
        return False
    if name == "linalg.solve":
        if not isinstance(b, np.ndarray):
            return False
        _close(name + " residual", a64 @ _w(got), b, dt, n=a.shape[0], cond=cond)
    elif name == "linalg.inv":
        _close(name, a64 @ _w(got), np.eye(a.shape[0]), dt, n=a.shape[0], cond=cond)
    else:
        _close(name, got, np.linalg.det(a64), dt, n=a.shape[0], cond=cond)
    return True


#: valid call name -> fn(dev, rng) -> answers compared
VALID: dict[str, Callable[[Any, np.random.Generator], int]] = {
    "copy": _copy, "copy_bytes": _copy_bytes, "memset": _memset, "round_trip": _round_trip,
    "fft": _fft, "linalg": _linalg, "cusolver": _cusolver, "cusparse": _sparse,
    **fuzz_rand_nn.RAND_NN_VALID, **fuzz_arrays.ARRAY_VALID}
