"""cuDNN work recorded in graphs and run through the cuDNN frontend's graph API: convolutions,
pooling, activations, softmax and norms replayed as recorded, kernels not built yet refused at
record time; the frontend path (and its fallback when it is missing or disabled), the graph
executor's plan choice and limits against a stand-in frontend, and CUDA-graph replays."""

from __future__ import annotations

import numpy as np
import pytest

import gpumsg
from tests.libs.cudnn._helpers import first, last, problem, ref_conv
from tests.libs.harness import FakeGraphDriver, assert_close, random_array, wide


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_convolutions_recorded_in_a_graph(dev, rng, layout: str) -> None:
    """The three directions (the forward with bias and ReLU) recorded in a ``dev.graph`` after
    one eager run each, then replayed: every replay computes from the buffers' current contents
    (fresh inputs between replays, outputs poisoned with NaN first) and matches the float64
    reference; a convolution that never ran is refused as a capture error, and the device
    keeps serving."""
    shape, wshape, geo = (2, 8, 9, 9), (16, 8, 3, 3), ((2, 2), (1, 1), (1, 1), 1)
    kw = dict(stride=2, padding=1, layout=layout)
    w = random_array(rng, wshape, "f32")
    b = random_array(rng, (16,), "f32")
    y_shape = ref_conv(random_array(rng, shape, "f32"), w, *geo)[0].shape
    xd = dev.alloc(last(np.empty(shape), layout).shape, "f32", order="C").result()
    dyd = dev.alloc(last(np.empty(y_shape), layout).shape, "f32", order="C").result()
    wd, bd = dev.to_device(last(w, layout)).result(), dev.to_device(b).result()
    y, dx, dw = (dev.alloc(last(np.empty(s), layout).shape, "f32", order="C").result()
                 for s in (y_shape, shape, wshape))

    def record() -> None:
        dev.cudnn.conv2d(xd, wd, bias=bd, activation="relu", out=y, **kw)
        dev.cudnn.conv_backward_data(dyd, wd, dx.shape, out=dx, **kw)
        dev.cudnn.conv_backward_filter(xd, dyd, dw.shape, out=dw, **kw)

    def check(x, dy) -> None:
        y_ref, grads = ref_conv(x, w, *geo)
        dx_ref, dw_ref = grads(dy)
        assert_close(first(dev.copy_to_host(y).result(), layout),
                     np.maximum(y_ref + wide(b)[None, :, None, None], 0), "f32")
        assert_close(first(dev.copy_to_host(dx).result(), layout), dx_ref, "f32")
        assert_close(first(dev.copy_to_host(dw).result(), layout), dw_ref, "f32", 2.0)

    x, dy = random_array(rng, shape, "f32"), random_array(rng, y_shape, "f32")
    dev.copy_from_host(xd, last(x, layout))
    dev.copy_from_host(dyd, last(dy, layout))
    record()  # eager: plans the three problems
    check(x, dy)
    with dev.graph() as g:
        record()
    assert g.ready.result(timeout=120) >= 3
    for _ in range(3):
        x, dy = random_array(rng, shape, "f32"), random_array(rng, y_shape, "f32")
        dev.copy_from_host(xd, last(x, layout))
        dev.copy_from_host(dyd, last(dy, layout))
        for out in (y, dx, dw):
            dev.memset(out, 0xFF)  # NaN: a replay that does nothing cannot pass
        g.launch().result(timeout=60)
        check(x, dy)
    # a problem that never ran (another stride) cannot be planned under capture
    y1 = dev.alloc((2, 9, 9, 16) if layout == "NHWC" else (2, 16, 9, 9), "f32",
                   order="C").result()
    with dev.graph() as g2:
        dev.cudnn.conv2d(xd, wd, stride=1, padding=1, layout=layout, out=y1)
    with pytest.raises(gpumsg.GraphCaptureError, match="run once"):
        g2.ready.result(timeout=60)
    g.launch().result(timeout=60)  # the first graph still replays
    check(x, dy)


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_pooling_activations_and_softmax_recorded_in_a_graph(dev, rng, layout: str) -> None:
    """Max pooling (forward and backward), ReLU and GELU (forward and backward) and a channel
    softmax (forward and backward), recorded after one eager run and replayed on fresh inputs,
    give what the eager calls give on the same inputs (outputs poisoned with NaN before each
    replay)."""
    n, c, hw = 2, 8, 10
    shape = (n, hw, hw, c) if layout == "NHWC" else (n, c, hw, hw)
    pooled = (n, 5, 5, c) if layout == "NHWC" else (n, c, 5, 5)
    xd, dyd, pd = (dev.alloc(s, "f32", order="C").result() for s in (shape, shape, pooled))
    outs = {name: dev.alloc(s, "f32", order="C").result() for name, s in (
        ("pool", pooled), ("dpool", shape), ("relu", shape), ("drelu", shape), ("gelu", shape),
        ("dgelu", shape), ("soft", shape), ("dsoft", shape))}
    o = outs

    def sequence() -> None:
        dev.cudnn.pool(xd, window=2, stride=2, layout=layout, out=o["pool"])
        dev.cudnn.pool_backward(xd, o["pool"], pd, window=2, stride=2, layout=layout,
                                out=o["dpool"])
        dev.cudnn.activation(xd, "relu", out=o["relu"])
        dev.cudnn.activation_backward(xd, o["relu"], dyd, "relu", out=o["drelu"])
        dev.cudnn.activation(xd, "gelu", out=o["gelu"])
        dev.cudnn.activation_backward(xd, o["gelu"], dyd, "gelu", out=o["dgelu"])
        dev.cudnn.softmax(xd, layout=layout, out=o["soft"])
        dev.cudnn.softmax_backward(o["soft"], dyd, layout=layout, out=o["dsoft"])

    def inputs() -> None:
        dev.copy_from_host(xd, random_array(rng, shape, "f32"))
        dev.copy_from_host(dyd, random_array(rng, shape, "f32"))
        dev.copy_from_host(pd, random_array(rng, pooled, "f32"))

    inputs()
    sequence()  # eager: builds whatever the calls need
    with dev.graph() as g:
        sequence()
    assert g.ready.result(timeout=120) >= 8
    for _ in range(2):
        inputs()
        sequence()
        eager = {k: dev.copy_to_host(v).result() for k, v in outs.items()}
        for v in outs.values():
            dev.memset(v, 0xFF)  # NaN: a replay that does nothing cannot pass
        g.launch().result(timeout=60)
        for k, v in outs.items():
            assert_close(dev.copy_to_host(v).result(), wide(eager[k]), "f32")


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_graph_records_batch_norm_inference_and_layer_norm(dev, rng, dtype: str) -> None:
    """Batch-norm inference (NHWC) and a layer-norm forward, recorded after one eager run,
    replay on whatever the buffers hold: each replay checked against float64 references of
    fresh inputs. Norms that take pool memory per call (training batch norm) stay refused."""
    n, h, w, c = 2, 3, 4, 16
    rows, d = 6, 64
    bn = {k: dev.alloc((c,), "f32").result() for k in ("gamma", "beta", "mean", "var")}
    ln_g, ln_b = dev.alloc((d,), "f32").result(), dev.alloc((d,), "f32").result()
    xb, yb = (dev.alloc((n, h, w, c), dtype, order="C").result() for _ in range(2))
    xl, yl = (dev.alloc((rows, d), dtype, order="C").result() for _ in range(2))
    mean, inv = dev.alloc((rows,), "f32").result(), dev.alloc((rows,), "f32").result()

    def sequence() -> None:
        dev.cudnn.batch_norm_inference(xb, bn["gamma"], bn["beta"], bn["mean"], bn["var"],
                                       eps=1e-3, layout="NHWC", out=yb)
        dev.cudnn.layer_norm(xl, ln_g, ln_b, eps=1e-5, out=yl, mean_out=mean, invstd_out=inv)

    def inputs() -> dict:
        host = {"xb": random_array(rng, (n, h, w, c), dtype),
                "xl": random_array(rng, (rows, d), dtype),
                "lg": random_array(rng, (d,), "f32"), "lb": random_array(rng, (d,), "f32")}
        host.update({k: random_array(rng, (c,), "f32") for k in ("gamma", "beta", "mean")})
        host["var"] = random_array(rng, (c,), "f32", low=0.5)
        for k in ("gamma", "beta", "mean", "var"):
            dev.copy_from_host(bn[k], host[k])
        for buf, k in ((xb, "xb"), (xl, "xl"), (ln_g, "lg"), (ln_b, "lb")):
            dev.copy_from_host(buf, host[k])
        return host

    inputs()
    sequence()  # eager: builds the kernels
    with dev.graph() as g:
        sequence()
    assert g.ready.result(timeout=120) >= 2
    for _ in range(3):
        host = inputs()
        for buf in (yb, yl, mean, inv):
            dev.memset(buf, 0xFF)  # NaN: a replay that does nothing cannot pass
        g.launch().result(timeout=60)
        xw = wide(host["xb"])
        y_ref = ((xw - wide(host["mean"])) / np.sqrt(wide(host["var"]) + 1e-3)
                 * wide(host["gamma"]) + wide(host["beta"]))
        assert_close(dev.copy_to_host(yb).result(), y_ref, dtype)
        xl_w = wide(host["xl"])
        mu = xl_w.mean(axis=1)
        invstd = 1 / np.sqrt(xl_w.var(axis=1) + 1e-5)
        ln_ref = (xl_w - mu[:, None]) * invstd[:, None] * wide(host["lg"]) + wide(host["lb"])
        assert_close(dev.copy_to_host(yl).result(), ln_ref, dtype)
        tol = ("f32", 10.0) if dtype == "f32" else ("f32", 50.0)
        assert_close(dev.copy_to_host(mean).result(), mu, *tol)
        assert_close(dev.copy_to_host(inv).result(), invstd, *tol)
    from gpumsg.messages.cudnn import BatchNormTrain

    train = BatchNormTrain(xb, bn["gamma"], bn["beta"], yb, bn["mean"], bn["var"],
                           layout="NHWC")
    with pytest.raises(gpumsg.GraphCaptureError, match="BatchNormTrain"):
        with dev.graph():
            dev.send(train)
    dev.send(train).result(timeout=60)  # eagerly it runs, and the device serves on
    assert np.isfinite(dev.copy_to_host(yb).result().astype(np.float32)).all()


