"""Where the compare-and-set conflicts of many writers come from: the counters behind benchmarks/writers.py --cluster.

    python benchmarks/conflicts.py [--shards 1,16] [--processes 4] [--seconds 5] [--members 100000]
                                   [--always-read] [--redis-cluster URL] [--json FILE]

The same workload as ``writers.py --cluster`` (``--processes`` processes
calling ``incr`` on random members of one logical set on a 3-master Redis
Cluster, a second of warm-up, then the same measured seconds), with counters
installed in each writer process (by wrapping mdss' internal functions: a
diagnostic, not an API). Every head compare-and-set is counted, and each one
that lost, by where its head came from:

- ``held``: the head this process held from its last commit or read, used
  without reading it (``mdss._commit._read_first`` said so);
- ``read``: the head read just before (the window between that read and the
  compare-and-set is timed, with the store calls made in it);
- ``rival``: the current head a lost compare-and-set returned (a rebase);
- ``merge``: a merge's own compare-and-set.

Also each process's updates, CPU time and store calls, so that the slowest
and the fastest process show whether some writers starve (asleep in backoff)
while another commits. ``--always-read`` makes the writers of a sharded set
read every head first (the estimator aside), to compare.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import multiprocessing
import os
import random
import sys
import time
from typing import Any

import mdss

HERE = os.path.dirname(os.path.abspath(__file__))


def _instrument(counts: collections.Counter, always_read: bool) -> None:
    """Count head compare-and-sets by origin (see the module docstring), and time read-to-CAS windows."""
    from mdss import _commit, _merge, _snapshot
    from mdss.stores import base

    state: dict[str, Any] = {"origin": "?", "merging": 0, "read_at": 0, "calls_at": 0}
    snapshot, merge, cas, read_first = _snapshot.snapshot, _merge.merge, base.Store.cas, _commit._read_first

    def counted_snapshot(engine: Any, create: bool = False, known: Any = None) -> Any:
        if known is None:
            state["origin"] = "read"
        else:
            held = engine.writer.held
            state["origin"] = "held" if held is not None and known[0] is held[0] else "rival"
        state["read_at"], state["calls_at"] = time.perf_counter_ns(), engine.store.stats.calls
        return snapshot(engine, create, known)

    def counted_merge(*args: Any, **kwargs: Any) -> Any:
        state["merging"] += 1
        try:
            return merge(*args, **kwargs)
        finally:
            state["merging"] -= 1

    def counted_cas(store: Any, key: str, value: bytes, version: Any) -> Any:
        if not key.endswith(":h"):
            return cas(store, key, value, version)
        origin = "merge" if state["merging"] else state["origin"]
        counts[f"cas {origin}"] += 1
        if origin == "read":
            counts["window us"] += (time.perf_counter_ns() - state["read_at"]) // 1000
            counts["window calls"] += store.stats.calls - state["calls_at"]
        try:
            return cas(store, key, value, version)
        except mdss.ConflictError:
            counts[f"lost {origin}"] += 1
            raise

    def counted_read_first(sset: Any) -> bool:
        found = True if always_read else read_first(sset)
        counts[f"read first {found}"] += 1
        return found

    _snapshot.snapshot, _merge.merge, base.Store.cas = counted_snapshot, counted_merge, counted_cas
    _commit._read_first = counted_read_first


def _writer(url: str, name: str, seed: int, args: argparse.Namespace, ready: Any, out: Any) -> None:
    board = mdss.SortedSet(mdss.open_store(url), name)
    counts: collections.Counter = collections.Counter()
    _instrument(counts, args.always_read and len(board.engines) > 1)  # --always-read: sharded sets only
    rng = random.Random(seed)
    warm = time.monotonic() + 1.0
    while time.monotonic() < warm:
        with contextlib.suppress(mdss.ConflictError):
            board.incr(f"p{rng.randrange(args.members)}", 1)
    counts.clear()
    ready.wait()
    before, cpu, n = board.store.stats.snapshot(), time.process_time(), 0
    deadline = time.monotonic() + args.seconds
    while time.monotonic() < deadline:
        with contextlib.suppress(mdss.ConflictError):
            board.incr(f"p{rng.randrange(args.members)}", 1)
            n += 1
    counts["updates"], counts["cpu us"] = n, int((time.process_time() - cpu) * 1e6)
    counts["store calls"] = board.store.stats.since(before)["calls"]
    out.put(dict(counts))


def _run(url: str, shards: int, args: argparse.Namespace) -> dict[str, Any]:
    name = f"conflicts-{shards}-{time.monotonic_ns()}"
    options = {"shards": shards} if shards > 1 else {}
    board = mdss.SortedSet.load(mdss.open_store(url), name, {f"p{i}": i for i in range(args.members)}, **options)
    ctx = multiprocessing.get_context("spawn")
    out, ready = ctx.Queue(), ctx.Barrier(args.processes)
    procs = [ctx.Process(target=_writer, args=(url, name, p, args, ready, out)) for p in range(args.processes)]
    for proc in procs:
        proc.start()
    each = [out.get() for _ in procs]
    for proc in procs:
        proc.join()
    board.drop()
    total: collections.Counter = collections.Counter()
    for counts in each:
        total.update(counts)
    return {"shards": shards, "total": dict(total), "per_process_updates": sorted(c["updates"] for c in each)}


def _report(row: dict[str, Any], seconds: float) -> None:
    t = row["total"]
    n = max(t["updates"], 1)
    lost = sum(v for k, v in t.items() if k.startswith("lost "))
    print(f"\nS = {row['shards']}: {n / seconds:,.0f} updates/s, per process {row['per_process_updates']}")
    print(
        f"  CAS conflicts per update {lost / n:.3f}; CPU {t['cpu us'] / n:,.0f} us and "
        f"{t['store calls'] / n:.2f} store calls per update"
    )
    for origin in ("held", "read", "rival", "merge"):
        tried, lost_here = t.get(f"cas {origin}", 0), t.get(f"lost {origin}", 0)
        share = lost_here / tried if tried else 0.0
        print(
            f"  {origin:>5}: {tried / n:.3f} CAS per update, {lost_here / n:.3f} lost per update ({share:.0%} of them)"
        )
    reads = t.get("cas read", 0)
    if reads:
        print(
            f"  read-to-CAS window: {t['window us'] / reads:,.0f} us, {t['window calls'] / reads:.2f} store calls "
            f"(the head read included); read first {t.get('read first True', 0) / n:.2f} of updates"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shards", default="1,16")
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--members", type=int, default=100_000)
    parser.add_argument("--always-read", action="store_true")
    parser.add_argument("--redis-cluster", default=None)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))
    from redis_servers import redis_cluster

    with contextlib.ExitStack() as stack:
        url = args.redis_cluster
        if not url:
            ports = stack.enter_context(redis_cluster(3))
            url = "redis+cluster://" + ",".join(f"127.0.0.1:{p}" for p in ports)
        rows = [_run(url, int(s), args) for s in args.shards.split(",")]
    for row in rows:
        _report(row, args.seconds)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
