"""Issue 10: no acknowledged write is ever lost, and every failure is a clear mdss error.

Lost compare-and-set replies with other writers on top, gc racing commits and loads whatever the
clocks, an evicted head, damaged and impossible stored values, damaged sets that must stay
removable, settings adopted from another process, forged cursors, malformed arguments.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import multiprocessing
import threading
import time
from collections import Counter

import msgpack
import pytest
import workers
from depth import DEEP
from faulty import FaultyStore, SlowStore
from readable import readable_keys

import mdss
import mdss._writer
from mdss._codec import encode_leaf, encode_manifest, seal
from mdss._head import Head, TreeRef

SPAWN = multiprocessing.get_context("spawn")


def _leaf_keys(board: mdss.SortedSet) -> list[str]:
    """The store keys of the score tree's entry sets."""
    snap = mdss._snapshot.snapshot(board.engine)
    leaves = []
    for height, path, _ in snap.score_tree.walk():
        if height == 0:
            leaves.append(board.keys.node(path[-1]))
    return leaves


# -- 1. a lost compare-and-set reply, with another writer on top ------------------------


class LostHeadReply(FaultyStore):
    """Lets the first compare-and-set of a head (or store-applied append, ``mdss._tail``) land, then runs
    ``meanwhile`` and loses the reply."""

    def __init__(self, inner, *, appends: bool, **options) -> None:
        super().__init__(inner, **options)
        self.appends = appends and inner.appends
        self.seals_nodes = self.appends and inner.seals_nodes

    def _lose_next(self, key: str) -> None:
        if self.fail_at is None and key.endswith(":h"):
            self.fail_at = self.count + 1
            self.after = True

    def _cas(self, key, value, version):
        self._lose_next(key)
        return self._call("_cas", key, value, version)

    def _append(self, key, held, sha, seen, record, cap):
        self._lose_next(key)
        return self._call("_append", key, held, sha, seen, record, cap)

    def _swap(self, key, held, sha, seen, core, record, cap, nodes, lagging=False):
        self._lose_next(key)
        return self._call("_swap", key, held, sha, seen, core, record, cap, nodes, lagging)


@pytest.mark.parametrize("appends", [False, True], ids=["cas", "append"])
@pytest.mark.parametrize("on_top", [1, 3, 40])
def test_lost_reply_with_writers_on_top_loses_nothing(store, on_top: int, appends: bool) -> None:
    base = mdss.SortedSet(store, "b", chunk_size=4)
    base.add_many({f"m{i}": i for i in range(30)})
    other = mdss.SortedSet(store, "b")

    def commits_on_top() -> None:
        for _ in range(on_top):
            other.incr("x", 10)

    faulty = LostHeadReply(store, meanwhile=commits_on_top, appends=appends)
    writer = mdss.SortedSet(faulty, "b", gc_grace=0)
    try:
        assert writer.incr("x", 1) == 1  # proven landed: the head's recent commit nonces, or the log
        landed = True
    except mdss.OutcomeUnknownError:
        assert on_top >= 16  # only when its commit scrolled out of the head's memory, and was merged
        landed = None
    assert faulty.count > faulty.fail_at  # the reply was lost
    fresh = mdss.SortedSet(store, "b", cache_bytes=0)
    assert fresh.check() == []
    assert fresh.score("x") == 10 * on_top + 1  # applied exactly once, never twice, never lost
    assert len(fresh) == 31 and landed in (True, None)


class RefusedAfterLostReply(LostHeadReply):
    """Loses the first head write's reply (it landed), then refuses every call, as a server that stopped
    taking the client's credentials would."""

    def _call(self, name, *args):
        if self.fail_at is not None and self.count >= self.fail_at:
            self.count += 1
            raise mdss.StoreError("the server refused the credentials")
        return super()._call(name, *args)


