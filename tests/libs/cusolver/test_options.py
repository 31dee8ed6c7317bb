"""Every option value of the raw cuSOLVER calls (column-major) against float64/complex128
references, with bounds from the unit roundoff, the order and the condition number
(tests/tolerance.py): getrs and batched getrs with each trans and with/without pivots, potrs
(single and batched) with each uplo, ormqr with each side and trans against the explicit Q,
orgqr, the symmetric eigensolvers (syevd, syevj, syevjBatched, sygvd with each itype) and the
SVDs (gesvd with each jobu/jobvt, gesvdj econ or not, gesvdjBatched). Every factorization is
checked for what defines it: orthonormal factors, reconstruction of the input, eigen/singular
values against LAPACK's."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import scipy.linalg as sla

import gpumsg
from tests.tolerance import assert_orthonormal, assert_rel, bound, rel_err

DTYPES = ("f32", "f64", "c64", "c128")
REAL = {"f32": "f32", "f64": "f64", "c64": "f32", "c128": "f64"}


def rand(rng, shape, dtype: str) -> np.ndarray:
    x = rng.standard_normal(shape) + 0.1
    if dtype in ("c64", "c128"):
        x = x + 1j * rng.standard_normal(shape)
    return np.asfortranarray(x.astype(gpumsg.as_dtype(dtype)))


def w(x) -> np.ndarray:
    x = np.asarray(x)
    return x.astype(np.complex128 if np.iscomplexobj(x) else np.float64)


def opm(x, trans: str) -> np.ndarray:
    x = w(x)
    return x if trans == "N" else x.T if trans == "T" else x.T.conj()


def host(dev, buf) -> np.ndarray:
    return dev.copy_to_host(buf).result(timeout=60)


def general(rng, n: int, dtype: str) -> np.ndarray:
    """Well conditioned, diagonally dominant enough for LU without pivoting, and not
    symmetric (so that N, T and C give three different systems)."""
    a = w(rand(rng, (n, n), dtype)) + 2 * np.sqrt(n) * np.eye(n)
    return np.asfortranarray(a.astype(gpumsg.as_dtype(dtype)))


def hpd(rng, n: int, dtype: str) -> np.ndarray:
    m = w(rand(rng, (n, n), dtype))
    return np.asfortranarray((m @ m.conj().T / n + np.eye(n)).astype(gpumsg.as_dtype(dtype)))


def hermitian_of(a, uplo: str) -> np.ndarray:
    """The Hermitian matrix LAPACK reads from the ``uplo`` triangle of ``a`` (real diagonal)."""
    t = np.tril(w(a), -1) if uplo == "L" else np.triu(w(a), 1)
    return t + t.conj().T + np.diag(np.diag(w(a)).real)


def trans_for(dtype: str) -> tuple[str, ...]:
    return ("N", "T") if dtype in ("f32", "f64") else ("N", "C")


# -- LU -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("pivot", (True, False), ids=("pivot", "nopivot"))
@pytest.mark.parametrize("trans", ("N", "T", "C"))
@pytest.mark.parametrize("dtype", DTYPES)
def test_getrs_every_trans(dev, rng, dtype: str, trans: str, pivot: bool) -> None:
    n, nrhs = 12, 3
    a, b = general(rng, n, dtype), rand(rng, (n, nrhs), dtype)
    da, db = dev.to_device(a), dev.to_device(b)
    ipiv = dev.alloc((n,), np.int64, order="F") if pivot else None
    dev.cusolver.getrf(da, n, n, ipiv).result(timeout=60)
    lu = host(dev, da)
    if pivot:  # the factors reconstruct P A
        perm = host(dev, ipiv) - 1
        pa = w(a).copy()
        for i, p in enumerate(perm):
            pa[[i, p]] = pa[[p, i]]
    else:
        pa = w(a)
    low = np.tril(w(lu), -1) + np.eye(n)
    assert_rel(low @ np.triu(w(lu)), pa, dtype, n=n, what="L U = P A")
    dev.cusolver.getrs(da, db, n, nrhs, ipiv, trans).result(timeout=60)
    t = opm(a, trans)
    assert_rel(host(dev, db), np.linalg.solve(t, w(b)), dtype, n=n, cond=np.linalg.cond(t),
               what=f"getrs {trans}")


@pytest.mark.parametrize("pivot", (True, False), ids=("pivot", "nopivot"))
@pytest.mark.parametrize("trans", ("N", "T", "C"))
@pytest.mark.parametrize("dtype", DTYPES)
def test_getrs_batched_every_trans(dev, rng, dtype: str, trans: str, pivot: bool) -> None:
    n, nrhs, batch = 7, 2, 3
    mats = [general(rng, n, dtype) for _ in range(batch)]
    rhs = [rand(rng, (n, nrhs), dtype) for _ in range(batch)]
    a = np.concatenate([m.reshape(-1, order="F") for m in mats])
    b = np.concatenate([r.reshape(-1, order="F") for r in rhs])
    da, db = dev.to_device(a), dev.to_device(b)
    ipiv = dev.alloc((n * batch,), np.int32, order="F") if pivot else None
    dev.cusolver.getrf_batched(da, n, batch, ipiv).result(timeout=60)
    dev.cusolver.getrs_batched(da, db, n, nrhs, batch, ipiv, trans).result(timeout=60)
    out = host(dev, db)
    for i in range(batch):
        t = opm(mats[i], trans)
        got = out[i * n * nrhs:(i + 1) * n * nrhs].reshape((n, nrhs), order="F")
        assert_rel(got, np.linalg.solve(t, w(rhs[i])), dtype, n=n, cond=np.linalg.cond(t),
                   what=f"item {i} trans {trans}")


# -- Cholesky -------------------------------------------------------------------------------------

@pytest.mark.parametrize("uplo", ("L", "U"))
@pytest.mark.parametrize("dtype", DTYPES)
def test_potrf_potrs_potri_each_uplo(dev, rng, dtype: str, uplo: str) -> None:
    n, nrhs = 11, 4
    a = hpd(rng, n, dtype)
    junk = rand(rng, (n, n), dtype)  # the other triangle must not be read
    mask = np.tri(n, dtype=bool) if uplo == "L" else np.tri(n, dtype=bool).T
    stored = np.asfortranarray(np.where(mask, a, junk))
    b = rand(rng, (n, nrhs), dtype)
    da, db = dev.to_device(stored), dev.to_device(b)
    dev.cusolver.potrf(da, n, uplo).result(timeout=60)
    f = host(dev, da)
    tri = np.tril(w(f)) if uplo == "L" else np.triu(w(f))
    rebuilt = tri @ tri.conj().T if uplo == "L" else tri.conj().T @ tri
    cond = np.linalg.cond(w(a))
    assert_rel(rebuilt, w(a), dtype, n=n, what="factor reconstruction")
    np.testing.assert_array_equal(f[~mask], junk[~mask])
    dev.cusolver.potrs(da, db, n, nrhs, uplo).result(timeout=60)
    assert_rel(host(dev, db), np.linalg.solve(w(a), w(b)), dtype, n=n, cond=cond, what="potrs")
    dev.cusolver.potri(da, n, uplo).result(timeout=60)
    inv = host(dev, da)
    assert_rel(w(inv)[mask], np.linalg.inv(w(a))[mask], dtype, n=n, cond=cond, what="potri")


@pytest.mark.parametrize("uplo", ("L", "U"))
@pytest.mark.parametrize("dtype", DTYPES)
def test_potrs_batched_each_uplo(dev, rng, dtype: str, uplo: str) -> None:
    n, batch = 6, 3
    mats = [hpd(rng, n, dtype) for _ in range(batch)]
    rhs = [rand(rng, (n,), dtype) for _ in range(batch)]
    da = dev.to_device(np.concatenate([m.reshape(-1, order="F") for m in mats]))
    db = dev.to_device(np.concatenate(rhs))
    dev.cusolver.potrf_batched(da, n, batch, uplo).result(timeout=60)
    dev.cusolver.potrs_batched(da, db, n, batch, 1, uplo).result(timeout=60)
    out = host(dev, db)
    for i in range(batch):
        assert_rel(out[i * n:(i + 1) * n], np.linalg.solve(w(mats[i]), w(rhs[i])), dtype, n=n,
                   cond=np.linalg.cond(w(mats[i])), what=f"item {i}")


# -- QR -------------------------------------------------------------------------------------------

def _qr(dev, rng, dtype: str, m: int, n: int):
    a = rand(rng, (m, n), dtype)
    da, tau = dev.to_device(a), dev.alloc((n,), dtype, order="F")
    dev.cusolver.geqrf(da, tau, m, n).result(timeout=60)
    return a, da, tau


@pytest.mark.parametrize("dtype", DTYPES)
def test_geqrf_orgqr_orthonormal_and_reconstructs(dev, rng, dtype: str) -> None:
    m, n = 14, 9
    a, da, tau = _qr(dev, rng, dtype, m, n)
    r = np.triu(w(host(dev, da))[:n])
    dev.cusolver.orgqr(da, tau, m, n, n).result(timeout=60)
    q = host(dev, da)
    assert_orthonormal(q, dtype, what="orgqr Q")
    assert_rel(w(q) @ r, w(a), dtype, n=m, what="Q R = A")


@pytest.mark.parametrize("side", ("L", "R"))
@pytest.mark.parametrize("dtype", DTYPES)
def test_ormqr_every_side_and_trans(dev, rng, dtype: str, side: str) -> None:
    """op(Q) C / C op(Q) against the explicit Q (host LAPACK's orgqr/ungqr of the same
    reflectors), for each trans the type takes: 'N' applies Q itself."""
    m, n, k = 10, 8, 5
    rows = m if side == "L" else n
    _, da, tau = _qr(dev, rng, dtype, rows, k)
    refl, tv = host(dev, da), host(dev, tau)
    fn = sla.lapack.get_lapack_funcs("orgqr" if dtype in ("f32", "f64") else "ungqr",
                                     (w(refl),))
    full = np.zeros((rows, rows), w(refl).dtype)
    full[:, :k] = w(refl)
    q, _, info = fn(full, w(tv))
    assert info == 0
    assert_orthonormal(q, dtype)  # built in f64 from reflectors rounded to dtype
    for trans in trans_for(dtype):
        c = rand(rng, (m, n), dtype)
        dc = dev.to_device(c)
        dev.cusolver.ormqr(da, tau, dc, m, n, k, side, trans).result(timeout=60)
        oq = opm(q, trans)
        ref = oq @ w(c) if side == "L" else w(c) @ oq
        assert_rel(host(dev, dc), ref, dtype, n=rows, what=f"ormqr {side}{trans}")


# -- symmetric eigenproblems ----------------------------------------------------------------------

def check_eigen(a_full, vals, vecs, dtype: str, what: str) -> None:
    """Eigenvalues against LAPACK's, orthonormal vectors, A V = V diag(w)."""
    n = a_full.shape[0]
    ref = np.linalg.eigvalsh(a_full)
    scale = np.linalg.norm(a_full, 2)
    err = np.max(np.abs(w(vals) - ref)) / scale
    assert err <= bound(dtype, n, c=16), f"{what}: eigenvalues off by {err:.3g}"
    if vecs is not None:
        # (MRRR and Jacobi keep orthogonality to ~n u / relative gap: a margin for close
        # eigenvalues; a wrong vector set is off by O(1))
        assert_orthonormal(vecs, dtype, c=256, what=f"{what} vectors")
        resid = np.linalg.norm(a_full @ w(vecs) - w(vecs) * w(vals)) / scale
        assert resid <= bound(dtype, n, c=256), f"{what}: ||AV - VW|| / ||A|| = {resid:.3g}"


