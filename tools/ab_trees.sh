#!/usr/bin/env bash
# A/B of two trees on one GPU machine, in one device call: the tree of an earlier commit
# (base.tar at the repository root, made here with `git archive -o base.tar REV`, git-ignored,
# carried with .whl) beside the working tree, each step run on both, alternating, so that a
# change of host between calls cannot masquerade as an effect.
#   tools/ab_trees.sh STEP...   STEP: rate (tools/gemm_issue_rate.py) or a benchmark's name
#   (bench_blas, bench_overhead, ...), with arguments after a colon, split on commas
#   (bench_small_ops:--cpu). Logs and each tree's results files go to $OUT/<step>_<tree>*
#   (at most 8 files come back: name few steps). STEP_TIMEOUT (s, default 150) bounds each run.
#   REPEAT=n runs the whole list n times (files of round r > 1 end in _r<r>); even rounds run
#   the working tree first: the tree run second in a pair read bench_overhead's eight-thread
#   row lower in 8 of 9 pairs, whichever tree it was (stop 35), so use an even REPEAT there.
set -u
export NCCL_NVLS_ENABLE=0
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
site=""
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl && site=/tmp/site:
fi
NEW=$PWD
BASE=/tmp/ab_base
rm -rf "$BASE" && mkdir -p "$BASE" && tar -xf base.tar -C "$BASE" || exit 1
run() {  # run TREE_DIR LABEL STEP
  local dir=$1 label=$2$SUFFIX step=$3 name=${3%%:*} args="" tmp
  [ "$name" != "$step" ] && args=${step#*:}
  step=${step//[:,]/_}  # the files' names
  tmp=/tmp/ab_$2_$step
  rm -rf "$tmp" && mkdir -p "$tmp"
  if [ "$step" = rate ]; then
    (cd "$dir" && PYTHONPATH=$site$dir timeout "${STEP_TIMEOUT:-150}" python3 \
      tools/gemm_issue_rate.py) > "$OUT/${step}_$label.txt" 2>&1
  else
    (cd "$dir/benchmarks" && OUT=$tmp PYTHONPATH=$site$dir timeout "${STEP_TIMEOUT:-150}" \
      python3 "$name.py" ${args//,/ }) > "$tmp/log.txt" 2>&1
    for f in "$tmp"/*.md; do [ -f "$f" ] && cp "$f" "$OUT/${step}_$label.md"; done
    tail -3 "$tmp/log.txt"
  fi
  echo "$step $label done at $(date +%T)"
}
for r in $(seq 1 "${REPEAT:-1}"); do
  SUFFIX=""; [ "$r" -gt 1 ] && SUFFIX=_r$r
  for step in "$@"; do
    if [ $((r % 2)) -eq 1 ]; then
      run "$BASE" base "$step"
      run "$NEW" new "$step"
    else
      run "$NEW" new "$step"
      run "$BASE" base "$step"
    fi
  done
done
