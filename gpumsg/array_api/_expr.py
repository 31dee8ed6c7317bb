"""The one description language of generated kernels: a small C expression language.

An element-wise operation is written once as C-like statements over named values::

    out = a + b
    out = c ? a : b
    d = x - y; out = d * d

It is parsed into a tree that is rendered two ways: CUDA C (every function call ``f(...)``
becomes ``gm_f(...)``, an overloaded device function of :data:`PRELUDE`) and a NumPy evaluation
(each node maps to the NumPy operation with C's meaning for the compute dtypes). The simulator
runs the NumPy evaluation of the same tree the GPU kernel was generated from, so that a function
is never written twice. Only the primitives (``exp``, ``floordiv``, ...) have two
implementations: a device function here and its NumPy counterpart in :data:`FUNCTIONS`.

Grammar (C precedence): ``?:``, ``||``, ``&&``, ``|``, ``^``, ``&``, ``== !=``,
``< <= > >=``, ``<< >>``, ``+ -``, ``* / %``, unary ``- + ! ~``, calls, names, numbers,
parentheses; statements are ``name = expr`` separated by ``;`` or new lines.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

import numpy as np

from ..errors import InvalidMessage
from . import _dtypes as D

__all__ = ["parse", "render_c", "render_text", "evaluate", "run_program", "FUNCTIONS",
           "float_text",
           "CONSTANTS", "PRELUDE", "Program", "cast_name"]

_TOKEN = re.compile(r"""\s*(?:
    (?P<num>(?:\d+\.\d*|\.\d+|\d+)(?:[eE][+-]?\d+)?[fFuUlL]*)
  | (?P<name>[A-Za-z_][A-Za-z_0-9]*)
  | (?P<op>\|\||&&|<<|>>|<=|>=|==|!=|[-+*/%<>!~&|^?:(),;=])
)""", re.VERBOSE)

#: binary operators by precedence level (lowest first)
_LEVELS: list[tuple[str, ...]] = [("||",), ("&&",), ("|",), ("^",), ("&",), ("==", "!="),
                                  ("<", "<=", ">", ">="), ("<<", ">>"), ("+", "-"),
                                  ("*", "/", "%")]

Node = tuple  # ("var", name) | ("num", value) | ("bin", op, l, r) | ("un", op, x)
#               | ("tern", c, a, b) | ("call", name, args)


def _tokens(text: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    pos = 0
    text = text.replace("\n", ";")
    while pos < len(text):
        if text[pos:].strip() == "":
            break
        m = _TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            raise InvalidMessage(f"operation: cannot read {text[pos:pos + 20]!r}",
                                 field="operation")
        kind = m.lastgroup
        assert kind is not None
        out.append((kind, m.group(kind)))
        pos = m.end()
    return out


class _Parser:
    def __init__(self, text: str) -> None:
        self.toks = _tokens(text)
        self.i = 0

    def peek(self) -> tuple[str, str] | None:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def take(self, value: str | None = None) -> tuple[str, str]:
        tok = self.peek()
        if tok is None or (value is not None and tok[1] != value):
            raise InvalidMessage(f"operation: expected {value or 'more'!r}, found "
                                 f"{tok[1] if tok else 'the end'!r}", field="operation")
        self.i += 1
        return tok

    def statements(self) -> list[tuple[str, Node]]:
        out = []
        while self.peek() is not None:
            if self.peek() == ("op", ";"):
                self.take()
                continue
            kind, name = self.take()
            if kind != "name":
                raise InvalidMessage(f"operation: a statement starts with a name, not {name!r}",
                                     field="operation")
            self.take("=")
            out.append((name, self.expr()))
            if self.peek() is not None:
                self.take(";")
        if not out:
            raise InvalidMessage("operation: no statement", field="operation")
        return out

    def expr(self) -> Node:
        cond = self.binary(0)
        if self.peek() == ("op", "?"):
            self.take()
            a = self.expr()
            self.take(":")
            b = self.expr()
            return ("tern", cond, a, b)
        return cond

    def binary(self, level: int) -> Node:
        if level == len(_LEVELS):
            return self.unary()
        left = self.binary(level + 1)
        while True:
            tok = self.peek()
            if tok is None or tok[0] != "op" or tok[1] not in _LEVELS[level]:
                return left
            self.take()
            left = ("bin", tok[1], left, self.binary(level + 1))

    def unary(self) -> Node:
        tok = self.peek()
        if tok is not None and tok[0] == "op" and tok[1] in ("-", "+", "!", "~"):
            self.take()
            return ("un", tok[1], self.unary())
        return self.atom()

    def atom(self) -> Node:
        kind, text = self.take()
        if kind == "num":
            body = text.rstrip("fFuUlL")
            if any(ch in body for ch in ".eE"):
                return ("num", float(body))
            return ("num", int(body))
        if kind == "name":
            if self.peek() == ("op", "("):
                self.take()
                args: list[Node] = []
                if self.peek() != ("op", ")"):
                    args.append(self.expr())
                    while self.peek() == ("op", ","):
                        self.take()
                        args.append(self.expr())
                self.take(")")
                if text not in FUNCTIONS:
                    raise InvalidMessage(f"operation: unknown function {text!r}; known: "
                                         f"{', '.join(sorted(FUNCTIONS))}", field="operation")
                want = 2 if text in BINARY else 1
                if len(args) != want:
                    # the device has no such overload, and NumPy's function would read a
                    # second argument as its output (or fail when the kernel runs)
                    raise InvalidMessage(f"operation: {text}() takes {want} argument"
                                         f"{'s' if want > 1 else ''}, got {len(args)}",
                                         field="operation")
                return ("call", text, tuple(args))
            return ("var", text)
        if text == "(":
            inner = self.expr()
            self.take(")")
            return inner
        raise InvalidMessage(f"operation: unexpected {text!r}", field="operation")


class Program:
    """A parsed operation: its statements, the names it reads before assigning them
    (``free``) and the names it assigns (``assigned``, in order)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.statements = _Parser(text).statements()
        assigned: list[str] = []
        free: list[str] = []

        def walk(node: Node) -> None:
            if node[0] == "var":
                if node[1] not in assigned and node[1] not in free and \
                        node[1] not in CONSTANTS:
                    free.append(node[1])
            elif node[0] == "bin":
                walk(node[2])
                walk(node[3])
            elif node[0] == "un":
                walk(node[2])
            elif node[0] == "tern":
                walk(node[1])
                walk(node[2])
                walk(node[3])
            elif node[0] == "call":
                for a in node[2]:
                    walk(a)

        for name, node in self.statements:
            walk(node)
            if name not in assigned:
                assigned.append(name)
        self.free = free
        self.assigned = assigned


def parse(text: str) -> Program:
    return Program(text)


# -- CUDA C ---------------------------------------------------------------------------------------
def float_text(v: float) -> str:
    """A float as a literal of the description language that reads back as the same value:
    ``NAN``, ``INFINITY`` and ``(-INFINITY)`` where Python would write ``nan`` and ``inf``
    (names the language does not know)."""
    if v != v:
        return "NAN"
    if v == math.inf or v == -math.inf:
        return "INFINITY" if v > 0 else "(-INFINITY)"
    text = repr(v)
    return text if "e" in text or "." in text else text + ".0"


