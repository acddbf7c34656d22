"""Every value mdss stores stays under a bound whatever the history, and a commit's cost does not grow with the
log (issue "Reliability", item 4).

Before: each sealed log segment added ~34 bytes to the log manifest, and every ninth seal rewrote all of it.
With members of 250 bytes (a seal per commit of four) the manifest passed DynamoDB's 400 KB item after ~12,000
commits: from then on every write was refused ("use a smaller chunk_size"), and nothing merged the log. Now
the head's segments move to the manifest compacted into one, the manifest lists at most
``mdss._log.PAGE_SEGS`` segments, and the log merges when it lists half of them (``docs/architecture.md``,
"The log's bounds").

The stores here refuse values over DynamoDB's limit (:class:`Limited`, over any store) and record the
largest value of each kind written (``mdss._codec.describe``).
"""

from __future__ import annotations

import random
from collections import defaultdict
from typing import Any

import pytest
from depth import DEEP
from faulty import FaultyStore
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule, run_state_machine_as_test
from strict_dynamodb import StrictClient
from test_log_faults import Clock, _MergeTime

import mdss
from mdss import _log
from mdss._codec import decode_log_page, describe, encode_leaf, encode_log_page
from mdss._nodes import MAX_DELTAS
from mdss._tail import TAIL_BYTES
from mdss._writer import largest_node_bytes, new_id
from mdss.stores.dynamodb import DynamoDBStore
from mdss.stores.memory import MemoryStore

#: DynamoDB's item limit, which the wrapper applies to every value.
DYNAMO = 400 * 1024
#: The bounds the issue asks for, by kind of value (``describe``): what each is held under, whatever the
#: history. Nodes (entry sets, manifests) are bounded by the chunk size (``largest_node_bytes``), checked apart.
BOUNDS = {
    "a set's head": 20 << 10,  # inline entries 1-2 KB, 8 segments, 8 notes, 16 nonces; bridges and a tail of 6 KB each
    "an update log segment": _log.SEGMENT_BYTES + 1024,  # one entry may end a piece past it (members <= 256 B)
    "an update log manifest": 64 << 10,  # PAGE_SEGS segments of the longest ids
    "a garbage note": 200 << 10,  # 4096 ids of at most 46 bytes
    "a garbage note page": 4 << 10,  # 9 note ids and the previous page's
    "a set's marker": 1,  # only its presence counts (mdss._snapshot.mark)
}


class Limited(FaultyStore):
    """``inner`` with DynamoDB's value limit: a value over ``limit`` bytes is refused as DynamoDB refuses it
    (before it reaches the store; a store-applied append whose result would pass it is a test failure).
    Records the largest value written per kind, and the longest log manifest."""

    def __init__(self, inner: mdss.Store, limit: int = DYNAMO) -> None:
        super().__init__(inner)
        self.max_value_bytes = limit
        self.largest: dict[str, int] = defaultdict(int)
        self.longest_manifest = 0
        self.too_large: list[str] = []

    def _seen(self, key: str, value: bytes) -> None:
        kind = describe(value)
        self.largest[kind] = max(self.largest[kind], len(value))
        if kind == "an update log manifest":
            self.longest_manifest = max(self.longest_manifest, len(decode_log_page(key, value)))
        if len(value) > self.max_value_bytes:
            self.too_large.append(f"{key}: {kind}, {len(value)} bytes")
            raise mdss.InvalidArgumentError(f"value for key {key!r} ({kind}) is {len(value):,} bytes")

    def _call(self, name: str, *args: Any) -> Any:
        if name in ("_put", "_cas"):
            self._seen(args[0], args[1])
        elif name == "_put_many":
            for key, value in args[0].items():
                self._seen(key, value)
        result = super()._call(name, *args)
        if name in ("_append", "_swap"):
            self._seen(args[0], result.value)
        return result


def big(i: int) -> str:
    """A member of 250 bytes (the issue's): four of them seal a segment per commit."""
    return f"member-{i:06d}-".ljust(250, "x")


