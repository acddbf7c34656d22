"""Store-applied appends (``mdss._tail``): the store's side against the reference, on every store that has
it (the Redis script included); lost replies; damaged tails."""

from __future__ import annotations

import itertools
import time

import attrs
import pytest
from depth import budget
from faulty import FaultyStore
from hypothesis import given, settings
from hypothesis import strategies as st

import mdss
from mdss import _engine, _head, _tail
from mdss._codec import pack
from mdss.stores.memory import MemoryStore

_keys = itertools.count()

MEMBERS = st.sampled_from(["a", "b", "c", "d", "é", ""])


def _entries(nonce: str, members: list[str]) -> list[tuple]:
    return [(m, None, float(i), None) for i, m in enumerate(members[:-1])] + [(members[-1], 1, 2, nonce)]


@st.composite
def _steps(draw):
    """Appends, seals and merges (``mdss._tail.swap``, a merge with no record), each from a view of the
    head some steps back (or the last append sent again), and new cores (an ordinary compare-and-set):
    ``(kind, members, steps back, cap on the tail's bytes, core bytes)``."""
    steps = []
    for _ in range(draw(st.integers(1, 12))):
        kind = draw(st.sampled_from(["append", "append", "append", "resend", "core", "seal", "seal", "merge"]))
        members = draw(st.lists(MEMBERS, min_size=1, max_size=3, unique=True))
        data = draw(st.binary(min_size=8, max_size=8))
        steps.append((kind, members, draw(st.integers(0, 4)), draw(st.sampled_from([80, 200, 10_000])), data))
    return steps


def _run(steps, apply):
    """Apply ``steps`` through ``apply(value, held, record, cap, core) -> (new value | None, outcome)``
    (``record`` None: store ``held``): each outcome, and the head's final bytes."""
    value = b"\x81\xa1v\x00"  # any plain head's bytes: the store never decodes the core
    history, outcomes, sent = [value], [], []
    for step, (kind, members, back, cap, data) in enumerate(steps):
        core = b"\x82\xa1v" + data + b"\xa1s" + bytes([step])  # a new core is new (its generation, at least)
        if kind == "core":
            value, history = core, [core]
            apply(None, value, None, cap, None)
            outcomes.append(kind)
            continue
        held = history[max(0, len(history) - 1 - back)]
        if kind == "resend" and sent:
            held, record = sent[-1]
        elif kind == "merge":  # a seal with no record of its own
            record = b""
        else:
            nonce = f"{step:016x}"  # unique, as random 64-bit nonces are
            record = _tail.record(nonce, _entries(nonce, members), members)
            if kind != "seal":
                sent.append((held, record))
        new, outcome = apply(value, held, record, cap, core if kind in ("seal", "merge") else None)
        outcomes.append(outcome)
        if new is not None:
            value = new
            history.append(new)
    return outcomes, value


def _reference(value, held, record, cap, core):
    if record is None:
        return None, "stored"
    sha, seen = _tail.view(held)
    try:
        if core is not None:  # a lagging sealer, or not (any deterministic function of the step)
            return _tail.swap(value, sha, seen, core, record, cap, bool(core[3] & 1)), "sealed"
        return _tail.apply(value, sha, seen, record, cap), "appended"
    except _tail.Refused as exc:
        return None, "full" if exc.full else "refused"


@settings(max_examples=budget(300), deadline=None)
@given(_steps())
def test_the_reference_keeps_a_tail_that_decodes_to_the_appends_it_took(steps) -> None:
    outcomes, value = _run(steps, _reference)
    ends = [i for i, outcome in enumerate(outcomes) if outcome in ("core", "sealed")]
    since = outcomes[ends[-1] + 1 :] if ends else outcomes
    plain = not ends or steps[ends[-1]][0] == "core"
    assert _tail.marked(value) == (not plain or "appended" in since)
    if not _tail.marked(value):
        return
    core, records = _tail.split("k", value)
    start, _, tail = _tail.layout(value)
    bridged = _tail.records("k", value[start:tail])
    nonces = [nonce for nonce, _ in bridged + records]
    assert len(set(nonces)) == len(nonces)  # a resend never adds a record twice, nor across a bridge
    for nonce, entries in records:
        assert entries[-1][3] == nonce
    assert _tail.core(value) == core
    if outcomes[-1] == "sealed" and steps[-1][0] == "seal":  # the records after its view, then its own
        assert records[-1][0] == f"{len(steps) - 1:016x}"


