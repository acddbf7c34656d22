"""Reads with bounded staleness (``max_staleness``): a read within the bound answers from the snapshot read last, with
no store call, exactly as that snapshot was; past the bound it reads the head; a writer always reads its own writes.

The clock of ages (``mdss._recent.clock``) is replaced by a counter that the tests move, so that "no older than the
bound" is checked exactly: every answer must equal the model at some state that was current no earlier than
``now - bound``, and no earlier than the reader's own last write.
"""

from __future__ import annotations

import threading

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule, run_state_machine_as_test

import mdss
from mdss import _recent

MEMBERS = st.sampled_from([f"m{i}" for i in range(12)])
SCORES = st.integers(-3, 3)
BOUND = 1.0


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(_recent, "clock", fake)
    return fake


def _ordered(state: dict[str, int]) -> list[tuple[str, int]]:
    return sorted(state.items(), key=lambda kv: (-kv[1], kv[0]))


class StaleReads(RuleBasedStateMachine):
    """A reader with ``max_staleness`` and a writer, two objects over one set; the reader writes too."""

    def __init__(self, store: mdss.Store, clock: Clock, shards: int) -> None:
        super().__init__()
        self.clock = clock
        options = {"chunk_size": 2, "log_limit": 3, "gc_grace": 0}
        if shards > 1:
            options["shards"] = shards
        self.reader = mdss.SortedSet(store, "s", max_staleness=BOUND, **options)
        self.writer = mdss.SortedSet(store, "s", **options)
        #: Every state the set went through, and the clock when it became current.
        self.history: list[tuple[dict[str, int], float]] = [({}, clock.now)]
        self.own = 0  # the state the reader's last write made: its reads may not be older

    @initialize()
    def start(self) -> None:
        self.reader.add("m0", 0)
        self._wrote(self.reader, {"m0": 0})

    def _wrote(self, who: mdss.SortedSet, state: dict[str, int]) -> None:
        self.history.append((state, self.clock.now))
        if who is self.reader:
            self.own = len(self.history) - 1

    def _allowed(self, bound: float | None) -> list[dict[str, int]]:
        """The states a read with ``bound`` may answer from."""
        bound = BOUND if bound is None else bound
        oldest = self.clock.now - bound
        last = len(self.history) - 1
        return [
            state
            for k, (state, _) in enumerate(self.history)
            if k >= self.own and (k == last or self.history[k + 1][1] >= oldest)
        ]

    @rule(seconds=st.sampled_from([0.0, 0.25, 0.6, 1.5]))
    def tick(self, seconds: float) -> None:
        self.clock.now += seconds

    @rule(member=MEMBERS, score=SCORES, mine=st.booleans())
    def add(self, member: str, score: int, mine: bool) -> None:
        who = self.reader if mine else self.writer
        who.add(member, score)
        self._wrote(who, {**self.history[-1][0], member: score})

    @rule(member=MEMBERS, mine=st.booleans())
    def remove(self, member: str, mine: bool) -> None:
        who = self.reader if mine else self.writer
        who.remove(member)
        state = dict(self.history[-1][0])
        state.pop(member, None)
        self._wrote(who, state)

    @rule()
    def collect(self) -> None:
        """The writer merges and deletes what it replaced at once: a kept snapshot may lose its nodes."""
        self.writer.merge()
        self.writer.gc(wait=False)

    @rule(member=MEMBERS, bound=st.sampled_from([None, 0.0, 0.5, 2.0]))
    def read(self, member: str, bound: float | None) -> None:
        allowed = self._allowed(bound)
        entries = [(e.member, e.score) for e in self.reader.range(0, 100, max_staleness=bound)]
        assert entries in [_ordered(s) for s in allowed]
        assert self.reader.read_age <= (BOUND if bound is None else bound)
        rank = self.reader.rank(member, max_staleness=bound)
        ranks = []
        for state in allowed:
            order = [m for m, _ in _ordered(state)]
            ranks.append(order.index(member) + 1 if member in state else None)
        assert rank in ranks
        assert self.reader.score(member, max_staleness=bound) in [s.get(member) for s in allowed]

    @invariant()
    def own_writes(self) -> None:
        """Whatever the bound, the reader's own last write is never invisible to it."""
        assert len(self.reader) in [len(s) for s in self._allowed(None)]


