"""The generator's bit source: a Philox4x32-10 key and launch counter for the sampling kernels,
and a cuRAND Philox generator for the normal, log-normal and Poisson draws cuRAND makes in one
pass.

Both come from one :class:`numpy.random.SeedSequence`, as NumPy's bit generators do: the same
seed gives the same streams on the same backend, and :meth:`PhiloxStreams.spawn` derives
independent children from the sequence's spawn tree.
"""

from __future__ import annotations

import numbers
import threading
from typing import Any

import numpy as np

from ...errors import InvalidMessage
from .. import _dtypes as D
from .._array import Array, new_array

__all__ = ["PhiloxStreams", "seed_sequence"]


def seed_sequence(seed: Any) -> np.random.SeedSequence:
    """NumPy's seeds: None (fresh entropy), a non-negative int, a sequence of them, a
    SeedSequence, or a NumPy BitGenerator or Generator (its seed sequence)."""
    if isinstance(seed, np.random.Generator):
        seed = seed.bit_generator
    if isinstance(seed, np.random.BitGenerator):
        seed = getattr(seed, "seed_seq", None) or getattr(seed, "_seed_seq", None)
    if isinstance(seed, np.random.SeedSequence):
        return seed
    if seed is None:
        return np.random.SeedSequence()
    ints = seed if isinstance(seed, (list, tuple, np.ndarray)) else [seed]
    for v in np.asarray(ints, dtype=object).reshape(-1):
        if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < 0:
            raise InvalidMessage(f"seed: expected None, a non-negative int, a sequence of them "
                                 f"or a SeedSequence, got {seed!r}", field="seed")
    return np.random.SeedSequence(seed if not isinstance(seed, numbers.Integral)
                                  else int(seed))


class PhiloxStreams:
    """The bit source of a :class:`~gpumsg.array_api.random.Generator` (its
    ``bit_generator``): ``seed_seq``, ``key`` (the 64-bit Philox key of the kernels),
    ``counter`` (the number of kernel launches so far: launch ``c`` draws from counters
    ``(element, draw, c)``), and ``curand`` (the device's cuRAND Philox generator, made on first
    use)."""

    def __init__(self, dev: Any, seq: np.random.SeedSequence) -> None:
        self._dev = dev
        self.seed_seq = seq
        words = seq.generate_state(4, np.uint32)
        self.key = int(words[0]) | (int(words[1]) << 32)
        self._curand_seed = int(words[2]) | (int(words[3]) << 32)
        self.counter = 0
        self._lock = threading.Lock()
        self._curand: Any = None

    def __repr__(self) -> str:
        return f"<gpumsg PhiloxStreams key={self.key:#018x} counter={self.counter}>"

    def next_launch(self) -> int:
        """The counter word of a new launch (each launch draws from its own counters)."""
        with self._lock:
            c = self.counter
            self.counter = c + 1
        if c >= 1 << 32:
            raise InvalidMessage("generator: 2**32 launches drawn from one key; spawn a new "
                                 "generator", field="generator")
        return c

    def rewind(self, start: int, end: int) -> None:
        """Give back the launches ``start`` to ``end - 1`` drawn by a call that then failed
        (its draws discarded), as NumPy's generator is left as it was by a call that raises;
        only while nothing was drawn since (a later launch keeps its counters unique)."""
        with self._lock:
            if self.counter == end:
                self.counter = start

    @property
    def curand(self) -> Any:
        """The cuRAND Philox generator of the normal, log-normal and Poisson draws."""
        gen = self._curand
        if gen is None:
            with self._lock:
                if self._curand is None:
                    self._curand = self._dev.curand.generator("philox",
                                                              seed=self._curand_seed)
                gen = self._curand
        return gen

    def random_raw(self, size: Any = None) -> Array:
        """Raw 64-bit words (uint64) of the kernels' stream (``size`` as NumPy's)."""
        from ._kernels import launch_integers
        from ._params import size_shape

        shape = size_shape(size) or ()
        out = new_array(self._dev, shape, D.uint64)
        launch_integers(out, 0, (1 << 64) - 1, self.key, self.next_launch())
        return out

    def spawn(self, n_children: int) -> list[PhiloxStreams]:
        """``n_children`` independent bit sources from the seed sequence's spawn tree."""
        return [PhiloxStreams(self._dev, s) for s in self.seed_seq.spawn(int(n_children))]

    def close(self) -> None:
        """Destroy the cuRAND generator now (also done when it is garbage collected)."""
        if self._curand is not None:
            self._curand.close()