@pytest.fixture
def cuda_dev():
    from gpumsg.backends import cuda_available

    ok, why = cuda_available()
    if not ok:
        pytest.skip(f"no CUDA GPU here ({why})")
    d = gpumsg.open_device(0, backend="cuda")
    yield d
    d.close()


def _frontend_importable() -> bool:
    try:
        import cudnn  # noqa: F401
    except Exception:  # noqa: BLE001
        return False
    return True


@pytest.mark.gpu
@pytest.mark.skipif(not _frontend_importable(), reason="nvidia-cudnn-frontend not installed")
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_conv_graph_path(cuda_dev, rng, layout: str) -> None:
    """With the frontend installed, convolutions (fused bias + relu forward, both backwards)
    take the graph path: cache_info counts graph plans and names the frontend."""
    dev = cuda_dev
    x = random_array(rng, (4, 16, 10, 10), "bf16")
    w = random_array(rng, (32, 16, 3, 3), "bf16")
    b = random_array(rng, (32,), "bf16")
    geo = ((1, 1), (1, 1), (1, 1), 1)
    y_ref, grads = ref_conv(x, w, *geo)
    dy = random_array(rng, y_ref.shape, "bf16")
    dx_ref, dw_ref = grads(dy)
    kw = dict(stride=1, padding=1, layout=layout)
    before = dev.cudnn.cache_info().result()
    dxd, dwd, ddy = dev.to_device(last(x, layout)), dev.to_device(last(w, layout)), \
        dev.to_device(last(dy, layout))
    y = dev.cudnn.conv2d(dxd, dwd, bias=dev.to_device(b), activation="relu", **kw)
    dx = dev.cudnn.conv_backward_data(ddy, dwd, last(x, layout).shape, **kw)
    dw = dev.cudnn.conv_backward_filter(dxd, ddy, last(w, layout).shape, **kw)
    assert_close(first(dev.copy_to_host(y).result(), layout),
                 np.maximum(y_ref + wide(b)[None, :, None, None], 0), "bf16", 2.0)
    assert_close(first(dev.copy_to_host(dx).result(), layout), dx_ref, "bf16")
    assert_close(first(dev.copy_to_host(dw).result(), layout), dw_ref, "bf16", 2.0)
    after = dev.cudnn.cache_info().result()
    assert after["frontend"].startswith("cudnn-frontend"), after
    assert after["graph_plans"] - before["graph_plans"] == 3, after


