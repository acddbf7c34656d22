"""Member data (``add(..., data=)``, ``set_data``, ``data``, ``with_data=``): what the stateful model test does not
reach: refused input, the room a store's value limit leaves, the stored format, sharded sets and whole-set calls.
The model test (``test_sortedset_stateful``) checks data against the model on every store."""

from __future__ import annotations

import enum
from typing import Any

import msgpack
import pytest

import mdss
from mdss import _codec
from mdss.stores.memory import MemoryStore


@pytest.fixture
def sset() -> mdss.SortedSet:
    return mdss.SortedSet(mdss.open_store("memory://"), "s", chunk_size=4, log_limit=2)


@pytest.mark.parametrize(
    "bad, match",
    [
        (7, "str or bytes"),
        (["a"], "str or bytes"),
        ("x" * 1025, "1025 bytes is over the 1024"),
        (b"x" * 1025, "1025 bytes is over the 1024"),
        ("\ud800", "not valid Unicode"),
    ],
)
def test_bad_data_is_refused_and_nothing_changes(sset, bad, match) -> None:
    sset.add("a", 1, data="kept")
    with pytest.raises(mdss.InvalidArgumentError, match=match):
        sset.add("a", 2, data=bad)
    with pytest.raises(mdss.InvalidArgumentError, match=match):
        sset.set_data("a", bad)
    assert (sset.score("a"), sset.data("a")) == (1, "kept")
    assert sset.add("b", 1, data="x" * 1024) and sset.data("b") == "x" * 1024  # the limit itself fits


def test_subclasses_and_buffers_are_stored_as_the_plain_type(sset) -> None:
    class Name(str):
        pass

    sset.add("a", 1, data=Name("ann"))
    sset.add("b", 1, data=bytearray(b"\x00\x01"))
    assert sset.data("a") == "ann" and type(sset.data("a")) is str
    assert sset.data("b") == b"\x00\x01" and type(sset.data("b")) is bytes


class Team(str, enum.Enum):
    RED = "red"


class Lying(str):
    """A str whose own methods say something else than its text."""

    def __str__(self) -> str:
        return "x" * 100_000

    def __format__(self, spec: str) -> str:
        return "formatted"

    def encode(self, *args: Any, **kwargs: Any) -> bytes:
        return b"encoded"


class LyingBytes(bytes):
    def __bytes__(self) -> bytes:
        return b"x" * 100_000


def test_names_members_and_data_are_their_text_whatever_a_subclass_says() -> None:
    """A str subclass was stored as its own ``str()``: an Enum member ``Team.RED`` as "Team.RED" (so ``score("red")``
    found nothing), and a ``__str__`` past the data limit got past it (a helper's fuzz). Now the text itself, everywhere
    a name, a member, an owner, a post id or data is taken."""
    store = mdss.open_store("memory://")
    sset = mdss.SortedSet(store, Team.RED)
    sset.add(Team.RED, 5, data=Team.RED)
    sset.add(Lying("liar"), 1, data=Lying("fib"))
    sset.add("b", 2, data=LyingBytes(b"raw"))
    plain = mdss.SortedSet(store, "red")
    assert plain.name == "red" and type(sset.name) is str
    assert [(e.member, e.data) for e in plain.range(0, 5, with_data=True)] == [
        ("red", "red"),
        ("b", b"raw"),
        ("liar", "fib"),
    ]
    board = mdss.Leaderboard(store, Team.RED, columns={"xp": "desc"}, accumulate=["xp"])
    board.post(Team.RED, {"xp": 3}, post_id=Lying("p1"))
    board.post("red", {"xp": 3}, post_id="p1")  # the same post id: a retry, counted once
    assert mdss.Leaderboard.open(store, "red").rows(["red"], "xp")[0].values == {"xp": 3}
    topn = mdss.TopN(store, Team.RED, 3)
    topn.post(Team.RED, 1)
    assert mdss.TopN(store, "red", 3).top()[0].member == "red"


class _Limited(MemoryStore):
    """A memory store with DynamoDB's value limit."""

    max_value_bytes = 400 * 1024


def test_a_value_limit_leaves_less_room_at_large_chunk_sizes() -> None:
    store = _Limited()
    big = mdss.SortedSet(store, "big", chunk_size=1000)
    with pytest.raises(mdss.InvalidArgumentError, match="smaller chunk_size leaves more"):
        big.add("a", 1, data="x" * 100)
    assert big.add("a", 1, data="x" * 63) and big.score("a") == 1
    small = mdss.SortedSet(store, "small", chunk_size=250)
    assert small.add("a", 1, data="x" * 1024)


def test_data_survives_merges_and_goes_with_removals(sset) -> None:
    for i in range(20):
        sset.add(f"m{i:02}", i, data=f"d{i}")
    sset.merge()
    sset.remove("m03")
    sset.add("m03", 3)  # back without data
    sset.incr("m04", 1)  # data kept through a score change
    sset.merge()
    assert sset.data("m03") is None and sset.data("m04") == "d4" and sset.score("m04") == 5
    assert sset.check() == []
    assert [e.data for e in sset.range(0, 3, with_data=True)] == ["d19", "d18", "d17"]


