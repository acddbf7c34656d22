"""A thread's own Redis connection beside redis-py's pool, side by side on one Redis.

    python benchmarks/redis_connections.py [--members 200000] [--rounds 8] [--block 1000]

Two sets of the same ``--members`` on one redis-server of the script's own: one through ``RedisStore`` as it is (each
thread's commands through a connection it holds), one through a ``RedisStore`` whose commands take a connection from
the pool and give it back each time (as before stop 50). Interleaved blocks of ``--block`` single ``add`` calls, then
of ``rank`` calls, the side that goes first alternating; prints µs per call of each side and the time saved.
"""

from __future__ import annotations

import argparse
import random
import time
from typing import Any

import mdss
from harness import redis_url
from mdss.stores.redis import RedisStore


class PooledStore(RedisStore):
    """Every command through the shared client's pool."""

    @property
    def client(self) -> Any:
        return self.shared


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--members", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--block", type=int, default=1000)
    args = parser.parse_args()
    rng = random.Random(1)
    names = [f"player-{i:08d}" for i in range(args.members)]
    pairs = {m: rng.randrange(10 * args.members) for m in names}
    with redis_url(None) as url:
        held = mdss.open_store(url, namespace="held")
        pooled = PooledStore.from_url(f"{url}?namespace=pooled")
        sides = {"held": mdss.SortedSet.load(held, "s", pairs), "pooled": mdss.SortedSet.load(pooled, "s", pairs)}
        for _ in range(3000):  # both caches warm
            member, score = rng.choice(names), rng.randrange(10 * args.members)
            for sset in sides.values():
                sset.add(member, score)
        for what in ("add", "rank"):
            spent = dict.fromkeys(sides, 0.0)
            for r in range(args.rounds):
                block = [(rng.choice(names), rng.randrange(10 * args.members)) for _ in range(args.block)]
                for side in sorted(sides, reverse=r % 2 == 1):
                    sset, t = sides[side], time.perf_counter()
                    for member, score in block:
                        sset.add(member, score) if what == "add" else sset.rank(member)
                    spent[side] += time.perf_counter() - t
            per = {side: spent[side] / (args.rounds * args.block) * 1e6 for side in sides}
            print(
                f"{what}: held {per['held']:.1f} us, pooled {per['pooled']:.1f} us per call, "
                f"{1 - per['held'] / per['pooled']:.1%} less time held"
            )


if __name__ == "__main__":
    main()