@pytest.mark.parametrize("appends", [False, True], ids=["cas", "append"])
def test_a_refusal_after_a_lost_reply_leaves_the_outcome_unknown(store, appends: bool) -> None:
    """A commit whose reply was lost may have landed: a store that then refuses every call (not only one
    that stays unreachable) leaves its outcome unknown, never reported as refused."""
    mdss.SortedSet(store, "b").add_many({f"m{i}": i for i in range(10)})
    faulty = RefusedAfterLostReply(store, appends=appends)
    writer = mdss.SortedSet(faulty, "b")
    with pytest.raises(mdss.OutcomeUnknownError, match="refused"):
        writer.incr("x", 1)
    assert faulty.count > faulty.fail_at  # the reply was lost, then a call was refused
    assert mdss.SortedSet(store, "b").score("x") == 1  # it had landed


class RefusedAfterHeadWrite(FaultyStore):
    """Takes the first head write (compare-and-set or store-applied append), then refuses every call, as a
    server that stopped taking the client's credentials would."""

    refused = 0

    def _call(self, name, *args):
        if self.fail_at is not None:
            self.refused += 1
            raise mdss.StoreError("the server refused the credentials")
        result = super()._call(name, *args)
        if name in ("_cas", "_append", "_swap") and args[0].endswith(":h"):
            self.fail_at = self.count
        return result


def test_a_write_that_landed_is_not_reported_refused_when_its_merge_is(store) -> None:
    """The merge a write starts once the log is full is for later: the store refusing it does not make
    the write, which landed, raise."""
    mdss.SortedSet(store, "b", log_limit=100).add_many({f"m{i}": i for i in range(10)})  # logged, not merged
    faulty = RefusedAfterHeadWrite(store)
    writer = mdss.SortedSet(faulty, "b", log_limit=8)  # 11 entries after its write: past 8 x 1.25
    assert writer.incr("x", 1) == 1
    assert faulty.refused  # the merge asked the store, and was refused
    assert mdss.SortedSet(store, "b").score("x") == 1


@pytest.mark.parametrize("appends", [False, True], ids=["cas", "append"])
def test_definite_conflict_rebases_and_deletes_its_nodes(store, appends: bool) -> None:
    board = mdss.SortedSet(store, "b", chunk_size=4, gc_grace=0)
    board.add_many({f"m{i}": i for i in range(30)})
    other = mdss.SortedSet(store, "b", gc_grace=0)
    racing = FaultyStore(store)
    racing.appends = appends and store.appends
    racer = mdss.SortedSet(racing, "b", gc_grace=0)
    racer.score("m1")
    name = "_append" if racing.appends else "_cas"
    original = getattr(store, name)
    raced = []

    def after_a_rival(*args):
        if not raced:
            raced.append(1)
            other.incr("m1", 100)  # appended too: the racer's append touches the same member
        return original(*args)

    setattr(store, name, after_a_rival)
    try:
        assert racer.incr("m1", 1) == 102
    finally:
        setattr(store, name, original)
    assert racer.retries == 1 and board.check() == []
    assert board.unreferenced() == []  # the losing attempt's nodes were deleted: nothing could name them


# -- the fault-injection suite, with writers and gc interleaved ----------------------------


def _commits():
    return {
        "split": lambda s: s.add("n1", 4.5),
        "grow": lambda s: s.add_many({f"g{i}": i for i in range(12)}),
        "merge": lambda s: s.remove_many(["p1", "p2", "p3"]),
        "shrink": lambda s: s.remove_many([f"p{i}" for i in range(9)]),
        "incr": lambda s: s.incr("p4", 10),
    }


