"""SortedSet: errors, edge cases, costs in round trips, and faults at every store call of a commit."""

from __future__ import annotations

import math
from typing import Any

import pytest
from readable import readable_keys

import mdss
from mdss._keys import Keyspace
from mdss._order import MAX_MEMBER_BYTES
from mdss._tree import Leaf

LOG_LIMITS = [None, 0, 1, 7]
SHARDS = [1, 2, 3, 5]

#: Every test on every store runs with each log limit and each shard count, in four of the sixteen pairs (a
#: Latin-square row that moves with the store and the test: conftest.py); MDSS_DEEP=1 runs all sixteen.
pytestmark = pytest.mark.grid("log_limit", "shards", size=len(LOG_LIMITS))


def default_shards(monkeypatch: pytest.MonkeyPatch, shards: int) -> None:
    """Sets the test makes without ``shards`` get ``shards`` (a set that exists keeps what it has): the choice
    ``SortedSet.open`` makes, wrapped."""
    opened = mdss._shards.open_sharded

    def open_sharded(store: Any, name: Any, given: Any, options: dict[str, Any]) -> Any:
        found = opened(store, name, given, options)
        if found is not None or given is not None or shards == 1 or not isinstance(store, mdss.Store):
            return found
        if store.get(Keyspace(store.namespace, name).head) is not None:  # an unsharded set of that name
            return None
        return opened(store, name, shards, options)

    monkeypatch.setattr(mdss._shards, "open_sharded", open_sharded)