@pytest.mark.parametrize("vectors", (True, False))
@pytest.mark.parametrize("method", ("syevd", "syevj"))
@pytest.mark.parametrize("uplo", ("L", "U"))
@pytest.mark.parametrize("dtype", DTYPES)
def test_syevd_syevj_each_uplo(dev, rng, dtype: str, uplo: str, method: str,
                               vectors: bool) -> None:
    n = 10
    a = rand(rng, (n, n), dtype)
    da, dw = dev.to_device(a), dev.alloc((n,), REAL[dtype], order="F")
    getattr(dev.cusolver, method)(da, dw, n, uplo, vectors).result(timeout=60)
    check_eigen(hermitian_of(a, uplo), host(dev, dw), host(dev, da) if vectors else None,
                dtype, f"{method} {uplo}")


@pytest.mark.parametrize("uplo", ("L", "U"))
@pytest.mark.parametrize("dtype", DTYPES)
def test_syevj_batched_vectors_are_eigenvectors(dev, rng, dtype: str, uplo: str) -> None:
    n, batch = 6, 4
    mats = [rand(rng, (n, n), dtype) for _ in range(batch)]
    da = dev.to_device(np.concatenate([m.reshape(-1, order="F") for m in mats]))
    dw = dev.alloc((n * batch,), REAL[dtype], order="F")
    dev.cusolver.syevj_batched(da, dw, n, batch, uplo).result(timeout=60)
    vecs, vals = host(dev, da), host(dev, dw)
    for i in range(batch):
        check_eigen(hermitian_of(mats[i], uplo), vals[i * n:(i + 1) * n],
                    vecs[i * n * n:(i + 1) * n * n].reshape((n, n), order="F"), dtype,
                    f"item {i}")


