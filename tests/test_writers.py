"""Several writers of one set: when a commit reads the head before its compare-and-set, which writer
merges the update log, and how an SQLite write waits for another connection's write lock."""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable

import attrs
import pytest

import mdss
from mdss.stores.memory import MemoryStore
from mdss.stores.sqlite import SQLiteStore


def head_reads(store: mdss.Store, key: str) -> list[int]:
    """Counts the reads of ``key`` on ``store`` from now on (a one-element list)."""
    count = [0]
    get = store.get

    def counting(asked: str) -> mdss.Record | None:
        count[0] += asked == key
        return get(asked)

    store.get = counting  # type: ignore[method-assign]
    return count


def test_a_writer_whose_held_head_keeps_moving_reads_it_first(store) -> None:
    """Alone, a writer compare-and-sets from the head it holds (no read). When another writer commits
    between its commits, it learns that its held head is stale and reads first, so it stops losing
    races; alone again, it goes back to one round trip per write."""
    mine = mdss.SortedSet(store, "w", log_limit=1000)
    other = mdss.SortedSet(store, "w", log_limit=1000)
    mine.add("a", 0)
    reads = head_reads(store, mine.keys.head)
    if store.appends:  # the store appends to whatever head it holds (mdss._tail): no race, no read, ever
        other.incr("b", 1)
        reads[0] = 0
        for _ in range(10):
            other.incr("b", 1)
            mine.incr("a", 1)
        assert reads[0] == 0 and mine.retries == 0 and mine.score("a") == 10 and other.score("b") == 11
        return
    if (
        mine.engine.writer.held is None
    ):  # Riak: a compare-and-set does not say the version it wrote, so commits read first
        mine.incr("a", 1)
        assert reads[0] == 1
        return
    for _ in range(10):
        mine.incr("a", 1)
    assert reads[0] == 0 and mine.retries == 0

    for _ in range(10):
        other.incr("b", 1)
        mine.incr("a", 1)
    assert mine.engine.writer.stale[0] > 0.5
    other.incr("b", 1)
    lost, read = mine.retries, reads[0]
    mine.incr("a", 1)
    assert reads[0] == read + 1 and mine.retries == lost  # read first: no lost race
    assert mine.score("a") == 21 and other.score("b") == 11

    for _ in range(20):
        mine.incr("a", 1)
    read = reads[0]
    mine.incr("a", 1)
    assert reads[0] == read and mine.score("a") == 42


def test_the_shards_of_a_set_learn_stale_heads_together(store) -> None:
    board = mdss.SortedSet(store, "s", shards=4)
    assert len({id(engine.writer.stale) for engine in board.engines}) == 1


def test_the_writer_that_made_the_trees_merges_at_the_limit_the_others_later(store) -> None:
    """The writer whose cache holds the current trees (it made them: a load, a merge) merges when the log
    reaches ``log_limit``; another merges only at 1.25 times that, unless the first does before."""
    loader = mdss.SortedSet.load(store, "m", {f"p{i}": i for i in range(40)}, chunk_size=4, log_limit=8)
    other = mdss.SortedSet(store, "m", log_limit=8)
    for i in range(9):
        other.incr(f"p{i}", 1)
    assert other.merges == 0 and len(other.engine.head.log) == 9
    other.incr("p9", 1)  # 10 = 1.25 * 8: it merges after all, and made the trees now
    assert other.merges == 1 and len(other.engine.head.log) == 0
    for i in range(8):
        loader.incr(f"p{i}", 1)
    assert loader.merges == 0  # no longer the maker of the trees
    for i in range(8):
        other.incr(f"p{i}", 1)
    assert other.merges == 2
    assert loader.check() == [] and loader.score("p0") == 3 and loader.score("p9") == 10


def _moving(store: mdss.Store, key: str, move) -> list[int]:
    """Calls ``move()`` before every compare-and-set of ``key`` while the count (a one-element list, returned)
    is positive, counting it down: another writer commits first, and that compare-and-set loses."""
    left, moving = [0], [False]
    cas = store.cas

    def racing(asked: str, value: bytes, version: object) -> object:
        if asked == key and left[0] > 0 and not moving[0]:  # not the other writer's own compare-and-set
            left[0] -= 1
            moving[0] = True
            try:
                move()
            finally:
                moving[0] = False
        return cas(asked, value, version)

    store.cas = racing  # type: ignore[method-assign]
    return left


def test_a_writer_that_lost_three_races_waits_for_a_pause_then_commits_from_the_head_it_read() -> None:
    """``QUICK_RETRIES`` lost races in a row: the writer reads the head until two reads one interval apart
    find it unchanged (the others paused), then tries again from the second read, without reading again;
    each lost race before rebased at once on the head the conflict returned, without a read either."""
    store = MemoryStore(appends=False)  # commits compare-and-set the head
    mine, other = mdss.SortedSet(store, "q", log_limit=1000), mdss.SortedSet(store, "q", log_limit=1000)
    for _ in range(3):  # alone: it trusts the head it holds, and commits without reading first
        mine.incr("a", 0)
    reads = head_reads(store, mine.keys.head)

    def move() -> None:
        counted = reads[0]
        other.incr("b", 1)
        reads[0] = counted  # only this writer's reads count

    left = _moving(store, mine.keys.head, move)
    lost = 2 * mdss._commit.QUICK_RETRIES  # two rounds
    left[0] = lost
    assert mine.incr("a", 5) == 5
    assert left[0] == 0 and mine.retries == lost
    assert reads[0] == 2 * 2  # two reads per wait: the attempts after them read nothing more
    assert mine.score("a") == 5 and other.score("b") == lost


