"""The Generator's contract besides the laws: NumPy's signatures (``size``, ``dtype``,
``out``), broadcasting, the same seed giving the same numbers (and another seed, a spawned
child or the next call other numbers), and bad parameters refused with InvalidMessage (a
ValueError, as NumPy raises) naming the parameter, on host and device arrays alike."""

from __future__ import annotations

import numpy as np
import pytest
from random_helpers import seed_of

from gpumsg.errors import InvalidMessage

DRAWS = [
    ("random", (), {}), ("integers", (0, 1000), {}), ("uniform", (1.0, 2.0), {}),
    ("standard_normal", (), {}), ("normal", ([0.0, 1.0], 2.0), {}),
    ("normal", (0.0, 2.0), {}), ("lognormal", (), {}), ("poisson", (3.0,), {}),
    ("poisson", ([3.0, 30.0],), {}), ("standard_exponential", (), {}),
    ("standard_gamma", (0.5,), {}), ("gamma", (3.0, 2.0), {}), ("beta", (2.0, 3.0), {}),
    ("binomial", (50, 0.3), {}), ("hypergeometric", (10, 20, 5), {}),
    ("vonmises", (0.0, 1.0), {}), ("zipf", (2.0,), {}), ("permutation", (40,), {}),
    ("choice", (50,), {"replace": False}), ("choice", (5,), {"p": [0.1, 0.2, 0.3, 0.2, 0.2]}),
    ("multinomial", (30, [0.2, 0.3, 0.5]), {}), ("dirichlet", ([1.0, 2.0],), {}),
    ("multivariate_normal", ([0.0, 1.0], [[1.0, 0.3], [0.3, 2.0]]), {}),
]


def _draw(gen, name, args, kw):
    if name in ("permutation",):
        return np.asarray(gen.permutation(*args))
    return np.asarray(getattr(gen, name)(*args, size=(8, 2)
                                         if name not in ("multinomial", "dirichlet",
                                                         "multivariate_normal", "choice")
                                         else 8, **kw))


@pytest.mark.parametrize("name,args,kw", DRAWS, ids=[f"{d[0]}{i}" for i, d in enumerate(DRAWS)])
def test_same_seed_same_numbers(xp, rng, name, args, kw):
    seed = seed_of(rng)
    a, b = xp.random.default_rng(seed), xp.random.default_rng(seed)
    first = _draw(a, name, args, kw)
    assert np.array_equal(first, _draw(b, name, args, kw))
    # the stream moves on, and another seed gives other numbers
    again = _draw(a, name, args, kw)
    other = _draw(xp.random.default_rng(seed + 1), name, args, kw)
    if name != "choice" or "p" not in kw:
        assert not np.array_equal(first, again)
        assert not np.array_equal(first, other)


def test_seed_forms_and_spawn(xp, rng):
    seed = seed_of(rng)
    a = np.asarray(xp.random.default_rng(np.random.SeedSequence(seed)).random(16))
    assert np.array_equal(a, np.asarray(xp.random.default_rng(seed).random(16)))
    from_numpy = np.asarray(xp.random.default_rng(np.random.default_rng(seed)).random(16))
    assert np.array_equal(a, from_numpy)  # a NumPy Generator seeds by its seed sequence
    g = xp.random.default_rng([seed, 7])
    assert xp.random.default_rng(g) is g
    kids = g.spawn(2)
    x, y = (np.asarray(k.random(16)) for k in kids)
    assert not np.array_equal(x, y)
    again = [np.asarray(k.random(16)) for k in xp.random.default_rng([seed, 7]).spawn(2)]
    assert np.array_equal(x, again[0]) and np.array_equal(y, again[1])
    bits = g.bit_generator
    assert bits.seed_seq.entropy is not None and bits.counter >= 0
    raw = bits.random_raw(1000)
    assert raw.dtype == xp.uint64 and len(np.unique(np.asarray(raw))) == 1000
    with pytest.raises(InvalidMessage) as err:
        xp.random.default_rng(-1)
    assert err.value.field == "seed"


