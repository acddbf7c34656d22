"""mdss.stores.slots: appends in keys of their own over a store that only compares and sets.

The whole suite runs over it as the store kind ``memory-slots`` (conftest.py). Here: several processes (each its own
SlotStore over one store) interleave appends, seals, compare-and-sets, deletes and reads with a clock that jumps past
the slots' grace, against the reference (a memory store that applies appends itself, the same calls in the same
order): every outcome and every head the same, and the slots a checkpoint covers deleted once their grace has passed.
"""

from __future__ import annotations

import itertools

import pytest
from depth import budget
from hypothesis import given, settings
from hypothesis import strategies as st

import mdss
from mdss import _tail
from mdss.stores import slots
from mdss.stores.memory import MemoryStore
from mdss.stores.slots import CHECKPOINT, SlotStore, slot_key

KEY = "mdss:s:h"
PLAIN = b"\x81\xa1v\x00"  # a plain head's bytes: the stores never decode the core


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _record(nonce: int, members: list[str]) -> bytes:
    text = f"{nonce:016x}"
    entries = [(m, None, float(i), None) for i, m in enumerate(members[:-1])] + [(members[-1], 1, 2, text)]
    record = _tail.record(text, entries, members)
    assert record is not None
    return record


OPS = st.one_of(
    st.tuples(
        st.just("append"), st.integers(0, 2), st.lists(st.sampled_from("abcd"), min_size=1, max_size=2, unique=True)
    ),
    st.tuples(st.just("seal"), st.integers(0, 2), st.booleans()),
    st.tuples(st.just("read"), st.integers(0, 2)),
    st.tuples(st.just("cas"), st.integers(0, 2)),
    st.tuples(st.just("delete"), st.integers(0, 2)),
    st.tuples(st.just("tick"), st.sampled_from([0.1, 0.3, 0.6, 1.5])),
)


@settings(max_examples=budget(300), deadline=None)
@given(st.integers(1, 3), st.sampled_from([40, 300, 10_000]), st.lists(OPS, max_size=40))
def test_processes_over_one_store_apply_what_the_reference_applies(every: int, cap: int, ops: list) -> None:
    clock, inner, reference = Clock(), MemoryStore(appends=False), MemoryStore()
    procs = [SlotStore(inner, every=every, grace=1.0, clock=clock) for _ in range(3)]
    inner.put("unrelated", b"x")
    procs[0].put(KEY, PLAIN)
    reference.put(KEY, PLAIN)
    # What each process last read or wrote: (its record, the reference's record of the same moment).
    held = [(p.get(KEY), reference.get(KEY)) for p in procs]
    nonces, cores = itertools.count(), itertools.count()
    for op in ops:
        kind = op[0]
        if kind == "tick":
            clock.now += op[1]
            continue
        i = op[1]
        mine, theirs = held[i]
        outcome, expected = _both(procs[i], reference, kind, op, mine, theirs, cap, next(nonces), next(cores))
        assert _outcome(outcome) == _outcome(expected), op
        if outcome[1] is not None or kind == "read":
            held[i] = (outcome[1], expected[1])
        cold = SlotStore(inner, every=every, grace=1.0, clock=clock).get(KEY)  # another process, reading
        assert (cold and cold.value) == (reference.get(KEY) and reference.get(KEY).value)
    clock.now += 10
    for p in procs:
        p.get(KEY)  # each deletes the slots whose grace has passed
    record = inner.get(KEY)
    slots = [k for k in inner.keys("mdss:") if "~" in k]
    if record is None:
        assert not slots, "a deleted head's slots are deleted once their grace has passed"
    else:
        assert record.value[:1] == CHECKPOINT or not slots
        base = int.from_bytes(record.value[9:17], "big") if record.value[:1] == CHECKPOINT else 0
        series = record.value[1:9].hex() if record.value[:1] == CHECKPOINT else None
        for k in slots:
            at = k.rpartition("~")[2]
            assert at.partition(".")[0] != series or int(at.partition(".")[2]) > base, (
                "a covered slot outlived its grace"
            )
    assert inner.get("unrelated").value == b"x" and "unrelated" in set(procs[0].keys(""))
    assert not [k for k in procs[0].keys("") if "~" in k], "slots are never listed"