@pytest.mark.gpu
@pytest.mark.skipif(not _frontend_importable(), reason="nvidia-cudnn-frontend not installed")
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_conv_graph_replays_follow_the_buffers(cuda_dev, rng, layout: str) -> None:
    """Graph-path convolutions repeated on the same buffers are replayed as CUDA graphs, and the
    replays compute from the buffers' current contents: each round writes fresh inputs into the
    same buffers and checks all three directions against the reference; a new output buffer
    (a new pointer set) is right too."""
    dev = cuda_dev
    shape, wshape, geo = (4, 16, 10, 10), (32, 16, 3, 3), ((2, 2), (1, 1), (1, 1), 1)
    kw = dict(stride=2, padding=1, layout=layout)
    b = random_array(rng, (32,), "bf16")
    w = random_array(rng, wshape, "bf16")
    y_shape = ref_conv(random_array(rng, shape, "bf16"), w, *geo)[0].shape
    dxd, dwd = dev.alloc(last(np.empty(shape), layout).shape, "bf16", order="C").result(), \
        dev.to_device(last(w, layout)).result()
    ddy, dbias = dev.alloc(last(np.empty(y_shape), layout).shape, "bf16", order="C").result(), \
        dev.to_device(b).result()
    y, dx, dw = (dev.alloc(last(np.empty(s), layout).shape, "bf16", order="C").result()
                 for s in (y_shape, shape, wshape))
    before = dev.cudnn.cache_info().result()["replay"]
    for _ in range(4):
        x, dy = random_array(rng, shape, "bf16"), random_array(rng, y_shape, "bf16")
        dev.copy_from_host(dxd, last(x, layout))
        dev.copy_from_host(ddy, last(dy, layout))
        y_ref, grads = ref_conv(x, w, *geo)
        dx_ref, dw_ref = grads(dy)
        dev.cudnn.conv2d(dxd, dwd, bias=dbias, activation="relu", out=y, **kw)
        dev.cudnn.conv_backward_data(ddy, dwd, dx.shape, out=dx, **kw)
        dev.cudnn.conv_backward_filter(dxd, ddy, dw.shape, out=dw, **kw)
        assert_close(first(dev.copy_to_host(y).result(), layout),
                     np.maximum(y_ref + wide(b)[None, :, None, None], 0), "bf16", 2.0)
        assert_close(first(dev.copy_to_host(dx).result(), layout), dx_ref, "bf16")
        assert_close(first(dev.copy_to_host(dw).result(), layout), dw_ref, "bf16", 2.0)
    after = dev.cudnn.cache_info().result()["replay"]
    assert after["enabled"] and after["refused"] == [], after
    assert after["with_memory_nodes"] == 0, after  # workspaces are ours, not allocated per launch
    # rounds 2-4 of three directions are replays (round 2 captures, then launches)
    assert after["launches"] - before["launches"] >= 9, (before, after)
    y2 = dev.cudnn.conv2d(dxd, dwd, bias=dbias, activation="relu", **kw)
    assert_close(first(dev.copy_to_host(y2).result(), layout),
                 np.maximum(y_ref + wide(b)[None, :, None, None], 0), "bf16", 2.0)


