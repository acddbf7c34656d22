"""Sets from 10^5 to 10^8 members on SQLite: load rate and peak memory, size, reads cold and warm, update cost.

    python benchmarks/massive.py [--sizes 100000,1000000,10000000,100000000] [--dir /work/tmp] [--updates 20000]
                                 [--age-most 20] [--json benchmarks/results/massive.json]

For each N, in fresh processes (so that peak memory and a cold cache are each one's own):

1. **load**: ``SortedSet.load`` of N members (``m`` + 9 digits, integer scores below 10 N, in an order unrelated to
   either tree's) from a generator into a new SQLite file, with the default ``memory_bytes``. Members per second,
   and the process' peak resident memory (``ru_maxrss``), which includes the interpreter and the generator.
2. **reads**: rank, a page of 25 at a random offset, and 25 around a member, each over 500 random members; cold is
   each call's first run in a process that has read nothing yet, warm the same calls again. p50 in µs, and round
   trips per call. The reads start once the load's writes are on disk (``os.sync``, timed apart): while the OS
   still writes back a 10^8 load's gigabytes, a read waits on that, not on mdss. And they start with the SQLite
   file in the OS page cache (read through once, timed apart), as a 10^6 file always is: a 10^8 file fresh from
   its load is only partly there (1.8 of 2.5 GB in one run here), and a rank that reads an entry set from the disk
   waits about 1 ms for it, which measures the disk and the OS's caching, not mdss. With ``--os-cold`` the reads
   are measured a second time after the OS drops its page cache (root only: ``/proc/sys/vm/drop_caches``), as
   ``reads_os_cold``: mdss cold and the OS cold too.
3. **updates**: first the set is *aged*: batches of 1,000 random updates (``add_many``, into the log like single
   ones) until it merged about as often as it takes its entry sets' patches to reach their steady sizes (each entry
   set takes ``patch_most`` changes before it is rewritten whole, at about ``log limit / entry sets`` changes per
   merge: ``AGE`` times that many merges, at most ``--age-most``). A set fresh from a load has no patches, and its
   first merges write small ones: measured then, a merge costs less than it will. Then single ``add`` calls of random
   members to new scores, at least ``--updates`` and until the process merged ``MERGES`` times more (each merge at the
   default log limit: up to 100,000 updates), with bytes written and round trips per update from the store's
   counters.

Bytes per member is the SQLite file's size after the load over N. The file is deleted after each N.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import os
import random
import resource
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import mdss
from mdss import _writer

SAMPLES = 500
#: The merges an update run includes at least, after the aging.
MERGES = 3
#: How many patch lifetimes (``patch_most`` changes per entry set) the aging spans.
AGE = 1.5


def _pairs(n: int) -> Iterator[tuple[str, int]]:
    """N distinct members in a scattered order (i -> i * a prime mod n: a permutation when n is not its multiple),
    scores below 10 N scattered by a multiplicative hash (cheaper to make than random ones: the input's cost is the
    application's, not the load's)."""
    step, span = 1_000_003, 10 * n
    return ((f"m{k:09d}", k * 2_654_435_761 % span) for k in (i * step % n for i in range(n)))


def _load(path: str, n: int, out: Any) -> None:
    store = mdss.open_store(f"sqlite:///{path}")
    t = time.perf_counter()
    mdss.SortedSet.load(store, "s", _pairs(n))
    took = time.perf_counter() - t
    out.put(
        {
            "load_per_s": n / took,
            "load_s": took,
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        }
    )


def _timed(call: Callable[[], Any]) -> float:
    t = time.perf_counter_ns()
    call()
    return (time.perf_counter_ns() - t) / 1000


def _reads(path: str, n: int, out: Any) -> None:
    store = mdss.open_store(f"sqlite:///{path}")
    sset = mdss.SortedSet(store, "s")
    rng = random.Random(2)
    members = [f"m{rng.randrange(n):09d}" for _ in range(SAMPLES)]
    offsets = [rng.randrange(n - 25) for _ in range(SAMPLES)]
    calls = {
        "rank": [lambda m=m: sset.rank(m) for m in members],
        "page": [lambda o=o: sset.range(o, 25) for o in offsets],
        "around": [lambda m=m: sset.around(m, 12, 12) for m in members],
    }
    result: dict[str, Any] = {}
    for what, batch in calls.items():  # cold, then warm, one kind at a time
        before = store.stats.snapshot()
        cold = [_timed(c) for c in batch]
        trips = store.stats.since(before)["calls"] / len(batch)
        warm = [_timed(c) for c in batch]
        result[what] = {
            "cold_p50_us": statistics.median(cold),
            "warm_p50_us": statistics.median(warm),
            "round_trips_cold": trips,
        }
    out.put(result)


def _age_merges(sset: mdss.SortedSet, n: int, most: int) -> int:
    """The merges that bring the patches of a set of ``n`` members fresh from a load to their steady sizes."""
    leaves = n / sset.chunk_size
    per_merge = sset.info()["log_limit"] / leaves  # changes per entry set per merge, in the member index
    return min(most, math.ceil(AGE * _writer.patch_most(sset.chunk_size) / per_merge))


def _updates(path: str, n: int, least: int, age_most: int, out: Any) -> None:
    store = mdss.open_store(f"sqlite:///{path}")
    sset = mdss.SortedSet(store, "s")
    rng = random.Random(3)
    aged, t = _age_merges(sset, n, age_most), time.perf_counter()
    curve, mark, done = [], store.stats.snapshot(), 0  # bytes written per update in each merge's span of the aging
    while sset.merges < aged:
        sset.add_many([(f"m{rng.randrange(n):09d}", rng.randrange(10 * n)) for _ in range(1000)])
        done += 1000
        if sset.merges > len(curve):
            curve.append(round(store.stats.since(mark)["bytes_written"] / done))
            mark, done = store.stats.snapshot(), 0
    aging_s = time.perf_counter() - t
    before = store.stats.snapshot()
    t = time.perf_counter()
    count = 0
    while count < least or sset.merges < aged + MERGES:
        for _ in range(1000):
            sset.add(f"m{rng.randrange(n):09d}", rng.randrange(10 * n))
        count += 1000
    took = time.perf_counter() - t
    spent = store.stats.since(before)
    out.put(
        {
            "aged_merges": aged,
            "aging_bytes_per_update": curve,
            "aging_s": aging_s,
            "log_limit": sset.info()["log_limit"],
            "updates": count,
            "merges": sset.merges - aged,
            "updates_per_s": count / took,
            "bytes_written_per_update": spent["bytes_written"] / count,
            "round_trips_per_update": spent["calls"] / count,
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        }
    )


def _into_os_cache(path: str) -> float:
    """Read the set's SQLite files through once, so that the OS holds them in its page cache: seconds taken."""
    t = time.perf_counter()
    for suffix in ("", "-wal"):
        if os.path.exists(path + suffix):
            with open(path + suffix, "rb", buffering=0) as f:
                while f.read(8 << 20):
                    pass
    return time.perf_counter() - t


