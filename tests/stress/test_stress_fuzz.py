"""Fuzz every public method, message type, array function, random generator method and sparse
matrix method: a typed error or a success, never a bare exception, a crash or a hang; every
accepted answer that has a reference is right; and a correct SGEMM after every case (see fuzz.py
and tools/fuzz_campaign.py)."""

from __future__ import annotations

import json
import os

import fuzz
import pytest
from stress_env import BACKEND, FULL

import gpumsg
from tests.conftest import ROOT, need_backend


def test_targets_cover_every_surface() -> None:
    kinds = {t.kind for t in fuzz.targets()}
    names = {t.name for t in fuzz.targets()}
    assert kinds == {"device", "namespace", "message", "array", "random", "sparse"}
    # the surfaces the fuzz must reach, found by introspection
    for must in ("copy_from_host", "to_device", "sgemm", "linalg.matmul", "cublas.gemm_batched",
                 "linalg.solve", "cudnn.conv", "nvrtc.launch", "Gemm", "CopyFromHost",
                 "InjectFault", "sort", "sum", "take", "reshape", "linalg.qr", "fft.rfft",
                 "zipf", "multinomial", "choice", "integers", "bytes", "sparse.csr_matrix",
                 "sparse.diags", "csr.__matmul__", "coo.tocsr", "csc.sum"):
        assert must in names, must
    assert len(names) > 100


def _tool():
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "fuzz_campaign_tool", os.path.join(ROOT, "tools", "fuzz_campaign.py"))
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    return tool


