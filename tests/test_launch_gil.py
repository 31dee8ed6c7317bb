"""Enqueue-only calls keep the GIL (gpumsg/backends/cuda/calls.py): ``GPUMSG_LAUNCH_GIL`` chooses
``hold`` (default) or ``release``; a library function declared ``holds_gil`` is bound through
PyDLL, the others through CDLL; a held call really keeps other threads out; on the GPU the
device's driver calls and cuBLAS GEMMs are bound the configured way."""

from __future__ import annotations

import ctypes
import ctypes.util
import threading
import time

import pytest
from conftest import need_backend, run_python

import gpumsg
from gpumsg.backends.cuda.calls import dll_class, launch_gil
from gpumsg.errors import InvalidMessage
from gpumsg.libs.loader import Fn, LibrarySpec, LoadedLibrary

LIBC = ctypes.util.find_library("c") or "libc.so.6"
PYTHONAPI = ctypes._FUNCFLAG_PYTHONAPI  # what PyDLL sets: the call keeps the GIL


def _libc_spec() -> LibrarySpec:
    return LibrarySpec("c", (
        Fn("usleep", ctypes.c_int, (ctypes.c_uint,), holds_gil=True),
        Fn("abs", ctypes.c_int, (ctypes.c_int,)),
    ), version=lambda lib: "")


def _holds(fn) -> bool:
    return bool(fn._flags_ & PYTHONAPI)


@pytest.mark.parametrize("value, mode", [("", "hold"), ("hold", "hold"), (" Release ", "release")])
def test_the_mode_comes_from_the_environment(monkeypatch, value: str, mode: str) -> None:
    monkeypatch.setenv("GPUMSG_LAUNCH_GIL", value)
    assert launch_gil() == mode
    assert dll_class() is (ctypes.PyDLL if mode == "hold" else ctypes.CDLL)


def test_a_bad_mode_is_refused_naming_the_variable(monkeypatch) -> None:
    monkeypatch.setenv("GPUMSG_LAUNCH_GIL", "sometimes")
    with pytest.raises(InvalidMessage, match="hold' or 'release") as info:
        launch_gil()
    assert info.value.field == "GPUMSG_LAUNCH_GIL"


@pytest.mark.parametrize("mode", ["hold", "release"])
def test_only_declared_calls_are_bound_to_keep_the_gil(monkeypatch, mode: str) -> None:
    monkeypatch.setenv("GPUMSG_LAUNCH_GIL", mode)
    lib = LoadedLibrary(_libc_spec(), LIBC, ctypes.CDLL(LIBC))
    assert _holds(lib.usleep) == (mode == "hold")
    assert not _holds(lib.abs)
    assert lib.abs(-7) == 7 and lib.usleep(0) == 0  # both still call the library


@pytest.mark.parametrize("mode", ["hold", "release"])
def test_a_held_call_keeps_other_threads_out(monkeypatch, mode: str) -> None:
    """While a held call runs (here a 300 ms usleep) no other Python thread runs; a released
    one lets them."""
    monkeypatch.setenv("GPUMSG_LAUNCH_GIL", mode)
    lib = LoadedLibrary(_libc_spec(), LIBC, ctypes.CDLL(LIBC))
    ticks = [0]
    stop = threading.Event()
    started = threading.Event()

    def count() -> None:
        started.set()
        while not stop.is_set():
            ticks[0] += 1
            time.sleep(0.001)

    t = threading.Thread(target=count)
    t.start()
    started.wait()
    time.sleep(0.02)
    before = ticks[0]
    lib.usleep(300_000)
    during = ticks[0] - before
    stop.set()
    t.join()
    if mode == "hold":
        assert during <= 1, during  # at most a tick already past its check
    else:
        assert during >= 20, during


@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["hold", "release"])
def test_the_device_binds_its_enqueue_calls_as_configured(mode: str) -> None:
    """In a fresh process (the bindings are made once per process): the driver calls and the
    cuBLAS GEMMs are bound the configured way, and a pipelined GEMM chain with copies and pool
    allocations is right."""
    need_backend("cuda")
    code = """
import ctypes, numpy as np, gpumsg
from gpumsg.backends.cuda.calls import driver_calls
from gpumsg.libs.loader import load
rng = np.random.default_rng()
with gpumsg.open_device(0, backend="cuda") as dev:
    a_h = rng.standard_normal((96, 96)).astype(np.float32, order="F")
    a = dev.to_device(a_h).result()
    outs = [dev.alloc((96, 96), np.float32) for _ in range(20)]
    for o in outs:
        dev.sgemm(a, a, o.result(), 96, 96, 96)
    got = [dev.copy_to_host(o.result()).result() for o in outs]
    ref = a_h.astype(np.float64) @ a_h
    assert all(np.abs(g - ref).max() < 1e-3 * np.abs(ref).max() for g in got)
    flag = ctypes._FUNCFLAG_PYTHONAPI
    calls = driver_calls()
    print(bool(calls.event_record._flags_ & flag), bool(calls.copy_htod._flags_ & flag),
          bool(load("cublas").cublasSgemm_v2._flags_ & flag),
          bool(load("cublas").cublasCreate_v2._flags_ & flag))
"""
    out = run_python(code, timeout=300, env={"GPUMSG_LAUNCH_GIL": mode})
    assert out.returncode == 0, out.stderr
    held = mode == "hold"
    assert out.stdout.split() == [str(held), str(held), str(held), "False"]


@pytest.mark.gpu
def test_a_bad_mode_fails_the_open_not_a_later_call(monkeypatch) -> None:
    need_backend("cuda")
    monkeypatch.setenv("GPUMSG_LAUNCH_GIL", "sometimes")
    with pytest.raises(InvalidMessage) as info:
        gpumsg.open_device(0, backend="cuda")
    assert info.value.field == "GPUMSG_LAUNCH_GIL"
