"""Top-N sets: unit behaviour, the merge's algebra, and convergence under any interleaving of writers."""

from __future__ import annotations

import threading
from typing import Any

import msgpack
import pytest
import strategies as S
from fake_riak import FakeRiak
from hypothesis import given
from hypothesis import strategies as st

import mdss
from mdss._codec import seal, unpack
from mdss._order import Order
from mdss.stores.memory import MemoryStore
from mdss.stores.riak import RiakStore
from mdss.topn import TopN, merge

pairs = st.lists(st.tuples(S.members, S.small_scores), max_size=12)


def best_of(order: Order, n: int, posted: list[tuple[str, int]]) -> list[tuple[str, int]]:
    """The model: every member's best score ever posted, ordered, cut to n."""
    best: dict[str, int] = {}
    for member, score in posted:
        best[member] = score if member not in best else order.better(best[member], score)
    return sorted(best.items(), key=lambda kv: order.key(*kv))[:n]


# -- unit behaviour ------------------------------------------------------------------


def test_post_and_top(store) -> None:
    podium = TopN(store, "podium", n=3)
    assert podium.top() == [] and podium.threshold() is None
    assert podium.post("ann", 5) is True
    assert podium.post("ann", 4) is False  # keeps the best
    podium.post_many({"bob": 5, "cid": 9, "dee": 1})
    assert [(e.member, e.score, e.rank) for e in podium.top()] == [("cid", 9, 1), ("ann", 5, 2), ("bob", 5, 3)]
    assert podium.threshold() == 5 and len(podium) == 3
    assert podium.post("abe", 5) is True  # a tie broken by member: "abe" < "bob"
    assert [e.member for e in podium.top()] == ["cid", "abe", "ann"]


def test_a_post_that_cannot_enter_costs_no_write(store) -> None:
    podium = TopN(store, "podium", n=2)
    podium.post_many({"ann": 10, "bob": 9})
    store.stats.reset()
    assert podium.post("cid", 3) is False and podium.post("bob", 1) is False
    assert store.stats.writes == 0 and store.stats.calls == 2


def test_ascending_and_n_1(store) -> None:
    lap = TopN(store, "lap", n=1, order="asc")
    lap.post_many([("ann", 61.5), ("bob", 59.9), ("ann", 58.0)])
    assert lap.top() == [mdss.Entry("ann", 58.0, 1)]


def test_bad_input(store) -> None:
    with pytest.raises(mdss.InvalidArgumentError):
        TopN(store, "t", n=0)
    with pytest.raises(mdss.InvalidArgumentError):
        TopN(store, "t", order="up")
    podium = TopN(store, "t")
    with pytest.raises(mdss.InvalidScoreError):
        podium.post("ann", float("nan"))
    with pytest.raises(mdss.InvalidMemberError):
        podium.post("", 1)
    podium.post("ann", 1)
    with pytest.raises(mdss.SettingsMismatchError):
        TopN(store, "t", n=5).top()
    store.put(podium.key, b"\xc1")
    with pytest.raises(mdss.CorruptDataError, match=podium.key):
        podium.top()


def test_concurrent_posters_on_every_store(store) -> None:
    podium = TopN(store, "podium", n=5)
    posted = [[(f"m{(t * 7 + i) % 23}", (t * 31 + i * 17) % 101) for i in range(40)] for t in range(6)]
    threads = [threading.Thread(target=lambda p=p: [podium.post(m, s) for m, s in p]) for p in posted]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    expected = best_of(podium.order, 5, [pair for p in posted for pair in p])
    assert [(e.member, e.score) for e in podium.top()] == expected


