"""Every C function gpumsg binds resolves in the libraries found here: on CI those are the
``nvidia-*-cu12`` wheels (GPUMSG_REQUIRE_CU12=1 insists on CUDA 12), on the GPU machine the
CUDA 13 toolkit's. A machine with neither (a simulator-only install) skips a library it lacks,
unless GPUMSG_REQUIRE_CU12 is set."""

from __future__ import annotations

import ctypes
import os

import pytest

from gpumsg.libs._loader import LibraryNotFound, load, specs

SPECS = specs()


@pytest.mark.parametrize("name", sorted(SPECS))
def test_every_bound_symbol_resolves(name: str) -> None:
    try:
        lib = load(name)
    except LibraryNotFound as exc:
        if os.environ.get("GPUMSG_REQUIRE_CU12"):
            raise
        pytest.skip(f"{name} is not installed here ({exc}); GPUMSG_REQUIRE_CU12=1 insists")
    cdll = ctypes.CDLL(lib.path)
    missing = [fn.name for fn in SPECS[name].functions
               if not fn.optional and not hasattr(cdll, fn.name)]
    assert not missing, f"{lib.path} lacks {missing}"
    version = lib.version()
    assert version and version[0].isdigit()
    if os.environ.get("GPUMSG_REQUIRE_CU12"):
        # the cu12 wheels install under nvidia/<lib>/lib (sonames follow each library's own
        # version: libcudnn.so.9, libcusolver.so.11, libnccl.so.2), CUDA 13's under nvidia/cu13/
        from_cu12_wheel = "/nvidia/" in lib.path and "/cu13/" not in lib.path
        assert from_cu12_wheel or version.startswith("12"), lib.path


def test_declared_libraries() -> None:
    assert "cublas" in SPECS
    for spec in SPECS.values():
        names = [fn.name for fn in spec.functions]
        assert len(names) == len(set(names)), f"{spec.name} declares a function twice"
