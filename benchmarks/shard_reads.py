"""Reads of sharded sets against the same set unsharded, on one store: rank and page p50 with every node
cached, and round trips, entry sets and bytes per read with only the manifests cached.

    python benchmarks/shard_reads.py [--stores memory,redis,redis-cluster] [--members 100000]
        [--shards 1,2,4,8,16,64] [--updates 3000] [--samples 500] [--rounds 3] [--json FILE]
        [--layouts] [--posts-between N] [--log-limit N] [--mdss CHECKOUT]

For each store (memory; a redis-server and a 3-master Redis Cluster started
on loopback with tests/redis_servers.py, or ``--redis URL`` /
``--redis-cluster URL``) the script loads the harness's workload
(benchmarks/harness.py: tie-heavy integer points, ``player-NNNNNNNN``
members) once per shard count, posts ``--updates`` single updates so that
the shards' update logs hold entries, as a live set's do, and reads every
node once. Then, ``--rounds`` times over all shard counts in turn (so that
the machine's other load falls on every count alike), the p50 of rank and of
a page of 100 at random offsets; the best round's p50 is kept. Round trips
per call are counted with every node cached and with the entry sets dropped
from the cache before each call (``harness.manifests_only``). ``--mdss`` runs
this script and harness against the ``mdss`` package of another checkout
(before and after a change, on the same machine). A process that reads a
sharded set often merges its keys (``mdss._allkeys``; the "merged keys"
column says whether it did by the end); ``--layouts`` reads every shard
instead, as a process that reads the set rarely does. ``--posts-between N``
has another object of the set (seen only through the heads, as another
process) post ``N`` single updates before each timed read: a live board,
whose shards' heads move between reads.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import statistics
import sys
import time
from collections.abc import Iterator
from typing import Any

TESTS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests")


@contextlib.contextmanager
def _url(kind: str, args: argparse.Namespace) -> Iterator[str]:
    """The store of ``kind``: memory, or a server of our own on loopback (stopped afterwards)."""
    if kind == "memory":
        yield "memory://"
        return
    given = args.redis if kind == "redis" else args.redis_cluster
    if given:
        yield given
        return
    sys.path.insert(0, TESTS)
    from redis_servers import redis_cluster, redis_server

    if kind == "redis":
        with redis_server() as port:
            yield f"redis://127.0.0.1:{port}/0"
    else:
        with redis_cluster(3) as ports:
            yield "redis+cluster://" + ",".join(f"127.0.0.1:{p}" for p in ports)


def _rows(url: str, args: argparse.Namespace, progress: Any) -> list[dict[str, Any]]:
    import harness  # after --mdss chose the package (the harness imports it too)
    import mdss

    counts = [int(s) for s in args.shards.split(",")]
    w = harness.Workload(args.members, args.samples, 1000, args.seed, singles=args.updates)
    store = mdss.open_store(url)
    boards = {}
    for count in counts:
        progress(f"  loading {args.members:,} members in {count} shard(s) ...")
        name = f"shard-reads-{count}-{time.monotonic_ns()}"
        limit = {} if args.log_limit is None else {"log_limit": args.log_limit}
        board = mdss.SortedSet.load(store, name, w.scores, **({"shards": count} if count > 1 else {}), **limit)
        if args.layouts and hasattr(board, "_all_keys"):
            board._all_keys.least = 10**18  # never merged keys: every read through the shards' layouts
        for member, score in w.singles:  # single updates: the logs hold entries (merges fold the rest)
            board.add(member, score)
        board.scores(w.members)
        list(board)  # every node of both trees cached
        boards[count] = board
    limit = {} if args.log_limit is None else {"log_limit": args.log_limit}
    writers = {count: mdss.SortedSet(store, board.name, **limit) for count, board in boards.items()}
    posts = itertools.cycle(w.singles)
    best: dict[int, dict[str, float]] = {count: {} for count in counts}
    for _ in range(args.rounds):
        for count, board in boards.items():
            for what, call, samples in (
                ("rank", board.rank, w.sample_members),
                ("page", lambda offset, board=board: board.range(offset, harness.PAGE), w.offsets),
            ):
                if args.posts_between:
                    p50 = _timed_between_posts(call, samples, writers[count], posts, args.posts_between)
                else:
                    p50 = harness.timed(call, samples)["p50_us"]
                best[count][what] = min(best[count].get(what, p50), p50)
    rows = []
    for count, board in boards.items():
        row: dict[str, Any] = {"shards": count}
        info = board.info()
        row["log_entries"] = info["log_entries"]
        row["rank_p50_us"], row["page_p50_us"] = best[count]["rank"], best[count]["page"]
        row["merged_keys"] = getattr(getattr(board, "_all_keys", None), "keys", None) is not None
        row["keys_made"] = getattr(getattr(board, "_all_keys", None), "made", 0)
        row["writer_merges"] = writers[count].merges
        for what, call, arg in (
            ("rank", board.rank, w.sample_members[0]),
            ("page", lambda offset, board=board: board.range(offset, harness.PAGE), w.offsets[0]),
        ):
            before = store.stats.snapshot()
            call(arg)
            spent = store.stats.since(before)
            row[f"round_trips_per_{what}"] = spent["calls"]
            row[f"bytes_per_{what}"] = spent["bytes_read"]
        row.update(harness.manifests_only(board, w))
        problems = board.check() if args.members <= 200_000 else []
        if problems:
            raise mdss.CorruptDataError(f"the benchmark set failed check(): {problems[:3]}")
        board.drop()
        rows.append(row)
    store.close()
    return rows


def _timed_between_posts(call: Any, args: list[Any], writer: Any, posts: Iterator[Any], n: int) -> float:
    """p50 of ``call(arg)`` in microseconds, with ``n`` single updates posted before each call (untimed) by
    ``writer``, another object of the same set: the reader sees them only through the heads, as it would
    another process's."""
    samples = []
    for arg in args:
        for _ in range(n):
            writer.add(*next(posts))
        start = time.perf_counter_ns()
        call(arg)
        samples.append(time.perf_counter_ns() - start)
    return statistics.median(samples) / 1000