@pytest.mark.parametrize("shards", [1, 3])
def test_stale_reads_equal_a_state_within_the_bound(store_factory, clock, shards) -> None:
    def machine() -> StaleReads:
        return StaleReads(store_factory(), clock, shards)

    examples = 20 if store_factory.kind in ("memory", "memory-cas") else 4
    run_state_machine_as_test(machine, settings=settings(max_examples=examples, stateful_step_count=30))


def test_reads_within_the_bound_make_no_store_call(clock) -> None:
    store = mdss.open_store("memory://")
    pairs = {f"m{i:04d}": i % 97 for i in range(3000)}
    for sset in (
        mdss.SortedSet.load(store, "one", pairs, chunk_size=16),
        mdss.SortedSet.load(store, "many", pairs, chunk_size=16, shards=4),
    ):
        stale = mdss.SortedSet(store, sset.name, max_staleness=1)
        expected = [stale.rank(m) for m in pairs]  # the first read of the head, and every node, now cached
        page = stale.range(100, 10)
        calls = store.stats.calls
        clock.now += 0.9
        assert [stale.rank(m) for m in pairs] == expected
        assert [stale.score(m) for m in pairs] == list(pairs.values())
        assert stale.range(100, 10) == page
        assert store.stats.calls == calls
        assert page == sset.range(100, 10)
        assert stale.read_age == pytest.approx(0.9)
        sset.add("m0000", 1000)  # another object's write: invisible until the bound passes
        assert stale.rank("m0000") == expected[0]
        clock.now += 0.2
        assert stale.rank("m0000") == 1 and stale.read_age == 0.0


