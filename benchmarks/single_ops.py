"""Single calls, one at a time: ``add`` (one commit each) then ``rank`` on a loaded set, with store round
trips and bytes written per add. For A/B runs of two versions on the same machine, alternate them:

    python benchmarks/single_ops.py --store memory://
    PYTHONPATH=/path/to/other/checkout python benchmarks/single_ops.py --store memory://
"""

from __future__ import annotations

import argparse
import random
import time

import mdss


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", default="memory://")
    parser.add_argument("--members", type=int, default=100_000)
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args()
    store = mdss.open_store(args.store)
    n, k = args.members, args.calls
    board = mdss.SortedSet.load(store, "b", {f"p{i}": i for i in range(n)}, replace=True)
    rng = random.Random(1)
    store.stats.reset()
    start = time.perf_counter()
    for _ in range(k):
        board.add(f"p{rng.randrange(n)}", rng.randrange(10**6))
    elapsed = time.perf_counter() - start
    cost = store.stats.snapshot()
    print(
        f"{args.store}: single adds/s {k / elapsed:,.0f}, round trips per add {cost['calls'] / k:.2f}, "
        f"bytes written per add {cost['bytes_written'] / k:,.0f}"
    )
    start = time.perf_counter()
    for _ in range(k):
        board.rank(f"p{rng.randrange(n)}")
    print(f"{args.store}: rank/s {k / (time.perf_counter() - start):,.0f}")


if __name__ == "__main__":
    main()