def test_member_index_holds_values_and_the_score_tree_scores(sset) -> None:
    sset.add("a", 5, data=b"x")
    sset.merge()
    engine = sset.engine
    snap = mdss._snapshot.snapshot(engine)
    assert list(snap.by_member()) == [("a", 5)]  # a union's source reads scores
    [leaf] = list(snap.member_index.leaves())
    [scored] = list(snap.score_tree.leaves())
    assert (leaf.members, leaf.scores) == (("a",), ((5, b"x"),))
    assert (scored.members, scored.scores) == (("a",), (5,))


def test_a_malformed_value_is_refused_as_corrupt() -> None:
    good = _codec.decode_node("k", _codec.encode_leaf(["a"], [(1, "x")], compress=False))
    assert good[2] == ((1, "x"),)
    for bad in ([1, 2], [1, "x", "3"], [1, 5, 3], [1, None, 2**63], ["1", "x"], [float("nan"), "x"]):
        data = _codec.seal(msgpack.packb([2, 0, ["a"], [bad]]))
        with pytest.raises(mdss.CorruptDataError, match="malformed"):
            _codec.decode_node("k", data)


def test_sharded_sets_carry_data(store_factory) -> None:
    sset = mdss.SortedSet(store_factory(), "sh", shards=3, chunk_size=4)
    with sset.batch():
        for i in range(12):
            sset.add(f"m{i}", i, data=f"d{i}")
    assert sset.set_data("m1", None) and not sset.set_data("zz", "x")
    assert [(e.member, e.data) for e in sset.around("m1", 1, 1, with_data=True)] == [
        ("m2", "d2"),
        ("m1", None),
        ("m0", "d0"),
    ]
    assert sset.data("m5") == "d5" and sset.score("m5") == 5


def test_unions_and_loads_carry_scores_only(sset) -> None:
    sset.add("a", 1, data="x")
    sset.add("b", 2)
    assert mdss.union(sset.store, "u", ["s", "s"]) == 2
    union = mdss.SortedSet(sset.store, "u")
    assert union.range(with_data=True) == [mdss.DataEntry("b", 4, 1, None), mdss.DataEntry("a", 2, 2, None)]
    loaded = mdss.SortedSet.load(sset.store, "s", {"a": 3}, replace=True)
    assert loaded.data("a") is None


def test_a_score_that_changes_only_its_type_reaches_every_reader(store) -> None:
    """A member with data whose score goes from 3.0 to 3 (equal, another type): the commit's patch of the member
    index records it (it once compared ``(3.0, "red")`` and ``(3, "red")`` as the same stored value and left the
    change out), so a reader with no cache reads the int, and check() compares the trees' score types too."""
    board = mdss.SortedSet(store, "typed", chunk_size=4, log_limit=0)
    board.add_many({f"m{i:02d}": i for i in range(30)})  # entry sets under a manifest: commits patch them
    board.add("m10", 3.0, data="red")
    board.add_many({"m10a": 5, "m10b": 6, "m10c": 7})  # more changes than a patch takes: written whole, with m10
    board.add("m10", 3)  # a patch on that entry set
    fresh = mdss.SortedSet(store, "typed", cache_bytes=0)
    assert type(fresh.score("m10")) is int and fresh.data("m10") == "red"
    assert [type(e.score) for e in fresh.range_by_score(3, 3) if e.member == "m10"] == [int]
    assert fresh.check() == []


@pytest.mark.parametrize("shards", [1, 3])
def test_pages_carry_data_on_every_path(store_factory, shards) -> None:
    """``page(with_data=True)``: the first page, a page on the snapshot a cursor kept (data from the newest state), one
    resumed on the newest state once that snapshot is collected, a previous page and a page around a member all give
    each member's data."""
    store = store_factory()
    sset = mdss.SortedSet(store, "p", shards=shards, chunk_size=4, log_limit=4, gc_grace=0)
    data = {f"m{i:02d}": None if i % 3 else f"d{i}" for i in range(20)}
    with sset.batch():
        for i in range(20):
            sset.add(f"m{i:02d}", i, data=data[f"m{i:02d}"])

    def with_data(entries):
        return [mdss.DataEntry(*e, data[e.member]) for e in entries]

    first = sset.page(6, with_data=True)
    assert first.entries == with_data(sset.range(0, 6))
    data["m13"] = "new"  # rank 7: on the next page
    sset.set_data("m13", "new")
    second = sset.page(6, first.next, with_data=True)
    assert second.entries == with_data(sset.range(6, 6))
    for k in range(2):  # merges, the second deleting what the first replaced: the cursor's snapshot
        sset.add("m00", -1 - k)
        sset.merge()
    reader = mdss.SortedSet(store, "p", cache_bytes=0)  # no cached copy of it either: the page resumes by key
    third = reader.page(6, second.next, with_data=True)
    assert third.entries == with_data(sset.range(12, 6))
    assert sset.page(6, second.previous, with_data=True).entries == with_data(sset.range(0, 6))
    assert sset.page(3, around="m09", with_data=True).entries == with_data(sset.range(9, 3))
    assert all(type(e) is mdss.Entry for e in sset.page(6).entries)
