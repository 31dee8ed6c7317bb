"""Permutations and ``choice``: every result a permutation (or a sample of the population),
positions uniform (chi-square over many independent shuffles), weighted choice against its
probabilities with and without replacement, the array forms along an axis, in place."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from random_helpers import chi2_ok, ks_ok, seed_of
from scipy import stats

from gpumsg.errors import InvalidMessage


@pytest.fixture
def gen(xp, rng):
    return xp.random.default_rng(seed_of(rng))


def test_permutation_of_int_is_uniform(xp, gen):
    for n in (0, 1, 1000, 4096):
        h = np.asarray(gen.permutation(n))
        assert h.dtype == np.int64 and np.array_equal(np.sort(h), np.arange(n))
    # the six orders of three items come equally often
    orders = np.stack([np.asarray(gen.permutation(3)) for _ in range(600)])
    codes = orders @ np.array([9, 3, 1])
    perms = [np.array(p) @ np.array([9, 3, 1]) for p in itertools.permutations(range(3))]
    counts = np.array([np.count_nonzero(codes == c) for c in perms])
    assert counts.sum() == 600 and stats.chisquare(counts).pvalue > 1e-6


def test_long_permutation(xp, gen):
    """A permutation longer than a block's sort: the namespace's device-wide argsort."""
    h = np.asarray(gen.permutation(100_003))
    assert np.array_equal(np.sort(h), np.arange(100_003))
    # where the first 1000 items land is uniform over ten bands
    chi2_ok(h[:1000] * 10 // 100_003, lambda k: np.full(k.shape, 0.1), 9)


def test_permutation_places_are_shuffled_within_buckets(xp, gen):
    """Ascents of a uniform permutation of n: mean (n - 1) / 2, variance (n + 1) / 12. Items
    left in their order inside a bucket or sub-bucket (of a few items) would add ascents."""
    for n in (3000, 100_003, 600_000):
        h = np.asarray(gen.permutation(n))
        assert np.array_equal(np.sort(h), np.arange(n))
        ascents = int(np.count_nonzero(np.diff(h) > 0))
        assert abs(ascents - (n - 1) / 2) < 6 * np.sqrt((n + 1) / 12), (n, ascents)
    # the same seed gives the same permutation
    seed = int(gen.integers(0, 1 << 62))
    a = np.asarray(xp.random.default_rng(seed).permutation(50_000))
    assert np.array_equal(a, np.asarray(xp.random.default_rng(seed).permutation(50_000)))


def test_permutation_by_buckets_is_uniform(dev, rng):
    """Orders of 4 items chi-square uniform, with 1 bucket and with 4 buckets of about one
    item; a bucket larger than a block's (shuffled by one thread) is a permutation, uniform over
    places."""
    from gpumsg.array_api.random._permute import CAP, permutation_order

    key = int(rng.integers(0, 1 << 63))
    for mean in (10**9, 1):
        codes = np.array([np.asarray(permutation_order(dev, 4, key, (2 * c, 2 * c + 1), mean))
                          @ np.array([64, 16, 4, 1]) for c in range(960)])
        perms = [np.array(p) @ np.array([64, 16, 4, 1])
                 for p in itertools.permutations(range(4))]
        counts = np.array([np.count_nonzero(codes == c) for c in perms])
        assert counts.sum() == 960 and stats.chisquare(counts).pvalue > 1e-6, counts
    n = 3 * CAP
    h = np.asarray(permutation_order(dev, n, key, (5, 6), mean=2 * CAP))  # 2 buckets > CAP
    assert np.array_equal(np.sort(h), np.arange(n))
    chi2_ok(h[: n // 2] * 8 // n, lambda k: np.full(k.shape, 1 / 8), 7)
    ascents = int(np.count_nonzero(np.diff(h) > 0))
    assert abs(ascents - (n - 1) / 2) < 6 * np.sqrt((n + 1) / 12)


def test_permuted_rows_are_independent_and_uniform(xp, gen):
    k = 7
    x = np.tile(np.arange(k), (20_000, 1))
    h = np.asarray(gen.permuted(xp.asarray(x), axis=1))
    assert np.array_equal(np.sort(h, axis=1), x)
    where0 = np.argmax(h == 0, axis=1)
    chi2_ok(where0, lambda j: np.full(j.shape, 1.0 / k), k - 1)
    # two rows' permutations are unrelated
    assert np.mean(np.all(h[0::2] == h[1::2], axis=1)) < 0.01


def test_permuted_flat_out_and_axis0(xp, gen):
    x = xp.asarray(np.arange(60.0).reshape(6, 10))
    flat = np.asarray(gen.permuted(x))
    assert flat.shape == (6, 10) and np.array_equal(np.sort(flat.ravel()), np.arange(60.0))
    assert not np.array_equal(flat, np.asarray(x))
    out = xp.zeros((6, 10), dtype=xp.float64)
    res = gen.permuted(x, axis=0, out=out)
    assert res is out
    h = np.asarray(out)
    assert np.array_equal(np.sort(h, axis=0), np.asarray(x))
    gen.permuted(x, axis=1, out=x)  # in place, as NumPy allows
    assert np.array_equal(np.sort(np.asarray(x), axis=1), np.arange(60.0).reshape(6, 10))


def test_permutation_and_shuffle_of_arrays(xp, gen):
    base = np.arange(24).reshape(4, 6)
    p = np.asarray(gen.permutation(xp.asarray(base)))
    assert sorted(map(tuple, p)) == sorted(map(tuple, base))
    p = np.asarray(gen.permutation(base, axis=1))
    assert sorted(map(tuple, p.T)) == sorted(map(tuple, base.T))
    x = xp.asarray(base)
    assert gen.shuffle(x) is None
    h = np.asarray(x)
    assert sorted(map(tuple, h)) == sorted(map(tuple, base))
    gen.shuffle(x, axis=1)
    assert sorted(map(tuple, np.asarray(x).T)) == sorted(map(tuple, h.T))
    with pytest.raises(InvalidMessage) as err:
        gen.shuffle(base)
    assert err.value.field == "x"
    with pytest.raises(InvalidMessage) as err:
        gen.permutation(base, axis=2)
    assert err.value.field == "axis"


def test_choice_uniform_with_and_without_replacement(xp, gen):
    h = np.asarray(gen.choice(10, 50_000))
    assert h.dtype == np.int64 and h.min() == 0 and h.max() == 9
    chi2_ok(h, lambda k: np.full(k.shape, 0.1), 9)
    h = np.asarray(gen.choice(1000, (20, 30), replace=False))
    assert h.shape == (20, 30) and len(np.unique(h)) == 600 and h.max() < 1000
    firsts = np.array([int(np.asarray(gen.choice(5, 2, replace=False))[0])
                       for _ in range(300)])
    assert stats.chisquare(np.bincount(firsts, minlength=5)).pvalue > 1e-6
    assert gen.choice(5).shape == ()


def test_choice_weighted(xp, gen):
    p = np.array([0.1, 0.0, 0.5, 0.15, 0.25])
    h = np.asarray(gen.choice(5, 50_000, p=p))
    assert not np.any(h == 1)
    chi2_ok(h, lambda k: p[k], 4)
    h = np.asarray(gen.choice(5, 50_000, p=xp.asarray(p)))
    chi2_ok(h, lambda k: p[k], 4)
    # without replacement: the first pick follows p, the second p among the rest
    picks = np.stack([np.asarray(gen.choice(5, 2, replace=False, p=p)) for _ in range(400)])
    assert np.all(picks[:, 0] != picks[:, 1]) and not np.any(picks == 1)
    counts = np.bincount(picks[:, 0], minlength=5)[[0, 2, 3, 4]]
    assert stats.chisquare(counts, p[[0, 2, 3, 4]] * 400).pvalue > 1e-6
    big = np.asarray(gen.choice(1000, 900, replace=False, p=np.full(1000, 1e-3)))
    assert len(np.unique(big)) == 900


@pytest.mark.parametrize("p", [[0.5, 0.6, -0.1], [0.5, 0.4, 0.0], [0.5, np.nan, 0.5]],
                         ids=["negative", "sum below 1", "nan"])
def test_choice_refuses_bad_probabilities_on_the_device(xp, gen, p):
    with pytest.raises(InvalidMessage) as info:
        gen.choice(3, 10, p=xp.asarray(np.array(p)))
    assert info.value.field == "p"


@pytest.mark.parametrize("replace", [True, False])
@pytest.mark.parametrize("pop", [3, 5000])
def test_a_refused_choice_leaves_the_generator_as_it_was(xp, rng, replace, pop):
    """The values of a device ``p`` are checked after the draws are posted (the read
    overlaps them); a refusal gives those draws back: the next values are those of a
    generator that never saw the call, as NumPy's generator after its ValueError."""
    seed = seed_of(rng)
    bad = np.full(pop, 1.0 / pop)
    bad[-1] = -bad[-1]
    g = xp.random.default_rng(seed)
    g.random(3)
    with pytest.raises(InvalidMessage) as info:
        g.choice(pop, 2, replace=replace, p=xp.asarray(bad))
    assert info.value.field == "p"
    fresh = xp.random.default_rng(seed)
    fresh.random(3)
    assert np.array_equal(np.asarray(g.random(4)), np.asarray(fresh.random(4)))
    # an accepted device p with the same draws: the check does not change the sample
    good = np.abs(bad) / np.abs(bad).sum()
    assert np.array_equal(np.asarray(g.choice(pop, 2, replace=replace, p=xp.asarray(good))),
                          np.asarray(fresh.choice(pop, 2, replace=replace, p=good)))


