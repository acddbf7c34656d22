"""``tiebreak="member_desc"``: ties in Redis' order for descending sets (ZREVRANGE lists a tie from its greatest
member), checked against Redis itself; stored with the set, refused when it differs, kept by loads that spill.
The stateful model test (test_sortedset_stateful.py) draws the tiebreak too, for every read and write."""

from __future__ import annotations

import threading
from urllib.parse import urlsplit

import pytest
import redis
from depth import budget
from hypothesis import given, settings
from hypothesis import strategies as st

import mdss

tied = st.dictionaries(st.text("abz\0é", min_size=1, max_size=4), st.integers(0, 3), min_size=1, max_size=30)


@pytest.fixture(scope="module")
def client(redis_url: str) -> redis.Redis:
    url = urlsplit(redis_url)
    return redis.Redis(host=url.hostname, port=url.port, db=int(url.path.lstrip("/") or 0), decode_responses=True)


@settings(max_examples=budget(20))
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
        mdss.SortedSet(store, "bad", tiebreak="last")


def test_first_ranks_who_reached_a_score_first_and_only_a_new_score_moves_it(store) -> None:
    """Among equal scores, the member that reached its score first ranks higher; a write that leaves the score (a
    repeat, ``best`` with a worse or equal one, an increment of 0, data) keeps its place; competition and dense ranks
    still tie; the order survives merges and is the set's own commit order (a store that applies appends takes
    compare-and-set commits for such a set)."""
    board = mdss.SortedSet(store, "first", tiebreak="first", chunk_size=2, log_limit=3)
    for member in ("dan", "cid", "bob", "ann"):
        board.add(member, 10)
    board.add("eve", 20)
    assert [e.member for e in board] == ["eve", "dan", "cid", "bob", "ann"]
    board.add("dan", 10)
    board.add("dan", 9, op="best")
    board.incr("dan", 0)
    board.add("dan", 10, data="same score")
    board.add("cid", 10.0)  # 10 == 10.0: the same key, the same place
    assert [e.member for e in board] == ["eve", "dan", "cid", "bob", "ann"]
    board.add("dan", 11)
    board.add("dan", 10)  # back to 10: reached now, after the others
    board.merge()
    assert [e.member for e in board] == ["eve", "cid", "bob", "ann", "dan"]
    assert board.rank("dan") == 5 and board.rank("dan", ties="competition") == 2
    assert board.rank("dan", ties="dense") == 2 and board.rank("cid", ties="dense") == 2
    assert [e.member for e in board.around("bob", 1, 1)] == ["cid", "bob", "ann"]
    assert board.score("cid") == 10.0 and type(board.score("cid")) is float and board.check() == []
    assert mdss.SortedSet(store, "first").tiebreak == "first"


def test_first_orders_a_load_by_member_before_later_writes(store) -> None:
    loaded = mdss.SortedSet.load(store, "lf", {"b": 1, "a": 1, "c": 2}, tiebreak="first", chunk_size=2)
    loaded.add("0", 1)
    assert [e.member for e in loaded] == ["c", "a", "b", "0"] and loaded.check() == []


def test_a_sharded_first_set_orders_ties_by_the_writers_clock(store, monkeypatch) -> None:
    """Shards have no common log: a sharded set numbers entries by the clock (microseconds, past the last number this
    process gave), so ties across shards go by when each commit ran."""
    board = mdss.SortedSet(store, "sh-first", shards=3, tiebreak="first", chunk_size=2)
    names = [f"p{i}" for i in range(8)]
    for name in names:
        board.add(name, 5)
    assert [e.member for e in board] == names and board.check() == []
    monkeypatch.setattr(mdss._engine.time, "time_ns", lambda: 0)  # a clock gone back: numbers still go forward
    board.add("p0", 4)
    board.add("p0", 5)
    assert [e.member for e in board] == [*names[1:], "p0"]
    assert [e.member for e in board.page(3, board.page(3).next).entries] == names[4:7]


def test_first_pages_resume_after_their_snapshot_is_collected(tmp_path) -> None:
    """A cursor whose snapshot was merged and collected goes on from the newest state just after (before, going back)
    its entry, which keeps its place while its score is unchanged: no tie is skipped or repeated. (Another process
    reads on: this one's node cache would still hold the snapshot.)"""
    url = f"sqlite:///{tmp_path}/fp.db"
    board = mdss.SortedSet(mdss.open_store(url), "fp", tiebreak="first", chunk_size=2, gc_grace=0, log_limit=100)
    for i in range(9):
        board.add(f"m{8 - i}", 1)  # m8 first ... m0 last: the reverse of member order
    board.merge()
    first = board.page(4)
    board.add("zz", 0)
    board.merge()
    assert board.gc() > 0
    other = mdss.SortedSet(mdss.open_store(url), "fp")
    rest = other.page(4, first.next)
    assert [e.member for e in first.entries + rest.entries] == ["m8", "m7", "m6", "m5", "m4", "m3", "m2", "m1"]
    back = other.page(2, rest.previous)
    assert [e.member for e in back.entries] == ["m6", "m5"]


def test_first_under_concurrent_writers_follows_each_writers_order(store) -> None:
    """Threads each write their own members to one score, one after another, while merges run (a tiny log limit):
    among the ties every thread's members keep the order it wrote them in (a write acknowledged before another began
    reached its score first), no two entries share a number, and check() holds."""
    board = mdss.SortedSet(store, "race-first", tiebreak="first", chunk_size=3, log_limit=4)
    threads, each = 4, 6

    def work(t: int) -> None:
        for k in range(each):
            board.add(f"t{t}-{k}", 1)

    pool = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    order = [e.member for e in board]
    for t in range(threads):
        assert [m for m in order if m.startswith(f"t{t}-")] == [f"t{t}-{k}" for k in range(each)]
    values = mdss._snapshot.snapshot(board.engine).index.find(order)
    assert len({v[2] for v in values}) == len(order) == threads * each
    assert [v[2] for v in values] == sorted(v[2] for v in values) and board.check() == []
