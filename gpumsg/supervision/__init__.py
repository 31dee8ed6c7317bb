"""Process isolation: a device's worker in a child process, replaced when it fails."""

from .client import ProcessWorker

__all__ = ["ProcessWorker"]
