"""BLAS messages, with cuBLAS semantics: matrices are column-major, ``lda`` is the distance in
elements between columns, ``trans`` is 'N' (as stored), 'T' (transposed) or 'C' (conjugate
transposed; the same as 'T' for real types). All run on the device's compute stream and reply
None once the result is in device memory.
"""

from __future__ import annotations

from typing import Any

from ._base import (
    BufRef,
    Message,
    _bool,
    _choice,
    _fail,
    _int,
    _real,
    _ref,
    _require_dtype,
    _scalar,
    _set,
    check_extent,
    message,
)

__all__ = [
    "Sgemm", "Gemm", "GemmStridedBatched", "GemmBatched",
    "Axpy", "Scal", "Dot", "Nrm2", "Asum", "Iamax", "Iamin", "Copy", "Swap", "Rot",
    "Gemv", "Ger", "Symv", "Trsv", "Geam", "Syrk", "Symm", "Trmm", "Trsm", "BlasReplayInfo",
    "INT32_MAX", "GEMM_DTYPES", "BLAS_DTYPES", "COMPUTE_MODES", "trans_code", "check_matrix",
    "check_vector",
]

#: element types of the GEMM family; of the level-1/2/3 routines
GEMM_DTYPES = ("f32", "f64", "f16", "bf16", "c64", "c128")
BLAS_DTYPES = ("f32", "f64", "c64", "c128")
#: "default": strict precision (fp32 accumulation for f16/bf16); "tf32": TF32 tensor cores for
#: f32/c64 inputs
COMPUTE_MODES = ("default", "tf32")

INT32_MAX = (1 << 31) - 1

_TRANS = {"N": "N", "T": "T", "C": "C", "n": "N", "t": "T", "c": "C", False: "N", True: "T"}


def trans_code(msg: object, field: str, value: Any) -> str:
    """Normalize a transpose flag ('N', 'T', 'C', or a bool) to 'N', 'T' or 'C'."""
    try:
        out = _TRANS.get(value)
    except (TypeError, ValueError):  # unhashable, or a writable memoryview
        out = None
    if out is None:
        raise _fail(msg, field, f"must be 'N', 'T' or 'C' (or a bool), got {value!r}")
    return out


def check_matrix(msg: object, field: str, ref: BufRef, rows: int, cols: int, ld: int,
                 ld_field: str, offset: int = 0) -> None:
    """Check that a column-major ``rows`` x ``cols`` matrix with leading dimension ``ld``,
    starting ``offset`` elements into ``ref``, fits inside the buffer."""
    if ld < rows or ld < 1:
        raise _fail(msg, ld_field, f"must be >= max(1, {rows}) for a {rows}x{cols} matrix, "
                    f"got {ld}")
    if ld > INT32_MAX:
        raise _fail(msg, ld_field, f"must fit in 32 bits, got {ld}")
    # the common case accepted at once (Python ints, positive strides: the last element is
    # the highest one, exactly as check_extent computes it); anything else goes through it
    if (type(rows) is int and type(cols) is int and type(ld) is int and type(offset) is int
            and rows > 0 and cols > 0 and 0 <= offset
            and offset + ld * (cols - 1) + rows <= ref.size):
        return
    check_extent(msg, field, ref, offset, ((rows, 1), (cols, ld)),
                 lambda: f"a {rows}x{cols} matrix with {ld_field}={ld}")


