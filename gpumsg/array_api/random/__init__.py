"""NumPy's ``numpy.random.Generator`` on gpumsg arrays::

    import gpumsg.array_api as xp
    rng = xp.random.default_rng(42)
    x = rng.standard_normal((1000, 64), dtype=xp.float32)
    k = rng.binomial(xp.asarray([10, 100, 1000]), 0.3)     # parameters broadcast
    perm = rng.permutation(1 << 20)

Every method of NumPy's Generator, with its signature (``size=``, ``dtype=`` and ``out=`` where
NumPy has them), answering gpumsg arrays at once. The numbers come from cuRAND's Philox
generator (the normal family and Poisson means up to 1000, through ``dev.curand``) and from
generated kernels in which each element runs the distribution's sampler on its own Philox4x32-10
stream (:mod:`._philox`), looping for fresh uniforms where the sampler rejects: Marsaglia-Tsang
gamma, PTRS Poisson, BTRS and inversion binomial, and the others (:mod:`._samplers`).
Permutations and ``choice`` sort random keys with the namespace's ``argsort``.

The same seed gives the same numbers on the same backend (the simulator's twins follow the same
per-element streams, so integer results agree with the GPU's and floating ones to rounding);
they are not NumPy's numbers. Bad parameters raise :class:`~gpumsg.errors.InvalidMessage` (a
``ValueError``, as NumPy raises) naming the parameter.
"""

from ._bitgen import PhiloxStreams
from ._generator import Generator, default_rng

__all__ = ["Generator", "PhiloxStreams", "default_rng"]