@pytest.mark.parametrize("meanwhile", [None, "writer", "gc"])
@pytest.mark.parametrize("after", [False, True], ids=["before-call", "reply-lost"])
@pytest.mark.parametrize("name", list(_commits()))
def test_ambiguous_outcome_at_every_store_call(after: bool, name: str, meanwhile: str | None) -> None:
    """Fail each store call of a commit (splits, growth, merges, shrinking), alone, while another writer
    commits, or while gc sweeps: never half applied, never lost, never reported wrongly."""
    commit = _commits()[name]
    initial = {f"p{i}": i for i in range(10)}
    model = dict(initial)
    probe_store = mdss.open_store("memory://")
    mdss.SortedSet.load(probe_store, "b", initial, chunk_size=2)
    probe = mdss.SortedSet(counting := FaultyStore(probe_store), "b")
    start = counting.count
    commit(probe)
    after_commit = {e.member: e.score for e in probe}
    calls = counting.count - start
    for k in range(1, calls + 1):
        store = mdss.open_store("memory://")
        mdss.SortedSet.load(store, "b", initial, chunk_size=2)
        rival = mdss.SortedSet(store, "b", gc_grace=0)
        actions = {"writer": functools.partial(rival.add, "zz", 99), "gc": functools.partial(rival.gc, sweep=True)}
        faulty = FaultyStore(store, meanwhile=actions.get(meanwhile))
        board = mdss.SortedSet(faulty, "b", gc_grace=0)
        faulty.fail_at, faulty.after = faulty.count + k, after
        try:
            commit(board)
            raised = False
        except mdss.StoreUnavailableError:
            raised = True
        state = {e.member: e.score for e in mdss.SortedSet(store, "b", cache_bytes=0)}
        extra = {"zz": 99} if meanwhile == "writer" and faulty.count >= faulty.fail_at else {}
        allowed = [{**model, **extra}, {**after_commit, **extra}]
        assert state in allowed, f"fault at call {k}"
        if not raised:
            assert state == allowed[1], f"fault at call {k} reported success but did not land"
        reopened = mdss.SortedSet(store, "b", gc_grace=0)
        assert reopened.check() == []
        reopened.gc(wait=False, sweep=True)
        assert reopened.unreferenced() == [] and reopened.check() == []


# -- 2-4. gc against commits and loads in flight, whatever the clocks ------------------------


def test_gc_with_min_age_zero_beside_threads_with_skewed_clocks(store, monkeypatch) -> None:
    monkeypatch.setattr(mdss._writer, "clock", lambda: time.time() - 7200)  # writers two hours behind
    board = mdss.SortedSet(store, "b", chunk_size=4, gc_grace=0)
    board.add_many({f"m{i}": 0 for i in range(40)})
    acked: Counter[str] = Counter()
    errors: list[BaseException] = []
    stop = threading.Event()
    lock = threading.Lock()

    commits = 60 if type(store).__name__ == "DynamoDBStore" else 120  # a store call takes milliseconds there

    def write(seed: int) -> None:
        mine = mdss.SortedSet(store, "b", gc_grace=0)
        for i in range(commits):
            member = f"m{(seed * 7 + i * 3) % 40}"
            mine.incr(member, 1)
            with lock:
                acked[member] += 1

    def collect() -> None:
        mine = mdss.SortedSet(store, "b", gc_grace=0)
        while not stop.is_set():
            mine.gc(min_age=0, wait=False, sweep=True)

    def read() -> None:
        mine = mdss.SortedSet(store, "b", cache_bytes=0)
        while not stop.is_set():
            entries = mine.range(0, 100)
            assert [e.rank for e in entries] == list(range(1, len(entries) + 1))

    def load() -> None:
        for _ in range(5):
            with contextlib.suppress(mdss.ConflictError):  # lost to the gc of that set: nothing applied
                mdss.SortedSet.load(store, "loaded", {f"l{j}": j for j in range(300)}, chunk_size=4, replace=True)
            mdss.SortedSet(store, "loaded", gc_grace=0).gc(min_age=0, wait=False, sweep=True)

    def guarded(fn, *args):
        try:
            fn(*args)
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    background = [threading.Thread(target=guarded, args=(f,)) for f in (collect, collect, read, load)]
    writers = [threading.Thread(target=guarded, args=(write, s)) for s in range(3)]
    for thread in background + writers:
        thread.start()
    for thread in writers:
        thread.join()
    stop.set()
    for thread in background:
        thread.join()
    assert errors == []
    assert {e.member: e.score for e in board} == {f"m{i}": acked[f"m{i}"] for i in range(40)}
    assert board.check() == []
    board.gc(wait=False, sweep=True)
    assert board.unreferenced() == []


