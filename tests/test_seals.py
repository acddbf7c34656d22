"""Store-applied seals and bridged heads (``mdss._tail.swap``, ``Store.swap_core``), adversarially: the Redis
script against the reference on crafted (damaged) bridged heads; refusals that stay refusals; held-back
requests of appends and seals replayed at any later point. (Appends themselves: test_tail.py.)"""

from __future__ import annotations

import contextlib
import hashlib
import uuid
from collections import Counter
from typing import Any

import pytest
from depth import budget, examples
from faulty import FaultyStore
from hypothesis import given, settings
from hypothesis import strategies as st
from test_log_faults import Clock, _MergeTime
from test_tail import _reference, _run, _steps

import mdss
import mdss._merge
import mdss._retry
import mdss._writer
from mdss import _log, _tail
from mdss._codec import pack


def _rec(nonce: bytes, members: list[str], body: int = 0) -> bytes:
    """A record with these tokens and nonce (the store never decodes the entries)."""
    payload = nonce + bytes([len(members)]) + b"".join(map(_tail.token, members)) + b"\x90" * body
    return len(payload).to_bytes(2, "big") + payload


MEMBERS = st.lists(st.sampled_from(["a", "b", "c"]), max_size=2, unique=True)
RECORD = st.builds(_rec, st.binary(min_size=8, max_size=8), MEMBERS, st.integers(0, 3))


@st.composite
def _crafted(draw):
    """A head (plain, tailed, bridged from one core or from several), perhaps damaged in its bridges'
    header; a writer's view of it (the core's SHA-1, the parent's, one further back, or another; any
    ``seen``); a record (or none); a cap; a core or not."""
    core = b"\x81\xa1v" + draw(st.binary(min_size=1, max_size=4))
    records = draw(st.lists(RECORD, max_size=4))
    parent = hashlib.sha1(b"p").digest()
    if draw(st.booleans()):
        parent = hashlib.sha1(core).digest()  # a parent's SHA-1 equal to the core's
    others = [hashlib.sha1(bytes([i])).digest() for i in range(3)]  # the cores further back
    if draw(st.integers(0, 3)) == 0:
        others[0] = draw(st.sampled_from([hashlib.sha1(core).digest(), parent]))  # SHA-1s equal to another's
    kind = draw(st.sampled_from(["plain", "tailed", "bridged", "bridged", "bridged", "bridges", "bridges"]))
    joined = b"".join(records)
    cuts = [0] + [sum(map(len, records[: i + 1])) for i in range(len(records))]
    if kind == "plain":
        value = core
    elif kind == "tailed":
        value = _tail.tailed(core) + joined
    elif kind == "bridges":  # N cores, starts then ends in order at records' ends (or anywhere), then B
        n = draw(st.sampled_from([2, 2, 3, 4, 0, 1, 9]))
        c = sorted(draw(st.lists(st.sampled_from(cuts), min_size=2 * n + 1, max_size=2 * n + 1)))
        starts, tail, ends = c[:n], c[n] if n else 0, c[n + 1 :]
        if draw(st.integers(0, 3)) == 0:
            starts, ends = (draw(st.lists(st.integers(0, len(joined) + 4), min_size=n, max_size=n)) for _ in "se")
            tail = draw(st.integers(0, len(joined) + 4))
        shas = [*others, parent][-n:] if 0 < n <= 4 else [others[0]] * n
        value = b"".join(
            (
                _tail.BRIDGES,
                hashlib.sha1(core).digest(),
                len(core).to_bytes(4, "big"),
                core,
                bytes([n]),
                *(h + a.to_bytes(4, "big") + b.to_bytes(4, "big") for h, a, b in zip(shas, starts, ends)),
                tail.to_bytes(4, "big"),
                joined,
            )
        )
        if draw(st.integers(0, 3)) == 0:
            value = value[: draw(st.integers(0, len(value)))]
    else:
        size = draw(st.sampled_from(cuts))  # P: up to a record's end, or anywhere
        if draw(st.integers(0, 3)) == 0:
            size = draw(st.integers(0, len(joined) + 4))
        bridge = draw(st.sampled_from([c for c in cuts if c <= size] or [0]))
        if draw(st.integers(0, 3)) == 0:
            bridge = draw(st.integers(0, size + 4))
        value = (
            _tail.BRIDGED
            + hashlib.sha1(core).digest()
            + len(core).to_bytes(4, "big")
            + core
            + parent
            + size.to_bytes(4, "big")
            + bridge.to_bytes(4, "big")
            + joined
        )
        if draw(st.integers(0, 3)) == 0:
            value = value[: draw(st.integers(0, len(value)))]  # truncated anywhere (headers included)
    sha = draw(st.sampled_from([hashlib.sha1(core).digest(), parent, parent, *others, hashlib.sha1(b"x").digest()]))
    ends = [sum(map(len, records[:i])) for i in range(len(records) + 1)]
    seen = draw(st.one_of(st.sampled_from(ends), st.integers(0, len(joined) + 3)))
    record = draw(st.one_of(st.just(b""), RECORD))
    cap = draw(st.sampled_from([0, 20, 60, 10_000]))
    new = b"\x82\xa1w\x01" if draw(st.booleans()) else None
    if new is None and not record:
        record = _rec(b"\x00" * 8, ["a"])
    return value, sha, seen, record, cap, new, draw(st.booleans())


