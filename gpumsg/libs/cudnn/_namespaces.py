"""cuDNN's two Device namespaces over its three implementation classes (convolutions and
normalizations: :class:`~.client.Dnn`; attention: :class:`~.attention.client.DnnAttention`;
RNNs: :class:`~.rnn.client.DnnRnn`): ``dev.nn`` shows the calls named as in
``torch.nn.functional``, ``dev.cudnn`` every other one. A name lives in one of them only."""

from __future__ import annotations

from .._namespace import view
from ._client import Dnn
from .attention._client import DnnAttention
from .rnn._client import DnnRnn

__all__ = ["Cudnn", "NN_NAMES", "Nn"]

#: the calls named as in torch.nn.functional (their arguments are gpumsg's: see each method)
NN_NAMES = ("conv1d", "conv2d", "conv3d", "softmax", "layer_norm", "group_norm",
            "instance_norm", "dropout", "scaled_dot_product_attention")
_IMPLS = (Dnn, DnnAttention, DnnRnn)

Nn = view("Nn", "torch.nn.functional-named calls through cuDNN (``dev.nn``).", _IMPLS, NN_NAMES)
Cudnn = view("Cudnn", "Raw cuDNN (``dev.cudnn``): convolutions and their gradients, "
             "activations, pooling, normalizations' other forms and gradients, dropout's "
             "reserve and gradient, attention's gradient, RNNs and the plan caches.", _IMPLS,
             sorted({n for impl in _IMPLS for n in vars(impl) if not n.startswith("_")}
                    - set(NN_NAMES)))
