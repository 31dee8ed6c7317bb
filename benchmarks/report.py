"""Turn the last benchmark run into ``benchmarks/RESULTS.md`` and the plots under
``benchmarks/plots/`` (``make bench-report``).

    python benchmarks/report.py [--src DIR] [--results DIR] [--md PATH] [--plots DIR]
                                [--no-plots]

1. Every benchmark JSON file in ``--src`` (default: ``benchmarks/out/``, where a run writes) is
   copied into ``--results`` (default ``benchmarks/results/``) as ``<benchmark>.json``,
   replacing the one from an earlier run. ``benchmarks/results/`` so holds exactly the files
   RESULTS.md is made from: the newest run of each benchmark.
2. From those files: RESULTS.md (each section stamped with its device and date; the rows that
   carry a target first; GEMM, FFT and copy bandwidth by size, small-op latency beside torch
   and CuPy; then every other benchmark's table) and, with matplotlib, the PNG plots of the
   curves.

Reads every format the benchmark scripts have written: a JSON object with ``benchmark``,
``environment`` and ``rows`` (and, from newer scripts, ``columns``).
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import os
import re
import shutil
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))

#: benchmarks whose sections come first, in this order (any others follow alphabetically)
ORDER = ["overhead", "gemm", "blas", "fft_sizes", "fft", "copies", "small_ops", "supervision"]
TITLES = {
    "overhead": "Per-message cost beside a bare thread + queue + Future service",
    "gemm": "GEMM by size",
    "blas": "Large GEMMs, batched GEMM, fused epilogue, dot",
    "fft_sizes": "FFT by size",
    "fft": "FFT: fixed cases, explicit plans, plan cache",
    "copies": "Host-device copy bandwidth by size",
    "small_ops": "Small-op latency beside torch and CuPy",
    "supervision": "Process isolation and recovery",
}
#: the JSON name some scripts gave their benchmark -> the name used here
ALIASES = {"bench_multi": "multi"}


# -- loading ----------------------------------------------------------------------------------

def load(path: str) -> dict[str, Any] | None:
    """A benchmark document, or None for any other JSON (diagnostics, logs)."""
    try:
        with open(path) as f:
            doc = json.load(f)
    except (OSError, ValueError):
        return None
    if isinstance(doc, dict) and isinstance(doc.get("runs"), dict) and "rows" not in doc:
        doc = _from_runs(doc)
    if not isinstance(doc, dict) or not isinstance(doc.get("rows"), list):
        return None
    if "benchmark" not in doc or not isinstance(doc.get("environment"), dict):
        return None
    doc["benchmark"] = ALIASES.get(doc["benchmark"], doc["benchmark"])
    return doc


def _from_runs(doc: dict[str, Any]) -> dict[str, Any]:
    """A document of labelled runs (``bench_reliability``: ``{"runs": {label: run}}``) as one
    row per run: its label, backend, device and date and the scalar figures of each part."""
    rows = []
    envs = []
    for label, run in doc["runs"].items():
        if not isinstance(run, dict):
            continue
        env = run.get("environment") or {}
        envs.append(env)
        row: dict[str, Any] = {"run": label, "backend": run.get("backend", ""),
                               "device": env.get("device", ""), "date": env.get("date", "")}
        parts = [run] + [p for p in run.values() if isinstance(p, dict) and p is not env]
        for part in parts:
            row.update((k, v) for k, v in part.items()
                       if isinstance(v, (int, float, str)) and k not in row and k != "label")
        rows.append(row)
    newest = max(envs, key=lambda e: str(e.get("date", "")), default={})
    return {"benchmark": doc.get("benchmark", "runs"), "environment": newest, "rows": rows,
            "columns": ["run", "backend", "date", "faults", "client_ops", "lost", "wrong",
                        "untyped", "recovery_median_ms", "recovery_p99_ms", "seconds"],
            "notes": doc.get("notes", [])}


def merge(src: str, results: str) -> list[str]:
    """Copy each benchmark document of ``src`` into ``results`` as ``<benchmark>.json``; the
    names copied."""
    if not os.path.isdir(src) or os.path.abspath(src) == os.path.abspath(results):
        return []
    os.makedirs(results, exist_ok=True)
    copied = []
    for path in sorted(glob.glob(os.path.join(src, "*.json"))):
        doc = load(path)
        if doc is None:
            continue
        shutil.copyfile(path, os.path.join(results, f"{doc['benchmark']}.json"))
        copied.append(doc["benchmark"])
    return copied


def load_all(results: str) -> dict[str, dict[str, Any]]:
    docs = {}
    for path in sorted(glob.glob(os.path.join(results, "*.json"))):
        doc = load(path)
        if doc is not None:
            docs[doc["benchmark"]] = doc
    return docs


# -- formatting -------------------------------------------------------------------------------

def num(value: Any) -> float | None:
    """``value`` as a finite float, or None (empty cells, text)."""
    if isinstance(value, bool) or value is None or value == "":
        return None
    try:
        out = float(value)
    except (TypeError, ValueError):
        return None
    return out if math.isfinite(out) else None


def fmt(value: Any) -> str:
    if isinstance(value, float):
        if value == 0 or not math.isfinite(value):
            return str(value)
        if abs(value) >= 1000:
            return f"{value:,.0f}"
        if abs(value) >= 100:
            return f"{value:.1f}"
        if abs(value) < 1e-3:
            return f"{value:.1e}"
        return f"{value:.3g}"
    return str(value).replace("|", "\\|").replace("\n", " ")


def stamp(doc: dict[str, Any]) -> str:
    env = doc["environment"]
    parts = [str(env.get("device", "?")), f"driver {env.get('driver', '?')}",
             str(env.get("date", "?"))]
    for key, label in (("torch", "torch"), ("cupy", "CuPy"), ("python", "Python")):
        if env.get(key):
            parts.append(f"{label} {env[key]}")
    return " · ".join(parts)


def columns_of(doc: dict[str, Any]) -> list[str]:
    cols = doc.get("columns")
    if isinstance(cols, list) and cols:
        return [str(c) for c in cols]
    seen: list[str] = []
    for row in doc["rows"]:
        for key in row:
            if key not in seen:
                seen.append(key)
    return seen


def table(rows: list[dict[str, Any]], cols: list[str]) -> list[str]:
    cols = [c for c in cols if any(r.get(c, "") != "" for r in rows)]
    if not rows or not cols:
        return []
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        lines.append("| " + " | ".join(fmt(r.get(c, "")) for c in cols) + " |")
    return lines


# -- the targets: rows that carry one, beside their peer ----------------------------------------

PEER_KEYS = ("bare_us", "torch", "torch_us", "torch_GBps", "torch_tflops", "peer_us", "thread",
             "peer_ms")
OURS_KEYS = ("gpumsg_us", "gpumsg", "gpumsg_GBps", "gpumsg_tflops", "process", "gpumsg_ms")


def target_rows(docs: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for name in ordered(docs):
        for r in docs[name]["rows"]:
            target = str(r.get("target", "")).strip()
            if not target or target.startswith("("):
                continue
            ours = next((r[k] for k in OURS_KEYS if r.get(k, "") != ""), "")
            peer_key = next((k for k in PEER_KEYS if r.get(k, "") != ""), "")
            case = r.get("case") or " ".join(
                str(r[k]) for k in ("size_MiB", "copy", "size") if r.get(k, "") != "")
            if "size_MiB" in r:
                case = f"{r['size_MiB']} MiB {r.get('copy', '')}"
            if r.get("path"):
                case = f"{case}, {r['path']}"
            unit = r.get("unit") or ("x" if " / " in str(case) else _unit(peer_key))
            out.append({"benchmark": name, "case": case, "unit": unit,
                        "gpumsg": ours, "peer": r.get(peer_key, "") if peer_key else "",
                        "peer name": _peer_name(name, peer_key), "ratio": r.get("ratio", ""),
                        "target": target, "met": r.get("met", "") or _met(r.get("ratio"),
                                                                         target)})
    return out


def _unit(key: str) -> str:
    for suffix, unit in (("_us", "µs"), ("_GBps", "GB/s"), ("_tflops", "TFLOP/s"),
                         ("_ms", "ms")):
        if key.endswith(suffix):
            return unit
    return ""


def _peer_name(bench: str, key: str) -> str:
    if key == "bare_us":
        return "bare service"
    if key == "thread":
        return "thread isolation"
    return "torch" if key else ""


def _met(ratio: Any, target: str) -> str:
    """'yes'/'no' for a ratio against a target such as '>= 0.97' or '<= 1.15x'."""
    r = num(ratio)
    m = re.fullmatch(r"\s*(>=|<=|>|<)\s*([0-9.]+)\s*x?\s*", target)
    if r is None or m is None:
        return ""
    op, bound = m.group(1), float(m.group(2))
    ok = {">=": r >= bound, "<=": r <= bound, ">": r > bound, "<": r < bound}[op]
    return "yes" if ok else "no"


def ordered(docs: dict[str, Any]) -> list[str]:
    return [n for n in ORDER if n in docs] + sorted(n for n in docs if n not in ORDER)


# -- plots ------------------------------------------------------------------------------------

def plots(docs: dict[str, dict[str, Any]], folder: str) -> dict[str, str]:
    """Draw the curves that the documents hold; benchmark name -> PNG file name."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    os.makedirs(folder, exist_ok=True)
    made = {}
    for name, draw in (("gemm", _plot_gemm), ("fft_sizes", _plot_fft), ("copies", _plot_copies),
                       ("small_ops", _plot_small_ops)):
        doc = docs.get(name)
        if doc is None or not doc["rows"]:
            continue
        fig = draw(plt, doc)
        if fig is None:
            continue
        env = doc["environment"]
        fig.suptitle(f"{TITLES[name]}\n{env.get('device', '?')} · {env.get('date', '?')}",
                     fontsize=10)
        fig.tight_layout()
        file = f"{name}.png"
        fig.savefig(os.path.join(folder, file), dpi=110)
        plt.close(fig)
        made[name] = file
    return made


