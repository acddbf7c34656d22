"""Write throughput with many writers: threads (group commit on or off) and processes, on SQLite and Redis.

    python benchmarks/writers.py [--seconds 5] [--members 100000] [--stores sqlite,redis] [--rtt-ms 0,0.5]
                                 [--rounds 1] [--json FILE]
    python benchmarks/writers.py --cluster [--shards 1,4,16] [--processes 4] [--rtt-ms 0,0.5] [--seconds 10]
                                 [--json FILE]

Each writer calls ``incr`` on random members of a preloaded set for a fixed
time; the table shows operations per second, commits, retries (commits
re-applied after losing the head to another writer) and merges of the update
log. "one commit per call" is the same run with ``max_batch=1``. Each process
writes for one second before the measured ones (its caches warm, as a
long-running writer's are), then all measure the same seconds; process rows
also show the slowest and fastest process, the CPU time of all writer
processes per update, the p99 and maximum time of one update, and the
compare-and-set conflicts (every head compare-and-set that lost, appends
and merges alike), store round trips per update, and how many of the
machine's cores were busy meanwhile (writers and servers alike, from
``/proc/stat``: where they are all busy, the row is bound by CPU). For Redis
the script starts its own redis-server on a free loopback port (or uses
``--redis URL``). ``--rtt-ms 0,0.5`` runs Redis' rows once per round-trip
latency, emulated on the client side (:class:`DelayedStore`, below; 0:
loopback as it is). SQLite is embedded: it has no round trips to delay.

``--cluster`` measures sharded sets (issue 13) instead: ``--processes``
processes post ``incr`` to one logical set on a 3-master Redis Cluster (started
with tests/redis_servers.py, or ``--redis-cluster URL``), once per shard
count, and the table shows total updates per second, compare-and-set
conflicts per update (every head compare-and-set that lost, appends and
merges alike, from the writers' ``store.stats``, divided by the updates),
round trips per rank and per page of 100 (manifests cached), and rank and
page p50 with every node cached, against ``S = 1``; after each row, the
machine's cores busy and its CPU per update (writers and servers), and the
writers' own. Each writer warms up for a second, then all measure the same
seconds. ``--rtt-ms 0,0.5`` runs every
shard count once per round-trip latency, emulated on the client side
(:class:`DelayedStore`; 0: loopback as it is).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import mdss
from mdss.stores.base import Store

WARM_UP = 1.0  # seconds each writer process runs before the measured ones


def _machine_busy() -> tuple[int, int]:
    """The machine's busy and total CPU time so far (``/proc/stat``, in clock ticks; (0, 0) elsewhere)."""
    try:
        with open("/proc/stat") as f:
            ticks = [int(t) for t in f.readline().split()[1:]]
    except OSError:
        return 0, 0
    return sum(ticks) - ticks[3] - ticks[4], sum(ticks)  # idle and iowait are not busy


def _measured(ready: Any, seconds: float) -> float:
    """Release the writers waiting at ``ready`` (this process is its last party), and return how many of
    the machine's cores were busy, on average, over the ``seconds`` they measure: writers, servers and
    anything else alike. A row whose cores are all busy is bound by CPU: a change that lifts it must
    cost less CPU per update, wherever that CPU is spent."""
    ready.wait()
    busy, total = _machine_busy()
    time.sleep(seconds)
    busy_after, total_after = _machine_busy()
    return (busy_after - busy) / max(total_after - total, 1) * (os.cpu_count() or 1)


def _threads(url: str, rtt: float, threads: int, seconds: float, members: int, max_batch: int) -> dict:
    board = mdss.SortedSet(_open(url, rtt), "bench", max_batch=max_batch)
    done = [0] * threads
    deadline = time.monotonic() + seconds

    def work(t: int) -> None:
        rng = random.Random(t)
        while time.monotonic() < deadline:
            board.incr(f"p{rng.randrange(members)}", 1)
            done[t] += 1

    pool = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    start = time.monotonic()
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    elapsed = time.monotonic() - start
    return {
        "ops_per_s": sum(done) / elapsed,
        "commits": board.commits,
        "retries": board.retries,
        "merges": board.merges,
    }


