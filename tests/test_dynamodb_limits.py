"""The DynamoDB store against the limits of DynamoDB proper, which dynalite does not all enforce: a strict
in-memory client (``tests/strict_dynamodb.py``) refuses what DynamoDB refuses and splits what it splits.
No server needed.
"""

from __future__ import annotations

import random

import pytest
from strict_dynamodb import StrictClient

import mdss
from mdss.stores.base import Record
from mdss.stores.dynamodb import DynamoDBStore


@pytest.fixture
def client() -> StrictClient:
    return StrictClient()


def open_store(client: StrictClient, **options) -> DynamoDBStore:
    return DynamoDBStore("strict", client=client, retry_budget=2, backoff=0.001, **options)


def test_get_many_splits_at_100_keys_and_dedupes(client) -> None:
    store = open_store(client)
    keys = [f"a:b:n:{i}" for i in range(250)]
    store.put_many({key: key.encode() for key in keys[::2]})
    store.stats.reset()
    asked = [*keys, *keys[:30]]  # repeated keys: DynamoDB refuses them in one request
    assert store.get_many(asked) == [key.encode() if int(key.rsplit(":", 1)[1]) % 2 == 0 else None for key in asked]
    assert client.requests["batch_get_item"] == 3  # 250 distinct keys
    counts = store.stats.snapshot()
    assert (counts["calls"], counts["reads"], counts["requests"]) == (1, 280, 3)  # sent in parallel: one round trip


def test_a_reply_over_16_mb_is_completed_even_without_retries(client) -> None:
    """A BatchGetItem reply stops at 16 MB and leaves the rest unprocessed: that is not a failure, so it
    spends no retry (``retries=0`` allows none)."""
    store = open_store(client, retries=0)
    big = {f"a:b:n:{i:02d}": bytes([i]) * 400_000 for i in range(100)}  # 40 MB in one request
    store.put_many(big)
    store.stats.reset()
    assert store.get_many(list(big)) == list(big.values())
    assert client.requests["batch_get_item"] == 3 and store.stats.requests == 3


def test_unprocessed_requests_are_resent_until_done(client) -> None:
    store = open_store(client, retries=3)
    left = iter([True, False] * 1000)
    client.unprocessed = lambda key: next(left)  # half of every batch is throttled
    items = {f"a:b:n:{i}": b"x" for i in range(60)}
    store.put_many(items)
    assert store.get_many(list(items)) == [b"x"] * 60


def test_a_lost_race_returns_the_current_record(client) -> None:
    """``ReturnValuesOnConditionCheckFailure=ALL_OLD``: the winner's record comes with the conflict, so a
    commit rebases on it without reading the head again (issue 12)."""
    store = open_store(client)
    first = store.cas("a:b:h", b"one", None)
    with pytest.raises(mdss.ConflictError) as raised:
        store.cas("a:b:h", b"two", None)  # create-if-absent, but it exists
    assert raised.value.current_known and raised.value.current == Record((b"one",), first)
    second = store.cas("a:b:h", b"two", first)
    with pytest.raises(mdss.ConflictError) as raised:
        store.cas("a:b:h", b"three", first)  # a stale version
    assert raised.value.current_known and raised.value.current == Record((b"two",), second)
    store.delete("a:b:h")
    with pytest.raises(mdss.ConflictError) as raised:
        store.cas("a:b:h", b"four", second)  # gone: DynamoDB returns no item, and mdss does not guess
    assert not raised.value.current_known


def test_a_commit_rebases_on_the_returned_head_without_reading_it(client) -> None:
    store = open_store(client)
    one, two = mdss.SortedSet(store, "b", chunk_size=4), mdss.SortedSet(store, "b", chunk_size=4)
    one.add("a", 1)
    two.add("b", 2)
    reads = client.requests["get_item"]
    one.add("c", 3)  # from the head it holds: loses, and rebases on the head the conflict returned
    two.add("d", 4)  # likewise
    assert client.requests["get_item"] == reads and store.stats.conflicts == 2
    assert {e.member: e.score for e in one} == {"a": 1, "b": 2, "c": 3, "d": 4} and one.check() == []


