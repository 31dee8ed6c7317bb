#!/bin/bash
# benchmarks of the merged tree (not part of the repository)
set -u
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 GPUMSG_BENCH_OUT=$OUT/bench
mkdir -p $OUT/bench
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
b() { local t=$1; shift; local t0=$(date +%s); timeout $t python3 "$@" > $OUT/bench/$(basename $1 .py).log 2>&1; echo "== $* rc=$? $(( $(date +%s) - t0 ))s"; }
b 60 benchmarks/bench_small_ops.py --out $OUT/bench
b 40 benchmarks/bench_overhead.py --out $OUT/bench
b 100 benchmarks/bench_workloads.py --quick --out $OUT/bench
b 120 benchmarks/bench_arrays.py --out $OUT/bench
b 75 benchmarks/bench_sort.py --out $OUT/bench
b 70 benchmarks/bench_linalg_stacked.py --only inv,solve,eigh,cholesky,big --out $OUT/bench
b 45 benchmarks/bench_random.py --quick --out $OUT/bench
b 40 benchmarks/bench_sparse_arrays.py
ls $OUT/bench
