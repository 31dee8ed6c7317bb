"""The standard's inspection API: ``__array_namespace_info__()``."""

from __future__ import annotations

from typing import Any

from . import _dtypes as D
from ._array import default_device, resolve_device

__all__ = ["__array_namespace_info__", "Info"]

_KINDS = {
    "bool": (D.bool,),
    "signed integer": D.SIGNED,
    "unsigned integer": D.UNSIGNED,
    "integral": D.SIGNED + D.UNSIGNED,
    "real floating": (D.float32, D.float64),
    "complex floating": D.COMPLEX,
    "numeric": D.SIGNED + D.UNSIGNED + (D.float32, D.float64) + D.COMPLEX,
}


class Info:
    def capabilities(self) -> dict[str, Any]:
        return {"boolean indexing": True, "data-dependent shapes": True,
                "max dimensions": 64}

    def default_device(self) -> Any:
        return default_device()

    def devices(self) -> list[Any]:
        return [default_device()]

    def default_dtypes(self, *, device: Any = None) -> dict[str, Any]:
        if device is not None:
            resolve_device(device)
        return {"real floating": D.float64, "complex floating": D.complex128,
                "integral": D.int64, "indexing": D.int64}

    def dtypes(self, *, device: Any = None, kind: Any = None) -> dict[str, Any]:
        if device is not None:
            resolve_device(device)
        if kind is None:
            kinds: tuple[Any, ...] = (D.bool,) + _KINDS["numeric"]
        elif isinstance(kind, str):
            if kind not in _KINDS:
                raise ValueError(f"unknown dtype kind {kind!r}")
            kinds = _KINDS[kind]
        else:
            seen: list[Any] = []
            for k in kind:
                for d in _KINDS[k]:
                    if d not in seen:
                        seen.append(d)
            kinds = tuple(seen)
        return {d.name: d for d in kinds}


def __array_namespace_info__() -> Info:
    return Info()
