"""gpumsg on a Ray cluster (optional: ``pip install gpumsg[ray]``).

::

    import ray, gpumsg.ray
    ray.init()                                   # a local or existing cluster
    rg = gpumsg.ray.open_devices(num_gpus=8)     # one actor per GPU, placed by Ray
    x = rg[3].to_device(arr)                     # the Device API: futures, buffers, errors
    rg.least_loaded().cublas.gemm(...)             # placement by each actor's Stats
    comm = rg.nccl()                             # NCCL across actors, unique id through Ray
    comm.all_reduce([...]).result()

See :mod:`gpumsg.ray._client` (the caller's side) and :mod:`gpumsg.ray._actor` (the actor).
"""

from __future__ import annotations

try:
    import ray as _ray  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError("gpumsg.ray needs Ray: pip install 'gpumsg[ray]' (or 'ray>=2.9')") from exc

from ._actor import DeviceActor
from ._client import (
    RemoteBuffer,
    RemoteCommunicator,
    RemoteDevice,
    RemoteDeviceGroup,
    RemoteFuture,
    open_devices,
)
from ._handles import Handle

__all__ = ["open_devices", "RemoteDevice", "RemoteBuffer", "RemoteFuture", "RemoteDeviceGroup",
           "RemoteCommunicator", "DeviceActor", "Handle"]
