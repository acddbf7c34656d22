"""What only the SQLite store does: foreign value types, a full disk, another process's write lock."""

from __future__ import annotations

import sqlite3
import threading
import time
from typing import Any

import pytest
from depth import budget
from hypothesis import given, settings
from hypothesis import strategies as st

import mdss
from mdss.stores.sqlite import SQLiteStore


@pytest.fixture
def path(tmp_path):
    return str(tmp_path / "store.db")


@pytest.mark.parametrize("value", ["text", 1.5, 7], ids=["TEXT", "REAL", "INTEGER"])
def test_a_value_that_is_not_a_blob_is_corrupt_data_naming_the_key(path, value) -> None:
    store = SQLiteStore(path)
    store.put("mdss:s:n:good", b"ok")
    with sqlite3.connect(path) as db:  # what a hand edit or another program can leave in the file
        db.execute("INSERT INTO kv VALUES ('mdss:s:n:bad', ?, 1)", (value,))
    for read in (lambda: store.get("mdss:s:n:bad"), lambda: store.get_many(["mdss:s:n:good", "mdss:s:n:bad"])):
        with pytest.raises(mdss.CorruptDataError, match="not a BLOB") as caught:
            read()
        assert caught.value.key == "mdss:s:n:bad"
    assert store.get_many(["mdss:s:n:good"]) == [b"ok"]


def test_a_full_disk_is_store_unavailable_naming_the_cause(path) -> None:
    store = SQLiteStore(path)
    store.put("mdss:s:n:small", b"x")
    db = store._connection()
    # A disk that fills up, for this connection: the file may not grow past the pages it has.
    (pages,) = db.execute("PRAGMA page_count").fetchone()
    db.execute(f"PRAGMA max_page_count = {pages}")
    for write in (
        lambda: store.put_many({f"mdss:s:n:{i}": bytes(4000) for i in range(20)}),
        lambda: store.cas("mdss:s:h", bytes(100_000), None),
    ):
        with pytest.raises(mdss.StoreUnavailableError, match="the disk is full") as caught:
            write()
        assert isinstance(caught.value.__cause__, sqlite3.OperationalError)
        assert "full" in str(caught.value.__cause__)
    assert store.get("mdss:s:n:0") is None and store.get("mdss:s:h") is None  # nothing half-written
    db.execute("PRAGMA max_page_count = 1073741823")  # space again: the connection is usable, not stuck
    store.put_many({"mdss:s:n:0": bytes(4000)})
    assert store.get("mdss:s:n:0").value == bytes(4000)


def test_a_full_disk_fails_a_set_write_cleanly(path) -> None:
    store = SQLiteStore(path)
    board = mdss.SortedSet(store, "s", chunk_size=4)
    board.add("ann", 1)
    (pages,) = store._connection().execute("PRAGMA page_count").fetchone()
    store._connection().execute(f"PRAGMA max_page_count = {pages}")
    with pytest.raises(mdss.StoreUnavailableError, match="disk is full"):
        board.add_many({f"m{i:04d}-" + "x" * 200: i for i in range(500)})
    assert board.range(0, 10) == [mdss.Entry("ann", 1, 1)]


def _locked_by_another_connection(path: str) -> sqlite3.Connection:
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # the write lock, held as a long load would hold it
    return other


def test_opening_and_reading_while_another_connection_holds_the_write_lock(path) -> None:
    with SQLiteStore(path) as store:
        mdss.SortedSet(store, "s").add_many({"ann": 3, "bob": 2})
    other = _locked_by_another_connection(path)
    try:
        start = time.monotonic()
        store = mdss.open_store(f"sqlite:///{path}?timeout=5")
        board = mdss.SortedSet(store, "s")
        assert [e.member for e in board.range(0, 10)] == ["ann", "bob"]
        assert time.monotonic() - start < 1, "a read waited for the write lock"
        store.close()
    finally:
        other.rollback()
        other.close()


