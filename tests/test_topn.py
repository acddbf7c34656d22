"""Top-N sets: unit behaviour, the merge's algebra, and convergence under any interleaving of writers."""

from __future__ import annotations

import threading
from typing import Any

import pytest
import strategies as S
from hypothesis import given
from hypothesis import strategies as st

import mdss
from mdss._order import Order
from mdss.stores.memory import MemoryStore
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


@given(schedule=actions, n=st.integers(1, 5), order=S.orders)
def test_any_interleaving_converges_to_the_top_of_everything_posted(schedule, n, order) -> None:
    store = MemoryStore(siblings=True)
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
