"""cuDNN LSTM beside ``torch.nn.LSTM`` (which calls the same cuDNN v8 RNN API) in the same run:
sequence 512, batch 64, input 1024, hidden 1024, one layer, sequence-major, in f16 (tensor
cores, f32 math), f32 strict (torch: ``cudnn.allow_tf32 = False``) and f32 TF32 (torch's
default). Forward is inference (torch under ``no_grad``); forward+backward is the training
forward, backward data and backward weights (torch: ``autograd.grad`` of y with respect to x and
every parameter, given dy). Both sides hold the same weights (torch's ``state_dict`` set through
``set_weights``) and start from zero states; the outputs are compared."""

from __future__ import annotations

import numpy as np
from _common import compare, write_results

import gpumsg
from gpumsg.messages import RnnSpaceInfo

T, B, IN, H = 512, 64, 1024, 1024


def _err(mine: np.ndarray, theirs: np.ndarray) -> float:
    mine, theirs = np.asarray(mine, np.float64), np.asarray(theirs, np.float64)
    return float(np.linalg.norm(mine - theirs) / np.linalg.norm(theirs))


def lstm_cases(dev, torch, dtype: str, tf32: bool, algo: str = "auto") -> list[dict]:
    torch.backends.cudnn.allow_tf32 = tf32
    tdt = {"f16": torch.float16, "f32": torch.float32}[dtype]
    ndt = {"f16": np.float16, "f32": np.float32}[dtype]
    rng = np.random.default_rng()
    mod = torch.nn.LSTM(IN, H, 1).cuda().to(tdt)
    net = dev.cudnn.lstm(IN, H, 1, dtype=dtype, math="tf32" if tf32 else "default", algo=algo)
    chosen = dev.send(RnnSpaceInfo(net.spec, T, B)).result()["algo"]
    state = {k: v.detach().float().cpu().numpy() for k, v in mod.state_dict().items()}
    net.set_weights(state).result()
    x_h = rng.standard_normal((T, B, IN), dtype=np.float32).astype(ndt)
    dy_h = (rng.standard_normal((T, B, H), dtype=np.float32) * 0.1).astype(ndt)
    x, dy = dev.to_device(x_h), dev.to_device(dy_h)
    tx = torch.from_numpy(x_h).cuda().requires_grad_(True)
    tdy = torch.from_numpy(dy_h).cuda()
    params = list(mod.parameters())
    label = f"LSTM T{T} B{B} I{IN} H{H} {dtype}" + (" tf32" if tf32 else "")
    if dtype == "f32" and not tf32:
        label += " strict"
    if algo != "auto":
        label += f" (algo={algo})"
    last = [dev.synchronize()]

    def ours_fwd() -> None:
        last[0] = net(x).y

    def ours_train() -> None:
        out = net(x, train=True)
        last[0] = net.backward(x, out.y, dy, out.reserve).dw

    def torch_fwd() -> None:
        with torch.no_grad():
            mod(tx)

    def torch_train() -> None:
        y, _ = mod(tx)
        torch.autograd.grad(y, [tx, *params], tdy)

    # agreement with torch (the same cuDNN calls; the same weights)
    y_ours = dev.copy_to_host(net(x).y.result()).result()
    with torch.no_grad():
        y_t = mod(tx)[0].float().cpu().numpy()
    out = net(x, train=True)
    g = net.backward(x, out.y, dy, out.reserve)
    yt, _ = mod(tx)
    gt = torch.autograd.grad(yt, [tx, *params], tdy)
    dx_err = _err(dev.copy_to_host(g.dx.result()).result(), gt[0].float().cpu().numpy())
    dw_ours = net.get_weights(g.dw.result())
    names = [n for n, _ in mod.named_parameters()]
    dw_err = max(_err(dw_ours[n], v.float().cpu().numpy()) for n, v in zip(names, gt[1:]))
    # 2 flops per multiply-add: input and recurrent GEMMs of 4 gates; backward about twice that
    flop_fwd = 2.0 * T * B * 4 * H * (IN + H)
    rows = []
    for what, ours, theirs, flop, err in (
            ("forward (inference)", ours_fwd, torch_fwd, flop_fwd, _err(y_ours, y_t)),
            ("forward+backward (train)", ours_train, torch_train, 3 * flop_fwd,
             max(dx_err, dw_err))):
        o, t = compare((ours, lambda: last[0].result()), (theirs, torch.cuda.synchronize),
                       repeats=5, warmup_s=0.5)
        print(f"{label} {what}: gpumsg {o * 1e3:.2f} ms, torch {t * 1e3:.2f} ms, "
              f"ratio {t / o:.3f}, rel_err {err:.3g}", flush=True)
        rows.append({"case": f"{label} {what}", "gpumsg": flop / o / 1e12,
                     "torch": flop / t / 1e12, "unit": "TFLOP/s", "ratio": t / o,
                     "gpumsg_ms": o * 1e3, "torch_ms": t * 1e3, "rel_err_vs_torch": err,
                     "gpumsg_algo": chosen})
    return rows


def main() -> None:
    import torch

    torch.backends.cudnn.benchmark = False
    rows: list[dict] = []
    with gpumsg.open_device(0) as dev:
        for dtype, tf32, algo in (("f16", False, "auto"), ("f16", False, "standard"),
                                  ("f32", False, "auto"), ("f32", True, "auto")):
            try:
                rows.extend(lstm_cases(dev, torch, dtype, tf32, algo))
            except Exception as exc:  # noqa: BLE001 - record the failure, measure the rest
                import traceback

                traceback.print_exc()
                rows.append({"case": f"LSTM {dtype}{' tf32' if tf32 else ''}",
                             "error": f"{type(exc).__name__}: {exc}"})
        cache = dev.cudnn.rnn_cache_info().result()
    notes = ["ratio = gpumsg speed / torch speed (> 1: gpumsg faster); time from n pipelined "
             "calls then one wait (n sized for >= 30 ms of torch's work, at least 10), 0.5 s "
             "warm-up each, 5 alternating runs, medians; TFLOP/s counts the forward as "
             "2 T B 4H (I + H) and forward+backward as 3x that",
             "gpumsg_algo: the cuDNN algorithm gpumsg ran (algo='auto' unless the case names "
             "one); torch picks by its own heuristics (persistent kernels for f16 in this regime, "
             "standard otherwise); sequence-major packed layout, f16 with f32 math on tensor "
             "cores; gpumsg allocates y/h/c (and the reserve, the gradients) per "
             "call from its pool, torch from its caching allocator",
             "rel_err_vs_torch: forward y; forward+backward the worse of dx and every weight "
             "gradient",
             f"gpumsg RNN caches at the end: {cache}"]
    write_results("cudnn_rnn", rows, notes,
                  ["case", "gpumsg", "torch", "unit", "ratio", "gpumsg_ms", "torch_ms",
                   "rel_err_vs_torch", "gpumsg_algo", "error"])


if __name__ == "__main__":
    main()
