"""Could a cold rank be routed inside Redis? What a Lua script pays to decode one of a board's entry sets, beside a
``ZREVRANK``, on one server in one run (docs/performance.md, "Where targets are missed": the cold rank).

A cold rank of a board's owner needs the owner's row (its member-index entry set), then the column's entry set below
the row's key: two dependent round trips from the client. Doing both hops in one ``EVALSHA`` would mean decoding
those entry sets in the server's Lua (``cmsgpack``, the one decoder Redis ships; no LZ4, so stored uncompressed).
This loads a board, takes one entry set of each tree, stores them uncompressed under keys of their own, and times
in alternating blocks: ``ZREVRANK`` on a 1,000-member sorted set, a script that only ``GET`` s an entry set, and one
that ``cmsgpack.unpack`` s it. p50s in microseconds; an entry set ``cmsgpack`` cannot decode is reported as such.

    python benchmarks/experiments/server_side_rank.py [--owners 200000] [--rounds 5] [--block 600]

Needs ``redis-server`` on the PATH (it starts one on a free loopback port and stops it).
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from collections.abc import Callable

import lz4.block
import msgpack
import redis

import mdss

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from harness import redis_url  # noqa: E402 - benchmarks/harness.py

UNPACK = "local v = redis.call('GET', KEYS[1]); local t = cmsgpack.unpack(v); return #t"
ONLY_GET = "local v = redis.call('GET', KEYS[1]); return 1"


def entry_sets(client: redis.Redis) -> dict[str, bytes]:
    """One stored entry set of each tree, uncompressed (msgpack ``[members, values]``): the score tree's values are
    key strings, the member index's are rows."""
    found: dict[str, bytes] = {}
    for key in client.scan_iter(match="*:n:*", count=10_000):
        value = client.get(key)
        if value is None or value[:3] != bytes([0x94, 4, 0]):  # a compressed entry set
            continue
        node = msgpack.unpackb(value[:-4], raw=False)
        raw = lz4.block.decompress(node[3], uncompressed_size=node[2])
        kind = "score tree" if isinstance(msgpack.unpackb(raw, raw=False)[1][0], str) else "member index"
        found.setdefault(kind, raw)
        if len(found) == 2:
            break
    return found


def p50(call: Callable[[], object], block: int) -> float:
    times = []
    for _ in range(block):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--owners", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--block", type=int, default=600)
    args = parser.parse_args()
    with redis_url(None) as url:
        client = redis.Redis.from_url(url)
        board = mdss.Leaderboard(mdss.open_store(url), "g", columns={"xp": "desc"})
        board.load({f"o{i:07d}": {"xp": random.randrange(10**6)} for i in range(args.owners)})
        client.zadd("peer", {f"o{i}": i for i in range(1000)})
        unpack, only_get = client.register_script(UNPACK), client.register_script(ONLY_GET)
        calls: dict[str, Callable[[], object]] = {"ZREVRANK": lambda: client.zrevrank("peer", "o500")}
        for kind, raw in entry_sets(client).items():
            key = f"raw:{kind}"
            client.set(key, raw)
            try:
                unpack(keys=[key])
            except redis.ResponseError as exc:
                print(f"{kind} entry set ({len(raw):,} bytes): cmsgpack cannot decode it: {exc}")
                continue
            calls[f"GET in a script, {kind} ({len(raw):,} B)"] = lambda key=key: only_get(keys=[key])
            calls[f"cmsgpack.unpack in a script, {kind}"] = lambda key=key: unpack(keys=[key])
        runs: dict[str, list[float]] = {name: [] for name in calls}
        for _ in range(args.rounds):
            for name, call in calls.items():
                runs[name].append(p50(call, args.block))
        for name, found in runs.items():
            blocks = ", ".join(f"{t:.0f}" for t in found)
            print(f"{name:<55} p50 {statistics.median(found):7.1f} us  (blocks: {blocks})")


if __name__ == "__main__":
    main()