@pytest.fixture(autouse=True, params=LOG_LIMITS, ids=lambda n: f"log{n}")
def log_limit(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> int | None:
    """Every test runs with the update log's limit derived, off (commits straight into the trees), and tiny."""
    monkeypatch.setitem(mdss._engine.Engine.__init__.__kwdefaults__, "log_limit", request.param)
    return request.param


@pytest.fixture(autouse=True, params=SHARDS, ids=lambda n: f"shards{n}")
def shards(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> int:
    """Every test runs on an unsharded set and on sets of 2, 3 and 5 shards (issue 13): the same answers."""
    default_shards(monkeypatch, request.param)
    return request.param


def keyspaces(board) -> list[Keyspace]:
    """The keyspaces holding a set's heads and nodes: its own, or each shard's."""
    return [e.keys for e in board.engines]


@pytest.fixture
def board(store) -> mdss.SortedSet:
    return mdss.SortedSet(store, "board", chunk_size=4)


# -- bad input ---------------------------------------------------------------

BAD_SCORES = [float("nan"), "1", None, True, 2**63, -(2**63) - 1, [1], 1j]
BAD_MEMBERS = ["", 7, None, b"bytes", "x" * (MAX_MEMBER_BYTES + 1), "é" * 129, "\ud800"]


@pytest.mark.parametrize("score", BAD_SCORES, ids=repr)
def test_bad_scores_are_refused_and_change_nothing(board, score) -> None:
    board.add("ann", 1)
    with pytest.raises(mdss.InvalidScoreError):
        board.add("bob", score)
    with pytest.raises(mdss.InvalidScoreError):
        board.add_many({"cid": 1, "bob": score})
    with pytest.raises(mdss.InvalidScoreError):
        board.incr("ann", score)
    with pytest.raises(ValueError):  # every input error is also a ValueError
        board.count(score, 0)
    assert list(board) == [mdss.Entry("ann", 1, 1)]


@pytest.mark.parametrize("member", BAD_MEMBERS, ids=lambda m: repr(m)[:20])
def test_bad_members_are_refused(board, member) -> None:
    with pytest.raises(mdss.InvalidMemberError):
        board.add(member, 1)
    with pytest.raises(mdss.InvalidMemberError):
        board.rank(member)
    with pytest.raises(mdss.InvalidMemberError):
        board.remove_many(["ann", member])
    assert len(board) == 0


def test_member_limit_is_stated() -> None:
    with pytest.raises(mdss.InvalidMemberError, match=str(MAX_MEMBER_BYTES)):
        mdss.SortedSet(mdss.open_store("memory://"), "b").add("x" * 300, 1)
    mdss.SortedSet(mdss.open_store("memory://"), "b").add("x" * MAX_MEMBER_BYTES, 1)


def test_incr_overflow_and_inf_minus_inf_change_nothing(board) -> None:
    board.add_many({"big": 2**63 - 1, "inf": float("inf")})
    with pytest.raises(mdss.InvalidScoreError, match="64 bits"):
        board.incr("big", 1)
    with pytest.raises(mdss.InvalidScoreError, match="NaN"):
        board.incr("inf", float("-inf"))
    assert board.scores(["big", "inf"]) == [2**63 - 1, float("inf")]


@pytest.mark.parametrize(
    "call",
    [
        lambda b: b.add("a", 1, op="max"),
        lambda b: b.rank("a", ties="1223"),
        lambda b: b.rank("a", with_score=1),
        lambda b: b.range(-1),
        lambda b: b.range(0, -2),
        lambda b: b.range(0.5),
        lambda b: b.at(0),
        lambda b: b.at(-(10**5000)),  # too long an int for Python to spell in the message
        lambda b: b.around("a", before=-1),
        lambda b: b.unreferenced(-1),
        lambda b: b.unreferenced("x"),
        lambda b: mdss.SortedSet(b.store, "sharded", shards=2).unreferenced(float("nan")),
        lambda b: mdss.SortedSet(b.store, "sharded", shards=2).unreferenced(None),
        lambda b: mdss.TopN(b.store, "t", 3, order=10**5000),
        lambda b: mdss.TopN(b.store, "t", 3, retry_budget=10**400),
        lambda b: mdss.TopN(b.store, "t", 3, retry_budget=1e300),
        lambda b: mdss.SortedSet(b.store, 10**5000),
    ],
)
def test_bad_arguments(board, call) -> None:
    with pytest.raises(mdss.InvalidArgumentError):
        call(board)


@pytest.mark.parametrize("options", [{"order": "up"}, {"chunk_size": 1}, {"chunk_size": "8"}])
def test_bad_settings(store, options) -> None:
    with pytest.raises(mdss.InvalidArgumentError):
        mdss.SortedSet(store, "board", **options)


def test_reopening_uses_stored_settings_and_refuses_others(store) -> None:
    mdss.SortedSet(store, "lap", order="asc", chunk_size=3).add("ann", 61.5)
    again = mdss.SortedSet(store, "lap")
    assert (again.order, again.chunk_size) == ("asc", 3)
    with pytest.raises(mdss.SettingsMismatchError, match="order"):
        mdss.SortedSet(store, "lap", order="desc")
    with pytest.raises(mdss.SettingsMismatchError, match="chunk_size"):
        mdss.SortedSet(store, "lap", chunk_size=4)


def test_corrupt_node_is_named(store, board, shards) -> None:
    board.add_many({f"p{i}": i for i in range(20 * shards)})  # enough for every shard to leave its log
    node_key = next(key for keys in keyspaces(board) for key in store.keys(keys.nodes))
    store.put(node_key, b"\xc1garbage")
    fresh = mdss.SortedSet(store, "board")  # no cached nodes
    with pytest.raises(mdss.CorruptDataError, match="key") as info:
        list(fresh)  # the score tree
        fresh.scores([f"p{i}" for i in range(20 * shards)])  # the member index
    assert info.value.key == node_key
    assert any(node_key in problem for problem in fresh.check())


def test_corrupt_head_is_named(store) -> None:
    head = Keyspace(store.namespace, "board").head
    store.put(head, b"\x93\x01\x02")
    board = mdss.SortedSet(store, "board")  # opening succeeds, so that a damaged set can be dropped
    with pytest.raises(mdss.CorruptDataError, match=head):
        board.rank("ann")


# -- edge cases ----------------------------------------------------------------


def test_empty_set(board) -> None:
    assert len(board) == 0
    assert board.range() == [] and list(board) == []
    assert board.rank("ann") is None and board.score("ann") is None
    assert board.at(1) is None and board.around("ann") == []
    assert board.rank_of_score(10) == 1 and board.count(10, 0) == 0
    assert board.range_by_score(10, 0) == []
    assert board.remove("ann") is False and board.remove_many(["a", "b"]) == 0
    assert board.check() == []


def test_single_entry(board) -> None:
    assert board.add("ann", 5) is True
    assert board.add("ann", 6) is False
    assert board.range() == [mdss.Entry("ann", 6, 1)]
    assert board.rank("ann") == 1 and board.at(1) == mdss.Entry("ann", 6, 1)
    assert board.rank_of_score(7) == 1 and board.rank_of_score(6) == 1 and board.rank_of_score(5) == 2
    assert board.remove("ann") is True
    assert len(board) == 0 and board.check() == []


def test_all_equal_scores_rank_by_member(board) -> None:
    names = [f"p{i:02d}" for i in range(30)]
    board.add_many((n, 7) for n in reversed(names))
    assert [e.member for e in board] == names
    assert [board.rank(n) for n in names] == list(range(1, 31))
    assert {board.rank(n, ties="competition") for n in names} == {1}
    assert board.count(7, 7) == 30 and board.rank_of_score(7) == 1 and board.rank_of_score(8) == 1
    assert board.rank_of_score(6) == 31


def test_infinities_and_exact_big_integers(board) -> None:
    board.add_many({"top": math.inf, "bottom": -math.inf, "a": 2**53 + 1, "b": 2**53, "c": 2.0**53})
    assert [e.member for e in board] == ["top", "a", "b", "c", "bottom"]
    assert board.score("a") == 2**53 + 1 and type(board.score("a")) is int
    assert board.count(math.inf, -math.inf) == 5
    assert board.incr("a", 1) == 2**53 + 2


def test_unicode_members(board) -> None:
    names = {"日本": 3, "ñandú": 2, "emoji 🎮": 1, "a:b/{c}%": 4}
    board.add_many(names)
    assert [e.member for e in board] == ["a:b/{c}%", "日本", "ñandú", "emoji 🎮"]
    assert all(board.score(n) == s for n, s in names.items())


def test_ops(store) -> None:
    asc = mdss.SortedSet(store, "lap", order="asc")
    asc.add("ann", 70.0, op="best")
    asc.add("ann", 65.5, op="best")
    asc.add("ann", 80.0, op="best")
    assert asc.score("ann") == 65.5
    assert asc.incr("bob", 2) == 2 and asc.incr("bob", -0.5) == 1.5
    asc.add_many({"bob": 1, "cid": 1}, op="incr")
    assert asc.scores(["bob", "cid"]) == [2.5, 1]


def test_load_bulk(store) -> None:
    seen = []
    pairs = [(f"p{i}", i % 17) for i in range(500)] + [("p0", 99)]
    board = mdss.SortedSet.load(store, "big", pairs, chunk_size=8, progress=lambda d, t: seen.append((d, t)))
    assert len(board) == 500 and board.score("p0") == 99 and board.rank("p0") == 1
    assert seen and seen[-1][0] == seen[-1][1]
    assert board.check() == []
    with pytest.raises(mdss.InvalidArgumentError, match="replace=True"):
        mdss.SortedSet.load(store, "big", {"x": 1})
    board = mdss.SortedSet.load(store, "big", {"x": 1}, replace=True)
    assert list(board) == [mdss.Entry("x", 1, 1)]


def test_removal_under_a_single_child_chain_keeps_the_minimum_fill(store) -> None:
    """Found by the stateful test: a manifest left with one under-filled child cannot merge it; once its
    parent merges that manifest with a neighbour, the grandchild must be merged too."""
    start = {"ann": -2, "bob": -3, "cid": 0, "dee": 3, "a:b": 1, "eve": 3}
    board = mdss.SortedSet.load(store, "b", start, chunk_size=4)
    board.add_many([("日本", 0), ("lu", -2), ("z" * 60, -4), ("ann", 4), ("ann", 1)])
    board.add_many([("ann", -6), ("fay", -6), ("z" * 60, 2), ("cid", -3)])
    board.incr("gus", -5)
    board.add("jo", 5)
    assert board.check() == []
    board.remove_many(["gus", "lu", "eve", "cid", "z" * 60, "ann", "dee", "日本", "bob", "jo"])
    assert [e.member for e in board] == ["a:b", "fay"]
    assert board.check() == []


def test_drop(store, board) -> None:
    board.add_many({f"p{i}": i for i in range(50)})
    board.drop()
    assert len(board) == 0
    assert readable_keys(store, board.keys.prefix) == []
    assert [readable_keys(store, keys.prefix) for keys in keyspaces(board)] == [[]] * len(keyspaces(board))


# -- costs ---------------------------------------------------------------------


def test_round_trips_with_warm_cache(store, shards) -> None:
    board = mdss.SortedSet.load(store, "big", {f"p{i}": i % 1000 for i in range(20_000)}, chunk_size=50)
    for _ in range(2):  # the second pass has every node it needs cached
        store.stats.reset()
        board.rank("p123")
    assert store.stats.calls == 1  # the head: every node is cached
    fresh = mdss.SortedSet(store, "big")
    fresh.scores([e.member for e in fresh])  # warms every node of both trees
    cost = {}
    for name, call in {
        "rank": lambda: fresh.rank("p4567"),
        "dense rank": lambda: fresh.rank("p4567", ties="dense" if shards == 1 else "competition"),
        "page": lambda: fresh.range(7_777, 100),
        "rank_of_score": lambda: fresh.rank_of_score(321),
    }.items():
        for key in [k for k, (node, _) in fresh.engines[0].cache._nodes.items() if isinstance(node, Leaf)]:
            fresh.engines[0].cache.discard(key)  # only manifests stay warm
        before = store.stats.snapshot()
        call()
        cost[name] = store.stats.since(before)["calls"]
    # A store that reads the head with the member's entry set (Redis) saves a set's rank a round trip.
    rank = 2 if shards == 1 and store.get_along("absent", []) is not None else 3
    assert cost == {"rank": rank, "dense rank": rank, "page": 2, "rank_of_score": 2}


def test_cache_stays_within_budget(store) -> None:
    mdss.SortedSet.load(store, "big", {f"p{i}": i for i in range(5000)}, chunk_size=20)
    small = mdss.SortedSet(store, "big", cache_bytes=4096)
    list(small)
    assert small.engines[0].cache.size <= 4096


def test_an_unknown_option_a_negative_last_rank_and_an_empty_batch_answer_as_mdss_does() -> None:
    """A helper's Redis-parity probe: an unknown option was a bare TypeError naming an internal function; a Redis-style
    ``remove_range_by_rank(1, -1)`` removed nothing, silently; an empty batch left ``results`` None."""
    store = mdss.open_store("memory://")
    for make in (
        lambda: mdss.SortedSet(store, "x", foo=1),
        lambda: mdss.SortedSet(store, "x", shards=2, foo=1),
        lambda: mdss.Leaderboard(store, "b", columns={"xp": "desc"}, foo=1),
    ):
        with pytest.raises(mdss.InvalidArgumentError, match="unknown option 'foo'"):
            make()
    sset = mdss.SortedSet(store, "y")
    sset.add_many({"a": 1, "b": 2})
    with pytest.raises(mdss.InvalidArgumentError, match="negative"):
        sset.remove_range_by_rank(1, -1)
    assert sset.remove_range_by_rank(1, 0) == 0 and len(sset) == 2
    with sset.batch() as batch:
        pass
    assert batch.results == []


def test_the_constructor_shows_the_options_it_takes() -> None:
    """``SortedSet(...)`` goes through a metaclass, whose call showed ``(*args, **options)`` to help(), inspect and
    editors: its signature names every option the set checks, with the engine's defaults."""
    import inspect

    from mdss._facade import check_options

    shown = inspect.signature(mdss.SortedSet).parameters
    checked = [p for p in inspect.signature(check_options).parameters.values() if p.kind is p.KEYWORD_ONLY]
    assert list(shown) == ["store", "name", "shards", *(p.name for p in checked)]
    assert shown["chunk_size"].default is None and shown["gc_grace"].default == 30.0