def _python(value, sha, seen, record, cap, new, lagging):
    try:
        if new is None:
            return "ok", _tail.apply(value, sha, seen, record, cap)
        return "ok", _tail.swap(value, sha, seen, new, record, cap, lagging)
    except _tail.Refused as exc:
        return ("full" if exc.full else "refused"), value


@pytest.mark.parametrize("redis_kind", ["redis", "redis-cluster"])
def test_the_script_agrees_with_the_reference_on_crafted_bridged_heads(redis_kind, request) -> None:
    """Truncated bridge headers, P < B, P past the end, a parent SHA-1 equal to the core's, P and B inside
    records, empty records, ``seen`` past P: the script refuses, appends or seals exactly as the reference."""
    url = request.getfixturevalue("redis_url" if redis_kind == "redis" else "redis_cluster_url")
    store = mdss.open_store(f"{url}?namespace=t{uuid.uuid4().hex[:12]}")
    request.addfinalizer(store.close)
    script, key = store._tail_script, f"crafted{uuid.uuid4().hex[:8]}"

    @settings(max_examples=budget(400), deadline=None)
    @given(_crafted())
    def check(case):
        value, sha, seen, record, cap, new, lagging = case
        store.put(key, value)
        expected, after = _python(value, sha, seen, record, cap, new, lagging)
        args = [sha, seen, record, cap] + (["1" if lagging else "0", new] if new is not None else [])
        got = script(keys=[key], args=args)
        outcome = {0: "refused", 1: "ok", 2: "full", 3: "ok"}[got[0]]
        assert outcome == expected
        assert store.get(key).value == after

    check()


def test_a_refused_append_or_seal_is_refused_at_every_later_head() -> None:
    """What ``_appended`` relies on: a request (an append, a seal, a merge) the store refused never lands
    later, and one that landed never lands again, whatever came in between (appends, seals, merges, new
    cores): a request held back on the network and run at any later point changes nothing then."""

    @settings(max_examples=budget(300), deadline=None)
    @given(_steps())
    def check(steps):
        values, sent = [b"\x81\xa1v\x00"], []

        def apply(value, held, record, cap, core):
            if record is None:
                values.append(held)
                return None, "stored"
            new, outcome = _reference(value, held, record, cap, core)
            sent.append((len(values) - 1, held, record, cap, core, outcome))
            if new is not None:
                values.append(new)
            return new, outcome

        _run(steps, apply)
        for at, held, record, cap, core, _ in sent:
            for later in values[at + 1 :]:  # after it was refused, or landed (its own result included)
                again, _ = _reference(later, held, record, cap, core)
                assert again is None or again == later

    check()


