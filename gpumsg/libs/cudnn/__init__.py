"""cuDNN: convolutions (1-D/2-D/3-D forward, backward data, backward filter; NCHW and NHWC;
stride, padding, dilation, groups; f32, TF32, f16, bf16) with bias and activation, through
cuDNN 9's graph API where the ``nvidia-cudnn-frontend`` package is installed (``graph.py``) and
its legacy descriptor API otherwise, the plan chosen once per problem by cuDNN's heuristics or
a timed search (``algo="find"``).

Same layout as every library folder (see :mod:`gpumsg.libs.cublas`). Client namespaces:
``dev.nn`` (torch.nn.functional names) and ``dev.cudnn`` (the rest). Messages:
:mod:`gpumsg.messages.cudnn`.
"""

from ...messages.cudnn import (
    Activation,
    ActivationBackward,
    BatchNormInference,
    ConvBackwardData,
    ConvBackwardFilter,
    ConvForward,
    LayerNorm,
    Pool,
    PoolBackward,
    Softmax,
    SoftmaxBackward,
)
from ...messages.graph import capturable
from ...service.registry import register_library
from ..namespace import register_namespace
from . import handlers  # noqa: F401  (registers the message handlers)
from .bindings import SPEC
from .client import Dnn
from .handle import DnnHandle
from .namespaces import Cudnn, Nn
from .sim import SimDnn

LIBRARY = register_library("cudnn", cuda=DnnHandle, sim=SimDnn, namespace="cudnn",
                           client=Cudnn, specs=(SPEC,))
register_namespace("nn", Nn)
# dev.graph() may record convolutions that ran once before (see DnnHandle.conv), and pooling,
# activations, softmaxes, batch-norm inference and layer-norm forwards (their own kernels,
# GELU's, the row softmax's, bn_infer's and layer_norm's, once built)
capturable(ConvForward, ConvBackwardData, ConvBackwardFilter, Activation, ActivationBackward,
           Softmax, SoftmaxBackward, Pool, PoolBackward, BatchNormInference, LayerNorm,
           libraries=("cudnn",))

# RNNs (v8 API): their own descriptor caches on the device's cuDNN handle; methods join dev.cudnn
from . import rnn_handlers  # noqa: E402, F401  (registers the message handlers)
from .rnn import RnnHandle  # noqa: E402
from .rnn_sim import SimRnn  # noqa: E402

RNN_LIBRARY = register_library("cudnn_rnn", cuda=RnnHandle, sim=SimRnn)

from . import attention_handlers  # noqa: E402,F401  (attention: library "cudnn_attention")

__all__ = ["LIBRARY", "SPEC", "Cudnn", "Dnn", "DnnHandle", "Nn", "SimDnn"]