def test_a_post_retries_lost_races_within_its_policy() -> None:
    store = MemoryStore()
    calls = []

    def always_loses(key: str, value: bytes, version: Any) -> None:
        calls.append(key)
        raise mdss.ConflictError("another writer moved it")

    store.cas = always_loses  # type: ignore[method-assign]
    with pytest.raises(mdss.ConflictError, match="not applied"):
        TopN(store, "t", max_attempts=3).post("ann", 1)
    assert len(calls) == 3
    with pytest.raises(mdss.ConflictError):
        TopN(store, "t", retry_budget=0).post("ann", 1)
    assert len(calls) == 4 and store.get(TopN(store, "t").key) is None
    for bad in ({"retry_budget": -1}, {"retry_budget": "1"}, {"retry_budget": float("nan")}, {"max_attempts": 0}):
        with pytest.raises(mdss.InvalidArgumentError):
            TopN(store, "t", **bad)


# -- the stored value: format 2 sealed, format 1 still read, anything malformed refused --------


def test_values_are_written_sealed_in_format_2(store) -> None:
    podium = TopN(store, "podium", n=3)
    podium.post_many({"ann": 5, "bob": 7.5})
    stored = store.get(podium.key).value
    assert unpack(podium.key, stored, "top-N set")[1] == [2, 3, "desc", ["bob", "ann"], [7.5, 5]]


def test_format_1_values_read_and_the_next_write_seals_them(store) -> None:
    podium = TopN(store, "podium", n=3)
    store.put(podium.key, msgpack.packb([1, 3, "desc", ["bob", "ann"], [7, 5]]))
    assert [(e.member, e.score) for e in podium.top()] == [("bob", 7), ("ann", 5)]
    assert podium.post("ann", 2) is False and msgpack.unpackb(store.get(podium.key).value)[0] == 1  # no write
    assert podium.post("cid", 6) is True
    stored = store.get(podium.key).value
    assert unpack(podium.key, stored, "top-N set")[1] == [2, 3, "desc", ["bob", "cid", "ann"], [7, 6, 5]]


def value(*fields: Any) -> bytes:
    """A sealed format-2 value of a desc top-3 set with these fields after the version."""
    return seal(msgpack.packb([2, *fields]))


MALFORMED = {
    "not msgpack": b"\xc1",
    "sealed garbage": seal(b"\xc1"),
    "empty": b"",
    "a map": seal(msgpack.packb({"v": 2})),
    "a number": seal(msgpack.packb(2)),
    "four fields": value(3, "desc", ["ann"]),
    "six fields": value(3, "desc", ["ann"], [1], None),
    "version 3": seal(msgpack.packb([3, 3, "desc", ["ann"], [1]])),
    "version True": seal(msgpack.packb([True, 3, "desc", ["ann"], [1]])),
    "version '2'": seal(msgpack.packb(["2", 3, "desc", ["ann"], [1]])),
    "version 1, sealed": seal(msgpack.packb([1, 3, "desc", ["ann"], [1]])),
    "version 2, unsealed": msgpack.packb([2, 3, "desc", ["ann"], [1]]),
    "version 1 with a trailer": msgpack.packb([1, 3, "desc", ["ann"], [1]]) + b"\0\0\0\0",
    "n 0": value(0, "desc", [], []),
    "n True": value(True, "desc", [], []),
    "n '3'": value("3", "desc", [], []),
    "order 'up'": value(3, "up", [], []),
    "order None": value(3, None, [], []),
    "members a string": value(3, "desc", "ann", [1]),
    "scores a map": value(3, "desc", ["ann"], {"ann": 1}),
    "lengths differ": value(3, "desc", ["ann", "bob"], [1]),
    "over n": value(3, "desc", ["a", "b", "c", "d"], [4, 3, 2, 1]),
    "int member": value(3, "desc", [7], [1]),
    "bytes member": value(3, "desc", [b"ann"], [1]),
    "bool member": value(3, "desc", [True], [1]),
    "empty member": value(3, "desc", [""], [1]),
    "None member": value(3, "desc", [None], [1]),
    "str score": value(3, "desc", ["ann"], ["5"]),
    "None score": value(3, "desc", ["ann"], [None]),
    "NaN score": value(3, "desc", ["ann"], [float("nan")]),
    "bool score": value(3, "desc", ["ann"], [True]),
    "score over 64 bits": value(3, "desc", ["ann"], [2**64 - 1]),
    "list score": value(3, "desc", ["ann"], [[1]]),
    "out of order": value(3, "desc", ["ann", "bob"], [1, 5]),
    "a repeated member": value(3, "desc", ["ann", "ann"], [5, 3]),
    "format 1, int member": msgpack.packb([1, 3, "desc", [7], [5]]),
    "format 1, NaN score": msgpack.packb([1, 3, "desc", ["ann"], [float("nan")]]),
}


