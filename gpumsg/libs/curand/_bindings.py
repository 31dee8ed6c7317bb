"""cuRAND host API bindings as data: the functions gpumsg calls, with their argument and result
types, and the enums they take (curand.h)."""

from __future__ import annotations

import ctypes

from .._loader import (
    Fn,
    LibrarySpec,
    LoadedLibrary,
    P,
    c_double,
    c_float,
    c_int,
    c_size_t,
    c_void_p,
)

__all__ = ["SPEC", "RNG_TYPE", "ORDERING", "STATUS_NAMES"]

#: curandRngType_t
RNG_TYPE = {
    "xorwow": 101, "mrg32k3a": 121, "mtgp32": 141, "mt19937": 142, "philox": 161,
    "sobol32": 201, "scrambled_sobol32": 202, "sobol64": 203, "scrambled_sobol64": 204,
}

#: curandOrdering_t, by (family, name)
ORDERING = {
    ("pseudo", "best"): 100, ("pseudo", "default"): 101, ("pseudo", "seeded"): 102,
    ("pseudo", "legacy"): 103, ("pseudo", "dynamic"): 104, ("quasi", "default"): 201,
}

#: curandStatus_t -> name
STATUS_NAMES = {
    0: "CURAND_STATUS_SUCCESS", 100: "CURAND_STATUS_VERSION_MISMATCH",
    101: "CURAND_STATUS_NOT_INITIALIZED", 102: "CURAND_STATUS_ALLOCATION_FAILED",
    103: "CURAND_STATUS_TYPE_ERROR", 104: "CURAND_STATUS_OUT_OF_RANGE",
    105: "CURAND_STATUS_LENGTH_NOT_MULTIPLE", 106: "CURAND_STATUS_DOUBLE_PRECISION_REQUIRED",
    201: "CURAND_STATUS_LAUNCH_FAILURE", 202: "CURAND_STATUS_PREEXISTING_FAILURE",
    203: "CURAND_STATUS_INITIALIZATION_FAILED", 204: "CURAND_STATUS_ARCH_MISMATCH",
    999: "CURAND_STATUS_INTERNAL_ERROR",
}

_G = c_void_p  # curandGenerator_t
_p = c_void_p
_u64 = ctypes.c_ulonglong
_u32 = ctypes.c_uint

SPEC = LibrarySpec(
    name="curand",
    functions=(
        Fn("curandGetVersion", c_int, (P(c_int),)),
        Fn("curandCreateGenerator", c_int, (P(_G), c_int)),
        Fn("curandDestroyGenerator", c_int, (_G,)),
        Fn("curandSetStream", c_int, (_G, c_void_p)),
        Fn("curandSetPseudoRandomGeneratorSeed", c_int, (_G, _u64)),
        Fn("curandSetGeneratorOffset", c_int, (_G, _u64)),
        Fn("curandSetGeneratorOrdering", c_int, (_G, c_int)),
        Fn("curandSetQuasiRandomGeneratorDimensions", c_int, (_G, _u32)),
        # (generator, output, n)
        Fn("curandGenerate", c_int, (_G, _p, c_size_t)),
        Fn("curandGenerateLongLong", c_int, (_G, _p, c_size_t)),
        Fn("curandGenerateUniform", c_int, (_G, _p, c_size_t)),
        Fn("curandGenerateUniformDouble", c_int, (_G, _p, c_size_t)),
        # (generator, output, n, mean, stddev)
        Fn("curandGenerateNormal", c_int, (_G, _p, c_size_t, c_float, c_float)),
        Fn("curandGenerateNormalDouble", c_int, (_G, _p, c_size_t, c_double, c_double)),
        Fn("curandGenerateLogNormal", c_int, (_G, _p, c_size_t, c_float, c_float)),
        Fn("curandGenerateLogNormalDouble", c_int, (_G, _p, c_size_t, c_double, c_double)),
        # (generator, output, n, lambda)
        Fn("curandGeneratePoisson", c_int, (_G, _p, c_size_t, c_double)),
    ),
    version=lambda lib: _version(lib),
)


def _version(lib: LoadedLibrary) -> str:
    v = c_int()
    lib.curandGetVersion(ctypes.byref(v))
    return f"{v.value // 1000}.{v.value % 1000 // 100}.{v.value % 100}"
