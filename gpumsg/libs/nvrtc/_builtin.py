"""Kernels of gpumsg's own that other libraries launch on the device thread (cuSOLVER's triangle
kernels, cuDNN's layer norm): compiled with NVRTC once per device on first use (through the
disk cache), loaded through the device's module cache (``ctx.library("nvrtc")``).

A library keeps one :class:`BuiltinKernels` per program. :meth:`BuiltinKernels.get` answers the
loaded functions, or None when NVRTC or the compile is unavailable; ``status`` says which
("not built yet", "nvrtc", or "unavailable (...)"), so the caller can fall back to a path that
needs no kernel of its own.
"""

from __future__ import annotations

from typing import Any

from ...errors import GraphCaptureError

__all__ = ["BuiltinKernels"]


class BuiltinKernels:
    """One CUDA C++ program: ``names`` are ``extern "C"`` kernels, ``expressions`` template
    instantiations (``"f<float>"``), looked up by the same string. Device thread only."""

    def __init__(self, ctx: Any, source: str, filename: str, names: tuple[str, ...] = (),
                 expressions: tuple[str, ...] = (), options: tuple[str, ...] = ()) -> None:
        self._ctx = ctx
        self._source = source
        self._filename = filename
        self._names = names
        self._expressions = expressions
        self._options = options
        self._loaded: Any = None  # (module cache, {name: function}); False: unavailable
        self.status = "not built yet"

    def get(self) -> tuple[Any, dict[str, Any]] | None:
        """``(modules, {name or expression: function})``; None when the kernels cannot be had
        (the reason in ``status``). Inside a ``dev.graph`` recording a program not built yet
        raises GraphCaptureError: compiling and loading a module cannot happen under a stream
        capture (run the operation once outside the graph first)."""
        if self._loaded is None:
            capture = getattr(self._ctx, "capture", None)
            if capture is not None:
                name = type(self._ctx.current).__name__
                raise GraphCaptureError(f"{name} cannot be recorded before its kernels are "
                                        "built: run it once outside the graph first", name)
            try:
                from ._compiler import compile_program

                major, minor = self._ctx.props.compute_capability
                prog = compile_program(self._source, self._filename, f"sm_{major}{minor}",
                                       self._options, name_expressions=self._expressions)
                symbols = {n: n for n in self._names}
                symbols.update({e: prog.lowered[e] for e in self._expressions})
                mods = self._ctx.library("nvrtc")
                key = f"gpumsg.builtin.{self._filename}.{prog.key}"
                mods.load(key, prog.image, prog.kind, tuple(symbols.values()))
                self._loaded = (mods, {k: mods.function(key, s) for k, s in symbols.items()})
            except Exception as exc:  # noqa: BLE001 - the caller falls back (status says why)
                self._loaded = False
                self.status = f"unavailable ({type(exc).__name__}: {exc})"[:300]
            else:
                self.status = "nvrtc"
        return self._loaded or None