def test_a_writer_reads_its_own_writes_at_once(clock) -> None:
    store = mdss.open_store("memory://")
    sset = mdss.SortedSet(store, "s", max_staleness=3600, max_wait=0.002)
    sset.add("a", 1)
    assert sset.rank("a") == 1

    def write_then_read(i: int) -> None:
        sset.add(f"t{i}", 10 + i)
        assert sset.score(f"t{i}") == 10 + i  # whatever other threads kept meanwhile

    threads = [threading.Thread(target=write_then_read, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(sset) == 9


def test_a_reader_that_began_before_a_write_keeps_nothing(clock) -> None:
    recent = _recent.Recent(5.0)
    began = recent.begin(None)
    recent.forget()  # a write landed while the read was in flight
    recent.keep("old head", began, b"old")
    assert recent.within(None) is None
    recent.keep("newer head", recent.begin(None), b"newer")
    assert recent.within(None) == "newer head"
    assert recent.within(0) is None
    clock.now += 6
    assert recent.within(None) is None


def test_of_two_overlapping_reads_of_different_heads_neither_is_kept(clock) -> None:
    """Two threads' fresh reads of one object: the one that began later may have reached the store first, so its head
    may be the older. It was kept over the other's, and that thread's next read within the bound went back past the
    head it had read (a helper's probe with held store calls). Reads are ordered only when one ended before the other
    began; overlapping ones that read different heads keep neither, and ones that read the same head keep it."""
    recent = _recent.Recent(5.0)
    first = recent.begin(None)
    clock.now += 1
    second = recent.begin(None)
    recent.keep("older head", second, b"older")  # began later, answered first
    clock.now += 1
    recent.keep("newer head", first, b"newer")
    assert recent.within(None) is None  # neither: the next read within the bound reads the head
    recent.keep("same head", recent.begin(None), b"same")
    overlapping = recent.begin(None)
    clock.now += 1
    recent.keep("same head", recent.begin(None), b"same")
    recent.keep("same head", overlapping, b"same")
    assert recent.within(None) == "same head"
    clock.now += 1
    later = recent.begin(None)  # began after the kept read ended: its head is at least as new
    recent.keep("later head", later, b"later")
    assert recent.within(None) == "later head"


def test_a_plain_read_stops_a_bounded_read_in_flight_keeping_its_head(clock) -> None:
    """A plain read of an object with nothing kept moved nothing on, so a bounded read that began before it (and read
    an older head) kept that head, and the plain reader's next read within the bound went back (a helper's probe)."""
    recent = _recent.Recent(0.0)
    bounded = recent.begin(10.0)
    assert recent.begin(None) is None  # a plain read begins: nothing is kept, and none may be by reads begun before
    recent.keep("older head", bounded, b"older")
    assert recent.within(10.0) is None


def test_boards_answer_views_within_their_bound(clock) -> None:
    store = mdss.open_store("memory://")
    board = mdss.Leaderboard(store, "g", columns={"xp": "desc"}, accumulate=["xp"], max_staleness=1)
    other = mdss.Leaderboard(store, "g", columns={"xp": "desc"}, accumulate=["xp"])
    for i in range(50):
        board.post(f"p{i}", {"xp": i})
    assert board.positions("p0") == {"xp": 50}
    calls = store.stats.calls
    assert [board.positions(f"p{i}")["xp"] for i in range(50)] == list(range(50, 0, -1))
    assert [r.owner for r in board.top("xp", 3)] == ["p49", "p48", "p47"]
    assert store.stats.calls == calls
    other.post("p0", {"xp": 100})  # another process's post: seen once the bound passes, or on asking
    clock.now += 0.5
    assert board.positions("p0") == {"xp": 50} and board.read_age == 0.5
    assert board.positions("p0", max_staleness=0) == {"xp": 1}
    board.post("p1", {"xp": 1000})  # its own post, accumulated on the fresh row whatever the bound
    assert board.row("p1").values == {"xp": 1001}
    assert board.positions("p1") == {"xp": 1}


@pytest.mark.parametrize("bad", [-1, float("nan"), float("inf"), "1", True])
def test_bad_bounds_are_refused(bad) -> None:
    store = mdss.open_store("memory://")
    with pytest.raises(mdss.InvalidArgumentError, match="max_staleness"):
        mdss.SortedSet(store, "s", max_staleness=bad)
    with pytest.raises(mdss.InvalidArgumentError, match="max_staleness"):
        mdss.SortedSet(store, "s").rank("a", max_staleness=bad)
    with pytest.raises(mdss.InvalidArgumentError, match="max_staleness"):
        mdss.Leaderboard(store, "g", columns={"xp": "desc"}, max_staleness=bad)
    with pytest.raises(mdss.InvalidArgumentError, match="max_staleness"):
        mdss.Leaderboard(store, "g", columns={"xp": "desc"}).count("xp", max_staleness=bad)


def test_reads_that_accept_no_staleness_keep_nothing(clock) -> None:
    """A set without a bound keeps no head for its plain reads (they pay nothing for the option); a read that names
    a bound reads the head once and keeps it for the next such reads."""
    store = mdss.open_store("memory://")
    sset = mdss.SortedSet.load(store, "s", {"a": 1, "b": 2})
    sset.rank("a")
    assert sset.engine.recent.within(5) is None
    calls = store.stats.calls
    assert sset.rank("a", max_staleness=5) == 2 and store.stats.calls == calls + 1
    assert sset.rank("b", max_staleness=5) == 1 and store.stats.calls == calls + 1


@pytest.mark.parametrize("shards", [1, 3])
def test_a_read_within_the_bound_never_goes_back_past_a_fresh_read(clock, shards) -> None:
    """A helper's probe: on an object without a bound of its own, a read with ``max_staleness`` answered from the head
    an earlier bounded read kept, older than a fresh read made since (rank 2, then 1 again)."""
    store = mdss.open_store("memory://")
    writer, reader = (mdss.SortedSet(store, "s", shards=shards) for _ in range(2))
    writer.add("a", 1)
    assert reader.rank("a", max_staleness=1000) == 1
    writer.add("b", 5)
    assert reader.rank("a") == 2
    assert reader.rank("a", max_staleness=1000) == 2


def test_a_fresh_read_of_one_shard_drops_what_the_sharded_set_kept(clock) -> None:
    """A review of the fix above: a sharded set's ``score`` reads one shard through the shard's own state, which kept
    nothing, so the sharded set's kept heads survived it (7 read fresh, then 1 within the bound)."""
    store = mdss.open_store("memory://")
    writer, reader = (mdss.SortedSet(store, "s", shards=3) for _ in range(2))
    bounded = mdss.SortedSet(store, "s", shards=3, max_staleness=1000)
    writer.add("a", 1)
    assert reader.score("a", max_staleness=1000) == 1 and bounded.score("a") == 1
    writer.add("a", 7)
    assert reader.score("a") == 7 and bounded.score("a", max_staleness=0) == 7
    assert reader.score("a", max_staleness=1000) == 7 and bounded.score("a") == 7
