"""What every ``dev.nn`` call shares (caller's thread): tensors checked the way torch sees
them (C-ordered, any rank the call takes), reshaped views of a buffer for the cuDNN messages
(the same allocation under another shape), outputs new or ``out=``, the generated kernels'
launches, and the seeds of the calls that draw at random."""

from __future__ import annotations

import dataclasses
import math
import threading
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

import numpy as np

from ....errors import InvalidMessage
from ....messages._base import BufRef, as_ref
from ....messages._memo import MessageMemo
from ....messages.cudnn import IndexCheck
from . import _kernels

if TYPE_CHECKING:
    from ....client._device import Device

__all__ = ["NnBase", "view_as", "int_tuple", "checked_real"]

#: element types the generated kernels take
KERNEL_DTYPES = _kernels.DTYPES


def view_as(ref: BufRef, shape: tuple[int, ...]) -> BufRef:
    """``ref`` (a C-ordered buffer) under another shape of the same size: the same allocation,
    as torch's ``view`` of a contiguous tensor."""
    shape = tuple(int(s) for s in shape)
    if tuple(ref.shape) == shape:
        return ref
    if math.prod(shape) != ref.size:  # a bug of the caller, not of the user
        raise AssertionError(f"view of {ref.describe()} as {shape}")
    return dataclasses.replace(ref, shape=shape, order="C")


def int_tuple(value: Any, n: int, field: str, lo: int = 0) -> tuple[int, ...]:
    """An int or a sequence of ``n`` ints (each >= ``lo``), as torch's ``_ntuple``; else
    InvalidMessage naming ``field``."""
    items = list(value) if isinstance(value, (tuple, list)) else [value] * n
    if len(items) == 1 and n > 1:
        items = items * n
    ok = len(items) == n and all(
        isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in items)
    if not ok or any(int(v) < lo for v in items):
        raise InvalidMessage(f"{field}: expected an int or {n} ints, each >= {lo}, got "
                             f"{value!r}", field=field)
    return tuple(int(v) for v in items)