def render_c(node: Node) -> str:
    """The C expression of a node (fully parenthesized)."""
    kind = node[0]
    if kind == "var":
        name = node[1]
        return CONSTANTS[name][0] if name in CONSTANTS else name
    if kind == "num":
        v = node[1]
        if isinstance(v, float):
            return repr(v) if "e" in repr(v) or "." in repr(v) else repr(v) + ".0"
        return f"{v}LL" if abs(v) >= 1 << 31 else str(v)
    if kind == "bin":
        return f"({render_c(node[2])} {node[1]} {render_c(node[3])})"
    if kind == "un":
        return f"({node[1]}{render_c(node[2])})"
    if kind == "tern":
        return f"({render_c(node[1])} ? {render_c(node[2])} : {render_c(node[3])})"
    if node[1] in _CAST_C:
        return _CAST_C[node[1]](render_c(node[2][0]))
    return f"gm_{node[1]}({', '.join(render_c(a) for a in node[2])})"


def render_text(node: Node) -> str:
    """The node in the description language itself (fully parenthesized): generated
    operations (fused chains) are written as text, so that the text is their cache key and
    both renderings parse it as they parse any other operation."""
    kind = node[0]
    if kind == "var":
        return node[1]
    if kind == "num":
        v = node[1]
        return float_text(v) if isinstance(v, float) else str(v)
    if kind == "bin":
        return f"({render_text(node[2])} {node[1]} {render_text(node[3])})"
    if kind == "un":
        return f"({node[1]}{render_text(node[2])})"
    if kind == "tern":
        return f"({render_text(node[1])} ? {render_text(node[2])} : {render_text(node[3])})"
    return f"{node[1]}({', '.join(render_text(a) for a in node[2])})"


# -- NumPy ----------------------------------------------------------------------------------------
def _is_int(x: Any) -> bool:
    return np.asarray(x).dtype.kind in "iub"


def _c_div(a: Any, b: Any) -> Any:
    if _is_int(a) and _is_int(b):  # C: truncation; a zero divisor gives 0 here
        q = np.floor_divide(a, np.where(b == 0, 1, b))
        r = np.fmod(a, np.where(b == 0, 1, b))
        q = np.where((r != 0) & ((np.asarray(a) < 0) != (np.asarray(b) < 0)), q + 1, q)
        return np.where(b == 0, 0, q)
    return np.true_divide(a, b)


_BIN: dict[str, Callable[[Any, Any], Any]] = {
    "+": np.add, "-": np.subtract, "*": np.multiply, "/": _c_div, "%": np.fmod,
    "<": np.less, "<=": np.less_equal, ">": np.greater, ">=": np.greater_equal,
    "==": np.equal, "!=": np.not_equal, "&&": np.logical_and, "||": np.logical_or,
    "&": np.bitwise_and, "|": np.bitwise_or, "^": np.bitwise_xor,
    "<<": lambda a, b: _shl(a, b), ">>": lambda a, b: _shr(a, b),
}
_UN: dict[str, Callable[[Any], Any]] = {
    "-": np.negative, "+": np.positive, "!": np.logical_not, "~": np.invert,
}


def evaluate(program: Program, env: dict[str, Any]) -> dict[str, Any]:
    """Run ``program`` on NumPy values: ``env`` holds the free names; returns ``env`` with the
    assigned names added. Floating-point warnings are silenced (the GPU gives inf/NaN too)."""
    env = dict(env)
    with np.errstate(all="ignore"):
        run_program(program, env)
    return env


def run_program(program: Program, env: dict[str, Any]) -> None:
    """:func:`evaluate` in place: the assigned names are added to ``env``; the caller silences
    floating-point warnings. The statements run as closures made once per program (the
    same operations as :func:`_eval`'s walk, without walking the tree at every call)."""
    steps = program.__dict__.get("_steps")
    if steps is None:
        steps = program._steps = [(name, _closure(node)) for name, node in program.statements]
    for name, step in steps:
        env[name] = step(env)


def _closure(node: Node) -> Callable[[dict[str, Any]], Any]:
    """``node`` as a function of the environment, computing what ``_eval(node, env)`` does."""
    kind = node[0]
    if kind == "var":
        name = node[1]
        if name in CONSTANTS:
            const = CONSTANTS[name][1]
            return lambda env: env[name] if name in env else const
        return lambda env: env[name]
    if kind == "num":
        value = node[1]
        return lambda env: value
    if kind == "bin":
        op, left, right = _BIN[node[1]], _closure(node[2]), _closure(node[3])

        def binary(env: dict[str, Any]) -> Any:
            a, b = left(env), right(env)
            try:
                return op(a, b)
            except OverflowError:  # as in _eval: a literal beyond the other operand's type
                return op(*(np.int64(v) if type(v) is int else v for v in (a, b)))
        return binary
    if kind == "un":
        uop, arg = _UN[node[1]], _closure(node[2])
        return lambda env: uop(arg(env))
    if kind == "tern":
        c, a, b = (_closure(n) for n in node[1:])
        return lambda env: np.where(c(env), a(env), b(env))
    fn = FUNCTIONS[node[1]]
    args = [_closure(n) for n in node[2]]
    if len(args) == 1:
        (x,) = args
        return lambda env: fn(x(env))
    if len(args) == 2:
        x, y = args
        return lambda env: fn(x(env), y(env))
    return lambda env: fn(*[a(env) for a in args])


def _eval(node: Node, env: dict[str, Any]) -> Any:
    kind = node[0]
    if kind == "var":
        name = node[1]
        if name in env:
            return env[name]
        return CONSTANTS[name][1]
    if kind == "num":
        return node[1]
    if kind == "bin":
        left, right = _eval(node[2], env), _eval(node[3], env)
        try:
            return _BIN[node[1]](left, right)
        except OverflowError:
            # a literal that does not fit the other operand's type: C computes in int or
            # long long and converts at the store; so does this
            return _BIN[node[1]](*(np.int64(v) if type(v) is int else v
                                   for v in (left, right)))
    if kind == "un":
        return _UN[node[1]](_eval(node[2], env))
    if kind == "tern":
        return np.where(_eval(node[1], env), _eval(node[2], env), _eval(node[3], env))
    return FUNCTIONS[node[1]](*(_eval(a, env) for a in node[2]))


# -- the primitives: NumPy counterparts of the gm_ device functions --------------------------------
def _kind(x: Any) -> str:
    return np.asarray(x).dtype.kind


