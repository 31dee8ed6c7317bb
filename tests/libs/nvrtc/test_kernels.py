"""User kernels: NVRTC compilation (options, headers, templates, errors, the disk cache),
precompiled images, launches through the envelope, against NumPy on random data. On the simulator
the kernels run their NumPy versions (tests/libs/kernels.py)."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import gpumsg
from gpumsg.libs._loader import LibraryNotFound, load
from gpumsg.libs.nvrtc._compiler import compile_program
from tests.conftest import ROOT, need_backend
from tests.libs.harness import BadArg, assert_close, check_bad_args, wide
from tests.libs.kernels import BLOCK_SUM, BROKEN, SAXPY, SCALE, SCALE_HEADERS

try:
    load("nvrtc")
    NVRTC = True
except LibraryNotFound:
    NVRTC = False
need_nvrtc = pytest.mark.skipif(not NVRTC, reason="NVRTC is not installed")


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUMSG_CACHE_DIR", str(tmp_path / "nvrtc-cache"))


def test_saxpy(dev, rng) -> None:
    n = int(rng.integers(1000, 5000))
    x = rng.standard_normal(n).astype(np.float32)
    y = rng.standard_normal(n).astype(np.float32)
    a = float(rng.uniform(0.5, 2.0))
    k = dev.compile(SAXPY, "saxpy", options=("-std=c++17",)).result(timeout=60)
    assert k.params == ("f32", "ptr", "ptr", "i32")
    dx, dy = dev.to_device(x), dev.to_device(y)
    dev.launch(k, grid=((n + 255) // 256,), block=(256,), args=(a, dx, dy, n), reads=(dx, dy),
               writes=(dy,)).result(timeout=30)
    assert_close(dev.copy_to_host(dy).result(), a * wide(x) + wide(y), "f32")


def test_shared_memory_reduction(dev, rng) -> None:
    n, bs = int(rng.integers(3000, 9000)), 256
    blocks = (n + bs - 1) // bs
    x = rng.standard_normal(n).astype(np.float32)
    k = dev.compile(BLOCK_SUM, "block_sum").result(timeout=60)
    dx, out = dev.to_device(x), dev.alloc(blocks, np.float32)
    dev.launch(k, (blocks,), (bs,), (dx, out, n), shared=bs * 4, reads=(dx,), writes=(out,))
    ref = np.add.reduceat(wide(x), np.arange(0, n, bs))
    assert_close(dev.copy_to_host(out).result(), ref, "f32")


@pytest.mark.parametrize("dtype,expr", [("f64", "scale<double>"), ("f32", "scale<float>")])
def test_templated_kernel(dev, rng, dtype: str, expr: str) -> None:
    n = int(rng.integers(500, 3000))
    x = rng.standard_normal(n).astype(gpumsg.as_dtype(dtype))
    a = float(rng.uniform(-2, 2))
    k = dev.compile(SCALE, expr, headers=SCALE_HEADERS,
                    name_expressions=("scale<float>", "scale<double>")).result(timeout=60)
    assert k.params == ("ptr", dtype, "u64")
    dx = dev.to_device(x)
    dev.launch(k, ((n + 127) // 128,), 128, (dx, a, n))
    assert_close(dev.copy_to_host(dx).result(), a * wide(x), dtype)


def test_explicit_signature(dev, rng) -> None:
    n = 700
    x, y = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    k = dev.compile(SAXPY, "saxpy", signature=(ctypes.c_float, ctypes.POINTER(ctypes.c_float),
                                                "ptr", ctypes.c_int32)).result(timeout=60)
    dx, dy = dev.to_device(x), dev.to_device(y)
    dev.launch(k, 3, 256, (-1.5, dx, dy, n))
    assert_close(dev.copy_to_host(dy).result(), -1.5 * wide(x) + wide(y), "f32")


@need_nvrtc
def test_compile_error_carries_log(dev) -> None:
    with pytest.raises(gpumsg.CompileError) as info:
        dev.compile(BROKEN, "broken").result(timeout=60)
    assert "no_such_variable" in info.value.log and "error" in info.value.log
    assert info.value.name == "broken"
    x = np.arange(5.0)
    assert np.array_equal(dev.copy_to_host(dev.to_device(x)).result(), x)  # still serving


@need_nvrtc
def test_disk_cache_is_hit_by_a_second_process(dev, tmp_path) -> None:
    first = dev.compile(SAXPY, "saxpy").result(timeout=60)
    assert not first.from_cache
    assert dev.compile(SAXPY, "saxpy").result(timeout=60).from_cache
    major, minor = dev.props.compute_capability
    code = textwrap.dedent(f"""
        from tests.libs.kernels import SAXPY
        from gpumsg.libs.nvrtc._compiler import compile_program
        p = compile_program(SAXPY, "saxpy", "sm_{major}{minor}", (), {{}}, ("saxpy",))
        print(p.from_cache, p.key)
    """)
    env = dict(os.environ, PYTHONPATH=ROOT)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    hit, key = out.stdout.split()
    assert hit == "True" and key == first.module


@need_nvrtc
def test_cache_filled_by_two_processes_at_once(tmp_path) -> None:
    code = textwrap.dedent("""
        from tests.libs.kernels import BLOCK_SUM
        from gpumsg.libs.nvrtc._compiler import compile_program
        p = compile_program(BLOCK_SUM, "block_sum", "sm_90", (), {}, ("block_sum",))
        print(len(p.image))
    """)
    env = dict(os.environ, PYTHONPATH=ROOT, GPUMSG_CACHE_DIR=str(tmp_path / "shared"))
    procs = [subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    sizes = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        sizes.append(int(out))
    os.environ["GPUMSG_CACHE_DIR"] = str(tmp_path / "shared")
    hit = compile_program(BLOCK_SUM, "block_sum", "sm_90", (), {}, ("block_sum",))
    assert hit.from_cache and len(hit.image) == sizes[0] == sizes[1]
    assert [f for f in os.listdir(tmp_path / "shared") if f.startswith(".tmp")] == []


def test_precompiled_image(dev, rng) -> None:
    if dev.backend == "cuda":
        major, minor = dev.props.compute_capability
        image = compile_program(SAXPY, "saxpy", f"compute_{major}{minor}", (), {},
                                ("saxpy",)).image  # PTX, JIT-compiled by the driver
        assert image.lstrip().startswith(b"//")
    else:
        image = b"simulated module"
    kernels = dev.load_module(image, {"saxpy": ("f32", "ptr", "ptr", "i32")}).result(timeout=60)
    n = 999
    x, y = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    dx, dy = dev.to_device(x), dev.to_device(y)
    dev.launch(kernels["saxpy"], 4, 256, (0.75, dx, dy, n))
    assert_close(dev.copy_to_host(dy).result(), 0.75 * wide(x) + wide(y), "f32")


def test_kernel_write_then_copy_on_another_stream(dev, rng) -> None:
    """The D2H copy of a buffer the kernel writes waits for the kernel (cross-stream order)."""
    k = dev.compile(SAXPY, "saxpy").result(timeout=60)
    n = 1 << 20
    x = rng.standard_normal(n).astype(np.float32)
    dx, dy = dev.to_device(x), dev.alloc(n, np.float32)
    dev.memset(dy, 0)
    for i in range(3):
        dev.launch(k, n // 256, 256, (1.0, dx, dy, n), reads=(dx, dy), writes=(dy,))
        out = dev.copy_to_host(dy).result(timeout=60)
        assert_close(out, (i + 1) * wide(x), "f32")
    # a stream-ordered free right after a launch: the memory is reused only after the kernel
    tmp = dev.to_device(x)
    dev.launch(k, n // 256, 256, (2.0, tmp, dy, n), reads=(tmp, dy), writes=(dy,))
    tmp.result().free()
    again = dev.to_device(np.zeros(n, np.float32))
    assert_close(dev.copy_to_host(dy).result(), 5 * wide(x), "f32")
    again.result()


def _saxpy(dev):
    return dev.compile(SAXPY, "saxpy").result(timeout=60)


def _f32(dev, n=64):
    return dev.alloc(n, np.float32)


BAD = [
    BadArg("argument count", lambda d: d.launch(_saxpy(d), 1, 64, (1.0, _f32(d), 64)),
           field="args"),
    BadArg("float for int", lambda d: d.launch(_saxpy(d), 1, 64, (1.0, _f32(d), _f32(d), 6.5)),
           field="args[3]"),
    BadArg("int overflow", lambda d: d.launch(_saxpy(d), 1, 64,
                                             (1.0, _f32(d), _f32(d), 1 << 40)), field="args[3]"),
    BadArg("number for pointer", lambda d: d.launch(_saxpy(d), 1, 64, (1.0, 5, _f32(d), 6)),
           field="args[1]"),
    BadArg("block too large", lambda d: d.launch(_saxpy(d), 1, (64, 32),
                                                (1.0, _f32(d), _f32(d), 6)), field="block"),
    BadArg("zero grid", lambda d: d.launch(_saxpy(d), 0, 64, (1.0, _f32(d), _f32(d), 6)),
           field="grid"),
    BadArg("writes names a non-argument", lambda d: d.launch(
        _saxpy(d), 1, 64, (1.0, _f32(d), _f32(d), 6), writes=(_f32(d),)), field="writes"),
    BadArg("no such kernel", lambda d: d.compile(SAXPY, "nope"), field="name"),
    BadArg("untyped struct parameter", lambda d: d.compile(
        "struct P { int a; }; extern \"C\" __global__ void k(P p) {}", "k"), field="signature"),
    BadArg("options not strings", lambda d: d.compile(SAXPY, "saxpy", options=(3,)),
           field="options"),
    BadArg("cache 1", lambda d: d.compile(SAXPY, "saxpy", cache=1), field="cache"),
    BadArg("freed buffer", lambda d: d.launch(_saxpy(d), 1, 64, (1.0, _f32(d), _freed(d), 6)),
           error=gpumsg.GpuRefStale),
]


def _freed(dev):
    b = dev.alloc(64, np.float32).result()
    b.free().result()
    return b


@pytest.mark.parametrize("case", BAD, ids=str)
def test_bad_arguments(dev, case) -> None:
    check_bad_args(dev, case)


def test_kernel_of_another_device_is_refused(dev) -> None:
    k = _saxpy(dev)
    with gpumsg.open_device(0, backend=dev.backend) as other:
        x = other.alloc(64, np.float32)
        with pytest.raises(gpumsg.InvalidMessage, match="another device"):
            other.launch(k, 1, 64, (1.0, x, x, 64)).result(timeout=30)


def test_a_repeated_launch_reuses_its_message_and_keeps_every_check(dev, backend, rng,
                                                                    posted) -> None:
    """dev.launch: the same kernel, buffers and values post the message built the first time
    (and the device keeps its packed launcher); any other value, or a value of another type,
    builds its own; a freed buffer and a buffer of another device are refused at the call."""
    from gpumsg.messages.nvrtc import Launch

    k = _saxpy(dev)
    n = int(rng.integers(500, 2000))
    xh, yh = (rng.standard_normal(n).astype(np.float32) for _ in range(2))
    x, y = dev.to_device(xh).result(), dev.to_device(yh).result()
    sent = posted(dev, Launch)
    grid = (n + 255) // 256
    args = (np.float32(0.5), x, y, np.int32(n))
    for _ in range(3):
        dev.launch(k, grid, 256, args)
    dev.launch(k, grid, 256, [np.float32(0.5), x, y, np.int32(n)]).result()  # a list, equal
    assert len(sent) == 4 and all(m is sent[0] for m in sent)
    expect = yh.astype(np.float64) + 4 * 0.5 * xh
    assert_close(dev.copy_to_host(y).result(), expect, "f32")
    # new data in the same buffer: the kept launch reads what the buffer holds now
    dev.copy_from_host(x, 2 * xh).result()
    dev.launch(k, grid, 256, args).result()
    expect += 0.5 * 2 * xh
    assert_close(dev.copy_to_host(y).result(), expect, "f32")
    # another value, and the same value in other types, are other calls
    for a in (0.25, np.float64(0.5), 0.5, np.float32(-0.0), -0.0, 0.0):
        dev.launch(k, grid, 256, (a, x, y, n)).result()
        expect += float(a) * 2 * xh
    assert len({id(m) for m in sent}) == 7
    assert_close(dev.copy_to_host(y).result(), expect, "f32")
    z = dev.to_device(xh).result()
    dev.launch(k, grid, 256, (0.5, z, y, n)).result()
    expect += 0.5 * xh
    z.free().result()
    with pytest.raises(gpumsg.GpuRefStale):
        dev.launch(k, grid, 256, (0.5, z, y, n))
    with gpumsg.open_device(0, backend=backend) as other:
        w = other.to_device(xh).result()
        for _ in range(2):
            with pytest.raises(gpumsg.InvalidMessage, match="another device"):
                dev.launch(k, grid, 256, (0.5, w, y, n))
        with pytest.raises(gpumsg.InvalidMessage, match="another device"):
            other.launch(k, grid, 256, (0.5, w, w, n))  # the kernel, refused at the call
    assert_close(dev.copy_to_host(y).result(), expect, "f32")  # the device still serves


def test_a_launch_of_a_kind_seen_before_builds_the_checked_message(dev, rng, posted) -> None:
    """dev.launch with other buffers than before, of the same dtypes, the same values and the
    same arguments being one buffer: the message built from the kind's first (checked) one
    equals the message Launch checks field by field, and the kernels compute right; a launch
    naming one buffer twice, or a value of another type, is another kind."""
    from gpumsg.messages.nvrtc import Launch

    k = _saxpy(dev)
    n = int(rng.integers(500, 2000))
    grid = (n + 255) // 256
    sent = posted(dev, Launch)
    hosts, wants, bufs = [], [], []
    for i in range(4):
        xh, yh = (rng.standard_normal(n).astype(np.float32) for _ in range(2))
        x, y = dev.to_device(xh).result(), dev.to_device(yh).result()
        a = 0.5 if i < 3 else np.float32(0.5)  # the last: a value of another type
        dev.launch(k, grid, 256, (a, x, y, n), reads=(x, y), writes=(y,))
        hosts.append(Launch(k, grid, 256, (a, x, y, n), 0, (x, y), (y,)))
        wants.append(0.5 * wide(xh) + wide(yh))
        bufs.append(y)
    zh = rng.standard_normal(n).astype(np.float32)
    z = dev.to_device(zh).result()
    dev.launch(k, grid, 256, (0.5, z, z, n), reads=(z,), writes=(z,))  # one buffer twice
    hosts.append(Launch(k, grid, 256, (0.5, z, z, n), 0, (z,), (z,)))
    wants.append(1.5 * wide(zh))
    bufs.append(z)
    assert len(sent) == 5 and sent == hosts
    assert len(dev.nvrtc._plans) == 3  # three kinds: the first two repeats were built
    assert all(type(m.args[0]) is type(h.args[0]) for m, h in zip(sent, hosts, strict=True))
    for buf, want in zip(bufs, wants, strict=True):
        assert_close(dev.copy_to_host(buf).result(), want, "f32")


@pytest.mark.gpu
def test_launches_through_the_binding_when_raw_launches_are_off(monkeypatch, rng) -> None:
    """GPUMSG_RAW_LAUNCH=0: user kernels launch through cuda.bindings' cuLaunchKernel instead
    of the ctypes one, with the same results, repeated launches included."""
    from gpumsg.backends.cuda import _driver as driver

    need_backend("cuda")
    monkeypatch.setattr(driver, "_RAW_LAUNCH", [])
    monkeypatch.setenv("GPUMSG_RAW_LAUNCH", "0")
    with gpumsg.open_device(0, backend="cuda") as dev:
        k = _saxpy(dev)
        n = 1000
        xh, yh = (rng.standard_normal(n).astype(np.float32) for _ in range(2))
        x, y = dev.to_device(xh).result(), dev.to_device(yh).result()
        for _ in range(3):
            dev.launch(k, 4, 256, (1.5, x, y, n))
        assert dev._worker.ctx.libraries["nvrtc"]._raw is None  # read after the launches
        assert_close(dev.copy_to_host(y).result(), yh + 4.5 * xh.astype(np.float64), "f32")
    monkeypatch.setattr(driver, "_RAW_LAUNCH", [])
