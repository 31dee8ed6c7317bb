"""One-off probe of the lent GPU machine: library paths, binding costs, GIL behaviour, host memcpy."""
import ctypes, os, sys, threading, time, json, subprocess
import numpy as np
res = {}
def t(fn, n=2000):
    for _ in range(50): fn()
    t0 = time.perf_counter_ns()
    for _ in range(n): fn()
    return (time.perf_counter_ns() - t0) / n / 1000
import cuda.bindings, cuda.pathfinder
from cuda.bindings import driver as d
res["versions"] = dict(py=sys.version, bindings=cuda.bindings.__version__, pathfinder=cuda.pathfinder.__version__, numpy=np.__version__)
libs = {}
for name in ["cudart","cublas","cublasLt","cufft","curand","cusolver","cusparse","nvrtc","nvJitLink","cudnn","nccl"]:
    try:
        dl = cuda.pathfinder.load_nvidia_dynamic_lib(name); libs[name] = [dl.abs_path, dl.found_via]
    except Exception as e:
        libs[name] = "ERR " + repr(e)[:200]
res["libs"] = libs
print(json.dumps(libs, indent=1))
assert d.cuInit(0)[0] == 0
err, dev = d.cuDeviceGet(0); err, ctx = d.cuDevicePrimaryCtxRetain(dev); d.cuCtxSetCurrent(ctx)
print(d.cuDriverGetVersion(), d.cuDeviceGetName(256, dev)[1])
err, s = d.cuStreamCreate(1); err, ev = d.cuEventCreate(2)
sint = int(s); evint = int(ev)
res["us_cuEventRecord_bindings"] = t(lambda: d.cuEventRecord(ev, s))
res["us_cuEventRecord_bindings_int"] = t(lambda: d.cuEventRecord(evint, sint))
res["us_cuEventQuery_bindings"] = t(lambda: d.cuEventQuery(ev))
libcuda = ctypes.CDLL("libcuda.so.1")
rec = libcuda.cuEventRecord; rec.argtypes = [ctypes.c_void_p, ctypes.c_void_p]; rec.restype = ctypes.c_int
res["us_cuEventRecord_ctypes"] = t(lambda: rec(evint, sint))
wait = libcuda.cuStreamWaitEvent; wait.argtypes=[ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint]; wait.restype=ctypes.c_int
res["us_cuStreamWaitEvent_ctypes"] = t(lambda: wait(sint, evint, 0))
res["us_cuStreamWaitEvent_bindings"] = t(lambda: d.cuStreamWaitEvent(sint, evint, 0))
# GIL: does cuda.bindings release the GIL during a blocking call? Launch a long sleep kernel via cuStreamWaitValue? Use a host-side busy loop counter.
ptx = b"""
.version 7.0
.target sm_50
.address_size 64
.visible .entry spin(.param .u64 n)
{
  .reg .u64 %rd<4>; .reg .pred %p;
  ld.param.u64 %rd1, [n];
  mov.u64 %rd2, %clock64;
L: mov.u64 %rd3, %clock64; sub.u64 %rd3, %rd3, %rd2; setp.lt.u64 %p, %rd3, %rd1; @%p bra L;
  ret;
}
"""
err, mod = d.cuModuleLoadData(ptx); print("module", err)
err, fn = d.cuModuleGetFunction(mod, b"spin"); print("fn", err)
n = ctypes.c_uint64(2_000_000_000)  # ~1 s at ~2 GHz
params = (ctypes.c_void_p * 1)(ctypes.addressof(n))
counter = [0]; stop = [False]
def spinner():
    while not stop[0]: counter[0] += 1
th = threading.Thread(target=spinner); th.start(); time.sleep(0.05)
for label, sync in [("bindings", lambda: d.cuEventSynchronize(ev)), ("ctypes", lambda: libcuda.cuEventSynchronize(ctypes.c_void_p(evint)))]:
    err = d.cuLaunchKernel(fn, 1,1,1, 1,1,1, 0, s, ctypes.addressof(params), 0); d.cuEventRecord(ev, s)
    c0 = counter[0]; t0 = time.perf_counter(); r = sync(); dt = time.perf_counter() - t0
    res[f"gil_{label}"] = dict(launch=str(err), sync_s=dt, other_thread_iters=counter[0]-c0)
