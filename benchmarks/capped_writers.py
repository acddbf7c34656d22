"""Posts per second when each key's writes are capped, not the clients' CPU: sharded sets at S = 1, 4, 16.

    python benchmarks/capped_writers.py [--shards 1,4,16] [--processes 32] [--write-units 40] [--read-units 120]
        [--burst 1] [--cas | --slots N] [--per-request] [--seconds 10] [--members 100000] [--redis URL] [--json FILE]

The store is one redis-server (of our own on loopback, or ``--redis``) under the capacity model
(``mdss.stores.capacity.CapacityStore``): every key takes at most ``--write-units`` write units and ``--read-units``
read units a second (DynamoDB's 1:3 ratio by default, scaled down from 1,000 and 3,000 so that the cap, not these
2-core machines, is the bottleneck), with buckets shared by every process in one SQLite file. A write unit is a
started KB, as on DynamoDB: a head of 1-3 KB costs 1-3 units per write.

For each shard count, the set is loaded with ``--members`` members (a live board's size decides how long its update
log grows before a merge), then ``--processes`` processes post single ``add`` calls (random members of those, random
scores) to it for a second of warm-up, then all measure the same ``--seconds``. The table shows posts per
second, the posts per capped write unit of one head (posts/s over S x write-units: 1.0 would be one post per unit a
head can take; with ``--per-request`` a unit is a write), the posts per write of a head whatever its units (landed or
refused: 1.0 would be a post per write), the write units and throttled requests per post, and the ratio to S = 1.
Afterwards every acknowledged post is checked to be in the set (the last score each process gave each of its members)
and ``check()`` must hold. With ``--cas`` heads are written by compare-and-set, as on DynamoDB; with ``--slots N``
also, but through ``mdss.stores.slots.SlotStore``: each post under a key of its own, the head every ``N`` posts (its
round trips are then the capacity model's, not the SlotStore's calls).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import random
import sys
import tempfile
import time
from collections.abc import Iterator
from typing import Any

import harness
import mdss
from mdss.stores.capacity import CapacityStore
from mdss.stores.slots import SlotStore


def _capped(url: str, buckets: str, args: argparse.Namespace) -> mdss.Store:
    """The writers' store: Redis under the capacity model (by compare-and-set with ``--cas`` or ``--slots``), with
    ``--slots`` each append a key of its own (``mdss.stores.slots``)."""
    capped = CapacityStore(
        mdss.open_store(url),
        write_units=args.write_units,
        read_units=args.read_units,
        burst=args.burst,
        shared=buckets,
        retry_budget=120.0,
        watch=lambda key: key.endswith(":h"),  # the heads (mdss._keys.Keyspace.head)
        unit_bytes=(1 << 62, 1 << 62) if args.per_request else (1024, 4096),
        appends=False if args.cas or args.slots else None,
    )
    return SlotStore(capped, every=args.slots) if args.slots else capped


def _uncapped(url: str, args: argparse.Namespace) -> mdss.Store:
    """The store that loads and checks the set: the same layout, no cap."""
    if not args.slots:
        return mdss.open_store(url)
    return SlotStore(CapacityStore(mdss.open_store(url), read_units=1e9, write_units=1e9, appends=False))


def _model(store: mdss.Store) -> CapacityStore:
    """The capacity model under ``store``: its units, and (its inner store's) round trips."""
    return store.inner if isinstance(store, SlotStore) else store  # type: ignore[return-value]


def _writer(i: int, url: str, buckets: str, name: str, args: argparse.Namespace, start: Any, out: Any) -> None:
    """One process: posts until its time is up; reports what it measured and the last score of each member."""
    store = _capped(url, buckets, args)
    sset = mdss.SortedSet(store, name)
    rng = random.Random(i)
    last: dict[str, int] = {}
    start.wait()
    begin = time.monotonic()
    measure_from, end = begin + 1.0, begin + 1.0 + args.seconds
    posts = 0
    before: dict[str, float] = {}
    model = _model(store)
    while (now := time.monotonic()) < end:
        if not before and now >= measure_from:
            usage = model.usage
            before = {
                "units": usage.write_units,
                "head_units": usage.watched_units,
                "head_writes": usage.watched_writes,
                "throttled": usage.throttled,
                "calls": model.stats.calls,
                "conflicts": model.stats.conflicts,
            }
        member, score = f"m{rng.randrange(args.members)}", rng.randrange(1_000_000)
        sset.add(member, score)
        last[member] = score
        if before:
            posts += 1
    usage = model.usage
    out.put(
        {
            "posts": posts,
            "units": usage.write_units - before.get("units", 0),
            "head_units": usage.watched_units - before.get("head_units", 0),
            "head_writes": usage.watched_writes - before.get("head_writes", 0),
            "throttled": usage.throttled - before.get("throttled", 0),
            "calls": model.stats.calls - before.get("calls", 0),
            "conflicts": model.stats.conflicts - before.get("conflicts", 0),
            "last": last,
            "finished": time.monotonic(),
        }
    )


def _row(url: str, shards: int, args: argparse.Namespace, progress: Any) -> dict[str, Any]:
    name = f"capped-{shards}-{time.monotonic_ns()}"
    with tempfile.TemporaryDirectory(prefix="mdss-buckets-") as directory:
        buckets = os.path.join(directory, "buckets.db")
        setup = _uncapped(url, args)
        rng = random.Random(shards)
        pairs = ((f"m{i}", rng.randrange(1_000_000)) for i in range(args.members))
        mdss.SortedSet.load(setup, name, pairs, **({"shards": shards} if shards > 1 else {}))
        ctx = multiprocessing.get_context("fork")
        start, out = ctx.Event(), ctx.Queue()
        procs = [
            ctx.Process(target=_writer, args=(i, url, buckets, name, args, start, out)) for i in range(args.processes)
        ]
        for p in procs:
            p.start()
        time.sleep(1.0)
        start.set()
        results = [out.get(timeout=args.seconds + 600) for _ in procs]
        for p in procs:
            p.join()
    posts = sum(r["posts"] for r in results)
    rate = posts / args.seconds
    # Every acknowledged post is there: each member holds the last score one of the processes gave it.
    sset = mdss.SortedSet(setup, name)
    written_by: dict[str, set[int]] = {}
    for r in results:
        for member, score in r["last"].items():
            written_by.setdefault(member, set()).add(score)
    stored = dict(zip(written_by, sset.scores(list(written_by))))
    missing = [m for m, s in stored.items() if s not in written_by[m]]
    problems = sset.check()
    row = {
        "shards": shards,
        "processes": args.processes,
        "posts_per_s": rate,
        "posts_per_head_write": rate / (shards * args.write_units),
        "write_units_per_post": sum(r["units"] for r in results) / max(posts, 1),
        "head_units_per_post": sum(r["head_units"] for r in results) / max(posts, 1),
        "head_writes_per_post": sum(r["head_writes"] for r in results) / max(posts, 1),
        "throttled_per_post": sum(r["throttled"] for r in results) / max(posts, 1),
        "calls_per_post": sum(r["calls"] for r in results) / max(posts, 1),
        "conflicts_per_post": sum(r["conflicts"] for r in results) / max(posts, 1),
        "members_checked": len(stored),
        "lost": len(missing),
        "check": problems,
    }
    progress(
        f"S={shards}: {rate:,.1f} posts/s, {row['posts_per_head_write']:.2f} per capped head unit, "
        f"{row['write_units_per_post']:.2f} write units/post ({row['head_units_per_post']:.2f} on heads, in "
        f"{row['head_writes_per_post']:.2f} head writes), "
        f"{row['conflicts_per_post']:.2f} conflicts/post, {row['calls_per_post']:.2f} calls/post, "
        f"lost {len(missing)}, check {problems or 'ok'}"
    )
    return row


def table(rows: list[dict[str, Any]], args: argparse.Namespace) -> Iterator[str]:
    yield (
        f"{args.processes} writer processes, every key capped at {args.write_units:g} write units/s and "
        f"{args.read_units:g} read units/s (burst {args.burst:g} s), "
        f"{'a unit per request' if args.per_request else 'a unit per started KB written, 4 KB read'}, "
        f"{args.seconds:g} s measured"
    )
    yield (
        f"{'S':>3} {'posts/s':>9} {'vs S=1':>7} {'per head unit':>14} {'per head write':>15} {'units/post':>11} "
        f"{'on heads':>9} {'throttled/post':>15} {'lost':>5}"
    )
    base = rows[0]["posts_per_s"]
    for r in rows:
        yield (
            f"{r['shards']:>3} {r['posts_per_s']:>9,.1f} {r['posts_per_s'] / base:>6.2f}x "
            f"{r['posts_per_head_write']:>14.2f} {1 / max(r['head_writes_per_post'], 1e-9):>15.2f} "
            f"{r['write_units_per_post']:>11.2f} {r['head_units_per_post']:>9.2f} {r['throttled_per_post']:>15.2f} "
            f"{r['lost']:>5}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shards", default="1,4,16")
    parser.add_argument("--processes", type=int, default=32)
    parser.add_argument("--write-units", type=float, default=40.0)
    parser.add_argument("--read-units", type=float, default=120.0)
    parser.add_argument("--burst", type=float, default=1.0)
    parser.add_argument(
        "--cas", action="store_true", help="heads by compare-and-set only, as on DynamoDB (no store-applied appends)"
    )
    parser.add_argument(
        "--slots",
        type=int,
        default=0,
        help="heads by compare-and-set, each append a key of its own, a checkpoint of the head every N (0: off)",
    )
    parser.add_argument(
        "--per-request", action="store_true", help="a unit per request, whatever its size (not DynamoDB's per KB)"
    )
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--members", type=int, default=100_000)
    parser.add_argument("--redis", help="a Redis URL (default: a redis-server of our own on loopback)")
    parser.add_argument("--json", help="write the rows here")
    args = parser.parse_args()
    with harness.redis_url(args.redis) as url:
        rows = [
            _row(url, int(s), args, lambda line: print(line, file=sys.stderr, flush=True))
            for s in args.shards.split(",")
        ]
    for line in table(rows, args):
        print(line)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