@message(buffers=("a", "b", "c"), writes=("c",))
class Sgemm(Message):
    """C = alpha * op(A) @ op(B) + beta * C in float32 (``cublasSgemm``), strict fp32 math.

    ``lda``/``ldb``/``ldc`` default to the tight leading dimension of the stored matrix. When
    ``beta`` is 0, C is not read (NaNs in it do not propagate). C must not alias A or B.
    """

    a: BufRef
    b: BufRef
    c: BufRef
    m: int
    n: int
    k: int
    alpha: float = 1.0
    beta: float = 0.0
    transa: str = "N"
    transb: str = "N"
    lda: int | None = None
    ldb: int | None = None
    ldc: int | None = None

    def __post_init__(self) -> None:
        # Written for speed (this runs once per GEMM sent): values that are already in normal
        # form are not stored again.
        a, b, c = self.a, self.b, self.c
        if type(a) is not BufRef:
            a = _ref(self, "a", a)
            _set(self, "a", a)
        if type(b) is not BufRef:
            b = _ref(self, "b", b)
            _set(self, "b", b)
        if type(c) is not BufRef:
            c = _ref(self, "c", c)
            _set(self, "c", c)
        m = _int(self, "m", self.m, hi=INT32_MAX)
        n = _int(self, "n", self.n, hi=INT32_MAX)
        k = _int(self, "k", self.k, hi=INT32_MAX)
        if type(self.alpha) is not float:
            _set(self, "alpha", _real(self, "alpha", self.alpha))
        elif self.alpha != self.alpha:
            _real(self, "alpha", self.alpha)
        if type(self.beta) is not float:
            _set(self, "beta", _real(self, "beta", self.beta))
        elif self.beta != self.beta:
            _real(self, "beta", self.beta)
        ta, tb = self.transa, self.transb
        if ta != "N":
            ta = trans_code(self, "transa", ta)
            _set(self, "transa", ta)
        if tb != "N":
            tb = trans_code(self, "transb", tb)
            _set(self, "transb", tb)
        if a.dtype != "f32" or b.dtype != "f32" or c.dtype != "f32":
            for name, ref in (("a", a), ("b", b), ("c", c)):
                _require_dtype(self, name, ref, ("f32",))
        a_rows, a_cols = (m, k) if ta == "N" else (k, m)
        b_rows, b_cols = (k, n) if tb == "N" else (n, k)
        lda, ldb, ldc = self.lda, self.ldb, self.ldc
        if lda is None:
            lda = a_rows if a_rows > 1 else 1
            _set(self, "lda", lda)
        else:
            lda = _int(self, "lda", lda)
        if ldb is None:
            ldb = b_rows if b_rows > 1 else 1
            _set(self, "ldb", ldb)
        else:
            ldb = _int(self, "ldb", ldb)
        if ldc is None:
            ldc = m if m > 1 else 1
            _set(self, "ldc", ldc)
        else:
            ldc = _int(self, "ldc", ldc)
        check_matrix(self, "a", a, a_rows, a_cols, lda, "lda")
        check_matrix(self, "b", b, b_rows, b_cols, ldb, "ldb")
        check_matrix(self, "c", c, m, n, ldc, "ldc")
        for name, ref in (("A", a), ("B", b)):
            if ref.id == c.id and ref.owner == c.owner:
                raise _fail(self, "c", f"C must not alias {name} ({c.describe()})")


# ---------------------------------------------------------------------------------------------
# shared validation


def _buffers(msg: Any, fields: tuple[str, ...], allowed: tuple[str, ...]) -> str:
    """Coerce each buffer field to a BufRef; all must share one dtype from ``allowed``.
    Returns that dtype."""
    dtype = None
    for name in fields:
        value = getattr(msg, name)
        ref = value if type(value) is BufRef else _ref(msg, name, value)
        if ref is not value:
            _set(msg, name, ref)
        _require_dtype(msg, name, ref, allowed)
        if dtype is None:
            dtype = ref.dtype
        elif ref.dtype != dtype:
            raise _fail(msg, name, f"{ref.describe()} is {ref.dtype} but {fields[0]} is {dtype}; "
                        "the operands must share one dtype")
    return dtype  # type: ignore[return-value]


def _alpha_beta(msg: Any, dtype: str, names: tuple[str, ...] = ("alpha", "beta")) -> None:
    complex_ok = dtype in ("c64", "c128")
    for name in names:
        value = getattr(msg, name)
        out = _scalar(msg, name, value) if complex_ok else _real(msg, name, value)
        if out is not value:
            _set(msg, name, out)


def _dims(msg: Any, *names: str) -> None:
    for name in names:
        _int(msg, name, getattr(msg, name), hi=INT32_MAX)