def _process(
    url: str, rtt: float, seed: int, seconds: float, members: int, ready: Any, out: multiprocessing.Queue
) -> None:
    board = mdss.SortedSet(_open(url, rtt), "bench")
    rng, n = random.Random(seed), 0
    warm = time.monotonic() + WARM_UP
    while time.monotonic() < warm:  # fill this process's caches and overlay, as a long-running writer has
        with contextlib.suppress(mdss.ConflictError):
            board.incr(f"p{rng.randrange(members)}", 1)
    commits, retries, merges = board.commits, board.retries, board.merges
    ready.wait()  # every process measures the same seconds
    cpu, latencies, before = time.process_time(), [], board.store.stats.snapshot()
    deadline = time.monotonic() + seconds
    failures = 0
    while time.monotonic() < deadline:
        start = time.perf_counter()
        try:
            board.incr(f"p{rng.randrange(members)}", 1)
            n += 1
        except mdss.ConflictError:
            failures += 1
        latencies.append(time.perf_counter() - start)
    cost = board.store.stats.since(before)
    out.put(
        {
            "ops": n,
            "cpu": time.process_time() - cpu,
            "conflicts": cost["conflicts"],
            "calls": cost["calls"],
            "latencies": latencies,
            "commits": board.commits - commits,
            "retries": board.retries - retries,
            "merges": board.merges - merges,
            "conflict_errors": failures,
        }
    )


def _processes(url: str, rtt: float, processes: int, seconds: float, members: int) -> dict:
    ctx = multiprocessing.get_context("spawn")
    out, ready = ctx.Queue(), ctx.Barrier(processes + 1)
    procs = [ctx.Process(target=_process, args=(url, rtt, p, seconds, members, ready, out)) for p in range(processes)]
    for proc in procs:
        proc.start()
    cores = _measured(ready, seconds)
    results = [out.get() for _ in procs]
    for proc in procs:
        proc.join()
    ops = sum(r["ops"] for r in results)
    latencies = sorted(t for r in results for t in r["latencies"])
    return {
        "ops_per_s": ops / seconds,
        "process_ops_per_s": sorted(r["ops"] / seconds for r in results),  # the slowest writer first
        "cpu_us_per_op": sum(r["cpu"] for r in results) / max(ops, 1) * 1e6,  # all writer processes' CPU
        "cores_busy": cores,  # the machine's, servers included
        # every head compare-and-set that lost (appends and merges), and every store call, per update
        "conflicts_per_update": sum(r["conflicts"] for r in results) / max(ops, 1),
        "round_trips_per_update": sum(r["calls"] for r in results) / max(ops, 1),
        "p99_ms": latencies[int(0.99 * (len(latencies) - 1))] * 1e3,
        "max_ms": latencies[-1] * 1e3,
        "commits": sum(r["commits"] for r in results),
        "retries": sum(r["retries"] for r in results),
        "merges": sum(r["merges"] for r in results),
        "conflict_errors": sum(r["conflict_errors"] for r in results),
    }


def _rows(url: str, seconds: float, members: int, rtt: float = 0.0, rounds: int = 1) -> list[dict]:
    """The threads rows, then the process rows ``rounds`` times over (1, 2, 4, 1, 2, 4, ...): on a noisy
    machine one round's "4 against 1" moves by a tenth either way, so their median is the figure."""
    mdss.SortedSet.load(mdss.open_store(url), "bench", {f"p{i}": i for i in range(members)}, replace=True)
    rows = []
    for threads in (1, 4):
        for label, max_batch in (("group commit", 1000), ("one commit per call", 1)):
            row = _threads(url, rtt, threads, seconds, members, max_batch)
            rows.append({"writers": f"{threads} threads", "mode": label, "rtt_ms": rtt * 1000, **row})
    for round_ in range(1, rounds + 1):
        for processes in (1, 2, 4):
            row = _processes(url, rtt, processes, seconds, members)
            mode = "one object each" if rounds == 1 else f"round {round_}"
            rows.append({"writers": f"{processes} processes", "mode": mode, "rtt_ms": rtt * 1000, **row})
    return rows


def _ratios(rows: list[dict]) -> dict[str, list[float]]:
    """Each round's total updates/s of 2 and of 4 processes against 1 process's of the same round."""
    ops = [{r["writers"]: r["ops_per_s"] for r in rows[i : i + 3]} for i in range(4, len(rows), 3)]
    return {n: [o[f"{n} processes"] / o["1 processes"] for o in ops] for n in ("2", "4")}


@contextlib.contextmanager
def _redis(url: str | None) -> Iterator[str]:
    """``url``, or a redis-server of our own on a free loopback port, stopped afterwards."""
    if url:
        yield url
        return
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.TemporaryDirectory() as directory:
        argv = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        proc = subprocess.Popen([*argv, "--dir", directory], stdout=subprocess.DEVNULL)
        try:
            for _ in range(100):
                with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.1):
                    break
                time.sleep(0.05)
            yield f"redis://127.0.0.1:{port}/0"
        finally:
            proc.terminate()
            proc.wait()