@pytest.mark.slow
def test_gc_with_min_age_zero_beside_processes_with_skewed_clocks(shared_store_factory, tmp_path) -> None:
    """Two collectors gc beside three writers of 150 operations each (300 under ``MDSS_DEEP``): until the writers
    finish or for 6 s, whichever comes first (gc sweeps slow the writers down on dynalite); until they finish and for
    at least 6 s under ``MDSS_DEEP``."""
    url, stop = shared_store_factory.url_for_new(), str(tmp_path / "stop")
    mdss.SortedSet(mdss.open_store(url), "b", chunk_size=4).add("seed", 0)
    with SPAWN.Pool(5) as pool:
        seconds, at_most = (6.0, 300.0) if DEEP else (0.0, 6.0)
        args = [(url, "b", skew, stop, seconds, at_most) for skew in (-7200.0, 3600.0)]
        collecting = [pool.apply_async(workers.collector, a) for a in args]
        ops = 300 if DEEP else 150
        results = pool.starmap(workers.skewed_writer, [(url, "b", i, ops, (-1) ** i * 5400.0) for i in range(3)])
        open(stop, "w").close()
        deleted = sum(c.get() for c in collecting)
    board = mdss.SortedSet(mdss.open_store(url), "b")
    expected: dict[str, int] = {"seed": 0}
    totals: Counter[str] = Counter()
    for result in results:
        assert result["failures"] == {}, result["failures"]
        expected.update(result["owned"])
        for member, delta, _, _ in result["acked"]:
            totals[member] += delta
    expected.update(totals)
    assert {e.member: e.score for e in board} == expected
    assert board.check() == []
    print(f"{shared_store_factory.kind}: gc deleted {deleted} nodes beside the writers")


def test_a_load_slower_than_gc_never_publishes_collected_nodes(store) -> None:
    mdss.SortedSet.load(store, "b", {f"old{i}": i for i in range(50)}, chunk_size=4)
    rival = mdss.SortedSet(store, "b", gc_grace=0)

    def collect_midway(done: int, total: int) -> None:
        if done < total:
            rival.gc(min_age=0, wait=False, sweep=True)

    try:
        mdss.SortedSet.load(
            store, "b", {f"new{i}": i for i in range(200)}, replace=True, progress=collect_midway, batch=8
        )
        loaded = True
    except mdss.ConflictError:
        loaded = False
    board = mdss.SortedSet(store, "b", cache_bytes=0)
    assert board.check() == []
    members = {e.member for e in board}
    assert members == ({f"new{i}" for i in range(200)} if loaded else {f"old{i}" for i in range(50)})


# -- 5. a lost head is never taken for an empty set -----------------------------------------


def test_a_set_whose_head_vanished_is_refused_not_restarted(store) -> None:
    board = mdss.SortedSet(store, "b", chunk_size=4)
    board.add_many({f"m{i}": i for i in range(40)})
    store.delete(board.keys.head)  # what an evicting Redis did
    with pytest.raises(mdss.HeadMissingError, match="no head"):
        board.score("m1")  # this object saw the head
    newcomer = mdss.SortedSet(store, "b")
    if store.evicts:
        with pytest.raises(mdss.HeadMissingError):
            newcomer.add("m99", 1)  # a write would have started it afresh
    else:  # DynamoDB: a head is gone only by a delete (an interrupted drop), and looking would scan the table
        assert newcomer.add("m99", 1) is True
        store.delete(board.keys.head)
    with pytest.raises(mdss.HeadMissingError):
        newcomer.gc(wait=False)
    assert any("no head" in p for p in newcomer.check())
    newcomer.drop()
    assert readable_keys(store, board.keys.prefix) == []
    assert newcomer.add("m99", 1) is True and len(newcomer) == 1


