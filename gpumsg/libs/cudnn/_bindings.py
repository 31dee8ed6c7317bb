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
import dataclasses

from .._loader import Fn, LibrarySpec, LoadedLibrary, P, c_int, c_size_t, c_void_p

__all__ = ["SPEC", "AlgoPerf", "DATA_TYPE", "CROSS_CORRELATION", "MATH_DEFAULT",
           "MATH_TENSOR_OP", "MATH_FMA", "NOT_PROPAGATE_NAN", "FILTER_FORMAT", "SOFTMAX_ACCURATE",
           "SOFTMAX_LOG", "SOFTMAX_MODE", "BN_SPATIAL", "BN_SPATIAL_PERSISTENT", "BN_OPS_BN",
           "OP_TENSOR_ADD", "OP_TENSOR_MUL", "REDUCE_ADD"]

_H = c_void_p
_D = c_void_p  # any descriptor
_IA = P(c_int)  # int array
_F = c_void_p  # pointer to a host scaling factor (float or double)
_DBL = ctypes.c_double

#: cudnnDataType_t
DATA_TYPE = {"f32": 0, "f64": 1, "f16": 2, "bf16": 9}
#: cudnnTensorFormat_t of filters
FILTER_FORMAT = {"NCHW": 0, "NHWC": 1}
CROSS_CORRELATION = 1  # cudnnConvolutionMode_t
MATH_DEFAULT, MATH_TENSOR_OP, MATH_FMA = 0, 1, 3  # cudnnMathType_t
NOT_PROPAGATE_NAN = 0
SOFTMAX_ACCURATE, SOFTMAX_LOG = 1, 2  # cudnnSoftmaxAlgorithm_t
SOFTMAX_MODE = {"instance": 0, "channel": 1}  # cudnnSoftmaxMode_t
BN_SPATIAL, BN_SPATIAL_PERSISTENT = 1, 2  # cudnnBatchNormMode_t
BN_OPS_BN = 0  # cudnnBatchNormOps_t
OP_TENSOR_ADD, OP_TENSOR_MUL = 0, 1  # cudnnOpTensorOp_t
REDUCE_ADD = 0  # cudnnReduceTensorOp_t


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
        # (handle, alpha, xDesc, x, beta, yDesc, y): y = alpha x + beta y, same dims, any
        # strides (a layout change)
        Fn("cudnnTransformTensor", c_int, (_H, _F, _D, c_void_p, _F, _D, c_void_p)),
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
        # -- batch normalization (cudnnBatchNormMode_t, double factor and epsilon) --
        Fn("cudnnDeriveBNTensorDescriptor", c_int, (_D, _D, c_int)),
        # (handle, mode, alpha, beta, xDesc, x, yDesc, y, bnDesc, scale, bias, factor,
        #  runningMean, runningVar, epsilon, saveMean, saveInvVar)
        Fn("cudnnBatchNormalizationForwardTraining", c_int,
           (_H, c_int, _F, _F, _D, c_void_p, _D, c_void_p, _D, c_void_p, c_void_p, _DBL,
            c_void_p, c_void_p, _DBL, c_void_p, c_void_p)),
        # (handle, mode, alpha, beta, xDesc, x, yDesc, y, bnDesc, scale, bias, mean, var, eps)
        Fn("cudnnBatchNormalizationForwardInference", c_int,
           (_H, c_int, _F, _F, _D, c_void_p, _D, c_void_p, _D, c_void_p, c_void_p, c_void_p,
            c_void_p, _DBL)),
        # (handle, mode, alphaData, betaData, alphaParam, betaParam, xDesc, x, dyDesc, dy,
        #  dxDesc, dx, bnDesc, scale, dScale, dBias, epsilon, savedMean, savedInvVar)
        Fn("cudnnBatchNormalizationBackward", c_int,
           (_H, c_int, _F, _F, _F, _F, _D, c_void_p, _D, c_void_p, _D, c_void_p, _D, c_void_p,
            c_void_p, c_void_p, _DBL, c_void_p, c_void_p)),
        # (handle, mode, bnOps, xDesc, zDesc, yDesc, bnDesc, actDesc, *bytes)
        Fn("cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize", c_int,
           (_H, c_int, c_int, _D, _D, _D, _D, _D, P(c_size_t))),
        # (handle, mode, bnOps, xDesc, yDesc, dyDesc, dzDesc, dxDesc, bnDesc, actDesc, *bytes)
        Fn("cudnnGetBatchNormalizationBackwardExWorkspaceSize", c_int,
           (_H, c_int, c_int, _D, _D, _D, _D, _D, _D, _D, P(c_size_t))),
        # (handle, mode, bnOps, actDesc, xDesc, *bytes)
        Fn("cudnnGetBatchNormalizationTrainingExReserveSpaceSize", c_int,
           (_H, c_int, c_int, _D, _D, P(c_size_t))),
        # (handle, mode, bnOps, alpha, beta, xDesc, x, zDesc, z, yDesc, y, bnDesc, scale, bias,
        #  factor, runningMean, runningVar, eps, saveMean, saveInvVar, actDesc, ws, wsBytes,
        #  reserve, reserveBytes)
        Fn("cudnnBatchNormalizationForwardTrainingEx", c_int,
           (_H, c_int, c_int, _F, _F, _D, c_void_p, _D, c_void_p, _D, c_void_p, _D, c_void_p,
            c_void_p, _DBL, c_void_p, c_void_p, _DBL, c_void_p, c_void_p, _D, c_void_p,
            c_size_t, c_void_p, c_size_t)),
        # (handle, mode, bnOps, alphaData, betaData, alphaParam, betaParam, xDesc, x, yDesc, y,
        #  dyDesc, dy, dzDesc, dz, dxDesc, dx, bnDesc, scale, bias, dScale, dBias, eps,
        #  savedMean, savedInvVar, actDesc, ws, wsBytes, reserve, reserveBytes)
        Fn("cudnnBatchNormalizationBackwardEx", c_int,
           (_H, c_int, c_int, _F, _F, _F, _F, _D, c_void_p, _D, c_void_p, _D, c_void_p, _D,
            c_void_p, _D, c_void_p, _D, c_void_p, c_void_p, c_void_p, c_void_p, _DBL, c_void_p,
            c_void_p, _D, c_void_p, c_size_t, c_void_p, c_size_t)),
        # -- dropout --
        Fn("cudnnCreateDropoutDescriptor", c_int, (P(_D),)),
        Fn("cudnnDestroyDropoutDescriptor", c_int, (_D,)),
        Fn("cudnnDropoutGetStatesSize", c_int, (_H, P(c_size_t))),
        Fn("cudnnDropoutGetReserveSpaceSize", c_int, (_D, P(c_size_t))),
        # (desc, handle, dropout, states, statesBytes, seed): initializes the states (a kernel)
        Fn("cudnnSetDropoutDescriptor", c_int,
           (_D, _H, ctypes.c_float, c_void_p, c_size_t, ctypes.c_ulonglong)),
        # (handle, desc, xDesc, x, yDesc, y, reserve, reserveBytes)
        Fn("cudnnDropoutForward", c_int,
           (_H, _D, _D, c_void_p, _D, c_void_p, c_void_p, c_size_t)),
        # (handle, desc, dyDesc, dy, dxDesc, dx, reserve, reserveBytes)
        Fn("cudnnDropoutBackward", c_int,
           (_H, _D, _D, c_void_p, _D, c_void_p, c_void_p, c_size_t)),
        # -- tensor arithmetic (the affine part of layer and group norms) --
        Fn("cudnnCreateOpTensorDescriptor", c_int, (P(_D),)),
        Fn("cudnnDestroyOpTensorDescriptor", c_int, (_D,)),
        # (desc, op, compType, nanOpt)
        Fn("cudnnSetOpTensorDescriptor", c_int, (_D, c_int, c_int, c_int)),
        # (handle, desc, alpha1, aDesc, A, alpha2, bDesc, B, beta, cDesc, C):
        # C = op(alpha1 A, alpha2 B) + beta C, B broadcast over C
        Fn("cudnnOpTensor", c_int, (_H, _D, _F, _D, c_void_p, _F, _D, c_void_p, _F, _D,
                                    c_void_p)),
        # (handle, yDesc, y, *value)
        Fn("cudnnSetTensor", c_int, (_H, _D, c_void_p, _F)),
        Fn("cudnnCreateReduceTensorDescriptor", c_int, (P(_D),)),
        Fn("cudnnDestroyReduceTensorDescriptor", c_int, (_D,)),
        # (desc, op, compType, nanOpt, indices, indicesType)
        Fn("cudnnSetReduceTensorDescriptor", c_int, (_D, c_int, c_int, c_int, c_int, c_int)),
        # (handle, desc, aDesc, cDesc, *bytes)
        Fn("cudnnGetReductionWorkspaceSize", c_int, (_H, _D, _D, _D, P(c_size_t))),
        # (handle, desc, indices, indicesBytes, ws, wsBytes, alpha, aDesc, A, beta, cDesc, C)
        Fn("cudnnReduceTensor", c_int, (_H, _D, c_void_p, c_size_t, c_void_p, c_size_t, _F, _D,
                                        c_void_p, _F, _D, c_void_p)),
    ),
    version=lambda lib: _version(lib),
)


