"""Fixtures of the array tests' own (the backends' come from ``tests/conftest.py``)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """A folder for generated kernels' CUDA text built for the host with g++
    (``prelude_host.build_kernel``); a skip where g++ is not installed."""
    import prelude_host as host

    if host.GXX is None:
        pytest.skip("g++ is not installed: the kernels' CUDA text cannot be built for the host")
    return str(tmp_path_factory.mktemp("kernels"))