@pytest.mark.gpu
def test_kernels_not_built_yet_are_refused_in_a_graph(cuda_dev, rng) -> None:
    """GELU runs as gpumsg's own kernel, compiled on first use: recorded on a fresh device
    before any eager GELU, it is refused as a capture error (a module cannot be compiled and
    loaded under capture); after one eager call the same recording replays."""
    dev = cuda_dev
    x_h = random_array(rng, (4, 64), "f32")
    x = dev.to_device(x_h).result()
    y = dev.alloc((4, 64), "f32", order="C").result()
    with dev.graph() as g:
        dev.cudnn.activation(x, "gelu", out=y)
    with pytest.raises(gpumsg.GraphCaptureError, match="kernels are built"):
        g.ready.result(timeout=60)
    dev.cudnn.activation(x, "gelu", out=y).result(timeout=60)
    eager = dev.copy_to_host(y).result()
    dev.memset(y, 0xFF)
    with dev.graph() as g:
        dev.cudnn.activation(x, "gelu", out=y)
    g.launch().result(timeout=60)
    assert_close(dev.copy_to_host(y).result(), wide(eager), "f32")


@pytest.mark.gpu
def test_norm_kernels_not_built_yet_are_refused_in_a_graph(cuda_dev, rng) -> None:
    """Batch-norm inference and layer norm recorded on a fresh device before any eager call:
    their kernels cannot be compiled and loaded under capture, so the recording is refused;
    after one eager call each the same recording replays."""
    dev = cuda_dev
    x = dev.to_device(random_array(rng, (2, 4, 4, 8), "f32")).result()
    y = dev.alloc((2, 4, 4, 8), "f32", order="C").result()
    vec = [dev.to_device(random_array(rng, (8,), "f32", low=0.5)).result() for _ in range(4)]
    mean, inv = dev.alloc((32,), "f32").result(), dev.alloc((32,), "f32").result()
    calls = (lambda: dev.cudnn.batch_norm_inference(x, *vec, layout="NHWC", out=y),
             lambda: dev.cudnn.layer_norm(x, normalized_ndim=1, out=y, mean_out=mean,
                                        invstd_out=inv))
    for call in calls:
        with dev.graph() as g:
            call()
        with pytest.raises(gpumsg.GraphCaptureError, match="kernels are built"):
            g.ready.result(timeout=60)
        done = call()  # eager: builds the kernels
        (done[0] if isinstance(done, tuple) else done).result(timeout=60)
        eager = dev.copy_to_host(y).result()
        dev.memset(y, 0xFF)
        with dev.graph() as g:
            call()
        g.launch().result(timeout=60)
        assert_close(dev.copy_to_host(y).result(), wide(eager), "f32")


