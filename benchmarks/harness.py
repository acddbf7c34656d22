"""The benchmark harness behind ``mdss bench``: mdss against the anchors a user would otherwise pick,
on the same machine, in one run. The other scripts here reuse its workload and measurements.

Anchors: ``sortedcontainers.SortedList`` plus a dict in process (every
store); an indexed SQLite table answering rank with ``COUNT(*) ... WHERE
score > ?`` (``sqlite://``, the articles' naive rank); a native Redis sorted
set on the same server (``redis://``); on ``dynamodb://`` a table of players
ranked by ``Query``/``Select=COUNT`` on a score index (seed 001), on the
same engine. Latencies are per call, reported as
p50/p99 (never the mean), after a warm-up pass over the same samples, so
"warm" means every node those calls need is cached.

A leaderboard row too (:func:`bench_board`): posts of 3 columns (one
composite) plus accumulators to 3 windows, and ``rows`` of 100 friends, on
``mdss.Leaderboard`` and on the same posts and reads as plain code: a dict of
rows and a ``SortedList`` per column and window in process (every store), an
upserted SQL table with ``COUNT(*)`` ranks (``sqlite://``), or pipelined Redis
commands (a ``ZADD`` per column and window and the row's hash per post,
``ZREVRANK`` + ``HGETALL`` per friend).

It lives outside the package (a wheel does not ship it): ``mdss bench``
loads it from the source checkout mdss runs from (see the README, "Benchmarks").
"""

from __future__ import annotations

import contextlib
import os
import random
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from typing import Any
from urllib.parse import urlsplit

from sortedcontainers import SortedList

import mdss

PAGE = 100


def synthetic_scores(n: int, seed: int) -> dict[str, int]:
    """``n`` players with tie-heavy integer points (most score little, a few a lot), keyed by name."""
    rng = random.Random(seed)
    return {f"player-{i:08d}": int(rng.paretovariate(1.3) * 100) - 100 for i in range(n)}


def percentiles(samples_ns: list[int]) -> dict[str, float]:
    """p50, p90, p99 and max of per-call times, in microseconds."""
    ordered = sorted(samples_ns)

    def at(q: float) -> float:
        return ordered[min(int(q * len(ordered)), len(ordered) - 1)] / 1000

    return {"p50_us": at(0.50), "p90_us": at(0.90), "p99_us": at(0.99), "max_us": ordered[-1] / 1000}


def timed(call: Callable[[Any], Any], args: Sequence[Any]) -> dict[str, float]:
    """Latency percentiles of ``call(arg)`` for each arg; a first pass over the same args warms caches."""
    for arg in args:
        call(arg)
    samples = []
    for arg in args:
        start = time.perf_counter_ns()
        call(arg)
        samples.append(time.perf_counter_ns() - start)
    return percentiles(samples)


def _rate(n: int, seconds: float) -> float:
    return n / seconds if seconds > 0 else float("inf")


