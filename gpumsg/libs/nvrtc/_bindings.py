"""NVRTC bindings as data: the runtime compiler's C functions gpumsg calls (caller's threads:
compiling never runs on the device thread)."""

from __future__ import annotations

import ctypes

from .._loader import Fn, LibrarySpec, LoadedLibrary, P, c_char_p, c_int, c_size_t, c_void_p

__all__ = ["SPEC", "COMPILATION_ERROR"]

#: nvrtcResult of a program that did not compile (its log says why)
COMPILATION_ERROR = 6

_prog = c_void_p  # nvrtcProgram
_strs = P(c_char_p)  # const char* const*


def _version(lib: LoadedLibrary) -> str:
    major, minor = c_int(), c_int()
    lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor))
    return f"{major.value}.{minor.value}"


SPEC = LibrarySpec(
    name="nvrtc",
    functions=(
        Fn("nvrtcVersion", c_int, (P(c_int), P(c_int))),
        Fn("nvrtcGetErrorString", c_char_p, (c_int,)),
        Fn("nvrtcCreateProgram", c_int, (P(_prog), c_char_p, c_char_p, c_int, _strs, _strs)),
        Fn("nvrtcDestroyProgram", c_int, (P(_prog),)),
        Fn("nvrtcCompileProgram", c_int, (_prog, c_int, _strs)),
        Fn("nvrtcGetProgramLogSize", c_int, (_prog, P(c_size_t))),
        Fn("nvrtcGetProgramLog", c_int, (_prog, c_char_p)),
        Fn("nvrtcGetPTXSize", c_int, (_prog, P(c_size_t))),
        Fn("nvrtcGetPTX", c_int, (_prog, c_char_p)),
        Fn("nvrtcGetCUBINSize", c_int, (_prog, P(c_size_t))),
        Fn("nvrtcGetCUBIN", c_int, (_prog, c_char_p)),
        Fn("nvrtcAddNameExpression", c_int, (_prog, c_char_p)),
        Fn("nvrtcGetLoweredName", c_int, (_prog, c_char_p, P(c_char_p))),
    ),
    version=_version,
)
