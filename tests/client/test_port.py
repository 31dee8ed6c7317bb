"""The Port: the only way library clients talk to their device. Its methods keep the Device's
contract (checked at the call site, one future per call), and no library client reaches a
private attribute of the Device."""

from __future__ import annotations

import ast
import os

import numpy as np
import pytest

import gpumsg
from gpumsg.client._port import Port
from gpumsg.errors import DeviceClosed, InvalidMessage
from gpumsg.messages.device import CopyDevice, Memset
from tests.conftest import ROOT

LIBS = os.path.join(ROOT, "gpumsg", "libs")
#: the names a library client gives the Device it was built with
_DEVICE_NAMES = {"dev", "device", "_dev", "_device"}


def _device_expr(node: ast.expr) -> bool:
    """``dev``, ``device``, ``self._dev``, ``self.dev`` ...: an expression naming a Device."""
    if isinstance(node, ast.Name):
        return node.id in _DEVICE_NAMES
    if isinstance(node, ast.Attribute):
        return node.attr in _DEVICE_NAMES | {"dev"}
    return False


def private_device_uses(source: str) -> list[str]:
    """``line: text`` of every private attribute read of a Device in ``source``."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and \
                not node.attr.startswith("__") and _device_expr(node.value):
            out.append(f"{node.lineno}: {ast.unparse(node)}")
    return out


def _client_modules() -> list[str]:
    paths = []
    for folder, _dirs, files in os.walk(LIBS):
        for f in files:
            if f.endswith(".py"):
                paths.append(os.path.join(folder, f))
    return sorted(paths)


@pytest.mark.parametrize("path", _client_modules(), ids=lambda p: os.path.relpath(p, LIBS))
def test_no_library_reaches_into_the_device(path: str) -> None:
    with open(path) as f:
        uses = private_device_uses(f.read())
    assert not uses, f"{path} uses private Device attributes: {uses}"


def test_the_scan_sees_a_private_use() -> None:
    src = "def f(self, dev):\n    dev._check_open()\n    self._dev._mint(1, 'f32', 'C')\n"
    assert len(private_device_uses(src)) == 2
    assert private_device_uses("def f(self):\n    self._dev.port.check_open()\n") == []


def test_port_sends_and_mints(backend: str) -> None:
    with gpumsg.open_device(0, backend=backend) as dev:
        port = dev.port
        assert isinstance(port, Port) and port.device is dev
        assert port.token == dev.port.token and port.generation == dev.generation
        port.check_open()
        src = dev.to_device(np.arange(1, 9, dtype=np.float32) * 1.5)
        ref = port.mint((8,), np.float32, "C")
        assert ref.shape == (8,) and ref.dtype == "f32" and ref.owner == port.token
        new = port.send_new(ref, CopyDevice(ref, src.result(60).ref))
        assert new.shape == (8,)  # known before it resolves
        buf = new.result(60)
        np.testing.assert_array_equal(dev.copy_to_host(buf).result(60),
                                      np.arange(1, 9, dtype=np.float32) * 1.5)
        written = port.send_writing(Memset(buf.ref, 0), buf)
        assert written.result(60) is buf
        np.testing.assert_array_equal(dev.copy_to_host(buf).result(60), np.zeros(8, np.float32))
        assert port.send(Memset(buf.ref, 0)).result(60) is None
        assert port.refusal() is None


def test_port_refuses_bad_input_at_the_call_site(backend: str) -> None:
    with gpumsg.open_device(0, backend=backend) as dev:
        with pytest.raises(InvalidMessage) as info:
            dev.port.mint((2, -1), np.float32, "C")
        assert info.value.field == "shape"
        with pytest.raises(InvalidMessage):
            dev.port.mint((2,), np.float32, "K")
        with pytest.raises(InvalidMessage):
            dev.port.send("not a message")


def test_port_after_close(backend: str) -> None:
    dev = gpumsg.open_device(0, backend=backend)
    buf = dev.alloc((4,), np.float32).result(60)
    ref, port = buf.ref, dev.port
    dev.close()
    with pytest.raises(DeviceClosed):
        port.check_open()
    assert isinstance(port.refusal(), DeviceClosed)
    port.post_unanswered(Memset(ref, 0), port.generation)  # dropped, nothing raised