@pytest.mark.gpu
def test_conv_legacy_fallback(cuda_dev, rng, monkeypatch) -> None:
    """Without the frontend the legacy descriptor path serves the same problems and
    cache_info says why."""
    from gpumsg.libs.cudnn import _graph as graph

    monkeypatch.setattr(graph, "_STATE", {"module": None, "reason": "test: no frontend"})
    dev = cuda_dev
    x, w, geo = problem(rng, "dilated", "f16", "NHWC")
    before = dev.cudnn.cache_info().result()
    y = dev.cudnn.conv2d(dev.to_device(last(x, "NHWC")), dev.to_device(last(w, "NHWC")),
                      stride=geo[0], padding=geo[1], dilation=geo[2], layout="NHWC",
                      workspace_limit=12345)
    assert_close(first(dev.copy_to_host(y).result(), "NHWC"), ref_conv(x, w, *geo)[0], "f16")
    after = dev.cudnn.cache_info().result()
    assert after["legacy_plans"] - before["legacy_plans"] == 1
    assert after["frontend"] == "test: no frontend"


def test_frontend_disabled_by_environment(monkeypatch) -> None:
    """GPUMSG_CUDNN_FRONTEND=0 keeps the frontend out, with the reason recorded."""
    from gpumsg.libs.cudnn import _graph as graph

    monkeypatch.setattr(graph, "_STATE", {})
    monkeypatch.setenv("GPUMSG_CUDNN_FRONTEND", "0")
    assert graph.frontend(None) is None
    assert "GPUMSG_CUDNN_FRONTEND" in graph.frontend_reason()


class _FakeTensor:
    def __init__(self) -> None:
        self.uid = -1

    def set_uid(self, uid: int) -> None:
        self.uid = uid


