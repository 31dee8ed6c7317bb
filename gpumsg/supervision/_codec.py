"""Pickling messages faster: a reducer made per type for frozen, slotted dataclasses (every
message, :class:`~gpumsg.messages._base.BufRef`, :class:`~gpumsg.messages._base.HostRef`).

The dataclass's own ``__getstate__``/``__setstate__`` look the fields up and set each one
through ``object.__setattr__`` at every pickle and unpickle: a 64^3 ``Sgemm`` took 8.0 µs to
pickle and 9.0 µs to unpickle. The reducer made here takes the fields with one
``operator.attrgetter`` and rebuilds the object with a function written for its type that
stores each field through its slot (as :func:`~gpumsg.messages._base.fast_init` does), without
running ``__post_init__`` (unpickling never did): 3.8 and 4.6 µs.

The rebuild function of a type is an attribute of this module named after the type
(``r|gpumsg/messages/blas|Sgemm``), made on first use in each process (module
``__getattr__``), so a process that unpickles needs no registration of its own. The reducers
go into :data:`copyreg.dispatch_table`: a message pickled anywhere in a process that imported
gpumsg unpickles to an equal message wherever gpumsg can be imported.
"""

from __future__ import annotations

import copyreg
import dataclasses
import importlib
import operator
import threading
from typing import Any

from ..messages._base import BufRef, HostRef

__all__ = ["register", "registered"]

_lock = threading.Lock()
#: types with a reducer made here, and types found unsuitable
_done: set[type] = set()


def _name(cls: type) -> str:
    return f"r|{cls.__module__.replace('.', '/')}|{cls.__qualname__.replace('.', '/')}"


def _suitable(cls: type) -> bool:
    """A frozen dataclass stored in slots only, pickled by the dataclass's own state methods."""
    params = getattr(cls, "__dataclass_params__", None)
    if params is None or not params.frozen or getattr(cls, "__dictoffset__", 1) != 0:
        return False
    if any(name in cls.__dict__ for name in ("__reduce__", "__reduce_ex__")):
        return False
    getstate = getattr(cls, "__getstate__", None)
    return getattr(getstate, "__name__", "") == "_dataclass_getstate"


def _make(cls: type) -> Any:
    """The rebuild function of ``cls`` (made, named and kept here)."""
    names = [f.name for f in dataclasses.fields(cls)]
    args = ", ".join(f"v{i}" for i in range(len(names)))
    body = "".join(f"    s{i}(o, v{i})\n" for i in range(len(names)))
    scope: dict[str, Any] = {"new": object.__new__, "cls": cls}
    for i, name in enumerate(names):
        scope[f"s{i}"] = getattr(cls, name).__set__  # the slot's member descriptor
    exec(f"def rebuild({args}):\n    o = new(cls)\n{body}    return o\n", scope)  # noqa: S102
    fn = scope["rebuild"]
    fn.__name__ = fn.__qualname__ = _name(cls)
    fn.__module__ = __name__
    globals()[fn.__name__] = fn
    return fn


def register(cls: type) -> bool:
    """Give ``cls`` its reducer if it is suitable; True when it has one."""
    if cls in _done:
        return cls in copyreg.dispatch_table
    with _lock:
        if cls in _done:
            return cls in copyreg.dispatch_table
        if _suitable(cls):
            names = [f.name for f in dataclasses.fields(cls)]
            fn = globals().get(_name(cls)) or _make(cls)
            if len(names) == 1:
                get = operator.attrgetter(names[0])
                copyreg.pickle(cls, lambda obj: (fn, (get(obj),)))
            elif names:
                get = operator.attrgetter(*names)
                copyreg.pickle(cls, lambda obj: (fn, get(obj)))
            else:
                copyreg.pickle(cls, lambda obj: (fn, ()))
        _done.add(cls)
        return cls in copyreg.dispatch_table


def registered(cls: type) -> bool:
    """Whether ``register`` has seen ``cls`` (cheap: called for every message sent)."""
    return cls in _done


def __getattr__(name: str) -> Any:
    """A rebuild function named in a pickle, made here on first use."""
    if name.startswith("r|"):
        try:
            _, module, qualname = name.split("|")
            cls: Any = importlib.import_module(module.replace("/", "."))
            for part in qualname.split("/"):
                cls = getattr(cls, part)
        except (ValueError, ImportError, AttributeError):
            raise AttributeError(name) from None
        with _lock:
            fn = globals().get(name)
            if fn is None:
                fn = _make(cls)
            return fn
    raise AttributeError(name)


register(BufRef)
register(HostRef)