def test_a_crashed_interpreter_is_counted_and_the_plan_goes_on(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("GPUMSG_FUZZ_ABORT_AT", "5")
    tool = _tool()
    report = tool.campaign("sim", 7, 12, str(tmp_path), chunk=12, log=lambda *a: None)
    fig = report["figures"]
    assert fig["crashes"] == 1 and fig["tried"] == 12 and not tool.ok(report)
    assert report["defects"][0].startswith("#5 ") and "crash" in report["defects"][0]
    with open(tmp_path / "cases_sim_7.jsonl") as f:
        outcomes = {r["i"]: r["outcome"] for r in map(json.loads, f)}
    assert sorted(outcomes) == list(range(12)) and outcomes[5] == "crash"


def test_an_interpreter_that_ends_before_its_first_case_charges_no_case(tmp_path,
                                                                      monkeypatch) -> None:
    """A chunk whose interpreter ends before any case began (its device could not be opened)
    is tried once more; a second such end stops the campaign with the interpreter's error."""
    tool = _tool()
    monkeypatch.setattr(tool, "SETUP_RETRY_S", 0.0)
    real, calls = tool.run_chunk, []

    def first_fails(*args):
        calls.append(args[3])
        if len(calls) == 1:
            return 1, "CudaError: CUDA_ERROR_OUT_OF_MEMORY (2) in cuDevicePrimaryCtxRetain"
        return real(*args)

    monkeypatch.setattr(tool, "run_chunk", first_fails)
    report = tool.campaign("sim", 7, 6, str(tmp_path), chunk=6, log=lambda *a: None)
    assert calls == [0, 0] and report["figures"]["crashes"] == 0 and not report["defects"]
    assert report["figures"]["tried"] == 6 and tool.ok(report)
    monkeypatch.setattr(tool, "run_chunk", lambda *args: (1, "cannot open the device"))
    with pytest.raises(RuntimeError, match="before its first case twice(.|\\n)*cannot open"):
        tool.campaign("sim", 7, 6, str(tmp_path), chunk=6, log=lambda *a: None)


def _run_campaign(backend: str, cases: int, chunk: int, tmp_path, seed: int) -> dict:
    """tools/fuzz_campaign.py: the plan in chunks, each in an interpreter of its own (a crash
    of one is counted as a crash, not the end of the suite)."""
    tool = _tool()
    seed = int(os.environ.get("GPUMSG_STRESS_SEED") or seed)
    print(f"fuzz plan seed {seed} (GPUMSG_STRESS_SEED={seed} repeats it; "
          f"tools/fuzz_campaign.py --seed {seed} runs it alone)")
    report = tool.campaign(backend, seed, cases, str(tmp_path), chunk=chunk)
    figures, defects = report["figures"], report["defects"]
    print(json.dumps(figures, indent=1))
    assert figures["tried"] == cases
    assert not defects, "\n\n".join(defects[:20])
    assert figures["wrong"] == 0 and figures["untyped"] == 0
    assert figures["crashes"] == 0 and figures["hangs"] == 0
    # the campaign reaches past the first check: some cases succeed, some are refused, and
    # accepted answers of many kinds (messages, array functions, valid calls) were compared
    assert figures["accepted"] > 0 and figures["refused"] > 0
    assert figures["valid_ok"] == figures["valid_cases"] > 0
    assert figures["checked"] > 0 and len(figures["checked_types"]) >= 30, figures
    return report


def test_fuzz_campaign(tmp_path, rng) -> None:
    """The CI-sized campaign (GPUMSG_STRESS=full: 10,000 cases) on $GPUMSG_STRESS_BACKEND, a
    fresh plan each run from the suite's logged seed."""
    cases = fuzz.cases_from_env(10_000 if FULL else 1_600)
    _run_campaign(BACKEND, cases, 2_000, tmp_path, int(rng.integers(1 << 31)))


@pytest.mark.gpu
def test_fuzz_campaign_gpu(tmp_path) -> None:
    """The GPU-sized campaign on the cuda backend: the same plan as the simulator's for one
    seed (tools/fuzz_campaign.py --diff compares the two runs case by case)."""
    need_backend("cuda")
    _run_campaign("cuda", fuzz.cases_from_env(3_000), 500, tmp_path, 43)


def test_known_defects_stay_fixed() -> None:
    """The cases the first campaign found, as plain regressions."""
    import numpy as np

    with gpumsg.open_device(0, backend="sim") as dev:
        a = dev.to_device(np.ones((4, 4), np.float32))
        x = np.ones(4, np.float32)
        for call in (lambda: dev.copy_from_host(3, x), lambda: dev.copy_from_host(x, x, 1),
                     lambda: dev.linalg.matmul(np.ones((4, 4), np.float32), a),
                     lambda: dev.cublas.gemm_batched(a, a, a, 4, 4, 4),
                     lambda: dev.cudnn.conv(0.5, a), lambda: dev.nn.softmax(3),
                     lambda: dev.to_device([[1, 2], [3]]), lambda: dev.alloc(4, order=x),
                     lambda: dev.buffer_after(3, a),
                     lambda: dev.alloc(4, dtype=a.ref),
                     lambda: dev.send(gpumsg.messages.CommPoll(np.ones(2))),
                     lambda: gpumsg.messages.CaptureGraph(1, 5)):
            with pytest.raises(gpumsg.InvalidMessage) as info:
                call()
            assert info.value.field is not None or "send" in str(info.value)
        fuzz.sgemm_ok(dev, np.random.default_rng())


def test_later_findings_stay_fixed() -> None:
    """What the differential fuzz found in the array layer and the namespaces, as plain
    regressions: each a typed error naming what it expects."""
    import numpy as np

    import gpumsg.array_api as xp

    with gpumsg.open_device(0, backend="sim") as dev:
        x = xp.asarray(np.ones((3, 3)), device=dev)
        for call, err in ((lambda: xp.tril(3), TypeError),
                          (lambda: xp.tensordot(x, x, axes=np.float32), TypeError),
                          (lambda: xp.fft.rfftfreq(0, device=dev), ValueError),
                          (lambda: xp.fft.fftfreq(4, d=0.0, device=dev), ValueError),
                          (lambda: xp.linspace(0.0, 1.0, 2**31 + 1, device=dev),
                           gpumsg.OutOfMemory),
                          (lambda: xp.arange(1, 2**31 + 1, device=dev), gpumsg.OutOfMemory),
                          (lambda: dev.cudnn.rnn_weight_info({"a": 1}), gpumsg.InvalidMessage),
                          (lambda: dev.linalg.cholesky(np.complex64), gpumsg.InvalidMessage),
                          (lambda: dev.cudnn.batch_norm_train(
                              dev.to_device(np.ones((2, 3, 4, 4), np.float32)), None, None,
                              layout=np.ones(2)), gpumsg.InvalidMessage)):
            with pytest.raises(err):
                call()
        np.testing.assert_allclose(np.asarray(xp.fft.rfftfreq(8, d=0.5, device=dev)),
                                   np.fft.rfftfreq(8, 0.5))
        # var/std where N - correction <= 0: NaN (the standard), not inf or a negative value
        h = np.arange(9.0).reshape(3, 3) ** 2
        y = xp.asarray(h, device=dev)
        for c in (3, 4, 2**31 + 1):
            assert np.isnan(np.asarray(xp.var(y, axis=0, correction=c))).all()
            assert np.isnan(np.asarray(xp.std(y, correction=c + 6)))
        np.testing.assert_allclose(np.asarray(xp.var(y, axis=0, correction=2)),
                                   np.var(h, axis=0, ddof=2))
