"""The leaderboard row of ``mdss bench`` alone: posts/s of 3-column posts to 3 windows and ``rows`` of 100
friends, for mdss.Leaderboard and the anchors that fit the store (see ``harness.bench_board``).

    python benchmarks/leaderboard.py --store memory:// --owners 5000 --posts 2000
    python benchmarks/leaderboard.py --store sqlite:///lb.db
    python benchmarks/leaderboard.py --store redis://127.0.0.1:6379/0 --json lb.json

``mdss bench`` measures the same, after the sorted-set figures, in the same run.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))

import mdss  # noqa: E402
from harness import bench_board, board_report  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", default="memory://")
    parser.add_argument("--owners", type=int, default=5000)
    parser.add_argument("--posts", type=int, default=2000)
    parser.add_argument("--samples", type=int, default=200, help="rows calls timed")
    parser.add_argument("--cache-mb", type=int, default=4096)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", dest="json_path", default=None)
    args = parser.parse_args()
    with mdss.open_store(args.store) as store:
        result = bench_board(store, args.store, args.owners, args.posts, args.samples, args.cache_mb << 20, args.seed)
    for line in board_report(result):
        print(line)
    if args.json_path:
        with open(args.json_path, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