class DelayedStore(Store):
    """Emulated network latency, on the client side: every store call waits ``rtt / 2`` before it reaches the
    store and ``rtt / 2`` after its answer, asleep (the CPU is free meanwhile, as on a network).

    A stand-in for ``tc qdisc ... netem delay`` on a veth pair into a network
    namespace holding the cluster: network namespaces work on this machine,
    but its kernel has no ``netem`` qdisc (nor ``fq`` for departure-time
    delays). Redis Cluster's batched calls (one pipeline per master, in
    parallel) count as one round trip, as they take about one on a network.
    """

    def __init__(self, inner: Store, rtt: float) -> None:
        super().__init__(namespace=inner.namespace)
        self.inner, self.half = inner, rtt / 2
        self.appends = inner.appends

    def _call(self, name: str, *args: Any) -> Any:
        time.sleep(self.half)
        try:
            return getattr(self.inner, name)(*args)
        finally:
            time.sleep(self.half)

    def _get(self, key: str) -> Any:
        return self._call("_get", key)

    def _get_many(self, keys: Any) -> Any:
        return self._call("_get_many", keys)

    def _put(self, key: str, value: bytes, context: Any) -> None:
        self._call("_put", key, value, context)

    def _put_many(self, items: Any) -> None:
        self._call("_put_many", items)

    def _cas(self, key: str, value: bytes, version: Any) -> Any:
        return self._call("_cas", key, value, version)

    def _append(self, key: str, held: bytes, sha: bytes, seen: int, record: bytes, cap: int) -> Any:
        return self._call("_append", key, held, sha, seen, record, cap)

    def _swap(self, key: str, held: bytes, sha: bytes, seen: int, core: bytes, record: bytes, cap: int) -> Any:
        return self._call("_swap", key, held, sha, seen, core, record, cap)

    def _delete(self, key: str) -> None:
        self._call("_delete", key)

    def _delete_if(self, key: str, version: Any) -> None:
        self._call("_delete_if", key, version)

    def _delete_many(self, keys: Any) -> None:
        self._call("_delete_many", keys)

    def _keys(self, prefix: str) -> Any:
        return self._call("_keys", prefix)

    def _close(self) -> None:
        self.inner.close()


def _open(url: str, rtt: float) -> Store:
    store = mdss.open_store(url)
    return DelayedStore(store, rtt) if rtt else store


def _sharded_process(
    url: str, rtt: float, name: str, seed: int, seconds: float, members: int, ready: Any, out: multiprocessing.Queue
) -> None:
    store = _open(url, rtt)
    board = mdss.SortedSet(store, name)
    rng, n, failures = random.Random(seed), 0, 0
    warm = time.monotonic() + WARM_UP
    while time.monotonic() < warm:  # fill this process's caches and overlays, as a long-running writer has
        with contextlib.suppress(mdss.ConflictError):
            board.incr(f"p{rng.randrange(members)}", 1)
    merges, retries = board.merges, board.retries
    ready.wait()  # every process measures the same seconds
    before, cpu = store.stats.snapshot(), time.process_time()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            board.incr(f"p{rng.randrange(members)}", 1)
            n += 1
        except mdss.ConflictError:
            failures += 1
    cost = store.stats.since(before)
    out.put(
        {
            "ops": n,
            "cpu": time.process_time() - cpu,
            "conflicts": cost["conflicts"],
            "calls": cost["calls"],
            "conflict_errors": failures,
            "merges": board.merges - merges,
            "retries": board.retries - retries,
        }
    )


def _p50_us(call: Callable[[int], object], n: int) -> float:
    times = []
    for i in range(n):
        start = time.perf_counter()
        call(i)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e6


