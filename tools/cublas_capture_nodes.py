"""The nodes of cuBLAS calls captured on gpumsg's compute stream with its handle, as the handle
is bound, and again after the workspace is set once more from here (diagnostic, GPU; stop 32):
on the stop-31 tree the first captures held memory alloc and free nodes, since cublasSetStream
had reset the workspace. Prints the node types per call (a strided-batched 512 x 128^3 bf16
GEMM, a 64^3 SGEMM, a 1M-element dot). Replays count such graphs themselves now
(``dev.cublas.replay_info()``, ``with_memory_nodes``)."""

from __future__ import annotations

import json

import numpy as np
from cuda.bindings import driver as cu

import gpumsg
from gpumsg.backends.cuda.replays import node_types


def capture_types(stream, call) -> list[str]:
    mode = cu.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
    assert not cu.cuStreamBeginCapture(int(stream), mode)[0]
    call()
    err, graph = cu.cuStreamEndCapture(int(stream))
    assert not err, err
    types = node_types(cu, graph)
    cu.cuGraphDestroy(graph)
    return types


def main() -> None:
    batch, s = 512, 128
    rng = np.random.default_rng()
    bf16 = gpumsg.as_dtype("bf16")
    with gpumsg.open_device(0) as dev:
        host = rng.standard_normal((batch, s, s), dtype=np.float32).astype(bf16)
        a = dev.to_device(host).result()
        c = dev.alloc((batch, s, s), "bf16", order="C").result()
        dev.cublas.gemm_strided_batched(a, a, c, s, s, s, batch, s * s, s * s, s * s).result()
        dev.synchronize().result()
        h = dev._worker.ctx.libraries["cublas"]
        # this thread launches too: the device's (primary) context made current here
        err, ordinal = cu.cuDeviceGet(0)
        err, primary = cu.cuDevicePrimaryCtxRetain(ordinal)
        assert not cu.cuCtxSetCurrent(primary)[0]
        stream = dev._worker.ctx.compute.obj
        pa = a.__cuda_array_interface__["data"][0]
        pc = c.__cuda_array_interface__["data"][0]
        args = ("bf16", "default", "N", "N", s, s, s, 1.0, pa, s, s * s, pa, s, s * s, 0.0, pc, s,
                s * s, batch)
        x = dev.to_device(np.ones((64, 64), np.float32)).result()
        y = dev.alloc((64, 64), np.float32).result()
        v = dev.to_device(np.ones(1 << 20, np.float32)).result()
        dev.sgemm(x, x, y, 64, 64, 64).result()
        dev.cublas.dot(v, v).result()
        dev.synchronize().result()
        px, py, pv = (t.__cuda_array_interface__["data"][0] for t in (x, y, v))
        calls = {
            "strided bf16 512 x 128^3": lambda: h._gemm_strided_now(stream, *args),
            "sgemm 64^3": lambda: h._sgemm_now(stream, "N", "N", 64, 64, 64, 1.0, px, 64, px,
                                               64, 0.0, py, 64),
            "sdot 1M": lambda: h.dot(stream, "f32", 1 << 20, pv, 1, pv, 1, False, py),  # into y
        }
        for name, call in calls.items():
            print(json.dumps({"call": name, "as bound": capture_types(stream, call)}))
        assert not h.lib.cublasSetWorkspace_v2(h.raw_handle, h._ws, 32 << 20)
        if h._reduction_handle:
            assert not h.lib.cublasSetWorkspace_v2(h._reduction_handle, h._ws, 32 << 20)
        for name, call in calls.items():
            print(json.dumps({"call": name, "workspace set again": capture_types(stream, call)}))


if __name__ == "__main__":
    main()