@pytest.mark.parametrize("write", ["put", "cas"])
def test_a_write_gives_up_on_a_held_lock_after_its_timeout(path, write) -> None:
    SQLiteStore(path).close()
    other = _locked_by_another_connection(path)
    try:
        store = SQLiteStore(path, timeout=0.3)
        start = time.monotonic()
        with pytest.raises(mdss.StoreUnavailableError, match="held the write lock for over 0.3 s") as caught:
            store.put("mdss:k", b"v") if write == "put" else store.cas("mdss:k", b"v", None)
        assert 0.25 < time.monotonic() - start < 3
        assert isinstance(caught.value.__cause__, sqlite3.OperationalError)
        store.close()
    finally:
        other.rollback()
        other.close()


def test_switching_a_new_file_to_wal_waits_out_another_process_doing_so(path, monkeypatch) -> None:
    """Processes opening one new file at once: ``PRAGMA journal_mode=WAL`` can answer SQLITE_BUSY without SQLite's busy
    handler (another process is setting up the WAL), and the open failed at once (a helper's probe: 2 of 4,800 opens
    by 16 processes at once). It is waited out within the timeout now; here the first two tries are busy."""
    busy = [2]

    class Switching:
        def __init__(self, db: sqlite3.Connection) -> None:
            self.db = db

        def execute(self, statement: str, *args: Any) -> Any:
            if statement == "PRAGMA journal_mode=WAL" and busy[0]:
                busy[0] -= 1
                raise sqlite3.OperationalError("database is locked")
            return self.db.execute(statement, *args)

        def __getattr__(self, name: str) -> Any:
            return getattr(self.db, name)

    connect = sqlite3.connect
    monkeypatch.setattr(sqlite3, "connect", lambda *a, **k: Switching(connect(*a, **k)))
    with SQLiteStore(path) as store:
        mdss.SortedSet(store, "s").add("ann", 1)
    assert busy == [0]
    with SQLiteStore(path) as store:
        assert mdss.SortedSet(store, "s").score("ann") == 1


@pytest.mark.parametrize("refusal", ["lock", "read-only"])
def test_a_set_write_the_store_refused_is_a_refusal_not_a_doubt(path, refusal) -> None:
    """A write SQLite refused outright (its lock held past the timeout, a read-only database) applied nothing, yet a
    set's write reported OutcomeUnknownError ("cannot be proven applied or not") after proving for ~5 s more, and an
    incr could not be retried safely (a helper's probe). Now: StoreRefusedError, at once, and the set unchanged."""
    store = SQLiteStore(path, timeout=0.3)
    board = mdss.SortedSet(store, "s", chunk_size=4)
    board.add_many({"ann": 1, "bob": 2})
    other = _locked_by_another_connection(path) if refusal == "lock" else None
    if other is None:
        store._connection().execute("PRAGMA query_only = 1")  # SQLITE_READONLY, as a read-only file or mount gives
    try:
        for write in (lambda: board.incr("ann", 1), lambda: board.add_many({f"m{i}": i for i in range(30)})):
            start = time.monotonic()
            with pytest.raises(mdss.StoreRefusedError) as caught:
                write()
            assert not isinstance(caught.value, mdss.OutcomeUnknownError)
            assert time.monotonic() - start < 3
    finally:
        if other is not None:
            other.rollback()
            other.close()
        else:
            store._connection().execute("PRAGMA query_only = 0")
    assert board.scores(["ann", "bob", "m1"]) == [1, 2, None]
    assert board.incr("ann", 1) == 2 and board.check() == []
    if refusal == "read-only":  # the first write of a new set: it spun for ever, re-reading the absent head
        store._connection().execute("PRAGMA query_only = 1")
        with pytest.raises(mdss.StoreRefusedError):
            mdss.SortedSet(store, "new").add("ann", 1)
        store._connection().execute("PRAGMA query_only = 0")


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"timeout": "abc"}, "timeout"),
        ({"timeout": -1}, "timeout"),
        ({"timeout": float("nan")}, "timeout"),
        ({"synchronous": "maybe"}, "synchronous"),
        ({"namespace": ""}, "namespace"),
    ],
)
def test_constructor_arguments_are_validated(path, options, named) -> None:
    with pytest.raises(mdss.InvalidArgumentError, match=named):
        SQLiteStore(path, **options)