def _ld(msg: Any, name: str, rows: int) -> int:
    ld = getattr(msg, name)
    if ld is None:
        ld = max(1, rows)
        _set(msg, name, ld)
    return _int(msg, name, ld)


def _trans(msg: Any, *names: str) -> None:
    for name in names:
        _set(msg, name, trans_code(msg, name, getattr(msg, name)))


def _compute(msg: Any, dtype: str) -> None:
    _choice(msg, "compute", msg.compute, COMPUTE_MODES)
    if msg.compute == "tf32" and dtype not in ("f32", "c64"):
        raise _fail(msg, "compute", f"'tf32' applies to f32 and c64 operands, not {dtype}")


def _no_alias(msg: Any, out: str, *inputs: str) -> None:
    o = getattr(msg, out)
    for name in inputs:
        r = getattr(msg, name)
        if r is not None and r.id == o.id and r.owner == o.owner:
            raise _fail(msg, out, f"{out} must not alias {name} ({o.describe()})")


def check_vector(msg: object, field: str, ref: BufRef, n: int, inc: int, inc_field: str,
                 offset: int = 0) -> None:
    """Check that ``n`` elements at stride ``inc`` fit inside ``ref``."""
    if inc < 1:
        raise _fail(msg, inc_field, f"must be >= 1, got {inc}")
    if inc > INT32_MAX:  # cuBLAS takes a 32-bit int
        raise _fail(msg, inc_field, f"must be <= {INT32_MAX}, got {inc}")
    if (type(n) is int and type(inc) is int and type(offset) is int and n > 0 and 0 <= offset
            and offset + (n - 1) * inc < ref.size):  # the common case, as in check_matrix
        return
    check_extent(msg, field, ref, offset, ((n, inc),), lambda: f"{n} elements at stride {inc}")


def _vector_n(msg: Any, ref: BufRef, inc: int) -> int:
    """``n`` of a level-1 message: given, or every element of x at stride inc."""
    n = msg.n
    if n is None:
        n = (ref.size - 1) // inc + 1 if ref.size else 0
        _set(msg, "n", n)
    return _int(msg, "n", n, hi=INT32_MAX)


def _uplo(msg: Any, name: str = "uplo") -> None:
    value = getattr(msg, name)
    norm = {"U": "U", "L": "L", "u": "U", "l": "L", "upper": "U", "lower": "L"}.get(
        value if isinstance(value, str) else "")
    if norm is None:
        raise _fail(msg, name, f"must be 'U' or 'L', got {value!r}")
    _set(msg, name, norm)


def _side(msg: Any) -> None:
    norm = {"L": "L", "R": "R", "l": "L", "r": "R", "left": "L", "right": "R"}.get(
        msg.side if isinstance(msg.side, str) else "")
    if norm is None:
        raise _fail(msg, "side", f"must be 'L' or 'R', got {msg.side!r}")
    _set(msg, "side", norm)


def _diag(msg: Any) -> None:
    norm = {"N": "N", "U": "U", "n": "N", "u": "U", False: "N", True: "U"}.get(
        msg.diag if isinstance(msg.diag, (str, bool)) else "")
    if norm is None:
        raise _fail(msg, "diag", f"must be 'N' (non-unit) or 'U' (unit), got {msg.diag!r}")
    _set(msg, "diag", norm)


def _gemm_operands(msg: Any, a: BufRef, b: BufRef, c: BufRef,
                   offsets: tuple[int, int, int] = (0, 0, 0)) -> None:
    m, n, k, ta, tb = msg.m, msg.n, msg.k, msg.transa, msg.transb
    a_rows, a_cols = (m, k) if ta == "N" else (k, m)
    b_rows, b_cols = (k, n) if tb == "N" else (n, k)
    lda, ldb, ldc = _ld(msg, "lda", a_rows), _ld(msg, "ldb", b_rows), _ld(msg, "ldc", m)
    check_matrix(msg, "a", a, a_rows, a_cols, lda, "lda", offsets[0])
    check_matrix(msg, "b", b, b_rows, b_cols, ldb, "ldb", offsets[1])
    check_matrix(msg, "c", c, m, n, ldc, "ldc", offsets[2])


