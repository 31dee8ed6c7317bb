"""cuDNN normalization, dropout, GELU and softmax beside torch in the same run: batch norm
(training, inference, backward) at a ResNet shape (64 x 256 x 56 x 56) in bf16 NHWC and f32
NCHW, LayerNorm 8192 x 8192 bf16 and f32 forward and backward (with the row-kernel shapes tried
side by side: ``--no-variants`` skips them), dropout of 64M f16 elements forward and backward
(cuDNN's dropout refuses bf16), GELU (exact and tanh) and last-dimension softmax of
8192 x 8192 bf16 and f32 forward and backward (softmax also through cuDNN's own kernel for the
record). gpumsg sends its messages with preallocated outputs; torch runs ``F.batch_norm``/
``F.layer_norm``/``F.dropout``/``F.gelu``/``torch.softmax`` and the ATen backward ops.
Bandwidth counts the minimum traffic (every input read once, every output written once)."""

from __future__ import annotations

import sys

import numpy as np
from _common import compare, write_results

import gpumsg
from gpumsg.libs.cudnn.kernels import _layer_norm as ln_mod
from gpumsg.libs.cudnn.kernels._gelu import GeluKernels
from gpumsg.libs.cudnn.kernels._softmax import SoftmaxKernels
from gpumsg.messages import (
    Activation,
    ActivationBackward,
    BatchNormBackward,
    BatchNormInference,
    BatchNormTrain,
    Dropout,
    DropoutBackward,
    LayerNorm,
    LayerNormBackward,
    Softmax,
    SoftmaxBackward,
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


def _timed(dev, torch, send, torch_fn, n: int | None = None) -> tuple[float, float]:
    last = [dev.synchronize()]

    def ours() -> None:
        last[0] = send()

    return compare((ours, lambda: last[0].result()), (torch_fn, torch.cuda.synchronize), n=n)


def _slow_n(send) -> int | None:
    """10 operations a run where one takes over a millisecond (cuDNN's softmax on these rows
    might), so that the benchmark's time stays bounded; else None (compare's own sizing)."""
    import time

    send().result()
    t0 = time.perf_counter()
    send().result()
    return 10 if time.perf_counter() - t0 > 1e-3 else None


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


def _torch_of(torch, a: np.ndarray, dtype: str) -> object:
    t = torch.from_numpy(np.asarray(a, np.float32)).cuda()
    return t.to(torch.bfloat16) if dtype == "bf16" else t


def layer_norm_cases(dev, torch, dtype: str = "bf16", m: int = 8192, d: int = 8192,
                     variants: bool = False) -> list[dict]:
    import torch.nn.functional as F

    rng = np.random.default_rng()
    x_h, dy_h = _host(rng, (m, d), dtype), _host(rng, (m, d), dtype)
    g_h = rng.uniform(0.5, 1.5, d).astype(np.float32)
    b_h = rng.standard_normal(d).astype(np.float32)
    x, dy, g, b = (dev.to_device(a) for a in (x_h, dy_h, g_h, b_h))
    y = dev.alloc((m, d), dtype, order="C").result()
    dx = dev.alloc((m, d), dtype, order="C").result()
    mean, inv = (dev.alloc((m,), "f32", order="C").result() for _ in range(2))
    dg, db = (dev.alloc((d,), "f32", order="C").result() for _ in range(2))
    tx, tdy = _torch_of(torch, x_h, dtype), _torch_of(torch, dy_h, dtype)
    tg, tb = _torch_of(torch, g_h, dtype), _torch_of(torch, b_h, dtype)
    nbytes = x_h.nbytes
    tag = f"LayerNorm {m}x{d} {dtype}"
    fwd = LayerNorm(x, y, mean, inv, g, b, 1, 1e-5)
    ours, theirs = _timed(dev, torch, lambda: dev.send(fwd),
                          lambda: F.layer_norm(tx, (d,), tg, tb, 1e-5))
    ref = F.layer_norm(tx, (d,), tg, tb, 1e-5).float().cpu().numpy()
    rows = [_row(f"{tag} forward", 2 * nbytes, ours, theirs,
                 _err(dev.copy_to_host(y).result(), ref))]
    _, tmean, trstd = torch.ops.aten.native_layer_norm(tx, [d], tg, tb, 1e-5)
    bwd = LayerNormBackward(x, dy, mean, inv, dx, g, dg, db, 1, 1e-5)
    tbwd = torch.ops.aten.native_layer_norm_backward
    ours, theirs = _timed(dev, torch, lambda: dev.send(bwd),
                          lambda: tbwd(tdy, tx, [d], tmean, trstd, tg, tb, [True, True, True]))
    tref = tbwd(tdy, tx, [d], tmean, trstd, tg, tb, [True, True, True])
    rows.append(_row(f"{tag} backward", 3 * nbytes, ours, theirs,
                     _err(dev.copy_to_host(dx).result(), tref[0].float().cpu().numpy())))
    rows[-1]["dgamma_rel_err"] = _err(dev.copy_to_host(dg).result(),
                                      tref[1].float().cpu().numpy())
    if not variants:
        return rows
    # the row-kernel shapes side by side (the defaults above): threads aimed at, packs/thread
    saved = dict(ln_mod.TUNE)
    try:
        for name, tune, msg, nb in (
                ("fwd threads 128", {"fwd_threads": 128}, fwd, 2 * nbytes),
                ("fwd threads 512", {"fwd_threads": 512}, fwd, 2 * nbytes),
                ("fwd threads 1024", {"fwd_threads": 1024}, fwd, 2 * nbytes),
                ("bwd threads 512 (V=2)", {"bwd_threads": 512}, bwd, 3 * nbytes),
                ("bwd threads 256 (V=4)", {"bwd_threads": 256}, bwd, 3 * nbytes),
                ("bwd 2 blocks/SM", {"bwd_blocks_per_sm": 2}, bwd, 3 * nbytes),
                ("bwd threads 512, 2 blocks/SM", {"bwd_threads": 512, "bwd_blocks_per_sm": 2},
                 bwd, 3 * nbytes)):
            ln_mod.TUNE.clear()
            ln_mod.TUNE.update(saved)
            ln_mod.TUNE.update(tune)
            t_fn = ((lambda: F.layer_norm(tx, (d,), tg, tb, 1e-5)) if msg is fwd else
                    (lambda: tbwd(tdy, tx, [d], tmean, trstd, tg, tb, [True, True, True])))
            ours, theirs = _timed(dev, torch, lambda m_=msg: dev.send(m_), t_fn)
            out = y if msg is fwd else dx
            err = _err(dev.copy_to_host(out).result(),
                       ref if msg is fwd else tref[0].float().cpu().numpy())
            rows.append(_row(f"{tag} variant: {name}", nb, ours, theirs, err))
    finally:
        ln_mod.TUNE.clear()
        ln_mod.TUNE.update(saved)
    return rows


def gelu_cases(dev, torch, dtype: str, m: int = 8192, d: int = 8192,
               variants: bool = False) -> list[dict]:
    import torch.nn.functional as F

    rng = np.random.default_rng()
    x_h, dy_h = _host(rng, (m, d), dtype), _host(rng, (m, d), dtype)
    x, dy = dev.to_device(x_h), dev.to_device(dy_h)
    y = dev.alloc((m, d), dtype, order="C").result()
    dx = dev.alloc((m, d), dtype, order="C").result()
    tx, tdy = _torch_of(torch, x_h, dtype), _torch_of(torch, dy_h, dtype)
    nbytes = x_h.nbytes
    rows = []
    tb = torch.ops.aten.gelu_backward

    def both(tag: str, mode: str, approx: str) -> None:
        """Forward and backward rows of one GELU mode beside torch's."""
        fwd = Activation(x, y, mode)
        ours, theirs = _timed(dev, torch, lambda: dev.send(fwd),
                              lambda: F.gelu(tx, approximate=approx))
        ref = F.gelu(tx, approximate=approx).float().cpu().numpy()
        rows.append(_row(f"{tag} forward", 2 * nbytes, ours, theirs,
                         _err(dev.copy_to_host(y).result(), ref)))
        bwd = ActivationBackward(x, y, dy, dx, mode)
        ours, theirs = _timed(dev, torch, lambda: dev.send(bwd),
                              lambda: tb(tdy, tx, approximate=approx))
        ref = tb(tdy, tx, approximate=approx).float().cpu().numpy()
        rows.append(_row(f"{tag} backward", 3 * nbytes, ours, theirs,
                         _err(dev.copy_to_host(dx).result(), ref)))

    for mode, approx in (("gelu", "none"), ("gelu_tanh", "tanh")):
        both(f"GELU ({mode}) {m}x{d} {dtype}", mode, approx)
    if not variants:
        return rows
    default = (GeluKernels.unroll, GeluKernels.unroll_backward)
    try:  # packs per thread side by side (exact GELU; the rows above use the defaults)
        for u in (1, 2, 4):
            GeluKernels.unroll = GeluKernels.unroll_backward = u
            both(f"GELU (gelu) {m}x{d} {dtype} variant: {u} packs/thread", "gelu", "none")
    finally:
        GeluKernels.unroll, GeluKernels.unroll_backward = default
    return rows


def softmax_cases(dev, torch, dtype: str, m: int = 8192, d: int = 8192) -> list[dict]:
    rng = np.random.default_rng()
    x_h, dy_h = _host(rng, (m, d), dtype), _host(rng, (m, d), dtype)
    x, dy = dev.to_device(x_h), dev.to_device(dy_h)
    y = dev.alloc((m, d), dtype, order="C").result()
    dx = dev.alloc((m, d), dtype, order="C").result()
    tx, tdy = _torch_of(torch, x_h, dtype), _torch_of(torch, dy_h, dtype)
    tdt = tx.dtype
    nbytes = x_h.nbytes
    rows = []
    fwd = Softmax(x, y, "channel", False, "NCHW")  # (N, C): softmax over each row
    bwd = SoftmaxBackward(y, dy, dx, "channel", False, "NCHW")
    tsb = torch.ops.aten._softmax_backward_data
    for own in (True, False):
        SoftmaxKernels.enabled = own
        try:
            tag = f"softmax {m}x{d} {dtype}" + ("" if own else " (cuDNN's kernel)")
            ours, theirs = _timed(dev, torch, lambda: dev.send(fwd),
                                  lambda: torch.softmax(tx, -1),
                                  None if own else _slow_n(lambda: dev.send(fwd)))
            ty = torch.softmax(tx, -1)
            rows.append(_row(f"{tag} forward", 2 * nbytes, ours, theirs,
                             _err(dev.copy_to_host(y).result(), ty.float().cpu().numpy())))
            ours, theirs = _timed(dev, torch, lambda: dev.send(bwd),
                                  lambda t=ty: tsb(tdy, t, -1, tdt),
                                  None if own else _slow_n(lambda: dev.send(bwd)))
            # the reference from gpumsg's own y, so that only the backward is compared
            ty2 = _torch_of(torch, np.asarray(dev.copy_to_host(y).result(), np.float32), dtype)
            ref = tsb(tdy, ty2, -1, tdt).float().cpu().numpy()
            rows.append(_row(f"{tag} backward", 3 * nbytes, ours, theirs,
                             _err(dev.copy_to_host(dx).result(), ref)))
        finally:
            SoftmaxKernels.enabled = True
    return rows


def dropout_cases(dev, torch, n: int = 64 << 20, p: float = 0.5) -> list[dict]:
    rng = np.random.default_rng()
    x_h = _host(rng, (n,), "f16")
    x = dev.to_device(x_h)
    y = dev.alloc((n,), "f16", order="C").result()
    dx = dev.alloc((n,), "f16", order="C").result()
    nres = dev.cudnn.dropout_reserve_bytes(x)
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

    variants = "--no-variants" not in sys.argv
    rows: list[dict] = []
    errors: list[str] = []
    with gpumsg.open_device(0) as dev:
        groups = [("batch norm bf16 NHWC", lambda: batch_norm_cases(dev, torch, "bf16", "NHWC")),
                  ("batch norm f32 NCHW", lambda: batch_norm_cases(dev, torch, "f32", "NCHW")),
                  ("LayerNorm bf16", lambda: layer_norm_cases(dev, torch, "bf16",
                                                              variants=variants)),
                  ("LayerNorm f32", lambda: layer_norm_cases(dev, torch, "f32")),
                  ("GELU bf16", lambda: gelu_cases(dev, torch, "bf16", variants=variants)),
                  ("GELU f32", lambda: gelu_cases(dev, torch, "f32")),
                  ("softmax bf16", lambda: softmax_cases(dev, torch, "bf16")),
                  ("softmax f32", lambda: softmax_cases(dev, torch, "f32")),
                  ("dropout", lambda: dropout_cases(dev, torch))]
        for name, fn in groups:
            try:
                rows.extend(fn())
            except Exception as exc:  # noqa: BLE001 - one failing group must not hide the rest
                errors.append(f"{name}: {type(exc).__name__}: {exc}")
                print(errors[-1], flush=True)
        cache = dev.cudnn.cache_info().result()
    notes = ["ratio = gpumsg speed / torch speed (> 1: gpumsg faster); GB/s = minimum traffic "
             "(inputs read once, outputs written once) / time; time from n pipelined messages "
             "then one wait (n sized for >= 30 ms of torch's work), 0.3 s warm-up each, 5 "
             "alternating runs, medians",
             "batch norm: gpumsg f32 gamma/beta/statistics; NHWC through "
             "cudnnBatchNormalizationForward/BackwardEx in the persistent mode (plain spatial "
             "calls if cuDNN refuses), inference through gpumsg's own kernel (libs/cudnn/kernels/"
             "bn_infer.py); torch F.batch_norm (training, inference), "
             "aten.native_batch_norm_backward",
             "LayerNorm: gpumsg = its own NVRTC kernels (libs/cudnn/kernels/layer_norm.py: the "
             "row in registers, 16-byte loads, one read and one write; backward fused dx + "
             "dgamma/dbeta partials per persistent block, then a small sum kernel), f32 "
             "gamma/beta; torch F.layer_norm / aten.native_layer_norm_backward with weights "
             "in x's dtype; 'variant' rows: other row-kernel shapes (layer_norm.TUNE)",
             "GELU: gpumsg's own kernels (libs/cudnn/kernels/gelu.py, 16-byte loads, f32 math, "
             f"{GeluKernels.unroll} packs per thread forward, {GeluKernels.unroll_backward} "
             "backward; 'variant' rows: both at 1, 2, 4); torch "
             "F.gelu / aten.gelu_backward, approximate 'none' and 'tanh'",
             "softmax: (8192, 8192) as NCHW (N, C), mode 'channel' = torch.softmax(x, -1); "
             "gpumsg's row kernel (libs/cudnn/kernels/softmax.py) and, for the record, cuDNN's "
             "cudnnSoftmaxForward/Backward on the same problem; torch softmax / "
             "aten._softmax_backward_data; backward rel_err against torch's backward applied "
             "to gpumsg's y",
             "dropout: the dropout-backward rel_err column is 0 by construction; forward's is "
             "|dropped fraction - p|; gpumsg restores the (seed, p) RNG states from a pristine "
             "copy before each forward (a device copy of cudnnDropoutGetStatesSize bytes)",
             f"gpumsg plan cache at the end: {cache}", *errors]
    write_results("cudnn_norm", rows, notes,
                  ["case", "gpumsg", "torch", "unit", "ratio", "gpumsg_us", "torch_us",
                   "rel_err_vs_torch"],
                  {"layer_norm_tune": dict(ln_mod.TUNE)})


if __name__ == "__main__":
    main()
