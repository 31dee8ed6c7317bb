"""The cuSPARSE tests' device: one per backend for each module (opening a CUDA device per case
would dominate the GPU run)."""

from __future__ import annotations

import pytest

import gpumsg
from tests.conftest import BACKENDS, need_backend


@pytest.fixture(scope="module", params=BACKENDS)
def dev(request: pytest.FixtureRequest):
    need_backend(request.param)
    d = gpumsg.open_device(0, backend=request.param)
    yield d
    d.close()
