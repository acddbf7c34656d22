"""How much of a batched update is CPython's cyclic garbage collector? The memory-store update run, GC on and off.

    python benchmarks/update_gc.py [--members 1000000] [--batch 20000]
    python benchmarks/update_gc.py --profile      # where a batched update's time goes (cProfile, collector on)

Each mode runs in a fresh process, on the workload of ``mdss bench``.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import pstats
import subprocess
import sys
import time

import mdss
from harness import Workload


def run(members: int, batch: int, collect: bool, profile: bool = False) -> float:
    w = Workload(members, 100, batch, 1)
    board = mdss.SortedSet.load(mdss.open_store("memory://"), "b", w.scores, cache_bytes=4 << 30)
    board.scores(w.members[:1000])
    if not collect:
        gc.disable()
    profiler = cProfile.Profile() if profile else None
    start = time.perf_counter()
    if profiler:
        profiler.enable()
    for updates in w.updates:
        board.add_many(updates)
    if profiler:
        profiler.disable()
        pstats.Stats(profiler).sort_stats("tottime").print_stats(12)
    return sum(map(len, w.updates)) / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--members", type=int, default=1_000_000)
    parser.add_argument("--batch", type=int, default=20_000)
    parser.add_argument("--mode", choices=["on", "off"], default=None)
    parser.add_argument("--profile", action="store_true", help="profile the updates only, collector on")
    args = parser.parse_args()
    if args.profile:
        run(args.members, args.batch, True, profile=True)
        return
    if args.mode:
        print(f"{run(args.members, args.batch, args.mode == 'on'):.0f}")
        return
    for mode in ("on", "off"):
        out = subprocess.run(
            [sys.executable, __file__, "--members", str(args.members), "--batch", str(args.batch), "--mode", mode],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        print(f"gc {mode}: {float(out):,.0f} updates/s")


if __name__ == "__main__":
    main()
