"""Adversarial review of sharded sets (issue 13) and the update log (issue 12), from the outside.

Each test is a bug found by probing the public API on real stores with bad or unusual input: a sharded
set must answer as the unsharded one would, and bad input must raise mdss' own exceptions without
leaving anything stored.
"""

from __future__ import annotations

import pytest
from readable import readable_keys

import mdss
from mdss._keys import Keyspace


def test_store_and_name_by_keyword_open_the_sharded_set(store) -> None:
    board = mdss.SortedSet(store=store, name="kw", shards=3)
    assert isinstance(board, mdss.ShardedSet) and board.shards == 3
    board.add_many({"ann": 1, "bob": 2, "cid": 3})
    for n, again in enumerate((mdss.SortedSet(store, name="kw"), mdss.SortedSet(store=store, name="kw"))):
        assert isinstance(again, mdss.ShardedSet)  # not an empty unsharded set under the same name
        assert len(again) == 3 + n
        again.add(f"new{n}", 4)
    assert len(board) == 5
    assert store.get(Keyspace(store.namespace, "kw").head) is None  # no unsharded head beside the shards
    with pytest.raises(mdss.SettingsMismatchError):
        mdss.SortedSet(store=store, name="kw", shards=1)


@pytest.mark.parametrize(
    "options",
    [{"gc_grace": -1}, {"log_limit": -1}, {"log_limit": True}, {"max_batch": 0}, {"retry_budget": "1"}],
)
def test_a_refused_sharded_set_stores_nothing(store, options) -> None:
    with pytest.raises(mdss.InvalidArgumentError):
        mdss.SortedSet(store, "bad", shards=4, **options)
    assert readable_keys(store, Keyspace(store.namespace, "bad").prefix[:-1]) == []  # its keys and its shards'
    assert mdss.SortedSet(store, "bad", shards=2).shards == 2  # the name is free for any shard count


@pytest.mark.parametrize("shards", [1, 3])
@pytest.mark.parametrize("members", [None, 5, "abc", b"abc"])
def test_scores_of_a_non_iterable_or_a_string_is_a_clear_error(store, shards, members) -> None:
    board = mdss.SortedSet(store, "s", shards=shards)
    board.add_many({"a": 1, "b": 2})
    with pytest.raises(mdss.InvalidArgumentError, match="members must be an iterable"):
        board.scores(members)


@pytest.mark.parametrize("shards", [4, 0, True, 2.5, "4", 10**6])
def test_a_leaderboard_refuses_shards_before_storing_anything(store, shards) -> None:
    with pytest.raises(mdss.InvalidArgumentError, match="shards must be 1"):
        mdss.Leaderboard(store, "g", columns={"xp": "desc"}, shards=shards)
    assert readable_keys(store, Keyspace(store.namespace, "g").prefix[:-1]) == []  # its parts: "g%23..."


def test_a_sharded_set_named_like_a_boards_part_is_another_object(store) -> None:
    user = mdss.SortedSet(store, "g#windows", shards=3, order="asc")
    user.add("x", 1)
    board = mdss.Leaderboard(store, "g", columns={"xp": "desc"})  # its registry is an internal part of "g"
    board.post("ann", {"xp": 5})
    assert board.windows() == ["all"] and list(user) == [("x", 1, 1)]
    board = mdss.Leaderboard(store, "h", columns={"xp": "desc"}, shards=1)
    board.post("ann", {"xp": 5})
    assert [r.owner for r in board.top("xp", 3)] == ["ann"]


def test_a_write_after_another_object_dropped_the_set_stays_readable(store) -> None:
    dropper = mdss.SortedSet(store, "d", shards=4)
    dropper.add_many({f"m{i}": i for i in range(20)})
    writer = mdss.SortedSet(store, "d")
    assert len(writer) == 20
    dropper.drop()
    assert writer.add("late", 7) is True
    reopened = mdss.SortedSet(store, "d")
    assert isinstance(reopened, mdss.ShardedSet)  # not an empty unsharded set: "late" would be lost
    assert reopened.scores(["late", "m3"]) == [7, None]
    assert len(reopened) == 1 and reopened.check() == []
    with pytest.raises(mdss.SettingsMismatchError):
        mdss.SortedSet(store, "d", shards=1)