def _drop_os_cache() -> None:
    """Have the OS drop its clean cached pages (written ones first: ``os.sync``); root only."""
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def _in_child(target: Callable[..., None], *args: Any) -> dict[str, Any]:
    queue: Any = multiprocessing.get_context("spawn").Queue()
    child = multiprocessing.get_context("spawn").Process(target=target, args=(*args, queue))
    child.start()
    while True:
        try:
            found = queue.get(timeout=5)
            break
        except Exception:  # queue.Empty
            if not child.is_alive():
                raise SystemExit(f"{target.__name__} failed (exit code {child.exitcode})") from None
    child.join()
    return found


def measure(n: int, directory: str, updates: int, age_most: int, os_cold: bool = False) -> dict[str, Any]:
    path = os.path.join(directory, f"massive-{n}.db")
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(path + suffix):
            os.remove(path + suffix)
    try:
        row: dict[str, Any] = {"members": n, **_in_child(_load, path, n)}
        print(f"{n:,}: load {row['load_per_s']:,.0f}/s, peak {row['peak_rss_mb']:,.0f} MB", file=sys.stderr, flush=True)
        row["bytes_per_member"] = sum(os.path.getsize(path + s) for s in ("", "-wal") if os.path.exists(path + s)) / n
        synced = time.perf_counter()
        os.sync()
        row["sync_s"] = time.perf_counter() - synced
        row["os_cache_s"] = _into_os_cache(path)
        row["reads"] = _in_child(_reads, path, n)
        if os_cold:
            _drop_os_cache()
            row["reads_os_cold"] = _in_child(_reads, path, n)
        if updates:
            row["updates"] = _in_child(_updates, path, n, updates, age_most)
        return row
    finally:
        for suffix in ("", "-wal", "-shm"):
            if os.path.exists(path + suffix):
                os.remove(path + suffix)


def report(row: dict[str, Any]) -> str:
    reads, up = row["reads"], row.get("updates")
    return (
        f"{row['members']:>12,}  load {row['load_per_s']:>9,.0f}/s  peak {row['peak_rss_mb']:>6,.0f} MB  "
        f"{row['bytes_per_member']:5.1f} B/member  "
        + "  ".join(
            f"{k} {v['cold_p50_us']:,.0f}/{v['warm_p50_us']:,.0f} us ({v['round_trips_cold']:.1f} RT)"
            for k, v in reads.items()
        )
        + (
            f"  update {up['bytes_written_per_update']:,.0f} B {up['round_trips_per_update']:.2f} RT"
            f" (after {up['aged_merges']} merges of aging)"
            if up
            else ""
        )
        + (
            "  OS cold: " + "  ".join(f"{k} {v['cold_p50_us']:,.0f} us" for k, v in row["reads_os_cold"].items())
            if "reads_os_cold" in row
            else ""
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="100000,1000000,10000000,100000000")
    parser.add_argument("--dir", default=".", help="where the SQLite files (and a load's spill) go")
    parser.add_argument("--updates", type=int, default=20_000, help="at least this many single updates; 0: none")
    parser.add_argument("--age-most", type=int, default=20, help="the most merges the aging runs")
    parser.add_argument("--json", default=None)
    parser.add_argument("--os-cold", action="store_true", help="reads again after dropping the OS page cache (root)")
    args = parser.parse_args()
    rows = []
    for n in map(int, args.sizes.split(",")):
        row = measure(n, args.dir, args.updates, args.age_most, args.os_cold)
        rows.append(row)
        print(report(row), flush=True)
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
