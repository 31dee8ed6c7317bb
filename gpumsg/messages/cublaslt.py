"""cuBLASLt: ``Matmul`` with epilogues, fp8, and the heuristic cache query.

D = epilogue(alpha op(A) op(B) + beta C), column-major like the rest of the BLAS messages.

===================  ==========================================================================
epilogue             effect (X = alpha op(A) op(B) + beta C, m x n)
===================  ==========================================================================
none                 D = X
relu / gelu          D = relu(X) / gelu(X)  (gelu: tanh approximation)
bias                 D = X + bias  (bias: m elements, broadcast over columns)
relu_bias/gelu_bias  D = act(X + bias)
relu_aux             D = relu(X); aux = bit mask of X > 0 (u8, ``aux_ld`` bits per column)
relu_aux_bias        the same with X + bias
gelu_aux             D = gelu(X); aux = X (D's dtype, ``aux_ld`` elements per column)
gelu_aux_bias        the same with X + bias
drelu                D = X * (aux mask)          (aux from relu_aux*)
drelu_bgrad          D = X * (aux mask); bias = row sums of D (m)
dgelu                D = X * gelu'(aux)           (aux from gelu_aux*)
dgelu_bgrad          D = X * gelu'(aux); bias = row sums of D (m)
bgrada               D = X; bias = sum over k of op(A) (m); A not transposed
bgradb               D = X; bias = sum over k of op(B) (n); B transposed
===================  ==========================================================================

The layout rules of bgrada/bgradb are cuBLASLt's (the other layouts have no kernel, seen on an
H100 with cuBLAS 13.1); the message refuses them up front.

fp8 (e4m3/e5m2 A and B, not both e5m2): A must be transposed and B not ("TN"), m, n, k and
the leading dimensions multiples of 16, compute capability 8.9 or newer; D is bf16, f16 or f32;
optional per-tensor scales are f32 device scalars: D = scale_a scale_b alpha op(A) op(B) +
beta scale_c C. (An fp8 D was refused by cuBLASLt 13.1 on an H100 with
CUBLAS_STATUS_INVALID_VALUE at the matmul, C given or not, so it is not offered.)
"""

from __future__ import annotations

from typing import Any

from ._base import (
    BufRef,
    Message,
    _choice,
    _fail,
    _int,
    _ref,
    _require_dtype,
    _set,
    check_extent,
    message,
)
from .cublas import INT32_MAX, _alpha_beta, _dims, _ld, _trans, check_matrix

__all__ = ["Matmul", "BlasLtCacheInfo", "EPILOGUES", "FP8"]

#: epilogue name -> cublasLtEpilogue_t
EPILOGUES = {
    "none": 1, "relu": 2, "relu_aux": 130, "bias": 4, "relu_bias": 6, "relu_aux_bias": 134,
    "drelu": 136, "drelu_bgrad": 152, "gelu": 32, "gelu_aux": 160, "gelu_bias": 36,
    "gelu_aux_bias": 164, "dgelu": 192, "dgelu_bgrad": 208, "bgrada": 256, "bgradb": 512,
}
FP8 = ("e4m3", "e5m2")
_BIAS_IN = ("bias", "relu_bias", "gelu_bias", "relu_aux_bias", "gelu_aux_bias")
_BIAS_OUT = ("drelu_bgrad", "dgelu_bgrad", "bgrada", "bgradb")
_AUX_OUT = ("relu_aux", "relu_aux_bias", "gelu_aux", "gelu_aux_bias")
_AUX_IN = ("drelu", "drelu_bgrad", "dgelu", "dgelu_bgrad")
_MASK = ("relu_aux", "relu_aux_bias", "drelu", "drelu_bgrad")


def _opt(msg: Any, name: str) -> BufRef | None:
    value = getattr(msg, name)
    if value is None or type(value) is BufRef:
        return value
    ref = _ref(msg, name, value)
    _set(msg, name, ref)
    return ref


@message(buffers=("a", "b", "d", "c", "bias", "aux", "scale_a", "scale_b", "scale_c", "scale_d"),
         writes=("d",))
