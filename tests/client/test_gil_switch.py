"""The GIL switch interval while devices are open (client/gil.py): set to the short interval by
the first open device of thread isolation, put back by the last close unless someone else
changed it, left alone for process isolation, ``GPUMSG_SWITCH_INTERVAL`` to choose a value or
keep the interpreter's, a bad value refused before a device starts."""

from __future__ import annotations

import sys

import numpy as np
import pytest

import gpumsg
from gpumsg.client._gil import SHORT_S, SwitchInterval, configured_interval
from gpumsg.errors import InvalidMessage


@pytest.fixture
def interval():
    saved = sys.getswitchinterval()
    yield
    sys.setswitchinterval(saved)


def test_first_open_sets_last_close_restores(interval) -> None:
    sys.setswitchinterval(0.004)
    s = SwitchInterval()
    s.enter(SHORT_S)
    assert sys.getswitchinterval() == pytest.approx(SHORT_S, rel=0.05)
    s.enter(0.001)  # a second device: the first one's value stays
    assert sys.getswitchinterval() == pytest.approx(SHORT_S, rel=0.05)
    s.exit()
    assert sys.getswitchinterval() == pytest.approx(SHORT_S, rel=0.05)
    s.exit()
    assert sys.getswitchinterval() == pytest.approx(0.004)


def test_a_value_changed_meanwhile_is_left_alone(interval) -> None:
    sys.setswitchinterval(0.004)
    s = SwitchInterval()
    s.enter(SHORT_S)
    sys.setswitchinterval(0.002)  # the application's own choice, made while a device is open
    s.exit()
    assert sys.getswitchinterval() == pytest.approx(0.002)


def test_keep_leaves_the_interpreter_value(interval) -> None:
    sys.setswitchinterval(0.003)
    s = SwitchInterval()
    s.enter(None)
    assert sys.getswitchinterval() == pytest.approx(0.003)
    s.exit()
    assert sys.getswitchinterval() == pytest.approx(0.003)


@pytest.mark.parametrize("text,shares,expected", [
    ("", True, SHORT_S), ("", False, None), ("keep", True, None), ("KEEP", False, None),
    ("0.0002", True, 0.0002), ("1", False, 1.0)])
def test_environment(monkeypatch, text: str, shares: bool, expected) -> None:
    monkeypatch.setenv("GPUMSG_SWITCH_INTERVAL", text)
    assert configured_interval(shares) == expected


@pytest.mark.parametrize("text", ["0", "-1", "fast", "nan", "2"])
def test_bad_environment_is_refused_before_a_device_starts(monkeypatch, text: str) -> None:
    monkeypatch.setenv("GPUMSG_SWITCH_INTERVAL", text)
    with pytest.raises(InvalidMessage) as info:
        gpumsg.open_device(backend="sim")
    assert info.value.field == "GPUMSG_SWITCH_INTERVAL"


def test_an_open_device_runs_with_the_short_interval(monkeypatch, interval) -> None:
    monkeypatch.delenv("GPUMSG_SWITCH_INTERVAL", raising=False)
    sys.setswitchinterval(0.003)
    with gpumsg.open_device(backend="sim") as dev:
        assert sys.getswitchinterval() == pytest.approx(SHORT_S, rel=0.05)
        x = dev.to_device(np.array([1.0, 2.0], np.float32))
        y = dev.to_device(np.array([3.0, 4.0], np.float32))
        assert dev.cublas.dot(x, y).result() == 11.0
    assert sys.getswitchinterval() == pytest.approx(0.003)


def test_a_process_isolation_device_leaves_the_interval_alone(monkeypatch, interval) -> None:
    monkeypatch.delenv("GPUMSG_SWITCH_INTERVAL", raising=False)
    sys.setswitchinterval(0.003)
    with gpumsg.open_device(backend="sim", isolation="process") as dev:
        assert sys.getswitchinterval() == pytest.approx(0.003)
        x = dev.to_device(np.array([1.0, 2.0], np.float32))
        y = dev.to_device(np.array([3.0, 4.0], np.float32))
        assert dev.cublas.dot(x, y).result() == 11.0
    assert sys.getswitchinterval() == pytest.approx(0.003)