def _both(proc, reference, kind, op, mine, theirs, cap, nonce, core):
    """``(outcome, record after)`` of the op on the process and on the reference."""
    results = []
    for store, held in ((proc, mine), (reference, theirs)):
        try:
            if kind == "read":
                results.append(("read", store.get(KEY)))
            elif kind == "append":
                value = held.value if held is not None else PLAIN
                results.append(("appended", store.append_log(KEY, value, _record(nonce, op[2]), cap)))
            elif kind == "seal":
                value = held.value if held is not None else PLAIN
                new = b"\x82\xa1v" + core.to_bytes(4, "big") + b"\xa1s\x01"
                results.append(("sealed", store.swap_core(KEY, value, new, _record(nonce, ["z"]), cap, lagging=op[2])))
            elif kind == "cas":
                value = b"\x82\xa1v" + core.to_bytes(4, "big") + b"\xa1c\x01"
                version = store.cas(KEY, value, None if held is None else held.version)
                results.append(("stored", mdss.stores.Record((value,), version)))
            else:
                store.delete_if(KEY, None if held is None else held.version)
                results.append(("deleted", None))
        except _tail.Refused as exc:
            results.append(("full" if exc.full else "refused", exc.current))
        except mdss.ConflictError as exc:
            results.append(("conflict", exc.current if exc.current_known else store.get(KEY)))
    return results[0], results[1]


def _outcome(result):
    kind, record = result
    return kind, None if record is None else record.value


def test_a_post_writes_one_small_key_and_the_head_once_every_few() -> None:
    inner = MemoryStore(appends=False)
    store = SlotStore(inner, every=4)
    board = mdss.SortedSet(store, "b", log_limit=10_000)
    board.add("first", 1)
    writes = {}
    real = inner.cas

    def counted(key, value, version):
        writes[key] = writes.get(key, 0) + 1
        return real(key, value, version)

    inner.cas = counted  # type: ignore[method-assign]
    before = inner.stats.snapshot()
    for i in range(40):
        board.add(f"m{i}", i)
    spent = inner.stats.since(before)
    head = board.keys.head
    assert writes[head] == 10 and sum(n for k, n in writes.items() if k != head) == 40
    assert spent["calls"] <= 40 + 2 * 10 + 1  # a put per post; a read and a write of the head per checkpoint
    assert {e.member: e.score for e in mdss.SortedSet(mdss.stores.slots.SlotStore(inner), "b")} == {
        "first": 1,
        **{f"m{i}": i for i in range(40)},
    }


def test_open_store_takes_slots_and_refuses_a_bad_count(tmp_path) -> None:
    store = mdss.open_store("memory://?appends=false&slots=5&namespace=app")
    assert isinstance(store, SlotStore) and store.every == 5 and store.namespace == "app" and store.appends
    store = mdss.open_store(f"sqlite:///{tmp_path}/s.db?timeout=3", slots=2)
    assert isinstance(store, SlotStore) and store.every == 2 and store.inner.path == f"{tmp_path}/s.db"
    for bad in ("0", "x", "-1"):
        with pytest.raises(mdss.InvalidArgumentError):
            mdss.open_store(f"memory://?appends=false&slots={bad}")
    with pytest.raises(mdss.InvalidArgumentError):
        mdss.open_store("memory://?slots=3")  # a store that applies appends itself needs no slots


def test_a_damaged_slot_is_refused_as_corrupt_and_a_reader_without_slots_refuses_a_checkpoint() -> None:
    inner = MemoryStore(appends=False)
    board = mdss.SortedSet(SlotStore(inner, every=100), "b")
    board.add_many({"a": 1, "b": 2})
    board.add("c", 3)
    record = inner.get(board.keys.head)
    series = record.value[1:9]
    damaged = bytearray(inner.get(slot_key(board.keys.head, series, 1)).value)
    damaged[5] ^= 1
    inner.put(slot_key(board.keys.head, series, 1), bytes(damaged))
    with pytest.raises(mdss.CorruptDataError):
        mdss.SortedSet(SlotStore(inner), "b").score("c")
    with pytest.raises(mdss.CorruptDataError, match="slots=N"):
        mdss.SortedSet(inner, "b").score("a")
    for at in range(1, 21):  # the series, the slot it follows, their CRC-32: a flipped bit is damage, not another slot
        damaged = bytearray(record.value)
        damaged[at] ^= 0x04
        inner.put(board.keys.head, bytes(damaged))
        with pytest.raises(mdss.CorruptDataError, match="checkpoint"):
            SlotStore(inner).get(board.keys.head)


def _nonces(value: bytes | None) -> list[str]:
    return [n for n, _ in _tail.split(KEY, value)[1]] if value and _tail.marked(value) else []