def _sharded_row(url: str, rtt: float, shards: int, processes: int, seconds: float, members: int) -> dict:
    """One logical set of ``shards`` shards: ``processes`` writers, then reads from this process."""
    from mdss._tree import Leaf

    store = _open(url, rtt)
    name = f"writers-{shards}-{time.monotonic_ns()}"
    options = {"shards": shards} if shards > 1 else {}
    mdss.SortedSet.load(mdss.open_store(url), name, {f"p{i}": i for i in range(members)}, **options)
    ctx = multiprocessing.get_context("spawn")
    out, ready = ctx.Queue(), ctx.Barrier(processes + 1)
    procs = [
        ctx.Process(target=_sharded_process, args=(url, rtt, name, p, seconds, members, ready, out))
        for p in range(processes)
    ]
    for proc in procs:
        proc.start()
    cores = _measured(ready, seconds)
    results = [out.get() for _ in procs]
    for proc in procs:
        proc.join()
    ops = sum(r["ops"] for r in results)
    board = mdss.SortedSet(store, name)
    board.merge()
    rng = random.Random(7)
    ranked = [f"p{rng.randrange(members)}" for _ in range(200)]
    offsets = [rng.randrange(members - 100) for _ in range(200)]

    def manifests_only() -> None:
        for key in [k for k, (node, _) in board.engines[0].cache._nodes.items() if isinstance(node, Leaf)]:
            board.engines[0].cache.discard(key)

    board.scores([e.member for e in board])  # every node of both trees in the cache
    trips = {"rank": 0, "page": 0}
    for i in range(50):
        calls = (("rank", lambda i=i: board.rank(ranked[i])), ("page", lambda i=i: board.range(offsets[i], 100)))
        for what, call in calls:
            manifests_only()
            before = store.stats.snapshot()
            call()
            trips[what] += store.stats.since(before)["calls"]
    board.scores([e.member for e in board])
    row = {
        "rtt_ms": rtt * 1000,
        "trip_us": _trip_us(store, board),
        "shards": shards,
        "processes": processes,
        "updates_per_s": ops / seconds,
        "cores_busy": cores,  # the machine's: writers and the cluster's servers
        "cpu_us_per_update": cores * seconds / max(ops, 1) * 1e6,  # the machine's CPU, servers included
        "writer_cpu_us_per_update": sum(r["cpu"] for r in results) / max(ops, 1) * 1e6,
        "conflicts_per_update": sum(r["conflicts"] for r in results) / max(ops, 1),
        "conflict_errors": sum(r["conflict_errors"] for r in results),
        "merges": sum(r["merges"] for r in results),
        "retries": sum(r["retries"] for r in results),
        "round_trips_per_update": sum(r["calls"] for r in results) / max(ops, 1),
        "round_trips_per_rank": trips["rank"] / 50,
        "round_trips_per_page": trips["page"] / 50,
        "rank_p50_us": _p50_us(lambda i: board.rank(ranked[i]), len(ranked)),
        "page_p50_us": _p50_us(lambda i: board.range(offsets[i], 100), len(offsets)),
    }
    problems = board.check()
    if problems:
        raise mdss.CorruptDataError(f"the benchmark set failed check(): {problems[:3]}")
    board.drop()
    store.close()
    return row


def _trip_us(store: Store, board: Any) -> float:
    """The median round trip of a head read, as the writers saw it (with the emulated latency, if any)."""
    key = board.engines[0].keys.head
    return _p50_us(lambda i: store.get(key), 200)


@contextlib.contextmanager
def _cluster(url: str | None) -> Iterator[str]:
    """``url``, or a 3-master Redis Cluster of our own (tests/redis_servers.py), stopped afterwards."""
    if url:
        yield url
        return
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))
    from redis_servers import redis_cluster

    with redis_cluster(3) as ports:
        yield "redis+cluster://" + ",".join(f"127.0.0.1:{p}" for p in ports)


