#!/usr/bin/env bash
# The whole CTest suite (CI's selection, -LE gpu) under -j2, N times in a row (default 20),
# stopping at the first failure: the flake check of docs/building.md.
#   bash tests/ctest_loop.sh [BUILD_DIR] [N]      (BUILD_DIR default build/ci, as CI builds it)
# Each run's log goes to $LOG_DIR/run-<i>.log (default BUILD_DIR/ctest-loop), one line per run to
# $LOG_DIR/summary.txt; exit 0 when every run passed.
set -u
build=${1:-build/ci}
n=${2:-20}
log=${LOG_DIR:-$build/ctest-loop}
mkdir -p "$log"
log=$(cd "$log" && pwd)
cd "$build" || exit 2
for i in $(seq 1 "$n"); do
  s=$(date +%s)
  ctest -j2 -LE gpu --output-on-failure > "$log/run-$i.log" 2>&1
  rc=$?
  echo "run $i: rc=$rc $(grep -E 'tests passed|tests failed' "$log/run-$i.log") $(( $(date +%s) - s )) s $(date -u +%FT%TZ)" |
    tee -a "$log/summary.txt"
  [ "$rc" -ne 0 ] && { echo "stopped at run $i of $n (log: $log/run-$i.log)" | tee -a "$log/summary.txt"; exit 1; }
done
echo "all $n runs passed" | tee -a "$log/summary.txt"
