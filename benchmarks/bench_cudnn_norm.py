"""cuDNN normalization and dropout beside torch in the same run: batch norm (training,
inference, backward) at a ResNet shape (64 x 256 x 56 x 56) in bf16 NHWC and f32 NCHW,
LayerNorm 8192 x 8192 bf16 forward and backward, dropout of 64M f16 elements forward and
backward (cuDNN's dropout refuses bf16). gpumsg sends its messages with preallocated outputs;
torch runs ``F.batch_norm``/``F.layer_norm``/``F.dropout`` and the ATen backward ops. Bandwidth
counts the minimum traffic (every input read once, every output written once)."""

from __future__ import annotations

import numpy as np
from _common import compare, write_results

import gpumsg
from gpumsg.messages import (
    BatchNormBackward,
    BatchNormInference,
    BatchNormTrain,
    Dropout,
    DropoutBackward,
    LayerNorm,
    LayerNormBackward,
)

BF16 = gpumsg.as_dtype("bf16")


def _host(rng: np.random.Generator, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    a = rng.standard_normal(shape, dtype=np.float32) + np.float32(0.1)
    return a.astype({"bf16": BF16, "f16": np.float16, "f32": np.float32}[dtype])


def _row(case: str, nbytes: int, ours: float, theirs: float, err: float) -> dict:
    print(f"{case}: gpumsg {ours * 1e6:.1f} us, torch {theirs * 1e6:.1f} us, "
          f"ratio {theirs / ours:.3f}, rel_err {err:.3g}", flush=True)
    return {"case": case, "gpumsg": nbytes / ours / 1e9, "torch": nbytes / theirs / 1e9,
            "unit": "GB/s", "ratio": theirs / ours, "gpumsg_us": ours * 1e6,
            "torch_us": theirs * 1e6, "rel_err_vs_torch": err}


def _err(mine: np.ndarray, theirs: np.ndarray) -> float:
    mine, theirs = np.asarray(mine, np.float64), np.asarray(theirs, np.float64)
    return float(np.linalg.norm(mine - theirs) / np.linalg.norm(theirs))


def _timed(dev, torch, send, torch_fn) -> tuple[float, float]:
    last = [dev.synchronize()]

    def ours() -> None:
        last[0] = send()

    return compare((ours, lambda: last[0].result()), (torch_fn, torch.cuda.synchronize))


def batch_norm_cases(dev, torch, dtype: str, layout: str) -> list[dict]:
    import torch.nn.functional as F

    rng = np.random.default_rng()
    n, c, hw = 64, 256, 56
    shape = (n, c, hw, hw) if layout == "NCHW" else (n, hw, hw, c)
    x_h, dy_h = _host(rng, shape, dtype), _host(rng, shape, dtype)
    g_h = rng.uniform(0.5, 1.5, c).astype(np.float32)
    b_h = rng.standard_normal(c).astype(np.float32)
    x, dy = dev.to_device(x_h), dev.to_device(dy_h)
    g, b = dev.to_device(g_h), dev.to_device(b_h)
    rm, rv = dev.to_device(np.zeros(c, np.float32)), dev.to_device(np.ones(c, np.float32))
    y = dev.alloc(shape, dtype, order="C").result()
    dx = dev.alloc(shape, dtype, order="C").result()
    sm, si, dg, db = (dev.alloc((c,), "f32", order="C").result() for _ in range(4))

    def t(a: np.ndarray) -> object:
        tt = torch.from_numpy(a.astype(np.float32)).cuda()
        tt = tt.to(torch.bfloat16) if dtype == "bf16" else tt
        if layout == "NHWC":
            tt = tt.permute(0, 3, 1, 2).contiguous(memory_format=torch.channels_last)
        return tt

    tx, tdy = t(x_h), t(dy_h)
    tg, tb = torch.from_numpy(g_h).cuda(), torch.from_numpy(b_h).cuda()
    trm, trv = torch.zeros(c, device="cuda"), torch.ones(c, device="cuda")
    nbytes = x_h.nbytes
    rows = []
    tag = f"batch norm 64x256x56x56 {dtype} {layout}"

    def back(a: object) -> np.ndarray:
        a = a.float()
        if layout == "NHWC":
            a = a.permute(0, 2, 3, 1)
        return a.cpu().numpy()

    # training
    train = BatchNormTrain(x, g, b, y, sm, si, rm, rv, 0.1, 1e-5, layout)
    ours, theirs = _timed(dev, torch, lambda: dev.send(train),
                          lambda: F.batch_norm(tx, trm, trv, tg, tb, True, 0.1, 1e-5))
    ref = F.batch_norm(tx, None, None, tg, tb, True, 0.1, 1e-5)
    rows.append(_row(f"{tag} train", 2 * nbytes, ours, theirs,
                     _err(dev.copy_to_host(y).result(), back(ref))))
    # inference (with the running statistics both sides hold now)
    dev.send(BatchNormInference(x, g, b, rm, rv, y, 1e-5, layout)).result()
    rm_t = torch.from_numpy(np.asarray(dev.copy_to_host(rm).result())).cuda()
    rv_t = torch.from_numpy(np.asarray(dev.copy_to_host(rv).result())).cuda()
    infer = BatchNormInference(x, g, b, rm, rv, y, 1e-5, layout)
    ours, theirs = _timed(dev, torch, lambda: dev.send(infer),
                          lambda: F.batch_norm(tx, rm_t, rv_t, tg, tb, False, 0.1, 1e-5))
    ref = F.batch_norm(tx, rm_t, rv_t, tg, tb, False, 0.1, 1e-5)
    rows.append(_row(f"{tag} inference", 2 * nbytes, ours, theirs,
                     _err(dev.copy_to_host(y).result(), back(ref))))
    # backward, from the saved statistics of a training pass
    dev.send(train).result()
    _, tmean, tinv = torch.ops.aten.native_batch_norm(tx, tg, tb, None, None, True, 0.1, 1e-5)
    bwd = BatchNormBackward(x, dy, g, sm, si, dx, dg, db, 1e-5, layout)
    tbwd = torch.ops.aten.native_batch_norm_backward
    ours, theirs = _timed(dev, torch, lambda: dev.send(bwd),
                          lambda: tbwd(tdy, tx, tg, None, None, tmean, tinv, True, 1e-5,
                                       [True, True, True]))
    ref = tbwd(tdy, tx, tg, None, None, tmean, tinv, True, 1e-5, [True, True, True])
    rows.append(_row(f"{tag} backward", 3 * nbytes, ours, theirs,
                     _err(dev.copy_to_host(dx).result(), back(ref[0]))))
    return rows


def layer_norm_cases(dev, torch, m: int = 8192, d: int = 8192) -> list[dict]:
    import torch.nn.functional as F

    rng = np.random.default_rng()
    x_h, dy_h = _host(rng, (m, d), "bf16"), _host(rng, (m, d), "bf16")
    g_h = rng.uniform(0.5, 1.5, d).astype(np.float32)
    b_h = rng.standard_normal(d).astype(np.float32)
    x, dy, g, b = (dev.to_device(a) for a in (x_h, dy_h, g_h, b_h))
    y = dev.alloc((m, d), "bf16", order="C").result()
    dx = dev.alloc((m, d), "bf16", order="C").result()
    mean, inv = (dev.alloc((m,), "f32", order="C").result() for _ in range(2))
    dg, db = (dev.alloc((d,), "f32", order="C").result() for _ in range(2))
    tx, tdy = (torch.from_numpy(a.astype(np.float32)).cuda().to(torch.bfloat16)
               for a in (x_h, dy_h))
    tg, tb = (torch.from_numpy(a).cuda().to(torch.bfloat16) for a in (g_h, b_h))
    nbytes = x_h.nbytes
    fwd = LayerNorm(x, y, mean, inv, g, b, 1, 1e-5)
    ours, theirs = _timed(dev, torch, lambda: dev.send(fwd),
                          lambda: F.layer_norm(tx, (d,), tg, tb, 1e-5))
    ref = F.layer_norm(tx, (d,), tg, tb, 1e-5).float().cpu().numpy()
    rows = [_row(f"LayerNorm {m}x{d} bf16 forward", 2 * nbytes, ours, theirs,
                 _err(dev.copy_to_host(y).result(), ref))]
    _, tmean, trstd = torch.ops.aten.native_layer_norm(tx, [d], tg, tb, 1e-5)
    bwd = LayerNormBackward(x, dy, mean, inv, dx, g, dg, db, 1, 1e-5)
    tbwd = torch.ops.aten.native_layer_norm_backward
    ours, theirs = _timed(dev, torch, lambda: dev.send(bwd),
                          lambda: tbwd(tdy, tx, [d], tmean, trstd, tg, tb, [True, True, True]))
    ref = tbwd(tdy, tx, [d], tmean, trstd, tg, tb, [True, True, True])[0].float().cpu().numpy()
    rows.append(_row(f"LayerNorm {m}x{d} bf16 backward", 3 * nbytes, ours, theirs,
                     _err(dev.copy_to_host(dx).result(), ref)))
    return rows


def dropout_cases(dev, torch, n: int = 64 << 20, p: float = 0.5) -> list[dict]:
    rng = np.random.default_rng()
    x_h = _host(rng, (n,), "f16")
    x = dev.to_device(x_h)
    y = dev.alloc((n,), "f16", order="C").result()
    dx = dev.alloc((n,), "f16", order="C").result()
    nres = dev.dnn.dropout_reserve_bytes(x)
    reserve = dev.alloc((nres,), "u8", order="C").result()
    tx = torch.from_numpy(x_h).cuda()
    nbytes = x_h.nbytes
    fwd = Dropout(x, y, reserve, p, 1234)
    ours, theirs = _timed(dev, torch, lambda: dev.send(fwd),
                          lambda: torch.nn.functional.dropout(tx, p, True))
    kept = np.asarray(dev.copy_to_host(y).result(), np.float64) != 0
    rows = [_row(f"dropout {n >> 20}M f16 p={p} forward", 2 * nbytes, ours, theirs,
                 abs(1 - kept.mean() - p))]
    _, mask = torch.ops.aten.native_dropout(tx, p, True)
    bwd = DropoutBackward(x, reserve, dx, p, 1234)
    ours, theirs = _timed(dev, torch, lambda: dev.send(bwd),
                          lambda: torch.ops.aten.native_dropout_backward(tx, mask, 1 / (1 - p)))
    rows.append(_row(f"dropout {n >> 20}M f16 p={p} backward", 2 * nbytes, ours, theirs, 0.0))
    rows[-1]["reserve_bytes"] = nres
    return rows


def main() -> None:
    import torch

    rows: list[dict] = []
    errors: list[str] = []
    with gpumsg.open_device(0) as dev:
        groups = [("batch norm bf16 NHWC", lambda: batch_norm_cases(dev, torch, "bf16", "NHWC")),
                  ("batch norm f32 NCHW", lambda: batch_norm_cases(dev, torch, "f32", "NCHW")),
                  ("LayerNorm", lambda: layer_norm_cases(dev, torch)),
                  ("dropout", lambda: dropout_cases(dev, torch))]
        for name, fn in groups:
            try:
                rows.extend(fn())
            except Exception as exc:  # noqa: BLE001 - one failing group must not hide the rest
                errors.append(f"{name}: {type(exc).__name__}: {exc}")
                print(errors[-1], flush=True)
        cache = dev.dnn.cache_info().result()
    notes = ["ratio = gpumsg speed / torch speed (> 1: gpumsg faster); GB/s = minimum traffic "
             "(inputs read once, outputs written once) / time; time from n pipelined messages "
             "then one wait (n sized for >= 30 ms of torch's work), 0.3 s warm-up each, 5 "
             "alternating runs, medians",
             "batch norm: gpumsg f32 gamma/beta/statistics; NHWC through "
             "cudnnBatchNormalizationForward/BackwardEx in the persistent mode (plain spatial "
             "calls if cuDNN refuses); torch F.batch_norm (training, inference), "
             "aten.native_batch_norm_backward",
             "LayerNorm: gpumsg = its own NVRTC kernels (libs/cudnn/layer_norm.py: one block "
             "per row, 2-byte loads, each row read three times forward), f32 gamma/beta; "
             "torch F.layer_norm / "
             "aten.native_layer_norm_backward with bf16 weights",
             "dropout: the dropout-backward rel_err column is 0 by construction; forward's is "
             "|dropped fraction - p|; gpumsg restores the (seed, p) RNG states from a pristine "
             "copy before each forward (a device copy of cudnnDropoutGetStatesSize bytes)",
             f"gpumsg plan cache at the end: {cache}", *errors]
    write_results("cudnn_norm", rows, notes,
                  ["case", "gpumsg", "torch", "unit", "ratio", "gpumsg_us", "torch_us",
                   "rel_err_vs_torch"])


if __name__ == "__main__":
    main()