@pytest.mark.parametrize("stored", MALFORMED.values(), ids=MALFORMED.keys())
def test_every_malformed_value_raises_corrupt_data_error_naming_the_key(store, stored: bytes) -> None:
    podium = TopN(store, "podium", n=3)
    store.put(podium.key, stored)
    for read in (podium.top, podium.__len__, podium.threshold, lambda: podium.post("zed", 100)):
        with pytest.raises(mdss.CorruptDataError, match=podium.key):
            read()
    assert store.get(podium.key).value == stored  # served nothing, wrote nothing back


def test_a_malformed_sibling_is_not_merged_nor_repaired() -> None:
    store = MemoryStore(siblings=True)
    podium = TopN(store, "podium", n=3)
    podium.post("ann", 5)
    store.put(podium.key, MALFORMED["int member"], context=None)  # a concurrent write: a sibling
    with pytest.raises(mdss.CorruptDataError, match=podium.key):
        podium.top()
    assert len(store.get(podium.key).values) == 2


corruptions = st.one_of(
    st.tuples(st.just("flip"), st.lists(st.tuples(st.integers(0, 10**6), st.integers(1, 255)), min_size=1, max_size=4)),
    st.tuples(st.just("truncate"), st.integers(0, 10**6)),
    st.tuples(st.just("append"), st.binary(min_size=1, max_size=8)),
    st.tuples(st.just("splice"), st.tuples(st.integers(0, 10**6), st.integers(0, 8), st.binary(max_size=8))),
)


def corrupt(data: bytes, corruption: tuple[str, Any]) -> bytes:
    kind, arg = corruption
    if kind == "flip":
        out = bytearray(data)
        for at, mask in arg:
            out[at % len(out)] ^= mask
        return bytes(out)
    if kind == "truncate":
        return data[: arg % len(data)]
    if kind == "append":
        return data + arg
    at, cut, insert = arg
    at %= len(data)
    return data[:at] + insert + data[at + cut :]


@given(
    posted=st.lists(st.tuples(S.members, S.scores), min_size=1, max_size=12),
    n=st.integers(1, 5),
    order=S.orders,
    corruption=corruptions,
)
def test_a_corrupted_value_reads_as_before_or_raises_corrupt_data_error(posted, n, order, corruption) -> None:
    store = MemoryStore()
    podium = TopN(store, "podium", n=n, order=order)
    podium.post_many(posted)
    before = podium.top()
    stored = store.get(podium.key).value
    store.put(podium.key, corrupt(stored, corruption))
    try:
        after = podium.top()
    except mdss.CorruptDataError as exc:
        assert exc.key == podium.key
    else:
        assert after == before and [type(e.score) for e in after] == [type(e.score) for e in before]


# -- the merge's algebra -------------------------------------------------------------


@given(a=pairs, b=pairs, c=pairs, n=st.integers(1, 6), order=S.orders)
def test_merge_is_commutative_associative_idempotent(a, b, c, n, order) -> None:
    o = Order(order)
    assert merge(o, n, a, b) == merge(o, n, b, a)
    assert merge(o, n, merge(o, n, a, b), c) == merge(o, n, a, merge(o, n, b, c)) == merge(o, n, a, b, c)
    assert merge(o, n, merge(o, n, a), a) == merge(o, n, a)
    assert merge(o, n, a, b, c) == best_of(o, n, a + b + c)


