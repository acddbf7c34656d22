#!/bin/bash
# The side-by-side run of docs/performance.md ("Many writers", appends applied by Redis as a tail after the
# head): writers.py's Redis process rows for main, then for main with tail_append.patch at 1, 4 and 8 KB of
# inline log (MDSS_INLINE), alternating, two rounds; with an argument, that many ms added to every round trip
# (writers.py --rtt-ms). Run from the repository's root, in its venv:
#   flock -x /tmp/mdss-bench.lock benchmarks/experiments/tail_append_ab.sh [RTT_MS]
set -euo pipefail
rtt=${1:-0}
patched=$(mktemp -d)
git worktree add -q --detach "$patched" HEAD
trap 'git worktree remove --force "$patched"' EXIT
git -C "$patched" apply "$PWD/benchmarks/experiments/tail_append.patch"
for round in 1 2; do
  for variant in main 1024 4096 8192; do
    dir=$PWD; [ "$variant" != main ] && dir=$patched
    echo "== round $round: $variant"
    (cd "$dir" && MDSS_INLINE=${variant/main/1024} PYTHONPATH="$dir" python benchmarks/writers.py --seconds 4 --stores redis --rtt-ms "$rtt" | grep processes)
  done
done
