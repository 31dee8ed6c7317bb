"""``dev.nn``: torch.nn.functional's calls with its signatures and meanings, on gpumsg
buffers (C-ordered, in torch's shapes). Each is cuDNN's operation where cuDNN has one (a
message on a reshaped view of the buffers where torch's shape is not cuDNN's) and a generated
kernel otherwise (``kernels.py``: one CUDA program compiled with NVRTC once per device, with
NumPy twins for the simulator). Every call returns ONE future: of the new output buffer (or of
``out=``, gpumsg's one addition to torch's signatures), or of a tuple where torch returns one
(``adaptive_max_pool*`` with ``return_indices``). The raw cuDNN calls, with their statistics,
reserves and gradients, stay in ``dev.cudnn``.

``base.py`` (shared helpers), ``conv_pool.py`` (convolutions, transposed convolutions,
pooling, adaptive pooling), ``activations.py`` (activations, softmaxes, normalizations,
dropout, attention), ``resample.py`` (pad, interpolate, embedding), ``losses.py``,
``kernels.py`` (the CUDA source and its launches) and ``twins.py`` (their NumPy twins).
"""

from __future__ import annotations

from . import _twins  # noqa: F401  (registers the kernels' NumPy twins)
from ._activations import Activations
from ._conv_pool import ConvPool
from ._losses import Losses
from ._resample import Resample

__all__ = ["Nn"]


class Nn(ConvPool, Activations, Resample, Losses):
    """``dev.nn``: torch.nn.functional-named calls with torch's signatures (see
    docs/libraries/cudnn.md for each call's layouts and dtypes)."""
