"""cuDNN 9 bindings as data: the legacy (v7-style) descriptor API that gpumsg calls.

cuDNN 9 splits into sub-libraries (libcudnn_graph, libcudnn_ops, libcudnn_cnn, ...);
``libcudnn.so.9`` (cuda-pathfinder's "cudnn") is a shim that exports the whole public API and
loads the sub-library that implements each call, so everything is bound through it. The
convolutions (``cudnnConvolution*``, deprecated but present in cuDNN 9, in libcudnn_cnn) and the
tensor/activation helpers (libcudnn_ops) are the legacy API: a descriptor per tensor, heuristics
through ``cudnnGet*Algorithm_v7``.
"""

from __future__ import annotations

import ctypes

from ..loader import Fn, LibrarySpec, LoadedLibrary, P, c_int, c_size_t, c_void_p

__all__ = ["SPEC", "AlgoPerf", "DATA_TYPE", "CROSS_CORRELATION", "MATH_DEFAULT",
           "MATH_TENSOR_OP", "MATH_FMA", "NOT_PROPAGATE_NAN", "FILTER_FORMAT", "SOFTMAX_ACCURATE",
           "SOFTMAX_LOG", "SOFTMAX_MODE"]

_H = c_void_p
_D = c_void_p  # any descriptor
_IA = P(c_int)  # int array
_F = c_void_p  # pointer to a host scaling factor (float or double)

#: cudnnDataType_t
DATA_TYPE = {"f32": 0, "f64": 1, "f16": 2, "bf16": 9}
#: cudnnTensorFormat_t of filters
FILTER_FORMAT = {"NCHW": 0, "NHWC": 1}
CROSS_CORRELATION = 1  # cudnnConvolutionMode_t
MATH_DEFAULT, MATH_TENSOR_OP, MATH_FMA = 0, 1, 3  # cudnnMathType_t
NOT_PROPAGATE_NAN = 0
SOFTMAX_ACCURATE, SOFTMAX_LOG = 1, 2  # cudnnSoftmaxAlgorithm_t
SOFTMAX_MODE = {"instance": 0, "channel": 1}  # cudnnSoftmaxMode_t


class AlgoPerf(ctypes.Structure):
    """cudnnConvolution{Fwd,BwdData,BwdFilter}AlgoPerf_t (the three share this layout)."""

    _fields_ = [("algo", c_int), ("status", c_int), ("time", ctypes.c_float),
                ("memory", c_size_t), ("determinism", c_int), ("mathType", c_int),
                ("reserved", c_int * 3)]


