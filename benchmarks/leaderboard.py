"""The leaderboard row of ``mdss bench`` alone: posts/s of 3-column posts to 3 windows and ``rows`` of 100
friends, for mdss.Leaderboard and the anchors that fit the store (see ``harness.bench_board``).

    python benchmarks/leaderboard.py --store memory:// --owners 5000 --posts 2000
    python benchmarks/leaderboard.py --store sqlite:///lb.db
    python benchmarks/leaderboard.py --store redis://127.0.0.1:6379/0 --json lb.json

``mdss bench`` measures the same, after the sorted-set figures, in the same run. ``--calls`` also counts
mdss' posts' store calls by kind (a wrapper around the store: a little slower). ``--trips`` counts the
store round trips of each view with only the manifests cached (the issue's condition), alone, ranked by
``--ties`` (ordinal by default):

    python benchmarks/leaderboard.py --store memory:// --owners 20000 --trips 200
    python benchmarks/leaderboard.py --store memory:// --owners 20000 --trips 200 --ties dense
    python benchmarks/leaderboard.py --store memory:// --owners 20000 --trips 200 --tiebreak first
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
from collections import Counter
from typing import Any

sys.path.insert(0, os.path.dirname(__file__))

import mdss  # noqa: E402
from harness import BoardWorkload, bench_board, board_report, new_board  # noqa: E402
from mdss.stores.base import Store  # noqa: E402


class CountingStore(Store):
    """Delegates to ``inner`` and counts its calls by primitive (``get``, ``get_many``, ``put_many``, ``cas``...)."""

    def __init__(self, inner: Store) -> None:
        super().__init__(namespace=inner.namespace)
        self.inner, self.calls = inner, Counter[str]()
        self.keeps_siblings = inner.keeps_siblings
        self.appends = inner.appends

    def _call(self, name: str, *args: Any) -> Any:
        self.calls[name] += 1
        return getattr(self.inner, f"_{name}")(*args)

    def _get(self, key):  # type: ignore[no-untyped-def]
        return self._call("get", key)

    def _get_many(self, keys):  # type: ignore[no-untyped-def]
        return self._call("get_many", keys)

    def _put(self, key, value, context):  # type: ignore[no-untyped-def]
        return self._call("put", key, value, context)

    def _put_many(self, items):  # type: ignore[no-untyped-def]
        return self._call("put_many", items)

    def _cas(self, key, value, version):  # type: ignore[no-untyped-def]
        return self._call("cas", key, value, version)

    def _append(self, key, held, sha, seen, record, cap):  # type: ignore[no-untyped-def]
        return self._call("append", key, held, sha, seen, record, cap)

    def _swap(self, key, held, sha, seen, core, record, cap):  # type: ignore[no-untyped-def]
        return self._call("swap", key, held, sha, seen, core, record, cap)

    def _delete(self, key):  # type: ignore[no-untyped-def]
        return self._call("delete", key)

    def _delete_if(self, key, version):  # type: ignore[no-untyped-def]
        return self._call("delete_if", key, version)

    def _delete_many(self, keys):  # type: ignore[no-untyped-def]
        return self._call("delete_many", keys)

    def _keys(self, prefix):  # type: ignore[no-untyped-def]
        return self._call("keys", prefix)


def calls_per_post(url: str, owners: int, posts: int, seed: int) -> dict[str, float]:
    """mdss' posts of the same workload again, on a fresh board: their store calls per post, by primitive."""
    bw = BoardWorkload(owners, posts, 1, seed)
    with mdss.open_store(url) as inner:
        store = CountingStore(inner)
        board = new_board(store, f"bench-calls-{os.getpid()}", 4 << 30)
        for owner, values in bw.first:
            board.post(owner, values)
        store.calls.clear()
        for n, (owner, values) in enumerate(bw.posts):
            board.post(owner, values, post_id=f"p{n}")
        counted = {name: n / posts for name, n in sorted(store.calls.items())}
        board.drop()
    return counted