# ---------------------------------------------------------------------------------------------
# GEMM family


@message(buffers=("a", "b", "c"), writes=("c",))
class Gemm(Message):
    """C = alpha op(A) op(B) + beta C for f32, f64, f16, bf16, c64, c128 (``cublasLtMatmul``,
    falling back to ``cublasGemmEx``). f16/bf16 accumulate in fp32; ``compute="tf32"`` lets f32
    and c64 use TF32 tensor cores. C must not alias A or B; with beta 0, C is not read."""

    a: BufRef
    b: BufRef
    c: BufRef
    m: int
    n: int
    k: int
    alpha: Any = 1.0
    beta: Any = 0.0
    transa: str = "N"
    transb: str = "N"
    lda: int | None = None
    ldb: int | None = None
    ldc: int | None = None
    compute: str = "default"

    def __post_init__(self) -> None:
        dtype = _buffers(self, ("a", "b", "c"), GEMM_DTYPES)
        _dims(self, "m", "n", "k")
        _alpha_beta(self, dtype)
        _trans(self, "transa", "transb")
        _compute(self, dtype)
        _gemm_operands(self, self.a, self.b, self.c)
        _no_alias(self, "c", "a", "b")


@message(buffers=("a", "b", "c"), writes=("c",))
class GemmStridedBatched(Message):
    """``batch`` GEMMs: matrix i of A starts ``stride_a * i`` elements into ``a`` (likewise B and
    C). A stride of 0 reuses one matrix for every product (``cublasGemmStridedBatchedEx``)."""

    a: BufRef
    b: BufRef
    c: BufRef
    m: int
    n: int
    k: int
    batch: int
    stride_a: int
    stride_b: int
    stride_c: int
    alpha: Any = 1.0
    beta: Any = 0.0
    transa: str = "N"
    transb: str = "N"
    lda: int | None = None
    ldb: int | None = None
    ldc: int | None = None
    compute: str = "default"

    def __post_init__(self) -> None:
        dtype = _buffers(self, ("a", "b", "c"), GEMM_DTYPES)
        _dims(self, "m", "n", "k", "batch")
        for name in ("stride_a", "stride_b", "stride_c"):
            _int(self, name, getattr(self, name))
        _alpha_beta(self, dtype)
        _trans(self, "transa", "transb")
        _compute(self, dtype)
        last = max(self.batch - 1, 0)
        _gemm_operands(self, self.a, self.b, self.c,
                       (self.stride_a * last, self.stride_b * last, self.stride_c * last))
        if self.batch > 1 and self.stride_c < self.ldc * max(self.n - 1, 0) + self.m:
            raise _fail(self, "stride_c", f"the {self.batch} C matrices overlap: stride_c must be "
                        f">= ldc*(n-1)+m = {self.ldc * max(self.n - 1, 0) + self.m}")
        _no_alias(self, "c", "a", "b")