def test_sizes_dtypes_and_shapes(xp, rng):
    g = xp.random.default_rng(seed_of(rng))
    assert g.random().shape == () and g.normal().shape == () and g.gamma(2.0).shape == ()
    assert g.random(5).shape == (5,) and g.random((2, 3)).shape == (2, 3)
    assert g.random(size=0).shape == (0,) and g.gamma(2.0, size=(0, 3)).shape == (0, 3)
    assert g.random(dtype=xp.float32).dtype == xp.float32
    assert g.standard_normal(3, dtype=np.float32).dtype == xp.float32
    assert g.standard_gamma(1.5, 4, dtype="float32").dtype == xp.float32
    assert g.binomial(5, 0.5, 3).dtype == xp.int64 and g.poisson(2.0, 3).dtype == xp.int64
    # parameters broadcast with each other, and against size
    assert g.normal(np.zeros((3, 1)), np.ones(4)).shape == (3, 4)
    assert g.normal(np.zeros((3, 1)), 1.0, size=(2, 3, 4)).shape == (2, 3, 4)
    with pytest.raises(InvalidMessage) as err:
        g.normal(np.zeros(3), 1.0, size=(4,))
    assert err.value.field == "size"
    with pytest.raises(InvalidMessage):
        g.normal(np.zeros(3), np.ones(4))


@pytest.mark.parametrize("method,kw,dtype", [
    ("random", {}, "float64"), ("random", {}, "float32"), ("standard_normal", {}, "float64"),
    ("standard_normal", {}, "float32"), ("standard_exponential", {}, "float32"),
    ("standard_gamma", {"shape": 2.0}, "float64"),
])
def test_out(xp, rng, method, kw, dtype):
    g = xp.random.default_rng(seed_of(rng))
    dt = getattr(xp, dtype)
    out = xp.zeros((50, 4), dtype=dt)
    res = getattr(g, method)(**kw, out=out, dtype=dt)
    assert res is out
    h = np.asarray(out)
    # every element written (float32 values of 24 bits may repeat or be 0 now and then)
    assert np.count_nonzero(h) >= h.size - 2 and len(np.unique(h)) >= h.size - 5
    # a strided view is filled in place too, the elements around it untouched
    big = xp.zeros((50, 8), dtype=dt)
    view = big[:, ::2]
    getattr(g, method)(**kw, out=view, dtype=dt)
    hb = np.asarray(big)
    assert np.count_nonzero(hb[:, ::2]) >= 200 - 2 and np.all(hb[:, 1::2] == 0)
    with pytest.raises(InvalidMessage) as err:
        getattr(g, method)(**kw, out=xp.zeros(4, dtype=xp.int32))
    assert err.value.field == "out"
    with pytest.raises(InvalidMessage) as err:
        getattr(g, method)(**kw, out=out, size=(3,), dtype=dt)
    assert err.value.field == "size"


BAD = [
    ("normal", (0.0, -1.0), "scale"), ("normal", (0.0, [1.0, np.nan]), "scale"),
    ("uniform", (2.0, 1.0), "high"), ("uniform", (0.0, np.inf), "high"),
    ("exponential", (-1.0,), "scale"), ("standard_gamma", (-0.5,), "shape"),
    ("gamma", (1.0, -2.0), "scale"), ("beta", (0.0, 1.0), "a"), ("beta", (1.0, -1.0), "b"),
    ("chisquare", (0.0,), "df"), ("noncentral_chisquare", (1.0, -1.0), "nonc"),
    ("f", (1.0, 0.0), "dfden"), ("noncentral_f", (0.0, 1.0, 1.0), "dfnum"),
    ("standard_t", (0.0,), "df"), ("gumbel", (0.0, -1.0), "scale"),
    ("laplace", (0.0, -1.0), "scale"), ("logistic", (0.0, -1.0), "scale"),
    ("lognormal", (0.0, -1.0), "sigma"), ("pareto", (0.0,), "a"), ("power", (0.0,), "a"),
    ("rayleigh", (-1.0,), "scale"), ("weibull", (-1.0,), "a"),
    ("triangular", (1.0, 0.0, 2.0), "mode"), ("triangular", (0.0, 3.0, 2.0), "right"),
    ("triangular", (1.0, 1.0, 1.0), "right"), ("vonmises", (0.0, -1.0), "kappa"),
    ("wald", (0.0, 1.0), "mean"), ("wald", (1.0, 0.0), "scale"),
    ("binomial", (-1, 0.5), "n"), ("binomial", (5, 1.5), "p"),
    ("negative_binomial", (0.0, 0.5), "n"), ("negative_binomial", (1.0, 0.0), "p"),
    ("poisson", (-1.0,), "lam"), ("poisson", (1e19,), "lam"), ("geometric", (0.0,), "p"),
    ("geometric", (1.5,), "p"), ("logseries", (1.0,), "p"), ("zipf", (1.0,), "a"),
    ("hypergeometric", (5, 5, 11), "nsample"), ("hypergeometric", (-1, 5, 1), "ngood"),
    ("hypergeometric", (10 ** 9, 5, 1), "ngood"), ("integers", (5, 5), "high"),
    ("integers", (0, 300, None, np.int8), "high"), ("integers", (-1, 5, None, np.uint8), "low"),
    ("random", (None, np.int32), "dtype"), ("standard_normal", (-3,), "size"),
    ("choice", (5, 6, False), "size"), ("choice", (3, 2, True, [0.5, 0.6, 0.1]), "p"),
    ("choice", (3, 2, True, [0.5, 0.5]), "p"), ("choice", (3, 2, True, [1.5, -0.5, 0.0]), "p"),
    ("choice", (3, 3, False, [0.5, 0.5, 0.0]), "p"),
    ("multinomial", (-1, [0.5, 0.5]), "n"), ("multinomial", (3, [0.7, 0.8, 0.1]), "pvals"),
    ("dirichlet", ([1.0, -1.0],), "alpha"),
    ("multivariate_hypergeometric", ([3, 4], 8), "nsample"),
    ("multivariate_hypergeometric", ([3, -4], 1), "colors"),
    ("multivariate_normal", ([0.0, 0.0], [[1.0, 2.0], [2.0, 1.0]], None, "raise"), "cov"),
    ("multivariate_normal", ([0.0], [[1.0, 0.0], [0.0, 1.0]]), "cov"),
    ("standard_exponential", (None, np.float64, "ziggurat"), "method"),
    ("bytes", (-1,), "length"),
    # complex parameters are refused, not cast to their real parts
    ("normal", (np.array([1 + 2j, 0.0]),), "loc"), ("zipf", (np.array([2 + 1j]),), "a"),
    ("multinomial", (3, np.array([0.5 + 1j, 0.5])), "pvals"),
    ("dirichlet", (np.array([1 + 1j, 2.0]),), "alpha"),
    ("multivariate_normal", (np.array([1j, 0.0]), np.eye(2)), "mean"),
    # text is not parsed as numbers
    ("normal", ("1.5",), "loc"), ("gamma", (np.array(["2.0"]),), "shape"),
]


