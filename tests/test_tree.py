"""The tree under big batches: sets of hundreds of members with chunk sizes 2-5 (trees five and more levels
deep), commits that insert, move and delete large parts of the set at once, against a dict model.

The stateful test draws from 20 members; this one reaches the deep trees and the mass deletions that
leave chains of single-child manifests behind, where merges must cascade.
"""

from __future__ import annotations

import math
import random

from depth import budget
from hypothesis import given, settings
from hypothesis import strategies as st

import mdss

UNIVERSE = 400
ops = st.tuples(st.integers(0, UNIVERSE - 1), st.none() | st.integers(-20, 20))


@given(
    chunk=st.integers(2, 5),
    order=st.sampled_from(["desc", "asc"]),
    size=st.integers(0, UNIVERSE),
    seed=st.integers(0, 2**32),
    batches=st.lists(
        st.one_of(
            st.lists(ops, max_size=200),
            st.tuples(st.integers(0, UNIVERSE), st.integers(0, UNIVERSE)),  # delete a whole range of members
        ),
        min_size=1,
        max_size=5,
    ),
)
def test_big_batches_keep_every_invariant(chunk, order, size, seed, batches) -> None:
    rng = random.Random(seed)
    start = {k: rng.randint(-20, 20) for k in rng.sample(range(UNIVERSE), size)}
    board = mdss.SortedSet.load(
        mdss.open_store("memory://"), "b", {f"m{k:03d}": v for k, v in start.items()}, chunk_size=chunk, order=order
    )
    model = {f"m{k:03d}": v for k, v in start.items()}
    for batch in batches:
        if isinstance(batch, tuple):
            lo, hi = sorted(batch)
            batch = [(k, None) for k in range(lo, hi)]
        with board.batch():
            for k, score in batch:
                member = f"m{k:03d}"
                if score is None:
                    board.remove(member)
                    model.pop(member, None)
                else:
                    board.add(member, score)
                    model[member] = score
        assert board.check() == []
        sign = -1 if order == "desc" else 1
        expected = sorted(model.items(), key=lambda kv: (sign * kv[1], kv[0]))
        assert [(e.member, e.score) for e in board] == expected
        assert len(board) == len(model)


@given(
    chunk=st.integers(2, 5),
    order=st.sampled_from(["desc", "asc"]),
    log_limit=st.sampled_from([1, 2, 7]),
    rising=st.booleans(),
)
def test_small_commits_in_key_order_keep_the_tree_shallow(chunk, order, log_limit, rising) -> None:
    """Entries added one at a time at one end of the order (scores that only rise, or only fall) split the
    same edge of the tree at every merge. With chunk sizes 2 and 3, whose half is 1, that once left a chain of
    single-child manifests a level deeper per merge: 195 entries stood 193 levels deep, past the 64 a stored
    head may name, and the set could no longer be read. Every manifest now keeps 2 children or more."""
    board = mdss.SortedSet(mdss.open_store("memory://"), "b", chunk_size=chunk, order=order, log_limit=log_limit)
    n = 300
    for i in range(n):
        board.add(f"m{i:03d}", i if rising else -i)
    board.merge()
    assert board.check() == []
    info = board.info()
    assert max(info["score_tree_height"], info["member_index_height"]) <= math.ceil(math.log2(n))
    assert len(board) == n


_TIES = st.sampled_from(["00:a", "00:b", "01:", "01:a", "01:a\x00", "02:zz"])
_OWNERS = st.sampled_from(["o", "oa", "ob", "p", "~"])


@settings(max_examples=budget(300), deadline=None)
@given(
    st.sets(st.tuples(_TIES, _OWNERS), max_size=12),
    st.lists(
        st.tuples(_TIES) | st.tuples(_TIES, _OWNERS) | st.tuples(_TIES, _OWNERS, st.integers(0, 2)),
        min_size=1,
        max_size=8,
    ),
)
def test_an_entry_set_keyed_by_ties_counts_below_a_probe_as_its_keys_would(entries, probes) -> None:
    """A record window's score-tree entry set, decoded, spells out its keys ``(tie, member)`` only when asked
    (``Leaf.from_ties``); until then ``position`` finds a probe among the ties, then the members: the same count as
    ``bisect_left`` of the keys, for every probe shape a read makes (a column's start ``(tag,)``, a tie, a key) and
    others, before and after the keys are spelled out."""
    from bisect import bisect_left

    from mdss._nodes import Leaf

    keys = sorted(entries)
    for spelled in (False, True):
        leaf = Leaf.from_ties(tuple(m for _, m in keys), tuple(t for t, _ in keys))
        if spelled:
            assert leaf.keys == tuple(keys)
        for probe in probes:
            assert leaf.position(probe) == bisect_left(keys, probe), probe
        assert len(leaf) == len(keys) and leaf.keyed_by_member() is (None if not keys else False)
