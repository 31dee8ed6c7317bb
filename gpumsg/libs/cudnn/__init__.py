"""cuDNN: convolutions (1-D/2-D/3-D forward, backward data, backward filter; NCHW and NHWC;
stride, padding, dilation, groups; f32, TF32, f16, bf16) with bias and activation, through
cuDNN 9's graph API where the ``nvidia-cudnn-frontend`` package is installed (``graph.py``) and
its legacy descriptor API otherwise, the plan chosen once per problem by cuDNN's heuristics or
a timed search (``algo="find"``).

Same layout as every library folder (see :mod:`gpumsg.libs.cublas`): ``bindings.py``,
``handle.py`` (the device's cuDNN handle: convolutions, activations, pooling, softmax,
normalizations, dropout; the RNNs share it), ``handlers.py``, ``sim.py``, ``client.py``, with
``graph.py`` (the frontend glue of convolutions and attention) and ``namespaces.py`` (the two
Device namespaces over all of cuDNN's client classes). Beside them, one sub-package per part
with a client, handlers, simulator and handle of its own, each the same four files:

- ``attention/``: scaled dot-product attention, the library ``cudnn_attention``
  (:mod:`gpumsg.messages.cudnn_attention`);
- ``rnn/``: RNNs through cuDNN's v8 API, the library ``cudnn_rnn``
  (:mod:`gpumsg.messages.cudnn_rnn`);

and ``kernels/``: gpumsg's own NVRTC kernels the handle runs where cuDNN has none or a slower
one (layer norm, GELU, row softmax, batch-norm inference, on the shared ``rowkern.py``), and
``nn/``: ``dev.nn``, torch.nn.functional's calls with torch's signatures, built on the
messages here (over reshaped views of the buffers) and on generated kernels launched from the
caller's side for what cuDNN lacks (pad, interpolate, embedding, adaptive pooling, losses).

Client namespaces: ``dev.nn`` (torch's signatures) and ``dev.cudnn`` (raw cuDNN, gpumsg's
arguments).
Messages: :mod:`gpumsg.messages.cudnn`, :mod:`gpumsg.messages.cudnn_attention`,
:mod:`gpumsg.messages.cudnn_rnn`.
"""

from ...messages import cudnn as dnn
from ...messages.cudnn import (
    Activation,
    ActivationBackward,
    BatchNormInference,
    ConvBackwardData,
    ConvBackwardFilter,
    ConvForward,
    IndexCheck,
    LayerNorm,
    Pool,
    PoolBackward,
    Softmax,
    SoftmaxBackward,
)
from ...messages.graph import capturable
from ...service._executor import runs_inline
from ...service._registry import messages_in, placed, register_library
from .._namespace import register_namespace
from . import _handlers as handlers  # noqa: F401  (registers the message handlers)
from ._bindings import SPEC
from ._client import Dnn
from ._handle import DnnHandle
from ._namespaces import Cudnn, Nn
from ._sim import SimDnn

LIBRARY = register_library("cudnn", cuda=DnnHandle, sim=SimDnn, namespace="cudnn",
                           client=Cudnn, specs=(SPEC,), per_stream=True)
register_namespace("nn", Nn)
# dev.graph() may record convolutions that ran once before (see DnnHandle.conv), and pooling,
# activations, softmaxes, batch-norm inference and layer-norm forwards (their own kernels,
# GELU's, the row softmax's, bn_infer's and layer_norm's, once built)
capturable(ConvForward, ConvBackwardData, ConvBackwardFilter, Activation, ActivationBackward,
           Softmax, SoftmaxBackward, Pool, PoolBackward, BatchNormInference, LayerNorm,
           libraries=("cudnn",))
# each compute stream of the pool has its own handle, plans and workspace: any may run them
# (RNNs and attention, whose descriptors and plans the device keeps once, run on the first)
placed(*messages_in(dnn, dnn.DnnCacheInfo))
# an index check enqueues a read of its flag and answers at completion: a caller may run it
runs_inline(IndexCheck)

# RNNs (v8 API): their own descriptor caches on the device's cuDNN handle; methods join dev.cudnn
from .rnn import _handlers as rnn_handlers  # noqa: E402, F401  (registers the handlers)
from .rnn._handle import RnnHandle  # noqa: E402
from .rnn._sim import SimRnn  # noqa: E402

RNN_LIBRARY = register_library("cudnn_rnn", cuda=RnnHandle, sim=SimRnn)

# attention: a library of its own, "cudnn_attention", registered by its handlers module
from .attention import _handlers as attention_handlers  # noqa: E402, F401

__all__ = ["LIBRARY", "SPEC", "Cudnn", "Dnn", "DnnHandle", "Nn", "SimDnn"]