class _FakeGraph:
    """Stands in for the frontend's backend_graph: plan 0 declines, plans 1-3 build with the
    workspaces below; executes are recorded with the pointers read from the raw array."""

    WS = [0, 4096, 256, 0]

    def __init__(self, **kw) -> None:
        self.kw, self.modes, self.notes, self.limit, self.runs = kw, [], None, None, []
        self.declines = {0}

    def validate(self) -> None: ...
    def build_operation_graph(self) -> None: ...
    def check_support(self) -> None: ...
    def _prepare_variant_pack_template(self) -> None: ...

    def create_execution_plans(self, modes) -> None:
        self.modes.append(modes)

    def deselect_numeric_notes(self, notes) -> None:
        self.notes = notes

    def deselect_workspace_greater_than(self, n) -> None:
        self.limit = n
        self.declines |= {i for i, w in enumerate(self.WS) if w > n}

    def get_execution_plan_count(self) -> int:
        return len(self.WS)

    def build_plan_at_index(self, i) -> None:
        if i in self.declines:
            raise RuntimeError("declined")

    def get_workspace_size_plan_at_index(self, i) -> int:
        return self.WS[i]

    def _get_variant_pack_uids_sorted(self):
        return [1, 2]

    def _execute_with_raw_ptrs(self, addr, n, ws, handle, index) -> None:
        import ctypes

        ptrs = list((ctypes.c_void_p * n).from_address(addr))
        self.runs.append((ptrs, ws, handle, index))


def _fake_frontend():
    from types import SimpleNamespace as NS

    return NS(data_type=NS(FLOAT="f", HALF="h", BFLOAT16="b"), heur_mode=NS(A="A", FALLBACK="F"),
              numerical_note=NS(TENSOR_CORE="tc", DOWN_CONVERT_INPUTS="dc",
                                REDUCED_PRECISION_REDUCTION="rp"),
              _pybind_module=NS(backend_graph=_FakeGraph))


@pytest.mark.parametrize("dtype,strict,notes", [("f32", True, ["tc", "dc"]), ("f32", False, None),
                                                ("bf16", False, ["rp"])])
def test_graph_executor_heuristic_choice(dtype: str, strict: bool, notes) -> None:
    """graph.build_graph: modes A then fallback, the note filters, the first ranked plan that
    builds; run() passes the pointers in uid order; next_plan() steps to a smaller workspace."""
    from gpumsg.libs.cudnn._graph import build_graph

    fe = _fake_frontend()
    t = {"y": _FakeTensor(), "x": _FakeTensor()}
    plan = build_graph(fe, 77, dtype, lambda g, f: t, name="t", strict_f32=strict,
                       workspace_limit=None)
    g = plan.graph
    assert g.modes == [["A"], ["F"]] and g.notes == notes and g.kw["handle"] == 77
    assert (t["x"].uid, t["y"].uid) == (1, 2)
    assert (plan.index, plan.workspace) == (1, 4096)
    plan.run(77, {"x": 0x1000, "y": 0x2000}, 0x9000)
    assert g.runs == [([0x1000, 0x2000], 0x9000, 77, 1)]
    assert plan.next_plan(0, below=4096) and (plan.index, plan.workspace) == (2, 256)
    assert not plan.next_plan(0, below=0)


def test_graph_executor_find_and_limits() -> None:
    """algo="find" keeps the fastest candidate that runs (one that fails is skipped); a
    workspace limit removes plans; no plan at all is GraphUnsupported."""
    from gpumsg.libs.cudnn._graph import GraphUnsupported, build_graph

    fe = _fake_frontend()
    times = {2: 1.0, 3: 2.0}  # plan 1 fails to run (KeyError): skipped
    timed = []

    def timer(plan, index, ws):
        timed.append((index, ws))
        return times[index]

    def describe(g, f):
        return {"x": _FakeTensor()}

    plan = build_graph(fe, 1, "f16", describe, name="t", strict_f32=False,
                       workspace_limit=None, algo="find", timer=timer)
    # two rounds over the candidates that build
    assert (plan.index, plan.workspace) == (2, 256) and timed == [(1, 4096), (2, 256), (3, 0)] * 2
    assert sorted(plan.timings) == [(2, 1.0), (3, 2.0)]
    timed.clear()
    plan = build_graph(fe, 1, "f16", describe, name="t", strict_f32=False,
                       workspace_limit=None, algo="find", timer=timer, find_limit=2)
    assert timed == [(1, 4096), (2, 256)] * 2 and plan.index == 2  # the top two that build
    plan = build_graph(fe, 1, "f16", describe, name="t", strict_f32=False, workspace_limit=300,
                       algo="heuristic")
    assert (plan.index, plan.workspace) == (2, 256) and plan.graph.limit == 300
    plan = build_graph(fe, 1, "f16", describe, name="t", strict_f32=False, workspace_limit=100,
                       algo="find", timer=timer)  # only plan 3 fits
    assert (plan.index, plan.workspace) == (3, 0) and plan.timings == [(3, 2.0)]
    _FakeGraph.WS = [0, 4096, 256, 8]
    try:
        with pytest.raises(GraphUnsupported):
            build_graph(fe, 1, "f16", describe, name="t", strict_f32=False, workspace_limit=4,
                        algo="heuristic")
    finally:
        _FakeGraph.WS = [0, 4096, 256, 0]


