"""A union of two large sets on SQLite beside a load of one of them (issue 38's target: under 3x the load).

    flock -x /tmp/mdss-bench.lock python benchmarks/union.py [--members 1000000] [--overlap 0.5] [--rounds 2]
                                                             [--dir /work/tmp] [--json benchmarks/results/union.json]

Each round, in one process and one fresh SQLite file: ``SortedSet.load`` of set ``a`` (``--members`` members ``m`` + 9
digits, integer scores below 10 N, from a generator), then of set ``b`` (as many members, the last ``--overlap`` of
``a``'s and new ones), then ``mdss.union(store, "u", ["a", "b"])`` and ``mdss.intersection(store, "i", ["a", "b"])``
with the default ``memory_bytes`` (a union of 1.5 N members spills past it, as a load of that size would). Wall times
in seconds and the ratio of each to the load of ``a``; each result is checked against its expected size. Reported:
every round, and the median ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import resource
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from typing import Any

import mdss


def pairs(first: int, count: int, seed: int) -> Iterator[tuple[str, int]]:
    """``count`` members from number ``first`` on, in an order unrelated to either tree's, with random scores."""
    rng = random.Random(seed)
    order = list(range(first, first + count))
    rng.shuffle(order)
    top = 10 * count
    for i in order:
        yield f"m{i:09d}", rng.randrange(top)


def timed(fn: Any) -> tuple[float, Any]:
    began = time.perf_counter()
    out = fn()
    return time.perf_counter() - began, out


def one_round(members: int, overlap: float, directory: str, seed: int) -> dict[str, Any]:
    """Loads of ``a`` and ``b``, then their union and intersection, in a fresh SQLite file."""
    shared = int(members * overlap)
    with tempfile.TemporaryDirectory(dir=directory) as where:
        store = mdss.open_store(f"sqlite:///{os.path.join(where, 'union.db')}")
        load_a, _ = timed(lambda: mdss.SortedSet.load(store, "a", pairs(0, members, seed)))
        load_b, _ = timed(lambda: mdss.SortedSet.load(store, "b", pairs(members - shared, members, seed + 1)))
        union, size = timed(lambda: mdss.union(store, "u", ["a", "b"]))
        assert size == 2 * members - shared == len(mdss.SortedSet(store, "u")), size
        inter, common = timed(lambda: mdss.intersection(store, "i", ["a", "b"]))
        assert common == shared == len(mdss.SortedSet(store, "i")), common
        store.close()
    return {
        "load_a_s": round(load_a, 2),
        "load_b_s": round(load_b, 2),
        "union_s": round(union, 2),
        "intersection_s": round(inter, 2),
        "union_members": size,
        "intersection_members": common,
        "union_over_load": round(union / load_a, 2),
        "intersection_over_load": round(inter / load_a, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--members", type=int, default=1_000_000)
    parser.add_argument("--overlap", type=float, default=0.5)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--dir", default=None, help="where the SQLite files go (the system's temporary directory)")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    rounds = []
    for r in range(args.rounds):
        found = one_round(args.members, args.overlap, args.dir, seed=7 + r)
        rounds.append(found)
        print(f"round {r + 1}: " + ", ".join(f"{k}={v}" for k, v in found.items()), flush=True)
    result = {
        "members": args.members,
        "overlap": args.overlap,
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        "rounds": rounds,
        "median_union_over_load": statistics.median(r["union_over_load"] for r in rounds),
        "median_intersection_over_load": statistics.median(r["intersection_over_load"] for r in rounds),
    }
    print(
        f"median union / load: {result['median_union_over_load']}x, intersection / load: "
        f"{result['median_intersection_over_load']}x (target: union under 3x); peak RSS {result['peak_rss_mb']} MB"
    )
    if args.json:
        with open(args.json, "w") as out:
            json.dump(result, out, indent=1)
            out.write("\n")
    sys.exit(0)


if __name__ == "__main__":
    main()
