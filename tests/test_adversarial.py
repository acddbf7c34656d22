"""Adversarial review of the promise of issues 10 and 17: no acknowledged write is ever lost, no live node is
ever deleted, whatever the interleaving of writers, gc (with and without sweep), drop, load(replace=True),
readers, lost replies and skewed clocks; and every failure is a clear mdss exception.

Three layers:

1. ``Scripted``: a :class:`faulty.FaultyStore` that runs a scripted list of events at chosen store calls:
   fail before the call, fail after it (a lost reply), or *pause* (run another object's operation, then
   perform the call: a plain interleaving with no failure). Every event may run a ``meanwhile`` action.
2. An exhaustive enumerator: every operation x every event mode x every meanwhile action x every store
   call of the operation, judged against the states a linearisation allows.
3. A Hypothesis state machine: several ``SortedSet`` objects on one memory store (gc_grace 0, a grace on a
   fake monotonic clock, and one that never expires: "ended processes"), writers, gc with and without
   sweep, drop, load(replace=True), reads, skewed wall clocks, and events armed at random upcoming calls.

Then one deterministic test per hole the review found; each docstring tells the hole as it was found
(fixed since, unless the test is marked ``xfail(strict=True)``).
"""

from __future__ import annotations

import contextlib
import os
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from depth import sample
from faulty import FaultyStore
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    precondition,
    rule,
    run_state_machine_as_test,
)
from readable import readable_keys

import mdss
import mdss._garbage
import mdss._writer

#: These interleavings exercise the tree commit protocol (``log_limit=0``), whose expectations name tree
#: nodes and notes; ``test_log_faults.py`` interleaves appends and merges.
pytestmark = pytest.mark.usefixtures("tree_commits")

NAME = "b"

#: What the state machine did (operations, events fired, outcomes): printed by MDSS_ADVERSARIAL_STATS=1.
STATS: Counter[str] = Counter()


def machine_settings() -> settings:
    """The loaded profile's settings (modest, for CI), or a long search:
    MDSS_ADVERSARIAL_EXAMPLES=400 MDSS_ADVERSARIAL_STEPS=50 python -m pytest tests/test_adversarial.py"""
    examples = os.environ.get("MDSS_ADVERSARIAL_EXAMPLES")
    if not examples:
        return settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
    return settings(
        max_examples=int(examples),
        stateful_step_count=int(os.environ.get("MDSS_ADVERSARIAL_STEPS", "50")),
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
    )


# -- a store that runs a script of events ------------------------------------------------------------


class Scripted(FaultyStore):
    """Delegates to ``inner``; ``events[n] = (mode, action)`` fires at public store call number ``n``.

    ``mode``: ``"before"`` (run ``action``, then raise without performing the call), ``"after"`` (perform
    it, run ``action``, raise: a lost reply) or ``"pause"`` (run ``action``, then perform the call and
    return normally). ``on(name, nth, ...)`` schedules an event at the ``nth`` call of one primitive.
    """

    def __init__(self, inner: mdss.Store) -> None:
        super().__init__(inner)
        self.events: dict[int, tuple[str, Callable[[], Any] | None]] = {}
        self.by_name: dict[tuple[str, int], tuple[str, Callable[[], Any] | None]] = {}
        self.seen: dict[str, int] = {}
        self.fired: list[tuple[int, str, str]] = []

    def at(self, k: int, mode: str, action: Callable[[], Any] | None = None) -> None:
        """An event at the ``k``-th call from now (1: the next one)."""
        self.events[self.count + k] = (mode, action)

    def on(self, name: str, nth: int, mode: str, action: Callable[[], Any] | None = None) -> Scripted:
        self.by_name[(name, self.seen.get(name, 0) + nth)] = (mode, action)
        return self

    def clear(self) -> None:
        self.events.clear()
        self.by_name.clear()

    def _call(self, name: str, *args: Any) -> Any:
        self.count += 1
        self.seen[name] = self.seen.get(name, 0) + 1
        event = self.events.pop(self.count, None) or self.by_name.pop((name, self.seen[name]), None)
        if event is None:
            return getattr(self.inner, name)(*args)
        mode, action = event
        self.fired.append((self.count, name, mode))
        if mode == "after":
            getattr(self.inner, name)(*args)
        if action is not None:
            action()
        if mode == "pause":
            return getattr(self.inner, name)(*args)
        raise mdss.StoreUnavailableError(f"injected failure {mode} call {self.count} ({name})")


# -- what the set holds, and what may be judged of it --------------------------------------------------

State = tuple  # a set's content as a sorted tuple of (member, score)


def frozen(d: dict[str, Any]) -> State:
    return tuple(sorted(d.items()))


def content(store: mdss.Store) -> dict[str, Any]:
    """What a fresh reader sees (no cache)."""
    return {e.member: e.score for e in mdss.SortedSet(store, NAME, cache_bytes=0)}


def assert_sound(store: mdss.Store) -> dict[str, Any]:
    """check() finds nothing, every node the head names reads as present; the content."""
    reader = mdss.SortedSet(store, NAME, cache_bytes=0)
    problems = reader.check()
    assert problems == [], problems
    keys = reader.node_keys()
    missing = [k for k, v in zip(keys, store.get_many(keys)) if v is None]
    assert missing == [], f"the head names missing nodes {missing}"
    found = content(store)
    assert len(reader) == len(found)
    return found


