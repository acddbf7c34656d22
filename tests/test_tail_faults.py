"""Store-applied appends (``mdss._tail``) under faults: lost replies with other writers, seals, merges and
gc in between; exact incr results; writers holding stale heads; extreme records; damaged tails. (The
store's side against the reference, and single faults: test_tail.py; seals: test_seals.py.)"""

from __future__ import annotations

import uuid
from collections import Counter

import pytest
import redis
import strategies as S
from depth import examples
from faulty import FaultyStore
from hypothesis import given, settings
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
from mdss import _log, _merge, _tail
from mdss.stores.memory import MemoryStore


class _Lossy(FaultyStore):
    """Loses the reply of the next head write (append or compare-and-set) when armed, after running
    ``meanwhile``; ``before`` loses the request instead (it never reaches the store)."""

    armed = False
    before = False

    def _arm(self, key: str) -> None:
        if self.armed and key.endswith(":h"):
            self.armed = False
            self.fail_at, self.after = self.count + 1, not self.before

    def _append(self, key, held, sha, seen, record, cap):
        self._arm(key)
        return self._call("_append", key, held, sha, seen, record, cap)

    def _swap(self, key, held, sha, seen, core, record, cap, nodes, lagging=False):
        self._arm(key)
        return self._call("_swap", key, held, sha, seen, core, record, cap, nodes, lagging)

    def _cas(self, key, value, version):
        self._arm(key)
        return self._call("_cas", key, value, version)


STEP = st.tuples(
    st.integers(0, 2),  # writer
    st.sampled_from(["a", "b", "c"]),  # member
    st.sampled_from(["none", "after", "before"]),  # lose the reply of its head write
    st.lists(
        st.tuples(st.integers(1, 2), st.sampled_from(["a", "b", "c", "d"]), st.sampled_from(["incr", "merge", "gc"])),
        max_size=6,
    ),
)


def _examples(store_factory, n: int) -> int:
    """By default a quarter of the examples on the networked stores and an eighth on the slow local DynamoDB
    engine, which compare-and-sets (no tails: that path runs in full on ``memory-cas``); all of them under
    ``MDSS_DEEP`` (``depth.examples``)."""
    return examples(store_factory.kind, n, divisor=8 if store_factory.kind == "dynamodb" else 4)


@pytest.mark.grid("inline", size=2)  # by default each store runs one of the two, in turn (conftest.py)
@pytest.mark.parametrize("inline", [60, 1024])
def test_lost_replies_among_other_writers_keep_incr_exact(store_factory, inline) -> None:
    """Lost replies (or requests) of head writes, with other writers' commits, merges and gc in between:
    every acknowledged incr applied once, with exact results; an unknown outcome applied at most once."""

    @settings(max_examples=_examples(store_factory, 60), deadline=None)
    @given(steps=st.lists(STEP, min_size=1, max_size=25), log_limit=st.sampled_from([3, 8, 10_000]))
    def check(steps, log_limit):
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(_log, "INLINE_BYTES", inline)
            mp.setattr(_tail, "TAIL_BYTES", 150)
            _lost_replies(store_factory(), steps, log_limit)

    check()


def _lost_replies(store, steps, log_limit) -> None:
    stores = [_Lossy(store) for _ in range(3)]
    boards = [mdss.SortedSet(s, "b", chunk_size=2, log_limit=log_limit) for s in stores]
    boards[0].add("z", 0)
    acked: dict[str, list[float]] = {m: [] for m in "abcd"}
    unknown: Counter[str] = Counter()

    def run(board, member, what="incr"):
        if what == "merge":
            _merge.merge(board.engine)
            return
        if what == "gc":
            board.gc(wait=False)
            return
        try:
            acked[member].append(board.incr(member, 1))
        except mdss.OutcomeUnknownError:
            unknown[member] += 1

    for writer, member, lose, meanwhile in steps:
        lossy = stores[writer]
        lossy.fail_at = None
        if lose != "none":
            lossy.armed, lossy.before = True, lose == "before"
            lossy.meanwhile = lambda mw=meanwhile, w=writer: [run(boards[(w + i) % 3], m, what) for i, m, what in mw]
        else:
            lossy.armed = False
        run(boards[writer], member)
        lossy.armed, lossy.fail_at = False, None
    fresh = mdss.SortedSet(store, "b")
    assert fresh.check() == []
    for member, got in acked.items():
        final = fresh.score(member) or 0
        assert len(set(got)) == len(got), (member, got)  # exact: no two incrs saw the same score
        assert sorted(got) == [g for g in sorted(got) if g <= final]
        assert len(got) <= final <= len(got) + unknown[member], (member, got, final, unknown)


