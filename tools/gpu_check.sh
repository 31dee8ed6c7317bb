#!/usr/bin/env bash
# The GPU check, in one call on the GPU machine: the whole `-m gpu` suite (the test folders that
# hold many handles run in processes of their own), then the benchmarks named as arguments.
# Carry .whl for the optional extras (the cuDNN frontend). Logs go to $OUT (default /tmp/out):
# suite.txt, bench.txt and results.tar.gz (the JSON and Markdown files the benchmarks wrote).
#   tools/gpu_check.sh headline                      the run RESULTS.md is made from (~5 min)
#   tools/gpu_check.sh bench_overhead bench_fft:--headline ...   (name:args, args split on commas)
# SUITE=0 skips the test suite, BENCH_TIMEOUT (s, default 240; 600 for headline) bounds each
# benchmark, DEADLINE (s) the whole script: benchmarks that would start later are skipped;
# SUITE_TIMEOUT (s) bounds the main test run.
# Back here: `mkdir -p benchmarks/out && tar xzf results.tar.gz -C benchmarks/out`, then
# `make bench-report` (RESULTS.md and benchmarks/plots/).
set -u
T0=$(date +%s)
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0
# wheels the GPU machine lacks (the cuDNN frontend), carried in .whl/ (git-ignored; see README)
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD
fi
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
own_process="tests/libs/cusolver"
[ "${SUITE:-1}" = 1 ] && {
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  timeout "${SUITE_TIMEOUT:-3000}" python3 -m pytest -q -m gpu -p no:cacheprovider \
    $(for f in $own_process; do echo --ignore=$f; done) 2>&1 | tail -40
  for f in $own_process; do
    [ -e "$f" ] && python3 -m pytest -q -m gpu -p no:cacheprovider "$f" 2>&1 | tail -15
  done
} > "$OUT/suite.txt" 2>&1
grep -E "passed|failed|error" "$OUT/suite.txt" | tail -5
mkdir -p "$OUT/res"
for b in "$@"; do
  name=${b%%:*}; args=""
  [ "$name" != "$b" ] && args=${b#*:}
  echo "=== $b" >> "$OUT/bench.txt"
  start=$(date +%s)
  left=$(( ${DEADLINE:-100000} - (start - T0) ))  # DEADLINE: seconds for the whole script
  [ "$left" -lt 20 ] && { echo "=== $b skipped: past DEADLINE" >> "$OUT/bench.txt"; continue; }
  if [ "$name" = headline ]; then
    limit=${BENCH_TIMEOUT:-600}; [ "$left" -lt "$limit" ] && limit=$left
    timeout "$limit" python3 benchmarks/run_all.py --headline --out "$OUT/res" >> "$OUT/bench.txt" 2>&1 \
      || echo "$b exited $?" >> "$OUT/bench.txt"
  else
    limit=${BENCH_TIMEOUT:-240}; [ "$left" -lt "$limit" ] && limit=$left
    GPUMSG_BENCH_OUT="$OUT/res" timeout "$limit" python3 "benchmarks/$name.py" ${args//,/ } \
      >> "$OUT/bench.txt" 2>&1 || echo "$b exited $?" >> "$OUT/bench.txt"
  fi
  echo "=== $b took $(( $(date +%s) - start )) s" >> "$OUT/bench.txt"
done
tar czf "$OUT/results.tar.gz" -C "$OUT/res" . && rm -rf "$OUT/res"
tail -60 "$OUT/bench.txt" 2>/dev/null
