"""NCCL bindings as data: the C functions gpumsg calls and the enums of the API
(``nccl.h``: ncclDataType_t, ncclRedOp_t, ncclResult_t; ncclUniqueId is 128 bytes)."""

from __future__ import annotations

import ctypes

from .._loader import Fn, LibrarySpec, LoadedLibrary, P, c_char_p, c_int, c_size_t, c_void_p

__all__ = ["SPEC", "DTYPE", "REDOP", "UniqueId", "RESULT_NAMES", "SUCCESS", "IN_PROGRESS",
           "UNIQUE_ID_BYTES"]

UNIQUE_ID_BYTES = 128
SUCCESS, IN_PROGRESS = 0, 7

#: gpumsg dtype name -> ncclDataType_t (fp8 needs NCCL >= 2.19)
DTYPE = {"i8": 0, "u8": 1, "i32": 2, "u32": 3, "i64": 4, "u64": 5, "f16": 6, "f32": 7,
         "f64": 8, "bf16": 9, "e4m3": 10, "e5m2": 11}
#: reduction name -> ncclRedOp_t ("premul_sum" is created per call with ncclRedOpCreatePreMulSum)
REDOP = {"sum": 0, "prod": 1, "max": 2, "min": 3, "avg": 4}
RESULT_NAMES = {0: "ncclSuccess", 1: "ncclUnhandledCudaError", 2: "ncclSystemError",
                3: "ncclInternalError", 4: "ncclInvalidArgument", 5: "ncclInvalidUsage",
                6: "ncclRemoteError", 7: "ncclInProgress"}


class UniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_char * UNIQUE_ID_BYTES)]


_comm = c_void_p
_stream = c_void_p


def _version(lib: LoadedLibrary) -> str:
    v = c_int()
    if lib.ncclGetVersion(ctypes.byref(v)) != 0:
        return "?"
    code = v.value  # 2.x: major*10000 + minor*100 + patch
    return f"{code // 10000}.{code // 100 % 100}.{code % 100}"


SPEC = LibrarySpec(
    name="nccl",
    functions=(
        Fn("ncclGetVersion", c_int, (P(c_int),)),
        Fn("ncclGetUniqueId", c_int, (P(UniqueId),)),
        Fn("ncclCommInitRank", c_int, (P(_comm), c_int, UniqueId, c_int)),
        Fn("ncclCommInitAll", c_int, (P(_comm), c_int, P(c_int))),
        Fn("ncclCommDestroy", c_int, (_comm,)),
        Fn("ncclCommAbort", c_int, (_comm,)),
        Fn("ncclCommGetAsyncError", c_int, (_comm, P(c_int))),
        Fn("ncclCommCount", c_int, (_comm, P(c_int))),
        Fn("ncclCommUserRank", c_int, (_comm, P(c_int))),
        Fn("ncclGetErrorString", c_char_p, (c_int,)),
        Fn("ncclGetLastError", c_char_p, (_comm,), optional=True),
        Fn("ncclGroupStart", c_int, ()),
        Fn("ncclGroupEnd", c_int, ()),
        Fn("ncclAllReduce", c_int, (c_void_p, c_void_p, c_size_t, c_int, c_int, _comm, _stream)),
        Fn("ncclBroadcast", c_int, (c_void_p, c_void_p, c_size_t, c_int, c_int, _comm, _stream)),
        Fn("ncclReduce", c_int, (c_void_p, c_void_p, c_size_t, c_int, c_int, c_int, _comm,
                                 _stream)),
        Fn("ncclAllGather", c_int, (c_void_p, c_void_p, c_size_t, c_int, _comm, _stream)),
        Fn("ncclReduceScatter", c_int, (c_void_p, c_void_p, c_size_t, c_int, c_int, _comm,
                                        _stream)),
        Fn("ncclSend", c_int, (c_void_p, c_size_t, c_int, c_int, _comm, _stream)),
        Fn("ncclRecv", c_int, (c_void_p, c_size_t, c_int, c_int, _comm, _stream)),
        # scalar residence 0 = ncclScalarDevice, 1 = ncclScalarHostImmediate
        Fn("ncclRedOpCreatePreMulSum", c_int, (P(c_int), c_void_p, c_int, c_int, _comm)),
        Fn("ncclRedOpDestroy", c_int, (c_int, _comm)),
    ),
    version=_version,
)
