"""benchmarks/report.py: the last run's JSON files become RESULTS.md (and plots), in every
format the benchmark scripts write."""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _report() -> Any:
    spec = importlib.util.spec_from_file_location("bench_report",
                                                  ROOT / "benchmarks" / "report.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


report = _report()

ENV = {"date": "2031-02-03 04:05 UTC", "device": "Test GPU 99GB", "driver": "999.1",
       "python": "3.12.0", "torch": "9.9", "cupy": "99.0"}


def _doc(name: str, rows: list[dict[str, Any]], columns: list[str] | None = None,
         env: dict[str, Any] | None = None) -> dict[str, Any]:
    doc: dict[str, Any] = {"benchmark": name, "environment": env or ENV, "rows": rows,
                           "notes": [f"{name} note"]}
    if columns:
        doc["columns"] = columns
    return doc


def _run_files(tmp: Path) -> Path:
    """A run's output folder: one document per format, and files that are not benchmarks."""
    out = tmp / "out"
    out.mkdir()
    docs = {
        "gemm": _doc("gemm", [
            {"size": s, "type": t, "gpumsg_tflops": 0.5 * s / 256, "torch_tflops": 0.49 * s / 256,
             "cupy_tflops": 0.48 * s / 256 if t == "fp32" else "", "ratio_torch": 1.02,
             "ratio_cupy": 1.04 if t == "fp32" else "", "rel_err": 1.2e-7}
            for t in ("fp32", "bf16") for s in (256, 1024, 4096)],
            ["size", "type", "gpumsg_tflops", "torch_tflops", "cupy_tflops", "ratio_torch"]),
        "fft_sizes": _doc("fft_sizes", [
            {"n": n, "batch": 4096 // n, "gpumsg_us": 10.0 + n / 100, "torch_us": 9.5 + n / 100,
             "cupy_us": 11.0, "ratio_torch": 0.97, "ratio_cupy": 1.1, "gpumsg_gflops": 3.0,
             "torch_gflops": 3.1, "cupy_gflops": 2.9, "rel_err": 3e-7} for n in (256, 1024)]),
        # the older formats: no "columns", empty strings for missing figures
        "copies": _doc("copies", [
            {"size_MiB": m, "copy": k, "gpumsg_GBps": 40.0 + m / 100, "torch_GBps": 41.0,
             "ratio": (40.0 + m / 100) / 41.0, "target": ">= 0.95" if "pinned" in k else ""}
            for m in (1, 512) for k in ("H2D pinned", "D2H pageable")]),
        "small_ops": _doc("small_ops", [
            {"case": "SGEMM 64^3 (reference)", "peer": "torch.mm(out=)", "pipelined_us": 7.6,
             "peer_pipelined_us": 13.4, "pipelined_ratio": 1.77, "round_trip_us": 34.6,
             "peer_round_trip_us": 19.7, "round_trip_ratio": 0.57},
            {"case": "kernel launch", "peer": "", "cupy": "cupy.RawKernel", "pipelined_us": 9.0,
             "peer_pipelined_us": "", "cupy_pipelined_us": 8.0, "round_trip_us": 30.0,
             "peer_round_trip_us": "", "cupy_round_trip_us": 20.0}]),
        "overhead": _doc("overhead", [
            {"case": "Stats round trip", "gpumsg_us": 23.25, "bare_us": 30.9, "ratio": 0.752,
             "target": "<= 1.15x", "met": "yes", "torch_us": "", "cupy_us": "", "note": ""}]),
        "bench_multi": _doc("bench_multi", [{"case": "allreduce", "gpumsg_us": 5.0}]),
    }
    for name, doc in docs.items():
        (out / f"{name}_2031-02-03_0405.json").write_text(json.dumps(doc))
    (out / "not_a_benchmark.json").write_text(json.dumps({"legs": [1, 2]}))
    (out / "broken.json").write_text("{")
    (out / "copies.md").write_text("# copies\n")
    return out


def test_merge_keeps_one_file_per_benchmark(tmp_path: Path) -> None:
    out = _run_files(tmp_path)
    results = tmp_path / "results"
    results.mkdir()
    (results / "gemm.json").write_text(json.dumps(_doc("gemm", [{"size": 1}], env={
        **ENV, "date": "2020-01-01 00:00 UTC"})))
    (results / "cudnn.json").write_text(json.dumps(_doc("cudnn", [{"case": "conv"}])))
    copied = report.merge(str(out), str(results))
    assert sorted(copied) == ["copies", "fft_sizes", "gemm", "multi", "overhead", "small_ops"]
    names = sorted(p.name for p in results.iterdir())
    assert names == ["copies.json", "cudnn.json", "fft_sizes.json", "gemm.json", "multi.json",
                     "overhead.json", "small_ops.json"]
    # the newer run replaced the older file; a benchmark not rerun is kept
    assert json.loads((results / "gemm.json").read_text())["environment"]["date"] == ENV["date"]
    assert len(report.load_all(str(results))) == 7


def test_results_md(tmp_path: Path) -> None:
    out = _run_files(tmp_path)
    md = tmp_path / "RESULTS.md"
    rc = report.main(["--src", str(out), "--results", str(tmp_path / "results"), "--md", str(md),
                      "--no-plots"])
    assert rc == 0
    text = md.read_text()
    assert "Test GPU 99GB" in text and "2031-02-03 04:05 UTC" in text and "torch 9.9" in text
    for title in ("## GEMM by size", "## FFT by size", "## Host-device copy bandwidth by size",
                  "## Small-op latency beside torch and CuPy", "## multi"):
        assert title in text
    # the sections come in the documented order
    assert text.index("## Per-message cost") < text.index("## GEMM by size") \
        < text.index("## FFT by size") < text.index("## Host-device") < text.index("## multi")
    # a document's own column list decides its table (rel_err left out of gemm's)
    gemm = text[text.index("## GEMM by size"):text.index("## FFT by size")]
    assert "| size | type | gpumsg_tflops | torch_tflops | cupy_tflops | ratio_torch |" in gemm
    assert "rel_err" not in gemm.split("- gemm note")[0]
    # values formatted, empty cells empty
    assert "| 4096 | bf16 | 8 | 7.84 |  | 1.02 |" in gemm
    # targets: given verdicts kept, missing ones computed from the ratio
    targets = text[text.index("## Targets"):text.index("## Per-message cost")]
    assert "| overhead | Stats round trip | µs | 23.2 | 30.9 | bare service | 0.752 | <= 1.15x | " \
           "yes |" in targets
    assert "| copies | 1 MiB H2D pinned | GB/s | 40 | 41 | torch | 0.976 | >= 0.95 | yes |" \
        in targets
    assert "| copies | 512 MiB H2D pinned | GB/s | 45.1 | 41 | torch | 1.1 | >= 0.95 | yes |" \
        in targets
    assert "D2H pageable" not in targets  # no target on that row
    assert "not_a_benchmark" not in text and "broken" not in text


def test_nothing_to_report(tmp_path: Path) -> None:
    assert report.main(["--src", str(tmp_path / "none"), "--results", str(tmp_path / "r"),
                        "--md", str(tmp_path / "R.md"), "--no-plots"]) == 1
    assert not (tmp_path / "R.md").exists()


@pytest.mark.parametrize(("ratio", "target", "met"), [
    (0.98, ">= 0.97", "yes"), (0.96, ">= 0.97", "no"), (1.2, "<= 1.15x", "no"),
    (1.1, "<= 1.15x", "yes"), (1.01, "> 1", "yes"), (1.0, "> 1", "no"),
    ("", ">= 0.97", ""), (0.9, "<= 10 us", ""), (float("nan"), ">= 0.97", "")])
def test_met(ratio: Any, target: str, met: str) -> None:
    assert report._met(ratio, target) == met


def test_plots(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    out = _run_files(tmp_path)
    plots = tmp_path / "plots"
    md = tmp_path / "doc" / "RESULTS.md"
    md.parent.mkdir()
    assert report.main(["--src", str(out), "--results", str(tmp_path / "results"), "--md",
                        str(md), "--plots", str(plots)]) == 0
    files = sorted(os.listdir(plots))
    assert files == ["copies.png", "fft_sizes.png", "gemm.png", "small_ops.png"]
    for f in files:
        assert (plots / f).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "![gemm](../plots/gemm.png)" in md.read_text()


def test_labelled_runs_become_rows(tmp_path: Path) -> None:
    """bench_reliability's format: runs by label, each with its environment and figures."""
    older = {**ENV, "date": "2030-01-01 00:00 UTC"}
    doc = {"benchmark": "reliability", "notes": ["n"], "runs": {
        "a": {"label": "a", "backend": "sim", "environment": older,
              "faults": {"faults": 8, "lost": 0, "wrong": 0, "recovery_median_ms": 120.5,
                         "by_kind": {"oom": 8}}, "seconds": 3.0},
        "b": {"label": "b", "backend": "cuda", "environment": ENV,
              "faults": {"faults": 100, "lost": 0, "wrong": 1, "recovery_median_ms": 278.4}}}}
    path = tmp_path / "reliability.json"
    path.write_text(json.dumps(doc))
    loaded = report.load(str(path))
    assert loaded is not None
    assert loaded["environment"]["date"] == ENV["date"]  # the newest run's
    assert [r["run"] for r in loaded["rows"]] == ["a", "b"]
    assert loaded["rows"][1]["wrong"] == 1 and loaded["rows"][0]["seconds"] == 3.0
    assert "by_kind" not in loaded["rows"][0]
    text = report.render({"reliability": loaded}, {}, "plots")
    assert "| b | cuda | 2031-02-03 04:05 UTC | 100 | 0 | 1 | 278.4 |  |" in text