SIDES = (("gpumsg", "-", "o"), ("torch", "--", "s"), ("cupy", ":", "^"))


def _log2_axis(ax: Any) -> None:
    """A base-2 log axis labelled with plain numbers."""
    from matplotlib.ticker import FuncFormatter

    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))


def _plot_gemm(plt: Any, doc: dict[str, Any]) -> Any:
    types = list(dict.fromkeys(r["type"] for r in doc["rows"]))
    fig, axes = plt.subplots(1, len(types), figsize=(3.6 * len(types), 3.4), squeeze=False)
    for ax, t in zip(axes[0], types):
        rows = sorted((r for r in doc["rows"] if r["type"] == t), key=lambda r: r["size"])
        for side, style, marker in SIDES:
            pts = [(r["size"], num(r.get(f"{side}_tflops"))) for r in rows]
            pts = [(x, y) for x, y in pts if y is not None]
            if pts:
                ax.plot(*zip(*pts), style, marker=marker, label=side)
        _log2_axis(ax)
        ax.set_title(t)
        ax.set_xlabel("n (n x n x n)")
        ax.set_ylabel("TFLOP/s")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    return fig


def _plot_fft(plt: Any, doc: dict[str, Any]) -> Any:
    rows = sorted(doc["rows"], key=lambda r: r["n"])
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.4))
    for side, style, marker in SIDES:
        pts = [(r["n"], num(r.get(f"{side}_us"))) for r in rows]
        pts = [(x, y) for x, y in pts if y is not None]
        if pts:
            axes[0].plot(*zip(*pts), style, marker=marker, label=side)
        pts = [(r["n"], num(r.get(f"{side}_gflops"))) for r in rows]
        pts = [(x, y) for x, y in pts if y is not None]
        if pts:
            axes[1].plot(*zip(*pts), style, marker=marker, label=side)
    batch = rows[0]["n"] * rows[0].get("batch", 1)
    axes[0].set_ylabel(f"µs per call ({batch} points)")
    axes[1].set_ylabel("GFLOP/s (5 n log2 n)")
    for ax in axes:
        ax.set_xscale("log", base=2)
        ax.set_xlabel("transform length n (c64, batched)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    return fig


def _plot_copies(plt: Any, doc: dict[str, Any]) -> Any:
    kinds = list(dict.fromkeys(r["copy"] for r in doc["rows"]))
    fig, axes = plt.subplots(1, len(kinds), figsize=(3.4 * len(kinds), 3.4), squeeze=False)
    for ax, kind in zip(axes[0], kinds):
        rows = sorted((r for r in doc["rows"] if r["copy"] == kind), key=lambda r: r["size_MiB"])
        for side, style, marker in SIDES:
            pts = [(r["size_MiB"], num(r.get(f"{side}_GBps"))) for r in rows]
            pts = [(x, y) for x, y in pts if y is not None]
            if pts:
                ax.plot(*zip(*pts), style, marker=marker, label=side)
        _log2_axis(ax)
        ax.set_title(kind)
        ax.set_xlabel("MiB")
        ax.set_ylabel("GB/s")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    return fig


def _plot_small_ops(plt: Any, doc: dict[str, Any]) -> Any:
    rows = doc["rows"]
    fig, axes = plt.subplots(1, 2, figsize=(11, 0.42 * len(rows) + 1.6), sharey=True)
    labels = [r["case"] for r in rows]
    height = 0.27
    for ax, kind in zip(axes, ("pipelined", "round_trip")):
        keys = (("gpumsg", f"{kind}_us"), ("torch", f"peer_{kind}_us"),
                ("cupy", f"cupy_{kind}_us"))
        for i, (side, key) in enumerate(keys):
            values = [num(r.get(key)) for r in rows]
            if all(v is None for v in values):
                continue
            ys = [j + (i - 1) * height for j in range(len(rows))]
            ax.barh(ys, [v or 0 for v in values], height=height, label=side)
        ax.set_yticks(range(len(rows)))
        ax.set_yticklabels(labels, fontsize=8)
        ax.invert_yaxis()
        ax.set_xlabel("µs per call" if kind == "pipelined" else "µs, call waited for")
        ax.set_title("pipelined" if kind == "pipelined" else "round trip", fontsize=9)
        ax.grid(axis="x", alpha=0.3)
        ax.legend(fontsize=8)
    return fig


# -- the document -----------------------------------------------------------------------------

def render(docs: dict[str, dict[str, Any]], made: dict[str, str], plots_rel: str) -> str:
    lines = ["# Benchmark results", "",
             "gpumsg beside torch and CuPy (and, for the per-message rows, a bare thread + "
             "queue + Future service making the same library calls), every pair measured in "
             "the same process and run: medians after warm-up, the GPU synchronized around "
             "every timed region. A ratio above 1 means gpumsg is faster, except in the "
             "per-message rows (gpumsg time / bare time: below 1 is faster).", "",
             "Made by `benchmarks/report.py` from `benchmarks/results/*.json`. To regenerate: "
             "`make bench-headline-here` on the GPU machine (about five minutes on an H100; "
             "writes `benchmarks/out/` or `$OUT`), copy its JSON files into `benchmarks/out/`, "
             "then `make bench-report`.", ""]
    devices = sorted({d["environment"].get("device", "?") for d in docs.values()})
    dates = sorted(d["environment"].get("date", "") for d in docs.values())
    if docs:
        lines += [f"Devices: {', '.join(devices)}; runs from {dates[0]} to {dates[-1]}.", ""]
    targets = target_rows(docs)
    if targets:
        lines += ["## Targets", "",
                  "Every row that carries a target, beside its peer.", ""]
        lines += table(targets, ["benchmark", "case", "unit", "gpumsg", "peer", "peer name",
                                 "ratio", "target", "met"])
        lines.append("")
    for name in ordered(docs):
        doc = docs[name]
        lines += [f"## {TITLES.get(name, name)}", "", f"`{name}.json`: {stamp(doc)}", ""]
        if name in made:
            lines += [f"![{name}]({plots_rel}/{made[name]})", ""]
        lines += table(doc["rows"], columns_of(doc))
        notes = [n for n in doc.get("notes", []) if isinstance(n, str)]
        if notes:
            lines.append("")
            lines += [f"- {fmt(n)}" for n in notes]
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--src", default=os.environ.get("GPUMSG_BENCH_OUT")
                    or os.path.join(HERE, "out"), help="where the last run wrote")
    ap.add_argument("--results", default=os.path.join(HERE, "results"),
                    help="the kept JSON files RESULTS.md is made from")
    ap.add_argument("--md", default=os.path.join(HERE, "RESULTS.md"))
    ap.add_argument("--plots", default=os.path.join(HERE, "plots"))
    ap.add_argument("--no-plots", action="store_true")
    args = ap.parse_args(argv)
    copied = merge(args.src, args.results)
    if copied:
        print(f"from {args.src}: {', '.join(copied)}")
    docs = load_all(args.results)
    if not docs:
        print(f"no benchmark results in {args.results} (nor {args.src})")
        return 1
    made = {} if args.no_plots else plots(docs, args.plots)
    rel = os.path.relpath(args.plots, os.path.dirname(os.path.abspath(args.md)))
    with open(args.md, "w") as f:
        f.write(render(docs, made, rel.replace(os.sep, "/")))
    print(f"wrote {args.md} ({len(docs)} benchmarks) and {len(made)} plots in {args.plots}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
