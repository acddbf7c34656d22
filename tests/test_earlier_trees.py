"""Writers of one set in several processes, each merging in turn: a member's score that one process reads
from the trees it held before another's merge (``mdss._overlay.Overlays.earlier``: its cached entry sets, plus the log
entries folded since) is the score in the new trees. Loads and drops start another lineage in between, and
tiny chunks and log limits make every few writes a merge."""

from __future__ import annotations

import strategies as S
from depth import examples
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule, run_state_machine_as_test

import mdss
from mdss import _log, _ranking

WRITERS = 3


class Writers(RuleBasedStateMachine):
    factory = None  # set per test: makes a fresh store

    @initialize(chunk=S.chunk_sizes, log_limit=st.sampled_from([1, 2, 7]))
    def open(self, chunk: int, log_limit: int) -> None:
        self.store = self.factory()
        self.log_limit = log_limit
        self.boards = [self._open(chunk) for _ in range(WRITERS)]
        self.model: dict[str, int] = {}

    def _open(self, chunk: int) -> mdss.SortedSet:
        """A writer with a cache of its own, as another process has."""
        return mdss.SortedSet(self.store, "board", chunk_size=chunk, gc_grace=3600, log_limit=self.log_limit)

    @rule(w=st.integers(0, WRITERS - 1), member=S.members, score=S.small_scores)
    def add(self, w: int, member: str, score: int) -> None:
        self.boards[w].add(member, score)
        self.model[member] = score

    @rule(w=st.integers(0, WRITERS - 1), member=S.members, delta=S.small_scores)
    def incr(self, w: int, member: str, delta: int) -> None:
        self.model[member] = self.model.get(member, 0) + delta
        assert self.boards[w].incr(member, delta) == self.model[member]

    @rule(w=st.integers(0, WRITERS - 1), member=S.members)
    def remove(self, w: int, member: str) -> None:
        assert self.boards[w].remove(member) is (self.model.pop(member, None) is not None)

    @rule(w=st.integers(0, WRITERS - 1), pairs=st.lists(st.tuples(S.members, S.small_scores), max_size=12))
    def add_many(self, w: int, pairs: list[tuple[str, int]]) -> None:
        self.boards[w].add_many(pairs)
        self.model.update(pairs)

    @rule(w=st.integers(0, WRITERS - 1))
    def merge(self, w: int) -> None:
        self.boards[w].merge()

    @rule(w=st.integers(0, WRITERS - 1), pairs=st.dictionaries(S.members, S.small_scores, max_size=12))
    def load(self, w: int, pairs: dict[str, int]) -> None:
        """Another lineage: trees that no earlier overlay's entries lead to."""
        mdss.SortedSet.load(self.store, "board", pairs, replace=True, chunk_size=self.boards[w].chunk_size)
        self.model = dict(pairs)

    @rule(w=st.integers(0, WRITERS - 1))
    def drop(self, w: int) -> None:
        self.boards[w].drop()
        self.model = {}

    @rule(w=st.integers(0, WRITERS - 1))
    def forget_caches(self, w: int) -> None:
        """A process whose cache let the old entry sets go: it reads the new member index."""
        self.boards[w].engines[0].cache.__init__(self.boards[w].engines[0].cache.max_bytes)

    @invariant()
    def every_writer_reads_the_model(self) -> None:
        members = list(S.MEMBERS)
        for board in self.boards:
            assert board.scores(members) == [self.model.get(m) for m in members]


def test_writers_read_scores_across_each_others_merges(store_factory, monkeypatch) -> None:
    """Against the model, on every store; and the earlier trees are used (it is not a test of nothing)."""
    used = []
    earlier = _ranking.Index._earlier

    def counted(self, member):
        found = earlier(self, member)
        used.append(found is not _log._MISSING)
        return found

    monkeypatch.setattr(_ranking.Index, "_earlier", counted)
    Writers.factory = staticmethod(store_factory)
    profile = settings()  # by default a quarter of the examples on networked stores, a twelfth on DynamoDB
    budget = examples(store_factory.kind, profile.max_examples, divisor=12 if store_factory.kind == "dynamodb" else 4)
    run_state_machine_as_test(Writers, settings=settings(profile, max_examples=budget))
    if store_factory.kind == "memory":  # the full profile runs there: the shortcut is taken, and often
        assert sum(used) > 50, used.count(True)
