"""cuFFT bindings as data: the plan, execution and work-area functions gpumsg calls, the
transform types and the status names."""

from __future__ import annotations

import ctypes

from .._loader import Fn, LibrarySpec, LoadedLibrary, P, c_int, c_int64, c_size_t, c_void_p

__all__ = ["SPEC", "FFT_TYPE", "EXEC", "XT_TYPE", "FORWARD", "INVERSE", "STATUS_NAMES"]

#: cufftType by (kind, precision)
FFT_TYPE = {
    ("r2c", "f32"): 0x2A, ("c2r", "f32"): 0x2C, ("c2c", "f32"): 0x29,
    ("r2c", "f64"): 0x6A, ("c2r", "f64"): 0x6C, ("c2c", "f64"): 0x69,
}
#: the execution function by (kind, precision); C2C/Z2Z take a direction argument
EXEC = {
    ("c2c", "f32"): "cufftExecC2C", ("r2c", "f32"): "cufftExecR2C",
    ("c2r", "f32"): "cufftExecC2R", ("c2c", "f64"): "cufftExecZ2Z",
    ("r2c", "f64"): "cufftExecD2Z", ("c2r", "f64"): "cufftExecZ2D",
}
#: cudaDataType of the half-precision sides: (precision, complex side) -> type
XT_TYPE = {("f16", False): 2, ("f16", True): 6, ("bf16", False): 14, ("bf16", True): 15}
FORWARD = -1
INVERSE = 1

#: cufftResult -> name
STATUS_NAMES = {
    0: "CUFFT_SUCCESS", 1: "CUFFT_INVALID_PLAN", 2: "CUFFT_ALLOC_FAILED",
    3: "CUFFT_INVALID_TYPE", 4: "CUFFT_INVALID_VALUE", 5: "CUFFT_INTERNAL_ERROR",
    6: "CUFFT_EXEC_FAILED", 7: "CUFFT_SETUP_FAILED", 8: "CUFFT_INVALID_SIZE",
    9: "CUFFT_UNALIGNED_DATA", 10: "CUFFT_INCOMPLETE_PARAMETER_LIST", 11: "CUFFT_INVALID_DEVICE",
    12: "CUFFT_PARSE_ERROR", 13: "CUFFT_NO_WORKSPACE", 14: "CUFFT_NOT_IMPLEMENTED",
    15: "CUFFT_LICENSE_ERROR", 16: "CUFFT_NOT_SUPPORTED",
}

_h = c_int  # cufftHandle
_p = c_void_p
_l = c_int64
_PL = P(c_int64)

SPEC = LibrarySpec(
    name="cufft",
    functions=(
        Fn("cufftGetVersion", c_int, (P(c_int),)),
        Fn("cufftCreate", c_int, (P(_h),)),
        Fn("cufftDestroy", c_int, (_h,)),
        Fn("cufftSetAutoAllocation", c_int, (_h, c_int)),
        # (plan, rank, n, inembed, istride, idist, onembed, ostride, odist, type, batch,
        #  &workSize)
        Fn("cufftMakePlanMany64", c_int,
           (_h, c_int, _PL, _PL, _l, _l, _PL, _l, _l, c_int, _l, P(c_size_t))),
        # (plan, rank, n, inembed, istride, idist, inputtype, onembed, ostride, odist,
        #  outputtype, batch, &workSize, executiontype): the half-precision plans
        Fn("cufftXtMakePlanMany", c_int,
           (_h, c_int, _PL, _PL, _l, _l, c_int, _PL, _l, _l, c_int, _l, P(c_size_t), c_int)),
        Fn("cufftXtExec", c_int, (_h, _p, _p, c_int)),
        Fn("cufftSetWorkArea", c_int, (_h, _p)),
        Fn("cufftSetStream", c_int, (_h, _p)),
        Fn("cufftExecC2C", c_int, (_h, _p, _p, c_int)),
        Fn("cufftExecZ2Z", c_int, (_h, _p, _p, c_int)),
        Fn("cufftExecR2C", c_int, (_h, _p, _p)),
        Fn("cufftExecD2Z", c_int, (_h, _p, _p)),
        Fn("cufftExecC2R", c_int, (_h, _p, _p)),
        Fn("cufftExecZ2D", c_int, (_h, _p, _p)),
    ),
    version=lambda lib: _version(lib),
)


def _version(lib: LoadedLibrary) -> str:
    v = c_int()
    lib.cufftGetVersion(ctypes.byref(v))
    # e.g. 11401 -> 11.4.1 (major * 1000 + minor * 100 + patch)
    return f"{v.value // 1000}.{v.value % 1000 // 100}.{v.value % 100}"