def test_a_writer_that_waited_after_losing_a_slot_reads_the_head_before_it_writes(monkeypatch) -> None:
    """A writer that lost a slot waits, then reads only the slots after it: if meanwhile another wrote the next slot,
    checkpointed it and its grace passed (the slot deleted), the wait must not count as a read of the head's key, or the
    put-if-absent lands on the deleted slot and the post is lost (found by review: the follow had reset the state's
    age)."""
    clock, inner, reference = Clock(), MemoryStore(appends=False), MemoryStore()
    a, b = (SlotStore(inner, every=2, grace=1.0, clock=clock) for _ in range(2))
    b.put(KEY, PLAIN)
    reference.put(KEY, PLAIN)
    a.get(KEY)
    b.get(KEY)
    b.append_log(KEY, PLAIN, _record(1, ["b"]), 10_000)  # slot 1: a loses it
    reference.append_log(KEY, PLAIN, _record(1, ["b"]), 10_000)

    def meanwhile(_: float) -> None:  # while a waits: slot 2 and its checkpoint, then a grace passes (b deletes both)
        b.append_log(KEY, b.get(KEY).value, _record(2, ["c"]), 10_000)
        reference.append_log(KEY, reference.get(KEY).value, _record(2, ["c"]), 10_000)
        clock.now += 1.1
        b.get(KEY)

    monkeypatch.setattr(slots.time, "sleep", meanwhile)
    clock.now = 0.1
    landed = a.append_log(KEY, PLAIN, _record(3, ["a"]), 10_000)
    expected = reference.append_log(KEY, PLAIN, _record(3, ["a"]), 10_000)
    assert _nonces(landed.value) == _nonces(expected.value) == [f"{n:016x}" for n in (1, 2, 3)]
    for reader in (a, b, SlotStore(inner, every=2, grace=1.0, clock=clock)):
        assert _nonces(reader.get(KEY).value) == _nonces(expected.value)


@pytest.mark.parametrize("blind", ["put", "delete"])
def test_a_blind_write_of_a_head_is_a_slot_that_writers_holding_the_head_see(blind: str) -> None:
    """``put`` and ``delete`` of a head (a dump restored, a board dropped) go in a slot of the head's series: a writer
    holding a recent state of it is refused as by the reference (they had begun a new series, or deleted the key, and
    the writer's slot landed in the old series, acknowledged and never read); a delete's slots are deleted once the
    grace has passed, as are a series' left when another process made the head again first."""
    clock, inner, reference = Clock(), MemoryStore(appends=False), MemoryStore()
    a, b = (SlotStore(inner, every=8, grace=1.0, clock=clock) for _ in range(2))
    for store in (a, reference):
        store.put(KEY, PLAIN)
    held, held_reference = a.get(KEY), reference.get(KEY)
    for store in (b, reference):
        store.put(KEY, b"\x81\xa1w\x01") if blind == "put" else store.delete(KEY)
    clock.now += 0.2
    for store, record in ((a, held), (reference, held_reference)):
        with pytest.raises(mdss.ConflictError):
            store.append_log(KEY, record.value, _record(1, ["a"]), 10_000)
        with pytest.raises(mdss.ConflictError):
            store.cas(KEY, b"\x81\xa1x\x02", record.version)
    fresh = SlotStore(inner, every=8, grace=1.0, clock=clock).get(KEY)
    assert (fresh and fresh.value) == (reference.get(KEY) and reference.get(KEY).value)
    if blind == "delete":
        a.cas(KEY, b"\x81\xa1y\x03", None)  # made again: a new series
        clock.now += 5
        a.get(KEY)
        b.get(KEY)
        assert [k for k in inner.keys("") if "~" in k] == []


def test_a_write_of_the_same_bytes_object_moves_the_version_and_an_empty_head_is_a_head() -> None:
    """A compare-and-set with the very bytes a read returned is a write (it had been taken for a resend: nothing
    written, the version unmoved); a head of no bytes reads back as one, not as absent."""
    store = SlotStore(MemoryStore(appends=False), grace=1.0)
    store.put(KEY, PLAIN)
    read = store.get(KEY)
    version = store.cas(KEY, read.value, read.version)
    assert version != read.version
    with pytest.raises(mdss.ConflictError):
        store.cas(KEY, b"\x81\xa1z\x04", read.version)
    store.put("mdss:e:h", b"")
    assert store.get("mdss:e:h").value == b"" and SlotStore(store.inner).get("mdss:e:h").value == b""


def test_a_grace_under_a_second_is_refused() -> None:
    with pytest.raises(mdss.InvalidArgumentError):
        SlotStore(MemoryStore(appends=False), grace=0.05)


class _HeadWritesFail(MemoryStore):
    """A memory store whose writes of a head's key and deletes fail as an unreachable store would, when ``failing``."""

    failing = False

    def _cas(self, key, value, version):
        if self.failing and key.endswith(":h"):
            raise mdss.StoreUnavailableError("injected: the head's key is unreachable")
        return super()._cas(key, value, version)

    def _delete_many(self, keys):
        if self.failing:
            raise mdss.StoreUnavailableError("injected: deletes fail")
        return super()._delete_many(keys)


