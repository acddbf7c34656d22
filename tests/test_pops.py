"""Reads and writes of the ends and of ranges: random members, pops, range removals (Redis' ZRANDMEMBER, ZPOPMIN /
ZPOPMAX, ZREMRANGEBYSCORE / ZREMRANGEBYRANK). Their model checks are in the stateful test
(tests/test_sortedset_stateful.py); here, what takes threads, counts or statistics."""

from __future__ import annotations

import collections
import random
import threading

import pytest

import mdss


def test_random_members_are_distinct_exact_and_uniform() -> None:
    """Draws are distinct entries of one snapshot with their ranks, and every member comes up about as often."""
    store = mdss.open_store("memory://")
    pairs = {f"m{i:02d}": i % 7 for i in range(40)}
    for sset in (
        mdss.SortedSet.load(store, "one", pairs, chunk_size=3),
        mdss.SortedSet.load(store, "many", pairs, chunk_size=3, shards=3),
    ):
        sset.add("late", 3)  # in the update log
        expected = {e.member: e for e in sset.range(0, 100)}
        rng = random.Random(5)
        seen: collections.Counter[str] = collections.Counter()
        for _ in range(600):
            drawn = sset.random_members(4, rng=rng)
            assert len({e.member for e in drawn}) == 4
            assert all(expected[e.member] == e for e in drawn)
            seen.update(e.member for e in drawn)
        assert set(seen) == set(expected)
        mean = 600 * 4 / len(expected)
        chi2 = sum((n - mean) ** 2 / mean for n in seen.values())
        assert chi2 < 80  # 40 degrees of freedom: p < 0.001 above about 73
        assert sorted(e.member for e in sset.random_members(1000)) == sorted(expected)
        assert sset.random_members(0) == []
    assert mdss.SortedSet(store, "none").random_members(3) == []
    with pytest.raises(mdss.InvalidArgumentError):
        sset.random_members(-1)
    with pytest.raises(mdss.InvalidArgumentError):
        sset.random_members(2, rng=7)


def test_random_members_read_every_entry_set_in_one_round_trip() -> None:
    store = mdss.open_store("memory://")
    mdss.SortedSet.load(store, "s", {f"m{i:04d}": i for i in range(2000)}, chunk_size=10, shards=1)
    reader = mdss.SortedSet(store, "s")  # unsharded: a sharded set finds each position by counts
    reader.node_keys()  # every manifest cached (the ids of entry sets are in them), no entry set
    calls = store.stats.calls
    assert len(reader.random_members(20, rng=random.Random(1))) == 20
    assert store.stats.calls - calls == 2  # the head, then the entry sets drawn from