def checked_real(value: Any, field: str) -> float:
    """A finite real number; else InvalidMessage naming ``field``."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise InvalidMessage(f"{field}: expected a real number, got {value!r}", field=field)
    if not math.isfinite(float(value)):
        raise InvalidMessage(f"{field}: must be finite, got {value!r}", field=field)
    return float(value)


class NnBase:
    """The helpers of the ``dev.nn`` calls (mixed into :class:`~.Nn`)."""

    _dev: Device

    def __init__(self, device: Device) -> None:
        self._dev = device
        self._seed_lock = threading.Lock()
        self._seeds = np.random.default_rng()
        #: messages of calls repeated with the same buffers (into ``out=``)
        self._memo = MessageMemo()

    # -- tensors ------------------------------------------------------------------------------
    def _tensor(self, value: Any, field: str, ranks: tuple[int, ...] | None = None,
                what: str = "") -> BufRef:
        """The reference of tensor argument ``field``: a buffer of this device in C order
        (torch's contiguous layout; a buffer with at most one axis longer than 1 reads the
        same in either order), of one of ``ranks`` (``what`` says what they are)."""
        ref = as_ref(value, field)
        if ref.order != "C" and sum(s > 1 for s in ref.shape) > 1:
            raise InvalidMessage(f"{field}: {ref.describe()} is in F order; dev.nn takes "
                                 "C-ordered (row-major) tensors, as torch's contiguous ones",
                                 field=field)
        if ranks is not None and len(ref.shape) not in ranks:
            raise InvalidMessage(f"{field}: expected {what or ' or '.join(map(str, ranks))}"
                                 f"-D, got shape {tuple(ref.shape)}", field=field)
        return ref

    def _float(self, ref: BufRef, field: str, dtypes: tuple[str, ...] = KERNEL_DTYPES) -> str:
        if ref.dtype not in dtypes:
            raise InvalidMessage(f"{field}: {ref.describe()} must be one of {', '.join(dtypes)}",
                                 field=field)
        return ref.dtype

    @staticmethod
    def _like(ref: BufRef, field: str, like: BufRef, like_field: str) -> None:
        """``ref`` must have ``like``'s dtype and shape (torch would broadcast with a warning
        or refuse; gpumsg asks for the same shape)."""
        if ref.dtype != like.dtype or tuple(ref.shape) != tuple(like.shape):
            raise InvalidMessage(f"{field}: {ref.describe()} must have {like_field}'s dtype "
                                 f"and shape ({like.describe()})", field=field)

    # -- outputs ------------------------------------------------------------------------------
    def _out_ref(self, shape: tuple[int, ...], dtype: str, out: Any) -> BufRef:
        """The reference the call writes: ``out`` (checked: ``shape``, ``dtype``, C order)
        or a new one minted (allocated with the message by :meth:`_send`)."""
        if out is None:
            return self._dev.port.mint(tuple(shape), dtype, "C")
        ref = as_ref(out, "out")
        if tuple(ref.shape) != tuple(shape) or ref.dtype != dtype or (
                ref.order != "C" and sum(s > 1 for s in ref.shape) > 1):
            raise InvalidMessage(f"out: {ref.describe()} must be a C-ordered "
                                 f"{dtype}{list(shape)} buffer", field="out")
        return ref

    def _send(self, msg: Any, y: BufRef, out: Any) -> Future:
        """Send ``msg``, which writes ``y`` (from :meth:`_out_ref`): a future of the buffer."""
        port = self._dev.port
        return port.send_writing(msg, out) if out is not None else port.send_new(y, msg)

    def _alloc_out(self, shape: tuple[int, ...], dtype: str, out: Any) -> Any:
        """``out`` checked as in :meth:`_out_ref`, or a new C-ordered buffer (its future)."""
        if out is not None:
            self._out_ref(shape, dtype, out)
            return out
        return self._dev.alloc(tuple(shape), dtype, order="C")

    def _temp(self, shape: tuple[int, ...] | int, dtype: str) -> Any:
        return self._dev.alloc(shape, dtype, order="C")

    @staticmethod
    def _free(*buffers: Any) -> None:
        """Free temporaries after the work sent so far (frees are stream-ordered)."""
        for b in buffers:
            if b is not None:
                getattr(b, "buffer", b).free()

    # -- generated kernels --------------------------------------------------------------------
    def _launch(self, op: str, dtype: str, n: int, args: tuple, reads: tuple, writes: tuple,
                index: str | None = None) -> Future:
        return _kernels.launch(self._dev, _kernels.kernel_name(op, dtype, index), n, args,
                               reads, writes)

    def _launch_block(self, op: str, dtype: str, args: tuple, reads: tuple, writes: tuple
                      ) -> Future:
        return _kernels.launch_block(self._dev, _kernels.kernel_name(op, dtype), args, reads,
                                     writes)

    def _flagged(self, done: Future, y: Any, flag: Any, text: str, field: str) -> Future:
        """A future of ``y`` after ``done`` (the launch writing it and setting ``flag``, an
        i32 the kernel sets for an index out of range, the rows it touched holding NaN): an
        :class:`~gpumsg.messages.cudnn.IndexCheck` reads the flag at completion and, when
        set, fails this future with InvalidMessage(``text``, field) and every reader of
        ``y``, pipelined or not, with DependencyFailed."""
        checked = self._dev.port.send_writing(IndexCheck(flag, y, field, text), y)
        self._free(flag)
        return checked

    def _zero_flag(self) -> Any:
        flag = self._temp((1,), "i32")
        self._dev.memset(flag, 0)
        return flag

    # -- seeds --------------------------------------------------------------------------------
    def _seed(self, seed: Any) -> int:
        """``seed``, or a fresh one (each call draws new masks, as torch's do)."""
        if seed is not None:
            return seed
        with self._seed_lock:
            return int(self._seeds.integers(0, 1 << 62))