class CreatedWhileListing(FaultyStore):
    """Before its first listing answers, another writer creates the set (head first, then nodes)."""

    def __init__(self, inner, create) -> None:
        super().__init__(inner)
        self.create = create

    def _keys(self, prefix):
        if self.create is not None:
            self.create, create = None, self.create
            create()
        return super()._keys(prefix)


def test_a_set_created_while_a_first_writer_looks_for_leftovers_is_not_headless(store) -> None:
    other = mdss.SortedSet(store, "b", chunk_size=4)
    late = mdss.SortedSet(CreatedWhileListing(store, lambda: other.add_many({f"m{i}": i for i in range(9)})), "b")
    assert late.add("z", 1) is True  # it found no head, then nodes: the head had been created meanwhile
    assert len(other) == 10 and other.check() == []


# -- 6. checksums ----------------------------------------------------------------------------


@pytest.mark.usefixtures("tree_commits")  # names tree nodes and notes
def test_a_flipped_byte_that_still_decodes_is_refused(store) -> None:
    board = mdss.SortedSet(store, "b", chunk_size=4)
    board.add_many({f"m{i}": 5 for i in range(12)})
    key = _leaf_keys(board)[0]
    data = bytearray(store.get(key).value)
    data[data.index(5)] = 7  # a score 5 becomes 7: still valid msgpack
    store.put(key, bytes(data))
    fresh = mdss.SortedSet(store, "b", cache_bytes=0)
    with pytest.raises(mdss.CorruptDataError, match="checksum") as info:
        fresh.range(0, 12)
    assert info.value.key == key
    head = bytearray(store.get(board.keys.head).value)
    head[-6] ^= 0x01
    store.put(board.keys.head, bytes(head))
    with pytest.raises(mdss.CorruptDataError, match="checksum"):
        len(mdss.SortedSet(store, "b"))


# -- 7-8. wrongly typed fields and impossible head values --------------------------------------


@pytest.mark.parametrize(
    "payload",
    [
        encode_leaf((1, 2), (3, 4)),  # int members
        encode_leaf(("a", "b"), (3, True)),  # a bool score
        encode_leaf(("a", "b"), (3, float("nan"))),
        encode_leaf(("a",), (3, 4)),  # lengths differ
        encode_manifest(1, (1, 2), (2, 2), ("a", "c"), (1, 2)),  # int child ids
        encode_manifest(1, ("x", "y"), (2, -2), ("a", "c"), (1, 2)),  # a negative count
        seal(msgpack.packb([2, 7, [], []])),  # an unknown kind
        seal(msgpack.packb({"v": 2})),
        seal(b"\xc1"),
    ],
)
def test_wrongly_typed_nodes_are_corrupt_data(store, payload: bytes) -> None:
    board = mdss.SortedSet(store, "b", chunk_size=4)
    board.add_many({f"m{i}": i for i in range(40)})
    key = _leaf_keys(board)[1]
    store.put(key, payload)
    fresh = mdss.SortedSet(store, "b", cache_bytes=0)
    with pytest.raises(mdss.CorruptDataError) as info:
        list(fresh)
    assert info.value.key == key
    problems = fresh.check()  # reports, never crashes
    assert problems and any(key in p for p in problems)


def test_a_leaf_where_a_manifest_belongs_is_corrupt_data(store) -> None:
    board = mdss.SortedSet(store, "b", chunk_size=4)
    board.add_many({f"m{i}": i for i in range(40)})
    root = board.keys.node(mdss._snapshot.snapshot(board.engine).head.scores.root)
    store.put(root, store.get(_leaf_keys(board)[0]).value)
    fresh = mdss.SortedSet(store, "b", cache_bytes=0)
    with pytest.raises(mdss.CorruptDataError, match="entry set where"):
        fresh.rank("m3")
    assert fresh.check()