stop[0] = True; th.join()
# cublas issue rate through ctypes
cub = ctypes.CDLL(libs["cublas"][0])
h = ctypes.c_void_p(); print("create", cub.cublasCreate_v2(ctypes.byref(h)))
cub.cublasSetStream_v2(h, ctypes.c_void_p(sint))
f = cub.cublasSgemm_v2
f.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int]
f.restype = ctypes.c_int
N = 64
bufs = [d.cuMemAlloc(N*N*4)[1] for _ in range(3)]
A, B, C = [int(b) for b in bufs]
one = ctypes.c_float(1.0); zero = ctypes.c_float(0.0)
pa, pb = ctypes.addressof(one), ctypes.addressof(zero)
hv = h.value
def sg(): f(hv, 0, 0, N, N, N, pa, A, N, B, N, pb, C, N)
res["us_sgemm64_ctypes_issue"] = t(sg, 5000); d.cuStreamSynchronize(s)
# host memcpy bandwidth into pinned
for mib in [64, 512]:
    nbytes = mib << 20
    src = np.random.rand(nbytes // 8)
    err, hp = d.cuMemHostAlloc(nbytes, 0)
    dst = np.ctypeslib.as_array((ctypes.c_uint8 * nbytes).from_address(int(hp))).view(np.float64)
    np.copyto(dst, src)
    t0 = time.perf_counter(); np.copyto(dst, src); dt = time.perf_counter() - t0
    res[f"memcpy_1thread_GBs_{mib}"] = nbytes / dt / 1e9
    from concurrent.futures import ThreadPoolExecutor
    for nt in (2, 4, 8):
        ex = ThreadPoolExecutor(nt)
        parts = np.array_split(np.arange(src.size), nt)
        def cp(i, src=src, dst=dst, parts=parts): np.copyto(dst[parts[i][0]:parts[i][-1]+1], src[parts[i][0]:parts[i][-1]+1])
        list(ex.map(cp, range(nt)))
        t0 = time.perf_counter(); list(ex.map(cp, range(nt))); dt = time.perf_counter() - t0
        res[f"memcpy_{nt}thread_GBs_{mib}"] = nbytes / dt / 1e9
        ex.shutdown()
    err, dptr = d.cuMemAlloc(nbytes)
    d.cuMemcpyHtoDAsync(dptr, int(hp), nbytes, s); d.cuStreamSynchronize(s)
    t0 = time.perf_counter(); d.cuMemcpyHtoDAsync(dptr, int(hp), nbytes, s); d.cuStreamSynchronize(s); dt = time.perf_counter()-t0
    res[f"h2d_pinned_GBs_{mib}"] = nbytes/dt/1e9
    # register cost of pageable src
    t0 = time.perf_counter(); r = d.cuMemHostRegister(src.ctypes.data, nbytes, 0); dt = time.perf_counter()-t0
    res[f"register_GBs_{mib}"] = (str(r[0]), nbytes/dt/1e9)
    t0 = time.perf_counter(); d.cuMemHostUnregister(src.ctypes.data); res[f"unregister_s_{mib}"] = time.perf_counter()-t0
    d.cuMemFree(dptr); d.cuMemFreeHost(hp)
res["cpu"] = subprocess.run("lscpu | grep -E 'Model name|^CPU\\(s\\)|NUMA node\\(s\\)'", shell=True, capture_output=True, text=True).stdout
try:
    import torch, cupy; res["torch"] = torch.__version__; res["cupy"] = cupy.__version__
except Exception as e: res["torch_err"] = repr(e)
print(json.dumps(res, indent=1, default=str))
out = os.environ.get("OUT")
if out: json.dump(res, open(os.path.join(out, "probe.json"), "w"), indent=1, default=str)
