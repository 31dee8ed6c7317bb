"""Kernel parameter kinds from CUDA C source: the declared signature of a ``__global__``
function (template parameters substituted from a name expression such as ``"scale<float, 4>"``).

A pointer parameter is ``"ptr"``; scalars map to gpumsg dtypes (``float`` -> ``"f32"``, ``int`` ->
``"i32"``, ``size_t`` -> ``"u64"``, ...). Anything else (a struct passed by value, say) cannot be
typed from the source: pass ``signature=`` explicitly (ctypes types or kind names).
"""

from __future__ import annotations

import ctypes
import re
from typing import Any

from ...errors import InvalidMessage
from ...messages.nvrtc import SCALAR_KINDS

__all__ = ["kernel_params", "explicit_params", "pointer_dtypes", "explicit_pointer_dtypes"]

_C_KINDS = {
    "float": "f32", "double": "f64", "__half": "f16", "half": "f16", "bool": "bool",
    "char": "i8", "signed char": "i8", "unsigned char": "u8", "int8_t": "i8", "uint8_t": "u8",
    "short": "i16", "short int": "i16", "unsigned short": "u16", "int16_t": "i16",
    "uint16_t": "u16", "int": "i32", "signed": "i32", "signed int": "i32", "int32_t": "i32",
    "unsigned": "u32", "unsigned int": "u32", "uint32_t": "u32", "long": "i64",
    "long int": "i64", "long long": "i64", "long long int": "i64", "int64_t": "i64",
    "ptrdiff_t": "i64", "unsigned long": "u64", "unsigned long long": "u64",
    "unsigned long int": "u64", "unsigned long long int": "u64", "uint64_t": "u64",
    "size_t": "u64",
}
_QUALIFIERS = re.compile(r"\b(const|volatile|__restrict__|__restrict|restrict|struct|"
                         r"__grid_constant__)\b")
_CTYPES = {
    ctypes.c_float: "f32", ctypes.c_double: "f64", ctypes.c_bool: "bool", ctypes.c_int8: "i8",
    ctypes.c_uint8: "u8", ctypes.c_int16: "i16", ctypes.c_uint16: "u16", ctypes.c_int32: "i32",
    ctypes.c_uint32: "u32", ctypes.c_int64: "i64", ctypes.c_uint64: "u64",
    ctypes.c_void_p: "ptr",
}


def _split_top(text: str) -> list[str]:
    """Split on commas outside <>, () and []."""
    out, depth, cur = [], 0, []
    for ch in text:
        if ch in "<([":
            depth += 1
        elif ch in ">)]":
            depth -= 1
        if ch == "," and depth == 0:
            out.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    if "".join(cur).strip():
        out.append("".join(cur).strip())
    return out


def _param_kind(decl: str, subst: dict[str, str], name: str) -> str:
    decl = re.sub(r"=.*$", "", decl)  # default argument
    decl = re.sub(r"\[[^\]]*\]", "*", decl)  # array parameters are pointers
    for tparam, targ in subst.items():
        decl = re.sub(rf"\b{re.escape(tparam)}\b", targ, decl)
    if "*" in decl or "&" in decl:
        if "&" in decl and "*" not in decl:
            raise InvalidMessage(f"{name}: reference parameter {decl.strip()!r} cannot be passed "
                                 "from the host", field="signature")
        return "ptr"
    words = _QUALIFIERS.sub(" ", decl).split()
    # the last word is the parameter's name unless the declaration is only a type
    for n in (len(words) - 1, len(words)):
        kind = _C_KINDS.get(" ".join(words[:n]))
        if kind is not None:
            return kind
    raise InvalidMessage(f"{name}: cannot type parameter {decl.strip()!r} from the source; pass "
                         "signature= (ctypes types or kinds such as 'f32', 'ptr')",
                         field="signature")


