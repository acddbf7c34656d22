"""Write throughput with many writers: threads (group commit on or off) and processes, on SQLite.

    python benchmarks/writers.py [--seconds 5] [--members 100000] [--json benchmarks/results/writers.json]

Each writer calls ``incr`` on random members of a preloaded set for a fixed
time; the table shows operations per second, commits, and retries (commits
re-applied after losing the head to another writer). "one commit per call"
is the same run with ``max_batch=1``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import random
import tempfile
import threading
import time

import mdss


def _threads(url: str, threads: int, seconds: float, members: int, max_batch: int) -> dict:
    board = mdss.SortedSet(mdss.open_store(url), "bench", max_batch=max_batch)
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
    return {"ops_per_s": sum(done) / elapsed, "commits": board.commits, "retries": board.retries}


def _process(url: str, seed: int, seconds: float, members: int, out: multiprocessing.Queue) -> None:
    board = mdss.SortedSet(mdss.open_store(url), "bench")
    rng, n = random.Random(seed), 0
    deadline = time.monotonic() + seconds
    failures = 0
    while time.monotonic() < deadline:
        try:
            board.incr(f"p{rng.randrange(members)}", 1)
            n += 1
        except mdss.ConflictError:
            failures += 1
    out.put({"ops": n, "commits": board.commits, "retries": board.retries, "conflict_errors": failures})


def _processes(url: str, processes: int, seconds: float, members: int) -> dict:
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_process, args=(url, p, seconds, members, out)) for p in range(processes)]
    for proc in procs:
        proc.start()
    results = [out.get() for _ in procs]
    for proc in procs:
        proc.join()
    return {
        "ops_per_s": sum(r["ops"] for r in results) / seconds,
        "commits": sum(r["commits"] for r in results),
        "retries": sum(r["retries"] for r in results),
        "conflict_errors": sum(r["conflict_errors"] for r in results),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--members", type=int, default=100_000)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        url = f"sqlite:///{os.path.join(directory, 'writers.db')}"
        mdss.SortedSet.load(mdss.open_store(url), "bench", {f"p{i}": i for i in range(args.members)})
        rows = []
        for threads in (1, 2, 4, 8):
            for label, max_batch in (("group commit", 1000), ("one commit per call", 1)):
                row = _threads(url, threads, args.seconds, args.members, max_batch)
                rows.append({"writers": f"{threads} threads", "mode": label, **row})
        for processes in (1, 2, 4):
            rows.append(
                {
                    "writers": f"{processes} processes",
                    "mode": "one object each",
                    **_processes(url, processes, args.seconds, args.members),
                }
            )
    print(f"{'writers':<12} {'mode':<20} {'ops/s':>9} {'commits':>8} {'retries':>8}")
    for row in rows:
        print(
            f"{row['writers']:<12} {row['mode']:<20} {row['ops_per_s']:>9,.0f} {row['commits']:>8,} "
            f"{row['retries']:>8,}"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"store": "sqlite", "members": args.members, "seconds": args.seconds, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