def test_graph_replays_capture_on_the_second_run_then_launch() -> None:
    """GraphPlan.run with replays: a pointer set runs as usual once, is captured the second
    time (the execute then runs under capture, and the graph is launched), and is launched
    alone from then on; another pointer set, workspace or stream is a key of its own; the
    oldest graph beyond the capacity is destroyed, and close() destroys the rest."""
    from gpumsg.backends.cuda._replays import GraphReplays
    from gpumsg.libs.cudnn._graph import build_graph

    fe = _fake_frontend()
    t = {"y": _FakeTensor(), "x": _FakeTensor()}
    plan = build_graph(fe, 77, "f16", lambda g, f: t, name="t", strict_f32=False,
                       workspace_limit=None)
    cu = FakeGraphDriver()
    plan.replays = GraphReplays(cu, capacity=2)
    g, ptrs = plan.graph, {"x": 0x1000, "y": 0x2000}
    under_capture = []
    real = g._execute_with_raw_ptrs

    def execute(*a) -> None:
        under_capture.append(cu.capturing)
        real(*a)

    g._execute_with_raw_ptrs = execute
    for _ in range(4):
        plan.run(77, ptrs, 0x9000, stream=5)
    assert under_capture == [False, True]  # once as usual, once captured, then launches only
    assert cu.launched == [(("exec", 1), 5)] * 3
    r = plan.replays
    assert (r.captures, r.launches, r.reason) == (1, 3, "")
    plan.run(77, ptrs, 0x9000, index=1, stream=5)  # an explicit plan index (find's timing)
    assert under_capture[-1] is False and len(cu.launched) == 3
    for key_change in ({"x": 0x3000, "y": 0x2000}, {"x": 0x4000, "y": 0x2000}):
        for _ in range(2):
            plan.run(77, key_change, 0x9000, stream=5)
    assert r.captures == 3 and cu.destroyed == [("exec", 1)]  # capacity 2: the oldest goes
    plan.run(77, ptrs, 0x9000, stream=6)  # another stream: runs as usual first
    assert under_capture[-1] is False and len(cu.launched) == 5
    plan.close()
    assert sorted(cu.destroyed) == [("exec", 1), ("exec", 2), ("exec", 3)] and not r.execs


def test_graph_replays_a_refused_capture_falls_back_for_good() -> None:
    """A capture that fails leaves nothing issued: the execute runs as usual right after, the
    reason is kept, and the plan is not captured again."""
    from gpumsg.backends.cuda._replays import GraphReplays
    from gpumsg.libs.cudnn._graph import build_graph

    fe = _fake_frontend()
    t = {"x": _FakeTensor(), "y": _FakeTensor()}
    plan = build_graph(fe, 7, "f16", lambda g, f: t, name="t", strict_f32=False,
                       workspace_limit=None)
    cu = FakeGraphDriver()
    cu.refuse = True
    plan.replays = GraphReplays(cu)
    for _ in range(4):
        plan.run(7, {"x": 0x10, "y": 0x20}, 0, stream=3)
    # as usual, captured (refused), as usual right after, as usual: 4 real executes + 1 captured
    assert len(plan.graph.runs) == 5 and cu.launched == []
    assert "cuStreamEndCapture" in plan.replays.reason and plan.replays.captures == 0
