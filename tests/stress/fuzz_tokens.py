"""The fuzz campaign's arguments: the kind each parameter name takes (an integer, a float, a
shape, a dtype, a string) and the tokens drawn for each kind, good and bad. A token is a short
name (``"f32_8x8_F"``, ``"freed"``, ``"nan"``) that fuzz.py's Materializer turns into an object
per case, so a failing case prints reproducibly.
"""

from __future__ import annotations

# -- argument kinds, by parameter name ---------------------------------------------------------
INT_NAMES = {
    "m", "n", "k", "batch", "lda", "ldb", "ldc", "ldd", "incx", "incy", "stride_a", "stride_b",
    "stride_c", "offset", "nbytes", "count", "groups", "width", "value", "shared", "dst_offset",
    "src_offset", "nrhs", "after", "workspace_limit", "block", "id", "ordinal", "generation",
    "seconds", "axis", "dim", "root", "rank", "nranks", "size", "timeout",
}
FLOAT_NAMES = {"alpha", "beta", "c", "s", "act_coef", "eps", "coef"}
TUPLE_NAMES = {"shape", "x_shape", "w_shape", "grid", "block", "stride", "padding", "dilation",
               "window", "kernel_size", "dims"}
DTYPE_NAMES = {"dtype"}
STR_NAMES = {"trans", "transa", "transb", "uplo", "side", "diag", "layout", "activation",
             "order", "stream", "kind", "compute", "math", "mode", "algo", "pool", "name",
             "source", "op", "reduce", "algorithm", "pooling"}

GOOD_BUFS = ["f32_8x8_F", "f32_8x8_C", "f64_8x8_F", "f16_8x8_C", "c64_8x8_F", "f32_8",
             "f64_8", "i32_8", "f32_2x3x6x6_C", "f32_0", "f32_8_future"]
BAD_BUFS = ["freed", "closed_dev", "foreign", "failed_future", "failed_content", "np_f32",
            "np_f32_8x8", "int3", "none", "str_bad", "bufref_forged"]
BAD_SCALARS = ["neg1", "nan", "inf", "huge", "huge63", "zero", "true", "float_half", "complex",
               "np_int64", "list", "dict", "object", "bytes", "tuple_bad", "lambda"]
INT_VALUES = ["0", "1", "2", "4", "8", "64", "neg1", "huge", "huge63", "nan", "float_half",
              "true", "np_int64", "none", "str_bad"]
FLOAT_VALUES = ["1.0", "0.5", "-2.0", "0.0", "nan", "inf", "neg1", "complex", "none", "str_bad",
                "np_f32"]
TUPLE_VALUES = ["t_8x8", "t_2x3x6x6", "t_1", "t_0", "t_neg", "t_huge", "t_float", "t_empty",
                "t_3", "t_nested", "int3", "none", "str_bad"]
DTYPE_VALUES = ["dt_f32", "dt_f64", "dt_c64", "dt_i8", "dt_bad", "dt_object", "none", "int3"]
STR_VALUES = ["N", "T", "C", "L", "U", "F", "relu", "NCHW", "NHWC", "max", "compute",
              "default", "", "X", "int3", "none", "nan"]
ALL_TOKENS = sorted(set(GOOD_BUFS + BAD_BUFS + BAD_SCALARS + INT_VALUES + FLOAT_VALUES
                        + TUPLE_VALUES + DTYPE_VALUES + STR_VALUES))