def test_a_damaged_core_checksum_is_refused_by_a_process_that_held_the_plain_head() -> None:
    """A process holding the plain head decodes only the records of the tailed head the store holds
    next: the SHA-1 in its header must still be checked, as a fresh process checks it (else that one
    process serves the set, reports it sound and keeps appending while every other one refuses it)."""
    store = MemoryStore()
    mdss.SortedSet(store, "b", log_limit=0).add("a", 1)  # a plain head (straight into the trees)
    held = mdss.SortedSet(store, "b", log_limit=10_000)
    assert held.scores(["a"]) == [1] and held.engine.head_bytes[:1] != _tail.TAILED
    mdss.SortedSet(store, "b", log_limit=10_000).add("b", 2)  # appended: the head now has a tail
    key = held.keys.head
    damaged = bytearray(store.get(key).value)
    damaged[5] ^= 0x10  # in the core's SHA-1
    store.put(key, bytes(damaged))
    with pytest.raises(mdss.CorruptDataError):
        mdss.SortedSet(store, "b").score("b")
    with pytest.raises(mdss.CorruptDataError):
        held.score("b")
    assert held.check() != []


@pytest.mark.parametrize("redis_kind", ["redis", "redis-cluster"])
@pytest.mark.parametrize("meanwhile", ["nothing", "same member", "other member", "seal", "bridged seal"])
def test_a_delayed_original_append_arriving_after_the_resend_is_never_applied_twice(
    redis_kind, meanwhile, request
) -> None:
    """Redis: the first append request is held back (its connection failed, the server runs it later); the
    store's own resend, other writers, then the held-back request. Applied once, incr exact."""
    url = request.getfixturevalue("redis_url" if redis_kind == "redis" else "redis_cluster_url")
    store = mdss.open_store(f"{url}?namespace=t{uuid.uuid4().hex[:12]}")
    request.addfinalizer(store.close)
    mdss.SortedSet(store, "b", chunk_size=4, log_limit=0).add_many({f"m{i}": i for i in range(10)})
    other = mdss.SortedSet(store, "b", log_limit=10_000)
    writer = mdss.SortedSet(store, "b", log_limit=10_000)
    writer.scores(["x"])
    real, held_back = store._tail_script, []

    def flaky(keys, args, client=None):
        if not held_back:
            held_back.append((keys, args))
            if meanwhile == "same member":
                other.incr("x", 10)
            elif meanwhile == "other member":
                other.incr("y", 10)
            elif meanwhile == "seal":
                mdss.SortedSet(store, "b", log_limit=0).incr("z", 1)  # straight into the trees: a new core
            elif meanwhile == "bridged seal":  # appends until one seals (mdss._tail.swap): a bridged head
                core = _tail.core(store.get(other.keys.head).value)
                while _tail.core(store.get(other.keys.head).value) == core:
                    other.incr(f"o{len(held_back)}-{uuid.uuid4().hex}", 1)
            raise redis.ConnectionError("held back")
        return real(keys=keys, args=args, client=client)

    store._tail_script = flaky
    try:
        got = writer.incr("x", 1)
    finally:
        store._tail_script = real
    keys, args = held_back[0]
    real(keys=keys, args=args)  # the held-back request reaches the server at last
    final = mdss.SortedSet(store, "b").score("x")
    assert final == (11 if meanwhile == "same member" else 1)
    assert got == final or (meanwhile == "same member" and got in (1, 11))
    assert mdss.SortedSet(store, "b").check() == []


