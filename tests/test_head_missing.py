"""A set whose head vanished while its nodes remain is never read as empty, not even by a fresh object.

Every set with content has a marker (``Keyspace.marker``): a reader that finds
no head reads it (one more round trip), and a marked set without a head but
with nodes raises ``HeadMissingError``. Never-made and dropped sets have none.
"""

from __future__ import annotations

import threading

import pytest
from readable import readable_keys

import mdss
from mdss._keys import HEAD, Keyspace, kind

PAIRS = {f"m{i:02d}": i for i in range(30)}

READS = {
    "len": len,
    "info": lambda s: s.info(),
    "iter": list,
    "contains": lambda s: "m01" in s,
    "score": lambda s: s.score("m01"),
    "scores": lambda s: s.scores(["m01", "m02"]),
    "rank": lambda s: s.rank("m01"),
    "range": lambda s: s.range(0, 5),
    "at": lambda s: s.at(1),
    "page": lambda s: s.page(5),
    "count": lambda s: s.count(20, 3),
    "around": lambda s: s.around("m01", 2, 2),
    "percentile": lambda s: s.percentile("m01"),
    "at_percentile": lambda s: s.at_percentile(0.5),
    "rank_of_score": lambda s: s.rank_of_score(7),
    "range_by_score": lambda s: s.range_by_score(20, 3),
    "estimate_rank": lambda s: s.estimate_rank(score=7),
    "estimate_percentile": lambda s: s.estimate_percentile(score=7),
    "node_keys": lambda s: s.node_keys(),
    "gc": lambda s: s.gc(wait=False),
}


def _lose_head(store: mdss.Store, name: str, **options) -> None:
    """A set of 30 members in its trees, whose head then vanishes (as a Redis evicting it would)."""
    mdss.SortedSet.load(store, name, PAIRS, chunk_size=4, **options)
    sset = mdss.SortedSet(store, name)
    heads = [e.keys.head for e in sset.engines] if isinstance(sset, mdss.ShardedSet) else [sset.keys.head]
    store.delete(heads[0])
    assert store.get(heads[0]) is None


@pytest.mark.parametrize("read", list(READS))
def test_a_fresh_reader_of_a_set_that_lost_its_head_raises(store, read) -> None:
    _lose_head(store, "b")
    fresh = mdss.SortedSet(store, "b")
    with pytest.raises(mdss.HeadMissingError):
        READS[read](fresh)
    assert readable_keys(store, Keyspace(store.namespace, "b").nodes)  # nothing was taken for garbage


@pytest.mark.parametrize("read", ["len", "rank", "page", "count", "score"])
def test_a_fresh_reader_of_a_sharded_set_that_lost_a_shards_head_raises(store, read) -> None:
    _lose_head(store, "s", shards=3)
    fresh = mdss.SortedSet(store, "s")
    lost = next(m for m in PAIRS if fresh.shard_of(m) == 0)  # the score of a member of the headless shard
    with pytest.raises(mdss.HeadMissingError):
        fresh.score(lost) if read == "score" else READS[read](fresh)


def test_check_reports_a_lost_head_and_drop_removes_the_rest(store) -> None:
    _lose_head(store, "b")
    for sset in (mdss.SortedSet(store, "b"), mdss.SortedSet(store, "b")):
        problems = sset.check()  # a list of problems, never an exception, for a damaged set
        assert len(problems) == 1 and "no head" in problems[0]
    assert mdss.SortedSet(store, "b").drop() is True  # nodes without a head are something to drop
    assert readable_keys(store, Keyspace(store.namespace, "b").prefix) == []
    fresh = mdss.SortedSet(store, "b")
    assert len(fresh) == 0 and fresh.check() == [] and fresh.drop() is False


def test_reads_of_a_set_never_made_cost_one_round_trip_more(store) -> None:
    sset = mdss.SortedSet(store, "never")
    for read in ("len", "score", "range", "rank", "page", "count"):
        before = store.stats.snapshot()
        READS[read](sset)
        assert store.stats.since(before)["calls"] == 2, read  # the head, the marker
    assert readable_keys(store, Keyspace(store.namespace, "never").prefix) == []


