"""cuDNN's two Device namespaces: ``dev.nn`` (:class:`~.nn.Nn`, torch.nn.functional's calls
with torch's signatures, built on the messages below and generated kernels) and ``dev.cudnn``
(raw cuDNN over its three implementation classes: convolutions and normalizations,
:class:`~.client.Dnn`; attention, :class:`~.attention.client.DnnAttention`; RNNs,
:class:`~.rnn.client.DnnRnn`), with gpumsg's own arguments, statistics, reserves and
gradients."""

from __future__ import annotations

from .._namespace import view
from ._client import Dnn
from .attention._client import DnnAttention
from .nn import Nn
from .rnn._client import DnnRnn

__all__ = ["Cudnn", "Nn"]

_IMPLS = (Dnn, DnnAttention, DnnRnn)

Cudnn = view("Cudnn", "Raw cuDNN (``dev.cudnn``): convolutions and their gradients, "
             "activations, pooling, softmaxes, normalizations with their statistics and "
             "gradients, dropout with its reserve, attention and its gradient, RNNs and the "
             "plan caches.", _IMPLS,
             sorted({n for impl in _IMPLS for n in vars(impl) if not n.startswith("_")}))