def _declarations(source: str, expression: str) -> tuple[list[str], dict[str, str]]:
    """The parameter declarations of kernel ``expression`` in ``source``, and the template
    parameters' substitutions."""
    base, _, targs_text = expression.partition("<")
    base = base.strip().split("::")[-1]
    targs = _split_top(targs_text.rstrip().removesuffix(">")) if targs_text else []
    text = re.sub(r"//[^\n]*|/\*.*?\*/", " ", source, flags=re.S)
    pattern = re.compile(r"(template\s*<(?P<tparams>[^>]*)>\s*)?(?:extern\s+\"C\"\s+)?"
                         r"(?:static\s+)?__global__\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?"
                         rf"void\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?{re.escape(base)}\s*\(")
    m = pattern.search(text)
    if m is None:
        raise InvalidMessage(f"no __global__ function {base!r} in the source", field="name")
    depth, i = 1, m.end()
    while depth and i < len(text):
        depth += {"(": 1, ")": -1}.get(text[i], 0)
        i += 1
    params_text = text[m.end():i - 1].strip()
    subst: dict[str, str] = {}
    if m.group("tparams") is not None:
        names = [p.split()[-1] for p in _split_top(m.group("tparams")) if p.split()]
        for n, a in zip(names, targs):
            subst[re.sub(r"=.*$", "", n).strip()] = a
    if not params_text or params_text == "void":
        return [], subst
    return _split_top(params_text), subst


def kernel_params(source: str, expression: str) -> tuple[str, ...]:
    """The parameter kinds of kernel ``expression`` (a name, or a template instance
    ``name<args>``) as declared in ``source``."""
    decls, subst = _declarations(source, expression)
    return tuple(_param_kind(p, subst, expression) for p in decls)


#: element types of pointer parameters beyond the scalar kinds
_POINTEE_EXTRA = {"__nv_bfloat16": "bf16", "nv_bfloat16": "bf16", "float2": "c64",
                  "cuFloatComplex": "c64", "cuComplex": "c64", "double2": "c128",
                  "cuDoubleComplex": "c128"}


def _pointee(decl: str, subst: dict[str, str]) -> str | None:
    """The element dtype of a pointer declaration (``const float* __restrict__ x`` -> f32);
    None for ``void*``, a pointer to pointer, or a type gpumsg does not know."""
    decl = re.sub(r"=.*$", "", decl)
    decl = re.sub(r"\[[^\]]*\]", "*", decl)
    for tparam, targ in subst.items():
        decl = re.sub(rf"\b{re.escape(tparam)}\b", targ, decl)
    if decl.count("*") != 1 or "&" in decl:
        return None
    type_part = decl.split("*", 1)[0]
    words = _QUALIFIERS.sub(" ", type_part).split()
    text = " ".join(words)
    return _C_KINDS.get(text) or _POINTEE_EXTRA.get(text)


def pointer_dtypes(source: str, expression: str) -> tuple[str | None, ...]:
    """Per parameter of kernel ``expression``: the element dtype a pointer parameter declares
    (what a buffer passed to it must hold), None for scalars and untyped pointers."""
    decls, subst = _declarations(source, expression)
    return tuple(_pointee(p, subst) if ("*" in p or "[" in p) else None for p in decls)


def explicit_params(signature: Any, name: str) -> tuple[str, ...]:
    """Parameter kinds from ctypes types (``c_void_p`` or a POINTER type for pointers) or kind
    names (``"ptr"``, ``"f32"``, ...)."""
    out = []
    if not isinstance(signature, (tuple, list)):
        raise InvalidMessage(f"{name}: signature must be a sequence of ctypes types or kind "
                             f"names, got {type(signature).__name__}", field="signature")
    for i, t in enumerate(signature):
        if isinstance(t, str) and (t == "ptr" or t in SCALAR_KINDS):
            out.append(t)
        elif isinstance(t, type) and t in _CTYPES:
            out.append(_CTYPES[t])
        elif isinstance(t, type) and issubclass(t, ctypes._Pointer):
            out.append("ptr")
        else:
            raise InvalidMessage(f"{name}: signature[{i}] = {t!r} is not a ctypes scalar or "
                                 "pointer type, nor a kind name", field="signature")
    return tuple(out)


def explicit_pointer_dtypes(signature: Any) -> tuple[str | None, ...]:
    """The element dtypes that an explicit signature declares for its pointers (a ctypes
    ``POINTER(c_float)`` -> f32); None for scalars, ``c_void_p`` and ``"ptr"``."""
    out: list[str | None] = []
    for t in signature:
        target = getattr(t, "_type_", None) if isinstance(t, type) and \
            issubclass(t, ctypes._Pointer) else None
        kind = _CTYPES.get(target) if target is not None else None
        out.append(kind if kind not in (None, "ptr", "bool") else None)
    return tuple(out)