@pytest.mark.parametrize("landed", [False, True])
def test_a_lost_append_then_a_fold_into_the_trees_is_told_from_the_recent_commits(landed: bool) -> None:
    """The append's request (or its reply) is lost, and a commit folds the log into the trees before the
    resend: the head's recent nonces cover every commit since the writer's view, so the outcome is known
    (not OutcomeUnknownError), and the incr applies once."""
    store = MemoryStore()
    mdss.SortedSet(store, "b", chunk_size=4, log_limit=0).add_many({f"m{i}": i for i in range(10)})
    lossy = _Lossy(store, meanwhile=lambda: mdss.SortedSet(store, "b", log_limit=0).incr("z", 1))
    writer = mdss.SortedSet(lossy, "b", log_limit=10_000)
    writer.scores(["x"])
    lossy.armed, lossy.before = True, not landed
    assert writer.incr("x", 1) == 1
    fresh = mdss.SortedSet(store, "b")
    assert fresh.scores(["x", "z"]) == [1, 1]
    assert fresh.check() == []


class _Writers(RuleBasedStateMachine):
    """Several objects of one set, each committing from the head it last saw (stale: the store applies
    the append unless a newer record touched its members), with tiny inline and tail limits so that
    tails fill, seal and merge constantly; every result against a model; cursors made before later
    appends page on from their snapshot."""

    factory = None
    shards = 1

    @initialize(chunk=st.integers(2, 4), log_limit=st.sampled_from([2, 5, 40]))
    def open(self, chunk: int, log_limit: int) -> None:
        store = self.factory()
        self.sets = [
            mdss.SortedSet(store, "w", chunk_size=chunk, gc_grace=0, log_limit=log_limit, shards=self.shards)
            for _ in range(3)
        ]
        self.model = Model("desc")
        self.cursors: list[tuple[object, list, set]] = []  # cursor, its snapshot's rest, members written since

    def _apply(self, ops) -> bool:
        trial = self.model.tried(ops)
        if trial is None:
            return False
        self.model = trial
        for _, _, touched in self.cursors:
            touched.update(member for _, member, _ in ops)
        return True

    @rule(w=st.integers(0, 2), member=S.members, delta=S.small_scores)
    def incr(self, w: int, member: str, delta: int) -> None:
        assert self._apply([("incr", member, delta)])
        assert self.sets[w].incr(member, delta) == self.model.scores[member]

    @rule(w=st.integers(0, 2), pairs=st.lists(st.tuples(S.members, S.small_scores), max_size=6), op=S.ops)
    def add_many(self, w: int, pairs, op: str) -> None:
        new = len({m for m, _ in pairs} - set(self.model.scores))
        assert self._apply([(op, m, s) for m, s in pairs])
        assert self.sets[w].add_many(pairs, op=op) == new

    @rule(w=st.integers(0, 2), member=S.members, score=S.small_scores, cond=st.sampled_from(["gt", "lt"]))
    def conditional(self, w: int, member: str, score: int, cond: str) -> None:
        current = self.model.scores.get(member)
        applies = current is None or (score > current if cond == "gt" else score < current)
        assert self._apply([("set", member, score)] if applies else [])
        assert self.sets[w].add(member, score, op=cond) is (current is None)
        assert self.sets[w].score(member) == self.model.scores[member]

    @rule(w=st.integers(0, 2), member=S.members)
    def remove(self, w: int, member: str) -> None:
        for _, _, touched in self.cursors:
            touched.add(member)
        assert self.sets[w].remove(member) is (self.model.scores.pop(member, None) is not None)

    @rule(w=st.integers(0, 2))
    def merge(self, w: int) -> None:
        self.sets[w].merge()

    @rule(w=st.integers(0, 2))
    def gc(self, w: int) -> None:
        self.sets[w].gc(wait=False)

    @rule(w=st.integers(0, 2))
    def cursor(self, w: int) -> None:
        page = self.sets[w].page(2)
        if page.cursor is not None:
            self.cursors.append((page.cursor, self.model.entries()[2:], set()))

    @precondition(lambda self: self.cursors)
    @rule(w=st.integers(0, 2))
    def page_on(self, w: int) -> None:
        cursor, expected, touched = self.cursors.pop()
        got = []
        while cursor is not None:
            page = self.sets[w].page(3, cursor)
            got += page.entries
            cursor = page.cursor
        members = [e.member for e in got]
        if got != expected:  # its snapshot is gone (another object, merged, collected): on by key, from the
            # newest state, where only a member written since may be met again (docs/architecture.md, "Cursors")
            assert {m for m in members if members.count(m) > 1} <= touched
            assert set(members) <= set(self.model.scores)

    @invariant()
    def agrees(self) -> None:
        if not hasattr(self, "sets"):
            return
        for s in self.sets:
            assert list(s) == self.model.entries()
        assert self.sets[0].check() == []


