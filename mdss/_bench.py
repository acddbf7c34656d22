"""``mdss bench``: mdss against the anchors a user would otherwise pick, on the same machine, in one run.

Anchors: ``sortedcontainers.SortedList`` plus a dict in process (every
store); an indexed SQLite table answering rank with ``COUNT(*) ... WHERE
score > ?`` (``sqlite://``, the articles' naive rank); a native Redis sorted
set on the same server (``redis://``). Latencies are per call, reported as
p50/p99 (never the mean), after a warm-up pass over the same samples, so
"warm" means every node those calls need is cached.
"""

from __future__ import annotations

import json
import os
import random
import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import click

import mdss

from .stores.sqlite import SQLiteStore

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

    def __init__(self, n: int, samples: int, batch: int, seed: int) -> None:
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


def bench_mdss(store: mdss.Store, w: Workload, chunk_size: int, cache_bytes: int) -> dict[str, Any]:
    name = f"bench-{os.getpid()}-{time.monotonic_ns()}"
    start = time.perf_counter()
    board = mdss.SortedSet.load(store, name, w.scores, chunk_size=chunk_size, cache_bytes=cache_bytes)
    out: dict[str, Any] = {"load_per_s": _rate(w.n, time.perf_counter() - start)}
    out["bytes_per_member"] = _stored_bytes(store, board) / w.n
    rank = timed(lambda m: board.rank(m), w.sample_members)
    before = store.stats.snapshot()
    for member in w.sample_members:
        board.rank(member)
    out["round_trips_per_rank"] = store.stats.since(before)["calls"] / len(w.sample_members)
    out.update(_named("rank", rank))
    out.update(_named("rank_median", timed(lambda m: board.rank(m), w.median_members)))
    out.update(_named("page", timed(lambda o: board.range(o, PAGE), w.offsets)))
    out.update(_named("around", timed(lambda m: board.around(m, 5, 5), w.sample_members)))
    out.update(_named("top", timed(lambda _: board.range(0, PAGE), range(len(w.offsets)))))
    before = store.stats.snapshot()
    board.rank_of_score(w.scores[w.sample_members[0]])
    out["round_trips_per_rank_of_score"] = store.stats.since(before)["calls"]
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


def _is_redis(store: mdss.Store) -> bool:
    """A single-server Redis store (redis-py is an optional extra: no import unless it is one)."""
    return type(store).__name__ == "RedisStore"


def _named(prefix: str, figures: dict[str, float]) -> dict[str, float]:
    return {f"{prefix}_{k}": v for k, v in figures.items()}


def _stored_bytes(store: mdss.Store, board: mdss.SortedSet) -> int:
    """Bytes the set occupies: Redis' own MEMORY USAGE per key on Redis, value bytes elsewhere."""
    keys = [board._keys.head, *store.keys(board._keys.nodes)]
    if _is_redis(store):
        pipe = store.client.pipeline(transaction=False)  # type: ignore[attr-defined]
        for key in keys:
            pipe.memory_usage(key, samples=0)
        return sum(v or 0 for v in pipe.execute())
    total = 0
    for start in range(0, len(keys), 1000):
        total += sum(len(v) for v in store.get_many(keys[start : start + 1000]) if v is not None)
    return total


def bench_sortedlist(w: Workload) -> dict[str, Any]:
    try:
        from sortedcontainers import SortedList
    except ImportError as exc:
        raise click.ClickException("the benchmark needs sortedcontainers: pip install 'mdss[bench]'") from exc
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
    for batch in w.updates:
        client.zadd(key, dict(batch))
    out["update_per_s"] = _rate(sum(map(len, w.updates)), time.perf_counter() - start)
    out["bytes_per_member"] = client.memory_usage(key, samples=0) / w.n
    client.delete(key)
    return out


COLUMNS = [
    ("load_per_s", "load/s", "{:,.0f}"),
    ("update_per_s", "update/s", "{:,.0f}"),
    ("rank_p50_us", "rank p50", "{:,.1f}"),
    ("rank_p99_us", "rank p99", "{:,.1f}"),
    ("rank_median_p50_us", "median-rank p50", "{:,.1f}"),
    ("page_p50_us", "page p50", "{:,.1f}"),
    ("around_p50_us", "around p50", "{:,.1f}"),
    ("top_p50_us", "top p50", "{:,.1f}"),
    ("round_trips_per_rank", "trips/rank", "{:.2f}"),
    ("bytes_per_member", "bytes/member", "{:,.1f}"),
]


def report(result: dict[str, Any]) -> Iterator[str]:
    systems = [s for s in result if isinstance(result[s], dict)]
    yield f"{result['members']:,} members on {result['store']} (times in microseconds)"
    yield f"{'':<16}" + "".join(f"{s:>18}" for s in systems)
    for key, label, fmt in COLUMNS:
        cells = []
        for s in systems:
            value = result[s].get(key)
            cells.append("-" if value is None else fmt.format(value))
        yield f"{label:<16}" + "".join(f"{c:>18}" for c in cells)
    mine = result["mdss"]
    for s in systems[1:]:
        ratios = []
        for key, label, _ in COLUMNS[:8]:
            if mine.get(key) and result[s].get(key):
                ratios.append(f"{label} {mine[key] / result[s][key]:.2f}x")
        yield f"mdss / {s}: " + ", ".join(ratios)


@click.command()
@click.option("--store", "store_url", default="memory://", show_default=True, metavar="URL")
@click.option("--members", type=click.IntRange(min=200), default=100_000, show_default=True)
@click.option("--chunk-size", type=click.IntRange(2, 100_000), default=1000, show_default=True)
@click.option(
    "--batch-size",
    type=click.IntRange(min=1),
    default=20_000,
    show_default=True,
    help="Random score updates per commit (update_per_s).",
)
@click.option(
    "--samples", type=click.IntRange(min=10), default=2000, show_default=True, help="Calls timed per latency figure."
)
@click.option(
    "--cache-mb", type=click.IntRange(min=0), default=4096, show_default=True, help="mdss' node cache budget."
)
@click.option("--seed", type=int, default=1, show_default=True)
@click.option("--json", "json_path", type=click.Path(dir_okay=False), default=None, help="Write the figures here.")
def bench(
    store_url: str,
    members: int,
    chunk_size: int,
    batch_size: int,
    samples: int,
    cache_mb: int,
    seed: int,
    json_path: str | None,
) -> None:
    """Measure mdss against the anchors that fit the store, in the same run."""
    try:
        store = mdss.open_store(store_url)
    except mdss.MdssError as exc:
        raise click.ClickException(str(exc)) from exc
    w = Workload(members, samples, min(batch_size, members), seed)
    result: dict[str, Any] = {"members": members, "store": store_url.split("://")[0], "chunk_size": chunk_size}
    click.echo(f"mdss on {store_url} ...", err=True)
    result["mdss"] = bench_mdss(store, w, chunk_size, cache_mb << 20)
    click.echo("sortedcontainers ...", err=True)
    result["sortedcontainers"] = bench_sortedlist(w)
    if isinstance(store, SQLiteStore):
        click.echo("SQL count ...", err=True)
        result["sql_count"] = bench_sql_count(store.path, w)
    if _is_redis(store):
        click.echo("Redis sorted set ...", err=True)
        result["redis_zset"] = bench_redis_zset(store, w)
    store.close()
    for line in report(result):
        click.echo(line)
    if json_path:
        with open(json_path, "w") as f:
            json.dump(result, f, indent=1)