def _table(kind: str, rows: list[dict[str, Any]], args: argparse.Namespace) -> Iterator[str]:
    one = rows[0]
    yield f"\n{kind}, {args.members:,} members, {args.updates:,} updates posted (times in microseconds, best p50)"
    yield (
        f"{'shards':>6} {'rank p50':>9} {'vs S=1':>7} {'page p50':>9} {'vs S=1':>7} {'trips/rank':>10} "
        f"{'trips/page':>10} {'cold: trips/rank':>16} {'trips/page':>10} {'entry sets/page':>15} {'KB/page':>8} "
        f"{'merged keys':>11} {'made':>4} {'merges by writer':>16}"
    )
    for row in rows:
        yield (
            f"{row['shards']:>6} {row['rank_p50_us']:>9,.0f} {row['rank_p50_us'] / one['rank_p50_us']:>6.2f}x "
            f"{row['page_p50_us']:>9,.0f} {row['page_p50_us'] / one['page_p50_us']:>6.2f}x "
            f"{row['round_trips_per_rank']:>10} {row['round_trips_per_page']:>10} "
            f"{row['round_trips_per_rank_manifests_only']:>16.2f} {row['round_trips_per_page_manifests_only']:>10.2f} "
            f"{row['entry_sets_per_page_manifests_only']:>15.2f} {row['bytes_per_page_manifests_only'] / 1024:>8,.1f} "
            f"{'yes' if row['merged_keys'] else 'no':>11} {row['keys_made']:>4} {row['writer_merges']:>16}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stores", default="memory,redis,redis-cluster")
    parser.add_argument("--members", type=int, default=100_000)
    parser.add_argument("--shards", default="1,2,4,8,16,64")
    parser.add_argument("--updates", type=int, default=3000, help="single updates posted before the reads")
    parser.add_argument("--samples", type=int, default=500, help="calls timed per p50")
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds over all shard counts; best p50 kept")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--redis", default=None, help="a Redis URL (default: start a redis-server)")
    parser.add_argument("--redis-cluster", default=None, help="a redis+cluster:// URL (default: start a cluster)")
    parser.add_argument("--json", default=None)
    parser.add_argument(
        "--posts-between",
        type=int,
        default=0,
        help="single updates another object of the set posts before each timed read (a live board)",
    )
    parser.add_argument("--log-limit", type=int, default=None, help="every shard's log limit (default: derived)")
    parser.add_argument(
        "--layouts", action="store_true", help="never merge a sharded set's keys (mdss._allkeys): every read per shard"
    )
    parser.add_argument("--mdss", default=None, help="import mdss from this checkout instead (before/after runs)")
    args = parser.parse_args()
    if args.mdss:  # ahead of an editable install's finder, which would answer first
        sys.meta_path[:] = [finder for finder in sys.meta_path if "__editable__" not in str(finder)]
        sys.path.insert(0, os.path.abspath(args.mdss))
    import mdss

    print(f"mdss from {os.path.dirname(mdss.__file__)}", file=sys.stderr)
    results: dict[str, Any] = {"members": args.members, "updates": args.updates, "samples": args.samples}
    for kind in args.stores.split(","):
        if kind not in ("memory", "redis", "redis-cluster"):
            parser.error(f"unknown store {kind!r}")
        print(f"{kind} ...", file=sys.stderr)
        with _url(kind, args) as url:
            results[kind] = _rows(url, args, lambda text: print(text, file=sys.stderr))
        for line in _table(kind, results[kind], args):
            print(line)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
