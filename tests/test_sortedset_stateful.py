"""Every operation against a plain model, on every store, with tiny chunks so trees split and merge constantly.

After each step the stored tree passes ``check()`` (every invariant of
DESIGN.md) and every read agrees with the model.
"""

from __future__ import annotations

import random

import pytest
import strategies as S
from depth import examples
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from model import Model

import mdss


def plain(entries: list[mdss.Entry]) -> bool:
    """Whether every member read is a plain ``str``, never a key's wrapper (a ``member_desc`` key's ``_Desc``, whose
    comparisons are reversed)."""
    return all(type(e.member) is str for e in entries)


class SortedSetMachine(RuleBasedStateMachine):
    factory = None  # set per test: makes a fresh store
    shards = 1  # set per test: 1 is the unsharded layout

    @initialize(
        order=S.orders,
        chunk=S.chunk_sizes,
        log_limit=S.log_limits,
        merged=st.booleans(),
        tiebreak=st.sampled_from(["member", "member_desc", "first"]),
    )
    def open(self, order: str, chunk: int, log_limit: int | None, merged: bool, tiebreak: str) -> None:
        self.store = self.factory()
        self.log_limit = log_limit
        self.set = mdss.SortedSet(
            self.store,
            "board",
            order=order,
            chunk_size=chunk,
            gc_grace=0,
            log_limit=log_limit,
            shards=self.shards,
            tiebreak=tiebreak,
        )
        if self.shards > 1:  # reads through every shard's layouts, or through the merged keys (mdss._allkeys)
            self.set._all_keys.least, self.set._all_keys.per_key, self.set._all_keys.most = (
                (1, 10**9, 0) if merged else (10**18, 1, 0)
            )
        shard_of = None if self.shards == 1 else lambda member: mdss._shards.shard_of(member, self.shards)
        self.model = Model(order, tiebreak, shard_of)

    def _expect(self, ops: list[tuple[str, str, object]]) -> bool:
        """Apply ops to a copy of the model; False if mdss must refuse the batch."""
        trial = self.model.tried(ops)
        if trial is None:
            return False
        self.model = trial
        return True

    @rule(member=S.members, score=S.scores, op=S.ops, data=st.none() | S.member_data)
    def add(self, member: str, score: float, op: str, data: str | bytes | None) -> None:
        was_new = member not in self.model.scores
        before = dict(self.model.scores)
        if self._expect([(op, member, score, data)]):
            assert self.set.add(member, score, op=op, data=data) is was_new
        else:
            with pytest.raises(mdss.InvalidScoreError):
                self.set.add(member, score, op=op, data=data)
            assert self.model.scores == before

    @rule(member=S.members, data=st.none() | S.member_data)
    def set_data(self, member: str, data: str | bytes | None) -> None:
        present = member in self.model.scores
        if present and data is None:
            self.model.data.pop(member, None)
        elif present:
            self.model.data[member] = data
        assert self.set.set_data(member, data) is present

    @rule(pairs=st.lists(st.tuples(S.members, S.small_scores), max_size=25), op=S.ops)
    def add_many(self, pairs: list[tuple[str, int]], op: str) -> None:
        new = len({m for m, _ in pairs} - set(self.model.scores))
        if self._expect([(op, m, s) for m, s in pairs]):
            assert self.set.add_many(pairs, op=op) == new
        else:  # an incr overflowed: the whole batch is refused
            with pytest.raises(mdss.InvalidScoreError):
                self.set.add_many(pairs, op=op)

    @rule(member=S.members, delta=S.scores)
    def incr(self, member: str, delta: float) -> None:
        if self._expect([("incr", member, delta)]):
            assert self.set.incr(member, delta) == self.model.scores[member]
        else:
            with pytest.raises(mdss.InvalidScoreError):
                self.set.incr(member, delta)

    @rule(member=S.members)
    def remove(self, member: str) -> None:
        assert self.set.remove(member) is self.model.remove(member)

    @rule(members=st.lists(S.members, max_size=25))
    def remove_many(self, members: list[str]) -> None:
        present = set(members) & set(self.model.scores)
        for m in present:
            self.model.remove(m)
        assert self.set.remove_many(members) == len(present)

    @rule(n=st.integers(0, 5), lowest=st.booleans())
    def pop(self, n: int, lowest: bool) -> None:
        """pop_min / pop_max: the n entries at that end, leaving ties in the set's order from that end."""
        entries = self.model.entries()
        from_end = lowest == (self.model.order == "desc")
        expected = entries[::-1][:n] if from_end else entries[:n]
        expected.sort(key=lambda e: e.score, reverse=not lowest)
        assert (self.set.pop_min(n) if lowest else self.set.pop_max(n)) == expected
        for e in expected:
            self.model.remove(e.member)

    @rule(lo=S.small_scores, hi=S.small_scores)
    def remove_range_by_score(self, lo: int, hi: int) -> None:
        gone = [m for m, s in self.model.scores.items() if lo <= s <= hi]
        assert self.set.remove_range_by_score(lo, hi) == len(gone)
        for m in gone:
            self.model.remove(m)

    @rule(first=st.integers(1, 12), span=st.integers(-1, 6))
    def remove_range_by_rank(self, first: int, span: int) -> None:
        gone = [e.member for e in self.model.entries()[first - 1 : first + span]]
        assert self.set.remove_range_by_rank(first, first + span) == len(gone)
        for m in gone:
            self.model.remove(m)

    @rule(pairs=st.lists(st.tuples(S.members, S.small_scores), min_size=1, max_size=8))
    def ended_process_writes(self, pairs: list[tuple[str, int]]) -> None:
        """Another writer whose grace period never ends in this test: what it replaces waits for gc()."""
        ended = mdss.SortedSet(
            self.store,
            "board",
            order=self.set.order,
            chunk_size=self.set.chunk_size,
            tiebreak=self.set.tiebreak,
            gc_grace=3600,
            log_limit=self.log_limit,
        )
        self._expect([("set", m, s) for m, s in pairs])
        ended.add_many(pairs)

    @rule()
    def merge(self) -> None:
        self.set.merge()
        assert self.set.info()["log_entries"] == 0

    @rule(sweep=st.booleans())
    def collect(self, sweep: bool) -> None:
        self.set.gc(wait=False, sweep=sweep)
        assert self.set.unreferenced() == []  # no commit in flight here: nothing is left but live nodes

    @rule(pairs=st.dictionaries(S.members, S.scores, max_size=20))
    def load(self, pairs: dict[str, float]) -> None:
        self.set = mdss.SortedSet.load(
            self.store,
            "board",
            pairs,
            replace=True,
            gc_grace=0,
            order=self.set.order,
            chunk_size=self.set.chunk_size,
            tiebreak=self.set.tiebreak,
            log_limit=self.log_limit,
        )
        self.model.loaded(pairs)

    # -- reads, compared with the model after every step -------------------

    @invariant()
    def sound(self) -> None:
        self.set._check()

    @invariant()
    def whole_set(self) -> None:
        expected = self.model.entries()
        assert len(self.set) == len(expected)
        found = list(self.set)
        assert found == expected
        assert plain(found)
        if self.shards == 1:
            assert self.set.range(0, len(expected), ties="dense") == self.model.dense()

    @rule(offset=st.integers(0, 25), limit=st.integers(0, 12), with_data=st.booleans())
    def range(self, offset: int, limit: int, with_data: bool) -> None:
        found = self.set.range(offset, limit, with_data=with_data)
        expected = self.model.with_data() if with_data else self.model.entries()
        assert found == expected[offset : offset + limit] and plain(found)
        assert all(type(e) is (mdss.DataEntry if with_data else mdss.Entry) for e in found)

    @rule(limit=st.integers(1, 5), with_data=st.booleans())
    def pages(self, limit: int, with_data: bool) -> None:
        """Every page by cursor, in the set's order (ties included: cursors resume after a key), with data or not."""
        found, cursor = self.set.page(limit, with_data=with_data)
        while cursor is not None:
            more, cursor = self.set.page(limit, cursor, with_data=with_data)
            found += more
        assert found == (self.model.with_data() if with_data else self.model.entries()) and plain(found)

    @rule(member=S.members)
    def member_reads(self, member: str) -> None:
        expected = self.model.entries()
        score = self.model.scores.get(member)
        assert self.set.score(member) == score
        assert self.set.data(member) == self.model.data.get(member)
        assert member in self.set if score is not None else member not in self.set
        mine = [e for e in expected if e.member == member]
        assert self.set.rank(member) == (mine[0].rank if mine else None)
        assert self.set.rank(member, with_score=True) == ((mine[0].rank, score) if mine else None)
        if mine:
            better = sum(1 for e in expected if self.model.better(e.score, score))
            assert self.set.rank(member, ties="competition") == better + 1
            assert self.set.rank(member, ties="competition", with_score=True) == (better + 1, score)
            i = mine[0].rank - 1
            found = self.set.around(member, 2, 3, with_data=True)  # one call: entries and data
            assert found == self.model.with_data()[max(i - 2, 0) : i + 4] and plain(found)
        else:
            assert self.set.around(member) == []

    @rule(n=st.integers(0, 6), seed=st.integers(0, 3))
    def random_members(self, n: int, seed: int) -> None:
        expected = self.model.entries()
        drawn = self.set.random_members(n, rng=random.Random(seed))
        assert len(drawn) == min(n, len(expected)) and len({e.member for e in drawn}) == len(drawn)
        assert all(e in expected for e in drawn) and plain(drawn)

    @rule(member=S.members, offset=st.integers(0, 25), limit=st.integers(0, 12), p=st.floats(0, 1))
    def dense_and_percentiles(self, member: str, offset: int, limit: int, p: float) -> None:
        expected = self.model.entries()
        score = self.model.scores.get(member)
        better = None if score is None else sum(1 for e in expected if self.model.better(e.score, score))
        assert self.set.percentile(member) == (None if score is None else better / len(expected))
        if self.shards > 1:  # a tie group spans shards: refused
            with pytest.raises(mdss.InvalidArgumentError, match="tie group spans shards"):
                self.set.rank(member, ties="dense")
            assert self.set.at_percentile(p) == (
                expected[min(int(p * len(expected)), len(expected) - 1)] if expected else None
            )
            return
        dense = self.model.dense()
        assert self.set.range(offset, limit, ties="dense") == dense[offset : offset + limit]
        mine = [e.rank for e in dense if e.member == member]
        assert self.set.rank(member, ties="dense") == (mine[0] if mine else None)
        assert self.set.at_percentile(p, ties="dense") == (
            dense[min(int(p * len(dense)), len(dense) - 1)] if dense else None
        )

    @rule(members=st.lists(S.members, max_size=6))
    def scores(self, members: list[str]) -> None:
        assert self.set.scores(members) == [self.model.scores.get(m) for m in members]

    @rule(score=S.scores)
    def rank_of_score(self, score: float) -> None:
        expected = 1 + sum(1 for s in self.model.scores.values() if self.model.better(s, score))
        assert self.set.rank_of_score(score) == expected

    @rule(a=S.scores, b=S.scores, offset=st.integers(0, 5), limit=st.none() | st.integers(0, 8))
    def by_score(self, a: float, b: float, offset: int, limit: int | None) -> None:
        best, worst = (a, b) if not self.model.better(b, a) else (b, a)
        inside = [
            e
            for e in self.model.entries()
            if not self.model.better(e.score, best) and not self.model.better(worst, e.score)
        ]
        assert self.set.count(best, worst) == len(inside)
        assert self.set.count(worst, best) == (len(inside) if best == worst else 0)
        end = None if limit is None else offset + limit
        with_data = best == worst or offset % 2 == 1  # half the calls read the data too (one call either way)
        found = self.set.range_by_score(best, worst, offset=offset, limit=limit, with_data=with_data)
        data = self.model.data.get
        wanted = [mdss.DataEntry(*e, data(e.member)) for e in inside[offset:end]] if with_data else inside[offset:end]
        assert found == wanted and plain(found)

    @precondition(lambda self: self.model.scores)
    @rule(data=st.data())
    def at(self, data: st.DataObject) -> None:
        expected = self.model.entries()
        rank = data.draw(st.integers(1, len(expected) + 2))
        assert self.set.at(rank) == (expected[rank - 1] if rank <= len(expected) else None)


