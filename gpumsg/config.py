"""gpumsg's options, in one place: a frozen :class:`Config`, set for the process with
:func:`configure` and read with :func:`config`; an option's ``GPUMSG_*`` environment variable,
when set, overrides it. Precedence, lowest first: the built-in default, ``configure(...)``, the
environment variable.

    import gpumsg
    gpumsg.configure(blas_replay=False, switch_interval=0.002)
    with gpumsg.config.configured(fft_replay=False):   # for a block (tests)
        ...

A field left None means the built-in default. Each option is read where it takes effect, and
every read goes through :func:`setting` (this module is the only reader of ``GPUMSG_*``
variables): options read when a device opens (replays, the switch interval, the backpressure
bounds, the worker's start method) take a change at the next ``open_device``; the raw launch
mode is read once per process, at the first GPU launch. A value is checked where it is used:
a bad one raises :class:`~gpumsg.errors.InvalidMessage` (or ValueError) naming the variable.
Process isolation hands the configured values to its workers as environment variables.

Each field of :class:`Config` has the variable ``GPUMSG_`` + its name in capitals:

| field (variable ``GPUMSG_<FIELD>``) | default | what it sets |
|---|---|---|
| ``backpressure`` | built in | ``off`` or ``HIGH/LOW``: mailbox depths to pause/resume at |
| ``blas_replay`` | on | repeated GEMMs (cuBLAS, cuBLASLt) replayed as CUDA graphs  |
| ``blas_level_replay`` | on | the same for level-1/2 BLAS calls and reductions |
| ``cudnn_replay`` | on | repeated cuDNN calls replayed as CUDA graphs |
| ``fft_replay`` | on | repeated FFT executions replayed as CUDA graphs |
| ``sparse_replay`` | on | repeated SpMV/SpMM replayed as CUDA graphs |
| ``driver_replay`` | on | the device's own repeated small work replayed as CUDA graphs |
| ``cudnn_frontend`` | on | cuDNN's graph API through nvidia-cudnn-frontend where installed |
| ``cusparse_device_scalars`` | off | SpMV's alpha/beta read from device memory (an experiment) |
| ``cache_dir`` | ``$XDG_CACHE_HOME/gpumsg/nvrtc`` | the folder of NVRTC's image cache |
| ``profile`` | none | a file the device thread writes a cProfile of itself to |
| ``raw_launch`` | ``hold`` | how cuGraphLaunch is called: ``hold``, ``release``, ``0`` |
| ``switch_interval`` | short while open | the GIL switch interval (seconds) or ``keep`` |
| ``worker_start`` | ``forkserver`` | how process workers start: ``forkserver`` or ``spawn`` |
| ``worker_spin_us`` | built in | a process worker's spin for its next request (µs; ``off``) |
| ``worker_settle_us`` | built in | a process worker's wait for more requests (µs) |
| ``sim_devices`` | 4 | how many simulated devices there are (``devices()`` on the simulator) |
| ``array_fusion`` | on | ``gpumsg.array_api`` fuses chains of element-wise calls into one kernel |
| ``caller_runs`` | on | a caller runs its own message on an idle device (off: the device thread) |
| ``multi_issue`` | ``caller`` | who issues collectives and peer copies: ``caller``, ``members`` |
| ``streams`` | 1 | compute streams per device (1 to 16): a pool placing independent work |
| ``stream_placement`` | on | independent messages placed on idle streams of the pool |

Booleans are written to and read from the environment as ``1``/``0`` (``0``, ``no``, ``off``
and ``false`` turn an option off).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import threading
from collections.abc import Iterator
from typing import Any

from .errors import InvalidMessage

__all__ = ["Config", "ENVIRONMENT", "config", "configure", "configured", "environ", "setting"]


@dataclasses.dataclass(frozen=True)
class Config:
    """gpumsg's options (the table in :mod:`gpumsg.config`); None: the built-in default."""

    backpressure: str | None = None
    blas_replay: bool | None = None
    blas_level_replay: bool | None = None
    cudnn_replay: bool | None = None
    fft_replay: bool | None = None
    sparse_replay: bool | None = None
    driver_replay: bool | None = None
    cudnn_frontend: bool | None = None
    cusparse_device_scalars: bool | None = None
    cache_dir: str | None = None
    profile: str | None = None
    raw_launch: str | None = None
    switch_interval: float | str | None = None
    worker_start: str | None = None
    worker_spin_us: float | str | None = None
    worker_settle_us: float | str | None = None
    sim_devices: int | str | None = None
    array_fusion: bool | None = None
    caller_runs: bool | None = None
    multi_issue: str | None = None
    streams: int | str | None = None
    stream_placement: bool | None = None


#: field -> its environment variable
ENVIRONMENT = {f.name: "GPUMSG_" + f.name.upper() for f in dataclasses.fields(Config)}
_FIELD = {v: k for k, v in ENVIRONMENT.items()}
_TYPES = {f.name: f.type for f in dataclasses.fields(Config)}

_lock = threading.Lock()
_current = Config()


def config() -> Config:
    """The process's configuration (without the environment's overrides: see :func:`setting`)."""
    return _current


def _check(changes: dict[str, Any]) -> None:
    for name, value in changes.items():
        if name not in ENVIRONMENT:
            raise InvalidMessage(f"configure: no option {name!r}; known: "
                                 f"{', '.join(ENVIRONMENT)}", field=name)
        if value is None:
            continue
        kind = _TYPES[name]
        ok = (isinstance(value, bool) if kind == "bool | None" else
              isinstance(value, str) if kind == "str | None" else
              isinstance(value, (int, float, str)) and not isinstance(value, bool))
        if not ok:
            raise InvalidMessage(f"configure: {name} takes {kind}, got {value!r}", field=name)


def configure(**changes: Any) -> Config:
    """Change options for the whole process (fields of :class:`Config`; None restores the
    built-in default); returns the new configuration. Raises InvalidMessage for an unknown
    option or a value of the wrong type (values are checked further where they are used)."""
    global _current
    _check(changes)
    with _lock:
        _current = dataclasses.replace(_current, **changes)
        return _current


@contextlib.contextmanager
def configured(**changes: Any) -> Iterator[Config]:
    """:func:`configure` for the duration of a ``with`` block, then the previous options."""
    global _current
    _check(changes)
    with _lock:
        before = _current
        _current = dataclasses.replace(before, **changes)
    try:
        yield _current
    finally:
        with _lock:
            _current = before


def _text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


def setting(variable: str) -> str | None:
    """The text of option ``variable`` (its ``GPUMSG_*`` name) as its reader parses it: the
    environment variable when set, else the configured value (booleans as ``1``/``0``), else
    None (the reader's built-in default). The one place gpumsg reads its environment."""
    if variable not in _FIELD:
        raise KeyError(f"{variable} is not a gpumsg option")
    value = os.environ.get(variable)
    if value is not None:
        return value
    return _text(getattr(_current, _FIELD[variable]))


def environ() -> dict[str, str]:
    """The configured options as environment variables (for a worker process, under the
    parent's own environment, which overrides them as it does here)."""
    out = {}
    for name, variable in ENVIRONMENT.items():
        text = _text(getattr(_current, name))
        if text is not None:
            out[variable] = text
    return out
