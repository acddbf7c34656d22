"""Leaderboard figures: posts/s of 3-column posts to 3 windows, and ``rows`` of 100 friends (p50, p90, p99).

    python benchmarks/leaderboard.py --store memory:// --owners 5000 --posts 2000
    python benchmarks/leaderboard.py --store sqlite:///lb.db
    python benchmarks/leaderboard.py --store redis://127.0.0.1:6379/0

Posts come from one thread (each is one update-log append per window); a
warm-up pass fills the caches before the timed ``rows`` calls. Not part of
``mdss bench`` yet (see docs/leaderboard.md).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))

import mdss  # noqa: E402
from harness import percentiles  # noqa: E402


def run(url: str, owners: int, posts: int, seed: int) -> dict[str, float]:
    rng = random.Random(seed)
    with mdss.open_store(url) as store:
        name = f"bench-board-{os.getpid()}-{time.monotonic_ns()}"
        board = mdss.Leaderboard(
            store,
            name,
            columns={"xp": "desc", "accuracy": "desc", "race": [("laps", "desc"), ("time_ms", "asc")]},
            accumulate=["shots", "kills"],
            keep_best={"time_ms": "min"},
            windows=["all", "week", "day"],
        )

        def values() -> dict[str, float]:
            return {
                "xp": rng.randint(0, 10_000),
                "accuracy": round(rng.random(), 3),
                "laps": rng.randint(1, 5),
                "time_ms": rng.randint(50_000, 90_000),
                "shots": rng.randint(1, 50),
                "kills": rng.randint(0, 5),
            }

        names = [f"owner-{i:07d}" for i in range(owners)]
        start = time.perf_counter()
        for owner in names:
            board.post(owner, values())
        loaded = time.perf_counter() - start
        before = store.stats.snapshot()
        start = time.perf_counter()
        for i in range(posts):
            board.post(rng.choice(names), values(), post_id=f"p{i}")
        elapsed = time.perf_counter() - start
        trips = store.stats.since(before)["calls"] / posts
        friends = [rng.sample(names, 100) for _ in range(200)]
        for group in friends:  # warm-up
            board.rows(group, "xp")
        samples = []
        for group in friends:
            t = time.perf_counter_ns()
            board.rows(group, "xp")
            samples.append(time.perf_counter_ns() - t)
        figures = {"owners": owners, "first_posts_per_s": owners / loaded, "posts_per_s": posts / elapsed}
        figures["round_trips_per_post"] = trips
        figures.update({f"rows100_{k}": v for k, v in percentiles(samples).items()})
        problems = [p for w in board.windows() for p in board.check(w)]
        if problems:
            raise SystemExit(f"check() failed: {problems[:3]}")
        board.drop()
        return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", default="memory://")
    parser.add_argument("--owners", type=int, default=5000)
    parser.add_argument("--posts", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    print(json.dumps(run(args.store, args.owners, args.posts, args.seed), indent=1))


if __name__ == "__main__":
    main()
