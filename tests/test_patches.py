"""Patched entry sets: a merge that changes a few entries of a stored entry set writes only those, as a patch that a
manifest names beside its base (``base+patch``), until the entry set has taken ``patch_most`` changes.

Here chunks are tiny and logs shorter than the trees' entry sets, so that almost every merge patches, patches grow,
give way to whole entry sets, and meet splits and merges of neighbours.
"""

from __future__ import annotations

import collections
import random
import time

import pytest
from depth import call_points
from faulty import FaultyStore
from hypothesis import settings
from hypothesis.stateful import run_state_machine_as_test
from test_sortedset_stateful import SortedSetMachine

import mdss
from mdss import _merge, _retry, _writer
from mdss._codec import describe, encode_manifest, encode_patch, pack, seal
from mdss._nodes import JOIN

PATCH = "a patch of an entry set"


def _kinds(store: mdss.Store, name: str = "s") -> collections.Counter[str]:
    """What the nodes the set's head names are."""
    keys = mdss.SortedSet(store, name, chunk_size=8).node_keys()
    return collections.Counter(describe(v) for v in store.get_many(keys) if v is not None)


def _patched_set(store: mdss.Store, n: int = 300, updates: int = 150, seed: int = 1):
    """A set of ``n`` members in entry sets of 8, then ``updates`` single writes merged every 6."""
    rng = random.Random(seed)
    model = {f"m{i:04d}": rng.randrange(40) for i in range(n)}
    mdss.SortedSet.load(store, "s", model, chunk_size=8)
    sset = mdss.SortedSet(store, "s", chunk_size=8, log_limit=6, gc_grace=0)
    for _ in range(updates):
        member = f"m{rng.randrange(n + n // 10):04d}"
        if rng.random() < 0.15:
            sset.remove(member)
            model.pop(member, None)
        else:
            score = rng.choice([rng.randrange(40), rng.randrange(40) + 0.5])
            sset.add(member, score)
            model[member] = score
    return sset, model


def _expected(model: dict[str, float]) -> list[tuple[str, float]]:
    return sorted(model.items(), key=lambda kv: (-kv[1], kv[0]))


def _entries(sset: mdss.SortedSet) -> list[tuple[str, float]]:
    return [(e.member, e.score) for e in sset]


def test_merges_patch_entry_sets_on_every_store(store) -> None:
    sset, model = _patched_set(store)
    sset.merge()
    assert _kinds(store)[PATCH] > 0
    fresh = mdss.SortedSet(store, "s", cache_bytes=0)  # reads every patched entry set from the store
    for reader in (sset, fresh):
        assert _entries(reader) == _expected(model)
        assert reader.check() == []
    ranks = {m: i + 1 for i, (m, _) in enumerate(_expected(model))}
    assert all(fresh.rank(m) == r for m, r in list(ranks.items())[::5])
    assert [type(fresh.score(m)) for m in model] == [type(s) for s in model.values()]  # 1 and 1.0 kept apart
    sset.gc(sweep=True, wait=False)
    assert sset.unreferenced() == []  # no patch and no base left over, none of the named ones taken
    assert _entries(mdss.SortedSet(store, "s", cache_bytes=0)) == _expected(model)


def test_a_patch_costs_no_round_trip(store_factory, monkeypatch) -> None:
    """The same history with and without patches makes trees of the same shape (a patch never splits nor merges):
    cold ranks cost the same store calls in both."""
    calls = []
    for patchable in (_writer.Writer._patchable, lambda *args: False):
        monkeypatch.setattr(_writer.Writer, "_patchable", patchable)
        store = store_factory()
        sset, model = _patched_set(store)
        sset.merge()
        counted = FaultyStore(store)
        reader = mdss.SortedSet(counted, "s", cache_bytes=0)
        for member in sorted(model)[::7]:
            reader.rank(member)
        calls.append((counted.count, _kinds(store)[PATCH] > 0))
    assert calls[0] == (calls[1][0], True) and not calls[1][1]


def test_patches_give_way_to_whole_entry_sets() -> None:
    """A patch never holds more than ``patch_most`` changes: past that its entry set is written whole."""
    store = mdss.open_store("memory://")
    sset, _ = _patched_set(store, n=200, updates=400, seed=3)
    sset.merge()
    most = _writer.patch_most(8)
    sizes = []
    for value in store.get_many(sset.node_keys()):
        if value is not None and describe(value) == PATCH:
            from mdss._codec import decode_patch

            removed, _, added, _ = decode_patch("k", value)
            sizes.append(len(removed) + len(added))
    assert sizes and max(sizes) <= most