def _cluster_main(args: argparse.Namespace) -> None:
    rtts = [float(ms) / 1000 for ms in args.rtt_ms.split(",")]
    shards = [int(s) for s in args.shards.split(",")]
    with _cluster(args.redis_cluster) as url:
        rows = [_sharded_row(url, rtt, s, args.processes, args.seconds, args.members) for rtt in rtts for s in shards]
    print(f"\nredis cluster (3 masters), {args.members:,} members, {args.processes} processes, {args.seconds:g} s each")
    for rtt in rtts:
        regime = [row for row in rows if row["rtt_ms"] == rtt * 1000]
        one = regime[0]
        added = f"{rtt * 1000:g} ms round trips added on the client side" if rtt else "loopback, no added latency"
        print(f"\n{added} (a head read: {one['trip_us']:,.0f} us p50)")
        print(
            f"{'shards':>6} {'updates/s':>10} {'vs S=1':>7} {'conflicts/update':>17} {'trips/rank':>10} "
            f"{'trips/page':>10} {'rank p50 us':>11} {'vs S=1':>7} {'page p50 us':>11} {'vs S=1':>7}"
        )
        for row in regime:
            print(
                f"{row['shards']:>6} {row['updates_per_s']:>10,.0f} "
                f"{row['updates_per_s'] / one['updates_per_s']:>6.2f}x "
                f"{row['conflicts_per_update']:>17.3f} {row['round_trips_per_rank']:>10.2f} "
                f"{row['round_trips_per_page']:>10.2f} {row['rank_p50_us']:>11,.0f} "
                f"{row['rank_p50_us'] / one['rank_p50_us']:>6.2f}x {row['page_p50_us']:>11,.0f} "
                f"{row['page_p50_us'] / one['page_p50_us']:>6.2f}x   "
                f"(trips/update {row['round_trips_per_update']:.2f}, retries {row['retries']:,}, "
                f"merges {row['merges']:,}; cores busy {row['cores_busy']:.2f} of {os.cpu_count()}, CPU per update "
                f"{row['cpu_us_per_update']:,.0f} us, writers' {row['writer_cpu_us_per_update']:,.0f} us)"
            )
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"members": args.members, "seconds": args.seconds, "cluster": rows}, f, indent=1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--members", type=int, default=100_000)
    parser.add_argument("--stores", default="sqlite,redis")
    parser.add_argument("--redis", default=None, help="a Redis URL (default: start a redis-server)")
    parser.add_argument("--json", default=None)
    parser.add_argument("--rounds", type=int, default=1, help="process rows this many times over (see _rows)")
    parser.add_argument("--cluster", action="store_true", help="sharded sets on a Redis Cluster (see above)")
    parser.add_argument("--redis-cluster", default=None, help="a redis+cluster:// URL (default: start a cluster)")
    parser.add_argument("--shards", default="1,4,16", help="shard counts for --cluster")
    parser.add_argument("--processes", type=int, default=4, help="writer processes for --cluster")
    parser.add_argument(
        "--rtt-ms",
        default="0",
        help="round-trip latencies (ms, comma-separated) to emulate per store call (DelayedStore): for --cluster, "
        "and for Redis' rows",
    )
    args = parser.parse_args()
    if args.cluster:
        _cluster_main(args)
        return
    results = {}
    for store in args.stores.split(","):
        if store == "sqlite":
            with tempfile.TemporaryDirectory() as directory:
                url = f"sqlite:///{os.path.join(directory, 'writers.db')}"
                results[store] = _rows(url, args.seconds, args.members, rounds=args.rounds)
        elif store == "redis":
            with _redis(args.redis) as url:
                for rtt in [float(ms) / 1000 for ms in args.rtt_ms.split(",")]:
                    key = "redis" if not rtt else f"redis, {rtt * 1000:g} ms round trips added on the client side"
                    results[key] = _rows(url, args.seconds, args.members, rtt, args.rounds)
        else:
            parser.error(f"unknown store {store!r}")
    for store, rows in results.items():
        print(f"\n{store}, {args.members:,} members, {args.seconds:g} s per row")
        print(
            f"{'writers':<12} {'mode':<20} {'ops/s':>9} {'commits':>8} {'retries':>8} {'merges':>7}   "
            "processes: slowest..fastest ops/s, CPU us/op, p99 / max ms per update, conflicts and round trips "
            "per update, the machine's cores busy"
        )
        for row in rows:
            line = (
                f"{row['writers']:<12} {row['mode']:<20} {row['ops_per_s']:>9,.0f} {row['commits']:>8,} "
                f"{row['retries']:>8,} {row['merges']:>7,}"
            )
            if "process_ops_per_s" in row:
                each = row["process_ops_per_s"]
                line += (
                    f"   {each[0]:,.0f}..{each[-1]:,.0f}, {row['cpu_us_per_op']:,.0f}, "
                    f"{row['p99_ms']:.2f} / {row['max_ms']:,.0f}, {row['conflicts_per_update']:.3f}, "
                    f"{row['round_trips_per_update']:.2f}, {row['cores_busy']:.2f} of {os.cpu_count()}"
                )
            print(line)
        for n, ratios in _ratios(rows).items():
            listed = ", ".join(f"{r:.2f}" for r in ratios)
            print(f"{n} processes against 1, per round: {listed}; median {statistics.median(ratios):.2f}x")
    if args.json:
        with open(args.json, "w") as f:
            ratios = {store: _ratios(rows) for store, rows in results.items()}
            found = {"members": args.members, "seconds": args.seconds, "stores": results, "ratios": ratios}
            json.dump(found, f, indent=1)


if __name__ == "__main__":
    main()
