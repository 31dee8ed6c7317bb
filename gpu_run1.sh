#!/bin/bash
# mid-run GPU check of the merged branches (not part of the repository)
set -u
mkdir -p /tmp/site && tar -xJf .carry/ray_slim.tar.xz -C /tmp/site && python3 -m pip install -q --no-index --no-deps --target /tmp/site .carry/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD NCCL_NVLS_ENABLE=0
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
T0=$(date +%s)
run() { # name timeout args...
  local name=$1 t=$2; shift 2
  timeout $t python3 -m pytest -q -p no:cacheprovider --tb=short -rfE "$@" > $OUT/$name.log 2>&1
  echo "== $name rc=$? $(( $(date +%s) - T0 ))s: $(tail -1 $OUT/$name.log)"
}
run service 90 -m gpu tests/service tests/client
run sorting 140 -m gpu tests/array_api/test_sorting.py tests/array_api/test_scan.py tests/array_api/test_indexing.py tests/array_api/test_creation.py
run fusion 100 -m gpu tests/array_api/test_fusion.py tests/array_api/test_reductions.py tests/array_api/test_array.py
run random 60 -m gpu tests/array_api/random/test_random_twins.py tests/array_api/random
run nn 60 -m gpu tests/libs/cudnn/nn
run linalg 60 -m gpu tests/libs/cusolver/test_any_size.py tests/array_api/test_linalg_numpy.py
run sparse 40 -m gpu tests/array_api/sparse tests/libs/cusparse/test_rows_and_solve.py
run ray 40 tests/ray
grep -h "^FAILED\|^ERROR" $OUT/*.log | cut -c1-300 | head -80
