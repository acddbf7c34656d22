"""Garbage during a post load, with no ``gc()`` call: a board's stored bytes against its live bytes over time.

    python benchmarks/board_garbage.py [--owners 100000] [--seconds 600] [--every 10] [--redis URL] [--json FILE]

A board of ``--owners`` rows (one column, window ``all``) is loaded, then one process posts random owners' new points
for ``--seconds``. Every ``--every`` seconds the posts pause while the script sums the bytes of every key of the window
(nodes, garbage notes, the head: what the store holds) and those of the nodes its head names (the live data). The ratio
stored / live is what garbage costs: 1 means none. A redis-server is started on loopback unless ``--redis``.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from typing import Any

import mdss
from harness import redis_url
from mdss import _garbage, _snapshot


def _bytes(store: mdss.Store, keys: list[str]) -> int:
    return sum(
        sum(len(v) for v in store.get_many(keys[i : i + 1000]) if v is not None) for i in range(0, len(keys), 1000)
    )


def run(url: str, owners: int, seconds: float, every: float) -> dict[str, Any]:
    store = mdss.open_store(url, namespace="garbage")
    board = mdss.Leaderboard(store, "game", columns={"xp": "desc"})
    rng = random.Random(1)
    names = [f"player-{i:08d}" for i in range(owners)]
    board.load(((n, {"xp": rng.randrange(10**7)}) for n in names), replace=True)
    engine = board._set("all").engine
    keys = engine.keys
    samples = []
    start = time.monotonic()
    due, posts = start, 0
    while True:
        now = time.monotonic()
        if now >= due:
            stored = _bytes(store, list(store.keys(keys.prefix)))
            snap = _snapshot.snapshot(engine, True)
            live = _bytes(store, [keys.node(i) for i in _garbage.named(engine, snap)]) + len(snap.data or b"")
            samples.append({"seconds": now - start, "posts": posts, "stored": stored, "live": live})
            print(
                f"{now - start:7.1f} s  {posts:9,} posts  stored {stored / 1e6:8.2f} MB  live {live / 1e6:8.2f} MB  "
                f"{stored / live:5.2f}x  merges {engine.merges}",
                file=sys.stderr,
            )
            if now - start >= seconds:
                break
            due += every
        board.post(rng.choice(names), {"xp": rng.randrange(10**7)})
        posts += 1
    worst = max(s["stored"] / s["live"] for s in samples)
    return {"owners": owners, "seconds": seconds, "posts": posts, "worst_ratio": worst, "samples": samples}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--owners", type=int, default=100_000)
    parser.add_argument("--seconds", type=float, default=600)
    parser.add_argument("--every", type=float, default=10)
    parser.add_argument("--redis", default=None, help="a Redis URL (default: start a redis-server)")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    with redis_url(args.redis) as url:
        result = run(url, args.owners, args.seconds, args.every)
    print(
        f"{result['owners']:,} owners, {result['posts']:,} posts in {result['seconds']:g} s, no gc(): "
        f"stored / live at most {result['worst_ratio']:.2f}x over {len(result['samples'])} samples"
    )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