def assert_bounded(store: Limited, chunk: int) -> None:
    assert not store.too_large
    for kind, size in store.largest.items():
        if kind in BOUNDS:
            assert size <= BOUNDS[kind], (kind, size)
        else:
            assert kind.startswith(("an entry set", "a tree manifest", "a patch of an entry set", "a delta")), kind
            # a patch is at most an entry set, a delta a manifest; a parent names a manifest with deltas by all its ids
            assert size <= largest_node_bytes(chunk, ids=MAX_DELTAS + 1), (kind, size)
    assert store.longest_manifest <= _log.PAGE_SEGS


def run_commits(sset: mdss.SortedSet, commits: int, members: int, seed: int) -> dict[str, int]:
    """``commits`` commits of four big members each (a seal per commit); the model of what they did."""
    rng, model = random.Random(seed), {}
    for _ in range(commits):
        batch = {big(m): rng.randrange(10**9) for m in rng.sample(range(members), 4)}
        sset.add_many(batch)
        model.update(batch)
    return model


def assert_equal(sset: mdss.SortedSet, model: dict[str, int]) -> None:
    expected = sorted(model.items(), key=lambda item: (-item[1], item[0]))
    assert [(e.member, e.score) for e in sset] == expected
    assert len(sset) == len(model)
    assert sset.check() == []


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_twenty_thousand_commits_of_big_members_stay_under_dynamodbs_limit(kind: str, tmp_path) -> None:
    """The issue's history: 20,000 commits of four 250-byte members with a log limit that never triggers. On
    main the log manifest passed 400 KB after ~12,000 commits and every write was refused; now the manifest
    bound merges the log, every commit lands, and every value stays under its bound."""
    inner = mdss.open_store("memory://" if kind == "memory" else f"sqlite:///{tmp_path}/bounds.db")
    store = Limited(inner)
    sset = mdss.SortedSet(store, "board", gc_grace=0, log_limit=10**7, chunk_size=64)
    model = run_commits(sset, 20_000, 3000, seed=1)
    assert sset.merges >= 3  # only the manifest bound merges: log_limit is 10 million
    head = mdss._snapshot.snapshot(sset.engine).head
    assert len(head.log) < 80_000 and _log.listed(sset.engine, head.log) < _log.PAGE_SEGS
    assert_bounded(store, 64)
    assert_equal(sset, model)


def test_the_manifest_bound_merges_on_every_store(store_factory, monkeypatch) -> None:
    """A lighter history on every store, with a bound of 64 segments (so that it triggers within 1,200
    commits): every commit lands, no manifest lists more, the set equals its model."""
    monkeypatch.setattr(_log, "PAGE_SEGS", 64)
    store = Limited(store_factory())
    sset = mdss.SortedSet(store, "board", gc_grace=0, log_limit=10**7, chunk_size=32)
    model = run_commits(sset, 1_200, 500, seed=2)
    assert sset.merges >= 2
    assert 0 < store.longest_manifest <= 64
    assert_bounded(store, 32)
    other = mdss.SortedSet(store, "board")  # a cold reader reads the log once
    assert_equal(other, model)


def test_every_value_kind_stays_under_its_bound_over_a_long_history() -> None:
    """Every kind of value over a long, mixed history (big and small batches, batches sealed into several
    segments and one past ``BATCH_BYTES`` that goes straight into the trees, removes, merges, gc, a replacing
    load): each under its stated bound (``BOUNDS``), nodes under ``largest_node_bytes(chunk)``."""
    store = Limited(MemoryStore())
    chunk = 100
    sset = mdss.SortedSet(store, "board", gc_grace=0, log_limit=10**7, chunk_size=chunk)
    rng = random.Random(3)
    model = run_commits(sset, 6_000, 4000, seed=4)  # past the manifest bound: merges
    for round_ in range(3):
        batch = {big(m): rng.randrange(10**9) for m in rng.sample(range(6000), 1500)}  # ~400 KB: pieces
        sset.add_many(batch)
        model.update(batch)
        gone = [big(m) for m in rng.sample(range(4000), 200)]
        sset.remove_many(gone)
        for m in gone:
            model.pop(m, None)
        model.update(run_commits(sset, 500, 4000, seed=10 + round_))
        sset.gc(wait=False, sweep=True)
    huge = {big(m): m for m in range(12_000)}  # ~3 MB of entries: past BATCH_BYTES, a direct commit
    sset.add_many(huge)
    model.update(huge)
    model.update(run_commits(sset, 1_000, 12_000, seed=20))
    sset.merge()
    assert store.largest["an update log segment"] > _log.SEGMENT_BYTES // 2  # big batches were sealed in pieces
    assert {"a set's head", "an update log segment", "an update log manifest", "a garbage note"} <= set(store.largest)
    assert_bounded(store, chunk)
    assert_equal(sset, model)
    sset = mdss.SortedSet.load(store, "board", {"a": 1, "b": 2}, replace=True, gc_grace=0)
    sset.gc(wait=False, sweep=True)
    assert_bounded(store, chunk)


