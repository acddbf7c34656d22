"""Batched updates against batch size: how far copy-on-write amortises, next to the anchor, in one run.

    python benchmarks/update_batch.py --store redis://127.0.0.1:6379/0 [--members 1000000]
        [--batches 1000,5000,20000,100000] [--json benchmarks/results/update_batch.json]

For each batch size, the same random score updates of existing members go to
mdss (one commit per batch) and to the anchor that fits the store (one
``ZADD`` of the batch on Redis, ``SortedList`` remove+add elsewhere).
"""

from __future__ import annotations

import argparse
import json
import random
import time

import mdss
from harness import Workload, single_redis


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--store", default="memory://")
    parser.add_argument("--members", type=int, default=1_000_000)
    parser.add_argument("--batches", default="1000,5000,20000,100000")
    parser.add_argument("--updates", type=int, default=200_000, help="updates per batch size and system")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    store = mdss.open_store(args.store)
    w = Workload(args.members, 10, 1, 1)
    board = mdss.SortedSet.load(store, "update-batch", w.scores, replace=True, cache_bytes=4 << 30)
    if single_redis(args.store):
        client, key = store.client, f"{store.namespace}:anchor-update-batch"  # type: ignore[attr-defined]
        client.delete(key)
        items = list(w.scores.items())
        for i in range(0, len(items), 10_000):
            client.zadd(key, dict(items[i : i + 10_000]))
        anchor_name = "redis_zset"

        def anchor(batch: list[tuple[str, int]]) -> None:
            client.zadd(key, dict(batch))

    else:
        from sortedcontainers import SortedList

        ranked = SortedList((-s, m) for m, s in w.scores.items())
        scores = dict(w.scores)
        anchor_name = "sortedcontainers"

        def anchor(batch: list[tuple[str, int]]) -> None:
            for member, score in batch:
                ranked.remove((-scores[member], member))
                scores[member] = score
                ranked.add((-score, member))

    rng = random.Random(7)
    rows = []
    print(f"{args.members:,} members on {args.store.split('://')[0]}: updates/s by batch size")
    print(f"{'batch':>9} {'mdss':>10} {anchor_name:>17} {'ratio':>7}")
    for size in map(int, args.batches.split(",")):
        batches = [
            [(rng.choice(w.members), rng.randrange(100_000)) for _ in range(size)]
            for _ in range(max(1, args.updates // size))
        ]
        total = sum(map(len, batches))
        rates = {}
        for system, apply in (("mdss", board.add_many), (anchor_name, anchor)):
            start = time.perf_counter()
            for batch in batches:
                apply(batch)
            rates[system] = total / (time.perf_counter() - start)
        rows.append({"batch": size, "updates": total, **{f"{s}_update_per_s": r for s, r in rates.items()}})
        ratio = rates["mdss"] / rates[anchor_name]
        print(f"{size:>9,} {rates['mdss']:>10,.0f} {rates[anchor_name]:>17,.0f} {ratio:>6.2f}x", flush=True)
    if board.check():
        raise SystemExit("the set failed check()")
    board.drop()
    if single_redis(args.store):
        client.delete(key)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"members": args.members, "store": args.store.split("://")[0], "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
