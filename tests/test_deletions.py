"""Deferred deletion (mdss._deletions): replaced nodes wait ``gc_grace``, or ``MIN_GRACE`` once a later commit of the
same object replaced more, so that a busy set keeps what it rewrites in 2 s, not in ``gc_grace``."""

from __future__ import annotations

import pytest

import mdss
from mdss import _deletions
from mdss._deletions import MIN_GRACE, Deletions


@pytest.fixture
def clock(monkeypatch):
    now = [1000.0]
    monkeypatch.setattr(_deletions.time, "monotonic", lambda: now[0])
    return now


def test_a_batch_waits_the_grace_alone_and_min_grace_when_more_follows(clock) -> None:
    store = mdss.open_store("memory://")
    for key in ("a", "b", "c", "d"):
        store.put(key, b"x")
    deletions = Deletions(store, grace=30.0)
    deletions.defer(["a"])
    clock[0] += MIN_GRACE / 2
    deletions.defer(["b"])  # a is younger than MIN_GRACE: kept
    assert store.get("a") is not None
    clock[0] += MIN_GRACE
    deletions.defer([])  # no new replacement: only the grace makes a batch due
    assert store.get("a") is not None
    deletions.defer(["c"])  # a and b are past MIN_GRACE and something followed them: due
    assert store.get("a") is None and store.get("b") is None and store.get("c") is not None
    clock[0] += 30.0
    deletions.defer([])  # c was the last before a lull: due at its grace
    assert store.get("c") is None and store.get("d") is not None


def test_min_grace_never_exceeds_the_grace(clock) -> None:
    store = mdss.open_store("memory://")
    store.put("a", b"x")
    deletions = Deletions(store, grace=0.5)
    deletions.defer(["a"])
    clock[0] += 0.6
    deletions.defer(["b"])
    assert store.get("a") is None


def test_a_busy_set_keeps_about_one_tree_of_garbage_and_reads_right(clock) -> None:
    """Merges every MIN_GRACE seconds with a 30 s grace: the nodes of all but the newest trees are gone, the set reads
    as the model, and a reader that held an older head before the deletions retries on the newest one."""
    store = mdss.open_store("memory://")
    sset = mdss.SortedSet(store, "busy", chunk_size=4, log_limit=8, gc_grace=30.0)
    model = {f"m{i:03d}": i for i in range(200)}
    sset.add_many(model)
    old = mdss.SortedSet(store, "busy")
    assert old.rank("m100") == 100
    for round_ in range(6):
        for i in range(0, 200, 7):
            model[f"m{i:03d}"] = round_ * 1000 + i
            sset.add(f"m{i:03d}", round_ * 1000 + i)
        sset.merge()
        clock[0] += MIN_GRACE + 0.1
    sset.add("m000", -1)  # one more replacement: what the merges before replaced is due now
    model["m000"] = -1
    live = len(sset.node_keys())
    assert len(sset.unreferenced()) <= 2 * live  # the last merge's replaced tree, and the log's pieces
    assert [(e.member, e.score) for e in sset] == sorted(model.items(), key=lambda p: (-p[1], p[0]))
    assert old.rank("m000") == len(model)  # its cached head's nodes are gone: it read the newest
    assert sset.check() == []


def test_merges_within_the_grace_of_the_last_wait_for_a_longer_log(monkeypatch) -> None:
    """A writer whose last merge landed less than MIN_GRACE ago merges again only once the log is PACE times its merge
    length (what the first replaced is then due before the next replaces as much); past the grace, at the length."""
    now = [1000.0]
    monkeypatch.setattr(mdss._commit.time, "monotonic", lambda: now[0])
    monkeypatch.setattr(mdss._engine.time, "monotonic", lambda: now[0])
    s = mdss.SortedSet(mdss.open_store("memory://"), "s", log_limit=10, chunk_size=4)
    added = iter(range(10**6))

    def adds_until_a_merge() -> int:
        merges, n = s.merges, 0
        while s.merges == merges:
            s.add(f"m{next(added)}", n)
            n += 1
        return n

    adds_until_a_merge()  # the first (this writer did not make the trees: at 1.25 times the limit)
    now[0] += MIN_GRACE / 2
    assert adds_until_a_merge() == 15  # within the grace: 1.5 x 10
    now[0] += MIN_GRACE
    assert adds_until_a_merge() == 10  # past it: at the limit
    assert s.check() == []