def test_heads_with_a_full_tail_stay_under_their_bound() -> None:
    """A head's tail (store-applied appends by several writers) never passes ``TAIL_BYTES``: the head's bound."""
    store = Limited(MemoryStore())
    writers = [mdss.SortedSet(store, "board", gc_grace=0, log_limit=10**7) for _ in range(4)]
    rng = random.Random(5)
    for i in range(2_000):
        writers[rng.randrange(4)].add(big(rng.randrange(300)), i)
    assert store.largest["a set's head"] <= BOUNDS["a set's head"]
    assert BOUNDS["a set's head"] > 3 * TAIL_BYTES
    assert_bounded(store, 1000)


def test_a_commit_costs_the_same_with_a_long_log() -> None:
    """Bytes written and store calls per commit with 30,000 entries in the log are those with 1,000 (plus the
    log manifest's share, under its bound): on main they grew with the log, ~41 KB per commit at 48,000."""
    store = MemoryStore()
    sset = mdss.SortedSet(store, "board", gc_grace=0, log_limit=10**7)
    rng = random.Random(6)

    def window(commits: int) -> tuple[float, float]:
        before = store.stats.snapshot()
        for _ in range(commits):
            sset.add_many({f"player-{rng.randrange(10**6):07d}": rng.randrange(10**6) for _ in range(4)})
        done = store.stats.since(before)
        return done["bytes_written"] / commits, done["calls"] / commits

    window(250)
    early = window(500)
    while len(mdss._snapshot.snapshot(sset.engine).head.log) < 30_000:
        window(500)
    late = window(500)
    assert sset.merges == 0 and len(mdss._snapshot.snapshot(sset.engine).head.log) >= 30_000
    assert late[0] < early[0] + 1024, (early, late)
    assert late[1] <= early[1] * 1.1, (early, late)


def test_a_value_too_large_for_dynamodb_names_what_it_is() -> None:
    """The refusal names the kind of value; only a node the chunk size bounds hints at the chunk size."""
    store = DynamoDBStore("strict", client=StrictClient(), retry_budget=2, backoff=0.001)
    manifest = encode_log_page([(new_id(1), i) for i in range(20_000)])
    with pytest.raises(mdss.InvalidArgumentError) as raised:
        store.put("a:b:n:x", manifest)
    assert "update log manifest" in str(raised.value) and "chunk_size" not in str(raised.value)
    leaf = encode_leaf(["m" * 250] * 2000, list(range(2000)), compress=False)  # as incompressible members are stored
    with pytest.raises(mdss.InvalidArgumentError) as raised:
        store.put("a:b:n:y", leaf)
    assert "entry set" in str(raised.value) and "chunk_size" in str(raised.value)


# -- tiny bounds, crashes, against a model --------------------------------------------------------------------


