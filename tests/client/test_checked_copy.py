"""dev.copy is checked (dtype, shape, layout); a raw byte copy is the explicit copy_bytes."""

from __future__ import annotations

import numpy as np
import pytest

import gpumsg
from tests.conftest import random_array


@pytest.mark.parametrize("dtype", ["f32", "f64", "c64", "i32", "u8"])
@pytest.mark.parametrize("order", "CF")
def test_copy_same_layout_copies_values(dev, rng, dtype: str, order: str) -> None:
    h = random_array(rng, (5, 7), dtype, order)
    src = dev.to_device(h)
    dst = dev.alloc((5, 7), gpumsg.as_dtype(dtype), order=order)
    assert dev.copy(dst, src).result() is None
    out = dev.copy_to_host(dst).result()
    np.testing.assert_array_equal(out, h)
    # repeated: the same message, the same answer on fresh data
    h2 = random_array(rng, (5, 7), dtype, order)
    dev.copy_from_host(src, h2)
    dev.copy(dst, src).result()
    np.testing.assert_array_equal(dev.copy_to_host(dst).result(), h2)


def test_copy_refuses_other_dtype(dev, rng) -> None:
    src = dev.to_device(random_array(rng, (3, 4), "f32"))
    dst = dev.alloc((3, 4), np.float64)
    with pytest.raises(gpumsg.InvalidMessage, match="dtype") as info:
        dev.copy(dst, src)
    assert info.value.field == "dst"


def test_copy_refuses_other_shape(dev, rng) -> None:
    src = dev.to_device(random_array(rng, (3, 4), "f32"))
    with pytest.raises(gpumsg.InvalidMessage, match="shape"):
        dev.copy(dev.alloc((4, 3), np.float32), src)
    with pytest.raises(gpumsg.InvalidMessage, match="shape"):
        dev.copy(dev.alloc((12,), np.float32), src)


def test_copy_refuses_other_order_never_transposes(dev, rng) -> None:
    h = random_array(rng, (3, 4), "f32", "C")
    src = dev.to_device(h)
    dst = dev.alloc((3, 4), np.float32, order="F")
    with pytest.raises(gpumsg.InvalidMessage, match="order") as info:
        dev.copy(dst, src)
    assert info.value.field == "order"
    assert "C order" in str(info.value) and "F order" in str(info.value)


@pytest.mark.parametrize("shape", [(1, 6), (6, 1), (6,), (1, 1, 6)])
def test_copy_between_orders_of_one_layout(dev, rng, shape) -> None:
    """Where at most one dimension exceeds 1, C and F lay the elements out alike."""
    h = random_array(rng, shape, "f64", "C")
    src = dev.to_device(h, order="C")
    dst = dev.alloc(shape, np.float64, order="F")
    dev.copy(dst, src).result()
    np.testing.assert_array_equal(dev.copy_to_host(dst).result(), h)


def test_copy_bytes_is_raw(dev, rng) -> None:
    h = random_array(rng, (3, 4), "f32", "C")
    src = dev.to_device(h)
    dst = dev.alloc((3, 4), np.float32, order="F")
    dev.copy_bytes(dst, src).result()
    out = dev.copy_to_host(dst).result()
    # the bytes, read in F order: the transpose's layout, as documented
    np.testing.assert_array_equal(out, h.ravel(order="C").reshape((3, 4), order="F"))
    # offsets and counts in bytes
    dst2 = dev.alloc((12,), np.float32)
    dev.memset(dst2, 0).result()
    dev.copy_bytes(dst2, src, 8, dst_offset=4, src_offset=16).result()
    got = dev.copy_to_host(dst2).result()
    np.testing.assert_array_equal(got[1:3], h.ravel()[4:6])
    assert got[0] == 0 and np.all(got[3:] == 0)