def test_a_compare_and_set_waits_for_a_lock_released_meanwhile(path) -> None:
    SQLiteStore(path).close()
    other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")
    threading.Timer(0.1, other.rollback).start()
    try:
        store = SQLiteStore(path, timeout=5)
        assert store.cas("mdss:k", b"v", None) == store.get("mdss:k").version
        store.close()
    finally:
        other.close()


def test_compare_and_set_counters_from_many_connections_are_exact(path) -> None:
    """Threads (a connection each) increment one counter by compare-and-set, rebasing on the record a
    lost race returns: no increment is lost or doubled."""
    store = SQLiteStore(path)
    store.cas("mdss:n", b"0", None)

    def work() -> None:
        record = store.get("mdss:n")
        for _ in range(150):
            while True:
                try:
                    version = store.cas("mdss:n", str(int(record.value) + 1).encode(), record.version)
                    record = type(record)((str(int(record.value) + 1).encode(),), version)
                    break
                except mdss.ConflictError as lost:
                    assert lost.current_known and lost.current is not None
                    record = lost.current

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert store.get("mdss:n").value == b"600"
    assert store.stats.conflicts > 0  # they did race
    store.close()


@settings(max_examples=budget(60), deadline=None)
@given(st.lists(st.tuples(st.integers(0, 1), st.sampled_from(["held", "fresh", "absent"]), st.binary(max_size=8))))
def test_compare_and_set_from_two_stores_on_one_file_follows_a_model(tmp_path_factory, steps) -> None:
    """Two store objects on one file, each holding the record it last saw: a compare-and-set lands exactly
    when the version it passes is the current one (or, for "only if absent", when the key is absent), and
    a lost one returns what the key holds."""
    path = str(tmp_path_factory.mktemp("cas") / "store.db")
    stores = [SQLiteStore(path), SQLiteStore(path)]
    held: list = [None, None]
    current = None  # the model: the key's (value, version), None while absent
    for who, how, value in steps:
        version = None if how == "absent" else (held[who].version if how == "held" and held[who] else None)
        if how == "fresh":
            held[who] = stores[who].get("mdss:k")
            version = None if held[who] is None else held[who].version
        wins = current is None if version is None else current is not None and version == current[1]
        try:
            written = stores[who].cas("mdss:k", value, version)
        except mdss.ConflictError as lost:
            assert not wins
            assert lost.current_known
            assert (None if lost.current is None else (lost.current.value, lost.current.version)) == current
            held[who] = lost.current
        else:
            assert wins
            current = (value, written)
            held[who] = stores[who].get("mdss:k")
            assert (held[who].value, held[who].version) == current
    for store in stores:
        store.close()


def test_every_connection_checkpoints_at_the_wal_size_chosen_for_compare_and_sets(path) -> None:
    """At SQLite's default of 1,000 pages four writer processes took more CPU per update and lost more
    compare-and-sets (docs/performance.md, "SQLite checkpoints and lazy overlays"): every connection, in
    every thread, uses 10,000."""
    store = SQLiteStore(path)
    found: list[int] = []
    worker = threading.Thread(
        target=lambda: found.append(store._connection().execute("PRAGMA wal_autocheckpoint").fetchone()[0])
    )
    worker.start()
    worker.join()
    assert found + [store._connection().execute("PRAGMA wal_autocheckpoint").fetchone()[0]] == [10_000, 10_000]


@pytest.mark.parametrize("version", [None, "stale"], ids=["only if absent", "stale version"])
def test_a_lost_compare_and_set_whose_read_fails_is_still_a_definite_conflict(path, monkeypatch, version) -> None:
    """The record that won is read after the statement; a failing read must not turn the definite lost race
    into StoreUnavailableError (which callers treat as a write that may have landed)."""
    store = SQLiteStore(path)
    first = store.cas("mdss:k", b"first", None)
    store.put("mdss:k", b"second")
    expected = first if version == "stale" else None

    def unreadable(key: str) -> None:
        raise mdss.StoreUnavailableError("the read after the statement failed")

    monkeypatch.setattr(store, "_get", unreadable)
    with pytest.raises(mdss.ConflictError) as caught:
        store.cas("mdss:k", b"mine", expected)
    assert not caught.value.current_known
    monkeypatch.undo()
    assert store.get("mdss:k").value == b"second"
