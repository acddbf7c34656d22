"""Merges in bounded memory: the entry sets a merge rewrites are read a manifest at a time and written as soon as
full (``Writer`` with ``flush``), not all held until the commit (4 GB at 10^7 members; 10^8 ran out of memory).

``FLUSH_LEAVES`` is tiny here, so that every merge hands entry sets over many times, and under-filled ones merge with
neighbours already written.
"""

from __future__ import annotations

import random
import time
from typing import Any

import pytest
from faulty import FaultyStore
from hypothesis import settings
from hypothesis.stateful import run_state_machine_as_test
from test_sortedset_stateful import SortedSetMachine

import mdss
from mdss import _tree, _writer
from mdss._head import Head


@pytest.fixture
def tiny_flush(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_writer, "FLUSH_LEAVES", 1)


def test_sorted_set_matches_model_with_merges_that_flush_every_entry_set(tiny_flush) -> None:
    SortedSetMachine.factory = staticmethod(lambda: mdss.open_store("memory://"))
    SortedSetMachine.shards = 1
    profile = settings()
    run_state_machine_as_test(
        SortedSetMachine, settings=settings(profile, max_examples=max(profile.max_examples // 2, 10))
    )


def _model_set(store: mdss.Store, n: int, updates: int, seed: int = 1) -> tuple[mdss.SortedSet, dict[str, int]]:
    rng = random.Random(seed)
    model = {f"m{i:05d}": rng.randrange(50) for i in range(n)}
    mdss.SortedSet.load(store, "s", model, chunk_size=4)
    sset = mdss.SortedSet(store, "s", log_limit=10**6, gc_grace=0)
    changes = [(f"m{rng.randrange(n + n // 10):05d}", rng.randrange(50)) for _ in range(updates)]
    sset.add_many(changes)
    sset.remove_many([f"m{rng.randrange(n):05d}" for _ in range(updates // 5)])
    return sset, {**model, **dict(changes)}


def _entries(sset: mdss.SortedSet) -> list[tuple[str, int]]:
    return [(e.member, e.score) for e in sset]


def test_a_flushing_merge_on_every_store(tiny_flush, store) -> None:
    sset, _ = _model_set(store, 300, 120)
    before = _entries(sset)
    assert sset.merge()
    assert _entries(sset) == before and sset.check() == []
    fresh = mdss.SortedSet(store, "s", cache_bytes=0)
    assert _entries(fresh) == before and fresh.check() == []


@pytest.mark.parametrize("fail_at", range(1, 40, 5))
def test_a_merge_that_fails_midway_leaves_the_set_and_no_nodes(tiny_flush, store, fail_at) -> None:
    sset, _ = _model_set(store, 200, 80)
    before, keys = _entries(sset), set(sset.node_keys())
    faulty = FaultyStore(store)
    merger = mdss.SortedSet(faulty, "s", log_limit=10**6, gc_grace=0)
    faulty.fail_at = faulty.count + fail_at
    try:
        merged = merger.merge()
    except mdss.StoreUnavailableError:
        merged = False
    after = mdss.SortedSet(store, "s", cache_bytes=0)
    assert _entries(after) == before and after.check() == []
    if not merged:  # what the failed merge wrote is deleted again
        assert set(after.node_keys()) <= keys


def test_a_merge_holds_a_manifest_of_entry_sets_at_a_time(tiny_flush, monkeypatch) -> None:
    """Pinned entry sets stay at one manifest's worth (4 here), and new ones at what one manifest's updates make (a
    few splits), while the merge rewrites hundreds."""
    most = {"pinned": 0, "new": 0}
    load_many, flush_full = _tree.Source.load_many, _writer.Writer._flush_full

    def counting_load(self, ids, keyfn, height):
        found = load_many(self, ids, keyfn, height)
        most["pinned"] = max(most["pinned"], sum(1 for node in self.pins.values() if not node.height))
        return found

    def counting_flush(self):
        most["new"] = max(most["new"], sum(1 for node in self.new.values() if not node.height))
        flush_full(self)

    sset, _ = _model_set(mdss.open_store("memory://"), 1000, 600)
    before = _entries(sset)
    monkeypatch.setattr(_tree.Source, "load_many", counting_load)
    monkeypatch.setattr(_writer.Writer, "_flush_full", counting_flush)
    stats = sset.stats.snapshot()
    assert sset.merge()
    assert sset.stats.since(stats)["writes"] > 200
    assert most["pinned"] <= 8 and most["new"] <= 20, most
    assert _entries(sset) == before and sset.check() == []


def test_a_wait_for_another_mergers_claim_ends_with_the_callers_retry_budget() -> None:
    """A merger cut off right after its claim landed leaves the claim for its lease (10 s): a writer whose full log
    waits for that merge polled the head for the whole lease, whatever its ``retry_budget`` (a helper's probe: 10 s
    against 1). Now the wait ends with the budget: ConflictError, nothing written, and once the lease runs out the
    writer merges itself."""

    class CutAfterClaim(FaultyStore):
        cut = False

        def _call(self, name: str, *args: Any) -> Any:
            if self.cut:
                raise mdss.StoreUnavailableError(f"network cut ({name})")
            result = super()._call(name, *args)
            if name in ("_cas", "_swap", "_append") and args[0].endswith(":h"):
                record = self.inner.get(args[0])
                self.cut = record is not None and Head.decode(args[0], record.value).log.claim is not None
            return result

    inner = mdss.open_store("memory://")
    cut = CutAfterClaim(inner)
    merger = mdss.SortedSet(cut, "s", log_limit=4, retry_budget=0.3)
    writer = mdss.SortedSet(inner, "s", log_limit=4, retry_budget=0.3)
    for i in range(50):
        if cut.cut:
            break
        merger.add(f"a{i}", i)
    assert cut.cut
    refused = 0
    for i in range(8):
        start = time.monotonic()
        try:
            writer.add(f"b{i}", i)
        except mdss.ConflictError:
            refused += 1
            assert writer.score(f"b{i}") is None
        assert time.monotonic() - start < 2  # the budget (0.3 s) and a margin, not the lease (10 s)
    assert refused
