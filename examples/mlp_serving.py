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

    python examples/mlp_serving.py                 # on a GPU: 1024 wide, batch 32, 8 x 25 requests
    python examples/mlp_serving.py --backend sim   # the NumPy simulator: 64 wide, batch 8
    python examples/mlp_serving.py --size full     # the full model wherever it runs

Exit status 0 when every answer agrees with NumPy, 1 otherwise.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import gpumsg

#: (width, batch, classes, clients, requests per client) of a full run (on a GPU) and of a
#: small one (the simulator, CI)
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
    _ws64: list[np.ndarray] = field(default_factory=list, repr=False)

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
        if not self._ws64:
            self._ws64 = [w.astype(np.float64) for w in self.ws]
        h = x.astype(np.float64)
        for i, (w, b) in enumerate(zip(self._ws64, self.bs)):
            h = h @ w + b
            if i < 2:
                h = gelu(h)
        return softmax(h)

    def free(self) -> None:
        for buf in (*self.dev_ws, *self.dev_bs):
            buf.free()


class Client:
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
        dev.copy_from_host(self.x, x.T)  # (width, batch) F-ordered: X^T column-major
        src = self.x
        for i in range(2):
            out_features, in_features = m.ws[i].shape[1], m.ws[i].shape[0]
            dev.cublaslt.matmul(m.dev_ws[i], src, self.h[i], m=out_features, n=self.batch,
                                k=in_features, epilogue="gelu_bias", bias=m.dev_bs[i])
            src = self.h[i]
        dev.cublaslt.matmul(m.dev_ws[2], src, self.logits, m=self.classes, n=self.batch,
                            k=m.ws[2].shape[0], epilogue="bias", bias=m.dev_bs[2])
        dev.nn.softmax(self.logits, dim=1, out=self.probs)
        out = dev.copy_to_host(self.probs).result()  # the request's one wait
        return out.reshape(self.batch, self.classes)

    def free(self) -> None:
        for buf in (self.x, *self.h, self.logits, self.probs):
            buf.free()


def relative_error(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.linalg.norm(got - want) / np.linalg.norm(want))


def run_clients(infers: list[Callable[[np.ndarray], np.ndarray]], batch: int, width: int,
                requests: int, reference: Callable[[np.ndarray], np.ndarray] | None = None,
                seed: int | None = None) -> tuple[float, float]:
    """One thread per ``infers[i]`` (a client's request function), each sending ``requests``
    requests of fresh random ``(batch, width)`` float32 inputs after one untimed request (the
    libraries load and plan on first use). Returns ``(requests per second, the largest relative
    error against reference(x))``; the error is 0.0 without ``reference``. A client that fails
    makes this raise its error."""
    clients = len(infers)
    errors: list[float] = []
    failures: list[BaseException] = []
    start = threading.Barrier(clients + 1)
    lock = threading.Lock()

    def client(infer: Callable[[np.ndarray], np.ndarray], k: int) -> None:
        rng = np.random.default_rng(None if seed is None else seed + k)
        inputs = [rng.standard_normal((batch, width)).astype(np.float32)
                  for _ in range(requests)]
        worst = 0.0
        try:
            infer(inputs[0])
            start.wait()
            for x in inputs:
                out = infer(x)
                if reference is not None:
                    worst = max(worst, relative_error(out, reference(x)))
        except threading.BrokenBarrierError:
            pass  # another client failed first
        except BaseException as exc:  # noqa: BLE001 - raised again by run_clients
            with lock:
                failures.append(exc)
            start.abort()
        with lock:
            errors.append(worst)

    threads = [threading.Thread(target=client, args=(f, k)) for k, f in enumerate(infers)]
    for t in threads:
        t.start()
    try:
        start.wait()
    except threading.BrokenBarrierError:
        pass
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    dt = time.perf_counter() - t0
    if failures:
        raise failures[0]
    return clients * requests / dt, max(errors)


def serve(dev: gpumsg.Device, model: Model, batch: int, clients: int, requests: int,
          check: bool = True, seed: int | None = None) -> tuple[float, float]:
    """``clients`` threads, each with its own :class:`Client`, sending ``requests`` requests
    (see :func:`run_clients`); each answer checked against NumPy float64 when ``check``."""
    replicas = [Client(dev, model, batch) for _ in range(clients)]
    try:
        return run_clients([s.infer for s in replicas], batch, model.ws[0].shape[0], requests,
                           model.reference if check else None, seed)
    finally:
        for s in replicas:
            s.free()


def small_sizes(size: str, backend: str) -> bool:
    """``--size small`` or ``full`` as asked; ``auto`` (the default; ``GPUMSG_EXAMPLES_SIZE``
    overrides it): full on a GPU, small on the simulator."""
    if size == "auto":
        size = os.environ.get("GPUMSG_EXAMPLES_SIZE", "auto")
    return size == "small" or (size != "full" and backend != "cuda")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", default="auto", choices=("auto", "cuda", "sim"))
    ap.add_argument("--device", type=int, default=0)
    ap.add_argument("--size", default="auto", choices=("auto", "small", "full"),
                    help="full on a GPU and small on the simulator unless told")
    args = ap.parse_args(argv)
    with gpumsg.open_device(args.device, backend=args.backend) as dev:
        small = small_sizes(args.size, dev.backend)
        width, batch, classes, clients, requests = SMALL if small else FULL
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
