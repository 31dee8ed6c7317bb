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

# -- the array layer (gpumsg.array_api): its functions take arrays, axes and Python scalars ------
ARRAY_NAMES = {"x", "x1", "x2", "condition", "indices", "prepend", "append", "from_", "obj"}
ARRAY_LIST_NAMES = {"arrays"}
AXIS_NAMES = {"axis", "axes", "shift", "source", "destination", "s", "k", "n", "num", "n_rows",
              "n_cols", "repeats"}
ARRAY_TUPLE_NAMES = {"shape", "repetitions"}
ARRAY_BOOL_NAMES = {"keepdims", "descending", "stable", "endpoint", "copy", "include_initial",
                    "full_matrices", "upper"}
ARRAY_SCALAR_NAMES = {"fill_value", "min", "max", "start", "stop", "step", "correction", "ord",
                      "rtol", "offset"}

#: arrays of every kind: "a_<dtype>_<shape>", plus a transposed view ("_T"), a strided view
#: ("_s2": every second element), sorted data and valid indices
GOOD_ARRS = ["a_f32_8x8", "a_f64_8", "a_f64_2x8", "a_f32_3x1", "a_i32_8", "a_i64_2x3x4",
             "a_u8_8", "a_bool_8", "a_c64_4x4", "a_f16_8", "a_f32_8x8_T", "a_f64_16_s2",
             "a_sorted_8", "a_idx_8", "a_f32_0", "a_i16_4x4", "a_c128_8"]
BAD_ARRS = ["a_freed", "a_foreign", "a_closed", "np_f32", "f32_8x8_F", "none", "list", "int3",
            "float_half", "str_bad", "object"]
ARR_LISTS = ["l_f32_8x8_x2", "l_f64_8_x3", "l_mixed_8", "l_empty", "l_shapes", "l_bad"]
AXIS_VALUES = ["0", "1", "neg1", "2", "none", "t_01", "t_dup", "64", "huge", "float_half",
               "str_bad", "t_1", "t_empty"]
ARRAY_TUPLE_VALUES = TUPLE_VALUES + ["t_64", "t_2x32", "t_neg1_8"]
ARRAY_SCALAR_VALUES = ["0", "1", "2", "neg1", "0.5", "-2.0", "nan", "inf", "none", "complex",
                       "true", "huge", "str_bad"]
ARRAY_STR_VALUES = ["left", "right", "xy", "ij", "ortho", "forward", "backward", "reduced",
                    "complete", "r", "L", "U", "bogus", "none", "int3"]
ARRAY_TOKENS = sorted(set(GOOD_ARRS + BAD_ARRS + ARR_LISTS + AXIS_VALUES + ARRAY_TUPLE_VALUES
                          + ARRAY_SCALAR_VALUES + ARRAY_STR_VALUES + DTYPE_VALUES
                          + ["dt_i32", "dt_bool", "dt_f16", "dt_u8"]))

# -- the random generator (gpumsg.array_api.random.Generator): sizes, array parameters --------
#: parameters taking an array (or array-like) of values
RANDOM_ARRAY_NAMES = {"out", "x", "p", "pvals", "mean", "cov", "alpha", "colors"}
#: parameters giving how many values to draw (``size``: an int, a shape or None; ``length``;
#: ``n_children``, generators to spawn)
RANDOM_SIZE_NAMES = {"size", "length", "n_children"}
#: what they are drawn from, also when a case draws "anything": no count of 2**31 ("huge"),
#: which fits the simulated device and which its twins take minutes to draw (a hang to the
#: campaign); "t_huge" asks for more than any device has
RANDOM_SIZE_VALUES = ["none", "1", "8", "0", "t_8x8", "t_2x32", "t_0", "t_neg", "t_huge",
                      "neg1", "0.5", "t_float", "str_bad", "a_i64_2x3x4", "dt_f32"]