@pytest.mark.parametrize("dtype", DTYPES)
def test_eigh_batched_vectors_are_orthonormal_eigenvectors(dev, rng, dtype: str) -> None:
    n, batch = 5, 3
    stack = np.stack([hermitian_of(rand(rng, (n, n), dtype), "L") for _ in range(batch)])
    stack = stack.astype(gpumsg.as_dtype(dtype))
    wb, vb = dev.linalg.eigh(dev.to_device(stack)).result(timeout=60)
    vals, vecs = host(dev, wb), host(dev, vb)
    for i in range(batch):
        check_eigen(w(stack[i]), vals[i], vecs[i], dtype, f"item {i}")


@pytest.mark.parametrize("itype", (1, 2, 3))
@pytest.mark.parametrize("uplo", ("L", "U"))
@pytest.mark.parametrize("dtype", DTYPES)
def test_sygvd_each_itype_and_uplo(dev, rng, dtype: str, uplo: str, itype: int) -> None:
    n = 8
    a, b = rand(rng, (n, n), dtype), hpd(rng, n, dtype)
    da, db, dw = dev.to_device(a), dev.to_device(b), dev.alloc((n,), REAL[dtype], order="F")
    dev.cusolver.sygvd(da, db, dw, n, itype, uplo).result(timeout=60)
    af, bf = hermitian_of(a, uplo), w(b)
    vals, vecs = w(host(dev, dw)), w(host(dev, da))
    ref = sla.eigh(af, bf, type=itype, eigvals_only=True)
    cond = np.linalg.cond(bf)
    scale = np.max(np.abs(ref))
    assert np.max(np.abs(vals - ref)) <= bound(dtype, n, c=8, cond=cond) * scale
    lhs = {1: af @ vecs, 2: af @ bf @ vecs, 3: bf @ af @ vecs}[itype]
    rhs = (bf @ vecs if itype == 1 else vecs) * vals
    assert rel_err(lhs, rhs) <= bound(dtype, n, c=8, cond=cond ** 2)
    # the vectors are B-orthonormal (itype 1, 2) or B^-1-orthonormal (itype 3)
    g = vecs.conj().T @ (bf if itype < 3 else np.linalg.inv(bf)) @ vecs
    assert np.linalg.norm(g - np.eye(n)) <= bound(dtype, n, c=8, cond=cond)