def test_a_dropped_set_reads_empty(store) -> None:
    old = mdss.SortedSet(store, "d", chunk_size=4)
    old.add_many(PAIRS)
    assert mdss.SortedSet(store, "d").drop() is True  # as Redis' DEL answers 1, then 0
    assert mdss.SortedSet(store, "d").drop() is False and mdss.SortedSet(store, "never", shards=2).drop() is False
    emptied = mdss.SortedSet(store, "e")
    emptied.add("ann", 1)
    emptied.remove("ann")
    assert emptied.drop() is False  # Redis' DEL finds no key a set's last member left
    assert readable_keys(store, Keyspace(store.namespace, "d").prefix) == []  # the marker too
    for sset in (old, mdss.SortedSet(store, "d")):
        assert len(sset) == 0 and sset.range(0, 3) == [] and sset.check() == []
    old.add_many(PAIRS)  # made afresh: marked again
    old.merge()
    store.delete(old.keys.head)
    with pytest.raises(mdss.HeadMissingError):
        len(mdss.SortedSet(store, "d"))


def test_a_set_made_before_markers_is_marked_by_its_next_merge(store) -> None:
    mdss.SortedSet.load(store, "o", PAIRS, chunk_size=4)
    keys = Keyspace(store.namespace, "o")
    store.delete(keys.marker)  # as a version of mdss before markers left it
    assert len(mdss.SortedSet(store, "o")) == 30
    writer = mdss.SortedSet(store, "o")
    before = store.stats.snapshot()
    writer.add("x", 1)
    writer.add("y", 2)
    assert store.stats.since(before)["writes"] <= 2  # the appends alone: writes cost nothing more
    writer.merge()
    assert store.get(keys.marker) is not None
    store.delete(keys.head)
    with pytest.raises(mdss.HeadMissingError):
        mdss.SortedSet(store, "o").rank("x")


def test_the_writer_that_makes_the_head_marks_the_set_and_no_other_write_puts(store) -> None:
    keys = Keyspace(store.namespace, "n")
    mdss.SortedSet(store, "n").add("a", 1)
    assert store.get(keys.marker) is not None
    other = mdss.SortedSet(store, "n")
    before = store.stats.snapshot()
    other.add("b", 2)
    assert store.stats.since(before)["writes"] <= 1  # the append alone


def test_a_stray_marker_reads_empty_and_goes(store) -> None:
    keys = Keyspace(store.namespace, "stray")
    store.put(keys.marker, b"m")  # a first write's marker after a drop() that came between it and its read
    sset = mdss.SortedSet(store, "stray")
    assert len(sset) == 0 and sset.check() == []
    assert store.get(keys.marker) is None
    sset.add("a", 1)
    assert store.get(keys.marker) is not None and len(mdss.SortedSet(store, "stray")) == 1


def test_gc_never_collects_the_marker_and_kind_routes_it_with_heads(store) -> None:
    sset = mdss.SortedSet(store, "g", chunk_size=4, gc_grace=0)
    sset.add_many(PAIRS)
    sset.merge()
    sset.remove_many(list(PAIRS)[:20])
    sset.merge()
    sset.gc(wait=False, sweep=True)
    assert store.get(sset.keys.marker) is not None and sset.check() == [] and len(sset) == 10
    assert kind(sset.keys.marker) == HEAD
    if hasattr(store, "types"):  # Riak: the marker lives with the heads (a 404 there is final)
        assert store._type(sset.keys.marker) == store.types["heads"]


def test_a_set_made_between_a_readers_round_trips_is_read(store) -> None:
    keys = Keyspace(store.namespace, "c")
    original, made = store._get, []

    def get(key):  # the reader finds no head; the writer makes the set before the reader's next call
        record = original(key)
        if key == keys.head and record is None and not made:
            made.append(1)
            mdss.SortedSet(store, "c", chunk_size=4).add_many(PAIRS)
        return record

    store._get = get
    try:
        assert len(mdss.SortedSet(store, "c")) in (0, 30)  # the head first seen missing, then the marker
        assert made and mdss.SortedSet(store, "c").rank("m29") == 1
    finally:
        store._get = original


def test_sets_made_while_fresh_objects_read_them_never_raise(store) -> None:
    names = [f"c{i}" for i in range(12)]
    errors: list[BaseException] = []
    done = threading.Event()

    def read() -> None:
        try:
            while not done.is_set():
                for name in names:
                    mdss.SortedSet(store, name).range(0, 3)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    reader = threading.Thread(target=read)
    reader.start()
    try:
        for name in names:
            mdss.SortedSet(store, name, chunk_size=4).add_many(PAIRS)
    finally:
        done.set()
        reader.join()
    assert errors == []
