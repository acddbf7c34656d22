"""The Riak store over an in-memory fake of Riak's HTTP API that counts every request.

The fake (``fake_riak.py``) keeps what the transcripts show a real node do.
The store contract suite runs on it here (and every suite, as the store kind
``riak-fake``), and the whole-set maintenance calls are shown to list one set
by key range, never by a full-bucket scan.
"""

from __future__ import annotations

import attrs
import pytest
from fake_riak import FakeRiak
from test_store_contract import *  # noqa: F403  (the contract suite and its fixture k, run here on the fake)

import mdss
from mdss.stores.riak import RiakStore
from mdss.topn import TopN, merge


@pytest.fixture
def store() -> mdss.Store:
    """Replaces the contract suite's fixture: a Riak store on a fresh fake (bucket types checked on open)."""
    return RiakStore(pool=FakeRiak(), backoff=0.001)


def test_tombstones_are_listed_but_read_as_absent(store, k) -> None:
    store.put_many({k("s:n:1"): b"a", k("s:n:2"): b"b"})
    store.delete(k("s:n:1"))
    assert list(store.keys(k("s:n:"))) == [k("s:n:1"), k("s:n:2")]  # as Riak does until the reap
    assert store.get_many([k("s:n:1"), k("s:n:2")]) == [None, b"b"]
    store.pool.reap()
    assert list(store.keys(k("s:n:"))) == [k("s:n:2")]


def test_a_tombstone_costs_one_read(store, k) -> None:
    store.put(k("s:n:1"), b"a")
    store.delete(k("s:n:1"))
    before = len(store.pool.sent)
    store.notfound = attrs.evolve(store.notfound, max_attempts=10)
    assert store.get_many([k("s:n:1")]) == [None]
    assert len(store.pool.sent) == before + 1


def test_a_deleted_head_reads_as_a_plain_404_once(store, k) -> None:
    store.put(k("s:h"), b"head")
    store.delete(k("s:h"))
    store.notfound = attrs.evolve(store.notfound, max_attempts=10)
    before = len(store.pool.sent)
    reply = store.pool.request(
        "GET", store._key_path("mdss_strong", k("s:h")) + "?timeout=1", headers={}, body=None, redirect=False
    )
    assert reply.status == 404 and "X-Riak-Deleted" not in reply.headers  # as 15m-strong-get-after-delete shows
    assert store.get_many([k("s:h"), k("t:h")]) == [None, None]  # deleted, never written: one GET each
    assert len(store.pool.sent) == before + 3


def test_top_n_writers_that_read_the_same_become_siblings_that_a_read_merges() -> None:
    fake = FakeRiak()
    podium = TopN(RiakStore(pool=fake, backoff=0.001), "podium", n=3)
    podium.post("ann", 5)
    seen = podium.store.get(podium.key)
    for member, score in (("bob", 7), ("cy", 6)):  # two writers with the vclock they read: siblings (10c)
        podium.store.put(
            podium.key, podium._encode(merge(podium.order, 3, [("ann", 5)], [(member, score)])), context=seen.version
        )
    assert len(podium.store.get(podium.key).values) == 2  # a 300, multipart/mixed (10e)
    assert [(e.member, e.score) for e in podium.top()] == [("bob", 7), ("cy", 6), ("ann", 5)]
    assert len(podium.store.get(podium.key).values) == 1  # written back with the 300's vclock: resolved (11a, 11b)


def test_pages_of_a_large_listing(k) -> None:
    fake = FakeRiak()
    store = RiakStore(pool=fake, page_size=7)
    keys = sorted(k(f"s:n:{i:03}") for i in range(50))
    store.put_many(dict.fromkeys(keys, b"x"))
    store.put(k("t:n:1"), b"another set")
    assert list(store.keys(k("s:n:"))) == keys
    assert fake.listings()["index"] == 8  # 50 keys, 7 a page: 7 full pages and one short one


def board_on(fake: FakeRiak) -> mdss.SortedSet:
    board = mdss.SortedSet(RiakStore(pool=fake, backoff=0.001), "season", chunk_size=4, gc_grace=0)
    for round_ in range(5):
        board.add_many({f"p{i}": i * round_ for i in range(40)})
    return board


def test_maintenance_of_one_set_never_lists_a_whole_bucket() -> None:
    fake = FakeRiak()
    other = mdss.SortedSet(RiakStore(pool=fake), "other", chunk_size=4)
    other.add_many({f"q{i}": i for i in range(100)})  # keys a full listing would have to read
    board = board_on(fake)
    fake.sent.clear()
    board.unreferenced()
    board.gc(min_age=0, wait=False, sweep=True)
    board.check()
    board.drop()
    counts = fake.listings()
    assert counts["full listing"] == 0 and counts["index"] >= 3
    assert all("/index/$key/mdss%3Aseason%3A" in url for _, url in fake.sent if "/index/" in url)


def test_without_indexes_a_listing_warns_once_and_scans(k) -> None:
    fake = FakeRiak(unindexed=("mdss_nodes",))
    store = RiakStore(pool=fake, backoff=0.001)
    store.put_many({k("s:n:1"): b"a", k("x:n:1"): b"b"})
    with pytest.warns(UserWarning, match="'mdss_nodes' has no secondary indexes"):
        assert list(store.keys(k("s:n:"))) == [k("s:n:1")]
    assert list(store.keys(k("s:n:"))) == [k("s:n:1")]
    assert fake.listings()["full listing"] == 2 and fake.listings()["index"] == 1
