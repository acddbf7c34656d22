"""Slices over the update log, exactly as if it were merged: every offset and length, deep trees of tiny
chunks, and a snapshot that other writes in this process overtook (its view undoes them on the fly)."""

from __future__ import annotations

import pytest
from depth import budget
from hypothesis import given, settings
from hypothesis import strategies as st

import mdss

MEMBERS = [f"m{i:02d}" for i in range(40)]
WRITES = st.lists(st.tuples(st.sampled_from(MEMBERS), st.none() | st.integers(-3, 3)), max_size=25)


def listing(model: dict[str, int], order: str) -> tuple[list[str], list[int]]:
    sign = -1 if order == "desc" else 1
    ranked = sorted(model.items(), key=lambda kv: (sign * kv[1], kv[0]))
    return [m for m, _ in ranked], [s for _, s in ranked]


def apply(board: mdss.SortedSet, model: dict[str, int], writes: list) -> None:
    for member, score in writes:
        if score is None:
            board.remove(member)
            model.pop(member, None)
        else:
            board.add(member, score)
            model[member] = score


def every_slice_matches(ranking, model: dict[str, int], order: str) -> None:
    members, scores = listing(model, order)
    assert ranking.count == len(members)
    for start in range(len(members) + 2):
        for length in (1, 2, 3, 5, 11, len(members)):
            got = ranking.slice(start, start + length)
            assert got == (members[start : start + length], scores[start : start + length]), (start, length)


@settings(max_examples=budget(200), deadline=None)
@given(
    st.dictionaries(st.sampled_from(MEMBERS), st.integers(-3, 3)),
    WRITES,
    WRITES,
    st.sampled_from(["desc", "asc"]),
    st.integers(2, 4),
)
def test_slices_over_the_log_match_the_model(start, writes, later, order, chunk) -> None:
    store = mdss.open_store("memory://")
    board = mdss.SortedSet.load(store, "b", start, chunk_size=chunk, order=order, log_limit=10_000)  # no merges
    model = dict(start)
    apply(board, model, writes)
    before, then = mdss._snapshot.snapshot(board.engine), dict(model)
    apply(board, model, later)  # extends the overlay that ``before`` reads
    every_slice_matches(before.ranking, then, order)
    every_slice_matches(mdss._snapshot.snapshot(board.engine).ranking, model, order)


@settings(max_examples=budget(40), deadline=None)
@given(
    st.integers(0, 400),
    st.lists(st.tuples(st.integers(0, 599), st.none() | st.integers(-50, 50)), min_size=150, max_size=300),
    st.sampled_from([4, 64, 1000]),
    st.sampled_from(["desc", "asc"]),
    st.data(),
)
def test_crowded_regions_match_the_model(loaded, writes, chunk, order, data) -> None:
    """Regions holding many logged keys (over 64 added in one entry set's range, long runs removed), merged
    regions kept with their cached entry sets (none, a few, all) and reused by views at other sequence
    numbers."""
    store = mdss.open_store("memory://")
    cache = data.draw(st.sampled_from([0, 20_000, 64 << 20]))
    start = {f"m{i:03d}": i % 7 for i in range(loaded)}
    board = mdss.SortedSet.load(store, "b", start, chunk_size=chunk, order=order, log_limit=10_000, cache_bytes=cache)
    model = dict(start)
    half = len(writes) // 2
    apply(board, model, [(f"m{i:03d}", s) for i, s in writes[:half]])
    before, then = mdss._snapshot.snapshot(board.engine), dict(model)
    apply(board, model, [(f"m{i:03d}", s) for i, s in writes[half:]])
    now = mdss._snapshot.snapshot(board.engine)
    for ranking, state in ((now.ranking, model), (before.ranking, then), (now.ranking, model)):
        members, scores = listing(state, order)
        assert ranking.count == len(members)
        for _ in range(20):
            begin = data.draw(st.integers(0, len(members) + 1))
            length = data.draw(st.integers(1, 150))
            got = ranking.slice(begin, begin + length)
            assert got == (members[begin : begin + length], scores[begin : begin + length]), (begin, length)


@pytest.mark.parametrize("shards", [1, 2])
def test_a_score_changed_to_an_equal_value_of_another_type_reads_back_as_the_new_one(shards) -> None:
    """5 == 5.0, but a score changed from 50 to 50.0 is 50.0: a region's merged entries, kept while the log's
    keys in it stay the same, are not reused for logged keys that differ only in their scores' types."""
    store = mdss.open_store("memory://")
    mdss.SortedSet.load(store, "b", {f"m{i}": i for i in range(12)}, chunk_size=4, shards=shards)
    reader = mdss.SortedSet(store, "b", log_limit=10**6)
    if shards > 1:
        reader._all_keys.least = 10**18  # through the layouts' kept regions
    writer = mdss.SortedSet(store, "b", log_limit=10**6)
    writer.add("m5", 50)
    for _ in range(3):
        list(reader)
    writer.add("m5", 50.0)
    for _ in range(3):
        top = reader.range(0, 1)[0]
        assert type(top.score) is float and top == mdss.Entry("m5", 50.0, 1)
    assert [type(e.score) for e in reader if e.member == "m5"] == [float]