@pytest.mark.parametrize("name,args,field", BAD, ids=[f"{b[0]}-{b[2]}{i}"
                                                      for i, b in enumerate(BAD)])
def test_bad_parameters_name_the_field(xp, rng, name, args, field):
    g = xp.random.default_rng(seed_of(rng))
    with pytest.raises(InvalidMessage) as err:
        getattr(g, name)(*args)
    assert err.value.field == field
    assert isinstance(err.value, ValueError)
    # NumPy refuses the same arguments, except where it is lenient: a NaN parameter (a NaN
    # value for some laws), an unknown exponential method (inversion), a negative length
    nan = any(isinstance(a, list) and any(v != v for v in a) for a in args)
    if not nan and name not in ("standard_exponential", "bytes"):
        with pytest.raises((ValueError, OverflowError, TypeError)):
            getattr(np.random.default_rng(0), name)(*args)
    # the device keeps serving
    assert np.asarray(g.random(3)).shape == (3,)


def test_bad_device_array_parameters(xp, rng):
    """A device array is checked on the device (NaN fails as NumPy's checks fail it)."""
    g = xp.random.default_rng(seed_of(rng))
    with pytest.raises(InvalidMessage) as err:
        g.gamma(xp.asarray(np.array([1.0, -2.0, 3.0])))
    assert err.value.field == "shape"
    with pytest.raises(InvalidMessage) as err:
        g.binomial(10, xp.asarray(np.array([0.5, np.nan])))
    assert err.value.field == "p"
    with pytest.raises(InvalidMessage) as err:
        g.uniform(xp.asarray(np.array([3.0, 0.0])), 2.0)
    assert err.value.field == "high"
    with pytest.raises(InvalidMessage) as err:
        g.integers(xp.asarray(np.array([3, 0])), 3)
    assert err.value.field == "high"
    with pytest.raises(InvalidMessage) as err:
        g.triangular(0.0, xp.asarray(np.array([0.5, 3.0])), 2.0)
    assert err.value.field == "right"


def test_every_method_of_numpys_generator_with_its_parameters(xp):
    """The Generator has each public method of numpy.random.Generator, taking the same
    parameters by the same names (in the same order)."""
    import inspect

    ours = xp.random.Generator
    for name, member in inspect.getmembers(np.random.Generator):
        if name.startswith("_") or not callable(member):
            continue
        assert hasattr(ours, name), f"missing {name}"
        try:
            theirs = list(inspect.signature(member).parameters)
        except (TypeError, ValueError):  # a Cython method without a signature
            continue
        mine = list(inspect.signature(getattr(ours, name)).parameters)
        assert mine == theirs, (name, mine, theirs)