@pytest.mark.parametrize(
    "changes",
    [
        {"chunk": 1},
        {"chunk": 10**9},
        {"scores": TreeRef("x", 0, -1), "members": TreeRef("y", 0, -1)},
        {"scores": TreeRef("x", -1, 3), "members": TreeRef("y", 0, 3)},
        {"scores": TreeRef(None, 0, 5), "members": TreeRef(None, 0, 5)},
        {"scores": TreeRef("x", 0, 5), "members": TreeRef("y", 0, 4)},
        {"gen": -1},
        {"epoch": -3},
        {"recent": ("a", "b", "c")},  # more nonces than generations
        {"order": "sideways"},
    ],
)
def test_impossible_head_values_are_corrupt_data(store, changes) -> None:
    key = mdss.SortedSet(store, "b").keys.head
    head = Head("desc", 4, gen=1, epoch=1, recent=("n",))
    for name, value in changes.items():
        object.__setattr__(head, name, value)
    store.put(key, head.encode())
    board = mdss.SortedSet(store, "b")  # opens: a damaged set must stay removable
    with pytest.raises(mdss.CorruptDataError, match="head is malformed"):
        len(board)
    assert any("head is malformed" in p for p in board.check())
    board.drop()
    assert len(board) == 0


# -- 11. a damaged set is always removable ------------------------------------------------------


@pytest.mark.parametrize("damage", ["missing node", "corrupt node", "corrupt head"])
def test_a_damaged_set_can_be_dropped_and_replaced(store, damage: str) -> None:
    board = mdss.SortedSet(store, "b", chunk_size=4)
    board.add_many({f"m{i}": i for i in range(60)})
    if damage == "missing node":
        store.delete(_leaf_keys(board)[2])
    elif damage == "corrupt node":
        store.put(_leaf_keys(board)[2], b"\x00junk")
    else:
        store.put(board.keys.head, b"\x00junk")
    replaced = mdss.SortedSet.load(store, "b", {"a": 1, "b": 2}, replace=True, chunk_size=4)
    assert [e.member for e in replaced] == ["b", "a"] and replaced.check() == []
    replaced.gc(wait=False, sweep=True)
    assert replaced.unreferenced() == []
    board = mdss.SortedSet(store, "b")
    board.add_many({f"m{i}": i for i in range(60)})
    store.delete(_leaf_keys(board)[1])
    mdss.SortedSet(store, "b").drop()
    assert readable_keys(store, board.keys.prefix) == []


def test_a_missing_node_of_the_current_head_is_reported_at_once(store) -> None:
    board = mdss.SortedSet(store, "b", chunk_size=4, retry_budget=30)
    board.add_many({f"m{i}": i for i in range(40)})
    store.delete(_leaf_keys(board)[0])
    fresh = mdss.SortedSet(store, "b", cache_bytes=0, retry_budget=30)
    started = time.monotonic()
    with pytest.raises(mdss.MissingNodeError, match="damaged"):
        fresh.range(0, 40)
    assert time.monotonic() - started < 1  # no retry budget spent on a head that does not move


def test_readers_racing_gc_grace_zero_never_see_missing_nodes(store) -> None:
    """With no grace, a reader may lose every snapshot to a busy writer: it then says so (ConflictError),
    never that the set is damaged."""
    writer = mdss.SortedSet(store, "b", chunk_size=4, gc_grace=0)
    writer.add_many({f"m{i}": i for i in range(60)})
    reader = mdss.SortedSet(store, "b", cache_bytes=0, retry_budget=1)
    stop = threading.Event()
    outcomes: Counter[str] = Counter()

    def churn() -> None:
        i = 0
        while not stop.is_set():
            writer.add(f"m{i % 60}", i)
            i += 1

    thread = threading.Thread(target=churn)
    thread.start()
    try:
        for _ in range(100):
            try:
                assert len(reader.range(0, 60)) == 60
                outcomes["read"] += 1
            except mdss.ConflictError as exc:
                assert "raise gc_grace" in str(exc)
                outcomes["starved"] += 1
    finally:
        stop.set()
        thread.join()
    assert outcomes["read"] + outcomes["starved"] == 100
    assert writer.check() == []


# -- 14. settings adopted from the process that created the set ---------------------------------