def test_choice_from_arrays_along_an_axis(xp, gen):
    pool = np.arange(30).reshape(5, 6) * 10
    h = np.asarray(gen.choice(xp.asarray(pool), 4))
    assert h.shape == (4, 6) and all(tuple(r) in set(map(tuple, pool)) for r in h)
    h = np.asarray(gen.choice(pool, (2, 3), axis=1, replace=False))
    assert h.shape == (5, 2, 3)
    cols = {tuple(c) for c in pool.T}
    assert all(tuple(h[:, i, j]) in cols for i in range(2) for j in range(3))
    assert len({tuple(h[:, i, j]) for i in range(2) for j in range(3)}) == 6
    with pytest.raises(InvalidMessage) as err:
        gen.choice(np.float64(3.0), 2)
    assert err.value.field == "a"


@pytest.mark.parametrize("pop", [1, 300, 4096, 4097, 6000])
def test_choice_weighted_on_both_sides_of_the_one_kernel_limit(xp, gen, pop):
    """Up to 4096 weights the running sum and the searches are one kernel; beyond, the
    namespace's calls. Either way the draws follow the weights (chi-square), zero weights are
    never drawn, and a strided ``p`` (a view) is read with its stride."""
    rng = np.random.default_rng(pop)
    w = rng.random(pop) + 0.5
    w[::7] = 0.0 if pop > 1 else 1.0  # zero weights at both ends and inside
    w[-1] = 0.0 if pop > 1 else w[-1]
    p = w / w.sum()
    n = 200_000
    h = np.asarray(gen.choice(pop, n, p=p))
    assert h.min() >= 0 and h.max() < pop
    assert not np.any(p[h] == 0)
    if pop > 1:  # one category: every draw is 0, checked above
        chi2_ok(h, lambda k: p[k], pop - 1, min_expected=5.0)
    doubled = np.zeros(2 * pop)
    doubled[::2] = p
    strided = xp.asarray(doubled)[::2]
    h = np.asarray(gen.choice(pop, (400, 500), p=strided))
    assert h.shape == (400, 500) and not np.any(p[h] == 0)
    if pop > 1:
        chi2_ok(h, lambda k: p[k], pop - 1, min_expected=5.0)


