"""Write throughput with many writers: threads (group commit on or off) and processes, on SQLite and Redis.

    python benchmarks/writers.py [--seconds 5] [--members 100000] [--stores sqlite,redis] [--json FILE]

Each writer calls ``incr`` on random members of a preloaded set for a fixed
time; the table shows operations per second, commits, retries (commits
re-applied after losing the head to another writer) and merges of the update
log. "one commit per call" is the same run with ``max_batch=1``. Each process
writes for one second before the measured ones (its caches warm, as a
long-running writer's are), then all measure the same seconds. For Redis
the script starts its own redis-server on a free loopback port (or uses
``--redis URL``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import random
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from typing import Any

import mdss

WARM_UP = 1.0  # seconds each writer process runs before the measured ones


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
    return {
        "ops_per_s": sum(done) / elapsed,
        "commits": board.commits,
        "retries": board.retries,
        "merges": board.merges,
    }


def _process(url: str, seed: int, seconds: float, members: int, ready: Any, out: multiprocessing.Queue) -> None:
    board = mdss.SortedSet(mdss.open_store(url), "bench")
    rng, n = random.Random(seed), 0
    warm = time.monotonic() + WARM_UP
    while time.monotonic() < warm:  # fill this process's caches and overlay, as a long-running writer has
        with contextlib.suppress(mdss.ConflictError):
            board.incr(f"p{rng.randrange(members)}", 1)
    commits, retries, merges = board.commits, board.retries, board.merges
    ready.wait()  # every process measures the same seconds
    deadline = time.monotonic() + seconds
    failures = 0
    while time.monotonic() < deadline:
        try:
            board.incr(f"p{rng.randrange(members)}", 1)
            n += 1
        except mdss.ConflictError:
            failures += 1
    out.put(
        {
            "ops": n,
            "commits": board.commits - commits,
            "retries": board.retries - retries,
            "merges": board.merges - merges,
            "conflict_errors": failures,
        }
    )


def _processes(url: str, processes: int, seconds: float, members: int) -> dict:
    ctx = multiprocessing.get_context("spawn")
    out, ready = ctx.Queue(), ctx.Barrier(processes)
    procs = [ctx.Process(target=_process, args=(url, p, seconds, members, ready, out)) for p in range(processes)]
    for proc in procs:
        proc.start()
    results = [out.get() for _ in procs]
    for proc in procs:
        proc.join()
    return {
        "ops_per_s": sum(r["ops"] for r in results) / seconds,
        "commits": sum(r["commits"] for r in results),
        "retries": sum(r["retries"] for r in results),
        "merges": sum(r["merges"] for r in results),
        "conflict_errors": sum(r["conflict_errors"] for r in results),
    }


def _rows(url: str, seconds: float, members: int) -> list[dict]:
    mdss.SortedSet.load(mdss.open_store(url), "bench", {f"p{i}": i for i in range(members)}, replace=True)
    rows = []
    for threads in (1, 4):
        for label, max_batch in (("group commit", 1000), ("one commit per call", 1)):
            rows.append(
                {"writers": f"{threads} threads", "mode": label, **_threads(url, threads, seconds, members, max_batch)}
            )
    for processes in (1, 2, 4):
        row = _processes(url, processes, seconds, members)
        rows.append({"writers": f"{processes} processes", "mode": "one object each", **row})
    return rows


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--members", type=int, default=100_000)
    parser.add_argument("--stores", default="sqlite,redis")
    parser.add_argument("--redis", default=None, help="a Redis URL (default: start a redis-server)")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    results = {}
    for store in args.stores.split(","):
        if store == "sqlite":
            with tempfile.TemporaryDirectory() as directory:
                results[store] = _rows(f"sqlite:///{os.path.join(directory, 'writers.db')}", args.seconds, args.members)
        elif store == "redis":
            with _redis(args.redis) as url:
                results[store] = _rows(url, args.seconds, args.members)
        else:
            parser.error(f"unknown store {store!r}")
    for store, rows in results.items():
        print(f"\n{store}, {args.members:,} members, {args.seconds:g} s per row")
        print(f"{'writers':<12} {'mode':<20} {'ops/s':>9} {'commits':>8} {'retries':>8} {'merges':>7}")
        for row in rows:
            print(
                f"{row['writers']:<12} {row['mode']:<20} {row['ops_per_s']:>9,.0f} {row['commits']:>8,} "
                f"{row['retries']:>8,} {row['merges']:>7,}"
            )
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"members": args.members, "seconds": args.seconds, "stores": results}, f, indent=1)


if __name__ == "__main__":
    main()
