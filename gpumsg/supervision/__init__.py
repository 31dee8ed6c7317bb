"""Process isolation: a device's worker in a child process, replaced when it fails. Importing
this package offers ``isolation="process"`` to :func:`gpumsg.open_device`."""

from ..client._device import register_isolation
from . import _handlers as handlers  # noqa: F401  (the worker's shared-memory messages)
from ._client import ProcessWorker

register_isolation("process", ProcessWorker)

__all__ = ["ProcessWorker"]
