"""One shape of answer: a call with several outputs returns ONE future that resolves to the
tuple of them (a NamedTuple where names help), never a tuple of futures. The NamedTuples of the
libraries' answers live here. To chain such a call into the next one without waiting for it,
pass its outputs where the call takes them (``out=``, ``mean_out=``, ``stats=``, ...): the
buffers are known before the future resolves."""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any, NamedTuple

__all__ = ["Dropout", "EighResult", "NormGrads", "NormOutputs", "AttentionGrads",
           "AttentionOutputs", "QRResult", "SVDResult", "tuple_after"]


# NumPy's names (numpy.linalg's QRResult, EighResult, SVDResult)
class QRResult(NamedTuple):
    Q: Any
    R: Any


class EighResult(NamedTuple):
    eigenvalues: Any
    eigenvectors: Any


class SVDResult(NamedTuple):
    U: Any
    S: Any
    Vh: Any


class NormOutputs(NamedTuple):
    """A normalization's output ``y`` and the per-row (or per-channel) f32 statistics."""

    y: Any
    mean: Any
    invstd: Any


class NormGrads(NamedTuple):
    """A normalization's gradients (``dgamma``/``dbeta`` None where there was no gamma)."""

    dx: Any
    dgamma: Any
    dbeta: Any


class Dropout(NamedTuple):
    """A dropout's output and the reserve (u8) its backward needs."""

    y: Any
    reserve: Any


class AttentionOutputs(NamedTuple):
    """A training attention pass: its output and the logsumexp statistics of the backward."""

    o: Any
    stats: Any


class AttentionGrads(NamedTuple):
    dq: Any
    dk: Any
    dv: Any


def tuple_after(done: Future, kind: Any, *outs: Any) -> Future:
    """A future that resolves to ``kind(*buffers)`` (``kind`` None: a plain tuple), the
    GpuBuffers of ``outs`` (buffers, their futures, or None), once ``done``, the operation
    writing them, has resolved; or fails with its error."""
    out: Future = Future()

    def relay(f: Future) -> None:
        exc = f.exception()
        if exc is not None:
            out.set_exception(exc)
            return
        values = tuple(getattr(b, "buffer", b) for b in outs)
        out.set_result(values if kind is None else kind(*values))

    done.add_done_callback(relay)
    return out