def _waiting(store: mdss.Store) -> tuple[mdss.SortedSet, mdss.SortedSet, list[int], Callable[[], None]]:
    """A writer about to wait for a pause (tiny intervals), another that commits before each of the store's
    reads of the head, the count of those reads, and the store's own ``get`` back (a function to call)."""
    mine, other = mdss.SortedSet(store, "q"), mdss.SortedSet(store, "q")
    mine.add("a", 0)
    mine.engine.policy = attrs.evolve(mine.engine.policy, base=1e-5, cap=1e-5)
    reads, get = [0], store.get

    def moving(key: str) -> mdss.Record | None:
        reads[0] += 1
        store.get = get  # type: ignore[method-assign]  # the other writer's own reads
        try:
            other.incr("b", 1)
        finally:
            store.get = moving  # type: ignore[method-assign]
        return get(key)

    store.get = moving  # type: ignore[method-assign]
    return mine, other, reads, lambda: setattr(store, "get", get)


def test_the_wait_for_a_pause_tries_anyway_after_a_bounded_number_of_reads() -> None:
    """A head that moves at every read: the wait returns the last head read after ``QUIET_POLLS`` reads,
    with intervals from the commit policy (here tiny), so that no writer waits long for a pause."""
    store = MemoryStore(appends=False)  # commits compare-and-set the head
    mine, _, reads, restore = _waiting(store)
    (last,) = mdss._commit._quiet(mine.engine, time.monotonic() + 60, 0.0)
    assert reads[0] == mdss._commit.QUIET_POLLS + 1
    read = reads[0]
    assert mdss._commit._quiet(mine.engine, time.monotonic(), 0.0) is None  # no time left: the commit gives up
    assert reads[0] == read  # without a read that could fail
    restore()
    assert last is not None and last.value == store.get(mine.keys.head).value


def test_on_a_store_that_applies_appends_the_wait_ends_when_the_core_head_stays() -> None:
    """Other writers' appends change the head's bytes without making a commit lose (mdss._tail): the wait
    ends on two reads with the same core head, whatever was appended under it meanwhile."""
    store = MemoryStore()  # applies appends
    mine, other, reads, restore = _waiting(store)
    (last,) = mdss._commit._quiet(mine.engine, time.monotonic() + 60, 0.0)
    restore()
    assert reads[0] == 2 and last is not None and last.value == store.get(mine.keys.head).value
    assert other.score("b") == 2 and other.commits == 2  # two appends landed during the wait


def test_a_commit_that_keeps_losing_raises_after_its_rounds_with_nothing_applied() -> None:
    """``max_attempts`` counts rounds of lost races (three each); then ConflictError, and nothing applied."""
    store = MemoryStore(appends=False)  # commits compare-and-set the head
    mine = mdss.SortedSet(store, "q", max_attempts=2)
    other = mdss.SortedSet(store, "q")
    mine.add("a", 0)
    left = _moving(store, mine.keys.head, lambda: other.incr("b", 1))
    left[0] = 10**6
    with pytest.raises(mdss.ConflictError, match="2 rounds"):
        mine.incr("a", 1)
    assert mine.retries == 2 * mdss._commit.QUICK_RETRIES
    left[0] = 0
    assert mine.score("a") == 0 and mine.check() == []


def test_an_sqlite_write_waits_for_the_lock_itself_and_lands_when_it_is_released(tmp_path) -> None:
    """SQLite's busy handler would sleep 1, 2, 5, 10 ms... while the lock is held for microseconds: the
    store's connections have no busy timeout, and a write polls for the lock within the store's timeout."""
    path = str(tmp_path / "w.db")
    store = SQLiteStore(path, timeout=10)
    assert store._connection().execute("PRAGMA busy_timeout").fetchone() == (0,)
    other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")
    threading.Timer(0.2, other.rollback).start()
    start = time.monotonic()
    store.put("mdss:k", b"v")
    assert 0.15 < time.monotonic() - start < 5
    assert store.get("mdss:k").value == b"v"
    other.close()
    store.close()


def test_an_sqlite_read_retries_a_busy_database(tmp_path, monkeypatch) -> None:
    """A read that meets SQLITE_BUSY (a WAL being recovered or restarted by another connection) tries again."""
    store = SQLiteStore(str(tmp_path / "r.db"))
    store.put_many({"mdss:a": b"1", "mdss:b": b"2"})
    real = store._connection()
    failures = [2]

    class Busy:
        def __getattr__(self, name: str) -> object:
            return getattr(real, name)

        def execute(self, *args: object) -> object:
            if failures[0]:
                failures[0] -= 1
                raise sqlite3.OperationalError("database is locked")
            return real.execute(*args)

    monkeypatch.setattr(store, "_connection", Busy)
    assert store.get("mdss:a").value == b"1"
    failures[0] = 1
    assert store.get_many(["mdss:a", "mdss:b"]) == [b"1", b"2"]
    failures[0] = 1
    assert sorted(store.keys("mdss:")) == ["mdss:a", "mdss:b"]
    monkeypatch.undo()
    store.close()


def test_an_sqlite_read_that_stays_busy_gives_up_after_the_timeout(tmp_path, monkeypatch) -> None:
    store = SQLiteStore(str(tmp_path / "r.db"), timeout=0.2)
    real = store._connection()

    class Busy:
        in_transaction = False

        def execute(self, *args: object) -> object:
            raise sqlite3.OperationalError("database is locked")

    monkeypatch.setattr(store, "_connection", Busy)
    with pytest.raises(mdss.StoreUnavailableError, match="write lock for over 0.2 s"):
        store.get("mdss:a")
    monkeypatch.undo()
    real.close()
    store.close()
