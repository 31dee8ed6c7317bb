"""dev.linalg takes buffers of either memory order, as NumPy does: an F-ordered input gives
the answer its C-ordered twin gives, checked for every function of the namespace (the ones
added later too, by the generic property test), against float64 NumPy for each."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

import gpumsg
from gpumsg.libs import namespaces
from gpumsg.libs._namespace import public_names
from tests.libs.harness import assert_close, random_array, wide


def _host(dev, value):
    if isinstance(value, tuple):
        return tuple(_host(dev, v) for v in value)
    if hasattr(value, "ref"):
        return dev.copy_to_host(value).result(60)
    return value


def _answer(dev, fut):
    return _host(dev, fut.result(60) if hasattr(fut, "result") else fut)


def _spd(rng, n, dtype, batch=None):
    shape = (n, n) if batch is None else (batch, n, n)
    a = random_array(rng, shape, dtype)
    a = wide(a)
    h = a @ np.conj(np.swapaxes(a, -1, -2)) + n * np.eye(n)
    return h.astype(gpumsg.as_dtype(dtype))


def _f(dev, a):
    buf = dev.to_device(np.asfortranarray(a))
    assert buf.order == "F" or sum(d > 1 for d in np.shape(a)) <= 1
    return buf


@pytest.mark.parametrize("dtype", ["f32", "f64", "c64", "c128"])
def test_each_function_against_numpy(dev, rng, dtype):
    n = 5
    h = _spd(rng, n, dtype)
    g = random_array(rng, (n, n), dtype) + np.eye(n, dtype=gpumsg.as_dtype(dtype)) * 4
    tall = random_array(rng, (7, n), dtype)
    b = random_array(rng, (n, 3), dtype)
    bt = random_array(rng, (7, 2), dtype)
    L = dev.linalg
    prec = "f32" if dtype in ("f32", "c64") else "f64"
    assert_close(_answer(dev, L.cholesky(_f(dev, h))), np.linalg.cholesky(wide(h)), prec, 50)
    assert_close(_answer(dev, L.solve(_f(dev, g), _f(dev, b))),
                 np.linalg.solve(wide(g), wide(b)), prec, 200)
    assert_close(_answer(dev, L.inv(_f(dev, g))), np.linalg.inv(wide(g)), prec, 200)
    assert_close(_answer(dev, L.inv(_f(dev, h), assume_a="pos")), np.linalg.inv(wide(h)),
                 prec, 200)
    assert_close(_answer(dev, L.matmul(_f(dev, tall), _f(dev, g))), wide(tall) @ wide(g),
                 prec, 20)
    q, r = _answer(dev, L.qr(_f(dev, tall)))
    assert_close(q @ r, wide(tall), prec, 50)
    w, v = _answer(dev, L.eigh(_f(dev, h)))
    assert_close(w, np.linalg.eigvalsh(wide(h)), prec, 100)
    s = _answer(dev, L.svd(_f(dev, tall), compute_uv=False))
    assert_close(s, np.linalg.svd(wide(tall), compute_uv=False), prec, 100)
    sign, logdet = _answer(dev, L.slogdet(_f(dev, g)))
    want = np.linalg.slogdet(wide(g))
    assert_close(np.asarray([sign * np.exp(logdet)]), np.asarray([want[0] * np.exp(want[1])]),
                 prec, 200)
    assert_close(np.asarray([_answer(dev, L.det(_f(dev, g)))]),
                 np.asarray([np.linalg.det(wide(g))]), prec, 200)
    assert_close(_answer(dev, L.lstsq(_f(dev, tall), _f(dev, bt))),
                 np.linalg.lstsq(wide(tall), wide(bt), rcond=None)[0], prec, 500)


def test_stacks_in_f_order(dev, rng):
    h = _spd(rng, 4, "f64", batch=3)
    assert_close(_answer(dev, dev.linalg.cholesky(_f(dev, h))), np.linalg.cholesky(h), "f64",
                 50)
    b = random_array(rng, (3, 4, 2), "f64")
    assert_close(_answer(dev, dev.linalg.solve(_f(dev, h), _f(dev, b))),
                 np.linalg.solve(h, b), "f64", 200)
    w, _ = _answer(dev, dev.linalg.eigh(_f(dev, h)))
    assert_close(w, np.linalg.eigvalsh(h), "f64", 100)
    x = random_array(rng, (2, 3, 5), "f32")
    y = random_array(rng, (2, 5, 4), "f32")
    assert_close(_answer(dev, dev.linalg.matmul(_f(dev, x), _f(dev, y))), wide(x) @ wide(y),
                 "f32", 20)


def test_the_copies_leave_the_inputs_and_outputs_alone(dev, rng):
    a = random_array(rng, (4, 3), "f32")
    fa = _f(dev, a)
    out = dev.alloc((4, 4), "f32")
    dev.linalg.matmul(fa, _f(dev, a.T.copy()), out=out).result(60)
    assert_close(_host(dev, out), wide(a) @ wide(a).T, "f32", 10)
    assert fa.order == "F"
    np.testing.assert_array_equal(_host(dev, fa), a)
    vec = dev.to_device(random_array(rng, (4,), "f64"), order="F")  # one axis: no copy
    h = _spd(rng, 4, "f64")
    assert_close(_answer(dev, dev.linalg.solve(_f(dev, h), vec)),
                 np.linalg.solve(h, _host(dev, vec)), "f64", 100)


def _args(sig_params, a, b):
    """a (and b where the function takes a second operand) for a call by position."""
    required = [p for p in sig_params if p.default is inspect.Parameter.empty
                and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return (a, b)[:len(required)]


def test_order_never_changes_the_answer_of_any_linalg_function(dev, rng):
    """The property, for every public function of dev.linalg by name (a function added later
    is covered here without a case of its own): called with F-ordered inputs, it answers what
    it answers with the C-ordered twins (a well-conditioned SPD matrix and a square second
    operand, by position). A function these arguments do not fit (it refuses them in C order
    too: a vector of 3 for ``cross``, an integer power, ...) is left to its own tests; the
    NumPy functions above must all be checked here."""
    names = sorted(public_names(namespaces()["linalg"]))
    must = {"cholesky", "solve", "inv", "qr", "eigh", "svd", "det", "slogdet", "lstsq",
            "matmul"}
    assert must <= set(names)
    h = _spd(rng, 6, "f64")
    b = random_array(rng, (6, 6), "f64")
    checked = set()
    for name in names:
        fn = getattr(dev.linalg, name)
        params = list(inspect.signature(fn).parameters.values())
        try:
            want = _answer(dev, fn(*_args(params, dev.to_device(h), dev.to_device(b))))
        except (gpumsg.GpuError, TypeError, ValueError):
            continue  # these arguments do not fit this function
        got = _answer(dev, fn(*_args(params, _f(dev, h), _f(dev, b))))
        for g_, w_ in zip(got if isinstance(got, tuple) else (got,),
                          want if isinstance(want, tuple) else (want,)):
            np.testing.assert_allclose(np.asarray(g_), np.asarray(w_), rtol=1e-12, atol=1e-12,
                                       err_msg=name)
        checked.add(name)
    assert must <= checked, must - checked