def _same_int(f: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """A rounding function that leaves integers as they are (as the device function does)."""
    return lambda x: x if _kind(x) in "iub" else f(x)


def _width(x: Any) -> int:
    return np.asarray(x).dtype.itemsize * 8


def _shl(a: Any, b: Any) -> Any:
    a = np.asarray(a)
    b = np.asarray(b)
    bad = (b < 0) | (b >= _width(a))
    safe = np.where(bad, 0, b).astype(a.dtype)
    return np.where(bad, np.zeros((), a.dtype), np.left_shift(a, safe)).astype(a.dtype)


def _shr(a: Any, b: Any) -> Any:
    a = np.asarray(a)
    b = np.asarray(b)
    bad = (b < 0) | (b >= _width(a))
    safe = np.where(bad, 0, b).astype(a.dtype)
    fill = np.where(a < 0, -1, 0).astype(a.dtype) if a.dtype.kind == "i" else \
        np.zeros((), a.dtype)
    return np.where(bad, fill, np.right_shift(a, safe)).astype(a.dtype)


def _pow(a: Any, b: Any) -> Any:
    if _kind(a) in "iu" and _kind(b) in "iu":
        a = np.asarray(a)
        b = np.asarray(b)
        neg = b < 0
        r = np.power(a, np.where(neg, 0, b).astype(b.dtype))
        if a.dtype.kind == "i" or b.dtype.kind == "i":
            # a negative exponent: 1 for a base of 1, +-1 for -1, else 0 (the device's rule)
            odd = (b % 2) != 0
            alt = np.where(a == 1, 1, np.where(a == -1, np.where(odd, -1, 1), 0))
            r = np.where(neg, alt.astype(r.dtype), r)
        return r
    return np.power(a, b)


def _sign(x: Any) -> Any:
    if _kind(x) == "c":
        x = np.asarray(x)
        mag = np.abs(x)
        return np.where(mag == 0, np.zeros((), x.dtype), x / np.where(mag == 0, 1, mag))
    if _kind(x) == "b":
        return x
    return np.sign(x)


def _floordiv(a: Any, b: Any) -> Any:
    if _kind(a) == "f" or _kind(b) == "f":
        # the standard's special cases: a zero or infinite operand gives floor(a / b)
        a, b = np.asarray(a), np.asarray(b)
        special = (b == 0) | np.isinf(a) | np.isinf(b)
        return np.where(special, np.floor(a / b), np.floor_divide(a, b))
    return np.floor_divide(a, b)


def _expm1(x: Any) -> Any:
    if _kind(x) != "c":
        return np.expm1(x)
    # NumPy's complex expm1 loses the special cases: exp(z) - 1 has them, and for finite z
    # below exp's overflow, expm1(x) cos y - 2 sin^2(y/2) + i e^x sin y keeps the digits near 0
    # (the device function's formula). A zero z gives +0 + 0j with y's sign, as the standard.
    z = np.asarray(x)
    out = np.asarray(np.exp(z) - 1)
    re, im = z.real, z.imag
    lim = 88.0 if z.dtype == np.complex64 else 709.0
    fin = np.isfinite(re) & np.isfinite(im) & (re <= lim)
    if fin.any():
        h = np.sin(im * 0.5)
        part = np.empty(z.shape, z.dtype)  # parts set one by one: 1j * -0.0 loses the sign
        part.real = np.where(im == 0, np.where(re == 0, 0, np.expm1(re)),
                             np.expm1(re) * np.cos(im) - 2 * h * h)
        part.imag = np.exp(re) * np.sin(im)
        out = np.where(fin, part, out)
    return out


def _log1p(x: Any) -> Any:
    if _kind(x) != "c":
        return np.log1p(x)
    # NumPy's complex log1p is log(1 + z), which loses the digits of a small z: there the real
    # part is log1p(2x + x^2 + y^2) / 2 (the device function's formula)
    z = np.asarray(x)
    w = np.empty(z.shape, z.dtype)
    w.real, w.imag = z.real + 1, z.imag  # 1 + z would turn a -0 imaginary part into +0
    out = np.asarray(np.log(w))
    re, im = z.real, z.imag
    small = (np.abs(re) < 0.5) & (np.abs(im) < 0.5)
    if small.any():
        part = np.empty(z.shape, z.dtype)
        part.real = 0.5 * np.log1p(re * (2 + re) + im * im)
        part.imag = np.arctan2(im, 1 + re)
        out = np.where(small, part, out)
    return out


def _mod(a: Any, b: Any) -> Any:
    return np.remainder(a, b)


def _tanh(x: Any) -> Any:
    if _kind(x) != "c":
        return np.tanh(x)
    # the standard: tanh(+-inf + iy) = +-1 + 0j with the zero's sign of y (finite y)
    x = np.asarray(x)
    edge = np.isinf(x.real) & np.isfinite(x.imag)
    res = np.asarray(np.tanh(x))
    if edge.any():
        ends = np.empty(x.shape, res.dtype)  # parts set one by one: 1j * -0.0 loses the sign
        ends.real = np.copysign(1, x.real)
        ends.imag = np.copysign(0, x.imag)
        res = np.where(edge, ends, res)
    return res


def _imag(x: Any) -> Any:
    return np.imag(x) if _kind(x) == "c" else np.zeros_like(x)


FUNCTIONS: dict[str, Callable[..., Any]] = {
    "abs": np.abs, "exp": np.exp, "expm1": _expm1, "log": np.log, "log1p": _log1p,
    "log2": np.log2, "log10": np.log10, "sqrt": np.sqrt, "sin": np.sin, "cos": np.cos,
    "tan": np.tan, "asin": np.arcsin, "acos": np.arccos, "atan": np.arctan, "sinh": np.sinh,
    "cosh": np.cosh, "tanh": _tanh, "asinh": np.arcsinh, "acosh": np.arccosh,
    "atanh": np.arctanh, "floor": _same_int(np.floor), "ceil": _same_int(np.ceil),
    "trunc": _same_int(np.trunc), "round": _same_int(np.rint), "sign": _sign,
    "isnan": np.isnan, "isinf": np.isinf, "isfinite": np.isfinite, "signbit": np.signbit,
    "maximum": np.maximum, "minimum": np.minimum, "floordiv": _floordiv, "mod": _mod,
    "pow": _pow, "shl": _shl, "shr": _shr, "copysign": np.copysign, "hypot": np.hypot,
    "atan2": np.arctan2, "nextafter": np.nextafter, "logaddexp": np.logaddexp,
    "conj": np.conj, "real": np.real, "imag": _imag,
}
#: the functions of two arguments; every other function (the casts included) takes one
BINARY = frozenset(("maximum", "minimum", "floordiv", "mod", "pow", "shl", "shr", "copysign",
                    "hypot", "atan2", "nextafter", "logaddexp"))



def _cast_numpy(dt: np.dtype) -> Callable[[Any], Any]:
    comp = D.CTYPE[dt][2]

    def cast(x: Any) -> Any:
        # through the stored dtype and back: a half or bool value rounds as a store would
        with np.errstate(all="ignore"):
            v = np.asarray(x).astype(comp)
            return v if comp == dt else v.astype(dt).astype(comp)
    return cast


def _cast_c(dt: np.dtype) -> Callable[[str], str]:
    storage, ctype, _, load, store = D.CTYPE[dt]
    if load == "{}":
        return lambda text: f"(({ctype})({text}))"
    return lambda text: load.format(store.format(f"({ctype})({text})"))


def cast_name(dt: np.dtype) -> str:
    """The function of the description language that converts a value to ``dt`` (in its
    compute type, rounded as a store to ``dt`` and a load back would round it)."""
    found = _CAST_NAMES.get(dt)  # str(dtype) costs a few microseconds
    if found is None:
        found = "cast_" + str(dt)
        if len(_CAST_NAMES) < 256:
            _CAST_NAMES[dt] = found
    return found


_CAST_NAMES: dict[np.dtype, str] = {}


#: C renderings of the casts (a call to one of them is a C conversion, not a device function)
_CAST_C: dict[str, Callable[[str], str]] = {}
for _dt in D.ALL:
    FUNCTIONS[cast_name(_dt)] = _cast_numpy(_dt)
    _CAST_C[cast_name(_dt)] = _cast_c(_dt)

#: names usable in an operation without being inputs: C text, NumPy value
CONSTANTS: dict[str, tuple[str, Any]] = {
    "INFINITY": ("gm_inf()", np.inf), "NAN": ("gm_nan()", np.nan),
    "true": ("true", True), "false": ("false", False),
}


# -- the device side of the primitives ---------------------------------------------------------
PRELUDE = r"""
// gpumsg.array_api prelude: the device functions behind the description language
__device__ __forceinline__ float gm_inf() { return __int_as_float(0x7f800000); }
__device__ __forceinline__ float gm_nan() { return __int_as_float(0x7fc00000); }
#ifndef GM_HOST_CHECK  // (the host build of the checks has no PTX)
__device__ __forceinline__ float gm_h2f(unsigned short h) {
  float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h)); return f; }
__device__ __forceinline__ unsigned short gm_f2h(float f) {
  unsigned short h; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f)); return h; }
__device__ __forceinline__ float gm_bf2f(unsigned short h) {
  return __int_as_float(((unsigned int)h) << 16); }
__device__ __forceinline__ unsigned short gm_f2bf(float f) {
  unsigned short h; asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f)); return h; }
#endif

template <class F> struct gm_cplx {
  F re, im;
  __device__ __forceinline__ gm_cplx(F r = 0, F i = 0) : re(r), im(i) {}
  template <class G> __device__ __forceinline__ gm_cplx(gm_cplx<G> o) : re((F)o.re), im((F)o.im) {}
  friend __device__ __forceinline__ gm_cplx operator+(gm_cplx a, gm_cplx b) {
    return gm_cplx(a.re + b.re, a.im + b.im); }
  friend __device__ __forceinline__ gm_cplx operator-(gm_cplx a, gm_cplx b) {
    return gm_cplx(a.re - b.re, a.im - b.im); }
  friend __device__ __forceinline__ gm_cplx operator*(gm_cplx a, gm_cplx b) {
    return gm_cplx(a.re * b.re - a.im * b.im, a.re * b.im + a.im * b.re); }
  friend __device__ __forceinline__ gm_cplx operator/(gm_cplx a, gm_cplx b) {
    // Smith's method, as NumPy's (the same roundings and zero signs): the ratio of b's
    // smaller part to its larger, so that |b|^2 is never formed
    if (fabs(b.re) >= fabs(b.im)) {
      if (b.re == 0 && b.im == 0) return gm_cplx(a.re / fabs(b.re), a.im / fabs(b.re));
      F rat = b.im / b.re, scl = (F)1 / (b.re + b.im * rat);
      return gm_cplx((a.re + a.im * rat) * scl, (a.im - a.re * rat) * scl); }
    F rat = b.re / b.im, scl = (F)1 / (b.im + b.re * rat);
    return gm_cplx((a.re * rat + a.im) * scl, (a.im * rat - a.re) * scl); }
  friend __device__ __forceinline__ gm_cplx operator-(gm_cplx a) { return gm_cplx(-a.re, -a.im); }
  friend __device__ __forceinline__ gm_cplx operator+(gm_cplx a) { return a; }
  friend __device__ __forceinline__ bool operator==(gm_cplx a, gm_cplx b) {
    return a.re == b.re && a.im == b.im; }
  friend __device__ __forceinline__ bool operator!=(gm_cplx a, gm_cplx b) {
    return !(a.re == b.re && a.im == b.im); }
  __device__ __forceinline__ explicit operator bool() const { return re != 0 || im != 0; }
};
typedef gm_cplx<float> gm_c64;
typedef gm_cplx<double> gm_c128;

// integers (and bool) where a function has a meaning for them
template <class T> __device__ __forceinline__ T gm_abs(T x) {
  return x < (T)0 ? (T)(0 - x) : x; }
template <class T> __device__ __forceinline__ T gm_sign(T x) {
  return (T)((x > (T)0) - (x < (T)0)); }
template <class T> __device__ __forceinline__ T gm_floor(T x) { return x; }
template <class T> __device__ __forceinline__ T gm_ceil(T x) { return x; }
template <class T> __device__ __forceinline__ T gm_trunc(T x) { return x; }
template <class T> __device__ __forceinline__ T gm_round(T x) { return x; }
template <class T> __device__ __forceinline__ bool gm_isnan(T) { return false; }
template <class T> __device__ __forceinline__ bool gm_isinf(T) { return false; }
template <class T> __device__ __forceinline__ bool gm_isfinite(T) { return true; }
template <class T> __device__ __forceinline__ T gm_maximum(T a, T b) { return a > b ? a : b; }
template <class T> __device__ __forceinline__ T gm_minimum(T a, T b) { return a < b ? a : b; }
template <class T> __device__ __forceinline__ T gm_conj(T x) { return x; }
template <class T> __device__ __forceinline__ T gm_real(T x) { return x; }
template <class T> __device__ __forceinline__ T gm_imag(T) { return (T)0; }
template <class T> __device__ __forceinline__ T gm_floordiv(T a, T b) {
  if (b == (T)0) return (T)0;
  if ((T)-1 < (T)0 && b == (T)-1) return (T)(0ULL - (unsigned long long)a);
  T q = (T)(a / b);
  if ((T)(a % b) != (T)0 && ((a < (T)0) != (b < (T)0))) q = (T)(q - 1);
  return q; }
template <class T> __device__ __forceinline__ T gm_mod(T a, T b) {
  if (b == (T)0) return (T)0;
  if ((T)-1 < (T)0 && b == (T)-1) return (T)0;
  T r = (T)(a % b);
  if (r != (T)0 && ((r < (T)0) != (b < (T)0))) r = (T)(r + b);
  return r; }
template <class T> __device__ __forceinline__ T gm_pow(T a, T b) {
  if (b < (T)0) return a == (T)1 ? (T)1 : (a == (T)-1 ? ((b & 1) ? (T)-1 : (T)1) : (T)0);
  unsigned long long r = 1, base = (unsigned long long)a, e = (unsigned long long)b;
  while (e) { if (e & 1) r *= base; base *= base; e >>= 1; }
  return (T)r; }
template <class T> __device__ __forceinline__ T gm_shl(T a, T b) {
  if (b < (T)0 || (unsigned long long)b >= 8 * sizeof(T)) return (T)0;
  return (T)((unsigned long long)a << (int)b); }
template <class T> __device__ __forceinline__ T gm_shr(T a, T b) {
  if (b < (T)0 || (unsigned long long)b >= 8 * sizeof(T)) return a < (T)0 ? (T)-1 : (T)0;
  return (T)(a >> (int)b); }

// real floating point: float and double
#define GM_F1(name, ff, fd) \
  __device__ __forceinline__ float gm_##name(float x) { return ff(x); } \
  __device__ __forceinline__ double gm_##name(double x) { return fd(x); }
#define GM_F2(name, ff, fd) \
  __device__ __forceinline__ float gm_##name(float x, float y) { return ff(x, y); } \
  __device__ __forceinline__ double gm_##name(double x, double y) { return fd(x, y); }
GM_F1(abs, fabsf, fabs) GM_F1(exp, expf, exp) GM_F1(expm1, expm1f, expm1) GM_F1(log, logf, log)
GM_F1(log1p, log1pf, log1p) GM_F1(log2, log2f, log2) GM_F1(log10, log10f, log10)
GM_F1(sqrt, sqrtf, sqrt) GM_F1(sin, sinf, sin) GM_F1(cos, cosf, cos) GM_F1(tan, tanf, tan)
GM_F1(asin, asinf, asin) GM_F1(acos, acosf, acos) GM_F1(atan, atanf, atan)
GM_F1(sinh, sinhf, sinh) GM_F1(cosh, coshf, cosh) GM_F1(tanh, tanhf, tanh)
GM_F1(asinh, asinhf, asinh) GM_F1(acosh, acoshf, acosh) GM_F1(atanh, atanhf, atanh)
GM_F1(floor, floorf, floor) GM_F1(ceil, ceilf, ceil) GM_F1(trunc, truncf, trunc)
GM_F1(round, rintf, rint)
GM_F2(pow, powf, pow) GM_F2(copysign, copysignf, copysign) GM_F2(hypot, hypotf, hypot)
GM_F2(atan2, atan2f, atan2) GM_F2(nextafter, nextafterf, nextafter)
GM_F2(fmod_, fmodf, fmod)
#define GM_FT(T) \
  __device__ __forceinline__ bool gm_isnan(T x) { return x != x; } \
  __device__ __forceinline__ bool gm_isinf(T x) { return gm_abs(x) == (T)gm_inf(); } \
  __device__ __forceinline__ bool gm_isfinite(T x) { return gm_abs(x) < (T)gm_inf(); } \
  __device__ __forceinline__ bool gm_signbit(T x) { return gm_copysign((T)1, x) < (T)0; } \
  __device__ __forceinline__ T gm_sign(T x) { /* +0 for +-0 (the standard), NaN for NaN */ \
    return x > (T)0 ? (T)1 : (x < (T)0 ? (T)-1 : (x == (T)0 ? (T)0 : x)); } \
  __device__ __forceinline__ T gm_maximum(T a, T b) { return (a != a || a > b) ? a : b; } \
  __device__ __forceinline__ T gm_minimum(T a, T b) { return (a != a || a < b) ? a : b; } \
  __device__ __forceinline__ T gm_conj(T x) { return x; } \
  __device__ __forceinline__ T gm_real(T x) { return x; } \
  __device__ __forceinline__ T gm_imag(T) { return (T)0; } \
  __device__ __forceinline__ T gm_mod(T a, T b) { \
    T m = gm_fmod_(a, b); \
    if (b == (T)0) return m; \
    if (m != (T)0) { if ((b < (T)0) != (m < (T)0)) m += b; } else m = gm_copysign((T)0, b); \
    return m; } \
  __device__ __forceinline__ T gm_floordiv(T a, T b) { \
    if (b == (T)0 || gm_isinf(a) || gm_isinf(b)) return gm_floor(a / b); \
    T m = gm_fmod_(a, b); \
    T d = (a - m) / b; \
    if (m != (T)0 && ((b < (T)0) != (m < (T)0))) d -= (T)1; \
    if (d == (T)0) return gm_copysign((T)0, a / b); \
    T f = gm_floor(d); \
    if (d - f > (T)0.5) f += (T)1; \
    return f; } \
  __device__ __forceinline__ T gm_logaddexp(T a, T b) { \
    if (a == b) return a + (T)0.6931471805599453; \
    T t = a - b; \
    if (t > (T)0) return a + gm_log1p(gm_exp(-t)); \
    if (t <= (T)0) return b + gm_log1p(gm_exp(t)); \
    return t; }
GM_FT(float) GM_FT(double)

// complex. The elementary functions follow C99's Annex G (the standard's special cases) for
// infinite, NaN and signed-zero parts, and scale their intermediates so that no finite result
// overflows or underflows on the way. The gm_cx_ templates do the work; GM_CT names them.
__device__ __forceinline__ float gm_ceps(float) { return 5.9604644775390625e-08f; }  // 2^-24
__device__ __forceinline__ double gm_ceps(double) { return 1.1102230246251565e-16; }  // 2^-53
// beyond this exp(x) may overflow: exp(x / 2)^2 is used
__device__ __forceinline__ float gm_cexplim(float) { return 88.0f; }
__device__ __forceinline__ double gm_cexplim(double) { return 709.0; }
// a part above this has a square that may overflow (2^60, 2^500), 1/big the same for underflow
__device__ __forceinline__ float gm_cbig(float) { return 1.152921504606846976e18f; }
__device__ __forceinline__ double gm_cbig(double) { return 3.2733906078961419e150; }
__device__ __forceinline__ float gm_clnbig(float) { return 41.588830833596716f; }
__device__ __forceinline__ double gm_clnbig(double) { return 346.57359027997264; }
// tanh(x) rounds to +-1 beyond this
__device__ __forceinline__ float gm_ctanhlim(float) { return 10.0f; }
__device__ __forceinline__ double gm_ctanhlim(double) { return 20.0; }
#define GM_PI_2 1.5707963267948966
#define GM_LN2 0.6931471805599453

// a product that keeps the infinities a NaN would hide (C99 Annex G's multiplication): where
// the plain formula gives NaN + NaN i and an operand is infinite, the infinite parts become +-1,
// the NaN parts of the other operand +-0, and the product is recomputed times infinity
template <class F> __device__ __forceinline__ gm_cplx<F> gm_cx_mul(gm_cplx<F> u, gm_cplx<F> v) {
  F a = u.re, b = u.im, c = v.re, d = v.im;
  F ac = a * c, bd = b * d, ad = a * d, bc = b * c, x = ac - bd, y = ad + bc;
  if (!gm_isnan(x) || !gm_isnan(y)) return gm_cplx<F>(x, y);
  bool again = false;
  if (gm_isinf(a) || gm_isinf(b)) {
    a = gm_copysign(gm_isinf(a) ? (F)1 : (F)0, a);
    b = gm_copysign(gm_isinf(b) ? (F)1 : (F)0, b);
    if (gm_isnan(c)) c = gm_copysign((F)0, c);
    if (gm_isnan(d)) d = gm_copysign((F)0, d);
    again = true;
  }
  if (gm_isinf(c) || gm_isinf(d)) {
    c = gm_copysign(gm_isinf(c) ? (F)1 : (F)0, c);
    d = gm_copysign(gm_isinf(d) ? (F)1 : (F)0, d);
    if (gm_isnan(a)) a = gm_copysign((F)0, a);
    if (gm_isnan(b)) b = gm_copysign((F)0, b);
    again = true;
  }
  if (!again && (gm_isinf(ac) || gm_isinf(bd) || gm_isinf(ad) || gm_isinf(bc))) {
    if (gm_isnan(a)) a = gm_copysign((F)0, a);
    if (gm_isnan(b)) b = gm_copysign((F)0, b);
    if (gm_isnan(c)) c = gm_copysign((F)0, c);
    if (gm_isnan(d)) d = gm_copysign((F)0, d);
    again = true;
  }
  if (again) {
    x = (F)gm_inf() * (a * c - b * d);
    y = (F)gm_inf() * (a * d + b * c);
  }
  return gm_cplx<F>(x, y);
}

template <class F> __device__ __forceinline__ gm_cplx<F> gm_cx_exp(gm_cplx<F> z) {
  F x = z.re, y = z.im;
  if (y == (F)0) return gm_cplx<F>(gm_exp(x), y);  // NaN and infinite x included
  if (gm_isnan(x)) return gm_cplx<F>(x, x);
  if (!gm_isfinite(y)) {
    if (gm_isinf(x))
      return x > (F)0 ? gm_cplx<F>(x, y - y) : gm_cplx<F>((F)0, gm_copysign((F)0, y));
    return gm_cplx<F>(y - y, y - y);
  }
  F c = gm_cos(y), s = gm_sin(y);
  if (x > gm_cexplim(x)) {  // e^x * cos(y) may be finite where e^x is not
    F h = gm_exp(x * (F)0.5);
    return gm_cplx<F>((h * c) * h, (h * s) * h);
  }
  F e = gm_exp(x);
  return gm_cplx<F>(e * c, e * s);
}

template <class F> __device__ __forceinline__ gm_cplx<F> gm_cx_expm1(gm_cplx<F> z) {
  F x = z.re, y = z.im;
  if (y == (F)0) return gm_cplx<F>(x == (F)0 ? (F)0 : gm_expm1(x), y);  // +0 for -0 + 0j
  if (gm_isnan(x)) return gm_cplx<F>(x, x);
  if (!gm_isfinite(y)) {
    if (gm_isinf(x))
      return x > (F)0 ? gm_cplx<F>(x, y - y) : gm_cplx<F>((F)-1, gm_copysign((F)0, y));
    return gm_cplx<F>(y - y, y - y);
  }
  if (!gm_isfinite(x) || x > gm_cexplim(x)) {
    gm_cplx<F> w = gm_cx_exp(z);
    return gm_cplx<F>(w.re - (F)1, w.im);
  }
  // e^x cos y - 1 = expm1(x) cos y - 2 sin^2(y/2): no cancellation near z = 0
  F h = gm_sin(y * (F)0.5);
  return gm_cplx<F>(gm_expm1(x) * gm_cos(y) - (F)2 * h * h, gm_exp(x) * gm_sin(y));
}

template <class F> __device__ __forceinline__ gm_cplx<F> gm_cx_log(gm_cplx<F> z) {
  F x = z.re, y = z.im, ax = gm_abs(x), ay = gm_abs(y), re;
  F hi = ax > ay ? ax : ay, lo = ax > ay ? ay : ax;
  if (!gm_isfinite(x) || !gm_isfinite(y)) re = gm_log(gm_hypot(x, y));  // hypot(inf, NaN) = inf
  else if (hi >= (F)0.5 && hi <= (F)2)  // |z| near 1: log|z| = log1p(|z|^2 - 1) / 2
    re = (F)0.5 * gm_log1p((hi - (F)1) * (hi + (F)1) + lo * lo);
  else if (hi > gm_cbig(x)) re = gm_log(gm_hypot(x * (F)0.25, y * (F)0.25)) + (F)2 * (F)GM_LN2;
  else if (hi < (F)1 / gm_cbig(x))
    re = gm_log(gm_hypot(x * gm_cbig(x), y * gm_cbig(x))) - gm_clnbig(x);
  else re = gm_log(gm_hypot(x, y));
  return gm_cplx<F>(re, gm_atan2(y, x));
}

template <class F> __device__ __forceinline__ gm_cplx<F> gm_cx_log1p(gm_cplx<F> z) {
  F x = z.re, y = z.im;
  if (gm_isfinite(x) && gm_isfinite(y) && gm_abs(x) < (F)0.5 && gm_abs(y) < (F)0.5)
    return gm_cplx<F>((F)0.5 * gm_log1p(x * ((F)2 + x) + y * y), gm_atan2(y, (F)1 + x));
  return gm_cx_log(gm_cplx<F>(x + (F)1, y));
}

template <class F> __device__ __forceinline__ gm_cplx<F> gm_cx_sqrt(gm_cplx<F> z) {
  F x = z.re, y = z.im;
  if (gm_isinf(y)) return gm_cplx<F>((F)gm_inf(), y);
  if (gm_isnan(x)) return gm_cplx<F>(x, x);
  if (gm_isinf(x)) {
    if (x < (F)0) return gm_cplx<F>(gm_isnan(y) ? y : (F)0, gm_copysign((F)gm_inf(), y));
    return gm_cplx<F>(x, gm_isnan(y) ? y : gm_copysign((F)0, y));
  }
  if (gm_isnan(y)) return gm_cplx<F>(y, y);
  if (x == (F)0 && y == (F)0) return gm_cplx<F>((F)0, y);
  F ax = gm_abs(x), ay = gm_abs(y), hi = ax > ay ? ax : ay, scale = (F)1;
  if (hi > gm_cbig(x)) { x *= (F)0.25; y *= (F)0.25; scale = (F)2; }
  else if (hi < (F)1 / gm_cbig(x)) {  // exact powers of 4: sqrt scales by their roots
    x *= (F)16777216 * (F)16777216;
    y *= (F)16777216 * (F)16777216;
    scale = (F)1 / (F)16777216;
  }
  F t = gm_sqrt((gm_hypot(x, y) + gm_abs(x)) * (F)0.5);
  if (x >= (F)0) return gm_cplx<F>(t * scale, y / ((F)2 * t) * scale);
  return gm_cplx<F>(gm_abs(y) / ((F)2 * t) * scale, gm_copysign(t, y) * scale);
}

template <class F> __device__ __forceinline__ gm_cplx<F> gm_cx_sinh(gm_cplx<F> z) {
  F x = z.re, y = z.im;
  if (gm_isfinite(x) && gm_isfinite(y)) {
    if (y == (F)0) return gm_cplx<F>(gm_sinh(x), y);
    F c = gm_cos(y), s = gm_sin(y), ax = gm_abs(x);
    if (ax > gm_cexplim(x)) {  // sinh, cosh ~ e^|x| / 2, squared halves so as not to overflow
      F h = gm_exp(ax * (F)0.5);
      return gm_cplx<F>(gm_copysign((F)1, x) * (((F)0.5 * h * c) * h), ((F)0.5 * h * s) * h);
    }
    return gm_cplx<F>(gm_sinh(x) * c, gm_cosh(x) * s);
  }
  if (gm_isnan(x)) return y == (F)0 ? gm_cplx<F>(x, y) : gm_cplx<F>(x, x);
  if (gm_isinf(x)) {
    if (!gm_isfinite(y)) return gm_cplx<F>(x * x, y - y);  // the real part's sign is free
    if (y == (F)0) return gm_cplx<F>(x, y);
    return gm_cplx<F>(x * gm_cos(y), gm_copysign((F)gm_inf(), gm_sin(y)));
  }
  if (x == (F)0) return gm_cplx<F>(x, y - y);
  return gm_cplx<F>(y - y, y - y);
}

template <class F> __device__ __forceinline__ gm_cplx<F> gm_cx_cosh(gm_cplx<F> z) {
  F x = z.re, y = z.im;
  if (gm_isfinite(x) && gm_isfinite(y)) {
    if (y == (F)0) return gm_cplx<F>(gm_cosh(x), gm_copysign((F)0, x) * y);
    F c = gm_cos(y), s = gm_sin(y), ax = gm_abs(x);
    if (ax > gm_cexplim(x)) {
      F h = gm_exp(ax * (F)0.5);
      return gm_cplx<F>(((F)0.5 * h * c) * h, gm_copysign((F)1, x) * (((F)0.5 * h * s) * h));
    }
    return gm_cplx<F>(gm_cosh(x) * c, gm_sinh(x) * s);
  }
  if (gm_isnan(x)) return y == (F)0 ? gm_cplx<F>(x, y) : gm_cplx<F>(x, x);
  if (gm_isinf(x)) {
    if (!gm_isfinite(y)) return gm_cplx<F>((F)gm_inf(), y - y);
    if (y == (F)0) return gm_cplx<F>((F)gm_inf(), gm_copysign((F)0, x) * y);
    return gm_cplx<F>((F)gm_inf() * gm_cos(y), x * gm_sin(y));
  }
  if (x == (F)0) return gm_cplx<F>(y - y, (F)0);
  return gm_cplx<F>(y - y, y - y);
}

template <class F> __device__ __forceinline__ gm_cplx<F> gm_cx_tanh(gm_cplx<F> z) {
  F x = z.re, y = z.im;
  if (gm_isfinite(x) && gm_isfinite(y)) {
    if (gm_abs(x) > gm_ctanhlim(x))  // tanh z = sign(x) + 4 i sin y cos y e^(-2|x|) to within u
      return gm_cplx<F>(gm_copysign((F)1, x),
                        (F)4 * gm_sin(y) * gm_cos(y) * gm_exp((F)-2 * gm_abs(x)));
    // with t = tan y, b = 1 + t^2, s = sinh x: (b s sqrt(1 + s^2) + i t) / (1 + b s^2),
    // accurate by the poles, where cosh 2x + cos 2y cancels
    F t = gm_tan(y), b = (F)1 + t * t, s = gm_sinh(x), d = (F)1 + b * s * s;
    return gm_cplx<F>(b * gm_sqrt((F)1 + s * s) * s / d, t / d);
  }
  if (gm_isnan(x)) return y == (F)0 ? gm_cplx<F>(x, y) : gm_cplx<F>(x, x);
  if (gm_isinf(x)) return gm_cplx<F>(gm_copysign((F)1, x), gm_copysign((F)0, y));
  if (x == (F)0) return gm_cplx<F>(x, y - y);
  return gm_cplx<F>(y - y, y - y);
}

// asin and acos of x + iy for finite x, y >= 0, by Hull, Fairgrieve and Tang's method
// (ACM TOMS 23(3), 1997): the real parts of asin (rs) and acos (rc), and asin's imaginary part
// (acos's is its negative)
template <class F> __device__ __forceinline__ void gm_cx_asin_core(F x, F y, F& rs, F& rc,
                                                                   F& im) {
  if (x > gm_cbig(x) || y > gm_cbig(x)) {  // asin z = atan2(x, y) + i log 2|z| to within u
    im = gm_log(gm_hypot(x * (F)0.5, y * (F)0.5)) + (F)2 * (F)GM_LN2;
    rs = gm_atan2(x, y);
    rc = gm_atan2(y, x);
    return;
  }
  if (x < (F)1 && y < gm_ceps(x) * ((F)1 - x)) {  // y^2 is negligible (or would underflow)
    im = y / gm_sqrt(((F)1 - x) * ((F)1 + x));
    rs = gm_asin(x);
    rc = gm_acos(x);
    return;
  }
  F r = gm_hypot(x + (F)1, y), s = gm_hypot(x - (F)1, y);
  F a = (F)0.5 * (r + s), b = x / a;
  F yr = y * (y / (r + (x + (F)1)));  // y^2 / (r + x + 1), kept from underflowing
  F am1 = x < (F)1 ? (F)0.5 * (yr + y * (y / (s + ((F)1 - x))))
                   : (F)0.5 * (yr + (s + (x - (F)1)));  // a - 1 without cancellation
  im = gm_log1p(am1 + gm_sqrt(am1 * (a + (F)1)));
  if (b <= (F)0.6417) {
    rs = gm_asin(b);
    rc = gm_acos(b);
    return;
  }
  F q = x <= (F)1 ? gm_sqrt((F)0.5 * (a + x) * (yr + (s + ((F)1 - x))))
                  : y * gm_sqrt((F)0.5 * ((a + x) / (r + (x + (F)1)) + (a + x) / (s + (x - (F)1))));
  rs = gm_atan2(x, q);  // q = sqrt(a^2 - x^2)
  rc = gm_atan2(q, x);
}

template <class F> __device__ __forceinline__ gm_cplx<F> gm_cx_acos(gm_cplx<F> z) {
  F x = z.re, y = z.im;
  if (gm_isfinite(x) && gm_isfinite(y)) {
    F rs, rc, im;
    gm_cx_asin_core(gm_abs(x), gm_abs(y), rs, rc, im);
    return gm_cplx<F>(gm_signbit(x) ? (F)2 * (F)GM_PI_2 - rc : rc, gm_signbit(y) ? im : -im);
  }
  if (gm_isnan(x)) return gm_isinf(y) ? gm_cplx<F>(x, -y) : gm_cplx<F>(x, x);
  if (gm_isnan(y)) {
    if (x == (F)0) return gm_cplx<F>((F)GM_PI_2, y);
    if (gm_isinf(x)) return gm_cplx<F>(y, -(F)gm_inf());
    return gm_cplx<F>(y, y);
  }
  F ni = gm_signbit(y) ? (F)gm_inf() : -(F)gm_inf();
  if (gm_isinf(y))
    return gm_cplx<F>(gm_isinf(x) ? (x < (F)0 ? (F)3 * (F)0.5 * (F)GM_PI_2 : (F)0.5 * (F)GM_PI_2)
                                  : (F)GM_PI_2, ni);
  return gm_cplx<F>(x < (F)0 ? (F)2 * (F)GM_PI_2 : (F)0, ni);
}

template <class F> __device__ __forceinline__ gm_cplx<F> gm_cx_acosh(gm_cplx<F> z) {
  gm_cplx<F> w = gm_cx_acos(z);  // acosh z = +-i acos z, the sign giving a real part >= 0
  return gm_cplx<F>(gm_abs(w.im), gm_copysign(w.re, z.im));
}

template <class F> __device__ __forceinline__ gm_cplx<F> gm_cx_asinh(gm_cplx<F> z) {
  F x = z.re, y = z.im, re, im;
  if (gm_isfinite(x) && gm_isfinite(y)) {  // asinh z = -i asin(iz)
    F rs, rc;
    gm_cx_asin_core(gm_abs(y), gm_abs(x), rs, rc, re);
    im = rs;
  } else if (gm_isnan(x)) {
    if (y == (F)0) return gm_cplx<F>(x, y);
    return gm_isinf(y) ? gm_cplx<F>((F)gm_inf(), x) : gm_cplx<F>(x, x);
  } else if (gm_isnan(y)) {
    return gm_isinf(x) ? gm_cplx<F>(x, y) : gm_cplx<F>(y, y);
  } else {
    re = (F)gm_inf();
    im = gm_isinf(y) ? (gm_isinf(x) ? (F)0.5 * (F)GM_PI_2 : (F)GM_PI_2) : (F)0;
  }
  return gm_cplx<F>(gm_copysign(re, x), gm_copysign(im, y));
}

template <class F> __device__ __forceinline__ gm_cplx<F> gm_cx_atanh(gm_cplx<F> z) {
  F x = z.re, y = z.im, ax = gm_abs(x), ay = gm_abs(y), re, im;
  if (gm_isnan(x))
    return gm_isinf(y) ? gm_cplx<F>(gm_copysign((F)0, x), gm_copysign((F)GM_PI_2, y))
                       : gm_cplx<F>(x, x);
  if (gm_isnan(y)) {
    if (ax == (F)0 || gm_isinf(x)) return gm_cplx<F>(gm_copysign((F)0, x), y);
    return gm_cplx<F>(y, y);
  }
  if (gm_isinf(x) || gm_isinf(y) || ax > gm_cbig(x) || ay > gm_cbig(x)) {
    // atanh z = 1/z + i pi/2 to within u
    F h = gm_hypot(ax * (F)0.5, ay * (F)0.5);
    re = gm_isinf(x) || gm_isinf(y) ? (F)0 : (ax / h) / h * (F)0.25;
    im = (F)GM_PI_2;
  } else {
    if (ax == (F)1 && ay != (F)0 && ay < (F)1 / gm_cbig(x))  // (1 - x)^2 + y^2 underflows
      re = (F)0.5 * ((F)GM_LN2 - gm_log(ay));
    else
      re = (F)0.25 * gm_log1p((F)4 * ax / (((F)1 - ax) * ((F)1 - ax) + ay * ay));
    im = (F)0.5 * gm_atan2((F)2 * ay, ((F)1 - ax) * ((F)1 + ax) - ay * ay);
  }
  return gm_cplx<F>(gm_copysign(re, x), gm_copysign(im, y));
}

#define GM_CT(C, F) \
  __device__ __forceinline__ F gm_abs(C z) { return gm_hypot(z.re, z.im); } \
  __device__ __forceinline__ C gm_conj(C z) { return C(z.re, -z.im); } \
  __device__ __forceinline__ C gm_round(C z) { return C(gm_round(z.re), gm_round(z.im)); } \
  __device__ __forceinline__ F gm_real(C z) { return z.re; } \
  __device__ __forceinline__ F gm_imag(C z) { return z.im; } \
  __device__ __forceinline__ bool gm_isnan(C z) { return z.re != z.re || z.im != z.im; } \
  __device__ __forceinline__ bool gm_isinf(C z) { return gm_isinf(z.re) || gm_isinf(z.im); } \
  __device__ __forceinline__ bool gm_isfinite(C z) { \
    return gm_isfinite(z.re) && gm_isfinite(z.im); } \
  __device__ __forceinline__ C gm_sign(C z) { /* z / |z| by the complex division */ \
    if (gm_isnan(z)) return C(z.re + z.im, z.re + z.im); \
    F m = gm_abs(z); return m == (F)0 ? C((F)0) : z / C(m); }
GM_CT(gm_c64, float) GM_CT(gm_c128, double)

// the transcendental ones are templates, instantiated only by the kernels that call them (a
// kernel without complex math compiles none of this)
#define GM_CX template <class F> __device__ __forceinline__ gm_cplx<F>
GM_CX gm_exp(gm_cplx<F> z) { return gm_cx_exp(z); }
GM_CX gm_expm1(gm_cplx<F> z) { return gm_cx_expm1(z); }
GM_CX gm_log(gm_cplx<F> z) { return gm_cx_log(z); }
GM_CX gm_log1p(gm_cplx<F> z) { return gm_cx_log1p(z); }
GM_CX gm_sqrt(gm_cplx<F> z) { return gm_cx_sqrt(z); }
GM_CX gm_log2(gm_cplx<F> z) {
  gm_cplx<F> l = gm_cx_log(z);
  return gm_cplx<F>(l.re / (F)GM_LN2, l.im / (F)GM_LN2); }
GM_CX gm_log10(gm_cplx<F> z) {
  gm_cplx<F> l = gm_cx_log(z);
  return gm_cplx<F>(l.re / (F)2.302585092994046, l.im / (F)2.302585092994046); }
GM_CX gm_sinh(gm_cplx<F> z) { return gm_cx_sinh(z); }
GM_CX gm_cosh(gm_cplx<F> z) { return gm_cx_cosh(z); }
GM_CX gm_tanh(gm_cplx<F> z) { return gm_cx_tanh(z); }
GM_CX gm_sin(gm_cplx<F> z) {  // -i sinh(iz); NaN + i inf where the sign is free
  if (!gm_isfinite(z.re) && gm_isinf(z.im)) return gm_cplx<F>(z.re - z.re, (F)gm_inf());
  gm_cplx<F> w = gm_cx_sinh(gm_cplx<F>(-z.im, z.re));
  return gm_cplx<F>(w.im, -w.re); }
GM_CX gm_cos(gm_cplx<F> z) { return gm_cx_cosh(gm_cplx<F>(-z.im, z.re)); }
GM_CX gm_tan(gm_cplx<F> z) {  // -i tanh(iz); C99's 0 sin(2x) beside +-i
  if (gm_isinf(z.im) && gm_isfinite(z.re))
    return gm_cplx<F>((F)0 * gm_sin((F)2 * z.re), gm_copysign((F)1, z.im));
  gm_cplx<F> w = gm_cx_tanh(gm_cplx<F>(-z.im, z.re));
  return gm_cplx<F>(w.im, -w.re); }
GM_CX gm_asinh(gm_cplx<F> z) { return gm_cx_asinh(z); }
GM_CX gm_acosh(gm_cplx<F> z) { return gm_cx_acosh(z); }
GM_CX gm_atanh(gm_cplx<F> z) { return gm_cx_atanh(z); }
GM_CX gm_asin(gm_cplx<F> z) {  // -i asinh(iz); NaN + i inf where the sign is free
  if (gm_isinf(z.re) && gm_isnan(z.im)) return gm_cplx<F>(z.im, (F)gm_inf());
  gm_cplx<F> w = gm_cx_asinh(gm_cplx<F>(-z.im, z.re));
  return gm_cplx<F>(w.im, -w.re); }
GM_CX gm_acos(gm_cplx<F> z) { return gm_cx_acos(z); }
GM_CX gm_atan(gm_cplx<F> z) {  // -i atanh(iz); +-pi/2 + 0i for +-inf + NaN i as NumPy (the
  // zero's sign is free; through atanh it would follow the sign bit of -NaN, which a GPU's
  // negation does not keep)
  if (gm_isinf(z.re) && gm_isnan(z.im)) return gm_cplx<F>(gm_copysign((F)GM_PI_2, z.re), (F)0);
  gm_cplx<F> w = gm_cx_atanh(gm_cplx<F>(-z.im, z.re));
  return gm_cplx<F>(w.im, -w.re); }
GM_CX gm_pow(gm_cplx<F> a, gm_cplx<F> b) {  // NumPy's rules, then exp(b log a)
  typedef gm_cplx<F> C;
  if (b.re == (F)0 && b.im == (F)0) return C((F)1);
  if (a.re == (F)0 && a.im == (F)0) return b.re > (F)0 ? C((F)0) : C(gm_nan(), gm_nan());
  if (b.im == (F)0 && b.re == gm_trunc(b.re) && gm_abs(b.re) < (F)100) {
    // a small integer power: repeated products, exact for z**1, as NumPy's
    int n = (int)b.re, m = n < 0 ? -n : n;
    if (n == 1) return a;
    if (n == 2) return a * a;
    if (n == 3) return a * (a * a);
    C r((F)1), p = a;
    for (int mask = 1;; mask <<= 1) {
      if (m & mask) r = r * p;
      if (m < (mask << 1)) break;
      p = p * p;
    }
    return n < 0 ? C((F)1) / r : r;
  }
  return gm_cx_exp(gm_cx_mul(b, gm_cx_log(a))); }
#undef GM_CX
"""