SPEC = LibrarySpec(
    name="cudnn",
    functions=(
        Fn("cudnnGetVersion", c_size_t, ()),
        Fn("cudnnGetErrorString", ctypes.c_char_p, (c_int,)),
        Fn("cudnnCreate", c_int, (P(_H),)),
        Fn("cudnnDestroy", c_int, (_H,)),
        Fn("cudnnSetStream", c_int, (_H, c_void_p)),
        Fn("cudnnCreateTensorDescriptor", c_int, (P(_D),)),
        Fn("cudnnSetTensorNdDescriptor", c_int, (_D, c_int, c_int, _IA, _IA)),
        Fn("cudnnDestroyTensorDescriptor", c_int, (_D,)),
        Fn("cudnnCreateFilterDescriptor", c_int, (P(_D),)),
        Fn("cudnnSetFilterNdDescriptor", c_int, (_D, c_int, c_int, c_int, _IA)),
        Fn("cudnnDestroyFilterDescriptor", c_int, (_D,)),
        Fn("cudnnCreateConvolutionDescriptor", c_int, (P(_D),)),
        Fn("cudnnSetConvolutionNdDescriptor", c_int, (_D, c_int, _IA, _IA, _IA, c_int, c_int)),
        Fn("cudnnSetConvolutionGroupCount", c_int, (_D, c_int)),
        Fn("cudnnSetConvolutionMathType", c_int, (_D, c_int)),
        Fn("cudnnDestroyConvolutionDescriptor", c_int, (_D,)),
        Fn("cudnnCreateActivationDescriptor", c_int, (P(_D),)),
        Fn("cudnnSetActivationDescriptor", c_int, (_D, c_int, c_int, ctypes.c_double)),
        Fn("cudnnSetActivationDescriptorSwishBeta", c_int, (_D, ctypes.c_double)),
        Fn("cudnnDestroyActivationDescriptor", c_int, (_D,)),
        # (handle, xDesc, wDesc, convDesc, yDesc, requested, *returned, *perf)
        Fn("cudnnGetConvolutionForwardAlgorithm_v7", c_int,
           (_H, _D, _D, _D, _D, c_int, P(c_int), P(AlgoPerf))),
        # (handle, wDesc, dyDesc, convDesc, dxDesc, requested, *returned, *perf)
        Fn("cudnnGetConvolutionBackwardDataAlgorithm_v7", c_int,
           (_H, _D, _D, _D, _D, c_int, P(c_int), P(AlgoPerf))),
        # (handle, xDesc, dyDesc, convDesc, dwDesc, requested, *returned, *perf)
        Fn("cudnnGetConvolutionBackwardFilterAlgorithm_v7", c_int,
           (_H, _D, _D, _D, _D, c_int, P(c_int), P(AlgoPerf))),
        # (handle, alpha, xDesc, x, wDesc, w, convDesc, algo, ws, wsBytes, beta, yDesc, y)
        Fn("cudnnConvolutionForward", c_int,
           (_H, _F, _D, c_void_p, _D, c_void_p, _D, c_int, c_void_p, c_size_t, _F, _D,
            c_void_p)),
        # (handle, alpha, wDesc, w, dyDesc, dy, convDesc, algo, ws, wsBytes, beta, dxDesc, dx)
        Fn("cudnnConvolutionBackwardData", c_int,
           (_H, _F, _D, c_void_p, _D, c_void_p, _D, c_int, c_void_p, c_size_t, _F, _D,
            c_void_p)),
        # (handle, alpha, xDesc, x, dyDesc, dy, convDesc, algo, ws, wsBytes, beta, dwDesc, dw)
        Fn("cudnnConvolutionBackwardFilter", c_int,
           (_H, _F, _D, c_void_p, _D, c_void_p, _D, c_int, c_void_p, c_size_t, _F, _D,
            c_void_p)),
        # (handle, alpha, biasDesc, bias, beta, yDesc, y): y = alpha bias + beta y, broadcast
        Fn("cudnnAddTensor", c_int, (_H, _F, _D, c_void_p, _F, _D, c_void_p)),
        # (handle, actDesc, alpha, xDesc, x, beta, yDesc, y)
        Fn("cudnnActivationForward", c_int,
           (_H, _D, _F, _D, c_void_p, _F, _D, c_void_p)),
        # (handle, actDesc, alpha, yDesc, y, dyDesc, dy, xDesc, x, beta, dxDesc, dx)
        Fn("cudnnActivationBackward", c_int,
           (_H, _D, _F, _D, c_void_p, _D, c_void_p, _D, c_void_p, _F, _D, c_void_p)),
        # (handle, algo, mode, alpha, xDesc, x, beta, yDesc, y)
        Fn("cudnnSoftmaxForward", c_int, (_H, c_int, c_int, _F, _D, c_void_p, _F, _D, c_void_p)),
        # (handle, algo, mode, alpha, yDesc, y, dyDesc, dy, beta, dxDesc, dx)
        Fn("cudnnSoftmaxBackward", c_int,
           (_H, c_int, c_int, _F, _D, c_void_p, _D, c_void_p, _F, _D, c_void_p)),
        Fn("cudnnCreatePoolingDescriptor", c_int, (P(_D),)),
        # (desc, mode, nanOpt, nbDims, window[], padding[], stride[])
        Fn("cudnnSetPoolingNdDescriptor", c_int, (_D, c_int, c_int, c_int, _IA, _IA, _IA)),
        Fn("cudnnDestroyPoolingDescriptor", c_int, (_D,)),
        # (handle, poolDesc, alpha, xDesc, x, beta, yDesc, y)
        Fn("cudnnPoolingForward", c_int, (_H, _D, _F, _D, c_void_p, _F, _D, c_void_p)),
        # (handle, poolDesc, alpha, yDesc, y, dyDesc, dy, xDesc, x, beta, dxDesc, dx)
        Fn("cudnnPoolingBackward", c_int,
           (_H, _D, _F, _D, c_void_p, _D, c_void_p, _D, c_void_p, _F, _D, c_void_p)),
    ),
    version=lambda lib: _version(lib),
)


def _version(lib: LoadedLibrary) -> str:
    v = lib.cudnnGetVersion()
    return f"{v // 10000}.{v // 100 % 100}.{v % 100}"