def test_a_checkpoint_or_a_cleanup_that_fails_leaves_the_landed_commit_landed() -> None:
    """A checkpoint is the writer's extra work after its slot landed: a store that fails it (a lost reply, a down
    node) must not make the commit look ambiguous (the next checkpoint catches up); slots whose deletes fail wait for
    the next call, not lost."""
    clock, inner = Clock(), _HeadWritesFail(appends=False)
    store = SlotStore(inner, every=2, grace=1.0, clock=clock)
    store.put(KEY, PLAIN)
    inner.failing = True
    for i in range(1, 5):  # slots 2 and 4 would checkpoint
        store.append_log(KEY, store.get(KEY).value, _record(i, [f"m{i}"]), 10_000)
    inner.failing = False
    assert _nonces(SlotStore(inner, grace=1.0, clock=clock).get(KEY).value) == [f"{i:016x}" for i in range(1, 5)]
    store.append_log(KEY, store.get(KEY).value, _record(5, ["m5"]), 10_000)
    store.append_log(KEY, store.get(KEY).value, _record(6, ["m6"]), 10_000)  # slot 6 checkpoints all before it
    assert inner.get(KEY).value[:1] == CHECKPOINT and int.from_bytes(inner.get(KEY).value[9:17], "big") == 6
    inner.failing = True
    clock.now += 5
    store.get(KEY)  # its deletes fail: the slots wait
    inner.failing = False
    store.get(KEY)
    assert [k for k in inner.keys("") if "~" in k] == []


def _slots_of(inner: MemoryStore, head: str) -> list[int]:
    return sorted(int(k.rpartition(".")[2]) for k in inner.keys(head + "~"))


def test_a_sweep_deletes_what_ended_processes_left_and_keeps_the_slots_reads_need() -> None:
    """A process that ends within the grace of its checkpoints leaves the slots they covered (and a deleted head's):
    a sweep in another process deletes them a grace after its read of the head, and keeps the slots after the
    checkpoint, among them a delete whose writer stopped before it removed the head's key (it is what makes the head
    read as absent)."""
    clock, inner = Clock(), MemoryStore(appends=False)
    ended = SlotStore(inner, every=2, grace=1.0, clock=clock)
    ended.put(KEY, PLAIN)
    for i in range(1, 6):
        ended.append_log(KEY, ended.get(KEY).value, _record(i, [f"m{i}"]), 10_000)
    gone, stopped = "mdss:gone:h", "mdss:stopped:h"
    for key in (gone, stopped):
        ended.put(key, PLAIN)
        ended.append_log(key, PLAIN, _record(9, ["m"]), 10_000)
    before = inner.get(stopped).value
    ended.delete(gone)
    ended.delete(stopped)
    inner.put(stopped, before)  # as if its writer stopped between its delete's slot and removing the key
    assert _slots_of(inner, KEY) == [1, 2, 3, 4, 5] and _slots_of(inner, gone) == [1, 2]
    expected = ended.get(KEY).value

    sweeper = SlotStore(inner, grace=1.0, clock=clock)
    assert [sweeper.sweep(key) for key in (KEY, gone, stopped, "mdss:none:h")] == [1.0, 1.0, 0.0, 0.0]
    clock.now += 0.9
    sweeper.sweep("mdss:none:h")
    assert _slots_of(inner, KEY) == [1, 2, 3, 4, 5]  # not before the grace
    clock.now += 0.1
    sweeper.sweep("mdss:none:h")
    assert _slots_of(inner, KEY) == [5] and _slots_of(inner, gone) == [] and _slots_of(inner, stopped) == [1, 2]
    for reader in (sweeper, SlotStore(inner, grace=1.0, clock=clock)):
        assert reader.get(KEY).value == expected and reader.get(gone) is None and reader.get(stopped) is None


def test_gc_with_sweep_deletes_the_slots_an_ended_process_left() -> None:
    inner = MemoryStore(appends=False)
    board = mdss.SortedSet(SlotStore(inner, every=2, grace=1.0), "b", log_limit=10_000)
    for i in range(7):
        board.add(f"m{i}", i)
    head = board.keys.head
    left = _slots_of(inner, head)
    assert len(left) >= 6  # its process "ends": its doomed slots are never deleted by it
    other = mdss.SortedSet(SlotStore(inner, every=2, grace=1.0), "b", gc_grace=0.0)
    other.gc(sweep=True)
    base = int.from_bytes(inner.get(head).value[9:17], "big")
    assert base >= 6 and _slots_of(inner, head) == list(range(base + 1, left[-1] + 1))
    assert {e.member: e.score for e in other} == {f"m{i}": i for i in range(7)}