C_SVD = 32


# -- SVD ------------------------------------------------------------------------------------------

def check_svd(a, s, u, vh, dtype: str, what: str) -> None:
    """Singular values against LAPACK's; orthonormal U and V; U S V^H = A where both come
    (the NumPy-shaped calls add transposes by GEMM: a few more roundings, hence C_SVD)."""
    a = w(a)
    p = min(a.shape)
    ref = np.linalg.svd(a, compute_uv=False)
    scale = ref[0]
    assert np.max(np.abs(w(s)[:p] - ref)) <= bound(dtype, max(a.shape), c=C_SVD) * scale, what
    if u is not None:
        assert_orthonormal(u, dtype, c=C_SVD, what=f"{what} U")
    if vh is not None:
        assert_orthonormal(w(vh).conj().T, dtype, c=C_SVD, what=f"{what} V")
    if u is not None and vh is not None:
        rebuilt = w(u)[:, :p] * w(s)[:p] @ w(vh)[:p]
        assert rel_err(rebuilt, a) <= bound(dtype, max(a.shape), c=C_SVD), f"{what}: U S V^H != A"
    elif u is not None:  # U^H A = S V^H: its rows have the singular values as norms
        norms = np.linalg.norm(w(u)[:, :p].conj().T @ a, axis=1)
        assert np.max(np.abs(norms - ref)) <= bound(dtype, max(a.shape), c=C_SVD) * scale, what
    elif vh is not None:
        norms = np.linalg.norm(a @ w(vh)[:p].conj().T, axis=0)
        assert np.max(np.abs(norms - ref)) <= bound(dtype, max(a.shape), c=C_SVD) * scale, what


