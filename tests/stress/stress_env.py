"""Settings of tests/stress: fuzz, soak, fault and shutdown campaigns. (Not a conftest.py: the
tests here import it by name.)

The CI run uses small, real sizes (every campaign runs real cases). ``make stress`` sets
``GPUMSG_STRESS=full`` and runs the full sizes (``GPUMSG_STRESS_CASES`` fuzz cases, default
10,000; ``GPUMSG_STRESS_BACKEND`` picks the backend, default sim)."""

from __future__ import annotations

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

FULL = os.environ.get("GPUMSG_STRESS") == "full"
BACKEND = os.environ.get("GPUMSG_STRESS_BACKEND", "sim")