class TinyBounds(RuleBasedStateMachine):
    """Several objects on one store, with bounds so small that they trigger constantly (a segment every
    ~64 bytes of entries, 1 segment in the head, a manifest of at most 14 that merges at 7, batches of ~200
    bytes at most), failures, lost replies and crashes (the process dies: every later call fails, and its
    object is abandoned) at any store call, and a model; after every step the set equals it through every
    object and a fresh one, ``check()`` is clean, and every value written stayed under its bound."""

    def __init__(self) -> None:
        super().__init__()
        self.store = Limited(MemoryStore())
        self.model: dict[str, int] = {}

    @initialize(appends=st.booleans(), chunk=st.integers(2, 5), limit=st.sampled_from([10**7, 40]), soft=st.booleans())
    def open(self, appends: bool, chunk: int, limit: int, soft: bool) -> None:
        """``soft=False``: no merge when the manifest is half full, so that commits meet the hard bound."""
        if not soft:
            self._crowded, _log.crowded = _log.crowded, lambda sset, log: False
        self.store = Limited(MemoryStore(appends=appends))
        self.options = {"chunk_size": chunk, "gc_grace": 0, "log_limit": limit, "retry_budget": 5}
        self.sets = [mdss.SortedSet(self.store, "b", **self.options) for _ in range(2)]

    def _run(self, which: int, batch: dict[str, int], fail_at: int | None, after: bool, dies: bool = False) -> None:
        store = self.store
        store.fail_at, store.after, store.dies, store.count = fail_at, after, dies, 0
        try:
            self.sets[which].add_many(batch)
        except mdss.StoreUnavailableError as exc:  # in entirely or not at all (a plain failure: not at all)
            store.fail_at, store.dies = None, False
            if dies:  # kill -9: the object is abandoned, another process carries on
                self.sets[which] = mdss.SortedSet(store, "b", **self.options)
            now = dict(zip(batch, self.sets[0].scores(list(batch))))
            applied = all(now[m] == s for m, s in batch.items())
            assert applied or all(now[m] == self.model.get(m) for m in batch), (batch, now)
            assert (
                dies
                or isinstance(exc, mdss.OutcomeUnknownError)
                or not applied
                or all(self.model.get(m) == s for m, s in batch.items())
            )
            if applied:
                self.model.update(batch)
            return
        finally:
            store.fail_at, store.dies = None, False
        self.model.update(batch)

    @rule(
        which=st.integers(0, 1),
        members=st.lists(st.integers(0, 30), min_size=1, max_size=12, unique=True),
        width=st.sampled_from([1, 20, 60]),
        score=st.integers(0, 10**6),
        fail_at=st.none() | st.integers(1, 12),
        after=st.booleans(),
        dies=st.booleans(),
    )
    def add(
        self, which: int, members: list[int], width: int, score: int, fail_at: int | None, after: bool, dies: bool
    ) -> None:
        batch = {f"m{m}".ljust(width, "-"): score + i for i, m in enumerate(members)}
        self._run(which, batch, fail_at, after, dies)

    @rule(which=st.integers(0, 1), start=st.integers(0, 30), commits=st.integers(2, 12))
    def run(self, which: int, start: int, commits: int) -> None:
        """Commits of wide members in a row, one seal each: the log's manifest grows to its bounds."""
        for i in range(commits):
            self._run(which, {f"w{(start + i) % 31}".ljust(60, "-"): i}, None, False)

    @rule(which=st.integers(0, 1))
    def merge(self, which: int) -> None:
        self.sets[which].merge()

    @rule()
    def gc(self) -> None:
        self.sets[0].gc(wait=False, sweep=True)

    def teardown(self) -> None:
        if hasattr(self, "_crowded"):
            _log.crowded = self._crowded

    @invariant()
    def agrees(self) -> None:
        if not hasattr(self, "sets"):
            return
        expected = sorted(self.model.items(), key=lambda item: (-item[1], item[0]))
        for sset in self.sets:
            assert [(e.member, e.score) for e in sset] == expected
        fresh = mdss.SortedSet(self.store, "b")
        assert [(e.member, e.score) for e in fresh] == expected
        assert fresh.check() == []
        assert not self.store.too_large
        assert self.store.longest_manifest <= _log.PAGE_SEGS
        assert self.store.largest["an update log segment"] <= _log.SEGMENT_BYTES + 64


def test_tiny_bounds_against_a_model_with_failures(monkeypatch) -> None:
    """A failed merge leaves its claim: on the virtual clock of ``test_log_faults``, a writer waiting for its
    lease moves the clock on instead of sleeping 10 s."""
    monkeypatch.setattr(mdss._writer, "clock", Clock.now)
    monkeypatch.setattr(mdss._merge, "time", _MergeTime)
    monkeypatch.setattr(mdss._retry.Backoff, "delay", lambda self, attempt: 0.0)
    Clock.offset = Clock.waited = 0.0
    for name, value in (("INLINE_BYTES", 64), ("SEGMENT_BYTES", 200), ("SEGS_INLINE", 1), ("PAGE_SEGS", 14)):
        monkeypatch.setattr(_log, name, value)
    monkeypatch.setattr(_log, "BATCH_BYTES", _log.SEGS_INLINE * _log.SEGMENT_BYTES)
    budget = settings(max_examples=20 if DEEP else 10, stateful_step_count=50, deadline=None)  # 20 took 13 to 89 s
    run_state_machine_as_test(TinyBounds, settings=budget)


