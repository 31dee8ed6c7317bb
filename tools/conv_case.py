"""One ResNet-50-shaped convolution (batch 64, NHWC bf16) ready to run through gpumsg and torch,
for the diagnostics ``conv_timeline.py`` and ``conv_switch_interval.py``."""
# ruff: noqa: E731 - small closures over one problem's buffers
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

import gpumsg

BATCH = 64


def conv_pair(dev: Any, torch: Any, rng: Any, c: int, k: int, r: int, s: int, p: int, hw: int,
              direction: str) -> tuple[Callable[[], Any], Callable[[], Any], Callable[[], Any]]:
    """(ours, wait, theirs): ``ours()`` posts one gpumsg convolution into fixed output buffers
    (``out=``) and returns its future, ``wait()`` waits for the last one posted, ``theirs()``
    runs torch's (F.conv2d or aten.convolution_backward on channels-last tensors)."""
    import torch.nn.functional as F

    bf16 = gpumsg.as_dtype("bf16")
    oh = (hw + 2 * p - r) // s + 1
    x_h = rng.standard_normal((BATCH, hw, hw, c), dtype=np.float32).astype(bf16)
    w_h = (rng.standard_normal((k, r, r, c), dtype=np.float32) / 30).astype(bf16)
    dy_h = rng.standard_normal((BATCH, oh, oh, k), dtype=np.float32).astype(bf16)
    x, w, dy = dev.to_device(x_h), dev.to_device(w_h), dev.to_device(dy_h)
    y = dev.alloc((BATCH, oh, oh, k), "bf16", order="C").result()
    dx = dev.alloc(x_h.shape, "bf16", order="C").result()
    dw = dev.alloc(w_h.shape, "bf16", order="C").result()
    kw = dict(stride=s, padding=p, layout="NHWC")

    def t(a: np.ndarray) -> Any:
        return torch.from_numpy(a.astype(np.float32)).cuda().to(torch.bfloat16) \
            .permute(0, 3, 1, 2).contiguous(memory_format=torch.channels_last)

    tx, tw, tdy = t(x_h), t(w_h), t(dy_h)
    geo = ([s, s], [p, p], [1, 1], False, [0, 0], 1)
    bwd = torch.ops.aten.convolution_backward
    last: list[Any] = [None]
    if direction == "fwd":
        post = lambda: dev.nn.conv2d(x, w, out=y, **kw)
        theirs = lambda: F.conv2d(tx, tw, stride=s, padding=p)
    elif direction == "bwd_data":
        post = lambda: dev.cudnn.conv_backward_data(dy, w, x_h.shape, out=dx, **kw)
        theirs = lambda: bwd(tdy, tx, tw, None, *geo, [True, False, False])
    else:
        post = lambda: dev.cudnn.conv_backward_filter(x, dy, w_h.shape, out=dw, **kw)
        theirs = lambda: bwd(tdy, tx, tw, None, *geo, [False, True, False])

    def ours() -> Any:
        last[0] = post()
        return last[0]

    return ours, lambda: last[0].result(), theirs