@pytest.mark.parametrize("shards", [1, 64])
def test_a_sharded_set_within_the_limits(client, shards) -> None:
    """S = 64 reads its 64 heads and many entry sets per ``get_many``: split into BatchGetItems of at most
    100 distinct keys, transparently."""
    store = open_store(client)
    rng = random.Random(shards)
    start = {f"m{i}": rng.randrange(1000) for i in range(600)}
    board = mdss.SortedSet.load(store, "s", start, chunk_size=4, shards=shards, log_limit=7)
    model = mdss.SortedSet.load(mdss.open_store("memory://"), "s", start, chunk_size=4)
    for _ in range(300):
        member, delta = f"m{rng.randrange(700)}", rng.randrange(-5, 6)
        assert board.incr(member, delta) == model.incr(member, delta)
    assert board.range(0, 1000) == model.range(0, 1000)
    assert board.rank("m5") == model.rank("m5")
    assert board.page(limit=50).entries == model.page(limit=50).entries
    assert board.check() == []


def test_gc_and_drop_page_through_the_scan(client) -> None:
    store = open_store(client)
    board = mdss.SortedSet.load(store, "s", {f"m{i}": i for i in range(3000)}, chunk_size=4, gc_grace=0)
    store.put_many({f"mdss:other:n:{i}": b"x" * 100_000 for i in range(30)})  # 3 MB of another set: pages
    assert board.gc(sweep=True) == 0
    board.drop()
    assert sorted(client.items) == sorted(f"mdss:other:n:{i}" for i in range(30))
    assert client.requests["scan"] >= 4


# -- objects of the core that can outgrow a 400 KB item (fixes belong in mdss/_log.py and mdss/_garbage.py) --


def test_a_large_batch_appended_to_the_log_fits_in_items(client) -> None:
    store = open_store(client)
    names = [f"{i:06d}" + "m" * 200 for i in range(12_000)]
    board = mdss.SortedSet.load(store, "b", {m: i for i, m in enumerate(names)})  # default settings
    board.add_many({m: -i for i, m in enumerate(names[:2_500])})  # below the default log_limit (4,951)
    assert board.score(names[7]) == -7 and board.check() == []


def test_a_merge_that_replaces_many_nodes_fits_in_items(client) -> None:
    store = open_store(client)
    board = mdss.SortedSet.load(store, "b", {f"m{i}": i for i in range(30_000)}, chunk_size=4, log_limit=12_000)
    rng = random.Random(1)
    board.add_many({f"m{rng.randrange(30_000)}": -i for i in range(11_000)})
    board.merge()  # replaces about 15,000 nodes: a note of about 500 KB
    for i in range(5):
        board.add_many({f"n{i}:{j}": j for j in range(6_000)})
    assert board.check() == []


def test_a_new_set_does_not_scan_the_table(client) -> None:
    store = open_store(client)
    mdss.SortedSet.load(store, "big", {f"m{i}": i for i in range(20_000)}, chunk_size=8)  # 1 MB of items
    client.requests.clear()
    mdss.SortedSet(store, "new", shards=16).add_many({f"x{i}": i for i in range(100)})
    assert client.requests["scan"] == 0


def test_a_top_n_is_refused_where_its_full_top_may_not_fit_in_an_item(client) -> None:
    """TopN(n=5000) was accepted, and posts of long members were refused from member 1,638 on, the top never full (a
    helper's probe on dynalite). Now n is checked against the item's room at construction, as a set's chunk_size is:
    the largest n it names holds a full top of the longest members."""
    store = open_store(client)
    with pytest.raises(mdss.InvalidArgumentError, match="or less") as refused:
        mdss.TopN(store, "podium", n=5000)
    fits = int(str(refused.value).rsplit("use n=", 1)[1].split()[0])
    podium = mdss.TopN(store, "podium", n=fits)
    longest = [("m" * 250 + f"{i:06d}", -(2**63) + i) for i in range(fits + 5)]
    for start in range(0, len(longest), 500):
        podium.post_many(longest[start : start + 500])
    assert len(podium.top()) == fits