class _HeldBack(FaultyStore):
    """When armed, the ``skip``-th next head write (an append, a seal or merge swap, a compare-and-set)
    is held back: the call fails as if the connection broke, and the request reaches the store later
    (:meth:`release`), after the writer's resends and other writers' commits."""

    armed: int | None = None

    def __init__(self, inner, queue: list) -> None:
        super().__init__(inner)
        self.queue = queue

    def _hold(self, name: str, key: str, *args) -> Any:
        if self.armed is not None and key.endswith(":h"):
            if self.armed == 0:
                self.armed = None
                self.queue.append((self.inner, name, (key, *args)))
                raise mdss.StoreUnavailableError(f"{name} held back")
            self.armed -= 1
        return self._call(name, key, *args)

    def _append(self, key, held, sha, seen, record, cap):
        return self._hold("_append", key, held, sha, seen, record, cap)

    def _swap(self, key, held, sha, seen, core, record, cap, nodes, lagging=False):
        return self._hold("_swap", key, held, sha, seen, core, record, cap, nodes, lagging)

    def _cas(self, key, value, version):
        return self._hold("_cas", key, value, version)


def release(queue: list, n: int) -> None:
    for inner, name, args in queue[:n]:
        with contextlib.suppress(mdss.ConflictError):
            getattr(inner, name)(*args)
    del queue[:n]


HELD_STEP = st.tuples(
    st.integers(0, 2),  # writer
    st.sampled_from(["a", "b", "c", "merge"]),  # an incr of a member, or a merge
    st.one_of(st.none(), st.integers(0, 2)),  # hold back its first (second, third) head write
    st.lists(st.tuples(st.integers(0, 2), st.sampled_from(["a", "b", "c", "d", "merge", "gc"])), max_size=5),
    st.integers(0, 2),  # held-back requests that reach the store after the step
)


@pytest.mark.grid("inline", size=2)  # by default each store runs one of the two, in turn (conftest.py)
@pytest.mark.parametrize("inline", [40, 200])
def test_held_back_appends_seals_and_merges_reaching_the_store_late_keep_incr_exact(store_factory, inline) -> None:
    """Head writes (appends, seals, merge claims and merges, compare-and-sets) held back on the network
    and run by the store at any later point, after the writer resent and moved on and other writers
    appended, sealed and merged: every acknowledged incr applied once with its exact result, an unknown
    outcome at most once, ``check()`` clean."""

    kind = store_factory.kind  # fewer examples on the networked stores, all under MDSS_DEEP (depth.examples)
    budget = 80 if kind.startswith("memory") else examples(kind, 25, divisor=4 if kind == "dynamodb" else 2)

    @settings(max_examples=budget, deadline=None)
    @given(steps=st.lists(HELD_STEP, min_size=1, max_size=20), log_limit=st.sampled_from([3, 8, 10_000]))
    def check(steps, log_limit):
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(_log, "INLINE_BYTES", inline)
            mp.setattr(_tail, "TAIL_BYTES", 150)
            # Merge leases on a virtual clock that a waiting merger moves on; no backoff between retries.
            mp.setattr(mdss._writer, "clock", Clock.now)
            mp.setattr(mdss._merge, "time", _MergeTime)
            mp.setattr(mdss._retry.Backoff, "delay", lambda self, attempt: 0.0)
            _held_back(store_factory(), steps, log_limit)

    check()


def _held_back(store, steps, log_limit) -> None:
    queue: list = []
    stores = [_HeldBack(store, queue) for _ in range(3)]
    sets = [mdss.SortedSet(s, "b", chunk_size=2, log_limit=log_limit, gc_grace=0) for s in stores]
    sets[0].add("z", 0)
    acked: dict[str, list[float]] = {m: [] for m in "abcd"}
    unknown: Counter[str] = Counter()

    def run(sset, what):
        try:
            if what == "merge":
                sset.merge()
            elif what == "gc":
                sset.gc(wait=False)
            else:
                acked[what].append(sset.incr(what, 1))
        except mdss.OutcomeUnknownError:
            if what not in ("merge", "gc"):
                unknown[what] += 1
        except mdss.StoreUnavailableError:  # a plain failure: not applied
            assert what in ("merge", "gc")

    for writer, what, hold, meanwhile, late in steps:
        stores[writer].armed = hold
        run(sets[writer], what)
        stores[writer].armed = None
        for other, more in meanwhile:
            run(sets[other], more)
        release(queue, late)
    release(queue, len(queue))
    fresh = mdss.SortedSet(store, "b")
    assert fresh.check() == []
    for member, got in acked.items():
        final = fresh.score(member) or 0
        assert len(set(got)) == len(got), (member, got)  # exact: no two incrs saw the same score
        assert all(g <= final for g in got), (member, got, final)
        assert len(got) <= final <= len(got) + unknown[member], (member, got, final, unknown)
    for sset in sets:  # the objects that took part agree with the store
        assert [sset.score(m) or 0 for m in "abcd"] == [fresh.score(m) or 0 for m in "abcd"]


