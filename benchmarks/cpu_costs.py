"""CPU per call, without a store's latency: thread CPU time of one ``add`` (an append to the update log, its
share of merges included) and of rank, page and around with the update log full and just merged, on the
memory store. CPU time moves less than wall time on a shared machine; the log's cost shows undiluted.

    python benchmarks/cpu_costs.py --members 1000000 --json benchmarks/results/cpu_costs.json
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import mdss
from harness import PAGE, Workload


def cpu_p50(call: Callable[[Any], Any], args: Sequence[Any], passes: int = 5) -> float:
    """The best of ``passes`` medians of thread CPU µs per call, after a warm-up pass over the same args."""
    for arg in args:
        call(arg)
    best = float("inf")
    for _ in range(passes):
        samples = []
        for arg in args:
            start = time.thread_time_ns()
            call(arg)
            samples.append(time.thread_time_ns() - start)
        best = min(best, statistics.median(samples) / 1000)
    return best


def fill(board: mdss.SortedSet, w: Workload, rng: random.Random) -> None:
    """Append random updates until the log is one entry short of its limit."""
    while True:
        info = board.info()
        if info["log_entries"] >= info["log_limit"] - 1:
            return
        board.add(rng.choice(w.members), rng.randrange(0, 100_000))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--members", type=int, default=200_000)
    parser.add_argument("--samples", type=int, default=1000)
    parser.add_argument("--adds", type=int, default=20_000)
    parser.add_argument("--json", help="write the figures to this file")
    args = parser.parse_args()
    w = Workload(args.members, args.samples, 20_000, seed=1, singles=0)
    rng = random.Random(7)
    board = mdss.SortedSet.load(mdss.open_store("memory://"), "cpu", w.scores)
    adds = [(rng.choice(w.members), rng.randrange(0, 100_000)) for _ in range(args.adds)]
    start = time.thread_time_ns()
    for member, score in adds:
        board.add(member, score)
    out: dict[str, Any] = {
        "members": args.members,
        "add_cpu_us": (time.thread_time_ns() - start) / 1000 / len(adds),
        "log_limit": board.info()["log_limit"],
    }
    reads = {
        "rank": (lambda m: board.rank(m), w.sample_members),
        "page": (lambda o: board.range(o, PAGE), w.offsets),
        "around": (lambda m: board.around(m, 5, 5), w.sample_members),
    }
    fill(board, w, rng)
    full = {what: cpu_p50(call, samples) for what, (call, samples) in reads.items()}
    board.merge()
    merged = {what: cpu_p50(call, samples) for what, (call, samples) in reads.items()}
    print(f"{args.members:,} members, log limit {out['log_limit']:,}, memory store, thread CPU time")
    print(f"add (append, merges included): {out['add_cpu_us']:.1f} µs")
    print("| read | full log p50 µs | just merged p50 µs | ratio |")
    print("| --- | ---: | ---: | ---: |")
    for what in reads:
        out[f"{what}_full_log_cpu_us"], out[f"{what}_merged_cpu_us"] = full[what], merged[what]
        print(f"| {what} | {full[what]:.1f} | {merged[what]:.1f} | {full[what] / merged[what]:.2f}x |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)


if __name__ == "__main__":
    main()
