#!/bin/bash
# The side-by-side run of docs/performance.md ("Many writers", appends rebased inside the store):
# writers.py's SQLite rows for main, for main with store_update.patch, and for the patch with the blocking
# file lock (MDSS_FLOCK=1), alternating, two rounds. Run from the repository's root, in its venv:
#   flock -x /tmp/mdss-bench.lock benchmarks/experiments/store_update_ab.sh
set -euo pipefail
patched=$(mktemp -d)
git worktree add -q --detach "$patched" HEAD
trap 'git worktree remove --force "$patched"' EXIT
git -C "$patched" apply "$PWD/benchmarks/experiments/store_update.patch"
for round in 1 2; do
  for variant in main update flock; do
    dir=$PWD; [ "$variant" != main ] && dir=$patched
    flag=""; [ "$variant" = flock ] && flag=1
    echo "== round $round: $variant"
    (cd "$dir" && MDSS_FLOCK=$flag PYTHONPATH="$dir" python benchmarks/writers.py --seconds 5 --stores sqlite | grep processes)
  done
done