class Transform:
    """An operation's effect on a set's content: ``fn(dict) -> (new dict, its result)``."""

    def __init__(self, label: str, fn: Callable[[dict[str, Any]], tuple[dict[str, Any], Any]]) -> None:
        self.label, self.fn = label, fn

    def __call__(self, state: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        return self.fn(dict(state))

    def __repr__(self) -> str:
        return self.label


def t_add(member: str, score: int) -> Transform:
    def fn(s):
        new = member not in s
        s[member] = score
        return s, new

    return Transform(f"add({member},{score})", fn)


def t_incr(member: str, delta: int) -> Transform:
    def fn(s):
        s[member] = s.get(member, 0) + delta
        return s, s[member]

    return Transform(f"incr({member},{delta})", fn)


def t_remove_many(members: list[str]) -> Transform:
    def fn(s):
        n = sum(1 for m in set(members) if s.pop(m, None) is not None)
        return s, n

    return Transform(f"remove_many({members})", fn)


def t_add_many(pairs: dict[str, int]) -> Transform:
    def fn(s):
        n = len(set(pairs) - set(s))
        s.update(pairs)
        return s, n

    return Transform(f"add_many({pairs})", fn)


def t_load(pairs: dict[str, int]) -> Transform:
    return Transform(f"load({pairs})", lambda s: (dict(pairs), None))


T_IDENTITY = Transform("gc", lambda s: (s, None))
T_DROP = Transform("drop", lambda s: ({}, None))


def allowed(start: dict[str, Any], mine: Transform, others: list[Transform], may_skip: bool) -> dict[State, list]:
    """Final states a linearisation allows, each with the results ``mine`` may have returned.

    ``mine`` is atomic at one point among the ``others`` (in their order); skipped if ``may_skip``
    (it raised an ambiguous error, or was refused as a whole).
    """
    out: dict[State, list] = {}
    positions = list(range(len(others) + 1))
    for position in positions + ([None] if may_skip else []):
        s, result = dict(start), None
        for i, other in enumerate(others):
            if i == position:
                s, result = mine(s)
            s, _ = other(s)
        if position == len(others):
            s, result = mine(s)
        out.setdefault(frozen(s), []).append(result if position is not None else "skipped")
    return out


# -- the operations under test, as (run on a set object, model transform) ----------------------------------


def initial() -> dict[str, int]:
    return {f"p{i}": i for i in range(10)}


def operations() -> dict[str, tuple[Callable[[mdss.SortedSet], Any], Transform, bool]]:
    """name -> (run it, its effect, whether its result is comparable)."""
    return {
        "add": (lambda s: s.add("n1", 45), t_add("n1", 45), True),
        "grow": (
            lambda s: s.add_many({f"g{i}": i for i in range(9)}),
            t_add_many({f"g{i}": i for i in range(9)}),
            True,
        ),
        "merge": (lambda s: s.remove_many(["p1", "p2", "p3", "p4"]), t_remove_many(["p1", "p2", "p3", "p4"]), True),
        "incr": (lambda s: s.incr("p5", 10), t_incr("p5", 10), True),
        "load": (
            lambda s: mdss.SortedSet.load(s.store, NAME, {"l1": 1, "l2": 2, "l3": 3}, replace=True, gc_grace=0),
            t_load({"l1": 1, "l2": 2, "l3": 3}),
            False,
        ),
        "gc": (lambda s: s.gc(wait=False), T_IDENTITY, False),
        "sweep": (lambda s: s.gc(wait=False, sweep=True), T_IDENTITY, False),
        "drop": (lambda s: s.drop(), T_DROP, False),
    }


def meanwhiles(store: mdss.Store) -> dict[str, tuple[Callable[[], Any], Transform]]:
    """Another process's operation, on its own object: name -> (run it, its effect)."""
    rival = mdss.SortedSet(store, NAME, gc_grace=0)
    ended = mdss.SortedSet(store, NAME, gc_grace=3600)
    return {
        "none": (lambda: None, T_IDENTITY),
        "writer": (lambda: rival.add("zz", 99), t_add("zz", 99)),
        "incr": (lambda: ended.incr("p5", 1000), t_incr("p5", 1000)),
        "gc": (lambda: rival.gc(wait=False), T_IDENTITY),
        "sweep": (lambda: rival.gc(wait=False, sweep=True), T_IDENTITY),
        "drop": (lambda: rival.drop(), T_DROP),
        "load": (
            lambda: mdss.SortedSet.load(store, NAME, {"q1": 7, "q2": 8}, replace=True, gc_grace=0),
            t_load({"q1": 7, "q2": 8}),
        ),
    }


def prepare(store: mdss.Store) -> None:
    """A set of chunk size 2 with notes inline and in pages: an ended process's commits (never deleted)."""
    ended = mdss.SortedSet(store, NAME, chunk_size=2, gc_grace=3600)
    ended.add_many(initial())
    for i in range(10):  # eleven noted commits: notes spill into a page
        ended.add(f"p{i}", 100 + i)
    ended.add_many(initial())
    head = mdss._snapshot.snapshot(ended.engine).head
    assert head.note_page is not None and head.notes, head


def count_calls(op: str) -> int:
    store = mdss.open_store("memory://")
    prepare(store)
    counting = Scripted(store)
    operations()[op][0](mdss.SortedSet(counting, NAME, gc_grace=0))
    return counting.count


#: (op, mode, meanwhile) cases that fail today, with the hole they fall into (see the tests below).
KNOWN: dict[tuple[str, str, str], str] = {}


def run_case(op: str, mode: str, meanwhile: str, k: int) -> None:
    """Op ``op`` with event ``mode`` at its ``k``-th store call running ``meanwhile``: judged."""
    store = mdss.open_store("memory://")
    prepare(store)
    start = content(store)
    run, mine, comparable = operations()[op]
    action, theirs = meanwhiles(store)[meanwhile]
    scripted = Scripted(store)
    board = mdss.SortedSet(scripted, NAME, gc_grace=0)
    done: list[bool] = []

    def other() -> None:
        action()
        done.append(True)

    scripted.at(k, mode, other)
    try:
        result, raised = run(board), None
    except mdss.StoreUnavailableError as exc:  # OutcomeUnknownError included: applied or not, never twice
        result, raised = None, exc
    except mdss.ConflictError as exc:
        assert op in ("load", "gc", "sweep", "drop"), f"a commit gave up: {exc}"
        result, raised = None, exc
    where = f"{op} with {mode} at call {k}, meanwhile {meanwhile}"
    found = assert_sound(store)
    may_skip = raised is not None
    states = allowed(start, mine, [theirs] if done else [], may_skip)
    assert frozen(found) in states, f"{where}: {found} is none of {list(states)} (raised {raised!r})"
    if raised is None and comparable:
        assert result in states[frozen(found)], f"{where}: returned {result!r}, expected {states[frozen(found)]}"
    if isinstance(raised, mdss.ConflictError):
        assert "skipped" in states[frozen(found)], f"{where}: ConflictError, but the write landed"
    # Whatever happened, what is left is collectable and the set stays writable.
    collector = mdss.SortedSet(store, NAME, gc_grace=0)
    collector.add("after", 1)
    collector.gc(wait=False, sweep=True)
    collector.remove("after")
    collector.gc(wait=False, sweep=True)
    assert collector.unreferenced() == [], where
    assert assert_sound(store) == found


CASES = [
    pytest.param(
        op,
        mode,
        meanwhile,
        marks=[pytest.mark.xfail(strict=True, reason=KNOWN[(op, mode, meanwhile)])]
        if (op, mode, meanwhile) in KNOWN
        else [],
    )
    for op in operations()
    for mode in ("before", "after", "pause")
    for meanwhile in ("none", "writer", "incr", "gc", "sweep", "drop", "load")
    if not (mode == "pause" and meanwhile == "none")
]


@pytest.mark.parametrize(("op", "mode", "meanwhile"), CASES)
def test_every_store_call_of_every_operation(op: str, mode: str, meanwhile: str) -> None:
    """An event at every store call of an operation, with another object's operation in between.

    By default at six of them (of 12-25): the first, the one past the last, and a stride from an offset that
    moves with the case (``depth.sample``), so the cases of one operation hit different calls between
    them; at every call under ``MDSS_DEEP=1``."""
    calls = range(1, count_calls(op) + 2)  # one past the last: the event fires in the collector's calls
    for k in sample(calls, f"{op}-{mode}-{meanwhile}", keep=6):
        run_case(op, mode, meanwhile, k)


# -- 3. the state machine --------------------------------------------------------------------------------

MEMBERS = ["ann", "bob", "cid", "dee", "eve", "fay", "gus", "hal"]
members = st.sampled_from(MEMBERS)
small = st.integers(-5, 5)


class FakeTime:
    """Stands in for the ``time`` module inside ``mdss._garbage``: a monotonic clock the machine ticks."""

    now = 1000.0

    @classmethod
    def monotonic(cls) -> float:
        return cls.now

    @staticmethod
    def sleep(seconds: float) -> None:  # gc(wait=True) is never called here
        raise AssertionError("gc slept")


class Process:
    """A SortedSet object of one process: its own scripted store (events armed on it) and grace."""

    def __init__(self, store: mdss.Store, grace: float, chunk: int, order: str, label: str) -> None:
        self.scripted = Scripted(store)
        self.grace, self.chunk, self.order, self.label = grace, chunk, order, label
        self.set = mdss.SortedSet(self.scripted, NAME, chunk_size=chunk, order=order, gc_grace=grace)
        self.kinds: dict[int, tuple[str, str]] = {}  # call number -> (mode, meanwhile kind) of armed events

        self.named: list[tuple[str, int, str, str]] = []  # events armed by primitive name

    def pending(self) -> list[tuple[str, str]]:
        by_number = [v for n, v in self.kinds.items() if n in self.scripted.events]
        by_name = [(m, k) for name, nth, m, k in self.named if (name, nth) in self.scripted.by_name]
        return by_number + by_name

    def __repr__(self) -> str:
        return self.label


class Interleavings(RuleBasedStateMachine):
    """Writers, gc, drop, loads and readers on one set, with failures and other processes' operations
    injected at random upcoming store calls; judged against a model of acknowledged operations."""

    def __init__(self) -> None:
        super().__init__()
        self._saved = (mdss._garbage.time, mdss._writer.clock)
        self.wall = 1.7e9
        mdss._garbage.time = FakeTime  # type: ignore[assignment]
        mdss._writer.clock = lambda: self.wall
        FakeTime.now = 1000.0

    def teardown(self) -> None:
        try:
            if getattr(self, "store", None) is not None and getattr(self, "ok", True):
                for p in self.procs:
                    p.scripted.clear()
                self.final_checks()
        finally:
            mdss._garbage.time, mdss._writer.clock = self._saved

    @initialize(chunk=st.integers(2, 4), order=st.sampled_from(["desc", "asc"]), seed=st.dictionaries(members, small))
    def open(self, chunk: int, order: str, seed: dict[str, int]) -> None:
        self.store = mdss.open_store("memory://")
        self.chunk, self.order = chunk, order
        self.procs = [
            Process(self.store, 0.0, chunk, order, "grace0"),
            Process(self.store, 5.0, chunk, order, "grace5"),
            Process(self.store, 3600.0, chunk, order, "ended"),
        ]
        self.rivals = [
            mdss.SortedSet(self.store, NAME, chunk_size=chunk, order=order, gc_grace=0),
            mdss.SortedSet(self.store, NAME, chunk_size=chunk, order=order, gc_grace=3600),
        ]
        if seed:
            self.procs[2].set.add_many(seed)
        self.state: dict[str, Any] = dict(seed)
        self.fired: list[Transform] = []
        self.failed_once = False  # an injected failure fired: orphans that only a sweep finds may exist

    # -- other processes' operations, run from inside an armed store call --------------------------------

    def meanwhile(self, kind: str, rival: int, member: str, value: int, pairs: dict[str, int]) -> Callable[[], None]:
        who = self.rivals[rival]

        def run() -> None:
            if kind == "add":
                who.add(member, value)
                self.fired.append(t_add(member, value))
            elif kind == "incr":
                who.incr(member, value)
                self.fired.append(t_incr(member, value))
            elif kind == "remove":
                who.remove(member)
                self.fired.append(t_remove_many([member]))
            elif kind == "gc":
                who.gc(wait=False)
            elif kind == "sweep":
                who.gc(wait=False, sweep=True)
            elif kind == "drop":
                who.drop()
                self.fired.append(T_DROP)
            elif kind == "load":
                mdss.SortedSet.load(
                    self.store, NAME, pairs, replace=True, chunk_size=self.chunk, order=self.order, gc_grace=0
                )
                self.fired.append(t_load(pairs))

        return run

    def armed(self) -> int:
        return sum(len(p.scripted.events) + len(p.scripted.by_name) for p in self.procs)

    @precondition(lambda self: self.armed() < 3)
    @rule(
        proc=st.integers(0, 2),
        k=st.integers(1, 6) | st.integers(7, 20),
        mode=st.sampled_from(["before", "after", "pause"]),
        kind=st.sampled_from(["none", "add", "incr", "remove", "gc", "sweep", "drop", "load"]),
        rival=st.integers(0, 1),
        member=members,
        value=small,
        pairs=st.dictionaries(members, small, max_size=6),
    )
    def arm(self, proc, k, mode, kind, rival, member, value, pairs) -> None:
        """Arm an event at an upcoming store call of one process (it fires in a later step)."""
        p = self.procs[proc]
        action = None if kind == "none" else self.meanwhile(kind, rival, member, value, pairs)
        p.scripted.at(k, mode, action)
        p.kinds[p.scripted.count + k] = (mode, kind)

    @precondition(lambda self: self.armed() < 3)
    @rule(
        proc=st.integers(0, 2),
        call=st.sampled_from(["_cas", "_put_many", "_keys", "_delete_many", "_get", "_delete"]),
        nth=st.integers(1, 3),
        mode=st.sampled_from(["before", "after", "pause"]),
        kind=st.sampled_from(["none", "add", "incr", "gc", "sweep", "drop", "load"]),
        rival=st.integers(0, 1),
        member=members,
        value=small,
        pairs=st.dictionaries(members, small, max_size=6),
    )
    def arm_on(self, proc, call, nth, mode, kind, rival, member, value, pairs) -> None:
        """Arm an event at the nth upcoming call of one primitive (compare-and-set, put, listing, delete)."""
        p = self.procs[proc]
        action = None if kind == "none" else self.meanwhile(kind, rival, member, value, pairs)
        p.named.append((call, p.scripted.seen.get(call, 0) + nth, mode, kind))
        p.scripted.on(call, nth, mode, action)

    # -- running one operation of a process, and judging it --------------------------------------------------

    def perform(
        self,
        proc: int,
        label: str,
        call: Callable[[mdss.SortedSet], Any],
        mine: Transform,
        comparable: bool = True,
        read: bool = False,
        atomic: bool = True,
    ) -> None:
        p = self.procs[proc]
        self.ok, self.last_read_ok = False, False
        self.fired = []
        before = len(p.scripted.fired)
        start = dict(self.state)
        try:
            result, raised = call(p.set), None
        except mdss.StoreUnavailableError as exc:
            result, raised = None, exc
        except mdss.ConflictError as exc:
            result, raised = None, exc
        except mdss.MdssError as exc:
            raise AssertionError(f"{p}.{label} raised {exc!r} (events {p.scripted.fired[before:]})") from exc
        fired = p.scripted.fired[before:]
        STATS[f"op {label.partition('(')[0]}"] += 1
        STATS[f"outcome {type(raised).__name__ if raised else 'ok'}"] += 1
        STATS.update(f"event {mode} at {name}" for _, name, mode in fired)
        STATS.update(f"meanwhile {t.label.partition('(')[0]}" for t in self.fired)
        if any(mode != "pause" for _, _, mode in fired):
            self.failed_once = True
        where = f"{p}.{label} (events {fired}, meanwhile {self.fired}, raised {raised!r})"
        found = assert_sound(self.store)
        if read:
            prefixes = [frozen(start)]
            s = dict(start)
            for t in self.fired:
                s, _ = t(s)
                prefixes.append(frozen(s))
            assert frozen(found) == prefixes[-1], where
            self.prefixes, self.last_read_ok = [set(x) for x in prefixes], raised is None
            if raised is None and atomic:
                assert frozen(result) in prefixes, f"{where}: read {result}, none of {prefixes}"
        else:
            if isinstance(raised, mdss.ConflictError):
                assert label.startswith(("load", "gc", "drop")), f"{where}: a commit gave up"
            states = allowed(start, mine, list(self.fired), may_skip=raised is not None)
            if isinstance(raised, (mdss.ConflictError, mdss.HeadMissingError)):  # definite: nothing applied
                states = {k: v for k, v in states.items() if "skipped" in v}
            assert frozen(found) in states, f"{where}: found {found}, allowed {list(states)}"
            if raised is None and comparable:
                assert result in states[frozen(found)], f"{where}: returned {result!r}, allowed {states[frozen(found)]}"
            if isinstance(raised, (mdss.ConflictError, mdss.HeadMissingError)):
                assert "skipped" in states[frozen(found)], f"{where}: {type(raised).__name__}, yet it landed"
        self.state = found
        self.ok = True

    @rule(proc=st.integers(0, 2), member=members, score=small)
    def add(self, proc, member, score) -> None:
        self.perform(proc, f"add({member},{score})", lambda s: s.add(member, score), t_add(member, score))

    @rule(proc=st.integers(0, 2), member=members, delta=small)
    def incr(self, proc, member, delta) -> None:
        self.perform(proc, f"incr({member},{delta})", lambda s: s.incr(member, delta), t_incr(member, delta))

    @rule(proc=st.integers(0, 2), ms=st.lists(members, max_size=4))
    def remove_many(self, proc, ms) -> None:
        self.perform(proc, f"remove_many({ms})", lambda s: s.remove_many(ms), t_remove_many(ms))

    @rule(proc=st.integers(0, 2), pairs=st.dictionaries(members, small, max_size=6))
    def add_many(self, proc, pairs) -> None:
        self.perform(proc, f"add_many({pairs})", lambda s: s.add_many(pairs), t_add_many(pairs))

    @rule(proc=st.integers(0, 2), sweep=st.booleans(), min_age=st.sampled_from([0.0, 0.0, 1.0, 7200.0]))
    def gc(self, proc, sweep, min_age) -> None:
        self.perform(
            proc,
            f"gc(sweep={sweep}, min_age={min_age})",
            lambda s: s.gc(wait=False, sweep=sweep, min_age=min_age),
            T_IDENTITY,
            comparable=False,
        )
        if not self.failed_once and not self.fired and not sweep:
            # Without lost replies every replaced node is noted: gc alone, with no listing, leaves nothing.
            collector = mdss.SortedSet(self.store, NAME, gc_grace=0)
            assert collector.unreferenced() == [] or self.procs[proc].scripted.fired, "gc left noted garbage"

    @rule(proc=st.integers(0, 2), rare=st.integers(0, 2))
    def drop(self, proc, rare) -> None:
        if rare == 0:
            self.perform(proc, "drop()", lambda s: s.drop(), T_DROP, comparable=False)

    @rule(proc=st.integers(0, 2), pairs=st.dictionaries(members, small, max_size=8))
    def load(self, proc, pairs) -> None:
        p = self.procs[proc]

        def run(s: mdss.SortedSet) -> None:
            mdss.SortedSet.load(
                s.store, NAME, pairs, replace=True, chunk_size=self.chunk, order=self.order, gc_grace=p.grace
            )

        self.perform(proc, f"load({pairs})", run, t_load(pairs), comparable=False)

    @rule(proc=st.integers(0, 2))
    def read(self, proc) -> None:
        """One read call: one committed state."""
        self.perform(proc, "read", lambda s: {e.member: e.score for e in s.range(0, 100)}, T_IDENTITY, read=True)

    @rule(proc=st.integers(0, 2))
    def iterate(self, proc) -> None:
        """Iteration pages one entry set at a time; once its snapshot is collected it goes on from the newest
        state after the last entry returned (page's docstring): a member unchanged throughout is never
        skipped nor repeated. (A member changed meanwhile may come twice, with both scores, when a writer's
        gc_grace is 0: documented, though "from one snapshot" in __iter__'s docstring promises more.)"""
        seen: list[tuple[str, Any]] = []

        def run(s: mdss.SortedSet) -> dict[str, Any]:
            seen.extend((e.member, e.score) for e in s)
            return dict(seen)

        start = frozen(self.state)
        self.perform(proc, "iterate", run, T_IDENTITY, read=True, atomic=False)
        if self.last_read_ok:
            unchanged = set(start).intersection(*self.prefixes)
            assert unchanged <= set(seen), f"iteration skipped {sorted(unchanged - set(seen))}"
            repeated = [m for m, n in Counter(m for m, _ in seen).items() if n > 1]
            assert not [m for m, score in unchanged if m in repeated], f"iteration repeated a member: {seen}"

    @rule(seconds=st.sampled_from([1.0, 5.0, 100.0]))
    def tick(self, seconds) -> None:
        """Time passes on the monotonic clock: grace periods run out."""
        FakeTime.now += seconds

    @rule(skew=st.sampled_from([-7200.0, -1.0, 0.5, 3600.0]))
    def skew_wall_clock(self, skew) -> None:
        """The wall clock that stamps node ids jumps (ids are for people; nothing may depend on it)."""
        self.wall += skew

    # -- at the end: everything left over is collectable --------------------------------------------------

    def final_checks(self) -> None:
        found = assert_sound(self.store)
        assert found == self.state
        collector = mdss.SortedSet(self.store, NAME, gc_grace=0)
        if not self.failed_once:
            collector.gc(wait=False)
            assert collector.unreferenced() == [], "without failures, gc() alone collects everything"
        collector.add("zz-final", 1)
        collector.gc(wait=False, sweep=True)
        collector.remove("zz-final")
        collector.gc(wait=False, sweep=True)
        assert collector.unreferenced() == []
        assert readable_keys(self.store, collector.keys.notes) == []
        assert assert_sound(self.store) == found


def test_interleavings() -> None:
    STATS.clear()
    run_state_machine_as_test(Interleavings, settings=machine_settings())
    if os.environ.get("MDSS_ADVERSARIAL_STATS"):
        print("\n".join(f"{n:8d} {what}" for what, n in sorted(STATS.items())))


# -- 4. the holes, one deterministic test each (fixed unless marked xfail) -------------------------------------


def seeded(store: mdss.Store, n: int = 12, chunk: int = 2) -> mdss.SortedSet:
    board = mdss.SortedSet(store, NAME, chunk_size=chunk, gc_grace=0)
    board.add_many({f"m{i}": i for i in range(n)})
    return board


def test_drop_beside_a_commit_on_its_emptied_head_loses_it() -> None:
    """drop() moves the head to an empty state in a new epoch, lists the set's nodes, deletes them, and keeps
    the head if a writer started the set afresh meanwhile. A commit that reads the emptied head and lands
    before the listing has its nodes listed and deleted: it was acknowledged, and the head names missing
    nodes (_garbage.drop, lines 467-470: nothing spares nodes of the new epoch or the nodes the head names)."""
    store = mdss.open_store("memory://")
    seeded(store)
    writer = mdss.SortedSet(store, NAME, gc_grace=0)
    acked = []
    dropper = mdss.SortedSet(Scripted(store).on("_keys", 1, "pause", lambda: acked.append(writer.add("late", 7))), NAME)
    dropper.drop()
    assert acked == [True]  # acknowledged, on the emptied head
    assert assert_sound(store) == {"late": 7}


def test_sqlite_stale_commit_beside_a_drop_and_a_new_set_loses_nothing(tmp_path) -> None:
    """A commit reads the head at version v; while its compare-and-set is in flight the set is dropped and
    started again, and the new set's head is rewritten many times. SQLite versions were once per-row counters
    that restarted at 1 after drop(), so the new head reached v again (ABA) and the stale commit published a
    head of the dropped set naming deleted nodes: every commit of the new set was lost. Versions are now
    random 63-bit numbers (stores/sqlite.py), so v never comes back and the stale commit must rebase."""
    store = mdss.open_store(f"sqlite:///{tmp_path}/aba.db")
    board = seeded(store, chunk=2)
    for _ in range(3):
        board.incr("m0", 1)
    other = mdss.SortedSet(store, NAME, gc_grace=0)
    acked: dict[str, int] = {}

    def drop_and_start_again() -> None:
        other.drop()
        for n in range(40):
            other.add(f"new{n}", n)
            acked[f"new{n}"] = n

    stale = mdss.SortedSet(Scripted(store).on("_cas", 1, "pause", drop_and_start_again), NAME, gc_grace=0)
    stale.incr("m1", 100)
    found = assert_sound(store)
    assert found["m1"] == 100  # the stale incr rebased onto the new set, where m1 did not exist
    assert all(found.get(m) == s for m, s in acked.items())  # every acknowledged write of the new set


def test_first_writes_racing_on_a_new_set_raise_head_missing() -> None:
    """Two processes write the first entries of a new set. The first finds no head; before it lists the
    set's nodes (has_nodes) the other creates the head and commits. The listing then finds nodes, and
    _snapshot.snapshot raises HeadMissingError, "the head was lost", without re-reading the
    head, which exists: a healthy set is reported damaged and the write fails. The same happens to the first
    write after a drop()."""
    store = mdss.open_store("memory://")
    rival = mdss.SortedSet(store, NAME, chunk_size=4)
    first = mdss.SortedSet(Scripted(store).on("_keys", 1, "pause", lambda: rival.add("bob", 1)), NAME, chunk_size=4)
    assert first.add("ann", 2) is True
    assert assert_sound(store) == {"ann": 2, "bob": 1}


def test_drop_beside_a_writer_whose_cleanup_fails_leaves_a_sound_set() -> None:
    """A commit reads the head, drop() runs to its end (head deleted), the commit writes its nodes and loses
    its compare-and-set; deleting its nodes fails (a request that never reached the store). Its rebase then
    found nodes and no head and raised HeadMissingError, and so did every later write, gc() and check(): a
    legal sequence (drop beside a writer, one failed request) left a set that check() called damaged. Now the
    writer deletes the nodes of its lost commit again before it judges the set headless (mdss._snapshot.headless),
    and starts the set afresh."""
    store = mdss.open_store("memory://")
    seeded(store)
    other = mdss.SortedSet(store, NAME)
    scripted = Scripted(store).on("_put_many", 1, "pause", other.drop).on("_delete_many", 1, "before")
    writer = mdss.SortedSet(scripted, NAME, gc_grace=0)
    with contextlib.suppress(mdss.StoreUnavailableError):
        writer.add("x", 1)
    assert mdss.SortedSet(store, NAME).check() == []
    assert mdss.SortedSet(store, NAME).add("y", 2) is True


def test_a_commit_that_landed_before_a_drop_is_applied_again_after_it() -> None:
    """incr's compare-and-set lands, its reply is lost; a reader sees the increment; drop() removes the set.
    _cas_head (line 193) reads no head and decides LOST (an absent head proves nothing about a commit built on
    a present one), so the commit rebases onto a fresh set and the increment is applied a second time,
    reported as one. The honest answer is OutcomeUnknownError: applied (and then dropped) or not."""
    store = mdss.open_store("memory://")
    seeded(store)
    seen = []
    dropper = mdss.SortedSet(store, NAME)

    def observe_then_drop() -> None:
        seen.append(mdss.SortedSet(store, NAME, cache_bytes=0).score("x"))
        dropper.drop()

    writer = mdss.SortedSet(Scripted(store).on("_cas", 1, "after", observe_then_drop), NAME, gc_grace=0)
    try:
        writer.incr("x", 5)
        reapplied = True
    except mdss.OutcomeUnknownError:
        reapplied = False
    assert seen == [5]  # it had landed: the drop removed it
    assert not reapplied and content(store) == {}


def test_a_commit_after_drop_and_restart_is_judged_by_generations_of_another_set() -> None:
    """Head.fate compares generations, and a set started again after drop() counts them from 1. A commit
    built on generation 13 whose compare-and-set never ran sees generation 2 and calls it PENDING
    (_head.py line 102), resends against a version that is gone, conflicts, reads generation 2 again...
    for STORE_CALLS' 5 s, then says OutcomeUnknownError. Heads now carry an incarnation: the commit sees at once
    that its set was dropped, deletes its nodes and says OutcomeUnknownError (it cannot tell this case from a
    commit that landed just before the drop)."""
    import time

    store = mdss.open_store("memory://")
    board = seeded(store, chunk=4)
    for i in range(10):
        board.add(f"m{i}", i + 100)
    restarter = mdss.SortedSet(store, NAME)

    def drop_and_restart() -> None:
        restarter.drop()
        restarter.add("new", 1)

    writer = mdss.SortedSet(Scripted(store).on("_cas", 1, "before", drop_and_restart), NAME, gc_grace=0)
    started = time.monotonic()
    # Its request never ran, but to the writer that looks just like a reply lost after it landed (the test
    # above): whether it was applied before the drop cannot be told, and it is said at once.
    with pytest.raises(mdss.OutcomeUnknownError, match="dropped"):
        writer.incr("x", 1)
    assert time.monotonic() - started < 1
    assert content(store) == {"new": 1}


def test_a_landed_commit_is_reported_failed_when_its_deferred_deletes_fail() -> None:
    """publish() proves the head landed, then Garbage.defer deletes what is due (_commit line 147,
    _garbage line 316) and lets a StoreUnavailableError through: the caller of incr is told the store
    is unavailable (may or may not be applied) about a commit known to have landed, and a caller that
    retries applies it twice. The garbage is noted: the delete could fail silently and be left to gc()."""
    store = mdss.open_store("memory://")
    seeded(store)
    writer = mdss.SortedSet(Scripted(store).on("_delete_many", 1, "before"), NAME, gc_grace=0)
    assert writer.incr("m3", 1) == 4


def test_load_replace_of_a_headless_set() -> None:
    """SortedSet.load's docstring: replace=True "also replaces a damaged set". A set whose head vanished is
    damaged (check() says so), but load only drops on a CorruptDataError from its first, non-creating
    snapshot; the creating one raises HeadMissingError (mdss._load.load)."""
    store = mdss.open_store("memory://")
    board = seeded(store)
    store.delete(board.keys.head)
    mdss.SortedSet.load(store, NAME, {"a": 1}, replace=True)
    assert assert_sound(store) == {"a": 1}


def test_sweep_beside_drop_blames_writers() -> None:
    """advance_epoch (_garbage lines 333-345) breaks out of its loop when the head is gone and raises
    ConflictError "writers kept moving the head" at once: a wrong diagnosis; the set was dropped, nothing is
    left to collect, and other interleavings of the same two calls return 0."""
    store = mdss.open_store("memory://")
    seeded(store)
    scripted = Scripted(store).on("_put_many", 1, "after")  # an orphan of the current epoch: the sweep advances
    with contextlib.suppress(mdss.StoreUnavailableError):
        mdss.SortedSet(scripted, NAME).add("o", 1)
    dropper = mdss.SortedSet(store, NAME)
    sweeper = mdss.SortedSet(Scripted(store).on("_get", 3, "pause", dropper.drop), NAME, gc_grace=0)
    assert sweeper.gc(wait=False, sweep=True) >= 0


def test_a_note_orphaned_in_the_current_epoch_is_never_swept() -> None:
    """load(replace=True) of an empty mapping writes no nodes, only its garbage note; the reply of that put is
    lost. The note is named by no head, so only a sweep can find it, but _swept (_garbage line 448) advances
    the epoch only for unnamed *nodes* of the current epoch, and deletes notes of earlier epochs only
    (line 455): sweep after sweep keeps it, and unreferenced() does not report it (found by the state
    machine: open, arm(after, 4th call, ended), add, load({}), teardown)."""
    store = mdss.open_store("memory://")
    mdss.SortedSet(store, NAME, chunk_size=2, gc_grace=0).add_many({"ann": 1, "bob": 2, "cid": 3})
    with pytest.raises(mdss.StoreUnavailableError):
        mdss.SortedSet.load(Scripted(store).on("_put_many", 1, "after"), NAME, {}, replace=True)
    collector = mdss.SortedSet(store, NAME, gc_grace=0)
    for i in range(3):  # commits land between sweeps: each sweep may advance the epoch
        collector.add("z", i)
        collector.gc(wait=False, sweep=True)
    assert readable_keys(store, collector.keys.notes) == []


# -- what held up, kept as regression tests ---------------------------------------------------------------------


def test_two_gcs_detaching_out_of_order_lose_no_note() -> None:
    """An older gc detaching after a newer one moves notes_done back: the walk must still stop safely, and
    nothing replaced may be left behind."""
    store = mdss.open_store("memory://")
    ended = mdss.SortedSet(store, NAME, chunk_size=2, gc_grace=3600)
    ended.add_many({f"m{i}": i for i in range(12)})
    for i in range(12):
        ended.add(f"m{i}", 100 + i)
    newer = mdss.SortedSet(store, NAME, gc_grace=0)

    def newer_gc_after_more_commits() -> None:
        for i in range(10):
            ended.add(f"m{i}", 200 + i)
        newer.gc(wait=False)

    older = mdss.SortedSet(Scripted(store).on("_cas", 1, "pause", newer_gc_after_more_commits), NAME, gc_grace=0)
    older.gc(wait=False)  # its detach runs last
    for i in range(10):
        ended.add(f"m{i}", 300 + i)
    collector = mdss.SortedSet(store, NAME, gc_grace=0)
    collector.gc(wait=False)
    assert collector.unreferenced() == []
    assert readable_keys(store, collector.keys.notes) == []
    assert assert_sound(store) == {**{f"m{i}": 300 + i for i in range(10)}, "m10": 110, "m11": 111}


@pytest.mark.parametrize("skew", [-7200.0, 0.0, 3600.0])
def test_sweep_between_a_commits_put_and_its_compare_and_set(skew: float, monkeypatch) -> None:
    """A sweep that lists nothing of a commit in flight, then sees its nodes and notes in its later listing
    of notes, whatever the writer's clock: the commit either lands whole or rebases."""
    store = mdss.open_store("memory://")
    seeded(store)
    sweeper = mdss.SortedSet(store, NAME, gc_grace=0)
    real = mdss._writer.clock
    monkeypatch.setattr(mdss._writer, "clock", lambda: real() + skew)
    for call in ("_put_many", "_cas"):
        writer = mdss.SortedSet(
            Scripted(store).on(call, 1, "pause", lambda: sweeper.gc(wait=False, sweep=True, min_age=0)),
            NAME,
            gc_grace=3600,
        )
        writer.add(f"w{call}", 1)
        writer.incr("m2", 10)
    found = assert_sound(store)
    assert found["w_put_many"] == 1 and found["w_cas"] == 1 and found["m2"] == 22


def test_lost_replies_at_every_call_of_a_gc_beside_commits_spilling_notes() -> None:
    """gc (notes only) with a failure before or after each of its store calls while another process's
    commits move the head's notes into pages: no live node deleted, nothing noted left for ever."""
    for after in (False, True):
        for k in range(1, 12):
            store = mdss.open_store("memory://")
            ended = mdss.SortedSet(store, NAME, chunk_size=2, gc_grace=3600)
            ended.add_many({f"m{i}": i for i in range(12)})
            for i in range(7):
                ended.add(f"m{i}", 50 + i)
            expected = {**{f"m{i}": 150 + i for i in range(12)}}

            def spill(ended: mdss.SortedSet = ended) -> None:
                for i in range(12):
                    ended.add(f"m{i}", 150 + i)

            scripted = Scripted(store)
            collector = mdss.SortedSet(scripted, NAME, gc_grace=0)
            scripted.at(k, "after" if after else "before", spill)
            with contextlib.suppress(mdss.StoreUnavailableError):
                collector.gc(wait=False)
            if not scripted.fired:
                spill()
            assert assert_sound(store) == expected
            clean = mdss.SortedSet(store, NAME, gc_grace=0)
            clean.gc(wait=False)
            clean.gc(wait=False)
            assert clean.unreferenced() == [], (after, k)
