"""KernelTrace: hooks around every operation that goes through the envelope.

The device thread calls ``before_enqueue``/``after_enqueue`` around the library or driver call
that issues the work; the stream's completion thread calls ``before_complete``/``after_complete``
when the work is observed done, with the latency from enqueue to completion. Hooks must be quick
and must not raise; they run on the device's own threads.
"""

from __future__ import annotations

import threading
import time

__all__ = ["OpRecord", "KernelTrace", "RecordingTrace", "NvtxTrace"]


class OpRecord:
    """One traced operation: its number, message type, stream and timestamps (ns)."""

    __slots__ = ("seq", "name", "stream", "t_enqueue", "t_complete", "error")

    def __init__(self, seq: int, name: str, stream: str) -> None:
        self.seq = seq
        self.name = name
        self.stream = stream
        self.t_enqueue = time.perf_counter_ns()
        self.t_complete = 0
        self.error: BaseException | None = None

    def __repr__(self) -> str:
        return f"OpRecord(#{self.seq} {self.name} on {self.stream})"


class KernelTrace:
    """Base class: every hook does nothing. Subclass and override what you need."""

    def before_enqueue(self, op: OpRecord) -> None:
        pass

    def after_enqueue(self, op: OpRecord) -> None:
        pass

    def before_complete(self, op: OpRecord) -> None:
        pass

    def after_complete(self, op: OpRecord, latency_s: float) -> None:
        pass


class RecordingTrace(KernelTrace):
    """Keeps every event as ``(hook, op, latency)`` in ``events`` (for tests and debugging)."""

    def __init__(self) -> None:
        self.events: list[tuple[str, OpRecord, float | None]] = []
        self._lock = threading.Lock()

    def _add(self, hook: str, op: OpRecord, latency: float | None = None) -> None:
        with self._lock:
            self.events.append((hook, op, latency))

    def before_enqueue(self, op: OpRecord) -> None:
        self._add("before_enqueue", op)

    def after_enqueue(self, op: OpRecord) -> None:
        self._add("after_enqueue", op)

    def before_complete(self, op: OpRecord) -> None:
        self._add("before_complete", op)

    def after_complete(self, op: OpRecord, latency_s: float) -> None:
        self._add("after_complete", op, latency_s)

    def completed(self) -> list[tuple[OpRecord, float]]:
        with self._lock:
            return [(op, lat) for hook, op, lat in self.events if hook == "after_complete"]


class NvtxTrace(KernelTrace):
    """Pushes an NVTX range named after the message around each enqueue (visible in Nsight
    Systems), then forwards every hook to ``inner``. Needs the ``nvtx`` package."""

    def __init__(self, inner: KernelTrace | None = None, domain: str = "gpumsg") -> None:
        try:
            import nvtx
        except ImportError as exc:
            raise ImportError("NvtxTrace needs the 'nvtx' package: pip install nvtx") from exc
        self._nvtx = nvtx
        self._domain = domain
        self.inner = inner or KernelTrace()

    def before_enqueue(self, op: OpRecord) -> None:
        self._nvtx.push_range(message=f"{op.name}#{op.seq}", domain=self._domain)
        self.inner.before_enqueue(op)

    def after_enqueue(self, op: OpRecord) -> None:
        self.inner.after_enqueue(op)
        self._nvtx.pop_range(domain=self._domain)

    def before_complete(self, op: OpRecord) -> None:
        self.inner.before_complete(op)

    def after_complete(self, op: OpRecord, latency_s: float) -> None:
        self.inner.after_complete(op, latency_s)