@settings(max_examples=budget(40), deadline=None)
@given(st.lists(st.dictionaries(st.sampled_from(MEMBERS), st.integers(-3, 3), max_size=20), max_size=8))
def test_a_batch_sealed_into_several_segments_reads_and_merges_like_the_model(batches) -> None:
    """A batch appended at once is sealed into segments of at most SEGMENT_BYTES (a store's value limit):
    here a few entries each, so that most seals write several; reads, merges and check() see them all."""
    from unittest import mock

    with mock.patch.object(mdss._log, "SEGMENT_BYTES", 40), mock.patch.object(mdss._log, "INLINE_BYTES", 60):
        board = mdss.SortedSet(mdss.open_store("memory://"), "b", chunk_size=3, log_limit=60, gc_grace=0)
        model: dict[str, int] = {}
        for batch in batches:
            board.add_many(batch)
            model.update(batch)
            members, scores = listing(model, board.order)
            assert [(e.member, e.score) for e in board] == list(zip(members, scores))
            assert board.check() == []
        board.merge()
        assert {e.member: e.score for e in board} == model and board.check() == []


@pytest.mark.parametrize("url", ["memory://?appends=false", "memory://"])
def test_a_batch_is_sealed_into_several_segments_of_at_most_segment_bytes(url: str) -> None:
    """With compare-and-set, the sealing batch goes into the segments with the log before it; where the
    store seals (``mdss._tail.swap``), it is appended after them, and sealed by the next seal."""
    from unittest import mock

    with mock.patch.object(mdss._log, "SEGMENT_BYTES", 40), mock.patch.object(mdss._log, "INLINE_BYTES", 60):
        board = mdss.SortedSet(mdss.open_store(url), "b", chunk_size=3, log_limit=60)
        board.add_many({f"m{i:02d}": 0 for i in range(5)})
        board.add_many({f"m{i:02d}": 1 for i in range(5, 10)})
        log = mdss._snapshot.snapshot(board.engine).head.log
        if board.store.appends:
            assert [first for _, first in log.segs] == [0, 4] and len(log.inline) == 5
        else:
            assert [first for _, first in log.segs] == [0, 4, 7] and log.inline == ()
        assert {e.member: e.score for e in board} == {f"m{i:02d}": int(i >= 5) for i in range(10)}


STEPS = st.lists(
    st.one_of(
        st.tuples(st.just("write"), st.sampled_from(MEMBERS), st.none() | st.integers(-3, 3)),
        st.tuples(st.just("read"), st.sampled_from(MEMBERS), st.none()),
        st.tuples(st.just("merge"), st.none(), st.none()),
    ),
    max_size=40,
)


@settings(max_examples=budget(150), deadline=None)
@given(st.dictionaries(st.sampled_from(MEMBERS), st.integers(-3, 3)), STEPS, st.integers(2, 4), st.booleans())
def test_reads_of_an_unchanged_head_answer_as_the_model(start, steps, chunk, cached) -> None:
    """A reader reuses the snapshot of a head it finds unchanged (``Engine.made``): every read, before and after
    another object's writes and merges, answers as the model, and a snapshot reused holds no entry set past its
    operation: with nothing cached, each read of an unchanged head reads its entry sets again."""
    store = mdss.open_store("memory://")
    writer = mdss.SortedSet.load(store, "b", start, chunk_size=chunk, log_limit=10_000)
    reader = mdss.SortedSet(store, "b", cache_bytes=64 << 20 if cached else 0)
    model = dict(start)
    for kind, member, score in steps:
        if kind == "write":
            apply(writer, model, [(member, score)])
        elif kind == "merge":
            writer.merge()
        else:
            members, scores = listing(model, "desc")
            counts: list[int] = []
            reader.score(member)  # the head read once (a first read looks for the set's marker too)
            for _ in range(3):  # each finds the head unchanged
                reads = store.stats.reads
                assert [(e.member, e.score) for e in reader.range(0, len(MEMBERS))] == list(zip(members, scores))
                assert reader.rank(member) == (members.index(member) + 1 if member in model else None)
                assert reader.score(member) == model.get(member)
                counts.append(store.stats.reads - reads)
            if not cached:
                assert counts[0] == counts[1] == counts[2]  # nothing cached: the entry sets read again each time
