"""``warm()``: a process reads a set's nodes into its cache once, so that its reads and writes find them there.

Tiny chunks, so that a few hundred members make deep trees; the store calls are counted by ``FaultyStore``.
"""

from __future__ import annotations

import random

from faulty import FaultyStore

import mdss


def _loaded(store: mdss.Store, n: int = 600) -> dict[str, int]:
    rng = random.Random(3)
    model = {f"m{i:04d}": rng.randrange(100) for i in range(n)}
    mdss.SortedSet.load(store, "s", model, chunk_size=8)
    writer = mdss.SortedSet(store, "s", chunk_size=8, log_limit=50)
    for member in rng.sample(sorted(model), 80):  # a log, and merged trees with patches
        model[member] = rng.randrange(100)
        writer.add(member, model[member])
    return model


def test_a_warm_set_reads_and_writes_with_only_its_head(store) -> None:
    model = _loaded(store)
    counted = FaultyStore(store)
    sset = mdss.SortedSet(counted, "s", cache_bytes=64 << 20)
    assert sset.warm() >= len(model) // 8
    ranks = {m: i + 1 for i, (m, _) in enumerate(sorted(model.items(), key=lambda kv: (-kv[1], kv[0])))}
    before = counted.count
    for member in sorted(model)[::37]:
        assert sset.rank(member) == ranks[member]
        assert sset.score(member) == model[member]
    assert sset.range(offset=300, limit=25) and sset.around(sorted(model)[5], before=5, after=5)
    assert counted.count - before == 2 * len(sorted(model)[::37]) + 2  # a head read each, no node
    before = counted.count
    sset.add("m0001", 1000)  # the member index's entry set is cached: the head and the append
    assert counted.count - before <= 2
    assert sset.check() == []


def test_warm_stops_when_the_cache_is_full() -> None:
    store = mdss.open_store("memory://")
    _loaded(store)
    whole = mdss.SortedSet(store, "s").warm()
    small = mdss.SortedSet(store, "s", cache_bytes=4096)
    read = small.warm()
    assert 0 < read < whole
    assert small.engine.cache.size <= 4096


def test_sharded_sets_and_boards_warm_every_part() -> None:
    store = mdss.open_store("memory://")
    sharded = mdss.SortedSet(store, "sh", shards=4, chunk_size=8)
    sharded.add_many({f"m{i:04d}": i for i in range(400)})
    sharded.merge()
    counted = FaultyStore(store)
    reader = mdss.SortedSet(counted, "sh", shards=4, chunk_size=8)
    assert reader.warm() >= 400 // 8
    before = counted.count
    assert reader.rank("m0100") == 300
    assert counted.count - before == 1  # the heads, in one read
    board = mdss.Leaderboard(store, "game", columns={"xp": "desc"}, chunk_size=8)
    board.load((f"p{i:03d}", {"xp": i}) for i in range(200))
    assert board.warm() > 0 and board.positions("p199") == {"xp": 1}