@message(buffers=("a", "b", "c"), writes=("c",))
class GemmBatched(Message):
    """One GEMM per triple (a[i], b[i], c[i]) of separate buffers (``cublasGemmBatchedEx``); the
    device builds the pointer arrays in device memory."""

    a: tuple
    b: tuple
    c: tuple
    m: int
    n: int
    k: int
    alpha: Any = 1.0
    beta: Any = 0.0
    transa: str = "N"
    transb: str = "N"
    lda: int | None = None
    ldb: int | None = None
    ldc: int | None = None
    compute: str = "default"

    def __post_init__(self) -> None:
        lists = {}
        for name in ("a", "b", "c"):
            value = getattr(self, name)
            if not isinstance(value, (tuple, list)) or not value:
                raise _fail(self, name, "expected a non-empty sequence of buffers")
            lists[name] = tuple(v if type(v) is BufRef else _ref(self, name, v) for v in value)
            _set(self, name, lists[name])
        if not len(lists["a"]) == len(lists["b"]) == len(lists["c"]):
            raise _fail(self, "c", f"a, b and c must have the same length, got "
                        f"{len(lists['a'])}, {len(lists['b'])}, {len(lists['c'])}")
        dtype = lists["a"][0].dtype
        for name, refs in lists.items():
            for ref in refs:
                _require_dtype(self, name, ref, GEMM_DTYPES)
                if ref.dtype != dtype:
                    raise _fail(self, name, f"{ref.describe()} is {ref.dtype}, a[0] is {dtype}")
        _dims(self, "m", "n", "k")
        _alpha_beta(self, dtype)
        _trans(self, "transa", "transb")
        _compute(self, dtype)
        outs = set()
        for a, b, c in zip(lists["a"], lists["b"], lists["c"]):
            _gemm_operands(self, a, b, c)
            if c.id in outs:
                raise _fail(self, "c", f"{c.describe()} appears twice among the outputs")
            outs.add(c.id)
        ins = {r.id for r in lists["a"] + lists["b"]}
        if outs & ins:
            raise _fail(self, "c", "an output buffer is also an input")

    @property
    def batch(self) -> int:
        return len(self.a)


# ---------------------------------------------------------------------------------------------
# level 1: vectors of n elements at stride incx/incy; n=None means all of x


def _level1(msg: Any, fields: tuple[str, ...], allowed: tuple[str, ...] = BLAS_DTYPES) -> str:
    dtype = _buffers(msg, fields, allowed)
    _int(msg, "incx", msg.incx, lo=1)
    if "y" in fields:
        _int(msg, "incy", msg.incy, lo=1)
    n = _vector_n(msg, msg.x, msg.incx)
    check_vector(msg, "x", msg.x, n, msg.incx, "incx")
    if "y" in fields:
        check_vector(msg, "y", msg.y, n, msg.incy, "incy")
    return dtype


@message(buffers=("x", "y"), writes=("y",))
class Axpy(Message):
    """y = alpha x + y."""

    x: BufRef
    y: BufRef
    alpha: Any = 1.0
    n: int | None = None
    incx: int = 1
    incy: int = 1

    def __post_init__(self) -> None:
        _alpha_beta(self, _level1(self, ("x", "y")), ("alpha",))
        _no_alias(self, "y", "x")


@message(buffers=("x",), writes=("x",))
class Scal(Message):
    """x = alpha x."""

    x: BufRef
    alpha: Any
    n: int | None = None
    incx: int = 1

    def __post_init__(self) -> None:
        _alpha_beta(self, _level1(self, ("x",)), ("alpha",))


@message(buffers=("x", "y"))
class Dot(Message):
    """Replies with sum(x * y) as a Python scalar; for complex vectors ``conjugate=True`` gives
    sum(conj(x) * y) (dotc), else sum(x * y) (dotu)."""

    x: BufRef
    y: BufRef
    n: int | None = None
    incx: int = 1
    incy: int = 1
    conjugate: bool = False

    def __post_init__(self) -> None:
        _level1(self, ("x", "y"))
        _bool(self, "conjugate", self.conjugate)


@message(buffers=("x",))
class _VectorReduction(Message):
    """A level-1 reduction of one strided vector: the fields and checks Nrm2, Asum, Iamax
    and Iamin share."""

    x: BufRef
    n: int | None = None
    incx: int = 1

    def __post_init__(self) -> None:
        _level1(self, ("x",))


@message(buffers=("x",))
class Nrm2(_VectorReduction):
    """Replies with the Euclidean norm of x (a float)."""


@message(buffers=("x",))
class Asum(_VectorReduction):
    """Replies with sum(|re x| + |im x|) (a float)."""


@message(buffers=("x",))
class Iamax(_VectorReduction):
    """Replies with the **0-based** index (of the n strided elements) of the first element of
    largest |re| + |im| (cuBLAS itself counts from 1)."""


@message(buffers=("x",))
class Iamin(_VectorReduction):
    """Replies with the **0-based** index of the first element of smallest |re| + |im|."""