def test_choice_without_replacement_from_a_huge_population_draws_only_the_sample(xp, gen):
    """A sample of at most 1/50 of a population past 10,000 is the first distinct values of a
    stream of draws, not a prefix of a permutation of the whole population (2**40 int64 would
    be 8 TiB): distinct, in range, uniform, in NumPy's shapes."""
    h = np.asarray(gen.choice(2 ** 40, 2000, replace=False))
    assert h.dtype == np.int64 and h.shape == (2000,) and np.unique(h).size == 2000
    assert h.min() >= 0 and h.max() < 2 ** 40
    ks_ok(h / 2.0 ** 40, "uniform")
    assert np.asarray(gen.choice(2 ** 62, (3, 4), replace=False)).shape == (3, 4)
    assert np.asarray(gen.choice(10 ** 9, 0, replace=False)).shape == (0,)
    pool = xp.asarray(np.arange(30_000) * 3)
    picked = np.asarray(gen.choice(pool, 50, replace=False))
    assert np.unique(picked).size == 50 and np.all(picked % 3 == 0)


def test_choice_of_few_without_replacement_is_a_uniform_ordered_sample(xp, gen):
    # 20,000 items, samples of 400 (the stream path): every value and the first position alike
    reps = [np.asarray(gen.choice(20_000, 400, replace=False)) for _ in range(60)]
    assert all(np.unique(r).size == 400 for r in reps)
    values = np.concatenate(reps)
    chi2_ok(values // 200, lambda k: np.full(k.shape, 1 / 100), 99)  # 100 bins of 200 values
    chi2_ok(np.array([r[0] for r in reps]) // 2000, lambda k: np.full(k.shape, 1 / 10), 9,
            min_expected=5.0)