class _DiesAtSwap(FaultyStore):
    """Once armed, the process dies at its next head write (a seal's swap, or a compare-and-set)."""

    armed = False

    def _arm(self, key: str) -> None:
        if self.armed and key.endswith(":h"):
            self.fail_at, self.dies = self.count + 1, True

    def _swap(self, key, held, sha, seen, core, record, cap, nodes, lagging=False):
        self._arm(key)
        return self._call("_swap", key, held, sha, seen, core, record, cap, nodes, lagging)

    def _cas(self, key, value, version):
        self._arm(key)
        return self._call("_cas", key, value, version)


def test_a_seal_from_a_held_head_of_a_dropped_set_leaves_no_node_when_killed(store_factory) -> None:
    """A writer holding the head of a set that another process dropped since seals (its commit takes the
    inline entries past INLINE_BYTES): it must read the head before it writes the segment, as every
    commit that writes nodes does from a head it did not read just now, unless the store writes the
    segment with the core, in one step (``seals_nodes``); killed between the segment write and the swap,
    it would leave a node without a head, and the set, started again, refuses every write
    (HeadMissingError)."""
    store = store_factory()
    dying = _DiesAtSwap(store)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(_log, "INLINE_BYTES", 60)
        writer = mdss.SortedSet(dying, "b", log_limit=10_000)
        for i in range(30):
            writer.add(f"m{i}", i)
            if len(pack(writer.engine.head.log.inline)) > 40:
                break  # the next commit takes the inline entries past INLINE_BYTES
        mdss.SortedSet(store, "b").drop()
        dying.armed = True
        with pytest.raises(mdss.StoreUnavailableError):
            writer.add("n", 1)
        fresh = mdss.SortedSet(store, "b")
        fresh.add("x", 1)
        assert fresh.scores(["x", "n"]) == [1, None]
        assert fresh.check() == []


def test_a_writer_whose_seal_landed_holds_the_head_the_store_holds(store) -> None:
    """A writer builds the head its own seal leaves from the core it sent and the records after the bridge, without
    decoding the stored head: that head equals the stored one decoded, with others' appends before the seal too."""
    if not store.appends:
        return
    writer = mdss.SortedSet(store, "b", log_limit=10_000)
    other = mdss.SortedSet(store, "b", log_limit=10_000)
    writer.add("w", 0)
    seals = 0
    for i in range(300):
        if i % 3 == 0:
            other.add(f"o{i:03d}-{'p' * 20}", i)  # lands in the tail the writer's next seal bridges
            continue
        before = _tail.core(store.get(writer.keys.head).value)
        writer.add(f"m{i:03d}-{'p' * 20}", i)
        value = store.get(writer.keys.head).value
        held = writer.engine.writer.held
        assert held is not None and held[0].value == value
        assert held[1] == mdss._head.Head.decode(writer.keys.head, value)
        seals += _tail.core(value) != before
    assert seals >= 3


def test_a_seal_costs_one_round_trip_where_the_store_writes_its_nodes(store) -> None:
    """Where the store writes a seal's segment in the same step as its core (``seals_nodes``: one Redis server, the
    memory store), a writer seals from the head it holds: every single add, sealing or not, is one store call, and the
    segments it names are stored."""
    if not store.seals_nodes:
        return
    counted = FaultyStore(store)
    writer = mdss.SortedSet(counted, "b", log_limit=10_000)
    writer.add("w", 0)
    before = counted.count
    for i in range(200):
        writer.add(f"m{i:03d}-{'p' * 20}", i)
    assert counted.count - before == 200
    log = mdss._snapshot.snapshot(writer.engine).head.log
    assert log.segs or log.pages  # it sealed
    fresh = mdss.SortedSet(store, "b", cache_bytes=0)
    assert len(fresh) == 201 and fresh.score("m199-" + "p" * 20) == 199 and fresh.check() == []