@message(buffers=("x", "y"), writes=("y",))
class _VectorPair(Message):
    """Two strided vectors of one length that must not overlap: the fields and checks Copy and
    Swap share."""

    x: BufRef
    y: BufRef
    n: int | None = None
    incx: int = 1
    incy: int = 1

    def __post_init__(self) -> None:
        _level1(self, ("x", "y"))
        _no_alias(self, "y", "x")


@message(buffers=("x", "y"), writes=("y",))
class Copy(_VectorPair):
    """y = x (strided)."""


@message(buffers=("x", "y"), writes=("x", "y"))
class Swap(_VectorPair):
    """Exchange x and y."""


@message(buffers=("x", "y"), writes=("x", "y"))
class Rot(Message):
    """Plane rotation: x, y = c x + s y, -conj(s) x + c y (``c`` real; ``s`` complex for
    complex vectors)."""

    x: BufRef
    y: BufRef
    c: float
    s: Any
    n: int | None = None
    incx: int = 1
    incy: int = 1

    def __post_init__(self) -> None:
        dtype = _level1(self, ("x", "y"))
        _set(self, "c", _real(self, "c", self.c))
        _alpha_beta(self, dtype, ("s",))
        _no_alias(self, "y", "x")


# ---------------------------------------------------------------------------------------------
# level 2


@message(buffers=("a", "x", "y"), writes=("y",))
class Gemv(Message):
    """y = alpha op(A) x + beta y, A m x n."""

    a: BufRef
    x: BufRef
    y: BufRef
    m: int
    n: int
    alpha: Any = 1.0
    beta: Any = 0.0
    trans: str = "N"
    lda: int | None = None
    incx: int = 1
    incy: int = 1

    def __post_init__(self) -> None:
        dtype = _buffers(self, ("a", "x", "y"), BLAS_DTYPES)
        _dims(self, "m", "n")
        _alpha_beta(self, dtype)
        _trans(self, "trans")
        check_matrix(self, "a", self.a, self.m, self.n, _ld(self, "lda", self.m), "lda")
        xn, yn = (self.n, self.m) if self.trans == "N" else (self.m, self.n)
        check_vector(self, "x", self.x, xn, _int(self, "incx", self.incx, 1), "incx")
        check_vector(self, "y", self.y, yn, _int(self, "incy", self.incy, 1), "incy")
        _no_alias(self, "y", "a", "x")


@message(buffers=("x", "y", "a"), writes=("a",))
class Ger(Message):
    """A = alpha x y^T + A (``conjugate=True``: y^H, complex only), A m x n."""

    x: BufRef
    y: BufRef
    a: BufRef
    m: int
    n: int
    alpha: Any = 1.0
    incx: int = 1
    incy: int = 1
    lda: int | None = None
    conjugate: bool = False

    def __post_init__(self) -> None:
        dtype = _buffers(self, ("x", "y", "a"), BLAS_DTYPES)
        _dims(self, "m", "n")
        _alpha_beta(self, dtype, ("alpha",))
        _bool(self, "conjugate", self.conjugate)
        check_vector(self, "x", self.x, self.m, _int(self, "incx", self.incx, 1), "incx")
        check_vector(self, "y", self.y, self.n, _int(self, "incy", self.incy, 1), "incy")
        check_matrix(self, "a", self.a, self.m, self.n, _ld(self, "lda", self.m), "lda")
        _no_alias(self, "a", "x", "y")


@message(buffers=("a", "x", "y"), writes=("y",))
class Symv(Message):
    """y = alpha A x + beta y for symmetric A (n x n) stored in its ``uplo`` triangle."""

    a: BufRef
    x: BufRef
    y: BufRef
    n: int
    alpha: Any = 1.0
    beta: Any = 0.0
    uplo: str = "L"
    lda: int | None = None
    incx: int = 1
    incy: int = 1

    def __post_init__(self) -> None:
        dtype = _buffers(self, ("a", "x", "y"), BLAS_DTYPES)
        _dims(self, "n")
        _alpha_beta(self, dtype)
        _uplo(self)
        check_matrix(self, "a", self.a, self.n, self.n, _ld(self, "lda", self.n), "lda")
        check_vector(self, "x", self.x, self.n, _int(self, "incx", self.incx, 1), "incx")
        check_vector(self, "y", self.y, self.n, _int(self, "incy", self.incy, 1), "incy")
        _no_alias(self, "y", "a", "x")


