"""Sets whose nodes are bounded in bytes as well as in items (``node_bytes``, leaderboard windows).

Members of very different lengths under tiny byte bounds and chunk sizes, so
that nodes are cut by bytes, by items, and by both; ``check()`` after every
step verifies the bound and the fill rule (a node under the minimum items
must weigh more than a quarter of the bound) in both trees and their
manifests.
"""

from __future__ import annotations

from depth import budget
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

import mdss
from mdss._tree import CHILD_BYTES, weights
from mdss._writer import Writer

# Every manifest item must weigh at most a quarter of the bound: members of up to 36 bytes at 400.
MEMBERS = st.builds(lambda n, k: f"m{n:03d}" + "x" * k, st.integers(0, 60), st.sampled_from([0, 1, 5, 20, 32]))


class NodeBytesMachine(RuleBasedStateMachine):
    @initialize(
        chunk=st.sampled_from([2, 3, 4, 8, 16, 40]),
        node_bytes=st.sampled_from([400, 500, 800]),
        log_limit=st.sampled_from([0, 4, None]),
        order=st.sampled_from(["asc", "desc"]),
    )
    def start(self, chunk: int, node_bytes: int, log_limit, order: str) -> None:
        self.set = mdss.SortedSet(
            mdss.open_store("memory://"), "s", order=order, chunk_size=chunk, log_limit=log_limit, gc_grace=0
        )
        self.set.engine.node_bytes = node_bytes
        self.node_bytes = node_bytes
        self.model: dict[str, int] = {}

    @rule(pairs=st.lists(st.tuples(MEMBERS, st.integers(-5, 5)), max_size=30))
    def add_many(self, pairs) -> None:
        self.set.add_many(pairs)
        self.model.update(pairs)

    @rule(members=st.lists(MEMBERS, max_size=30))
    def remove_many(self, members) -> None:
        self.set.remove_many(members)
        for m in members:
            self.model.pop(m, None)

    @rule()
    def merge(self) -> None:
        self.set.merge()

    @invariant()
    def agrees(self) -> None:
        if not hasattr(self, "set"):
            return
        self.set.merge()  # the log into the trees, so that check() sees the nodes a merge wrote
        assert self.set.check() == []
        reverse = self.set.order == "desc"
        expected = sorted(self.model.items(), key=lambda e: ((-e[1] if reverse else e[1]), e[0]))
        assert [(e.member, e.score) for e in self.set] == expected
        snap = mdss._snapshot.snapshot(self.set.engine)
        assert snap.head.node_bytes == (self.node_bytes if snap.version is not None else None)


TestNodeBytes = NodeBytesMachine.TestCase
TestNodeBytes.settings = settings(max_examples=budget(60), stateful_step_count=25, deadline=None)


def test_cuts_keep_every_part_full() -> None:
    """Every cut of a run heavier than the bound leaves parts within both bounds and full, whatever the mix."""
    import random

    rng = random.Random(5)
    for _ in range(3000):
        chunk, bound, height = rng.choice([2, 3, 4, 8, 50]), rng.choice([400, 1000]), rng.choice([0, 1])
        writer = Writer(chunk, 1)
        writer.node_bytes = bound
        most_member = bound // 4 - CHILD_BYTES
        members = ["m" * rng.randint(1, most_member) for _ in range(rng.randint(1, 120))]
        cuts = writer._cuts(members, height)
        least, most = mdss._tree.fill(chunk, height)
        sizes = weights(height, members)
        assert cuts[0] == 0 and cuts[-1] == len(members) and all(a < b for a, b in zip(cuts, cuts[1:]))
        if len(cuts) == 2:
            continue  # one node: the caller's to merge if it is under-filled
        for a, b in zip(cuts, cuts[1:]):
            weight = sum(sizes[a:b])
            assert b - a <= most and weight <= bound
            assert mdss._tree.full(b - a, weight, least, bound), (cuts, a, b, weight)
            assert not height or b - a >= 2
