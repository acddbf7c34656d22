"""``tiebreak="member_desc"``: ties in Redis' order for descending sets (ZREVRANGE lists a tie from its greatest
member), checked against Redis itself; stored with the set, refused when it differs, kept by loads that spill.
The stateful model test (test_sortedset_stateful.py) draws the tiebreak too, for every read and write."""

from __future__ import annotations

from urllib.parse import urlsplit

import pytest
import redis
from hypothesis import given, settings
from hypothesis import strategies as st

import mdss

tied = st.dictionaries(st.text("abz\0é", min_size=1, max_size=4), st.integers(0, 3), min_size=1, max_size=30)


@pytest.fixture(scope="module")
def client(redis_url: str) -> redis.Redis:
    url = urlsplit(redis_url)
    return redis.Redis(host=url.hostname, port=url.port, db=int(url.path.lstrip("/") or 0), decode_responses=True)


@settings(max_examples=20)
@given(scores=tied, shards=st.sampled_from([1, 3]))
def test_a_descending_set_lists_ties_as_redis_does(client: redis.Redis, scores: dict[str, int], shards: int) -> None:
    client.delete("tiebreak-peer")
    client.zadd("tiebreak-peer", scores)
    s = mdss.SortedSet(mdss.open_store("memory://"), "s", tiebreak="member_desc", chunk_size=2, shards=shards)
    s.add_many(scores)
    redis_order = client.zrevrange("tiebreak-peer", 0, -1)
    assert [e.member for e in s] == redis_order
    assert [s.rank(m) - 1 for m in redis_order] == [client.zrevrank("tiebreak-peer", m) for m in redis_order]
    asc = mdss.SortedSet(mdss.open_store("memory://"), "a", order="asc", chunk_size=2, shards=shards)
    asc.add_many(scores)
    assert [e.member for e in asc] == client.zrange("tiebreak-peer", 0, -1)  # the default is Redis' ascending order


def test_the_tiebreak_is_stored_with_the_set(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(mdss._load, "PAIR_BYTES", 1 << 20)  # every load of more than one pair spills
    store = mdss.open_store(f"sqlite:///{tmp_path}/t.db")
    pairs = {f"m{i:03d}": i % 3 for i in range(300)}
    loaded = mdss.SortedSet.load(store, "big", pairs, tiebreak="member_desc", chunk_size=4)
    expected = sorted(sorted(pairs, reverse=True), key=pairs.__getitem__, reverse=True)
    assert [e.member for e in loaded] == expected and loaded.check() == []  # the spilled load keeps the order
    again = mdss.SortedSet(store, "big")
    assert again.tiebreak == "member_desc" and again.info()["tiebreak"] == "member_desc"
    assert [e.member for e in again.range(0, 3)] == expected[:3]
    with pytest.raises(mdss.SettingsMismatchError, match="tiebreak"):
        mdss.SortedSet(store, "big", tiebreak="member")
    sharded = mdss.SortedSet(store, "sh", shards=2, tiebreak="member_desc")
    assert mdss.SortedSet(store, "sh").tiebreak == "member_desc"
    with pytest.raises(mdss.SettingsMismatchError, match="tiebreak"):
        mdss.SortedSet(store, "sh", tiebreak="member")
    assert sharded.tiebreak == "member_desc" and mdss.SortedSet(store, "plain").tiebreak == "member"
    with pytest.raises(mdss.InvalidArgumentError, match="tiebreak"):
        mdss.SortedSet(store, "bad", tiebreak="first")
