"""A small inference service: a 3-layer MLP and a softmax, served to 8 client threads.

The model (float32) is ``softmax(gelu(gelu(x W1 + b1) W2 + b2) W3 + b3)`` with 1024-wide layers
and requests of 32 rows. Each layer is one cuBLASLt matmul whose epilogue adds the bias and
applies GELU (the tanh form) in the same kernel; the softmax is cuDNN's. The weights are uploaded
once and shared; each client thread owns its activation buffers and, per request, uploads its
input, issues the four calls and downloads the probabilities: one wait per request. The device
thread orders the eight clients' work; no lock is taken by the clients.

Layout: cuBLASLt is column-major, so the activations are kept transposed, ``(features, batch)``
in Fortran order, and each layer computes ``H^T = W^T X^T`` with ``W^T`` stored as an F-ordered
``(out, in)`` buffer (the bias runs down the columns, one value per feature). The last layer's
column-major ``classes x batch`` result is, byte for byte, the row-major ``(batch, classes)``
tensor cuDNN's softmax normalizes over channels: that buffer is allocated as the NCHW tensor
``(batch, classes, 1, 1)`` and handed to cuBLASLt as flat storage.

Every answer is checked against NumPy float64::

    python examples/mlp_serving.py                 # 1024 wide, batch 32, 8 clients x 25 requests
    python examples/mlp_serving.py --small         # 64 wide, batch 8 (also GPUMSG_EXAMPLES_SMALL=1)
    python examples/mlp_serving.py --backend sim

Exit status 0 when every answer agrees with NumPy, 1 otherwise.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import gpumsg

#: (width, batch, classes, clients, requests per client) of a full run and of a small one
FULL = (1024, 32, 1024, 8, 25)
SMALL = (64, 8, 16, 8, 4)
#: float32 products over 1024 terms, GELU and softmax against float64: relative error of the
#: probabilities (the norm of the difference over the norm of the answer)
TOLERANCE = 2e-4
#: the tanh approximation of GELU (cuBLASLt's epilogue)
_GELU_C = np.sqrt(2.0 / np.pi)


def gelu(x: np.ndarray) -> np.ndarray:
    """GELU, tanh approximation (the NumPy reference of cuBLASLt's epilogue)."""
    return 0.5 * x * (1.0 + np.tanh(_GELU_C * (x + 0.044715 * x ** 3)))


def softmax(x: np.ndarray) -> np.ndarray:
    """Softmax over the last axis (the NumPy reference)."""
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


@dataclass
class Model:
    """The MLP's weights on the host (``ws[i]``: ``(in, out)``, ``bs[i]``: ``(out,)``, float32)
    and, once :meth:`upload` ran, on a device (``W^T`` F-ordered, the biases as vectors)."""

    ws: list[np.ndarray]
    bs: list[np.ndarray]
    dev_ws: list[Any] = field(default_factory=list)
    dev_bs: list[Any] = field(default_factory=list)

    @classmethod
    def random(cls, width: int, classes: int, seed: int | None = None) -> Model:
        rng = np.random.default_rng(seed)
        dims = [(width, width), (width, width), (width, classes)]
        ws = [(rng.standard_normal(d) / np.sqrt(d[0])).astype(np.float32) for d in dims]
        bs = [(0.1 * rng.standard_normal(d[1])).astype(np.float32) for d in dims]
        return cls(ws, bs)

    def upload(self, dev: gpumsg.Device) -> Model:
        # W^T as an F-ordered (out, in) buffer: the column-major out x in matrix cuBLASLt reads
        self.dev_ws = [dev.to_device(np.asfortranarray(w.T)).result() for w in self.ws]
        self.dev_bs = [dev.to_device(b).result() for b in self.bs]
        return self

    def reference(self, x: np.ndarray) -> np.ndarray:
        """The probabilities in NumPy float64."""
        h = x.astype(np.float64)
        for i, (w, b) in enumerate(zip(self.ws, self.bs)):
            h = h @ w.astype(np.float64) + b
            if i < 2:
                h = gelu(h)
        return softmax(h)

    def free(self) -> None:
        for buf in (*self.dev_ws, *self.dev_bs):
            buf.free()


class Session:
    """One client's activation buffers and its request: upload, three matmuls, softmax,
    download."""

    def __init__(self, dev: gpumsg.Device, model: Model, batch: int) -> None:
        self.dev, self.model, self.batch = dev, model, batch
        width = model.ws[0].shape[0]
        classes = model.ws[2].shape[1]
        self.width, self.classes = width, classes
        self.x = dev.alloc((width, batch), np.float32, order="F").result()
        self.h = [dev.alloc((model.ws[i].shape[1], batch), np.float32, order="F").result()
                  for i in range(2)]
        # the logits, written column-major (classes x batch) = the NCHW tensor (batch, classes)
        self.logits = dev.alloc((batch, classes, 1, 1), np.float32, order="C").result()
        self.probs = dev.alloc((batch, classes, 1, 1), np.float32, order="C").result()

    def infer(self, x: np.ndarray) -> np.ndarray:
        """The probabilities ``(batch, classes)`` for the float32 input ``x`` ``(batch, width)``."""
        dev, m = self.dev, self.model
        blas = dev.blas
        dev.copy_from_host(self.x, x.T)  # (width, batch) F-ordered: X^T column-major
        src = self.x
        for i in range(2):
            out_features, in_features = m.ws[i].shape[1], m.ws[i].shape[0]
            blas.lt_matmul(m.dev_ws[i], src, self.h[i], m=out_features, n=self.batch,
                           k=in_features, epilogue="gelu_bias", bias=m.dev_bs[i])
            src = self.h[i]
        blas.lt_matmul(m.dev_ws[2], src, self.logits, m=self.classes, n=self.batch,
                       k=m.ws[2].shape[0], epilogue="bias", bias=m.dev_bs[2])
        dev.dnn.softmax(self.logits, mode="channel", out=self.probs)
        out = dev.copy_to_host(self.probs).result()  # the request's one wait
        return out.reshape(self.batch, self.classes)

    def free(self) -> None:
        for buf in (self.x, *self.h, self.logits, self.probs):
            buf.free()


def relative_error(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.linalg.norm(got - want) / np.linalg.norm(want))


def serve(dev: gpumsg.Device, model: Model, batch: int, clients: int, requests: int,
          check: bool = True, seed: int | None = None) -> tuple[float, float]:
    """``clients`` threads, each sending ``requests`` requests of fresh random inputs.
    Returns ``(requests per second, the largest relative error seen)`` (error 0.0 when
    ``check`` is off). A client that fails makes this raise."""
    width = model.ws[0].shape[0]
    sessions = [Session(dev, model, batch) for _ in range(clients)]
    errors: list[float] = []
    failures: list[BaseException] = []
    start = threading.Barrier(clients + 1)
    lock = threading.Lock()

    def client(session: Session, k: int) -> None:
        rng = np.random.default_rng(None if seed is None else seed + k)
        inputs = [rng.standard_normal((batch, width)).astype(np.float32)
                  for _ in range(requests)]
        worst = 0.0
        try:
            start.wait()
            for x in inputs:
                probs = session.infer(x)
                if check:
                    worst = max(worst, relative_error(probs, model.reference(x)))
        except BaseException as exc:  # noqa: BLE001 - reported by serve()
            with lock:
                failures.append(exc)
        with lock:
            errors.append(worst)

    threads = [threading.Thread(target=client, args=(s, k)) for k, s in enumerate(sessions)]
    for t in threads:
        t.start()
    start.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    dt = time.perf_counter() - t0
    for s in sessions:
        s.free()
    if failures:
        raise failures[0]
    return clients * requests / dt, max(errors)


def small_run() -> bool:
    return os.environ.get("GPUMSG_EXAMPLES_SMALL", "") not in ("", "0")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", default="auto", choices=("auto", "cuda", "sim"))
    ap.add_argument("--device", type=int, default=0)
    ap.add_argument("--small", action="store_true", help="a small model and few requests")
    args = ap.parse_args(argv)
    width, batch, classes, clients, requests = SMALL if args.small or small_run() else FULL
    with gpumsg.open_device(args.device, backend=args.backend) as dev:
        model = Model.random(width, classes).upload(dev)
        rate, worst = serve(dev, model, batch, clients, requests)
        model.free()
        ok = worst < TOLERANCE
        print(f"mlp_serving {width} wide, batch {batch}, {clients} clients x {requests} "
              f"requests [{dev.backend}]: worst error vs NumPy {worst:.1e} "
              f"({'ok' if ok else 'WRONG'}), {rate:.0f} requests/s (checking each answer)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
