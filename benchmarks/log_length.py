"""A commit's cost against the length of the update log: commits per second, bytes written and store round
trips per commit after 1k, 10k, 50k and 100k log entries were appended, with a ``log_limit`` that never
triggers (so that only the log's own bounds merge it).

    python benchmarks/log_length.py [--stores memory://,sqlite] [--member-bytes 250,20]
        [--marks 1000,10000,50000,100000] [--window 500] [--json benchmarks/results/log_length.json]
    python benchmarks/log_length.py --board 1000000 --stores redis://127.0.0.1:6379/0 --marks 1000,10000,50000 [--warm]

``--board OWNERS`` times posts to a leaderboard of that many rows instead (loaded first; one column): ``appended``
is then the length of the window's log reached, and a commit is a post. With ``--warm`` the board's nodes are read into
the process' cache after the load (``Leaderboard.warm``), so that the first mark's posts do not pay for reading the
entry sets the later marks find cached: what changes from mark to mark is then the log alone.

Each commit sets four random members of ``--member-bytes`` bytes (of 20,000) to random scores: with 250-byte
members (the issue's) a commit's entries pass the head's 1 KB of inline entries, so every commit seals a
segment; with 20-byte ones a segment holds about 30 entries. At each mark (entries appended so far), three
windows of ``--window`` commits are timed: the median rate, and bytes and round trips over all three.
``log`` is the log's length at the mark (entries not merged yet), ``merges`` the merges in the windows.
Run it with ``PYTHONPATH`` naming another checkout to measure that one (it prints which mdss it imports).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

import mdss

PER_COMMIT = 4
#: Windows timed at each mark: the median rate is reported (the machine is shared), the bytes and trips of all.
REPEATS = 3
HEADER = f"{'appended':>9} {'log':>7} {'commits/s':>10} {'B written':>10} {'B read':>9} {'trips':>6} {'merges':>6}"
MEMBERS = 20_000


def _timed(
    store: mdss.Store,
    engine: Any,
    commit: Callable[[], None],
    reach: Callable[[int], None],
    marks: list[int],
    window: int,
) -> list[dict[str, float]]:
    """At each mark, once ``reach(mark)`` has committed up to it: the median rate of ``REPEATS`` windows of ``window``
    commits, and their bytes, round trips and merges per commit."""
    rows = []
    for mark in marks:
        reach(mark)
        log = len(mdss._snapshot.snapshot(engine).head.log)
        before, merges, rates = store.stats.snapshot(), engine.merges, []
        for _ in range(REPEATS):
            start = time.perf_counter()
            for _ in range(window):
                commit()
            rates.append(window / (time.perf_counter() - start))
        done, commits = store.stats.since(before), REPEATS * window
        rows.append(
            {
                "appended": mark,
                "log": log,
                "commits_per_s": statistics.median(rates),
                "bytes_written_per_commit": done["bytes_written"] / commits,
                "bytes_read_per_commit": done["bytes_read"] / commits,
                "round_trips_per_commit": done["calls"] / commits,
                "merges": engine.merges - merges,
            }
        )
    return rows


def run(url: str, member_bytes: int, marks: list[int], window: int) -> list[dict[str, float]]:
    store = mdss.open_store(url)
    name = f"log-length-{member_bytes}"
    board = mdss.SortedSet(store, name, gc_grace=0, log_limit=10_000_000)
    rng = random.Random(member_bytes)
    names = [f"member-{i:06d}-".ljust(member_bytes, "x")[:member_bytes] for i in range(MEMBERS)]
    appended = 0

    def commit() -> None:
        nonlocal appended
        board.add_many({m: rng.randrange(10**9) for m in rng.sample(names, PER_COMMIT)})
        appended += PER_COMMIT

    def reach(mark: int) -> None:
        while appended < mark:
            commit()

    rows = _timed(store, board.engine, commit, reach, marks, window)
    board.drop()
    store.close()
    return rows


def run_board(url: str, owners: int, marks: list[int], window: int, warm: bool) -> list[dict[str, float]]:
    """As :func:`run`, for posts to a leaderboard of ``owners`` rows (one column, window ``all``, loaded first): each
    commit is a post of a random owner's new points; ``appended`` is the window's log length reached."""
    store = mdss.open_store(url)
    board = mdss.Leaderboard(store, "log-length-board", columns={"xp": "desc"}, gc_grace=0, log_limit=10_000_000)
    rng = random.Random(owners)
    names = [f"player-{i:08d}" for i in range(owners)]
    board.load((n, {"xp": rng.randrange(10**7)}) for n in names)
    if warm:
        board.warm()
    engine = board._set("all").engine

    def post() -> None:
        board.post(rng.choice(names), {"xp": rng.randrange(10**7)})

    def reach(mark: int) -> None:
        while len(mdss._snapshot.snapshot(engine).head.log) < mark:
            for _ in range(100):
                post()

    rows = _timed(store, engine, post, reach, marks, window)
    board.drop()
    store.close()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stores", default="memory://,sqlite")
    parser.add_argument("--member-bytes", default="250,20")
    parser.add_argument("--marks", default="1000,10000,50000,100000")
    parser.add_argument("--window", type=int, default=500, help="commits timed at each mark")
    parser.add_argument("--json", default=None)
    parser.add_argument(
        "--board", type=int, default=0, metavar="OWNERS", help="time posts to a leaderboard of OWNERS rows instead"
    )
    parser.add_argument("--warm", action="store_true", help="with --board: read the board into the cache first")
    args = parser.parse_args()
    marks = [int(m) for m in args.marks.split(",")]
    print(f"mdss from {os.path.dirname(mdss.__file__)}")
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for url in args.stores.split(","):
            if url == "sqlite":
                url = f"sqlite:///{tmp}/log-length.db"
            if args.board:
                kind = url.split("://")[0]
                print(f"\n{kind}, posts to a board of {args.board:,} owners, {REPEATS}x{args.window} timed")
                print(HEADER.replace(" commits/s", "   posts/s"))
                for row in run_board(url, args.board, marks, args.window, args.warm):
                    print(
                        f"{row['appended']:>9,} {row['log']:>7,} {row['commits_per_s']:>10,.0f} "
                        f"{row['bytes_written_per_commit']:>10,.0f} {row['bytes_read_per_commit']:>9,.0f} "
                        f"{row['round_trips_per_commit']:>6.2f} {row['merges']:>6}"
                    )
                    results.append({"store": kind, "board_owners": args.board, "warm": args.warm, **row})
                continue
            for member_bytes in map(int, args.member_bytes.split(",")):
                kind = url.split("://")[0]
                print(f"\n{kind}, {PER_COMMIT} members of {member_bytes} B per commit, {REPEATS}x{args.window} timed")
                print(HEADER)
                for row in run(url, member_bytes, marks, args.window):
                    print(
                        f"{row['appended']:>9,} {row['log']:>7,} {row['commits_per_s']:>10,.0f} "
                        f"{row['bytes_written_per_commit']:>10,.0f} {row['bytes_read_per_commit']:>9,.0f} "
                        f"{row['round_trips_per_commit']:>6.2f} {row['merges']:>6}"
                    )
                    results.append({"store": kind, "member_bytes": member_bytes, **row})
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"mdss": os.path.dirname(mdss.__file__), "window": args.window, "rows": results}, f, indent=1)


if __name__ == "__main__":
    main()