def test_every_store_applies_appends_as_the_reference_does(store) -> None:
    if not store.appends:  # commits compare-and-set the head instead; the base class refuses appends
        store.put("h", b"\x80")
        with pytest.raises(NotImplementedError):
            store.append_log("h", b"\x80", _tail.record("00" * 8, _entries("00" * 8, ["a"]), ["a"]), 1000)
        return

    @settings(max_examples=budget(40), deadline=None)
    @given(_steps())
    def check(steps):
        key = f"mdss:tail{next(_keys)}:h"  # a head's key (mdss._keys): the stores that keep heads apart know it
        store.put(key, b"\x81\xa1v\x00")

        def stored(value, held, record, cap, core):
            if record is None:
                store.put(key, held)
                return None, "stored"
            try:
                if core is not None:
                    lagging = bool(core[3] & 1)  # as the reference decides it
                    landed, outcome = store.swap_core(key, held, core, record, cap, lagging=lagging), "sealed"
                else:
                    landed, outcome = store.append_log(key, held, record, cap), "appended"
            except mdss.ConflictError as exc:
                assert exc.current is not None and exc.current.value == value  # the head as it is
                return None, "full" if getattr(exc, "full", False) else "refused"
            assert store.get(key) == landed  # the value and the version a compare-and-set takes next
            return landed.value, outcome

        assert _run(steps, stored) == _run(steps, _reference)

    check()


class _LoseAppendReply(FaultyStore):
    """Performs the first store-applied append, runs ``meanwhile``, then loses the reply."""

    def _append(self, key, held, sha, seen, record, cap):
        if self.fail_at is None:
            self.fail_at, self.after = self.count + 1, True
        return self._call("_append", key, held, sha, seen, record, cap)


