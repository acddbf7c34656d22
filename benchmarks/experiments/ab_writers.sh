#!/bin/bash
# writers.py's rows for another commit and for the working tree, alternating, two rounds: the side-by-side
# runs of docs/performance.md ("Store-applied appends"). Run from the repository's root, in its venv:
#   flock -x /tmp/mdss-bench.lock benchmarks/experiments/ab_writers.sh BASE [STORES] [RTT_MS]
# e.g. BASE=c6781f3 (before the appends), STORES=sqlite,redis (default), RTT_MS=0.5 (writers.py --rtt-ms).
set -euo pipefail
base=$1 stores=${2:-sqlite,redis} rtt=${3:-0}
other=$(mktemp -d)
git worktree add -q --detach "$other" "$base"
trap 'git worktree remove --force "$other"' EXIT
for round in 1 2; do
  for variant in "$base" working-tree; do
    dir=$PWD; [ "$variant" = "$base" ] && dir=$other
    echo "== round $round: $variant"
    (cd "$dir" && PYTHONPATH="$dir" python benchmarks/writers.py --seconds 4 --stores "$stores" --rtt-ms "$rtt" \
      | grep -E "processes|^writers")
  done
done
