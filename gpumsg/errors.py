"""The gpumsg error tree.

Every error the package raises on purpose is a :class:`GpuError`. Errors that describe bad input
are raised at the call site, before anything reaches the device; errors that happen on the device
arrive through the operation's future.
"""

from __future__ import annotations

__all__ = [
    "GpuError",
    "InvalidMessage",
    "IndexOutOfRange",
    "GpuRefStale",
    "DeviceClosed",
    "ContextPoisoned",
    "WorkerDied",
    "OperationTimeout",
    "Unrecoverable",
    "OutOfMemory",
    "OutOfBudget",
    "LibraryError",
    "CudaError",
    "DependencyFailed",
    "FaultInjectionDisabled",
    "CompileError",
    "GraphCaptureError",
    "LinAlgError",
    "SingularMatrix",
    "NotPositiveDefinite",
    "DidNotConverge",
    "DriverNotFound",
    "STICKY_CUDA_ERRORS",
]

#: Driver errors after which the CUDA context is unusable for the rest of the process
#: ("sticky" errors). 701 (launch out of resources), 704/705 (peer access), 708, 709, 711-713
#: sit in the same numeric range but leave the context usable, so they fail only their request.
STICKY_CUDA_ERRORS = frozenset({700, 702, 710, 714, 715, 716, 717, 718, 719})


class GpuError(Exception):
    """Base class of every error gpumsg raises on purpose. Errors pickle with their attributes
    (they cross from a worker process to its client)."""

    def __new__(cls, *args: object, **kwargs: object) -> GpuError:
        self = Exception.__new__(cls, *args)
        self._ctor = (args, kwargs)  # to rebuild it through its own constructor when unpickled
        return self

    def __reduce__(self) -> tuple:
        args, kwargs = self._ctor
        state = {k: v for k, v in self.__dict__.items() if k != "_ctor"}
        return (_rebuild, (type(self), args, kwargs, state))


def _rebuild(cls: type, args: tuple, kwargs: dict, state: dict) -> GpuError:
    err = cls(*args, **kwargs)
    err.__dict__.update(state)
    return err


class InvalidMessage(GpuError, ValueError):
    """A message or call argument is invalid. ``field`` names the offending field."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class IndexOutOfRange(InvalidMessage, IndexError):
    """An index lies outside its axis (an integer-array index, ``take``, an embedding lookup),
    found by the kernel that used it: the operation's result (and every reader of it) fails
    with this error instead of holding values read from elsewhere."""


class GpuRefStale(GpuError):
    """A buffer handle was used after ``free()``, after its device was rebuilt or closed."""


class DeviceClosed(GpuError):
    """The device was closed; it accepts no more work."""


class ContextPoisoned(GpuError):
    """A sticky CUDA error destroyed the device's context.

    Every operation that was pending when it happened fails with this error, and the device
    refuses new work. ``code`` and ``name`` give the driver error (e.g. 700,
    ``CUDA_ERROR_ILLEGAL_ADDRESS``).
    """

    def __init__(self, message: str, code: int | None = None, name: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.name = name


class WorkerDied(ContextPoisoned):
    """The worker process of a process-isolated device died while this operation was pending."""


class OperationTimeout(ContextPoisoned):
    """An operation of a process-isolated device ran past the watchdog limit; the worker was
    replaced and this operation failed."""


class Unrecoverable(DeviceClosed):
    """The supervisor gave up: the device restarted too often and is now closed for good."""


class OutOfMemory(GpuError, MemoryError):
    """The driver could not satisfy an allocation (after one trim-and-retry).

    Only the request that asked for the memory fails; the device keeps serving.
    """

    def __init__(self, message: str, requested: int = 0, free: int | None = None,
                 total: int | None = None) -> None:
        super().__init__(message)
        self.requested = requested
        self.free = free
        self.total = total


class OutOfBudget(GpuError, MemoryError):
    """An allocation would take the device past its configured byte budget."""

    def __init__(self, requested: int, current: int, limit: int) -> None:
        super().__init__(
            f"allocation of {requested} bytes refused: {current} bytes in use, budget is "
            f"{limit} bytes (free buffers or raise the budget)"
        )
        self.requested = requested
        self.current = current
        self.limit = limit


class LibraryError(GpuError):
    """A CUDA library call returned an error status.

    ``lib`` is the library (``"cublas"``), ``function`` the C function, ``status`` the numeric
    status and ``name`` its symbolic name (``"CUBLAS_STATUS_INVALID_VALUE"``).
    """

    def __init__(self, lib: str, status: int, name: str, function: str = "") -> None:
        where = f" in {function}" if function else ""
        super().__init__(f"{lib} error {name} ({status}){where}")
        self.lib = lib
        self.status = status
        self.name = name
        self.function = function


class DriverNotFound(GpuError):
    """``backend="cuda"`` was asked for where there is no usable NVIDIA driver, GPU or
    ``cuda-bindings``; the message says what to install (``backend="auto"`` falls back to the
    simulator instead)."""


class CudaError(GpuError):
    """A CUDA driver call failed with a non-sticky error."""

    def __init__(self, code: int, name: str, function: str = "") -> None:
        where = f" in {function}" if function else ""
        super().__init__(f"CUDA driver error {name} ({code}){where}")
        self.code = code
        self.name = name
        self.function = function

    @property
    def sticky(self) -> bool:
        return self.code in STICKY_CUDA_ERRORS


class DependencyFailed(GpuError):
    """An operation read a buffer whose producer failed; ``__cause__`` is the producer's error."""


class FaultInjectionDisabled(GpuError):
    """``InjectFault`` was sent to a device opened without ``allow_fault_injection=True``."""


class CompileError(GpuError):
    """NVRTC refused a program. ``log`` is the compiler's log; ``name`` the program's name."""

    def __init__(self, message: str, log: str = "", name: str = "") -> None:
        super().__init__(f"{message}\n{log}" if log else message)
        self.log = log
        self.name = name


class GraphCaptureError(InvalidMessage):
    """A message cannot be recorded in (or replayed from) a graph; ``message`` names it."""

    def __init__(self, text: str, message: str = "") -> None:
        super().__init__(text, field=None)
        self.message = message


class LinAlgError(GpuError):
    """A factorization or solver reported a numerical failure through its ``info`` word, read
    back at completion. ``index`` is the 1-based position the library reported (LAPACK's
    ``info``); ``batch_item`` the 0-based matrix of a batched call (None for a single matrix);
    ``function`` the library function."""

    def __init__(self, message: str, index: int = 0, batch_item: int | None = None,
                 function: str = "") -> None:
        super().__init__(message)
        self.index = index
        self.batch_item = batch_item
        self.function = function


class SingularMatrix(LinAlgError):
    """LU found an exactly zero pivot: ``U[index-1, index-1] == 0`` (1-based ``index``)."""


class NotPositiveDefinite(LinAlgError):
    """Cholesky failed: the leading minor of order ``index`` is not positive definite."""


class DidNotConverge(LinAlgError):
    """An iterative eigen/SVD solver did not converge (``index`` as the library reports it)."""


class CollectiveError(GpuError):
    """A collective (NCCL or simulated) failed on a group of devices: a peer did not join within
    the timeout, a member died or was poisoned, or the library reported an asynchronous error.
    Every rank's future fails with it and the communicator is aborted (the next collective builds
    a new one). ``comm`` is the communicator's id, ``rank`` the rank this error is for (or -1)."""

    def __init__(self, message: str, comm: int = -1, rank: int = -1) -> None:
        super().__init__(message)
        self.comm = comm
        self.rank = rank