@message(buffers=("a", "x"), writes=("x",))
class Trsv(Message):
    """Solve op(A) z = x for z, in place in x; A n x n triangular (``uplo``), unit diagonal if
    ``diag='U'``."""

    a: BufRef
    x: BufRef
    n: int
    uplo: str = "L"
    trans: str = "N"
    diag: str = "N"
    lda: int | None = None
    incx: int = 1

    def __post_init__(self) -> None:
        _buffers(self, ("a", "x"), BLAS_DTYPES)
        _dims(self, "n")
        _uplo(self)
        _trans(self, "trans")
        _diag(self)
        check_matrix(self, "a", self.a, self.n, self.n, _ld(self, "lda", self.n), "lda")
        check_vector(self, "x", self.x, self.n, _int(self, "incx", self.incx, 1), "incx")
        _no_alias(self, "x", "a")


# ---------------------------------------------------------------------------------------------
# level 3


@message(buffers=("a", "b", "c"), writes=("c",))
class Geam(Message):
    """C = alpha op(A) + beta op(B), C m x n. C may be A (with transa 'N') or B (transb 'N')."""

    a: BufRef
    b: BufRef
    c: BufRef
    m: int
    n: int
    alpha: Any = 1.0
    beta: Any = 0.0
    transa: str = "N"
    transb: str = "N"
    lda: int | None = None
    ldb: int | None = None
    ldc: int | None = None

    def __post_init__(self) -> None:
        dtype = _buffers(self, ("a", "b", "c"), BLAS_DTYPES)
        _dims(self, "m", "n")
        _alpha_beta(self, dtype)
        _trans(self, "transa", "transb")
        ar, ac = (self.m, self.n) if self.transa == "N" else (self.n, self.m)
        br, bc = (self.m, self.n) if self.transb == "N" else (self.n, self.m)
        check_matrix(self, "a", self.a, ar, ac, _ld(self, "lda", ar), "lda")
        check_matrix(self, "b", self.b, br, bc, _ld(self, "ldb", br), "ldb")
        check_matrix(self, "c", self.c, self.m, self.n, _ld(self, "ldc", self.m), "ldc")
        for name, t in (("a", self.transa), ("b", self.transb)):
            ref = getattr(self, name)
            if ref.id == self.c.id and ref.owner == self.c.owner and t != "N":
                raise _fail(self, "c", f"C may alias {name.upper()} only if it is not transposed")


@message(buffers=("a", "c"), writes=("c",))
class Syrk(Message):
    """C = alpha op(A) op(A)^T + beta C, C n x n symmetric: only its ``uplo`` triangle is
    written; op(A) is n x k."""

    a: BufRef
    c: BufRef
    n: int
    k: int
    alpha: Any = 1.0
    beta: Any = 0.0
    uplo: str = "L"
    trans: str = "N"
    lda: int | None = None
    ldc: int | None = None

    def __post_init__(self) -> None:
        dtype = _buffers(self, ("a", "c"), BLAS_DTYPES)
        _dims(self, "n", "k")
        _alpha_beta(self, dtype)
        _uplo(self)
        _trans(self, "trans")
        if self.trans == "C":
            raise _fail(self, "trans", "syrk takes 'N' or 'T'")
        ar, ac = (self.n, self.k) if self.trans == "N" else (self.k, self.n)
        check_matrix(self, "a", self.a, ar, ac, _ld(self, "lda", ar), "lda")
        check_matrix(self, "c", self.c, self.n, self.n, _ld(self, "ldc", self.n), "ldc")
        _no_alias(self, "c", "a")


