"""CUDA libraries, one folder each (``bindings.py``, ``handle.py``, ``handlers.py``, ``sim.py``,
``client.py``; see docs/architecture.md, "Adding a library"). Importing this package registers
every library with the service: its message handlers, its per-device handle on each backend and
its client namespace. Nothing is loaded from disk until a device first uses a library.
"""

from __future__ import annotations

import importlib

from ..service.registry import LIBRARIES, Library

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
    """Client namespace name -> the class ``Device`` builds for it. Libraries that share a
    namespace (cuBLAS and cuBLASLt: ``dev.blas``) are combined into one class."""
    parts: dict[str, list[type]] = {}
    for lib in LIBRARIES.values():
        if lib.namespace is not None and lib.client is not None:
            parts.setdefault(lib.namespace, []).append(lib.client)
    out: dict[str, type] = {}
    for name, classes in parts.items():
        out[name] = classes[0] if len(classes) == 1 else type(classes[0].__name__,
                                                              tuple(classes), {})
    return out


__all__ = ["FOLDERS", "LIBRARIES", "Library", "namespaces"]
