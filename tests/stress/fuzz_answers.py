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
import numpy as np
import oracles
import scipy.sparse as sp
from scipy import stats

import gpumsg
from gpumsg.libs.nvrtc import sim_kernel
from tests.tolerance import bound

__all__ = ["VALID", "NAMESPACE_CHECKS", "check_namespace_call"]

WAIT_S = 20.0
_REAL = {"c64": "f32", "c128": "f64", "f32": "f32", "f64": "f64"}


def _dt(rng: np.random.Generator, names: tuple[str, ...] = ("f32", "f64", "c64", "c128")
        ) -> str:
    return str(rng.choice(names))


def _rand(rng: np.random.Generator, shape: Any, dt: str) -> np.ndarray:
    x = rng.standard_normal(shape) + 0.1
    if dt in ("c64", "c128"):
        x = x + 1j * rng.standard_normal(shape)
    return np.asarray(x).astype(gpumsg.as_dtype(dt))


def _get(dev: Any, out: Any) -> Any:
    """A future's or buffer's contents on the host (tuples element by element)."""
    if hasattr(out, "result") and not isinstance(out, gpumsg.GpuBuffer):
        out = out.result(WAIT_S)
    if isinstance(out, tuple):
        return type(out)(*(_get(dev, o) for o in out)) if hasattr(out, "_fields") else \
            tuple(_get(dev, o) for o in out)
    if isinstance(out, gpumsg.GpuBuffer):
        return dev.copy_to_host(out).result(WAIT_S)
    return out


def _close(what: str, got: Any, ref: Any, dt: str, n: int = 1, cond: float = 1.0,
           c: float = 16.0) -> None:
    got, ref = np.asarray(got), np.asarray(ref)
    if got.shape != ref.shape:
        raise oracles.Mismatch(f"{what}: shape {got.shape}, expected {ref.shape}")
    wide = np.complex128 if np.iscomplexobj(got) or np.iscomplexobj(ref) else np.float64
    g, r = got.astype(wide), ref.astype(wide)
    if not np.isfinite(g).all():
        raise oracles.Mismatch(f"{what}: non-finite values in the answer")
    den = float(np.linalg.norm(r)) or 1.0
    err = float(np.linalg.norm(g - r)) / den
    tol = bound(_REAL.get(dt, dt), n, c=c, cond=cond)
    if not err <= tol:
        raise oracles.Mismatch(f"{what}: relative error {err:.3g} > {tol:.3g} ({dt}, n={n})")


def _exact(what: str, got: np.ndarray, ref: np.ndarray) -> None:
    if got.shape != ref.shape or not np.array_equal(got, ref):
        raise oracles.Mismatch(f"{what}: differs from the reference (exact)")


def _orthonormal(what: str, q: np.ndarray, dt: str) -> None:
    k = q.shape[-1]
    err = float(np.linalg.norm(q.conj().T.astype(np.complex128) @ q - np.eye(k)))
    tol = bound(_REAL[dt], max(q.shape), c=16) * max(k, 1)
    if not err <= tol:
        raise oracles.Mismatch(f"{what}: columns not orthonormal ({err:.3g} > {tol:.3g})")


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


def _w(x: np.ndarray) -> np.ndarray:
    return np.asarray(x).astype(np.complex128)


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
            _close("linalg.svd U S Vh", (u[:, :k] * s) @ vh[:k], a, dt, n=max(m, n))
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


# -- cuRAND: the distribution at the sample size -------------------------------------------------
#: a correct generator fails one check in this many cases (KS and moment tests at p = 1e-6)
_P_FALSE = 1e-6