def test_concurrent_pops_lose_and_double_nothing(store_factory) -> None:
    """Threads with objects of their own pop from one set while others add to it: every member added is popped once
    or still there, none twice; each pop's entries were the lowest of a snapshot."""
    store = store_factory()
    mdss.SortedSet.load(store, "q", {f"m{i:03d}": i for i in range(120)}, chunk_size=4)
    popped: list[list[mdss.Entry]] = []
    lock = threading.Lock()

    def popper() -> None:
        sset = mdss.SortedSet(store, "q")
        for _ in range(12):
            got = sset.pop_min(3)
            with lock:
                popped.append(got)

    def adder(t: int) -> None:
        sset = mdss.SortedSet(store, "q")
        for i in range(15):
            sset.add(f"n{t}-{i:02d}", 1000 + i)

    threads = [threading.Thread(target=popper) for _ in range(3)]
    threads += [threading.Thread(target=adder, args=(t,)) for t in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    members = [e.member for got in popped for e in got]
    assert len(members) == len(set(members)) == 3 * 12 * 3  # 108 of the first 120: none twice
    assert all(all(a.score <= b.score for a, b in zip(got, got[1:])) for got in popped)
    rest = {e.member for e in mdss.SortedSet(store, "q")}
    assert rest.isdisjoint(members)
    added = {f"n{t}-{i:02d}" for t in range(2) for i in range(15)}
    assert rest | set(members) == {f"m{i:03d}" for i in range(120)} | added


def test_concurrent_range_removals_count_each_member_once(store_factory) -> None:
    """Threads remove overlapping score ranges and rank ranges at once: each member is removed by one of them, and
    their counts add up to what left the set."""
    store = store_factory()
    mdss.SortedSet.load(store, "r", {f"m{i:03d}": i for i in range(150)}, chunk_size=4)
    counts: list[int] = []
    lock = threading.Lock()

    def by_score(lo: int, hi: int) -> None:
        n = mdss.SortedSet(store, "r").remove_range_by_score(lo, hi)
        with lock:
            counts.append(n)

    def by_rank() -> None:
        n = mdss.SortedSet(store, "r").remove_range_by_rank(1, 5)
        with lock:
            counts.append(n)

    threads = [threading.Thread(target=by_score, args=(lo, lo + 40)) for lo in (0, 20, 30)]
    threads.append(threading.Thread(target=by_rank))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    left = {e.member for e in mdss.SortedSet(store, "r")}
    assert not left & {f"m{i:03d}" for i in range(71)}  # every score range went
    assert sum(counts) == 150 - len(left)


@pytest.mark.parametrize("shards", [1, 2])
def test_a_pop_refused_in_a_later_round_is_no_refusal_of_the_whole_pop(monkeypatch, shards) -> None:
    """StoreRefusedError says nothing of the call landed: a pop or range removal whose first round took entries (others
    changed under it) and whose next round the store refused raises StoreUnavailableError saying what was taken, and
    the entries taken stay taken; refused in its first round, it raises the refusal and takes nothing."""
    board = mdss.SortedSet.load(mdss.open_store("memory://"), "b", {f"m{i}": i for i in range(6)}, shards=shards)
    real, rounds = board._take, []

    def later_refused(entries):
        rounds.append(len(entries))
        if len(rounds) > 1:
            raise mdss.StoreRefusedError("injected: throttled")
        return real(entries[:1])  # as if the others had changed: another round follows

    monkeypatch.setattr(board, "_take", later_refused)
    with pytest.raises(mdss.StoreUnavailableError, match="after 1 entries were taken") as raised:
        board.pop_max(3)
    assert not isinstance(raised.value, mdss.StoreRefusedError)
    assert len(board) == 5 and "m5" not in board
    rounds.clear()
    with pytest.raises(mdss.StoreUnavailableError, match="after 1 entries were taken") as raised:
        board.remove_range_by_rank(1, 3)
    assert not isinstance(raised.value, mdss.StoreRefusedError) and len(board) == 4
    rounds[:] = [0]  # refused at once
    with pytest.raises(mdss.StoreRefusedError):
        board.pop_min(2)
    assert len(board) == 4


def test_a_pop_whose_later_rounds_keep_losing_returns_what_it_took(monkeypatch) -> None:
    """A pop of several rounds whose later ones kept finding the entries changed raised ConflictError ("nothing was
    applied"), though its first round had removed entries, which no caller then got (a review). A pop returns what it
    took; a range removal raises StoreUnavailableError saying how many it removed."""
    board = mdss.SortedSet.load(mdss.open_store("memory://"), "b", {f"m{i}": i for i in range(6)}, retry_budget=0.2)
    real = board._take
    monkeypatch.setattr(board, "_take", lambda entries: real(entries[:1]))  # as if the others changed each round
    taken = board.pop_max(3)
    assert [e.member for e in taken] == ["m5", "m4", "m3"]
    monkeypatch.setattr(board, "_take", lambda entries: real(entries[:1]) if len(board) == 3 else [])
    assert [e.member for e in board.pop_max(3)] == ["m2"]  # its later rounds took none: what it took
    assert len(board) == 2
    monkeypatch.setattr(board, "_take", lambda entries: real(entries[:1]) if len(board) == 2 else [])
    with pytest.raises(mdss.StoreUnavailableError, match="after 1 entries were taken"):
        board.remove_range_by_rank(1, 2)
    assert len(board) == 1