@pytest.mark.parametrize("others", [0, 1, 5, 60])
@pytest.mark.parametrize("same_member", [False, True])
def test_an_append_whose_reply_was_lost_is_found_in_the_tail_or_the_log(others: int, same_member: bool) -> None:
    """The resend finds the record in the tail (the store adds it once); after others sealed the tail into
    segments (60 appends), the log says it landed. Never applied twice, never reported unknown while
    the log still holds it."""
    store = MemoryStore()
    mdss.SortedSet(store, "b", chunk_size=4, log_limit=0).add_many({f"m{i}": i for i in range(20)})
    other = mdss.SortedSet(store, "b", log_limit=10_000)
    member = "x" if same_member else "y"

    def meanwhile() -> None:
        for i in range(others):
            other.incr(member if i % 2 else f"o{i}", 10)

    faulty = _LoseAppendReply(store, meanwhile=meanwhile)
    writer = mdss.SortedSet(faulty, "b", log_limit=10_000)
    writer.scores(["x"])
    assert writer.incr("x", 1) == 1
    assert faulty.count > faulty.fail_at  # the reply was lost, and the store asked again
    fresh = mdss.SortedSet(store, "b")
    assert fresh.score("x") == 1 + (10 * (others // 2) if same_member else 0)
    assert fresh.check() == []
    if others == 60:
        assert (
            mdss._snapshot.snapshot(fresh.engine).head.log.segs or mdss._snapshot.snapshot(fresh.engine).head.log.pages
        )  # the tail was sealed


def test_a_damaged_tail_is_refused_not_served() -> None:
    store = MemoryStore()
    board = mdss.SortedSet(store, "b", log_limit=10_000)
    board.add("a", 1)
    mdss.SortedSet(store, "b", log_limit=10_000).add("b", 2)  # from a held head: appended to the tail
    key = board.keys.head
    value = store.get(key).value
    assert value[:1] == _tail.TAILED
    for at in (1, 22, _tail.HEADER + 3, len(value) - 30, len(value) - 1):
        damaged = bytearray(value)
        damaged[at] ^= 0x10
        store.put(key, bytes(damaged))
        with pytest.raises(mdss.CorruptDataError):
            mdss.SortedSet(store, "b").score("a")
    store.put(key, value[:-3])
    with pytest.raises(mdss.CorruptDataError):
        mdss.SortedSet(store, "b").score("a")
    store.put(key, value)
    assert mdss.SortedSet(store, "b").scores(["a", "b"]) == [1, 2]


def test_a_tailed_head_decodes_as_its_core_plus_one_commit_per_record() -> None:
    store = MemoryStore()
    one = mdss.SortedSet(store, "b", log_limit=10_000)
    one.add("a", 1)
    two = mdss.SortedSet(store, "b", log_limit=10_000)
    two.add("b", 2)
    one.add_many({"c": 3, "d": 4})
    value = store.get(one.keys.head).value
    core, records = _tail.split("k", value)
    head = _head.Head.decode("k", value)
    plain = _head.Head.decode("k", core)
    assert head.gen == plain.gen + len(records) and len(head.log) == len(plain.log) + 4 == 4
    assert head.recent[: len(records)] == tuple(nonce for nonce, _ in reversed(records))


_nonce = st.binary(min_size=8, max_size=8).map(bytes.hex)
_record_entries = st.lists(
    st.tuples(st.sampled_from("abcdef"), st.integers(0, 9), st.integers(0, 9)), min_size=1, max_size=3
)


@settings(max_examples=budget(200), deadline=None)
@given(
    st.lists(st.tuples(_nonce, _record_entries), max_size=20),
    st.integers(0, 40),
    st.lists(_nonce, max_size=_head.RECENT),
    st.booleans(),
)
def test_a_head_takes_many_records_at_once_as_one_commit_each(records, gen, recent, lineage) -> None:
    """``Head.appended`` (how a writer follows the records others appended) is ``next`` once per record."""
    records = [(nonce, [(*e, nonce if i == len(es) - 1 else None) for i, e in enumerate(es)]) for nonce, es in records]
    start = _head.Head("desc", 8, gen=gen + len(recent), recent=tuple(recent), lineage="x" * 16 if lineage else None)
    one_by_one = start
    for nonce, entries in records:
        one_by_one = one_by_one.next(nonce, log=one_by_one.log.extended(entries))
    at_once = start.appended(records)
    if start.lineage is None and records:  # each way mints a lineage of its own
        assert at_once.lineage is not None
        at_once = attrs.evolve(at_once, lineage=one_by_one.lineage)
    assert at_once == one_by_one


def test_a_core_with_a_tail_of_its_own_is_refused_not_recursed_into() -> None:
    core = _tail.tailed(_tail.tailed(b"\x80"))
    with pytest.raises(mdss.CorruptDataError):
        _head.Head.decode("k", _tail.tailed(core))


def test_a_resend_found_in_the_tail_keeps_the_version_on_memory() -> None:
    store = MemoryStore()
    store.put("h", b"\x80")
    record = _tail.record("00" * 8, _entries("00" * 8, ["a"]), ["a"])
    first = store.append_log("h", b"\x80", record, 1000)
    assert store.append_log("h", b"\x80", record, 1000) == first == store.get("h")


def test_a_record_larger_than_the_tail_goes_the_ordinary_way() -> None:
    store = MemoryStore()
    board = mdss.SortedSet(store, "b", log_limit=10_000)
    board.add("a", 1)
    before = store.stats.snapshot()
    board.add_many({f"member-{i:03d}-{'x' * 40}": i for i in range(120)})  # a record of over TAIL_BYTES
    assert store.stats.since(before)["conflicts"] == 0 and len(board) == 121
    assert not _tail.marked(store.get(board.keys.head).value)  # compare-and-set: a plain head


# -- bridged heads: appends across a seal ------------------------------------------


class _Behind(FaultyStore):
    """Before each seal reaches the store, another writer (``other``, on the inner store) appends a dozen records:
    writers then lag behind the sealer's view, as under a throttled key, and the seal keeps the cores its head bridges
    from."""

    def __init__(self, inner) -> None:
        super().__init__(inner)
        self.other: mdss.SortedSet | None = None
        self.seals = 0

    def _swap(self, *args):
        if self.other is not None:
            self.seals += 1
            for i in range(12):  # over a sixteenth of the cap of records: writers lag
                self.other.incr(f"meanwhile-{self.seals:03d}-{i}-{'q' * 40}", 1)
        return super()._swap(*args)


def _sealed_under(store, name: str, mark: bytes = _tail.BRIDGED) -> tuple[mdss.SortedSet, mdss.SortedSet]:
    """Two objects of one set: ``stale`` holds the head from before ``sealer``'s appends and the seal of
    them (the current head is bridged from the head ``stale``'s view is of); with ``mark`` BRIDGES, seals
    with another writer appending before each (the head bridges from several cores, ``stale``'s among them)."""
    behind = _Behind(store)
    sealer = mdss.SortedSet(behind if mark == _tail.BRIDGES else store, name, log_limit=10_000)
    sealer.add("s", 0)
    stale = mdss.SortedSet(store, name, log_limit=10_000)
    stale.scores(["s"])
    behind.other = mdss.SortedSet(store, name, log_limit=10_000)
    key = sealer.keys.head
    for i in range(400):
        sealer.incr(f"sealed-{i:03d}-{'p' * 20}", i)
        if store.get(key).value[:1] == mark:
            return stale, sealer
    raise AssertionError("no seal in 400 appends")


def test_a_writer_holding_the_head_a_seal_replaced_appends_across_it_in_one_round_trip(store) -> None:
    if not store.appends:  # heads there are compare-and-set: never tailed, never bridged
        board = mdss.SortedSet(store, "b", log_limit=10_000)
        board.add_many({f"m{i}-{'p' * 30}": i for i in range(60)})
        assert not _tail.marked(store.get(board.keys.head).value)
        return
    stale, sealer = _sealed_under(store, "b")
    before = store.stats.snapshot()
    assert stale.incr("fresh", 500) == 500
    spent = store.stats.since(before)
    assert (spent["calls"], spent["conflicts"]) == (1, 0)
    value = store.get(stale.keys.head).value
    assert value[:1] == _tail.BRIDGED and _tail.split("k", value)[1][-1][0] == stale.engine.head.recent[0]
    expected = {e.member: e.score for e in sealer}
    assert expected["fresh"] == 500 and len(expected) == len(sealer)
    for board in (stale, sealer, mdss.SortedSet(store, "b")):
        assert {e.member: e.score for e in board} == expected
        assert board.rank("fresh") == 1 and board.rank("sealed-019-" + "p" * 20) == 2  # ranks count from 1
    assert mdss.SortedSet(store, "b").check() == []


def test_a_writer_two_seals_behind_appends_across_both_in_one_round_trip(store) -> None:
    """A writer that held its head while two seals landed (under a per-key write cap, a throttled writer waits that
    long) appends in one round trip: the head keeps the records since its grandparent's core."""
    if not store.appends:
        return
    stale, sealer = _sealed_under(store, "b", _tail.BRIDGES)
    key = stale.keys.head
    start, cores, tail = _tail.layout(store.get(key).value)
    assert len(cores) == 2 and cores[0][0] == _tail.view(stale.engine.head_bytes)[0]
    before = store.stats.snapshot()
    assert stale.incr("fresh", 500) == 500
    spent = store.stats.since(before)
    assert (spent["calls"], spent["conflicts"]) == (1, 0)
    value = store.get(key).value
    assert value[:1] == _tail.BRIDGES and _tail.split("k", value)[1][-1][0] == stale.engine.head.recent[0]
    expected = {e.member: e.score for e in sealer}
    assert expected["fresh"] == 500 and len(expected) == len(sealer)
    for board in (stale, sealer, mdss.SortedSet(store, "b")):
        assert {e.member: e.score for e in board} == expected
    assert mdss.SortedSet(store, "b").check() == []
    # Once the head no longer bridges from its core (the records since passed the cap): refused, rebased on the
    # head returned.
    third, sealer = _sealed_under(store, "c", _tail.BRIDGES)
    sha = _tail.view(third.engine.head_bytes)[0]

    def bridges() -> set[bytes]:
        value = store.get(sealer.keys.head).value
        return {value[1:21], *(c[0] for c in _tail.layout(value)[1])}

    i = 0
    while sha in bridges():
        sealer.incr(f"more-{i:03d}-{'p' * 20}", i)
        i += 1
    before = store.stats.snapshot()
    assert third.incr("late", 7) == 7
    assert store.stats.since(before)["conflicts"] == 1
    assert mdss.SortedSet(store, "c").score("late") == 7 and mdss.SortedSet(store, "c").check() == []


@pytest.mark.parametrize("which", ["sealing commit", "sealed tail"])
def test_an_append_across_a_seal_is_refused_when_the_bridge_touched_its_member(store, which: str) -> None:
    """The bridge carries the tokens of what came after the writer's view: the sealer's own commit and the
    records the seal moved into a segment. A commit that read one of those members rebases (exact sums)."""
    if not store.appends:
        return
    stale, sealer = _sealed_under(store, "b")
    last = max((e for e in sealer if e.member.startswith("sealed-")), key=lambda e: e.member)
    member = last.member if which == "sealing commit" else "sealed-000-" + "p" * 20
    was, before = sealer.score(member), store.stats.snapshot()
    assert stale.incr(member, 1000) == 1000 + was
    assert store.stats.since(before)["conflicts"] == 1
    assert mdss.SortedSet(store, "b").score(member) == sealer.score(member) and sealer.check() == []


def test_a_lost_append_sealed_by_another_is_found_across_the_seal() -> None:
    """The reply of an append is lost; another writer appends and seals it (into a segment: the head is
    bridged from the one it was appended to): the resend finds it there, applied once, in one call."""
    store = MemoryStore()
    mdss.SortedSet(store, "b", log_limit=10_000).add("x", 0)
    other = mdss.SortedSet(store, "b", log_limit=10_000)
    cores = []

    def meanwhile() -> None:
        while len(set(cores)) < 2:
            other.incr(f"other-{len(cores):03d}-{'p' * 20}", 1)
            cores.append(_tail.core(store.get(other.keys.head).value))

    faulty = _LoseAppendReply(store, meanwhile=meanwhile)
    writer = mdss.SortedSet(faulty, "b", log_limit=10_000)
    writer.scores(["x"])
    assert writer.incr("x", 1) == 1
    assert faulty.count == faulty.fail_at + 1  # one resend, across the seal: no read
    fresh = mdss.SortedSet(store, "b")
    assert fresh.score("x") == 1 and fresh.check() == [] and len(fresh) == len(cores) + 1


def test_a_damaged_bridge_is_refused_not_served() -> None:
    store = MemoryStore()
    stale, _ = _sealed_under(store, "b")
    key = stale.keys.head
    value = store.get(key).value
    bridge, cores, tail = _tail.layout(value)
    parents = cores[0][2]
    for at in (bridge - 5, bridge + 1, parents - 3, tail - 1):  # a length, a record's framing, CRC-32s
        damaged = bytearray(value)
        damaged[at] ^= 0x10
        store.put(key, bytes(damaged))
        with pytest.raises(mdss.CorruptDataError):
            mdss.SortedSet(store, "b").score("s")
    # The parent's SHA-1 is only ever compared with a writer's view: damaged, it matches none, and a
    # writer holding the parent rebases (one conflict) instead of appending across.
    damaged = bytearray(value)
    damaged[bridge - 20] ^= 0x10
    store.put(key, bytes(damaged))
    assert mdss.SortedSet(store, "b").score("s") == 0
    before = store.stats.snapshot()
    assert stale.incr("t", 1) == 1 and store.stats.since(before)["conflicts"] == 1
    assert mdss.SortedSet(store, "b").check() == []


class _Slow(FaultyStore):
    """Each append takes ``delay`` seconds more to reach the store (a throttled key)."""

    def __init__(self, inner, delay: float) -> None:
        super().__init__(inner)
        self.delay = delay

    def _append(self, *args):
        time.sleep(self.delay)
        return super()._append(*args)


def test_a_writer_whose_appends_wait_seals_keeping_the_bridges(store, monkeypatch) -> None:
    """A writer whose append took over ``SLOW`` seconds lags (``WriterState.lagging``), as all do under a throttled
    key: its seals tell the store, which keeps the cores the head bridges from even with nothing appended after the
    sealer's view; without it, one bridge. A writer whose appends are quick does not lag."""
    if not store.appends:
        return
    monkeypatch.setattr(_engine, "SLOW", 0.01)
    quick = mdss.SortedSet(store, "b", log_limit=10_000)
    quick.add("q", 1)
    assert not quick.engine.writer.lagging()
    slow = mdss.SortedSet(_Slow(store, 0.02), "b", log_limit=10_000)
    slow.add("s", 1)
    assert slow.engine.writer.lagging() and not quick.engine.writer.lagging()
    _, sealer = _sealed_under(store, "c")
    value = store.get(sealer.keys.head).value
    assert value[:1] == _tail.BRIDGED
    for lagging, mark in ((False, _tail.BRIDGED), (True, _tail.BRIDGES)):  # a seal from the head as stored
        store.put("mdss:copy:h", value)
        assert store.swap_core("mdss:copy:h", value, b"\x82\xa1v\x09", b"", 10_000, lagging=lagging).value[:1] == mark
    assert mdss.SortedSet(store, "b").check() == [] and mdss.SortedSet(store, "c").check() == []


def test_a_head_bridged_from_several_cores_whose_oldest_start_moved_is_refused() -> None:
    """The records of a head bridged from several cores begin with the oldest core's (its start is 0, as written):
    a start moved to a later record's boundary, which would drop records from what a writer is checked against, is
    refused as corrupt. (The other offsets have no checksum of their own: docs/format.md.)"""
    store = MemoryStore()
    _sealed_under(store, "b", _tail.BRIDGES)
    key = mdss.SortedSet(store, "b").keys.head
    value = store.get(key).value
    start, cores, tail = _tail.layout(value)
    first = start + 2 + int.from_bytes(value[start : start + 2], "big")  # the second record's offset
    assert first <= cores[0][2]
    at = _tail.HEADER + int.from_bytes(value[21:25], "big") + 1 + 20  # the oldest core's start
    damaged = value[:at] + (first - start).to_bytes(4, "big") + value[at + 4 :]
    _tail.layout(damaged)  # well formed, as far as the store can tell
    with pytest.raises(mdss.CorruptDataError):
        _tail.split(key, damaged)


def _just_under_the_budget(store) -> tuple[mdss.SortedSet, int]:
    """A set whose head's inline entries are just under ``INLINE_BYTES`` (``x`` and ``i`` more members)."""
    a = mdss.SortedSet(store, "b", log_limit=10_000)
    a.add("x", 0)
    i = 0
    while len(pack(mdss._snapshot.snapshot(a.engine).head.log.inline)) < mdss._log.INLINE_BYTES - 100:
        a.add(f"m{i:03d}-{'p' * 20}", i)
        i += 1
    return a, i


def test_a_seal_beaten_by_another_appends_across_it_and_deletes_its_segment(store) -> None:
    """Two writers read the same head, just under the inline budget: each one's commit takes it past, so
    both seal. The second one's core is never used: the store appends its record across the first seal
    (no conflict), and the writer deletes the segment it wrote for nothing; where the store writes a seal's
    nodes with its core (``seals_nodes``), that segment is never written. (Elsewhere a writer seals only
    from the head it read just now: from a held head it reads first, and then appends if another sealed.)"""
    if not store.appends:
        return
    a, i = _just_under_the_budget(store)
    segments: set[str] = set()

    def a_seals() -> None:  # between b's read of the head and b's seal
        a.add_many({f"a{j}-{'p' * 20}": j for j in range(4)})  # past the budget: a seals
        segments.update(mdss._snapshot.snapshot(a.engine).head.log.segs)
        nodes.update(store.keys(a.keys.nodes))

    class _Beaten(FaultyStore):
        def _swap(self, *args):
            if not segments:
                a_seals()
            return self._call("_swap", *args)

    nodes: set[str] = set()
    beaten = _Beaten(store)
    b = mdss.SortedSet(beaten, "b", log_limit=10_000)
    b.scores(["x"])  # both hold the same head now
    b.add_many({f"b{j}-{'p' * 20}": j for j in range(4)})  # past it in the head b holds: b seals too
    wasted = 0 if store.seals_nodes else 1  # b's segment: written and deleted again, or never written
    assert segments and (beaten.stats.conflicts, beaten.stats.deletes) == (0, wasted)
    left = set(store.keys(a.keys.nodes))  # nodes: a's, and b's segment if it wrote one
    assert left <= nodes and len(nodes - left) == wasted
    assert set(mdss._snapshot.snapshot(b.engine).head.log.segs) == segments
    fresh = mdss.SortedSet(store, "b")
    assert len(fresh) == i + 9 and fresh.score("b3-" + "p" * 20) == 3 and fresh.check() == []


def test_a_writer_holding_a_head_another_sealed_reads_it_and_appends(store) -> None:
    """A writer whose held head another writer sealed meanwhile reads the head before its own seal would
    write a segment: then its commit appends (no segment written and deleted, no conflict). Where the store
    writes a seal's nodes with its core (``seals_nodes``), it seals from the head it holds: the store appends
    its record across the other's seal, and writes no node of its own (one round trip fewer)."""
    if not store.appends:
        return
    a, i = _just_under_the_budget(store)
    b = mdss.SortedSet(store, "b", log_limit=10_000)
    b.scores(["x"])
    a.add_many({f"a{j}-{'p' * 20}": j for j in range(4)})  # past the budget: a seals
    before, nodes = store.stats.snapshot(), set(store.keys(a.keys.nodes))
    b.add_many({f"b{j}-{'p' * 20}": j for j in range(4)})
    spent = store.stats.since(before)
    calls = 2 if store.seals_nodes else 3
    assert (spent["conflicts"], spent["deletes"], spent["calls"]) == (0, 0, calls)
    assert set(store.keys(a.keys.nodes)) == nodes
    fresh = mdss.SortedSet(store, "b")
    assert len(fresh) == i + 9 and fresh.score("b3-" + "p" * 20) == 3 and fresh.check() == []


def test_a_resend_across_a_bridge_finds_its_record_whatever_the_size(store) -> None:
    """An append landed, then another writer sealed the head: the resend (from the parent) finds the record
    in the bridge, although the parent's records and it again would pass the cap (landed, not refused)."""
    if not store.appends:
        return
    key, plain = f"mdss:resend{next(_keys)}:h", b"\x81\xa1v\x00"
    store.put(key, plain)
    mine = _tail.record("01" * 8, _entries("01" * 8, ["a"]), ["a"])
    held = store.append_log(key, plain, mine, 10_000).value
    theirs = _tail.record("02" * 8, _entries("02" * 8, ["b"]), ["b"])
    sealed = store.swap_core(key, held, b"\x82\xa1v\x01", theirs, 10_000).value
    assert sealed[:1] == _tail.BRIDGED
    assert store.append_log(key, plain, mine, len(mine) + len(theirs)).value == sealed  # found, unchanged
    with pytest.raises(mdss.ConflictError):  # a new record of that size is refused
        store.append_log(key, plain, _tail.record("03" * 8, _entries("03" * 8, ["c"]), ["c"]), len(mine) + len(theirs))


@pytest.mark.parametrize("bridged", [False, True, "twice"])
def test_every_store_treats_a_damaged_head_as_the_reference_does(store, bridged: bool | str) -> None:
    """A writer holding the head appends to a copy damaged at every byte of its framing and of a sample of the rest:
    each store appends or refuses as ``mdss._tail.apply`` does (the Redis script reads only the header and the records
    after the writer's view on its fast path, and must refuse what the whole-head path refuses)."""
    if not store.appends:
        return
    if bridged:
        _, writer = _sealed_under(store, "b", _tail.BRIDGES if bridged == "twice" else _tail.BRIDGED)
    else:
        writer = mdss.SortedSet(store, "b", log_limit=10_000)
        writer.add("w", 0)
        mdss.SortedSet(store, "b", log_limit=10_000).add("x", 1)  # from a held head: appended to the tail
    writer.add("y", 2)  # the writer's own append: it holds the head as stored
    key = writer.keys.head
    held = store.get(key).value
    assert held[:1] == {False: _tail.TAILED, True: _tail.BRIDGED, "twice": _tail.BRIDGES}[bridged]
    bridge, _, tail = _tail.layout(held)
    sha, seen = _tail.view(held)
    nonce = "ab" * 8
    record = _tail.record(nonce, _entries(nonce, ["z"]), ["z"])
    headers = bridge - _tail.HEADER - int.from_bytes(held[21:25], "big")  # the bridges' header
    framing = {*range(_tail.HEADER), *range(bridge - headers, bridge + 12), *range(tail, len(held))}
    for at in sorted(framing | set(range(0, len(held), 37))):
        for flip in (0x01, 0x80):
            damaged = bytearray(held)
            damaged[at] ^= flip
            damaged = bytes(damaged)
            try:
                expected = _tail.apply(damaged, sha, seen, record, 10_000)
            except _tail.Refused:
                expected = None
            store.put(key, damaged)
            try:
                store.append_log(key, held, record, 10_000)  # its value is built from ``held``: not compared
                appended = True
            except mdss.ConflictError:
                appended = False
            assert appended == (expected is not None), (at, flip)
            assert store.get(key).value == (damaged if expected is None else expected), (at, flip)
