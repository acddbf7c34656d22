"""Peak memory and time of a board load and of a big merge on SQLite, each in a fresh process.

    python benchmarks/load_memory.py board [--rows 2000000] [--memory-mb 256] [--dir .]
    python benchmarks/load_memory.py merge [--members 10000000] [--updates 100000] [--dir .]

``board``: ``Leaderboard.load`` of ``--rows`` rows (one descending column, an accumulated field, the ``all`` window)
from a generator; rows per second and the process' peak resident memory (``ru_maxrss``). Past about 125,000 rows per
256 MiB the rows are spilled (``mdss/_board_load.py``). ``merge``: a set of ``--members`` loaded, then ``--updates``
single adds with the log limit out of the way, then one ``merge()``: its seconds, round trips, and the peak of the
process before and after it.
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import tempfile
import time
from typing import Any

import mdss
from massive import _in_child, _pairs


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _board(path: str, rows: int, memory_mb: int, out: Any) -> None:
    board = mdss.Leaderboard(mdss.open_store(f"sqlite:///{path}"), "g", columns={"xp": "desc"}, accumulate=["kills"])
    span = 10 * rows
    given = (
        (f"player-{k:09d}", {"xp": k * 2_654_435_761 % span, "kills": 1})
        for k in (i * 1_000_003 % rows for i in range(rows))
    )
    t = time.perf_counter()
    loaded = board.load(given, memory_bytes=memory_mb << 20)
    out.put({"rows": loaded, "rows_per_s": rows / (time.perf_counter() - t), "peak_mb": _peak_mb()})


def _merge(path: str, members: int, updates: int, out: Any) -> None:
    store = mdss.open_store(f"sqlite:///{path}")
    mdss.SortedSet.load(store, "s", _pairs(members))
    sset = mdss.SortedSet(store, "s", log_limit=10**9)
    rng = random.Random(3)
    for _ in range(updates):
        sset.add(f"m{rng.randrange(members):09d}", rng.randrange(10 * members))
    before, stats = _peak_mb(), store.stats.snapshot()
    t = time.perf_counter()
    sset.merge()
    took = time.perf_counter() - t
    out.put(
        {
            "merge_s": took,
            "round_trips": store.stats.since(stats)["calls"],
            "peak_before_mb": before,
            "peak_mb": _peak_mb(),
        }
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=["board", "merge"])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--memory-mb", type=int, default=256)
    parser.add_argument("--members", type=int, default=10_000_000)
    parser.add_argument("--updates", type=int, default=100_000)
    parser.add_argument("--dir", default=".")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as directory:
        path = os.path.join(directory, "load-memory.db")
        if args.what == "board":
            print(_in_child(_board, path, args.rows, args.memory_mb))
        else:
            print(_in_child(_merge, path, args.members, args.updates))


if __name__ == "__main__":
    main()