@pytest.mark.grid("shards", size=2)  # by default each store runs one of the two, in turn (conftest.py)
@pytest.mark.parametrize("shards", [1, 2])
def test_writers_holding_stale_heads_agree_with_a_model(store_factory, shards) -> None:
    machine = type("W", (_Writers,), {"factory": store_factory, "shards": shards})
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(_log, "INLINE_BYTES", 90)
        mp.setattr(_tail, "TAIL_BYTES", 120)
        run_state_machine_as_test(
            machine, settings=settings(max_examples=_examples(store_factory, 40), stateful_step_count=30, deadline=None)
        )


def _big_record(nonce: str, members: list[str], pad: int = 0) -> bytes:
    entries = [(m, None, 1.5, None) for m in members[-3:]]
    entries[-1] = (entries[-1][0], None, 1.5, nonce)
    if pad:
        entries.insert(0, ("p" * pad, None, 0, None))
    record = _tail.record(nonce, entries, members)
    assert record is not None
    return record


@pytest.mark.parametrize("cap", [10**6, 70_000, 40_000, 2_500])
def test_the_store_applies_extreme_records_as_the_reference_does(store, cap: int) -> None:
    """255 tokens, members with NUL and non-ASCII, nonces of zero bytes and 0xC1, record bodies of 32 KB
    and more (the length's high bit set), caps on either side of them, a resend and a stale view."""
    if not store.appends:
        return  # commits compare-and-set the head (test_tail checks that appends are refused)
    many = [f"é{i}\x00" for i in range(255)]
    records = [
        _big_record("00" * 8, many),
        _big_record("c1" * 8, ["a\x00b", "\u2603"], pad=40_000),
        _big_record("00" * 7 + "01", ["x"], pad=33_000),
    ]
    base = b"\x81\xa1v\x00"
    key = "mdss:k:h"  # a head's key (mdss._keys)
    store.put(key, base)
    value = base
    for record in [*records, records[0], _big_record("11" * 8, [many[254]])]:  # a resend; a conflict
        sha, seen = _tail.view(base)
        try:
            expected, outcome = _tail.apply(value, sha, seen, record, cap), "appended"
        except _tail.Refused as exc:
            expected, outcome = None, "full" if exc.full else "refused"
        try:
            landed, got = store.append_log(key, base, record, cap), "appended"
        except mdss.ConflictError as exc:
            landed, got = None, "full" if getattr(exc, "full", False) else "refused"
        assert got == outcome
        if landed is not None:
            assert landed.value == expected == store.get(key).value
            value = expected


@pytest.mark.parametrize("damage", ["short", "long"])
def test_an_append_onto_a_head_whose_tail_framing_is_damaged_is_refused_as_corrupt(store, damage: str) -> None:
    """A writer holding the plain head appends while the stored tail's last record length is damaged (so
    that the store's scan ends inside a record, or past the value's end): CorruptDataError from the head
    the refusal returns, not a bare IndexError, a script error, or a record appended after the damage."""
    mdss.SortedSet(store, "b", log_limit=0).add("a", 1)  # a plain head
    held = mdss.SortedSet(store, "b", log_limit=10_000)
    held.scores(["a"])
    mdss.SortedSet(store, "b", log_limit=10_000).add("b", 2)
    key = held.keys.head
    value = store.get(key).value
    if value[:1] != _tail.TAILED:
        return  # a store that compare-and-sets (no tail to damage)
    start = _tail.HEADER + len(_tail.core(value))
    size = int.from_bytes(value[start : start + 2], "big")
    wrong = size - 8 if damage == "short" else size + 200
    store.put(key, value[:start] + wrong.to_bytes(2, "big") + value[start + 2 :])
    with pytest.raises(mdss.CorruptDataError):
        held.add("c", 3)
    damaged = store.get(key).value
    assert damaged[:start] == value[:start] and len(damaged) == len(value)  # nothing appended
