"""Manifest deltas: a merge that changes a few children of a stored manifest below the root writes only those, as a
delta that the parent names after its base (``base+delta``, then ``base+delta+delta``...), until the deltas weigh as
much as the manifest or number ``MAX_DELTAS``.

Chunks are tiny here and logs shorter than the trees, so that merges change one or two children of a manifest of
eight: chains grow, give way to whole manifests, and meet splits and merges of their neighbours. The stateful model
test (test_sortedset_stateful.py) runs on every store with deltas allowed up to a whole manifest's weight.
"""

from __future__ import annotations

import collections
import random

import pytest
from faulty import FaultyStore
from test_patches import merge_dies_at_every_call

import mdss
from mdss import _head, _merge, _writer
from mdss._codec import decode_delta, decode_node, describe, encode_delta, encode_manifest, pack, seal
from mdss._nodes import JOIN, MAX_DELTAS, Manifest, assemble, parts
from mdss._order import member_key

DELTA = "a delta of a tree manifest"
MANIFEST = "a tree manifest (at most chunk_size children)"


def _kinds(store: mdss.Store, name: str = "s") -> collections.Counter[str]:
    """What the nodes the set's head names are."""
    keys = mdss.SortedSet(store, name, chunk_size=8).node_keys()
    return collections.Counter(describe(v) for v in store.get_many(keys) if v is not None)


def _chained_set(
    store: mdss.Store, n: int = 700, updates: int = 150, seed: int = 1, log_limit: int = 3, grace: float = 0
):
    """A set of ``n`` members in entry sets of 8 (three levels of manifests), then ``updates`` single writes merged
    every ``log_limit``: each merge changes a child or two of the few manifests it reaches."""
    rng = random.Random(seed)
    model = {f"m{i:05d}": rng.randrange(60) for i in range(n)}
    mdss.SortedSet.load(store, "s", model, chunk_size=8)
    sset = mdss.SortedSet(store, "s", chunk_size=8, log_limit=log_limit, gc_grace=grace)
    for _ in range(updates):
        member = f"m{rng.randrange(n + n // 10):05d}"
        if rng.random() < 0.15:
            sset.remove(member)
            model.pop(member, None)
        else:
            score = rng.choice([rng.randrange(60), rng.randrange(60) + 0.5])
            sset.add(member, score)
            model[member] = score
    sset.merge()
    return sset, model


def _expected(model: dict[str, float]) -> list[tuple[str, float]]:
    return sorted(model.items(), key=lambda kv: (-kv[1], kv[0]))


def _entries(sset: mdss.SortedSet) -> list[tuple[str, float]]:
    return [(e.member, e.score) for e in sset]


def _chains(store: mdss.Store, name: str = "s") -> list[int]:
    """How many deltas each manifest the set's manifests name has (0 for a whole one)."""
    found = []
    for key, value in zip(keys := mdss.SortedSet(store, name, chunk_size=8).node_keys(), store.get_many(keys)):
        if value is not None and describe(value) == MANIFEST:
            fields = decode_node(key, value)
            if fields[1] > 1:
                found.extend(len(parts(i)) - 1 for i in fields[2])
    return found


def test_merges_write_manifest_deltas_on_every_store(store) -> None:
    sset, model = _chained_set(store)
    assert _kinds(store)[DELTA] > 0
    assert max(_chains(store)) >= 2  # chains grow past one delta
    fresh = mdss.SortedSet(store, "s", cache_bytes=0)  # reads every manifest with its deltas from the store
    for reader in (sset, fresh):
        assert _entries(reader) == _expected(model)
        assert reader.check() == []
    ranks = {m: i + 1 for i, (m, _) in enumerate(_expected(model))}
    assert all(fresh.rank(m) == r for m, r in list(ranks.items())[::7])
    dense = sorted({s for s in model.values()}, reverse=True)
    assert all(fresh.rank(m, ties="dense") == dense.index(s) + 1 for m, s in list(model.items())[::11])
    sset.gc(sweep=True, wait=False)
    assert sset.unreferenced() == []  # no delta and no base left over, none of the named ones taken
    assert _entries(mdss.SortedSet(store, "s", cache_bytes=0)) == _expected(model)


