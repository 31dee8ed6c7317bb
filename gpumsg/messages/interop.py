"""Interop messages: the device side of DLPack export and import (``client/dlpack.py``).

==================  ============  ==========================================================
message             stream        reply
==================  ============  ==========================================================
ExportSync          see below     ``(device_ptr, host_ptr, keep)`` (answered at once for a
                                  CUDA consumer stream; once the last use completed for a
                                  host consumer)
Adopt               compute       the device pointer (the adopted memory is a gpumsg buffer)
==================  ============  ==========================================================

Stream handles follow the DLPack convention for CUDA: ``1`` the legacy default stream, ``2``
the per-thread default stream, ``-1`` no synchronization, any other positive value a
``CUstream`` of this device's context. ``0`` is refused (ambiguous in the DLPack spec).
"""

from __future__ import annotations

from ._base import MAX_NBYTES, BufRef, Message, _bool, _fail, _int, _ref, _set, message

__all__ = ["ExportSync", "Adopt", "NO_SYNC", "HOST_CONSUMER"]

#: ``stream`` value: the consumer asks for no synchronization
NO_SYNC = -1
#: ``stream`` value used by the client for a host (kDLCPU) consumer: answer after completion
HOST_CONSUMER = 0


def _stream(msg: object, field: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _fail(msg, field, f"must be an int stream handle, got {value!r}")
    if value < -1 or value >= 1 << 64:
        raise _fail(msg, field, f"must be -1, 0 or a CUstream handle, got {value}")
    if 3 <= value < _FIRST_PAGE:
        # a handle is the address of the driver's stream object (1 and 2 name the legacy and
        # the per-thread default streams): a small number is no stream, and the driver would
        # dereference it
        raise _fail(msg, field, f"{value} is not a CUstream handle (a stream's address, or 1 "
                    "for the legacy and 2 for the per-thread default stream)")
    return int(value)


#: addresses below this are never mapped: no CUstream lives there
_FIRST_PAGE = 4096


@message(buffers=("buffer",))
class ExportSync(Message):
    """Order a DLPack consumer after every use of ``buffer`` gpumsg has issued so far.

    ``stream`` > 0: the device thread records (or reuses) a fence event after the buffer's last
    write and last reads on gpumsg's streams and makes the consumer's CUDA stream wait on it
    (``cuStreamWaitEvent``), then answers at once: nothing waits on the GPU. ``stream`` == 0
    (:data:`HOST_CONSUMER`): the answer comes once those uses have completed, for a consumer on
    the host. ``stream`` == -1: no ordering. The reply is ``(device_ptr, host_ptr, keep)``:
    ``host_ptr`` is the host address of the bytes on the simulator (0 on CUDA) and ``keep`` an
    object that keeps them alive."""

    buffer: BufRef
    stream: int = HOST_CONSUMER

    def __post_init__(self) -> None:
        _set(self, "buffer", _ref(self, "buffer", self.buffer))
        _set(self, "stream", _stream(self, "stream", self.stream))


@message(buffers=("out",))
class Adopt(Message):
    """Make external memory a gpumsg buffer: ``ptr`` is a device pointer of this device (CUDA)
    or a host address (the simulator, whose DLPack peer is the host) holding ``out.nbytes``
    bytes. The memory is not the pool's: freeing ``out`` makes the compute stream wait for its
    uses and then calls the release registered under ``release`` (``service.interop``), which
    gives the memory back to its producer. ``readonly`` buffers refuse every write."""

    out: BufRef
    ptr: int
    readonly: bool = False
    release: int = 0

    def __post_init__(self) -> None:
        _set(self, "out", _ref(self, "out", self.out))
        _set(self, "ptr", _int(self, "ptr", self.ptr, 0, (1 << 64) - 1))
        _set(self, "readonly", _bool(self, "readonly", self.readonly))
        _set(self, "release", _int(self, "release", self.release, 0))
        if self.out.nbytes > MAX_NBYTES:
            raise _fail(self, "out", "is beyond any device")
        if self.ptr == 0 and self.out.nbytes:
            raise _fail(self, "ptr", "must not be NULL")