def trips_per_view(
    url: str, owners: int, calls: int, seed: int, ties: str = "ordinal", tiebreak: str | None = None
) -> dict[str, dict[str, float]]:
    """Store round trips (``store.stats`` calls) per view, mean and most over ``calls`` calls of random owners,
    with only the manifests cached: every entry set (and anything else not a manifest) is dropped from the
    caches before each call; ranks by ``ties``, ties broken by ``tiebreak`` (the board's). The windows' logs are
    merged first (what a read over a log costs is ``tests/test_log_reads.py``'s)."""
    from mdss._tree import Manifest

    bw, rng = BoardWorkload(owners, 0, 1, seed), random.Random(seed)
    with mdss.open_store(url) as store:
        board = new_board(store, f"bench-trips-{os.getpid()}", 4 << 30, tiebreak)
        for owner, values in bw.first:
            board.post(owner, values)
        sets = [board._set(instance) for instance in board.windows()]
        for sset in sets:
            sset.merge()
        cursors: list[Any] = [None]
        while True:
            cursor = board.page("xp", limit=100, cursor=cursors[-1]).cursor
            if cursor is None:
                break
            cursors.append(cursor)
        views = {
            "row": lambda: board.row(rng.choice(bw.owners)),
            "positions (3 columns)": lambda: board.positions(rng.choice(bw.owners), ties=ties),
            "rows (100 friends)": lambda: board.rows(rng.sample(bw.owners, 100), "xp", ties=ties),
            "page (100 rows, any depth)": lambda: board.page("xp", limit=100, cursor=rng.choice(cursors), ties=ties),
            "around (5 + 5)": lambda: board.around(rng.choice(bw.owners), "xp", ties=ties),
            "percentile": lambda: board.percentile(rng.choice(bw.owners), "xp"),
            "at_percentile": lambda: board.at_percentile("xp", rng.random(), ties=ties),
        }
        found = {}
        for name, view in views.items():
            counts = []
            for _ in range(calls):
                for sset in sets:
                    for key in [
                        k for k, (node, _) in sset.engines[0].cache._nodes.items() if not isinstance(node, Manifest)
                    ]:
                        sset.engines[0].cache.discard(key)
                before = store.stats.snapshot()
                view()
                counts.append(store.stats.since(before)["calls"])
            found[name] = {"mean": sum(counts) / calls, "max": max(counts)}
        board.drop()
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", default="memory://")
    parser.add_argument("--owners", type=int, default=5000)
    parser.add_argument("--posts", type=int, default=2000)
    parser.add_argument("--samples", type=int, default=200, help="rows calls timed")
    parser.add_argument("--cache-mb", type=int, default=4096)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", dest="json_path", default=None)
    parser.add_argument("--calls", action="store_true", help="also count a post's store calls by kind")
    parser.add_argument("--trips", type=int, default=0, help="only count each view's round trips, over N calls")
    parser.add_argument("--ties", default="ordinal", choices=mdss.leaderboard.TIES, help="ranks --trips asks for")
    parser.add_argument("--tiebreak", default=None, choices=["owner", "first"], help="the board's, every column")
    args = parser.parse_args()
    if args.trips:
        trips = trips_per_view(args.store, args.owners, args.trips, args.seed, args.ties, args.tiebreak)
        for name, counted in trips.items():
            print(f"{name}: {counted['mean']:.2f} round trips on average, at most {counted['max']}")
        return
    with mdss.open_store(args.store) as store:
        result = bench_board(store, args.store, args.owners, args.posts, args.samples, args.cache_mb << 20, args.seed)
    if args.calls:
        result["mdss"]["calls_per_post"] = calls_per_post(args.store, args.owners, args.posts, args.seed)
    for line in board_report(result):
        print(line)
    if args.calls:
        counted = result["mdss"]["calls_per_post"]
        print("mdss' store calls per post:", ", ".join(f"{name} {n:.3f}" for name, n in counted.items()))
    if args.json_path:
        with open(args.json_path, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
