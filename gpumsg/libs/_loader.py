"""Finding and binding CUDA libraries.

Each library folder declares a :class:`LibrarySpec` in its ``bindings.py``: its cuda-pathfinder
name, every C function it calls with ``argtypes``/``restype``, and how to read the library's
version; the folder's ``__init__`` registers it with the library. :func:`load` finds
the library with ``cuda.pathfinder.load_nvidia_dynamic_lib`` (NVIDIA wheels, conda, then the
system loader: CUDA 12 and CUDA 13 installs alike), opens it with ``ctypes.CDLL`` (which releases
the GIL during calls) and binds every function once per process. Nothing is loaded at import time.
"""

from __future__ import annotations

import ctypes
import dataclasses
import threading
from collections.abc import Callable
from typing import Any

from ..errors import GpuError

__all__ = ["Fn", "LibrarySpec", "LoadedLibrary", "load", "specs", "library_info",
           "LibraryNotFound"]


class LibraryNotFound(GpuError):
    """A CUDA library could not be found or opened."""


@dataclasses.dataclass(frozen=True)
class Fn:
    """One C function: its symbol, result type and argument types. ``optional`` functions may be
    absent in some library versions; they are bound as None there."""

    name: str
    restype: Any
    argtypes: tuple
    optional: bool = False


@dataclasses.dataclass(frozen=True)
class LibrarySpec:
    name: str  # the cuda-pathfinder library name
    functions: tuple[Fn, ...]
    version: Callable[[LoadedLibrary], str]


class LoadedLibrary:
    """An opened library with every declared function bound as an attribute."""

    def __init__(self, spec: LibrarySpec, path: str, cdll: ctypes.CDLL) -> None:
        self.spec = spec
        self.path = path
        self.cdll = cdll
        self.missing: list[str] = []
        for fn in spec.functions:
            try:
                f = getattr(cdll, fn.name)
            except AttributeError:
                if not fn.optional:
                    raise LibraryNotFound(
                        f"{spec.name} at {path} lacks {fn.name}; gpumsg needs CUDA 12 or 13 "
                        "libraries") from None
                self.missing.append(fn.name)
                setattr(self, fn.name, None)
                continue
            f.restype = fn.restype
            f.argtypes = list(fn.argtypes)
            setattr(self, fn.name, f)

    def version(self) -> str:
        return self.spec.version(self)

    def __getattr__(self, name: str) -> Any:  # only reached for undeclared names
        raise AttributeError(f"{self.spec.name} binding declares no function {name!r}")


_LOADED: dict[str, LoadedLibrary] = {}
_LOCK = threading.Lock()


def specs() -> dict[str, LibrarySpec]:
    """Every binding table gpumsg declares, by library name (importing :mod:`gpumsg.libs`
    registers the library folders)."""
    from .. import libs  # noqa: F401
    from ..service._registry import LIBRARIES

    return {spec.name: spec for lib in LIBRARIES.values() for spec in lib.specs}


def find_path(name: str) -> str:
    """Absolute path of library ``name`` as cuda-pathfinder finds it."""
    try:
        from cuda.pathfinder import load_nvidia_dynamic_lib
    except ImportError as exc:  # pragma: no cover - cuda-pathfinder is a dependency
        raise LibraryNotFound(f"cuda-pathfinder is not installed: {exc}") from exc
    try:
        return load_nvidia_dynamic_lib(name).abs_path
    except Exception as exc:
        raise LibraryNotFound(
            f"CUDA library {name!r} not found ({exc}); install the CUDA toolkit or "
            f"`pip install gpumsg[cu12]`") from exc


def load(name: str) -> LoadedLibrary:
    """Load and bind library ``name`` (once per process)."""
    lib = _LOADED.get(name)
    if lib is not None:
        return lib
    spec = specs().get(name)
    if spec is None:
        raise LibraryNotFound(f"gpumsg declares no library {name!r}")
    with _LOCK:
        lib = _LOADED.get(name)
        if lib is None:
            path = find_path(name)
            try:
                cdll = ctypes.CDLL(path)
            except OSError as exc:
                raise LibraryNotFound(f"cannot open {path}: {exc}") from exc
            lib = LoadedLibrary(spec, path, cdll)
            _LOADED[name] = lib
    return lib


def library_info() -> list[dict[str, Any]]:
    """For each declared library: name, path and version, or the error that stopped loading."""
    out = []
    for name in sorted(specs()):
        try:
            lib = load(name)
            out.append({"name": name, "path": lib.path, "version": lib.version(), "error": None})
        except Exception as exc:
            out.append({"name": name, "path": None, "version": None, "error": str(exc)})
    return out


# ctypes shorthands used by the binding tables
c_int = ctypes.c_int
c_int64 = ctypes.c_int64
c_size_t = ctypes.c_size_t
c_void_p = ctypes.c_void_p
c_char_p = ctypes.c_char_p
c_float = ctypes.c_float
c_double = ctypes.c_double
P = ctypes.POINTER
