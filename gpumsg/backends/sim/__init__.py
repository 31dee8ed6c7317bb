"""The NumPy simulator backend (``backend="sim"``)."""

from ._device import SimBackend, SimFault

__all__ = ["SimBackend", "SimFault"]
