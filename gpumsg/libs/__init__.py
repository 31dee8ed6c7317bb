"""CUDA libraries, one folder each (``bindings.py``, ``handle.py``, ``handlers.py``, ``sim.py``,
``client.py``; see docs/architecture.md, "Adding a library"). Importing this package registers
every library with the service: its message handlers, its per-device handle on each backend and
its client namespace. Nothing is loaded from disk until a device first uses a library.
"""

from __future__ import annotations

import importlib

from ..service._registry import LIBRARIES, Library
from ._namespace import EXTRA

#: the library folders, in registration order: adding a library adds one name here
FOLDERS = (
    "cublas",
    "cublaslt",
    "nvrtc",
    "cudnn",
    "cusolver",
    "nccl",
    "curand",
    "cusparse",
    "cufft",
)

for _folder in FOLDERS:
    importlib.import_module(f"{__name__}.{_folder}")


def namespaces() -> dict[str, type]:
    """Client namespace name -> the class ``Device`` builds for it (``cls(device)``): each
    library's raw namespace (``dev.cublas``, ...) and the NumPy-level ones
    (:mod:`gpumsg.libs._namespace`). Several classes serving one namespace (``dev.linalg``:
    cuSOLVER's and cuBLAS's) are joined into one class whose construction builds each part."""
    parts: dict[str, list[type]] = {}
    for lib in LIBRARIES.values():
        if lib.namespace is not None and lib.client is not None:
            parts.setdefault(lib.namespace, []).append(lib.client)
    for name, classes in EXTRA.items():
        parts.setdefault(name, []).extend(classes)
    return {name: classes[0] if len(classes) == 1 else _joined(name, classes)
            for name, classes in parts.items()}


def _joined(name: str, classes: list[type]) -> type:
    def __init__(self: object, device: object) -> None:
        # later parts' state wins where two set the same attribute: a MessageMemo keys its
        # entries by message type, so parts may share one
        for cls in classes:
            cls.__init__(self, device)  # type: ignore[misc]

    doc = " ".join(cls.__doc__ or "" for cls in classes).strip()
    return type(name.title(), tuple(classes), {"__init__": __init__, "__doc__": doc})


__all__ = ["FOLDERS", "LIBRARIES", "Library", "namespaces"]
