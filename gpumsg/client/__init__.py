"""The caller's side: :class:`Device`, buffers and their futures, host staging. Everything in
this package runs on the threads of the code that uses gpumsg, never on a device thread."""

from ._buffers import BufferFuture, GpuBuffer, GpuFuture, PinnedHostBuffer
from ._device import Device, devices, open_device, register_isolation
from ._stream import Stream

__all__ = ["Device", "open_device", "devices", "register_isolation", "GpuBuffer", "BufferFuture",
           "GpuFuture", "PinnedHostBuffer", "Stream"]
