#!/bin/bash
# the GPU suite in parallel shards, the fuzz and fault campaigns, conformance (not part of the repository)
set -u
mkdir -p /tmp/site && tar -xJf .carry/ray_slim.tar.xz -C /tmp/site && python3 -m pip install -q --no-index --no-deps --target /tmp/site .carry/*.whl >/dev/null 2>&1
mkdir -p /tmp/aat && tar -xzf .carry/array_api_tests.tar.gz -C /tmp/aat
export PYTHONPATH=/tmp/site:$PWD NCCL_NVLS_ENABLE=0
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
T=${T:-520}
P="python3 -m pytest -q -p no:cacheprovider --tb=short -rfE"
shard() { local name=$1; shift; ( timeout $T "$@" > $OUT/$name.log 2>&1; echo "== $name rc=$? $(date +%T): $(tail -1 $OUT/$name.log | cut -c1-200)" >> $OUT/summary.txt ) & }
date +%T > $OUT/summary.txt
shard core $P -m gpu tests/service tests/client tests/memory tests/messages tests/backends tests/supervision tests/multi tests/ray tests/test_*.py
shard stress $P -m gpu tests/stress
shard libs $P -m gpu tests/libs --ignore=tests/libs/cusolver --ignore=tests/libs/cudnn
shard cudnn $P -m gpu tests/libs/cudnn
shard cusolver $P -m gpu tests/libs/cusolver
shard arr1 $P -m gpu tests/array_api --ignore=tests/array_api/random --ignore=tests/array_api/sparse --ignore=tests/array_api/test_sorting.py --ignore=tests/array_api/test_elementwise.py
shard arr2 $P -m gpu tests/array_api/test_sorting.py tests/array_api/random
shard arr3 $P -m gpu tests/array_api/test_elementwise.py tests/array_api/sparse
shard fuzz python3 tools/fuzz_campaign.py --backend cuda --seed 43 --cases 6000 --chunk 500 --out $OUT/fuzz
shard faults python3 tools/fault_campaign.py --backend cuda --faults 60 --threads 2 --array-threads 2 --out $OUT/faults
shard conformance python3 tools/array_api_conformance.py --suite /tmp/aat/array-api-tests --max-examples 20
wait
cat $OUT/summary.txt
grep -h "^FAILED\|^ERROR" $OUT/*.log | cut -c1-250 | head -60
