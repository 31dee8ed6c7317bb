"""Kernels built on CUB (NVIDIA CCCL): compiled by NVRTC against the CCCL headers
(``nvidia-cuda-cccl``, found by ``cuda.pathfinder``), once per device.

The simulator runs each kernel's NumPy twin (registered under the kernel's name). Where the
headers are missing the simulator loads its twin alone; a GPU cannot and says which package to
install."""

from __future__ import annotations

import threading
import weakref
from typing import Any

from ..libs._loader import LibraryNotFound
from ._codegen import kernel_for

__all__ = ["cub_kernel", "include_dir", "unsigned_type", "tag"]

_lock = threading.Lock()
#: device -> {name: future of the simulator's twin module}, where NVRTC cannot see CCCL
_twins: weakref.WeakKeyDictionary[Any, dict[str, Any]] = weakref.WeakKeyDictionary()

#: C unsigned integer type of each width in bytes
_UNSIGNED = {1: "unsigned char", 2: "unsigned short", 4: "unsigned int", 8: "unsigned long long"}


def unsigned_type(nbytes: int) -> str:
    """The C unsigned integer type ``nbytes`` wide."""
    return _UNSIGNED[nbytes]


def tag(dt: Any) -> str:
    """The dtype's part of a kernel name (bool and uint8 share their storage, not their
    meaning)."""
    from . import _dtypes as D

    return "b8" if dt == D.bool else D.storage_name(dt)


def include_dir() -> str | None:
    """The CCCL include folder, or None where it cannot be found."""
    try:
        import cuda.pathfinder as pf

        return pf.find_nvidia_header_directory("cccl")
    except Exception:  # noqa: BLE001 - no pathfinder, or no CCCL: the caller decides
        return None


def cub_kernel(dev: Any, name: str, source: str, signature: tuple[str, ...]) -> Any:
    """Kernel ``name`` of ``source`` (which includes CUB headers) on ``dev``, compiled once per
    device. Without the CCCL headers the simulator loads its twin alone; on a GPU this raises
    LibraryNotFound, which names the package to install."""
    inc = include_dir()
    if inc is not None:
        return kernel_for(dev, name, source, signature,
                          (f"-I{inc}", "-std=c++17", "-default-device"))
    if dev.backend != "sim":
        raise LibraryNotFound(f"{name} is built on CUB and needs the CCCL headers, which "
                              "cuda.pathfinder did not find: pip install nvidia-cuda-cccl-cu12 "
                              "(or install a CUDA toolkit)")
    with _lock:
        mine = _twins.get(dev)
        if mine is None:
            mine = _twins[dev] = {}
        fut = mine.get(name)
        if fut is None:
            fut = mine[name] = dev.load_module(b"sim:" + name.encode(), {name: signature})
    return fut.result()[name]
