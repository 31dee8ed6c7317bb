"""NCCL's semantics on NumPy, shared by the simulator's two rendezvous: the in-process one
(:mod:`.sim`, simulated devices of one process) and the server of process-isolated members
(:mod:`.simnet`). Pure functions of the ranks' inputs: no device, no buffer, no thread."""

from __future__ import annotations

from typing import Any

import numpy as np

from ...messages.nccl import check_batch

__all__ = ["compute"]


def _work(dtype: str) -> np.dtype:
    return np.dtype(np.float64) if dtype in ("f16", "bf16", "f32", "f64", "e4m3", "e5m2") \
        else np.dtype(object)


def _reduce(parts: list[np.ndarray], o: Any) -> np.ndarray:
    w = _work(o.dtype)
    xs = [p.astype(w) for p in parts]
    if o.op in ("sum", "avg", "premul_sum"):
        if o.op == "premul_sum":
            xs = [x * o.scale for x in xs]
        out = xs[0]
        for x in xs[1:]:
            out = out + x
        if o.op == "avg":
            n = len(xs)  # integers: truncated towards zero, as C division
            out = out / n if w.kind == "f" else np.array(
                [abs(v) // n * (1 if v >= 0 else -1) for v in out], dtype=object)
        return out
    if o.op == "prod":
        out = xs[0]
        for x in xs[1:]:
            out = out * x
        return out
    return (np.maximum if o.op == "max" else np.minimum).reduce(np.stack(xs), axis=0)


def compute(inputs: dict[int, list], n: int) -> dict[int, list]:
    """NCCL's semantics on NumPy: ``inputs[rank]`` = [(CollOp, send data or None)] (one entry
    per op of that rank's batch), answers ``out[rank]`` = [(op index, values of its recv)].
    Raises InvalidMessage where the ranks disagree (see
    :func:`~gpumsg.messages.nccl.check_batch`): the communicator refuses such a batch at
    the call, but a Collective message may come from elsewhere, and a value computed from rank
    0's count and dtype alone would be wrong without a word."""
    check_batch([[o for o, _ in inputs[r]] for r in range(n)])
    out: dict[int, list] = {r: [] for r in inputs}
    colls = {r: [(i, o, x) for i, (o, x) in enumerate(ops) if o.kind not in ("send", "recv")]
             for r, ops in inputs.items()}
    for k in range(len(colls[0])):
        o = colls[0][k][1]
        c = o.count
        ins = {r: colls[r][k] for r in range(n)}
        if o.kind in ("all_reduce", "reduce"):
            red = _reduce([ins[r][2][:c] for r in range(n)], o)
            for r, (i, _, _) in ins.items():
                if o.kind == "all_reduce" or r == o.root:
                    out[r].append((i, red))
        elif o.kind == "broadcast":
            val = ins[o.root][2][:c]
            for r, (i, _, _) in ins.items():
                out[r].append((i, val))
        elif o.kind == "all_gather":
            val = np.concatenate([ins[r][2][:c] for r in range(n)])
            for r, (i, _, _) in ins.items():
                out[r].append((i, val))
        else:  # reduce_scatter
            red = _reduce([ins[r][2][:c * n] for r in range(n)], o)
            for r, (i, _, _) in ins.items():
                out[r].append((i, red[r * c:(r + 1) * c]))
    # point to point: the k-th send from p to r meets the k-th recv on r from p
    sends: dict[tuple[int, int], list] = {}
    for r, ops in inputs.items():
        for o, x in ops:
            if o.kind == "send":
                sends.setdefault((r, o.peer), []).append(x)
    for r, ops in inputs.items():
        for i, (o, _) in enumerate(ops):
            if o.kind == "recv":
                queue = sends.get((o.peer, r))
                if not queue:
                    raise RuntimeError(f"rank {r} receives from {o.peer}, which sends nothing")
                out[r].append((i, queue.pop(0)[:o.count]))
    return out