def test_sorted_set_matches_model_with_long_patches(monkeypatch) -> None:
    """The stateful model test with patches of up to 50 changes in entry sets of 2 to 8: patches outgrow their base."""
    monkeypatch.setattr(_writer, "patch_most", lambda chunk: 50)
    SortedSetMachine.factory = staticmethod(lambda: mdss.open_store("memory://"))
    SortedSetMachine.shards = 1
    profile = settings()
    run_state_machine_as_test(
        SortedSetMachine, settings=settings(profile, max_examples=max(profile.max_examples // 2, 10))
    )


def merge_dies_at_every_call(store_factory, store, after: bool, monkeypatch, members: int, writes: int, salt: str):
    """The merging process dies at each store call of a merge in turn (no call after it, not even to clean up), on sets
    of ``members`` in entry sets of 8 that took a merge of ``writes`` updates and now merge ``writes`` more: the set
    reads as before, check() holds, and a sweep leaves exactly the named nodes. On the networked stores by default the
    first, the last and a stride of the calls, every call under MDSS_DEEP. The number of calls of a whole merge."""
    monkeypatch.setattr(_retry, "STORE_CALLS", _retry.Backoff(budget=0.0, base=0.0, max_attempts=1))
    skew = [0.0]
    monkeypatch.setattr(_writer, "clock", lambda: time.time() + skew[0])

    def crash_at(k: int) -> tuple[bool, int]:
        name = f"s{k}"
        rng = random.Random(k)
        pairs = {f"m{i:04d}": i % 17 for i in range(members)}
        mdss.SortedSet.load(store, name, pairs, chunk_size=8)
        writer = mdss.SortedSet(store, name, log_limit=10**6, gc_grace=0)
        writer.add_many([(f"m{rng.randrange(members):04d}", 100 + i) for i in range(writes)])
        writer.merge()  # patches and deltas exist before the merge that dies
        writer.add_many([(f"m{rng.randrange(members + members // 10):04d}", 200 + i) for i in range(writes)])
        expected = _entries(writer)
        dying = FaultyStore(store, dies=True, after=after)
        merger = mdss.SortedSet(dying, name, log_limit=10**6, gc_grace=0)
        merger.rank("m0000")  # reads the head and the log
        dying.count, dying.fail_at = 0, k
        try:
            merger.merge()
            crashed = False
        except mdss.StoreUnavailableError:
            crashed = True
        skew[0] += 3600  # the dead merger's claim has lapsed
        survivor = mdss.SortedSet(store, name, cache_bytes=0, gc_grace=0)
        assert _entries(survivor) == expected, k
        assert survivor.check() == [], k
        survivor.gc(sweep=True, wait=False)
        assert survivor.unreferenced() == [], k
        assert survivor.merge() is not None
        assert _entries(mdss.SortedSet(store, name, cache_bytes=0)) == expected, k
        return crashed, dying.count

    visited: set[int] = set()
    for k in call_points(store_factory.kind, f"{salt}-{after}"):
        crashed, calls = crash_at(k)
        visited.add(k)
        if not crashed and calls < k:
            if calls not in visited:
                crash_at(calls)
            break
    return calls


@pytest.mark.parametrize("after", [False, True], ids=["before", "lost-reply"])
def test_a_merge_that_patches_dies_at_every_store_call(store_factory, store, after, monkeypatch) -> None:
    """:func:`merge_dies_at_every_call`, for a merge that writes patches."""
    calls = merge_dies_at_every_call(store_factory, store, after, monkeypatch, 120, 8, "patch-merge")
    assert _kinds(store, "s1")[PATCH] > 0 and calls > 4


def _stored(store: mdss.Store) -> tuple[str, str, str]:
    """A set with a patched entry set in its score tree: (its manifest's key, its id, the set's node key prefix)."""
    sset, _ = _patched_set(store, n=120, updates=60)
    sset.merge()
    for key in sset.node_keys():
        value = store.get(key).value
        if describe(value) == "a tree manifest (at most chunk_size children)" and value[:2] == bytes([0x99, 5]):
            from mdss._codec import decode_node

            fields = decode_node(key, value)
            child = next((i for i in fields[2] if JOIN in i), None)
            if child is not None and fields[6] is not None:  # the score tree's, which a whole read goes through
                return key, child, key.rpartition(":")[0] + ":"
    raise AssertionError("no score tree manifest names a patched entry set")


@pytest.mark.parametrize(
    "damage",
    ["missing patch", "flipped byte", "removes what the base lacks", "adds what the base holds", "base a manifest"],
)
def test_damaged_patches_are_refused(damage, monkeypatch) -> None:
    monkeypatch.setattr(_merge, "deltas_fit", lambda chunk, limit: 0)  # every manifest whole: the one found is live
    store = mdss.open_store("memory://")
    manifest, child, prefix = _stored(store)
    base, patch = child.split(JOIN)
    key = prefix + patch
    data = store.get(key).value
    if damage == "missing patch":
        store.delete(key)
    elif damage == "flipped byte":
        store.put(key, data[:3] + bytes([data[3] ^ 1]) + data[4:])
    elif damage == "removes what the base lacks":
        store.put(key, encode_patch((("nobody",), (1,)), ((), ())))
    elif damage == "adds what the base holds":
        from mdss._codec import decode_node

        fields = decode_node(prefix + base, store.get(prefix + base).value)
        store.put(key, encode_patch(((), ()), ((fields[1][0],), (fields[2][0],))))
    else:
        store.put(prefix + base, store.get(manifest).value)
    reader = mdss.SortedSet(store, "s", cache_bytes=0)
    error = mdss.MissingNodeError if damage == "missing patch" else mdss.CorruptDataError
    with pytest.raises(error) as caught:
        list(reader)
    if damage != "missing patch":  # a missing node is told as the set's damage, after a retry on a newer head
        assert caught.value.key in (key, prefix + base)
    assert reader.check() != []


def test_patch_and_manifest_formats() -> None:
    """A patch's fields are typed like an entry set's; a manifest that names a patched child is format 5, which
    earlier versions refuse as an unknown format rather than look for a node named ``base+patch``."""
    from mdss._codec import decode_node, decode_patch

    fields = (("a",), (1,), ("b", "c"), (2.5, 3))
    assert decode_patch("k", encode_patch(fields[:2], fields[2:])) == fields
    for bad in (
        seal(pack([5, 6, ("a",), (), (), ()])),  # members without scores
        seal(pack([5, 6, (1,), (1,), (), ()])),  # a member that is not a string
        seal(pack([5, 6, (), (), ("a",), (float("nan"),)])),  # NaN
        seal(pack([5, 0, ("a",), (1,)])),  # an entry set in the patches' format
    ):
        with pytest.raises(mdss.CorruptDataError):
            decode_patch("k", bad)
    data = encode_manifest(1, ("a.1+b.2", "c.3"), (4, 4), ("x", "y"), (1, 2))
    assert data[1] == 5 and decode_node("k", data)[2] == ("a.1+b.2", "c.3")
    assert encode_manifest(1, ("a.1", "c.3"), (4, 4), ("x", "y"), (1, 2))[1] == 2  # no patched child: as before


def test_no_patches_where_the_store_cannot_hold_their_manifests() -> None:
    """A store whose values hold the largest manifest of plain children but not of patched ones (two ids per child):
    merges write entry sets whole there, so a chunk size that fitted before patches still does."""
    store = mdss.open_store("memory://")
    store.max_value_bytes = _writer.largest_node_bytes(8)
    assert not _writer.patches_fit(8, store.max_value_bytes) and _writer.patches_fit(8, None)
    sset, model = _patched_set(store)
    sset.merge()
    assert _kinds(store)[PATCH] == 0
    assert _entries(mdss.SortedSet(store, "s", chunk_size=8, cache_bytes=0)) == _expected(model)


def test_merges_that_change_many_entries_take_turns_to_rewrite() -> None:
    """Where every merge changes more than ``patch_most`` entries of each entry set (at most a quarter of the chunk), an
    unpatched entry set takes one patch in merges of its turn and is rewritten by the next one: each merge rewrites
    about half the entry sets (and the grace after it keeps about half a tree of garbage), never all of them."""
    store = mdss.open_store("memory://")
    chunk, blocks = 100, 24
    assert _writer.patch_most(chunk) < 18 <= chunk // _writer.ONE_PATCH_SHARE
    model = {f"m{i:05d}": i for i in range(chunk * blocks)}
    mdss.SortedSet.load(store, "s", model, chunk_size=chunk)
    sset = mdss.SortedSet(store, "s", chunk_size=chunk, log_limit=10**6, gc_grace=0)
    rng = random.Random(5)
    shares, before = [], None
    for _ in range(10):
        for block in range(blocks):  # 9 updates in each run of 100 members: 18 changes in each tree's entry sets
            for i in rng.sample(range(block * chunk, (block + 1) * chunk), 9):
                member = f"m{i:05d}"
                model[member] = i if model[member] != i else i + 0.5  # it keeps its place
                sset.add(member, model[member])
        assert sset.merge()
        keys = sset.node_keys()
        bases = {k for k, v in zip(keys, store.get_many(keys)) if v is not None and describe(v).startswith("an entry")}
        if before is not None:
            shares.append(len(bases - before) / len(bases))
        before = bases
    assert all(0.2 <= share <= 0.8 for share in shares[2:]), shares
    assert 0.35 <= sum(shares[2:]) / len(shares[2:]) <= 0.65, shares
    assert sset.check() == [] and _entries(sset) == _expected(model)
    assert _entries(mdss.SortedSet(store, "s", cache_bytes=0)) == _expected(model)