def test_a_set_opened_before_another_process_creates_it_adopts_its_settings(store) -> None:
    early = mdss.SortedSet(store, "b")  # no settings, no set yet
    creator = mdss.SortedSet(store, "b", chunk_size=4, order="asc")
    creator.add_many({"a": 3, "b": 1})
    assert early.range(0, 2) == creator.range(0, 2)
    assert (early.order, early.chunk_size) == ("asc", 4)
    assert early.add("c", 2) is True and [e.member for e in creator] == ["b", "c", "a"]
    pinned = mdss.SortedSet(mdss.open_store("memory://"), "x", chunk_size=8)
    assert pinned.chunk_size == 8


def test_explicit_settings_still_refuse_another_set(store) -> None:
    mine = mdss.SortedSet(store, "b", chunk_size=8)
    mdss.SortedSet(store, "b", chunk_size=4).add("a", 1)
    with pytest.raises(mdss.SettingsMismatchError):
        mine.score("a")


# -- 15. cursors are bound to their set ----------------------------------------------------------


def test_forged_and_foreign_cursors_are_refused(store) -> None:
    board = mdss.SortedSet.load(store, "b", {f"m{i}": i for i in range(30)}, chunk_size=4)
    other = mdss.SortedSet.load(store, "o", {f"m{i}": i for i in range(30)}, chunk_size=4)
    cursor = board.page(5).cursor
    assert board.page(5, cursor).entries[0].rank == 6
    raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
    forged = [
        "",
        "!!!",
        "AAAA",
        base64.urlsafe_b64encode(msgpack.packb([1, 2, 3])).decode(),
        base64.urlsafe_b64encode(raw[:-5] + bytes([raw[-5] ^ 1]) + raw[-4:]).decode(),
        base64.urlsafe_b64encode(b"\xff" * 40).decode(),
        12,
        None.__class__.__name__,
    ]
    for bad in forged:
        with pytest.raises(mdss.InvalidArgumentError, match="cursor"):
            board.page(5, bad)  # type: ignore[arg-type]
    with pytest.raises(mdss.InvalidArgumentError, match="cursor of set 'o'"):
        other.page(5, cursor)


# -- 16. malformed arguments -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "call",
    [
        lambda b: b.add_many(None),
        lambda b: b.add_many(5),
        lambda b: b.add_many("ab"),
        lambda b: b.add_many([("a",)]),
        lambda b: b.add_many([1, 2]),
        lambda b: b.add_many([("a", None)]),
        lambda b: b.remove_many(None),
        lambda b: b.add("a", 1, op=None),
        lambda b: mdss.SortedSet.load(b.store, "x", 5),
        lambda b: mdss.SortedSet.load(b.store, "x", [("a", 1)], batch=0),
        lambda b: mdss.SortedSet.load(b.store, "x", [("a", 1)], replace="yes"),
        lambda b: mdss.SortedSet(b.store, "x", gc_grace=-1),
        lambda b: mdss.SortedSet(b.store, "x", max_attempts=0),
        lambda b: b.gc(min_age="soon"),
    ],
)
def test_malformed_arguments_raise_invalid_argument(store, call) -> None:
    board = mdss.SortedSet(store, "b")
    with pytest.raises(mdss.InvalidArgumentError):
        call(board)
    assert len(board) == 0


# -- issue 17: contention never fails a write on a healthy store ---------------------------------------


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_racing_writers_with_store_latency_never_conflict(kind: str, tmp_path) -> None:
    url = "memory://" if kind == "memory" else f"sqlite:///{tmp_path}/race.db"
    inner = mdss.open_store(url)
    store = SlowStore(inner)
    failures: list[BaseException] = []
    threads, per_thread = 4, 25

    def work(t: int) -> None:
        board = mdss.SortedSet(store, "race", chunk_size=4)  # one object each: every commit races
        for i in range(per_thread):
            try:
                board.incr(f"m{(t + i) % 5}", 1)
            except mdss.MdssError as exc:
                failures.append(exc)

    workers_ = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    for thread in workers_:
        thread.start()
    for thread in workers_:
        thread.join()
    board = mdss.SortedSet(inner, "race")
    assert failures == []
    assert sum(e.score for e in board) == threads * per_thread
    assert board.check() == []


