"""Sharded sets (issue 13): settings, routing, round trips that do not grow with S, exact pages under
concurrent writers, and where the shards' heads land on a Redis Cluster.

The conformance suite (test_sortedset.py) and the stateful test run every read and write with 1, 2, 3
and 5 shards against the same model; this file covers what only sharded sets have.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter

import pytest
from readable import readable_keys

import mdss
from mdss._keys import Keyspace
from mdss._shards import MAX_SHARDS, Settings, select, shard_of, shard_parts, slot
from mdss._tree import Leaf


def test_the_shard_of_a_member_is_a_stable_documented_hash() -> None:
    import zlib

    assert [shard_of(m, 7) for m in ("alice", "bob", "日本", "x" * 300)] == [
        zlib.crc32(m.encode("utf-8")) % 7 for m in ("alice", "bob", "日本", "x" * 300)
    ]
    assert (shard_of("alice", 4), shard_of("bob", 4)) == (3, 0)  # fixed forever: stored sets depend on it


def test_select_finds_the_split_of_the_k_smallest() -> None:
    rng = random.Random(5)
    for _ in range(300):
        items = rng.sample(range(1000), rng.randint(0, 60))
        lists = [sorted(items[i::3]) for i in range(3)] + [[]]
        for k in range(len(items) + 1):
            split = select(lists, k)
            chosen = sorted(x for lst, c in zip(lists, split) for x in lst[:c])
            assert chosen == sorted(items)[:k]


def test_settings_are_stored_once_and_reopening_finds_them(store) -> None:
    board = mdss.SortedSet(store, "b", shards=4, chunk_size=3, order="asc")
    assert isinstance(board, mdss.ShardedSet) and board.shards == 4
    board.add_many({"ann": 3, "bob": 1})
    again = mdss.SortedSet(store, "b")
    assert isinstance(again, mdss.ShardedSet)
    assert (again.shards, again.order, again.chunk_size) == (4, "asc", 3)
    assert again.range(0, 5) == [mdss.Entry("bob", 1, 1), mdss.Entry("ann", 3, 2)]
    with pytest.raises(mdss.SettingsMismatchError, match="shards"):
        mdss.SortedSet(store, "b", shards=5)
    with pytest.raises(mdss.SettingsMismatchError, match="shards"):
        mdss.SortedSet(store, "b", shards=1)
    with pytest.raises(mdss.SettingsMismatchError, match="order"):
        mdss.SortedSet(store, "b", order="desc")
    mdss.SortedSet(store, "plain").add("ann", 1)
    with pytest.raises(mdss.SettingsMismatchError, match="shards=1"):
        mdss.SortedSet(store, "plain", shards=3)
    for bad in (0, MAX_SHARDS + 1, "2", 2.0):
        with pytest.raises(mdss.InvalidArgumentError):
            mdss.SortedSet(store, "c", shards=bad)


def test_one_shard_is_the_unsharded_layout(store) -> None:
    one = mdss.SortedSet(store, "one", shards=1)
    assert type(one) is mdss.SortedSet
    one.add_many({"ann": 1, "bob": 2})
    prefix = Keyspace(store.namespace, "one").prefix
    assert store.get(prefix + "s") is None  # no settings record: byte-identical to a set made without shards
    assert sorted(k[len(prefix) :][:2] for k in store.keys(prefix)) == ["h"]


def test_shard_keys_never_collide_with_another_set(store) -> None:
    board = mdss.SortedSet(store, "b", shards=3)
    board.add("ann", 1)
    other = mdss.SortedSet(store, "b|0.0")  # percent-encoded: its keys hold "%7C", never "|"
    other.add("bob", 2)
    assert board.range(0, 5) == [mdss.Entry("ann", 1, 1)]
    assert len(other) == 1
    parts = shard_parts(store.namespace, "b", 3)
    assert all(p.startswith("b|") for p in parts) and len(set(parts)) == 3


def test_members_live_in_their_hash_shard(store) -> None:
    board = mdss.SortedSet(store, "b", shards=5, chunk_size=4)
    board.add_many({f"m{i}": i for i in range(60)})
    for i, engine in enumerate(board._engines):
        assert all(shard_of(e.member, 5) == i for e in engine)
    assert sum(len(e) for e in board._engines) == 60
    assert board.check() == []


def test_a_batch_spanning_shards_that_would_overflow_changes_nothing(store) -> None:
    board = mdss.SortedSet(store, "b", shards=4)
    members = [f"m{i}" for i in range(12)]
    assert len({shard_of(m, 4) for m in members}) > 1
    board.add_many({m: 1 for m in members})
    board.add("big", 2**63 - 1)
    with pytest.raises(mdss.InvalidScoreError):
        board.add_many([*((m, 5) for m in members), ("big", 1)], op="incr")
    assert board.scores([*members, "big"]) == [1] * 12 + [2**63 - 1]
    with board.batch() as batch:
        for m in members:
            board.incr(m, 2)
        board.remove("big")
    assert batch.results == [3] * 12 + [True]


def _warm_manifests_only(board) -> None:
    board.scores([e.member for e in board])  # every node of both trees
    for key in [k for k, (node, _) in board._cache._nodes.items() if isinstance(node, Leaf)]:
        board._cache.discard(key)


@pytest.mark.parametrize("shards", [1, 2, 8, 64])
def test_round_trips_do_not_grow_with_shards(shards) -> None:
    """With manifests cached: a rank 3 round trips (heads, member index, every shard's entry sets), a page
    2 (heads, entry sets), a page after a cursor 3, whatever S; every step's fetches are one get_many."""
    store = mdss.open_store("memory://")
    pairs = {f"p{i}": i % 1000 for i in range(20_000)}
    board = mdss.SortedSet.load(store, "big", pairs, chunk_size=50, shards=shards)
    board.add_many({f"p{i}": 5000 + i for i in range(0, 20_000, 97)})  # some entries in the update logs
    fresh = mdss.SortedSet(store, "big")
    cursor = fresh.page(100).cursor
    cost = {}
    for name, call in {
        "rank": lambda: fresh.rank("p4567"),
        "rank competition": lambda: fresh.rank("p4567", ties="competition"),
        "page": lambda: fresh.range(7_777, 100),
        "page after cursor": lambda: fresh.page(100, cursor),
        "rank_of_score": lambda: fresh.rank_of_score(321),
        "count": lambda: fresh.count(800, 200),
        "len": lambda: len(fresh),
        "scores": lambda: fresh.scores(["p1", "p999", "p12345", "p19999", "nobody"]),
        "range_by_score": lambda: fresh.range_by_score(800, 200, offset=10, limit=100),
        "around": lambda: fresh.around("p4567", 50, 50),
    }.items():
        _warm_manifests_only(fresh)
        before = store.stats.snapshot()
        call()
        cost[name] = store.stats.since(before)["calls"]
    assert cost.pop("page after cursor") <= 3  # unsharded: 1 (the cursor's snapshot, no head); sharded: 3
    assert cost.pop("range_by_score") <= 3  # bounds, then the page (unsharded: 2 when the page's entry sets
    assert cost.pop("around") <= 4  # were read for the bounds); around: member, rank, page
    assert cost == {
        "rank": 3,
        "rank competition": 3,
        "page": 2,
        "rank_of_score": 2,
        "count": 2,
        "len": 1,
        "scores": 2,
    }


def test_sharded_reads_equal_unsharded_ones() -> None:
    rng = random.Random(13)
    pairs = {f"p{i}": rng.choice([rng.randint(0, 40), rng.random() * 40]) for i in range(700)}
    store = mdss.open_store("memory://")
    plain = mdss.SortedSet.load(store, "plain", pairs, chunk_size=6, log_limit=20)
    sets = [mdss.SortedSet.load(store, f"s{s}", pairs, chunk_size=6, shards=s, log_limit=20) for s in (2, 7, 16)]
    changes = {f"p{rng.randrange(900)}": rng.randint(-5, 45) for _ in range(150)}
    gone = [f"p{rng.randrange(700)}" for _ in range(60)]
    for board in (plain, *sets):
        board.add_many(changes)
        board.remove_many(gone)
    for board in sets:
        assert list(board) == list(plain)
        for offset, limit in [(0, 1), (3, 50), (333, 100), (len(plain) - 2, 10), (len(plain) + 5, 3)]:
            assert board.range(offset, limit) == plain.range(offset, limit)
        for member in ["p1", "p500", "p899", "nobody"]:
            assert board.rank(member) == plain.rank(member)
            assert board.rank(member, ties="competition") == plain.rank(member, ties="competition")
            assert board.around(member, 3, 4) == plain.around(member, 3, 4)
        for score in [-1, 0, 7, 20.5, 45, 99]:
            assert board.rank_of_score(score) == plain.rank_of_score(score)
            assert board.count(score, 10) == plain.count(score, 10)
            assert board.range_by_score(40, score, offset=2, limit=7) == plain.range_by_score(
                40, score, offset=2, limit=7
            )
            estimate = board.estimate_rank(score=score)
            assert estimate.low <= plain.rank_of_score(score) <= estimate.high
            assert board.estimate_rank(score=score, max_error=0) == plain.estimate_rank(score=score, max_error=0)
            share = board.estimate_percentile(score=score)
            exact = (plain.rank_of_score(score) - 1) / len(plain)
            assert share.low <= exact <= share.high
        assert board.check() == []


def test_paging_with_cursors_stays_exact_while_other_writers_post(store_factory) -> None:
    """Members nobody changes appear exactly once, in order, across shards (pages continue by key: a member
    moved past the cursor meanwhile may appear again, as with an unsharded set's expired cursor)."""
    store = store_factory()
    steady = {f"s{i:04d}": i for i in range(400)}
    board = mdss.SortedSet.load(store, "b", steady, chunk_size=8, shards=3)
    stop = threading.Event()

    def post() -> None:
        writer = mdss.SortedSet(store, "b")
        rng = random.Random(1)
        while not stop.is_set():
            writer.add_many({f"w{rng.randrange(300)}": rng.randrange(400) for _ in range(5)})
            writer.remove(f"w{rng.randrange(300)}")

    threads = [threading.Thread(target=post) for _ in range(2)]
    for thread in threads:
        thread.start()
    try:
        seen, cursor = [], None
        while True:
            page = board.page(7, cursor)
            seen.extend(page.entries)
            cursor = page.cursor
            if cursor is None:
                break
            time.sleep(0.001)
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    members = [e.member for e in seen]
    assert [m for m in members if m.startswith("s")] == sorted(steady, key=lambda m: (-steady[m], m))
    assert board.check() == []


def test_heads_spread_over_the_masters_of_a_cluster(redis_cluster_url) -> None:
    """Hash tags choose slots, not masters: each shard's head is salted onto master ``i mod 3`` of the
    cluster as it is at creation, so the three masters hold the heads as evenly as S allows."""
    store = mdss.open_store(f"{redis_cluster_url}?namespace=heads{time.monotonic_ns()}")
    for shards in (2, 3, 4, 16, 64):
        board = mdss.SortedSet(store, f"b{shards}", shards=shards)
        board.add_many({f"m{i}": i for i in range(3 * shards)})
        masters = Counter(store.client.get_node_from_key(e._keys.head).name for e in board._engines)
        assert len(masters) == min(shards, 3)
        assert max(masters.values()) - min(masters.values()) <= 1, masters
        assert [slot(e._keys.head) for e in board._engines] == [
            store.client.keyslot(e._keys.head) for e in board._engines
        ]
        assert board.range(0, 2) == [
            mdss.Entry(f"m{3 * shards - 1}", 3 * shards - 1, 1),
            mdss.Entry(f"m{3 * shards - 2}", 3 * shards - 2, 2),
        ]
    store.close()


def test_heads_take_equal_slot_ranges_where_no_cluster_is_known() -> None:
    """Without a cluster's slot owners, shard i's head lies in the i-th of S equal slot ranges."""
    for shards in (2, 5, 16):
        heads = [f"ns:{part}:h" for part in shard_parts("ns", "board", shards)]
        assert [slot(h) * shards // 16384 for h in heads] == list(range(shards))


def test_settings_record_round_trips() -> None:
    settings = Settings(3, "asc", 8, tuple(shard_parts("ns", "b", 3)))
    assert Settings.decode("k", settings.encode()) == settings
    with pytest.raises(mdss.CorruptDataError):
        Settings.decode("k", Settings(3, "asc", 8, ("b|0.0", "b:1.0", "b|2.0")).encode())


def test_drop_removes_every_shard_and_writes_start_again(store) -> None:
    board = mdss.SortedSet(store, "b", shards=3, chunk_size=4)
    board.add_many({f"m{i}": i for i in range(40)})
    board.drop()
    assert len(board) == 0
    assert all(readable_keys(store, e._keys.prefix) == [] for e in board._engines)  # Riak lists tombstones
    assert store.get(board._keys.prefix + "s") is None
    board.add("ann", 1)
    assert isinstance(mdss.SortedSet(store, "b"), mdss.ShardedSet)
    assert board.check() == []


def test_cli_creates_sharded_sets_and_shows_each_shard(tmp_path) -> None:
    from click.testing import CliRunner

    from mdss.cli import cli

    url = f"sqlite:///{tmp_path / 'cli.db'}"
    csv = tmp_path / "pairs.csv"
    csv.write_text("".join(f"m{i},{i}\n" for i in range(300)))

    def run(*args: str) -> str:
        result = CliRunner().invoke(cli, ["--store", url, "--set", "board", *args])
        assert result.exit_code == 0, result.output
        return result.output

    assert "300 members loaded" in run("load", str(csv), "--shards", "3", "--chunk-size", "8")
    out = run("stats")
    assert "shards: 3" in out
    rows = [line.split() for line in out.splitlines() if line.split()[:1] in (["0"], ["1"], ["2"])]
    assert len(rows) == 3 and sum(int(r[1].replace(",", "")) for r in rows) == 300
    assert "m299 is ranked 1st of 300" in run("rank", "m299")
    assert "every invariant holds" in run("check")
    store = mdss.open_store(url)
    assert mdss.SortedSet(store, "board").shards == 3
    store.close()
