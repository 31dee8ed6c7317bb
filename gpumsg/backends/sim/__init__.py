"""The NumPy simulator backend (``backend="sim"``)."""

from .device import SimBackend, SimFault

__all__ = ["SimBackend", "SimFault"]