class Workload:
    """The members, the sampled operations and the updates every system runs, identically."""

    def __init__(self, n: int, samples: int, batch: int, seed: int, singles: int = 10_000) -> None:
        rng = random.Random(seed + 1)
        self.scores = synthetic_scores(n, seed)
        self.members = list(self.scores)
        self.n, self.batch = n, batch
        self.sample_members = [rng.choice(self.members) for _ in range(samples)]
        self.offsets = [rng.randrange(max(n - PAGE, 1)) for _ in range(samples)]
        ranked = sorted(self.scores.items(), key=lambda kv: (-kv[1], kv[0]))
        middle = ranked[max(n // 2 - samples // 2, 0) : n // 2 + samples // 2 + 1]
        self.median_members = [m for m, _ in middle][:samples]
        rounds = max(1, min(5, (4 * n) // batch))
        self.updates = [
            [(rng.choice(self.members), rng.randrange(0, 100_000)) for _ in range(batch)] for _ in range(rounds)
        ]
        self.singles = [(rng.choice(self.members), rng.randrange(0, 100_000)) for _ in range(singles)]


def value_bytes(store: mdss.Store, keys: Sequence[str]) -> int:
    """The bytes of the values at ``keys``: what a set occupies in any store, before the store's overhead."""
    total = 0
    for start in range(0, len(keys), 1000):
        total += sum(len(v) for v in store.get_many(keys[start : start + 1000]) if v is not None)
    return total


def redis_memory_usage(store: Any, keys: Sequence[str]) -> int:
    """Redis' own ``MEMORY USAGE`` of ``keys``: the figure the sorted-set anchor is measured by, overhead included."""
    pipe = store.client.pipeline(transaction=False)
    for key in keys:
        pipe.memory_usage(key, samples=0)
    return sum(v or 0 for v in pipe.execute())


def bench_mdss(
    store: mdss.Store,
    w: Workload,
    chunk_size: int,
    cache_bytes: int,
    stored_bytes: Callable[[Any, Sequence[str]], int] = value_bytes,
    url: str | None = None,
    shards: int = 1,
) -> dict[str, Any]:
    """mdss' figures on ``store``; ``bytes_per_member`` counts the set's nodes by ``stored_bytes``. With the
    ``url`` of a store that processes share, also the reads beside a concurrent writer."""
    name = f"bench-{os.getpid()}-{time.monotonic_ns()}"
    start = time.perf_counter()
    sharded = {"shards": shards} if shards > 1 else {}
    board = mdss.SortedSet.load(store, name, w.scores, chunk_size=chunk_size, cache_bytes=cache_bytes, **sharded)
    out: dict[str, Any] = {"load_per_s": _rate(w.n, time.perf_counter() - start)}
    out["bytes_per_member"] = stored_bytes(store, list(board.node_keys())) / w.n
    rank = timed(lambda m: board.rank(m), w.sample_members)
    before = store.stats.snapshot()
    for member in w.sample_members:
        board.rank(member)
    out["round_trips_per_rank"] = store.stats.since(before)["calls"] / len(w.sample_members)
    out.update(_named("rank", rank))
    out.update(_named("rank_median", timed(lambda m: board.rank(m), w.median_members)))
    before = store.stats.snapshot()
    for member in w.median_members:
        board.rank(member)
    out["round_trips_per_median_rank"] = store.stats.since(before)["calls"] / len(w.median_members)
    out.update(_named("page", timed(lambda o: board.range(o, PAGE), w.offsets)))
    before = store.stats.snapshot()
    for offset in w.offsets:
        board.range(offset, PAGE)
    out["round_trips_per_page"] = store.stats.since(before)["calls"] / len(w.offsets)
    out.update(_named("around", timed(lambda m: board.around(m, 5, 5), w.sample_members)))
    out.update(_named("top", timed(lambda _: board.range(0, PAGE), range(len(w.offsets)))))
    before = store.stats.snapshot()
    board.rank_of_score(w.scores[w.sample_members[0]])
    out["round_trips_per_rank_of_score"] = store.stats.since(before)["calls"]
    out.update(manifests_only(board, w))
    out.update(bench_single_updates(board, w))
    if url is not None and urlsplit(url).scheme != "memory":
        out.update(reads_with_writer(url, name, w))
    start = time.perf_counter()
    for batch in w.updates:
        board.add_many(batch)
    out["update_per_s"] = _rate(sum(map(len, w.updates)), time.perf_counter() - start)
    out["update_batch"] = w.batch
    problems = board.check() if w.n <= 2_000_000 else []
    if problems:
        raise mdss.CorruptDataError(f"benchmark set failed check(): {problems[:3]}")
    board.drop()
    return out


def manifests_only(board: Any, w: Workload, calls: int = 100) -> dict[str, float]:
    """Round trips, entry sets and bytes read per rank and per page of 100 with only the manifests cached
    (every entry set dropped from the cache before each call): what a reader whose cache holds the
    manifests, not the entry sets, pays; a sharded set reads its S heads and entry sets of every shard."""
    from mdss._tree import Leaf

    store, heads = board.store, getattr(board, "shards", 1)
    out: dict[str, float] = {}
    for what, call, args in (
        ("rank", board.rank, w.sample_members[:calls]),
        ("page", lambda offset: board.range(offset, PAGE), w.offsets[:calls]),
    ):
        spent = {"calls": 0, "reads": 0, "bytes_read": 0}
        for arg in args:
            for key in [k for k, (node, _) in board.engines[0].cache._nodes.items() if isinstance(node, Leaf)]:
                board.engines[0].cache.discard(key)
            before = store.stats.snapshot()
            call(arg)
            for k, v in store.stats.since(before).items():
                if k in spent:
                    spent[k] += v
        out[f"round_trips_per_{what}_manifests_only"] = spent["calls"] / len(args)
        out[f"entry_sets_per_{what}_manifests_only"] = spent["reads"] / len(args) - heads
        out[f"bytes_per_{what}_manifests_only"] = spent["bytes_read"] / len(args)
    return out


def bench_single_updates(board: mdss.SortedSet, w: Workload) -> dict[str, Any]:
    """One ``add`` per call (random members of the loaded set): the rate, and the bytes and round trips per
    update, merges included; then the reads with the update log full and just merged (:func:`log_reads`)."""
    store, out = board.store, {}
    before, start = store.stats.snapshot(), time.perf_counter()
    merges = board.merges
    for member, score in w.singles:
        board.add(member, score)
    seconds, spent = time.perf_counter() - start, store.stats.since(before)
    out["single_update_per_s"] = _rate(len(w.singles), seconds)
    out["bytes_written_per_update"] = spent["bytes_written"] / len(w.singles)
    out["round_trips_per_update"] = spent["calls"] / len(w.singles)
    out["merges"] = board.merges - merges
    out.update(log_reads(board, w))
    return out


READS = {
    "rank": (lambda board, arg: board.rank(arg), "sample_members"),
    "page": (lambda board, arg: board.range(arg, PAGE), "offsets"),
    "around": (lambda board, arg: board.around(arg, 5, 5), "sample_members"),
}


def log_reads(board: mdss.SortedSet, w: Workload, rounds: int = 3) -> dict[str, Any]:
    """Rank, page and around p50 with the update log full (one entry short of its limit), then just merged
    (empty), alternately: the two regimes measured side by side, the best p50 of ``rounds`` kept for each,
    so that a noisy machine skews the ratio less than two runs apart would."""
    limit = board.info()["log_limit"]
    rng = random.Random(7)
    best: dict[str, float] = {}
    for _ in range(rounds):
        for _ in range(2 * limit):  # a full log: the reads' worst case before a merge (sharded: about full)
            info = board.info()  # a merge re-derives the limit from the set's size: read it again
            if info["log_entries"] >= info["log_limit"] - 1:
                break
            board.add(rng.choice(w.members), rng.randrange(0, 100_000))
        for regime in ("full_log", "merged"):
            if regime == "merged":
                board.merge()
            for what, (call, args) in READS.items():
                p50 = timed(partial(call, board), getattr(w, args))["p50_us"]
                key = f"{what}_{regime}_p50_us"
                best[key] = min(best.get(key, p50), p50)
    return {"log_limit": limit, **best}


WRITER = """
import os, random, sys, time, mdss
url, name, stop, seed = sys.argv[1:]
rng, posted = random.Random(int(seed)), 0
with mdss.open_store(url) as store:
    board = mdss.SortedSet(store, name)
    members = [entry.member for entry in board.range(0, 100_000)]
    print("ready", flush=True)
    start = time.perf_counter()
    while not os.path.exists(stop):
        board.add(rng.choice(members), rng.randrange(0, 100_000))
        posted += 1
    print(posted / (time.perf_counter() - start), board.merges, flush=True)
"""


def reads_with_writer(url: str, name: str, w: Workload) -> dict[str, Any]:
    """Rank, page and around p50 in this process while another process posts single updates to the same
    set: its merges replace nodes, so this process's caches keep turning cold. For stores that processes
    share (not ``memory://``)."""
    with tempfile.TemporaryDirectory() as tmp, mdss.open_store(url) as store:
        stop = os.path.join(tmp, "stop")
        writer = subprocess.Popen(
            [sys.executable, "-c", WRITER, url, name, stop, "3"], stdout=subprocess.PIPE, text=True
        )
        try:
            assert writer.stdout is not None and writer.stdout.readline().strip() == "ready"
            board = mdss.SortedSet(store, name)
            out: dict[str, Any] = {}
            for what, (call, args) in READS.items():
                before, samples = store.stats.snapshot(), getattr(w, args)
                out[f"{what}_with_writer_p50_us"] = timed(partial(call, board), samples)["p50_us"]
                out[f"round_trips_per_{what}_with_writer"] = store.stats.since(before)["calls"] / (2 * len(samples))
        finally:
            open(stop, "w").close()
            rate, merges = writer.communicate(timeout=120)[0].split()
        out["writer_update_per_s"], out["writer_merges"] = float(rate), int(merges)
    return out


def _named(prefix: str, figures: dict[str, float]) -> dict[str, float]:
    return {f"{prefix}_{k}": v for k, v in figures.items()}


def bench_sortedlist(w: Workload) -> dict[str, Any]:
    start = time.perf_counter()
    ranked = SortedList((-s, m) for m, s in w.scores.items())
    scores = dict(w.scores)
    out: dict[str, Any] = {"load_per_s": _rate(w.n, time.perf_counter() - start), "round_trips_per_rank": 0}
    out.update(_named("rank", timed(lambda m: ranked.bisect_left((-scores[m], m)) + 1, w.sample_members)))
    out.update(_named("rank_median", timed(lambda m: ranked.bisect_left((-scores[m], m)) + 1, w.median_members)))
    out.update(_named("page", timed(lambda o: ranked[o : o + PAGE], w.offsets)))

    def around(m: str) -> Any:
        i = ranked.bisect_left((-scores[m], m))
        return ranked[max(i - 5, 0) : i + 6]

    out.update(_named("around", timed(lambda m: around(m), w.sample_members)))
    out.update(_named("top", timed(lambda _: ranked[:PAGE], range(len(w.offsets)))))
    start = time.perf_counter()
    for batch in w.updates:
        for member, score in batch:
            ranked.remove((-scores[member], member))
            scores[member] = score
            ranked.add((-score, member))
    out["update_per_s"] = _rate(sum(map(len, w.updates)), time.perf_counter() - start)
    out["single_update_per_s"] = out["update_per_s"]  # the same thing: one add and one remove per update
    return out


def bench_sql_count(path: str, w: Workload) -> dict[str, Any]:
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("DROP TABLE IF EXISTS anchor")
    start = time.perf_counter()
    db.execute("BEGIN")
    db.execute("CREATE TABLE anchor (member TEXT PRIMARY KEY, score INTEGER NOT NULL)")
    db.executemany("INSERT INTO anchor VALUES (?, ?)", w.scores.items())
    db.execute("CREATE INDEX anchor_score ON anchor (score)")
    db.execute("COMMIT")
    out: dict[str, Any] = {"load_per_s": _rate(w.n, time.perf_counter() - start), "round_trips_per_rank": 1}

    def rank(member: str) -> int:
        (score,) = db.execute("SELECT score FROM anchor WHERE member = ?", (member,)).fetchone()
        return 1 + db.execute("SELECT COUNT(*) FROM anchor WHERE score > ?", (score,)).fetchone()[0]

    few = max(len(w.sample_members) // 20, 20)  # a naive count of half the table is slow: fewer samples
    out.update(_named("rank", timed(lambda m: rank(m), w.sample_members[:few])))
    out.update(_named("rank_median", timed(lambda m: rank(m), w.median_members[:few])))
    page = "SELECT member, score FROM anchor ORDER BY score DESC, member LIMIT ? OFFSET ?"
    out.update(_named("page", timed(lambda o: db.execute(page, (PAGE, o)).fetchall(), w.offsets[:few])))
    out.update(_named("top", timed(lambda _: db.execute(page, (PAGE, 0)).fetchall(), range(few))))
    start = time.perf_counter()
    for batch in w.updates:
        db.execute("BEGIN")
        db.executemany("UPDATE anchor SET score = ? WHERE member = ?", ((s, m) for m, s in batch))
        db.execute("COMMIT")
    out["update_per_s"] = _rate(sum(map(len, w.updates)), time.perf_counter() - start)
    out["bytes_per_member"] = (
        (db.execute("SELECT SUM(pgsize) FROM dbstat WHERE name LIKE 'anchor%'").fetchone()[0] or 0) / w.n
        if _has_dbstat(db)
        else None
    )
    db.execute("DROP TABLE anchor")
    db.close()
    return out


def _has_dbstat(db: sqlite3.Connection) -> bool:
    try:
        db.execute("SELECT 1 FROM dbstat LIMIT 1")
        return True
    except sqlite3.Error:
        return False


def bench_redis_zset(store: Any, w: Workload) -> dict[str, Any]:
    client, key = store.client, f"{store.namespace}:anchor-zset-{os.getpid()}"
    client.delete(key)
    items = list(w.scores.items())
    start = time.perf_counter()
    pipe = client.pipeline(transaction=False)
    for i in range(0, len(items), 10_000):
        pipe.zadd(key, dict(items[i : i + 10_000]))
    pipe.execute()
    out: dict[str, Any] = {"load_per_s": _rate(w.n, time.perf_counter() - start), "round_trips_per_rank": 1}
    out.update(_named("rank", timed(lambda m: client.zrevrank(key, m), w.sample_members)))
    out.update(_named("rank_median", timed(lambda m: client.zrevrank(key, m), w.median_members)))
    out.update(_named("page", timed(lambda o: client.zrevrange(key, o, o + PAGE - 1, withscores=True), w.offsets)))

    def around(m: str) -> Any:
        i = client.zrevrank(key, m)
        return client.zrevrange(key, max(i - 5, 0), i + 5, withscores=True)

    out.update(_named("around", timed(lambda m: around(m), w.sample_members)))
    out.update(
        _named("top", timed(lambda _: client.zrevrange(key, 0, PAGE - 1, withscores=True), range(len(w.offsets))))
    )
    start = time.perf_counter()
    for member, score in w.singles:  # one ZADD per call, no pipeline
        client.zadd(key, {member: score})
    out["single_update_per_s"] = _rate(len(w.singles), time.perf_counter() - start)
    out["round_trips_per_update"] = 1
    start = time.perf_counter()
    for batch in w.updates:
        client.zadd(key, dict(batch))
    out["update_per_s"] = _rate(sum(map(len, w.updates)), time.perf_counter() - start)
    out["bytes_per_member"] = client.memory_usage(key, samples=0) / w.n
    client.delete(key)
    return out


def bench_dynamodb_count(store: Any, w: Workload) -> dict[str, Any]:
    """Seed 001's rank on DynamoDB: one item per player with a score, a keys-only GSI on (board, score), and the
    rank of a player = 1 + the ``Query`` ``Select=COUNT`` of ``score > :s`` on it, paged at 1 MB per request.
    """
    client, table = store.client, f"{store.table}-anchor-{os.getpid()}"
    client.create_table(
        TableName=table,
        AttributeDefinitions=[
            {"AttributeName": name, "AttributeType": kind} for name, kind in (("p", "S"), ("b", "S"), ("s", "N"))
        ],
        KeySchema=[{"AttributeName": "p", "KeyType": "HASH"}],
        GlobalSecondaryIndexes=[
            {
                "IndexName": "by-score",
                "KeySchema": [{"AttributeName": "b", "KeyType": "HASH"}, {"AttributeName": "s", "KeyType": "RANGE"}],
                "Projection": {"ProjectionType": "KEYS_ONLY"},
            }
        ],
        BillingMode="PAY_PER_REQUEST",
    )
    client.get_waiter("table_exists").wait(TableName=table, WaiterConfig={"Delay": 1})
    items = [{"p": {"S": m}, "b": {"S": "board"}, "s": {"N": str(s)}} for m, s in w.scores.items()]
    start = time.perf_counter()
    for i in range(0, len(items), 25):  # BatchWriteItem's most; what comes back unprocessed is resent
        pending = [{"PutRequest": {"Item": item}} for item in items[i : i + 25]]
        while pending:
            pending = client.batch_write_item(RequestItems={table: pending}).get("UnprocessedItems", {}).get(table)
    out: dict[str, Any] = {"load_per_s": _rate(w.n, time.perf_counter() - start)}
    trips: list[int] = []

    def rank(member: str) -> int:
        score = client.get_item(TableName=table, Key={"p": {"S": member}})["Item"]["s"]["N"]
        query: dict[str, Any] = {
            "TableName": table,
            "IndexName": "by-score",
            "KeyConditionExpression": "b = :b AND s > :s",
            "ExpressionAttributeValues": {":b": {"S": "board"}, ":s": {"N": score}},
            "Select": "COUNT",
        }
        above, calls = 0, 1
        while True:
            page = client.query(**query)
            above, calls = above + page["Count"], calls + 1
            if "LastEvaluatedKey" not in page:
                trips.append(calls)
                return above + 1
            query["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    few = max(len(w.sample_members) // 20, 20)  # a count of half the table reads half the index: fewer samples
    out.update(_named("rank", timed(rank, w.sample_members[:few])))
    out["round_trips_per_rank"] = sum(trips) / len(trips)
    trips.clear()
    out.update(_named("rank_median", timed(rank, w.median_members[:few])))
    out["round_trips_per_median_rank"] = sum(trips) / len(trips)
    client.delete_table(TableName=table)
    return out


# -- the leaderboard row -----------------------------------------------------------------------------------------------

BOARD_COLUMNS = {"xp": "desc", "accuracy": "desc", "race": [("laps", "desc"), ("time_ms", "asc")]}
BOARD_ACCUMULATE = ("shots", "kills")
BOARD_WINDOWS = ("all", "week", "day")
FRIENDS = 100


class BoardWorkload:
    """The owners, posts and friend lists every leaderboard system runs, identically.

    Each owner posts once (the load), then ``posts`` random owners post again:
    new xp, accuracy, laps and time (kept at its best, the least), shots and
    kills added up. ``samples`` lists of 100 random friends are read by ``rows``.
    """

    def __init__(self, owners: int, posts: int, samples: int, seed: int) -> None:
        rng = random.Random(seed + 2)

        def values() -> dict[str, Any]:
            return {
                "xp": rng.randint(0, 10_000),
                "accuracy": round(rng.random(), 3),
                "laps": rng.randint(1, 5),
                "time_ms": rng.randint(50_000, 90_000),
                "shots": rng.randint(1, 50),
                "kills": rng.randint(0, 5),
            }

        self.owners = [f"owner-{i:07d}" for i in range(owners)]
        self.first = [(owner, values()) for owner in self.owners]
        self.posts = [(rng.choice(self.owners), values()) for _ in range(posts)]
        self.friends = [rng.sample(self.owners, min(FRIENDS, owners)) for _ in range(samples)]


def new_board(store: mdss.Store, name: str, cache_bytes: int, tiebreak: str | None = None) -> mdss.Leaderboard:
    """The benchmark's board: 3 columns (one composite), 2 accumulators, a best-of time, 3 windows; ``tiebreak`` for
    every column (``"first"``: ties by who reached the key first)."""
    return mdss.Leaderboard(
        store,
        name,
        columns=BOARD_COLUMNS,
        tiebreak=tiebreak,
        accumulate=BOARD_ACCUMULATE,
        keep_best={"time_ms": "min"},
        windows=BOARD_WINDOWS,
        cache_bytes=cache_bytes,
    )


def _timed_posts(bw: BoardWorkload, post: Callable[[str, dict[str, Any]], Any]) -> dict[str, Any]:
    """An anchor's first posts/s (each owner once) and posts/s of the timed posts, ``post`` called per post."""
    start = time.perf_counter()
    for owner, values in bw.first:
        post(owner, values)
    out: dict[str, Any] = {"first_posts_per_s": _rate(len(bw.first), time.perf_counter() - start)}
    start = time.perf_counter()
    for owner, values in bw.posts:
        post(owner, values)
    out["posts_per_s"] = _rate(len(bw.posts), time.perf_counter() - start)
    return out


def bench_board_mdss(store: mdss.Store, bw: BoardWorkload, cache_bytes: int) -> dict[str, Any]:
    """``mdss.Leaderboard``: the load, posts/s with round trips and bytes per post (merges included), and
    ``rows`` of 100 friends by xp (p50/p99 after a warm-up, and round trips per call)."""
    board = new_board(store, f"bench-board-{os.getpid()}-{time.monotonic_ns()}", cache_bytes)
    start = time.perf_counter()
    for owner, values in bw.first:
        board.post(owner, values)
    out: dict[str, Any] = {"first_posts_per_s": _rate(len(bw.first), time.perf_counter() - start)}
    sets = [board._set(instance) for instance in board.windows()]
    merges = sum(s.merges for s in sets)
    before, start = store.stats.snapshot(), time.perf_counter()
    for n, (owner, values) in enumerate(bw.posts):
        board.post(owner, values, post_id=f"p{n}")
    seconds, spent = time.perf_counter() - start, store.stats.since(before)
    out["posts_per_s"] = _rate(len(bw.posts), seconds)
    out["round_trips_per_post"] = spent["calls"] / len(bw.posts)
    out["bytes_written_per_post"] = spent["bytes_written"] / len(bw.posts)
    out["merges"] = sum(s.merges for s in sets) - merges
    out.update(_named("rows", timed(lambda friends: board.rows(friends, "xp"), bw.friends)))
    before = store.stats.snapshot()
    for friends in bw.friends:
        board.rows(friends, "xp")
    out["round_trips_per_rows"] = store.stats.since(before)["calls"] / len(bw.friends)
    problems = [p for instance in board.windows() for p in board.check(instance)]
    if problems:
        raise mdss.CorruptDataError(f"benchmark board failed check(): {problems[:3]}")
    board.drop()
    return out


def _board_key(column: str, values: dict[str, Any]) -> tuple[Any, ...]:
    spec = BOARD_COLUMNS[column]
    parts = [(column, spec)] if isinstance(spec, str) else spec
    return tuple(-values[f] if how == "desc" else values[f] for f, how in parts)


def _merged(row: dict[str, Any] | None, values: dict[str, Any]) -> dict[str, Any]:
    """The board's merge rule: accumulators add up, time_ms keeps the least, the rest take the post."""
    if row is None:
        return dict(values)
    merged = {**row, **values}
    for field in BOARD_ACCUMULATE:
        merged[field] = row[field] + values[field]
    merged["time_ms"] = min(row["time_ms"], values["time_ms"])
    return merged


def bench_board_sortedlist(bw: BoardWorkload) -> dict[str, Any]:
    """The same posts and reads in process: per window a dict of rows and a ``SortedList`` of (key, owner)
    per column, moved on every post (no windows cut by time, no post ids: one window set each)."""
    windows = {w: ({}, {c: SortedList() for c in BOARD_COLUMNS}) for w in BOARD_WINDOWS}

    def post(owner: str, values: dict[str, Any]) -> None:
        for rows, columns in windows.values():
            old = rows.get(owner)
            new = rows[owner] = _merged(old, values)
            for column, ranked in columns.items():
                key = _board_key(column, new)
                if old is not None:
                    was = _board_key(column, old)
                    if was == key:
                        continue
                    ranked.remove((was, owner))
                ranked.add((key, owner))

    out = _timed_posts(bw, post)
    out["round_trips_per_post"] = out["round_trips_per_rows"] = 0
    rows, columns = windows["all"]

    def friends_rows(friends: list[str]) -> list[tuple[int, str, dict[str, Any]]]:
        ranked = columns["xp"]
        found = [(ranked.bisect_left((_board_key("xp", rows[f]), f)) + 1, f, rows[f]) for f in friends if f in rows]
        return sorted(found, key=lambda t: t[0])

    out.update(_named("rows", timed(friends_rows, bw.friends)))
    return out


def bench_board_sql(path: str, bw: BoardWorkload) -> dict[str, Any]:
    """The same posts as one upsert per window in one transaction, on an indexed table; ``rows`` of friends as
    one ``SELECT ... IN`` plus the naive ``COUNT(*)`` rank of each. WAL and ``synchronous=NORMAL``, as mdss'
    SQLite store by default."""
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    db.execute("DROP TABLE IF EXISTS board_anchor")
    db.execute(
        "CREATE TABLE board_anchor (win TEXT, owner TEXT, xp INTEGER, accuracy REAL, laps INTEGER, "
        "time_ms INTEGER, shots INTEGER, kills INTEGER, PRIMARY KEY (win, owner))"
    )
    db.execute("CREATE INDEX board_anchor_xp ON board_anchor (win, xp, owner)")
    db.execute("CREATE INDEX board_anchor_accuracy ON board_anchor (win, accuracy, owner)")
    db.execute("CREATE INDEX board_anchor_race ON board_anchor (win, laps, time_ms, owner)")
    upsert = (
        "INSERT INTO board_anchor VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (win, owner) DO UPDATE SET "
        "xp = excluded.xp, accuracy = excluded.accuracy, laps = excluded.laps, "
        "time_ms = min(time_ms, excluded.time_ms), shots = shots + excluded.shots, kills = kills + excluded.kills"
    )

    def post(owner: str, v: dict[str, Any]) -> None:
        db.execute("BEGIN")
        db.executemany(
            upsert,
            [
                (w, owner, v["xp"], v["accuracy"], v["laps"], v["time_ms"], v["shots"], v["kills"])
                for w in BOARD_WINDOWS
            ],
        )
        db.execute("COMMIT")

    out = _timed_posts(bw, post)
    out["round_trips_per_post"] = 3  # BEGIN, the upserts, COMMIT

    def friends_rows(friends: list[str]) -> list[tuple[int, str]]:
        marks = ",".join("?" * len(friends))
        found = db.execute(f"SELECT owner, xp FROM board_anchor WHERE win = 'all' AND owner IN ({marks})", friends)
        count = "SELECT COUNT(*) FROM board_anchor WHERE win = 'all' AND (xp > ? OR xp = ? AND owner < ?)"
        ranked = [(1 + db.execute(count, (xp, xp, owner)).fetchone()[0], owner) for owner, xp in found.fetchall()]
        return sorted(ranked)

    out.update(_named("rows", timed(friends_rows, bw.friends)))
    out["round_trips_per_rows"] = 1 + FRIENDS
    db.execute("DROP TABLE board_anchor")
    db.close()
    return out


def bench_board_redis(store: Any, bw: BoardWorkload) -> dict[str, Any]:
    """The same posts as pipelined plain commands, one round trip per post: per window a ``ZADD`` per column
    (the race as one score, laps then time) and the row's hash (``HSET``, ``HINCRBY`` for the accumulators);
    ``rows`` of friends as pipelined ``ZREVRANK`` + ``HGETALL``. No post ids, no best-of time in the race
    score, no atomicity across the commands: less than the board does."""
    client, prefix = store.client, f"{store.namespace}:anchor-board-{os.getpid()}"

    def post(owner: str, v: dict[str, Any]) -> None:
        pipe = client.pipeline(transaction=False)
        for w in BOARD_WINDOWS:
            pipe.zadd(f"{prefix}:{w}:xp", {owner: v["xp"]})
            pipe.zadd(f"{prefix}:{w}:accuracy", {owner: v["accuracy"]})
            pipe.zadd(f"{prefix}:{w}:race", {owner: v["laps"] * 1_000_000 - v["time_ms"]})
            row = f"{prefix}:{w}:row:{owner}"
            pipe.hset(row, mapping={f: v[f] for f in ("xp", "accuracy", "laps", "time_ms")})
            for field in BOARD_ACCUMULATE:
                pipe.hincrby(row, field, v[field])
        pipe.execute()

    out = _timed_posts(bw, post)
    out["round_trips_per_post"] = out["round_trips_per_rows"] = 1

    def friends_rows(friends: list[str]) -> list[Any]:
        pipe = client.pipeline(transaction=False)
        for f in friends:
            pipe.zrevrank(f"{prefix}:all:xp", f)
            pipe.hgetall(f"{prefix}:all:row:{f}")
        found = pipe.execute()
        return sorted(zip(found[::2], friends, found[1::2]), key=lambda t: t[0])

    out.update(_named("rows", timed(friends_rows, bw.friends)))
    keys = [f"{prefix}:{w}:{c}" for w in BOARD_WINDOWS for c in BOARD_COLUMNS]
    keys += [f"{prefix}:{w}:row:{o}" for w in BOARD_WINDOWS for o in bw.owners]
    for first in range(0, len(keys), 10_000):
        client.delete(*keys[first : first + 10_000])
    return out


def bench_board(
    store: mdss.Store, url: str, owners: int, posts: int, samples: int, cache_bytes: int, seed: int
) -> dict[str, Any]:
    """The leaderboard row: mdss and every anchor that fits the store, on one :class:`BoardWorkload`."""
    bw = BoardWorkload(owners, posts, samples, seed)
    result: dict[str, Any] = {"owners": owners, "posts": posts, "friends": FRIENDS, "samples": samples}
    result["mdss"] = bench_board_mdss(store, bw, cache_bytes)
    result["sortedcontainers"] = bench_board_sortedlist(bw)
    scheme = urlsplit(url).scheme
    if scheme == "sqlite":
        result["sql"] = bench_board_sql(store.path, bw)
    if single_redis(url):
        result["redis_commands"] = bench_board_redis(store, bw)
    return result


BOARD_FIGURES = [
    ("posts_per_s", "posts/s", "{:,.0f}"),
    ("round_trips_per_post", "trips/post", "{:.2f}"),
    ("rows_p50_us", "rows p50", "{:,.1f}"),
    ("rows_p99_us", "rows p99", "{:,.1f}"),
    ("round_trips_per_rows", "trips/rows", "{:.2f}"),
    ("first_posts_per_s", "first posts/s", "{:,.0f}"),
]


def board_report(board: dict[str, Any]) -> Iterator[str]:
    """The lines of :func:`bench_board`'s table, then mdss' ratio to each anchor."""
    systems = [s for s in board if isinstance(board[s], dict)]
    yield (
        f"leaderboard: {board['owners']:,} owners, {board['posts']:,} posts of 3 columns to 3 windows, "
        f"rows of {board['friends']} friends (times in microseconds)"
    )
    yield f"{'':<16}" + "".join(f"{s:>18}" for s in systems)
    for key, label, fmt in BOARD_FIGURES:
        cells = ["-" if board[s].get(key) is None else fmt.format(board[s][key]) for s in systems]
        yield f"{label:<16}" + "".join(f"{c:>18}" for c in cells)
    mine = board["mdss"]
    for s in systems[1:]:
        yield (
            f"mdss / {s}: posts/s {mine['posts_per_s'] / board[s]['posts_per_s']:.2f}x, "
            f"rows p50 {mine['rows_p50_us'] / board[s]['rows_p50_us']:.2f}x"
        )


COLUMNS = [
    ("load_per_s", "load/s", "{:,.0f}"),
    ("update_per_s", "update/s", "{:,.0f}"),
    ("rank_p50_us", "rank p50", "{:,.1f}"),
    ("rank_p99_us", "rank p99", "{:,.1f}"),
    ("rank_median_p50_us", "median-rank p50", "{:,.1f}"),
    ("page_p50_us", "page p50", "{:,.1f}"),
    ("around_p50_us", "around p50", "{:,.1f}"),
    ("top_p50_us", "top p50", "{:,.1f}"),
    ("single_update_per_s", "single upd/s", "{:,.0f}"),
    ("bytes_written_per_update", "bytes/update", "{:,.0f}"),
    ("round_trips_per_update", "trips/update", "{:.2f}"),
    ("rank_full_log_p50_us", "rank p50 full log", "{:,.1f}"),
    ("rank_merged_p50_us", "rank p50 merged", "{:,.1f}"),
    ("page_full_log_p50_us", "page p50 full log", "{:,.1f}"),
    ("page_merged_p50_us", "page p50 merged", "{:,.1f}"),
    ("around_full_log_p50_us", "around p50 full log", "{:,.1f}"),
    ("around_merged_p50_us", "around p50 merged", "{:,.1f}"),
    ("rank_with_writer_p50_us", "rank p50 w/ writer", "{:,.1f}"),
    ("page_with_writer_p50_us", "page p50 w/ writer", "{:,.1f}"),
    ("around_with_writer_p50_us", "around p50 w/writer", "{:,.1f}"),
    ("round_trips_per_rank_with_writer", "trips/rank w/wr", "{:.2f}"),
    ("round_trips_per_page_with_writer", "trips/page w/wr", "{:.2f}"),
    ("round_trips_per_around_with_writer", "trips/around w/wr", "{:.2f}"),
    ("round_trips_per_rank", "trips/rank", "{:.2f}"),
    ("round_trips_per_median_rank", "trips/median", "{:.2f}"),
    ("round_trips_per_page", "trips/page", "{:.2f}"),
    ("round_trips_per_rank_manifests_only", "trips/rank cold", "{:.2f}"),
    ("round_trips_per_page_manifests_only", "trips/page cold", "{:.2f}"),
    ("entry_sets_per_page_manifests_only", "entry sets/page c", "{:.2f}"),
    ("bytes_per_page_manifests_only", "bytes/page cold", "{:,.0f}"),
    ("bytes_per_member", "bytes/member", "{:,.1f}"),
]
#: Figures compared between shard counts (``mdss bench --shards 1,16``), as ratios to the first count.
SHARD_RATIOS = ("rank_p50_us", "page_p50_us", "around_p50_us", "bytes_per_page_manifests_only")


def report(result: dict[str, Any]) -> Iterator[str]:
    """The lines of a :func:`run`'s table: one column per system, then mdss' ratio to each anchor; then the
    leaderboard's."""
    systems = [s for s in result if isinstance(result[s], dict) and s != "leaderboard"]
    counts = result.get("shards", 1)
    if isinstance(counts, list):
        shards = f", shards {', '.join(map(str, counts))} (columns mdss S=...)"
    else:
        shards = f", {counts} shards" if counts > 1 else ""
    yield f"{result['members']:,} members on {result['store']}{shards} (times in microseconds)"
    yield f"{'':<16}" + "".join(f"{s:>18}" for s in systems)
    for key, label, fmt in COLUMNS:
        cells = []
        for s in systems:
            value = result[s].get(key)
            cells.append("-" if value is None else fmt.format(value))
        yield f"{label:<16}" + "".join(f"{c:>18}" for c in cells)
    mine = result["mdss"]
    variants = [s for s in systems if s.startswith("mdss S=")]
    for s in variants:
        ratios = [
            f"{key.removesuffix('_us').replace('_', ' ')} {result[s][key] / mine[key]:.2f}x" for key in SHARD_RATIOS
        ]
        trips = ", ".join(
            f"trips/{what} {mine[f'round_trips_per_{what}']:.2f} -> {result[s][f'round_trips_per_{what}']:.2f}"
            f" (manifests only {mine[f'round_trips_per_{what}_manifests_only']:.2f} -> "
            f"{result[s][f'round_trips_per_{what}_manifests_only']:.2f})"
            for what in ("rank", "page")
        )
        yield f"{s} / S={counts[0]}: " + ", ".join(ratios) + f"; {trips}"
    for s in systems[1:]:
        if s in variants:
            continue
        ratios = []
        for key, label, _ in COLUMNS[:9]:
            if mine.get(key) and result[s].get(key):
                ratios.append(f"{label} {mine[key] / result[s][key]:.2f}x")
        yield f"mdss / {s}: " + ", ".join(ratios)
    full = _regime_ratios(mine, "full_log")
    if full:
        yield f"mdss, full log ({mine['log_limit'] - 1:,} entries) / just merged, side by side: {full}"
    writer = _regime_ratios(mine, "with_writer")
    if writer:
        yield f"mdss, one concurrent writer ({mine['writer_update_per_s']:,.0f} upd/s, merging) / no writer: {writer}"
    if "leaderboard" in result:
        yield ""
        yield from board_report(result["leaderboard"])


def _regime_ratios(mine: dict[str, Any], regime: str) -> str:
    """Rank, page and around p50 in ``regime`` over the same reads just after a merge, alone."""
    return ", ".join(
        f"{what} {mine[f'{what}_{regime}_p50_us'] / mine[f'{what}_merged_p50_us']:.2f}x"
        for what in READS
        if mine.get(f"{what}_{regime}_p50_us") and mine.get(f"{what}_merged_p50_us")
    )


def single_redis(url: str) -> bool:
    """Whether a store URL names one Redis server (where the native sorted set is the anchor)."""
    return urlsplit(url).scheme in ("redis", "rediss")


def run(
    url: str,
    *,
    members: int,
    chunk_size: int = 1000,
    batch_size: int = 20_000,
    samples: int = 2000,
    singles: int = 10_000,
    cache_bytes: int = 4 << 30,
    seed: int = 1,
    shards: int | Sequence[int] = 1,
    board_owners: int = 5000,
    board_posts: int = 2000,
    board_samples: int = 200,
    progress: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Measure mdss on the store ``url`` names, and every anchor that fits that store, on one workload; then
    the leaderboard row (``board_owners=0`` leaves it out).

    The anchors are chosen by the URL's scheme: the SQL count on ``sqlite://``,
    the native sorted set on a single Redis server, the Query count on
    ``dynamodb://``, ``SortedList`` everywhere. Several shard counts measure
    mdss once per count on the same workload (``mdss``, then ``mdss S=...``).
    """
    scheme = urlsplit(url).scheme
    w = Workload(members, samples, min(batch_size, members), seed, singles)
    counts = [shards] if isinstance(shards, int) else list(shards)
    result: dict[str, Any] = {
        "members": members,
        "store": scheme,
        "chunk_size": chunk_size,
        "shards": counts[0] if len(counts) == 1 else counts,
    }
    with mdss.open_store(url) as store:
        stored_bytes = redis_memory_usage if single_redis(url) else value_bytes
        for n, count in enumerate(counts):
            progress(f"mdss on {url}" + (f", {count} shards" if count > 1 else "") + " ...")
            key = "mdss" if n == 0 else f"mdss S={count}"
            result[key] = bench_mdss(store, w, chunk_size, cache_bytes, stored_bytes, url, count)
        progress("sortedcontainers ...")
        result["sortedcontainers"] = bench_sortedlist(w)
        if scheme == "sqlite":
            progress("SQL count ...")
            result["sql_count"] = bench_sql_count(store.path, w)
        if single_redis(url):
            progress("Redis sorted set ...")
            result["redis_zset"] = bench_redis_zset(store, w)
        if scheme == "dynamodb":
            progress("DynamoDB Query count ...")
            result["dynamodb_count"] = bench_dynamodb_count(store, w)
        if board_owners:
            progress("leaderboard: mdss.Leaderboard and its anchors ...")
            result["leaderboard"] = bench_board(store, url, board_owners, board_posts, board_samples, cache_bytes, seed)
    return result


@contextlib.contextmanager
def redis_url(given: str | None) -> Iterator[str]:
    """``given``, or the URL of a redis-server of our own on a free loopback port (``tests/redis_servers.py``), stopped
    when the block ends."""
    if given:
        yield given
        return
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))
    from redis_servers import redis_server

    with redis_server() as port:
        yield f"redis://127.0.0.1:{port}/0"