def _version(lib: LoadedLibrary) -> str:
    v = lib.cudnnGetVersion()
    return f"{v // 10000}.{v // 100 % 100}.{v % 100}"


# -- recurrent networks: cuDNN's v8 RNN API (libcudnn_adv; used by libs/cudnn/rnn/handle.py) ---
_I32 = ctypes.c_int32
_U32 = ctypes.c_uint32
#: cudnnRNNAlgo_t
RNN_ALGO = {"standard": 0, "persist_static": 1}
#: linLayerID of an LSTM's recurrent projection in cudnnGetRNNWeightParams
RNN_PROJ_LIN_ID = 8
#: cudnnRNNMode_t
RNN_MODE = {"rnn_relu": 0, "rnn_tanh": 1, "lstm": 2, "gru": 3}
RNN_NO_BIAS, RNN_DOUBLE_BIAS = 0, 2  # cudnnRNNBiasMode_t
RNN_UNIDIRECTIONAL, RNN_BIDIRECTIONAL = 0, 1  # cudnnDirectionMode_t
RNN_LINEAR_INPUT = 0  # cudnnRNNInputMode_t
#: cudnnRNNDataLayout_t
RNN_SEQ_MAJOR_UNPACKED, RNN_SEQ_MAJOR_PACKED, RNN_BATCH_MAJOR_UNPACKED = 0, 1, 2
RNN_PADDED_IO_DISABLED, RNN_PADDED_IO_ENABLED = 0, 1  # auxFlags of cudnnSetRNNDescriptor_v8
FWD_MODE_INFERENCE, FWD_MODE_TRAINING = 0, 1  # cudnnForwardMode_t
WGRAD_MODE_ADD = 0  # cudnnWgradMode_t (cuDNN 9's cudnnRNNBackwardWeights_v8 only adds)