# -- any interleaving of uncoordinated writers on a store that keeps siblings ------------

actions = st.lists(
    st.one_of(
        st.tuples(st.just("read"), st.integers(0, 3)),
        st.tuples(st.just("write"), st.integers(0, 3), S.members, S.small_scores),
        st.tuples(st.just("top"), st.just(0)),
    ),
    max_size=40,
)


#: Stores that keep siblings: the memory store's mode, and the Riak store over the fake of Riak's HTTP API
#: (an allow_mult type: 300 answers with multipart/mixed siblings, resolved by a write with their vclock).
SIBLING_STORES = {"memory": lambda: MemoryStore(siblings=True), "riak-fake": lambda: RiakStore(pool=FakeRiak())}


@pytest.mark.parametrize("kind", SIBLING_STORES)
@given(schedule=actions, n=st.integers(1, 5), order=S.orders)
def test_any_interleaving_converges_to_the_top_of_everything_posted(kind, schedule, n, order) -> None:
    store = SIBLING_STORES[kind]()
    podium = TopN(store, "podium", n=n, order=order)
    seen: dict[int, tuple] = {}  # writer -> (record, entries) of its last read
    posted: list[tuple[str, int]] = []
    for action in schedule:
        if action[0] == "read":
            seen[action[1]] = podium._read()
        elif action[0] == "write":  # writes what it read plus its post, with the context it read
            _, writer, member, score = action
            record, entries = seen.get(writer, (None, []))
            merged = merge(podium.order, n, entries, [(member, score)])
            store.put(podium.key, podium._encode(merged), context=None if record is None else record.version)
            posted.append((member, score))
        else:
            podium.top()  # a reader repairs whatever siblings it finds
    expected = best_of(podium.order, n, posted)
    assert [(e.member, e.score) for e in podium.top()] == expected
    record = store.get(podium.key)
    assert record is None or len(record.values) == 1  # the read repaired the siblings
    assert [(e.member, e.score) for e in podium.top()] == expected  # and repair is idempotent


@given(pairs, st.sampled_from(["desc", "asc"]), st.integers(1, 8))
def test_top_ranks_ties_as_a_sorted_set_would(posted, order, n) -> None:
    """competition: 1 + the listed entries strictly better; dense: 1 + the distinct better scores listed."""
    podium = TopN(MemoryStore(), "p", n, order=order)
    podium.post_many(posted)
    listed = podium.top()
    scores = [e.score for e in listed]
    better = (lambda a, b: a > b) if order == "desc" else (lambda a, b: a < b)
    assert [e.rank for e in listed] == list(range(1, len(listed) + 1))
    assert [e.rank for e in podium.top(ties="competition")] == [1 + sum(better(t, s) for t in scores) for s in scores]
    assert [e.rank for e in podium.top(ties="dense")] == [1 + len({t for t in scores if better(t, s)}) for s in scores]
    with pytest.raises(mdss.InvalidArgumentError):
        podium.top(ties="fair")


def test_a_member_posted_twice_in_one_call_keeps_its_best_and_huge_counts_are_refused() -> None:
    """A helper's probe: ``post_many`` kept the last of a member's scores (a dict of the pairs), not its best; ``n``,
    ``log_limit`` and durations past what the platform's timers and msgpack hold got as far as an OverflowError."""
    store = mdss.open_store("memory://")
    top = mdss.TopN(store, "y", n=3)
    assert top.post_many([("ann", 9), ("ann", 1), ("bob", 2), ("bob", 5)]) is True
    assert [(e.member, e.score) for e in top.top()] == [("ann", 9), ("bob", 5)]
    for make in (
        lambda: mdss.TopN(store, "t", n=2**64),
        lambda: mdss.SortedSet(store, "a", log_limit=10**400),
        lambda: mdss.SortedSet(store, "a", max_wait=2**64),
        lambda: mdss.SortedSet(store, "a", gc_grace=1e30),
    ):
        with pytest.raises(mdss.InvalidArgumentError):
            make()