@pytest.mark.parametrize("shards", [1, 2, 3, 5])
def test_sorted_set_matches_model(store_factory, shards: int, monkeypatch) -> None:
    """Unsharded and sharded sets (issue 13) against the same model, with manifest deltas allowed up to a whole
    manifest's weight (``DELTA_SHARE`` 1: manifests of 2 to 8 children, which a merge changes by a child or two,
    would otherwise rarely take one), so that chains grow and give way to whole manifests in every store's run.

    The memory store runs the profile's examples; a sharded set on any other
    store a quarter of them (each step there costs a round trip per shard
    touched: on dynalite, minutes per test). By default the networked stores
    (Redis, Redis Cluster, DynamoDB) run a quarter unsharded and a twelfth
    sharded (``depth.examples``; dynalite, milliseconds a call, an eighth and
    three examples): the model is searched on the in-process
    stores, and what differs on a server, its conditional writes and
    batches, shows in every example. ``MDSS_DEEP=1`` searches long."""
    monkeypatch.setattr(mdss._writer, "DELTA_SHARE", 1)
    SortedSetMachine.factory = staticmethod(store_factory)
    SortedSetMachine.shards = shards
    profile = settings()
    dynalite = store_factory.kind == "dynamodb"
    budget = examples(store_factory.kind, profile.max_examples, divisor=(8 if dynalite else 4) if shards == 1 else 12)
    if shards > 1 and store_factory.kind != "memory":
        budget = min(budget, max(profile.max_examples // 4, 5))
        if dynalite:
            budget = examples("dynamodb", budget, divisor=budget)
    run_state_machine_as_test(SortedSetMachine, settings=settings(profile, max_examples=budget))


def test_sorted_set_matches_model_with_every_entry_set_compressed(monkeypatch) -> None:
    """The model again with every entry set stored compressed (format 4), however small: the tiny chunks that make
    trees split and merge constantly are below the size at which mdss compresses (``mdss._codec.ZIP_FROM``). The
    codec is the same on every store: the memory store runs it."""
    monkeypatch.setattr(mdss._codec, "ZIP_FROM", 0)
    monkeypatch.setattr(mdss._codec, "ZIP_MARGIN", -(1 << 30))
    SortedSetMachine.factory = staticmethod(lambda: mdss.open_store("memory://"))
    SortedSetMachine.shards = 1
    profile = settings()
    run_state_machine_as_test(
        SortedSetMachine, settings=settings(profile, max_examples=max(profile.max_examples // 2, 10))
    )