def _random(dev: Any, rng: np.random.Generator) -> int:
    gen = dev.random.default_rng(int(rng.integers(0, 2**31)))
    n = int(rng.integers(2000, 20000))
    which = str(rng.choice(["random", "uniform", "standard_normal", "normal", "lognormal",
                            "poisson"]))
    dt = str(rng.choice(["f32", "f64"]))
    dtype = gpumsg.as_dtype(dt)
    if which == "poisson":
        lam = float(rng.uniform(0.5, 50))
        x = _get(dev, gen.poisson(lam, size=n))
        mean_z = (x.mean() - lam) / math.sqrt(lam / n)
        if x.min() < 0 or abs(mean_z) > 5.3:
            raise oracles.Mismatch(f"random.poisson({lam:.3g}): mean {x.mean():.4g} "
                                   f"({mean_z:.2f} standard errors)")
        disp = x.var() / lam
        if abs(disp - 1) > 6 * math.sqrt(2 / n) + 0.02:
            raise oracles.Mismatch(f"random.poisson({lam:.3g}): variance / mean {disp:.4f}")
        return 1
    if which == "random":
        x, dist = _get(dev, gen.random(size=n, dtype=dtype)), stats.uniform()
    elif which == "uniform":
        lo = float(rng.uniform(-5, 5))
        hi = lo + float(rng.uniform(0.1, 10))
        x, dist = _get(dev, gen.uniform(lo, hi, size=n, dtype=dtype)), \
            stats.uniform(lo, hi - lo)
        if x.min() < lo or x.max() > hi:
            raise oracles.Mismatch(f"random.uniform({lo}, {hi}): values outside the range")
    elif which == "standard_normal":
        x, dist = _get(dev, gen.standard_normal(size=n, dtype=dtype)), stats.norm()
    elif which == "normal":
        loc, scale = float(rng.uniform(-5, 5)), float(rng.uniform(0.1, 4))
        x, dist = _get(dev, gen.normal(loc, scale, size=n, dtype=dtype)), \
            stats.norm(loc, scale)
    else:
        mean, sigma = float(rng.uniform(-1, 1)), float(rng.uniform(0.1, 1.5))
        x, dist = _get(dev, gen.lognormal(mean, sigma, size=n, dtype=dtype)), \
            stats.lognorm(sigma, scale=math.exp(mean))
    if x.shape != (n,) or x.dtype != dtype or not np.isfinite(x).all():
        raise oracles.Mismatch(f"random.{which}: {x.shape} {x.dtype}, expected ({n},) {dt}")
    p = stats.kstest(x.astype(np.float64), dist.cdf).pvalue
    if p < _P_FALSE:
        raise oracles.Mismatch(f"random.{which}({dt}, n={n}): KS p-value {p:.3g}")
    return 1


# -- NVRTC --------------------------------------------------------------------------------------
_AXPBY = r"""
template <typename T>
__device__ void axpby(T a, const T* x, long incx, T b, T* y, long incy, long n) {
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n;
         i += (long)gridDim.x * blockDim.x)
        y[i * incy] = a * x[i * incx] + b * y[i * incy];
}
extern "C" __global__ void fuzz_axpby_f32(float a, const float* x, long incx, float b,
                                          float* y, long incy, long n) {
    axpby(a, x, incx, b, y, incy, n);
}
extern "C" __global__ void fuzz_axpby_f64(double a, const double* x, long incx, double b,
                                          double* y, long incy, long n) {
    axpby(a, x, incx, b, y, incy, n);
}
"""


def _axpby_twin(launch: Any, a: Any, x: np.ndarray, incx: int, b: Any, y: np.ndarray,
                incy: int, n: int) -> None:
    y[:n * incy:incy] = a * x[:n * incx:incx] + b * y[:n * incy:incy]


sim_kernel("fuzz_axpby_f32")(_axpby_twin)
sim_kernel("fuzz_axpby_f64")(_axpby_twin)


def _nvrtc(dev: Any, rng: np.random.Generator) -> int:
    dt = str(rng.choice(["f32", "f64"]))
    n = int(rng.integers(1, 3000))
    incx, incy = int(rng.integers(1, 4)), int(rng.integers(1, 4))
    x, y = _rand(rng, (n - 1) * incx + 1, dt), _rand(rng, (n - 1) * incy + 1, dt)
    a, b = float(rng.uniform(-2, 2)), float(rng.uniform(-2, 2))
    kernel = dev.nvrtc.compile(_AXPBY, f"fuzz_axpby_{dt}").result(WAIT_S)
    xb, yb = dev.to_device(x), dev.to_device(y)
    grid, block = int(rng.integers(1, 9)), int(rng.choice([32, 64, 128, 256]))
    dev.nvrtc.launch(kernel, grid=(grid,), block=(block,), args=(a, xb, incx, b, yb, incy, n),
                     reads=(xb, yb), writes=(yb,)).result(WAIT_S)
    ref = _w(y).real.copy()
    ref[::incy] = a * x[::incx].astype(np.float64) + b * y[::incy].astype(np.float64)
    _close(f"nvrtc.launch axpby {dt} grid {grid} block {block}",
           dev.copy_to_host(yb).result(WAIT_S), ref, dt, n=2)
    return 1


# -- cuDNN --------------------------------------------------------------------------------------
_ACTS = {"relu": lambda x, c: np.maximum(x, 0), "sigmoid": lambda x, c: 1 / (1 + np.exp(-x)),
         "tanh": lambda x, c: np.tanh(x), "elu": lambda x, c: np.where(x > 0, x, c * np.expm1(x))}