RNN_FUNCTIONS = (
    Fn("cudnnCreateRNNDescriptor", c_int, (P(_D),)),
    Fn("cudnnDestroyRNNDescriptor", c_int, (_D,)),
    # (desc, algo, cellMode, biasMode, dirMode, inputMode, dataType, mathPrec, mathType,
    #  inputSize, hiddenSize, projSize, numLayers, dropoutDesc, auxFlags)
    Fn("cudnnSetRNNDescriptor_v8", c_int,
       (_D, c_int, c_int, c_int, c_int, c_int, c_int, c_int, c_int, _I32, _I32, _I32, _I32, _D,
        _U32)),
    Fn("cudnnCreateRNNDataDescriptor", c_int, (P(_D),)),
    Fn("cudnnDestroyRNNDataDescriptor", c_int, (_D,)),
    # (desc, dataType, layout, maxSeqLength, batchSize, vectorSize, seqLengthArray[] (host),
    #  *paddingFill (host, the data type's value; NULL: padding left undefined))
    Fn("cudnnSetRNNDataDescriptor", c_int,
       (_D, c_int, c_int, c_int, c_int, c_int, _IA, c_void_p)),
    # (handle, rnnDesc, *weightSpaceSize)
    Fn("cudnnGetRNNWeightSpaceSize", c_int, (_H, _D, P(c_size_t))),
    # (handle, rnnDesc, fwdMode, xDesc, *workSpaceSize, *reserveSpaceSize)
    Fn("cudnnGetRNNTempSpaceSizes", c_int, (_H, _D, c_int, _D, P(c_size_t), P(c_size_t))),
    # (handle, rnnDesc, pseudoLayer, weightSpaceSize, weightSpace, linLayerID, mDesc, *mAddr,
    #  bDesc, *bAddr)
    Fn("cudnnGetRNNWeightParams", c_int,
       (_H, _D, _I32, c_size_t, c_void_p, _I32, _D, P(c_void_p), _D, P(c_void_p))),
    # (desc, nbDimsRequested, *dataType, *nbDims, dimA[], strideA[])
    Fn("cudnnGetTensorNdDescriptor", c_int, (_D, c_int, P(c_int), P(c_int), _IA, _IA)),
    # (handle, rnnDesc, fwdMode, devSeqLengths, xDesc, x, yDesc, y, hDesc, hx, hy, cDesc, cx,
    #  cy, weightSpaceSize, weightSpace, workSpaceSize, workSpace, reserveSpaceSize,
    #  reserveSpace)
    Fn("cudnnRNNForward", c_int,
       (_H, _D, c_int, c_void_p, _D, c_void_p, _D, c_void_p, _D, c_void_p, c_void_p, _D,
        c_void_p, c_void_p, c_size_t, c_void_p, c_size_t, c_void_p, c_size_t, c_void_p)),
    # (handle, rnnDesc, devSeqLengths, yDesc, y, dy, xDesc, dx, hDesc, hx, dhy, dhx, cDesc, cx,
    #  dcy, dcx, weightSpaceSize, weightSpace, workSpaceSize, workSpace, reserveSpaceSize,
    #  reserveSpace)
    Fn("cudnnRNNBackwardData_v8", c_int,
       (_H, _D, c_void_p, _D, c_void_p, c_void_p, _D, c_void_p, _D, c_void_p, c_void_p,
        c_void_p, _D, c_void_p, c_void_p, c_void_p, c_size_t, c_void_p, c_size_t, c_void_p,
        c_size_t, c_void_p)),
    # (handle, rnnDesc, addGrad, devSeqLengths, xDesc, x, hDesc, hx, yDesc, y, weightSpaceSize,
    #  dweightSpace, workSpaceSize, workSpace, reserveSpaceSize, reserveSpace)
    Fn("cudnnRNNBackwardWeights_v8", c_int,
       (_H, _D, c_int, c_void_p, _D, c_void_p, _D, c_void_p, _D, c_void_p, c_size_t, c_void_p,
        c_size_t, c_void_p, c_size_t, c_void_p)),
    # (desc, handle, dropout, states, statesBytes, seed): points a dropout descriptor at states
    # already initialized by cudnnSetDropoutDescriptor (host only, no kernel)
    Fn("cudnnRestoreDropoutDescriptor", c_int,
       (_D, _H, ctypes.c_float, c_void_p, c_size_t, ctypes.c_ulonglong)),
)
SPEC = dataclasses.replace(SPEC, functions=SPEC.functions + RNN_FUNCTIONS)
__all__ += ["RNN_FUNCTIONS", "RNN_ALGO", "RNN_MODE", "RNN_PROJ_LIN_ID"]