class Matmul(Message):
    """One ``cublasLtMatmul`` (see the module docstring for the epilogues and fp8 rules).

    ``c`` is optional (then beta must be 0); ``bias`` is an input for the bias epilogues and an
    output for the gradient ones; ``aux`` is an output for the ``*_aux`` epilogues and an input
    for ``drelu*``/``dgelu*``. ``compute="tf32"`` lets f32 use TF32 tensor cores.
    """

    a: BufRef
    b: BufRef
    d: BufRef
    m: int
    n: int
    k: int
    c: BufRef | None = None
    alpha: float = 1.0
    beta: float = 0.0
    transa: str = "N"
    transb: str = "N"
    lda: int | None = None
    ldb: int | None = None
    ldc: int | None = None
    ldd: int | None = None
    epilogue: str = "none"
    bias: BufRef | None = None
    aux: BufRef | None = None
    aux_ld: int | None = None
    compute: str = "default"
    scale_a: BufRef | None = None
    scale_b: BufRef | None = None
    scale_c: BufRef | None = None
    scale_d: BufRef | None = None

    def __post_init__(self) -> None:
        a, b, d = (_opt(self, n) for n in ("a", "b", "d"))
        for name, ref in (("a", a), ("b", b), ("d", d)):
            if ref is None:  # required: only c, bias, aux and the scales are optional
                raise _fail(self, name, "expected a GpuBuffer, its future or a BufRef, got None")
        c, bias, aux = (_opt(self, n) for n in ("c", "bias", "aux"))
        scales = [_opt(self, n) for n in ("scale_a", "scale_b", "scale_c", "scale_d")]
        _dims(self, "m", "n", "k")
        _trans(self, "transa", "transb")
        _choice(self, "epilogue", self.epilogue, tuple(EPILOGUES))
        _choice(self, "compute", self.compute, ("default", "tf32"))
        ep = self.epilogue
        fp8 = a.dtype in FP8
        # -- types
        _require_dtype(self, "a", a, ("f32", "f16", "bf16") + FP8)
        if fp8:
            _require_dtype(self, "b", b, FP8)
            if a.dtype == b.dtype == "e5m2":
                raise _fail(self, "b", "A and B cannot both be e5m2")
            _require_dtype(self, "d", d, ("bf16", "f16", "f32"))
            if self.transa != "T" or self.transb != "N":
                raise _fail(self, "transa", "fp8 matmuls need A transposed and B not ('TN')")
            for name in ("m", "n", "k"):
                if getattr(self, name) % 16:
                    raise _fail(self, name, f"fp8 matmuls need multiples of 16, got "
                                f"{getattr(self, name)}")
            if ep != "none" and ep not in _BIAS_IN[:1]:
                raise _fail(self, "epilogue", "fp8 matmuls take the 'none' and 'bias' epilogues")
        else:
            _require_dtype(self, "b", b, (a.dtype,))
            _require_dtype(self, "d", d, (a.dtype,))
            for i, name in enumerate(("scale_a", "scale_b", "scale_c", "scale_d")):
                if scales[i] is not None:
                    raise _fail(self, name, "per-tensor scales apply to fp8 matmuls only")
        if self.compute == "tf32" and a.dtype != "f32":
            raise _fail(self, "compute", "'tf32' applies to f32 operands")
        c_type = d.dtype
        if c is not None:
            _require_dtype(self, "c", c, (d.dtype,))
        for i, name in enumerate(("scale_a", "scale_b", "scale_c", "scale_d")):
            if scales[i] is not None:
                _require_dtype(self, name, scales[i], ("f32",))
        if scales[3] is not None:
            raise _fail(self, "scale_d", "scale_d applies to an fp8 D, which is not offered")
        # -- scalars and shapes
        _alpha_beta(self, "f32")
        if c is None and self.beta != 0:
            raise _fail(self, "beta", "beta must be 0 when there is no C")
        a_rows, a_cols = (self.m, self.k) if self.transa == "N" else (self.k, self.m)
        b_rows, b_cols = (self.k, self.n) if self.transb == "N" else (self.n, self.k)
        check_matrix(self, "a", a, a_rows, a_cols, _ld(self, "lda", a_rows), "lda")
        check_matrix(self, "b", b, b_rows, b_cols, _ld(self, "ldb", b_rows), "ldb")
        check_matrix(self, "d", d, self.m, self.n, _ld(self, "ldd", self.m), "ldd")
        if c is not None:
            check_matrix(self, "c", c, self.m, self.n, _ld(self, "ldc", self.m), "ldc")
        elif self.ldc is None:
            _set(self, "ldc", self.ldd)
        else:  # no C, but its layout still goes to cuBLASLt: a column of D's rows at least
            _set(self, "ldc", _int(self, "ldc", self.ldc, max(1, self.m), INT32_MAX))
        if fp8:
            for name in ("lda", "ldb", "ldd"):
                if getattr(self, name) % 16:
                    raise _fail(self, name, "fp8 matmuls need leading dimensions that are "
                                "multiples of 16")
        for name, ref in (("a", a), ("b", b), ("c", c), ("bias", bias), ("aux", aux)):
            if ref is not None and ref.id == d.id and ref.owner == d.owner:
                raise _fail(self, "d", f"D must not alias {name}")
        if self.aux_ld is not None:
            _set(self, "aux_ld", _int(self, "aux_ld", self.aux_ld, 1, INT32_MAX))
        # -- epilogue operands
        if ep == "bgrada" and self.transa != "N":
            raise _fail(self, "transa", "bgrada needs A not transposed (cuBLASLt has no kernel "
                        "for the other layout)")
        if ep == "bgradb" and self.transb == "N":
            raise _fail(self, "transb", "bgradb needs B transposed (cuBLASLt has no kernel for "
                        "the other layout)")
        if ep in _BIAS_IN or ep in _BIAS_OUT:
            if bias is None:
                raise _fail(self, "bias", f"epilogue {ep!r} needs a bias vector")
            length = self.n if ep == "bgradb" else self.m
            bias_type = c_type if ep in _BIAS_IN else d.dtype
            _require_dtype(self, "bias", bias, (bias_type,))
            check_extent(self, "bias", bias, 0, ((length, 1),),
                         f"the {length} bias elements the epilogue uses")
        elif bias is not None:
            raise _fail(self, "bias", f"epilogue {ep!r} takes no bias")
        if ep in _AUX_OUT or ep in _AUX_IN:
            if aux is None:
                raise _fail(self, "aux", f"epilogue {ep!r} needs an aux buffer")
            if ep in _MASK:
                _require_dtype(self, "aux", aux, ("u8",))
                ld = self.aux_ld if self.aux_ld is not None else -(-self.m // 128) * 128
                if ld % 128 or ld < self.m:
                    raise _fail(self, "aux_ld", f"a ReLU bit mask needs aux_ld (in bits) >= m "
                                f"and a multiple of 128, got {ld}")
                need = ld // 8 * self.n
            else:
                _require_dtype(self, "aux", aux, (d.dtype,))
                ld = self.aux_ld if self.aux_ld is not None else -(-self.m // 8) * 8
                if ld % 8 or ld < self.m:
                    raise _fail(self, "aux_ld", f"a GELU aux matrix needs aux_ld >= m and a "
                                f"multiple of 8, got {ld}")
                need = ld * self.n
            if ld > INT32_MAX:
                raise _fail(self, "aux_ld", "too large")
            _set(self, "aux_ld", ld)
            check_extent(self, "aux", aux, 0, ((need, 1),),
                         f"the {need} aux elements the epilogue uses")
        elif aux is not None:
            raise _fail(self, "aux", f"epilogue {ep!r} takes no aux buffer")

    def written(self) -> list[BufRef]:
        out = [self.d]
        if self.epilogue in _BIAS_OUT:
            out.append(self.bias)  # type: ignore[arg-type]
        if self.epilogue in _AUX_OUT:
            out.append(self.aux)  # type: ignore[arg-type]
        return out

    @property
    def c_dtype(self) -> str:
        return self.d.dtype


@message()
class BlasLtCacheInfo(Message):
    """Reply with the cuBLASLt plan cache's ``{"hits", "misses", "size", "capacity"}``."""