@pytest.mark.parametrize("jobu,jobvt", list(itertools.product("ASN", "ASN")))
@pytest.mark.parametrize("dtype", DTYPES)
def test_gesvd_every_job(dev, rng, dtype: str, jobu: str, jobvt: str) -> None:
    m, n = 11, 7
    a = rand(rng, (m, n), dtype)
    ucols = {"A": m, "S": n, "N": 0}[jobu]
    vrows = {"A": n, "S": n, "N": 0}[jobvt]
    du = dev.alloc((m, ucols), dtype, order="F") if ucols else None
    dvt = dev.alloc((vrows, n), dtype, order="F") if vrows else None
    ds = dev.alloc((n,), REAL[dtype], order="F")
    dev.cusolver.gesvd(dev.to_device(a), ds, m, n, du, dvt, jobu, jobvt).result(timeout=60)
    check_svd(a, host(dev, ds), host(dev, du) if du is not None else None,
              host(dev, dvt) if dvt is not None else None, dtype, f"gesvd {jobu}{jobvt}")


@pytest.mark.parametrize("econ", (False, True))
@pytest.mark.parametrize("shape", ((9, 6), (6, 9)))
@pytest.mark.parametrize("dtype", DTYPES)
def test_gesvdj_econ_or_full(dev, rng, dtype: str, shape: tuple, econ: bool) -> None:
    m, n = shape
    p = min(m, n)
    a = rand(rng, (m, n), dtype)
    du = dev.alloc((m, p if econ else m), dtype, order="F")
    dv = dev.alloc((n, p if econ else n), dtype, order="F")
    ds = dev.alloc((p,), REAL[dtype], order="F")
    dev.cusolver.gesvdj(dev.to_device(a), ds, m, n, du, dv, econ=econ).result(timeout=60)
    v = host(dev, dv)
    check_svd(a, host(dev, ds), host(dev, du), w(v).conj().T, dtype, f"gesvdj econ={econ}")
    s_only = dev.alloc((p,), REAL[dtype], order="F")
    dev.cusolver.gesvdj(dev.to_device(a), s_only, m, n, vectors=False).result(timeout=60)
    check_svd(a, host(dev, s_only), None, None, dtype, "gesvdj values only")


@pytest.mark.parametrize("shape", ((7, 5), (5, 7)))
@pytest.mark.parametrize("dtype", DTYPES)
def test_gesvdj_batched_factors(dev, rng, dtype: str, shape: tuple) -> None:
    m, n = shape
    p, batch = min(m, n), 3
    mats = [rand(rng, (m, n), dtype) for _ in range(batch)]
    da = dev.to_device(np.concatenate([x.reshape(-1, order="F") for x in mats]))
    ds = dev.alloc((p * batch,), REAL[dtype], order="F")
    du = dev.alloc((m * m * batch,), dtype, order="F")
    dv = dev.alloc((n * n * batch,), dtype, order="F")
    dev.cusolver.gesvdj_batched(da, ds, m, n, batch, du, dv).result(timeout=60)
    s, u, v = host(dev, ds), host(dev, du), host(dev, dv)
    for i in range(batch):
        ui = u[i * m * m:(i + 1) * m * m].reshape((m, m), order="F")
        vi = v[i * n * n:(i + 1) * n * n].reshape((n, n), order="F")
        check_svd(mats[i], s[i * p:(i + 1) * p], ui, w(vi).conj().T, dtype, f"item {i}")


@pytest.mark.parametrize("full", (True, False))
@pytest.mark.parametrize("dtype", DTYPES)
def test_svd_batched_factors(dev, rng, dtype: str, full: bool) -> None:
    batch, m, n = 3, 6, 4
    stack = np.stack([rand(rng, (m, n), dtype) for _ in range(batch)])
    ub, sb, vb = dev.linalg.svd(dev.to_device(np.ascontiguousarray(stack)),
                                full_matrices=full).result(timeout=60)
    u, s, vh = host(dev, ub), host(dev, sb), host(dev, vb)
    for i in range(batch):
        check_svd(stack[i], s[i], u[i], vh[i], dtype, f"item {i}")
