"""The Device namespaces of the libraries (``dev.cublas``, ``dev.linalg``, ...).

Each library names its raw namespace after itself when it registers (``namespace=`` of
:func:`~gpumsg.service._registry.register_library`); NumPy-, SciPy- and torch-level namespaces
(``dev.linalg``, ``dev.fft``, ``dev.random``, ``dev.sparse``, ``dev.nn``) are added with
:func:`register_namespace`, by one library or several (``dev.linalg``: cuSOLVER's
factorizations and cuBLAS's ``matmul``).

A library whose calls serve two namespaces keeps them in one implementation class and
registers a :func:`view` of it for each: a class built with the Device like the
implementation, carrying its private helpers and only the public names that namespace
shows, so each name lives in exactly one namespace without moving code between classes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["EXTRA", "register_namespace", "view"]

#: namespace name -> the classes that serve it besides the libraries' raw ones, in
#: registration order
EXTRA: dict[str, list[type]] = {}

#: class attributes a view never copies (each class has its own)
_OWN = frozenset({"__dict__", "__weakref__", "__module__", "__qualname__", "__doc__"})


def register_namespace(name: str, cls: type) -> None:
    """Add ``cls``'s methods to ``dev.<name>`` (built with the Device: ``cls(device)``)."""
    EXTRA.setdefault(name, []).append(cls)


def view(name: str, doc: str, impls: Iterable[type], public: Iterable[str] | Mapping[str, str],
         module: str | None = None) -> type:
    """A namespace class ``name`` over the implementation classes ``impls`` (the first one's
    ``__init__`` builds it): every private attribute of theirs, and of their public ones only
    ``public`` (a mapping renames: shown name -> implementation name). Raises RuntimeError for
    a public name no implementation has (a typo would otherwise hide a method)."""
    impls = tuple(impls)
    found: dict[str, Any] = {}
    for impl in reversed(impls):
        for klass in reversed(impl.__mro__[:-1]):
            found.update(vars(klass))
    attrs = {k: v for k, v in found.items() if k.startswith("_") and k not in _OWN}
    names = public.items() if isinstance(public, Mapping) else ((p, p) for p in public)
    for shown, real in names:
        if real not in found:
            raise RuntimeError(f"{name}: no method {real!r} in {[c.__name__ for c in impls]}")
        attrs[shown] = found[real]
    attrs["__doc__"] = doc
    attrs["__module__"] = module or impls[0].__module__
    attrs["__qualname__"] = name
    return type(name, (), attrs)


def public_names(cls: type) -> set[str]:
    """The public attribute names of a namespace class (what ``dev.<name>`` shows)."""
    return {k for klass in cls.__mro__[:-1] for k in vars(klass) if not k.startswith("_")}