@message(buffers=("a", "b", "c"), writes=("c",))
class Symm(Message):
    """C = alpha A B + beta C (``side='L'``) or alpha B A + beta C (``'R'``), A symmetric in its
    ``uplo`` triangle, B and C m x n."""

    a: BufRef
    b: BufRef
    c: BufRef
    m: int
    n: int
    alpha: Any = 1.0
    beta: Any = 0.0
    side: str = "L"
    uplo: str = "L"
    lda: int | None = None
    ldb: int | None = None
    ldc: int | None = None

    def __post_init__(self) -> None:
        dtype = _buffers(self, ("a", "b", "c"), BLAS_DTYPES)
        _dims(self, "m", "n")
        _alpha_beta(self, dtype)
        _side(self)
        _uplo(self)
        ka = self.m if self.side == "L" else self.n
        check_matrix(self, "a", self.a, ka, ka, _ld(self, "lda", ka), "lda")
        check_matrix(self, "b", self.b, self.m, self.n, _ld(self, "ldb", self.m), "ldb")
        check_matrix(self, "c", self.c, self.m, self.n, _ld(self, "ldc", self.m), "ldc")
        _no_alias(self, "c", "a", "b")


@message(buffers=("a", "b", "c"), writes=("c",))
class Trmm(Message):
    """C = alpha op(A) B (``side='L'``) or alpha B op(A) (``'R'``), A triangular; B, C m x n
    (cuBLAS's out-of-place form; C may be B)."""

    a: BufRef
    b: BufRef
    c: BufRef
    m: int
    n: int
    alpha: Any = 1.0
    side: str = "L"
    uplo: str = "L"
    trans: str = "N"
    diag: str = "N"
    lda: int | None = None
    ldb: int | None = None
    ldc: int | None = None

    def __post_init__(self) -> None:
        dtype = _buffers(self, ("a", "b", "c"), BLAS_DTYPES)
        _dims(self, "m", "n")
        _alpha_beta(self, dtype, ("alpha",))
        _side(self)
        _uplo(self)
        _trans(self, "trans")
        _diag(self)
        ka = self.m if self.side == "L" else self.n
        check_matrix(self, "a", self.a, ka, ka, _ld(self, "lda", ka), "lda")
        check_matrix(self, "b", self.b, self.m, self.n, _ld(self, "ldb", self.m), "ldb")
        check_matrix(self, "c", self.c, self.m, self.n, _ld(self, "ldc", self.m), "ldc")
        _no_alias(self, "c", "a")


@message(buffers=("a", "b"), writes=("b",))
class Trsm(Message):
    """Solve op(A) X = alpha B (``side='L'``) or X op(A) = alpha B (``'R'``) for X, in place in
    B (m x n); A triangular."""

    a: BufRef
    b: BufRef
    m: int
    n: int
    alpha: Any = 1.0
    side: str = "L"
    uplo: str = "L"
    trans: str = "N"
    diag: str = "N"
    lda: int | None = None
    ldb: int | None = None

    def __post_init__(self) -> None:
        dtype = _buffers(self, ("a", "b"), BLAS_DTYPES)
        _dims(self, "m", "n")
        _alpha_beta(self, dtype, ("alpha",))
        _side(self)
        _uplo(self)
        _trans(self, "trans")
        _diag(self)
        ka = self.m if self.side == "L" else self.n
        check_matrix(self, "a", self.a, ka, ka, _ld(self, "lda", ka), "lda")
        check_matrix(self, "b", self.b, self.m, self.n, _ld(self, "ldb", self.m), "ldb")
        _no_alias(self, "b", "a")


@message()
class BlasReplayInfo(Message):
    """Reply with the GEMM replays of the device's cuBLAS and cuBLASLt handles:
    ``{"cublas": {...}, "cublaslt": {...}}``, each ``{"enabled"}`` plus, where enabled,
    ``{"graphs", "captures", "launches", "refused"}`` (see ``backends/cuda/replays.py``). A
    handle not created yet answers ``{"enabled": None}``."""