def test_a_manifest_past_the_bound_as_main_wrote_it_is_merged_by_the_next_move(monkeypatch) -> None:
    """A set whose log manifest lists more segments than the bound (written before the bound existed, when
    nothing limited it): it decodes, reads answer over it, and the next commits merge the log (past half the
    bound after a commit, past the bound before a move); from then on the manifest stays under the bound."""
    store = Limited(MemoryStore())
    monkeypatch.setattr(_log, "PAGE_SEGS", 10**6)  # no bound while the long manifest is written
    sset = mdss.SortedSet(store, "board", gc_grace=0, log_limit=10**7, chunk_size=16)
    model = run_commits(sset, 700, 400, seed=7)  # ~85 moves: a manifest of ~85 compacted segments
    long = _log.listed(sset.engine, mdss._snapshot.snapshot(sset.engine).head.log)
    assert long > 64 and sset.merges == 0
    monkeypatch.setattr(_log, "PAGE_SEGS", 64)
    store.longest_manifest = 0
    assert_equal(mdss.SortedSet(store, "board"), model)
    model.update(run_commits(sset, 100, 400, seed=8))
    assert sset.merges >= 1 and store.longest_manifest <= 64
    assert _log.listed(sset.engine, mdss._snapshot.snapshot(sset.engine).head.log) <= 64
    assert_equal(sset, model)


def test_writers_in_threads_move_segments_under_the_bound(store_factory, monkeypatch) -> None:
    """Four writers (objects: processes) in threads, on disjoint members, seal and move segments and merge at
    the bound concurrently (a bound of 32 segments): every commit lands, the set equals the union of their
    models, and no manifest lists more."""
    import threading

    monkeypatch.setattr(_log, "PAGE_SEGS", 32)
    store = Limited(store_factory())
    models: list[dict[str, int]] = [{} for _ in range(4)]
    errors: list[BaseException] = []

    def write(n: int) -> None:
        sset = mdss.SortedSet(store, "board", gc_grace=0, log_limit=10**7, chunk_size=16)
        rng = random.Random(n)
        try:
            for _ in range(120):
                batch = {big(1000 * n + m): rng.randrange(10**9) for m in rng.sample(range(100), 4)}
                sset.add_many(batch)
                models[n].update(batch)
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    merged = {k: v for model in models for k, v in model.items()}
    reader = mdss.SortedSet(store, "board")
    assert_equal(reader, merged)
    assert 0 < store.longest_manifest <= 32
    assert_bounded(store, 16)


def test_a_merge_that_met_a_collected_node_goes_on_under_its_own_claim(monkeypatch) -> None:
    """A merge whose claimed head's log manifest was collected meanwhile (another writer moved segments, grace
    0) merges again from the current head under the claim it holds; it took that claim for another's, and
    every merge and every commit at the log's bounds waited out its 10 s lease (found by the threads test)."""
    store = MemoryStore()
    sset = mdss.SortedSet(store, "board", gc_grace=0, log_limit=10**7)
    sset.add_many({big(i): i for i in range(8)})
    claims: list[Any] = []
    merge_claimed = mdss._merge._merge_claimed

    def collected_once(sset: mdss.SortedSet, snap: Any) -> bool:
        claims.append(snap.head.log.claim)
        if len(claims) == 1:
            mdss.SortedSet(store, "board", gc_grace=0, log_limit=10**7).add(big(99), 99)  # the head moves on
            raise mdss.MissingNodeError("a log manifest the head names is missing")
        return merge_claimed(sset, snap)

    monkeypatch.setattr(mdss._merge, "_merge_claimed", collected_once)
    assert sset.merge()
    assert len(claims) == 2 and claims[0] == claims[1]  # the same claim: no second one, no wait
    head = mdss._snapshot.snapshot(sset.engine).head
    assert head.log.claim is None and len(head.log) == 0
    assert_equal(sset, {**{big(i): i for i in range(8)}, big(99): 99})