def test_a_chain_reads_back_as_its_writer_made_it(monkeypatch) -> None:
    """Every manifest with deltas a merge makes, read back from the store alone (its base and deltas assembled), is the
    manifest the writer held: the same children, summaries and chain weights (which decide the next delta)."""
    made: dict[str, Manifest] = {}
    encoded = _writer.Writer.encoded

    def keep(self, keyspace):
        made.update((i, n) for i, n in self.new.items() if isinstance(n, Manifest) and n.patch is not None)
        return encoded(self, keyspace)

    monkeypatch.setattr(_writer.Writer, "encoded", keep)
    store = mdss.open_store("memory://")
    sset, _ = _chained_set(store, updates=600, log_limit=3, grace=3600)  # no chain collected
    assert len(made) > 20
    for node_id, node in made.items():
        keys = [sset.keys.node(p) for p in parts(node_id)]
        keyfn = sset.engine.ordering.key if node.distincts is not None else member_key
        found, _ = assemble(node_id, keys, store.get_many(keys), keyfn)
        fields = ("height", "ids", "counts", "members", "scores", "firsts", "distincts", "lasts")
        assert [getattr(found, f) for f in fields] == [getattr(node, f) for f in fields]
        assert found.patch == node.patch


def test_chains_stay_within_their_bounds() -> None:
    """No chain passes ``MAX_DELTAS``; the head never names a root with deltas (nor a patched root)."""
    store = mdss.open_store("memory://")
    sset, model = _chained_set(store, updates=1200, seed=2, log_limit=2)
    chains = _chains(store)
    assert chains and max(chains) <= MAX_DELTAS
    head = _head.Head.decode(sset.keys.head, store.get(sset.keys.head).value)
    assert JOIN not in head.scores.root and JOIN not in head.members.root
    assert _entries(mdss.SortedSet(store, "s", cache_bytes=0)) == _expected(model)


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_a_delta_costs_no_round_trip(kind, tmp_path, monkeypatch) -> None:
    """The same history with and without deltas makes trees of the same shape: cold ranks cost the same store calls,
    and write fewer bytes with deltas. What it shows is the trees' shape, the same on every store: two stores run it."""
    calls, written = [], []
    for i, fits in enumerate((_merge.deltas_fit, lambda chunk, limit: 0)):
        monkeypatch.setattr(_merge, "deltas_fit", fits)
        store = mdss.open_store("memory://" if kind == "memory" else f"sqlite:///{tmp_path}/{i}.db")
        sset, model = _chained_set(store)
        written.append(store.stats.bytes_written)
        counted = FaultyStore(store)
        reader = mdss.SortedSet(counted, "s", cache_bytes=0)
        for member in sorted(model)[::23]:
            reader.rank(member)
        calls.append((counted.count, _kinds(store)[DELTA] > 0))
    assert calls[0] == (calls[1][0], True) and not calls[1][1]
    assert written[0] < written[1]


@pytest.mark.parametrize("after", [False, True], ids=["before", "lost-reply"])
def test_a_merge_that_writes_deltas_dies_at_every_store_call(store_factory, store, after, monkeypatch) -> None:
    """``test_patches.merge_dies_at_every_call``, for a merge that writes deltas (and patches)."""
    calls = merge_dies_at_every_call(store_factory, store, after, monkeypatch, 300, 3, "delta-merge")
    assert _kinds(store, "s1")[DELTA] > 0 and calls > 4


def _stored(store: mdss.Store) -> tuple[str, str, str]:
    """A set whose score tree names a manifest with deltas: (its parent's key, its id, the set's node key prefix)."""
    sset, _ = _chained_set(store)
    for key in sset.node_keys():
        value = store.get(key).value
        if describe(value) == MANIFEST:
            fields = decode_node(key, value)
            child = next((i for i in fields[2] if JOIN in i), None)
            if fields[1] > 1 and child is not None and fields[6] is not None:  # the score tree's
                return key, child, key.rpartition(":")[0] + ":"
    raise AssertionError("no score tree manifest names a manifest with deltas")