def _cudnn(dev: Any, rng: np.random.Generator) -> int:
    dt = "f32"  # cuDNN's types: f32, f16, bf16 (the reference rounds to f32 only)
    shape = (int(rng.integers(1, 4)), int(rng.integers(1, 6)), int(rng.integers(1, 6)),
             int(rng.integers(1, 6)))
    x = np.ascontiguousarray(_rand(rng, shape, dt) * 2)
    x64 = x.astype(np.float64)
    which = str(rng.choice(["softmax", "activation", "layer_norm", "conv2d"]))
    if which == "softmax":
        log = bool(rng.random() < 0.5)
        mode = str(rng.choice(["channel", "instance"]))
        axes = (1,) if mode == "channel" else (1, 2, 3)
        shifted = x64 - x64.max(axis=axes, keepdims=True)
        lse = np.log(np.exp(shifted).sum(axis=axes, keepdims=True))
        ref = shifted - lse if log else np.exp(shifted - lse)
        got = _get(dev, dev.nn.softmax(dev.to_device(x), mode=mode, log=log))
        _close(f"nn.softmax({mode}, log={log})", got, ref, dt, n=x.size)
    elif which == "activation":
        act = str(rng.choice(list(_ACTS)))
        coef = 1.0 if act == "elu" else None
        got = _get(dev, dev.cudnn.activation(dev.to_device(x), activation=act, act_coef=coef))
        _close(f"cudnn.activation({act})", got, _ACTS[act](x64, coef), dt, n=4)
    elif which == "layer_norm":
        x = x.astype(np.float32)
        x64 = x.astype(np.float64)
        nd = int(rng.integers(1, 4))
        axes = tuple(range(4 - nd, 4))
        norm_shape = shape[4 - nd:]
        gamma = _rand(rng, math.prod(norm_shape), "f32")
        beta = _rand(rng, math.prod(norm_shape), "f32")
        eps = 1e-5
        mu = x64.mean(axis=axes, keepdims=True)
        inv = 1 / np.sqrt(x64.var(axis=axes, keepdims=True) + eps)
        ref = (x64 - mu) * inv * gamma.reshape(norm_shape) + beta.reshape(norm_shape)
        y, mean, invstd = _get(dev, dev.nn.layer_norm(
            dev.to_device(x), dev.to_device(gamma), dev.to_device(beta), normalized_ndim=nd,
            eps=eps))
        _close(f"nn.layer_norm(ndim={nd})", y, ref, "f32", n=math.prod(norm_shape))
        _close("nn.layer_norm mean", np.ravel(mean), mu.ravel(), "f32",
               n=math.prod(norm_shape))
        _close("nn.layer_norm invstd", np.ravel(invstd), inv.ravel(), "f32",
               n=math.prod(norm_shape))
    else:
        cin, cout = shape[1], int(rng.integers(1, 5))
        kh, kw = int(rng.integers(1, 4)), int(rng.integers(1, 4))
        pad = (int(rng.integers(0, 2)), int(rng.integers(0, 2)))
        stride = (int(rng.integers(1, 3)), int(rng.integers(1, 3)))
        xs = np.ascontiguousarray(_rand(rng, (shape[0], cin, shape[2] + 3, shape[3] + 3), dt))
        w = np.ascontiguousarray(_rand(rng, (cout, cin, kh, kw), dt))
        got = _get(dev, dev.nn.conv2d(dev.to_device(xs), dev.to_device(w), stride=stride,
                                      padding=pad))
        xp_ = np.pad(xs.astype(np.float64), ((0, 0), (0, 0), (pad[0],) * 2, (pad[1],) * 2))
        ho = (xp_.shape[2] - kh) // stride[0] + 1
        wo = (xp_.shape[3] - kw) // stride[1] + 1
        ref = np.zeros((shape[0], cout, ho, wo))
        for i in range(kh):
            for j in range(kw):
                patch = xp_[:, :, i:i + stride[0] * ho:stride[0], j:j + stride[1] * wo:stride[1]]
                ref += np.einsum("nchw,oc->nohw", patch, w[:, :, i, j].astype(np.float64))
        _close(f"nn.conv2d(stride={stride}, padding={pad})", got, ref, dt, n=cin * kh * kw)
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
    dt = {"float32": "f32", "float64": "f64", "complex64": "c64", "complex128": "c128"}.get(
        str(np.asarray(got).dtype), "f32")
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
    "random": _random, "nvrtc": _nvrtc, "cudnn": _cudnn, **fuzz_arrays.ARRAY_VALID}
