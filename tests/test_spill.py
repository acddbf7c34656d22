"""Loads past their memory budget: pairs spilled to a temporary SQLite database, sorted there, and built block by
block (``mdss._spill``, ``mdss._load``).

Budgets here hold a handful of pairs and blocks a few dozen, so that every load spills, blocks end mid-node, and
repeated members straddle blocks.
"""

from __future__ import annotations

import os
import tempfile
import tracemalloc

import pytest
from depth import budget
from faulty import FaultyStore
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import MEMBERS, scores

import mdss
from mdss import _load, _spill

NUL_MEMBERS = [*MEMBERS, "a\x00b", "a", "\x00", "é\x00"]


def _tiny(monkeypatch: pytest.MonkeyPatch) -> None:
    """A budget of 1 MiB holds 8 pairs in memory; a spill reads back blocks of 5."""
    monkeypatch.setattr(_load, "PAIR_BYTES", (1 << 20) // 8)
    monkeypatch.setattr(_spill, "BLOCK", 5)
    monkeypatch.setattr(_load, "BLOCK", 5)


@pytest.fixture
def tiny(monkeypatch: pytest.MonkeyPatch) -> None:
    _tiny(monkeypatch)


def _model(pairs: list[tuple[str, object]], order: str) -> list[tuple[str, object]]:
    last = dict(pairs)
    return sorted(last.items(), key=lambda p: (-p[1] if order == "desc" else p[1], p[0]))


@settings(max_examples=budget(40), deadline=None)
@given(
    pairs=st.lists(st.tuples(st.sampled_from(NUL_MEMBERS), scores), max_size=60),
    order=st.sampled_from(["desc", "asc"]),
    chunk=st.integers(2, 6),
    node_bytes=st.sampled_from([None, 400]),
)
def test_a_spilled_load_equals_the_model(pairs, order, chunk, node_bytes) -> None:
    sset = mdss.SortedSet(mdss.open_store("memory://"), "s", order=order, chunk_size=chunk)
    sset.engine.node_bytes = node_bytes
    seen: list[tuple[int, int]] = []
    with pytest.MonkeyPatch.context() as patch, tempfile.TemporaryDirectory() as spill_dir:
        _tiny(patch)
        sset.load_from(pairs, memory_bytes=1 << 20, spill_dir=spill_dir, progress=lambda d, t: seen.append((d, t)))
        assert os.listdir(spill_dir) == []
    want = _model(pairs, order)
    assert [(e.member, e.score) for e in sset] == want
    assert len(sset) == len(want) and sset.check() == []
    for rank, (member, score) in enumerate(want, start=1):
        assert sset.rank(member) == rank and sset.score(member) == score
    assert not seen or (seen[-1][0] == seen[-1][1] and all(d < t for d, t in seen[:-1]))
    sset.add_many({"new": 1, **dict(pairs[:3])})  # the loaded set takes writes
    assert sset.check() == []


def test_a_spilled_load_on_every_store(tiny, store, tmp_path) -> None:
    pairs = [(f"m{i % 70:03d}é", (i * 7919) % 23 - 11) for i in range(200)] + [("m000é", 2.5)]
    sset = mdss.SortedSet.load(store, "s", pairs, chunk_size=4, memory_bytes=1 << 20, spill_dir=str(tmp_path))
    assert [(e.member, e.score) for e in sset] == _model(pairs, "desc")
    assert sset.check() == [] and sset.unreferenced() == []
    pairs = [("x", 1), ("y", 2), *pairs]
    again = mdss.SortedSet.load(store, "s", iter(pairs), replace=True, chunk_size=4, memory_bytes=1 << 20)
    assert [(e.member, e.score) for e in again] == _model(pairs, "desc")
    assert again.check() == []  # the replaced nodes wait for gc_grace


def test_a_spilled_sharded_load(tiny, store) -> None:
    pairs = [(f"p{i % 90}", i % 13) for i in range(300)]
    sset = mdss.SortedSet.load(store, "s", pairs, shards=3, chunk_size=4, memory_bytes=3 << 20)
    assert [(e.member, e.score) for e in sset] == _model(pairs, "desc")
    assert sset.check() == []


@pytest.mark.parametrize("fail_at", [3, 6, 9, 12])
def test_a_spilled_load_that_fails_leaves_the_set_and_no_nodes(tiny, store, tmp_path, fail_at) -> None:
    mdss.SortedSet.load(store, "s", {"old": 1}, chunk_size=4)
    before = mdss.SortedSet(store, "s").node_keys()
    faulty = FaultyStore(store, fail_at)
    with pytest.raises(mdss.StoreUnavailableError):
        mdss.SortedSet.load(
            faulty,
            "s",
            [(f"m{i}", i) for i in range(100)],
            replace=True,
            memory_bytes=1 << 20,
            spill_dir=str(tmp_path),
        )
    after = mdss.SortedSet(store, "s")
    assert list(after) == [mdss.Entry("old", 1, 1)]
    assert after.node_keys() == before and os.listdir(tmp_path) == []


def test_bad_pairs_past_the_budget_are_refused_before_anything_is_written(tiny, store, tmp_path) -> None:
    pairs = [(f"m{i}", i) for i in range(50)] + [("bad", float("nan"))]
    with pytest.raises(mdss.InvalidScoreError):
        mdss.SortedSet.load(store, "s", pairs, memory_bytes=1 << 20, spill_dir=str(tmp_path))
    assert mdss.SortedSet(store, "s").node_keys() == [] and os.listdir(tmp_path) == []
    mdss.SortedSet.load(store, "s", {"a": 1})
    with pytest.raises(mdss.InvalidArgumentError, match="replace=True"):  # refused before the pairs are spilled
        mdss.SortedSet.load(store, "s", iter(pairs), memory_bytes=1 << 20)


def test_a_missing_spill_directory_is_refused(tiny, tmp_path) -> None:
    with pytest.raises(mdss.InvalidArgumentError, match="spill directory"):
        mdss.SortedSet.load(
            mdss.open_store("memory://"),
            "s",
            {f"m{i}": i for i in range(20)},
            memory_bytes=1 << 20,
            spill_dir=str(tmp_path / "absent"),
        )


@pytest.mark.parametrize("memory", [0, 1000, "1", None])
def test_a_bad_budget_is_refused(memory) -> None:
    with pytest.raises(mdss.InvalidArgumentError, match="memory_bytes"):
        mdss.SortedSet.load(mdss.open_store("memory://"), "s", {"a": 1}, memory_bytes=memory)


def test_a_spilled_load_holds_its_budget_not_the_set(tmp_path) -> None:
    """150,000 pairs with a budget of 8 MiB into SQLite: Python's peak stays under the budget, where holding them
    would take about 35 MiB (SQLite's page caches, also bounded, are not traced)."""
    pairs = ((f"player-{k:08d}", k) for k in (i * 7919 % 150_000 for i in range(150_000)))
    sset = mdss.SortedSet(mdss.open_store(f"sqlite:///{tmp_path}/s.db"), "s", cache_bytes=0)
    tracemalloc.start()
    try:
        sset.load_from(pairs, memory_bytes=8 << 20, spill_dir=str(tmp_path))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(sset) == 150_000 and sset.rank("player-00000999") == 150_000 - 999
    assert peak < 8 << 20, peak