@pytest.mark.parametrize(
    "damage",
    [
        "missing delta",
        "flipped byte",
        "takes out what the base lacks",
        "puts in what the base holds",
        "another height",
        "base an entry set",
        "delta a patch",
    ],
)
def test_damaged_deltas_are_refused(damage) -> None:
    store = mdss.open_store("memory://")
    manifest, child, prefix = _stored(store)
    base, *deltas = child.split(JOIN)
    key = prefix + deltas[-1]
    data = store.get(key).value
    height = decode_delta(key, data)[0]
    base_fields = decode_node(prefix + base, store.get(prefix + base).value)
    none = ((), (), (), (), (), ())
    if damage == "missing delta":
        store.delete(key)
    elif damage == "flipped byte":
        store.put(key, data[:3] + bytes([data[3] ^ 1]) + data[4:])
    elif damage == "takes out what the base lacks":
        store.put(key, encode_delta(height, (("nobody",), (1,)), none))
    elif damage == "puts in what the base holds":
        first = tuple((x[0],) for x in base_fields[2:8])
        store.put(prefix + deltas[0], encode_delta(height, ((), ()), first))
    elif damage == "another height":
        store.put(key, encode_delta(height + 1, (("nobody",), (1,)), none))
    elif damage == "base an entry set":
        leaf = next(k for k in store.keys(prefix) if describe(store.get(k).value).startswith("an entry set"))
        store.put(prefix + base, store.get(leaf).value)
    else:
        store.put(key, seal(pack([5, 6, (), (), ("a",), (1,)])))
    reader = mdss.SortedSet(store, "s", cache_bytes=0)
    error = mdss.MissingNodeError if damage == "missing delta" else mdss.CorruptDataError
    with pytest.raises(error):
        list(reader)
    assert reader.check() != []


def test_delta_and_manifest_formats() -> None:
    """A delta's fields are typed like a manifest's; a manifest that names a manifest with deltas is format 6, which
    versions that know only patched entry sets refuse as an unknown format; one naming patched entry sets stays 5."""
    fields = (2, ("a",), (1,), ("x.1", "y.2+z.3"), (4, 5), ("b", "c"), (2.5, 3), (2, 1), (2.5, 3))
    assert decode_delta("k", encode_delta(fields[0], fields[1:3], fields[3:])) == fields
    assert decode_delta("k", encode_delta(2, ((), ()), (*fields[3:7], None, None)))[-2:] == (None, None)
    for bad in (
        seal(pack([6, 7, 2, ("a",), (), (), (), (), (), None, None])),  # members without scores
        seal(pack([6, 7, 2, (), (), ("x",), (0,), ("b",), (1,), None, None])),  # a child of no entries
        seal(pack([6, 7, 0, ("a",), (1,), (), (), (), (), None, None])),  # height 0
        seal(pack([6, 7, 2, (), (), (), (), (), (), None, None])),  # nothing at all
        seal(pack([6, 7, 2, (), (), ("x",), (4,), ("b",), (float("nan"),), None, None])),  # NaN
        seal(pack([5, 7, 2, ("a",), (1,), (), (), (), (), None, None])),  # a delta in the patches' format
    ):
        with pytest.raises(mdss.CorruptDataError):
            decode_delta("k", bad)
    data = encode_manifest(2, ("a.1+b.2", "c.3"), (4, 4), ("x", "y"), (1, 2))
    assert data[1] == 6 and decode_node("k", data)[2] == ("a.1+b.2", "c.3")
    assert encode_manifest(1, ("a.1+b.2", "c.3"), (4, 4), ("x", "y"), (1, 2))[1] == 5  # patched entry sets: as before


def test_deltas_only_where_the_store_holds_their_parents() -> None:
    """A store whose values hold manifests of patched entry sets but not of manifests with many deltas (an id more
    per delta): chains stop where their parents would not fit, and none are written where patches do not fit."""
    store = mdss.open_store("memory://")
    store.max_value_bytes = _writer.largest_node_bytes(8, ids=4)
    assert _writer.deltas_fit(8, store.max_value_bytes) == 3 and _writer.deltas_fit(8, None) == MAX_DELTAS
    sset, model = _chained_set(store, updates=800, log_limit=2)
    assert _kinds(store)[DELTA] > 0 and max(_chains(store)) <= 3
    assert _entries(mdss.SortedSet(store, "s", chunk_size=8, cache_bytes=0)) == _expected(model)
    assert _writer.deltas_fit(8, _writer.largest_node_bytes(8)) == 0