def test_a_put_that_lands_late_on_a_covered_slot_is_an_unknown_outcome_that_a_resend_settles() -> None:
    """A writer paused between its read of the head and its put (a stopped process, a store call's long retries) while
    another took the same slot, checkpointed it and deleted it a grace later: its put-if-absent lands on the deleted
    slot, behind the checkpoint, never read. It had been acknowledged (a lost post); now a put that lands half the
    grace or more after the read is checked against the head's key, and is an unknown outcome when covered: the
    append sent again (as for a lost reply) lands in a slot read after the checkpoint."""
    clock, inner = Clock(), MemoryStore(appends=False)
    slow, fast = (SlotStore(inner, every=1, grace=1.0, clock=clock) for _ in range(2))
    slow.put(KEY, PLAIN)
    held = slow.get(KEY).value
    fast.get(KEY)
    real, stall = inner.cas, [True]

    def stalled(key, value, version):
        if "~" in key and stall[0]:
            stall[0] = False
            fast.append_log(KEY, held, _record(1, ["m1"]), 10_000)  # the same slot, checkpointed at once
            clock.now += 1.5
            fast.get(KEY)  # and deleted once its grace has passed
            assert inner.get(key) is None
        return real(key, value, version)

    inner.cas = stalled  # type: ignore[method-assign]
    with pytest.raises(mdss.OutcomeUnknownError):
        slow.append_log(KEY, held, _record(2, ["m2"]), 10_000)
    slow.append_log(KEY, held, _record(2, ["m2"]), 10_000)  # sent again, as mdss._append does
    assert _nonces(SlotStore(inner, grace=1.0, clock=clock).get(KEY).value) == [f"{i:016x}" for i in (1, 2)]


def test_a_post_whose_slot_landed_late_behind_a_checkpoint_is_sent_again_by_the_set() -> None:
    clock, inner = Clock(), MemoryStore(appends=False)
    stores = [SlotStore(inner, every=1, grace=1.0, clock=clock) for _ in range(2)]
    slow, fast = (mdss.SortedSet(store, "b", log_limit=10_000) for store in stores)
    slow.add("first", 1)
    fast.add("second", 2)
    assert slow.score("second") == 2 and fast.score("first") == 1  # both hold the same head
    real, stall = inner.cas, [True]

    def stalled(key, value, version):
        if "~" in key and stall[0]:
            stall[0] = False
            fast.add("third", 3)  # takes the slot the slow writer is putting, checkpointed at once
            clock.now += 1.5
            stores[1].get(slow.keys.head)  # the slot deleted, its grace passed
        return real(key, value, version)

    inner.cas = stalled  # type: ignore[method-assign]
    assert slow.add("fourth", 4) is True
    reader = mdss.SortedSet(SlotStore(inner, grace=1.0, clock=clock), "b")
    assert {e.member: e.score for e in reader} == {"first": 1, "second": 2, "third": 3, "fourth": 4}


def test_a_late_slot_whose_cover_cannot_be_read_is_a_doubt_not_a_refusal() -> None:
    """A slot put that landed over half the grace after its head was read is checked against the head's key; a
    refused read of it (DynamoDB's throttling, SQLite's lock) escaped as StoreRefusedError, "nothing applied", though
    the slot had landed (a review). It is a doubt now, which mdss answers by sending the commit again: it finds its
    record and the incr counts once."""
    now = [1000.0]

    class Inner(MemoryStore):
        slow_slot = refuse_head_reads = False

        def _cas(self, key, value, version):
            out = super()._cas(key, value, version)
            if self.slow_slot and "~" in key:  # the slot landed, late
                self.slow_slot, self.refuse_head_reads = False, True
                now[0] += 1.5  # grace 2: over half of it since the head was read
            return out

        def _get(self, key):
            if self.refuse_head_reads and key.endswith(":h"):
                self.refuse_head_reads = False
                raise mdss.StoreRefusedError("throttled past the retry budget (injected)")
            return super()._get(key)

    inner = Inner(appends=False)
    store = SlotStore(inner, grace=2, clock=lambda: now[0])
    board = mdss.SortedSet(store, "s")
    board.add_many({"a": 1, "b": 2})
    inner.slow_slot = True
    assert board.incr("a", 10) == 11
    assert mdss.SortedSet(SlotStore(inner, grace=2, clock=lambda: now[0]), "s").score("a") == 11