# -- issue 17: gc without listings in the normal path -------------------------------------------------


class CountingStore(FaultyStore):
    """Counts the listings it is asked for."""

    def __init__(self, inner) -> None:
        super().__init__(inner)
        self.listings = 0

    def _keys(self, prefix):
        self.listings += 1
        return super()._keys(prefix)


def test_gc_collects_what_ended_processes_replaced_without_listing(store) -> None:
    counting = CountingStore(store)
    for round_ in range(3):
        ended = mdss.SortedSet(store, "b", chunk_size=4, gc_grace=3600)  # its grace never runs out: it "ends"
        for i in range(30):  # enough commits for notes to move to pages
            ended.add_many({f"m{(round_ * 7 + i * 3 + j) % 50}": round_ * 100 + i + j for j in range(3)})
        collector = mdss.SortedSet(counting, "b", gc_grace=0)
        counting.listings = 0
        deleted = collector.gc(wait=False)
        assert deleted > 0 and counting.listings == 0
        assert collector.unreferenced() == [] and collector.check() == []
        head = mdss._snapshot.snapshot(collector.engine).head
        assert head.notes == () and head.note_page == head.notes_done
        assert readable_keys(store, collector.keys.notes) == []  # notes and pages collected too
    assert collector.gc(wait=False) == 0


def test_a_commit_replacing_many_nodes_writes_several_notes_that_gc_collects(store, monkeypatch) -> None:
    """A note names at most NOTE_IDS nodes (a merge or a load replacing a million nodes still writes values
    any store takes): a commit that replaces more writes several, and gc() collects them all."""
    monkeypatch.setattr(mdss._garbage, "NOTE_IDS", 3)
    ended = mdss.SortedSet(store, "b", chunk_size=4, gc_grace=3600, log_limit=20)
    ended.add_many({f"m{i}": i for i in range(60)})
    for i in range(30):  # appends, then merges that replace many nodes each
        ended.add(f"m{(i * 7) % 60}", 100 + i)
    mdss.SortedSet.load(store, "b", {f"m{i}": -i for i in range(60)}, replace=True, gc_grace=3600)
    notes = readable_keys(store, ended.keys.notes)
    assert len(notes) > 10
    collector = mdss.SortedSet(store, "b", gc_grace=0)
    assert collector.gc(wait=False) > 0
    assert collector.unreferenced() == [] and collector.check() == []
    assert readable_keys(store, collector.keys.notes) == []
    assert dict((e.member, e.score) for e in collector) == {f"m{i}": -i for i in range(60)}


@pytest.mark.usefixtures("tree_commits")  # names tree nodes and notes
def test_gc_of_notes_while_commits_move_them_to_pages(store) -> None:
    writer = mdss.SortedSet(store, "b", chunk_size=4, gc_grace=3600)
    writer.add_many({f"m{i}": i for i in range(40)})
    for i in range(5):
        writer.add(f"m{i}", 100 + i)
    rival = mdss.SortedSet(store, "b", chunk_size=4, gc_grace=3600)

    def commits_meanwhile() -> None:  # notes spill into a page while gc works
        for i in range(12):
            rival.add(f"m{i}", 200 + i)

    faulty = FaultyStore(store, meanwhile=commits_meanwhile)
    collector = mdss.SortedSet(faulty, "b", gc_grace=0)
    faulty.fail_at = faulty.count + 3  # during its walk of the notes
    with pytest.raises(mdss.StoreUnavailableError):
        collector.gc(wait=False)
    collector = mdss.SortedSet(store, "b", gc_grace=0)
    collector.gc(wait=False)
    collector.gc(wait=False)
    assert collector.unreferenced() == [] and collector.check() == []
    assert {e.member: e.score for e in collector}["m11"] == 211
