"""Dense ranks on SortedSet (issue 14): 1 + the distinct scores strictly better.

Manifests of the score tree record each child's distinct scores and last
score (format 3); the update log's effect on tie groups is resolved at the
first dense read. Against a model (a sorted list with ranks computed
naively), with tiny chunks so that tie groups span entry sets and manifests,
with and without the log, in both orders, with ints, floats and ±inf, and
``check()`` after every step. Sets stored before format 3 answer the same.
"""

from __future__ import annotations

import base64
import itertools
import json
import pathlib
import threading
import time
from typing import Any

import msgpack
import pytest
from depth import budget
from hypothesis import given, settings
from hypothesis import strategies as st

import mdss
from mdss import _ranking
from mdss._codec import DENSE, FORMAT, PATCHED, seal, unpack
from mdss._keys import Keyspace
from mdss._tree import Leaf

MEMBERS = [f"m{i:02d}" for i in range(60)]
#: Few distinct scores, so that tie groups are long; 1 and 1.0 are one score, as are inf and float("inf").
SCORES = st.sampled_from([0, 1, 1.0, 2, 2.5, 7, float("inf"), float("-inf"), -(2**63), 2**63 - 1])
WRITES = st.lists(st.tuples(st.sampled_from(MEMBERS), st.none() | SCORES), max_size=30)
FORMAT_DATA = pathlib.Path(__file__).parent / "data" / "format"


def ranked(model: dict[str, Any], order: str) -> list[tuple[str, Any, int, int, int]]:
    """(member, score, ordinal, competition, dense) in set order, each rank counted naively."""
    sign = -1 if order == "desc" else 1
    listing = sorted(model.items(), key=lambda kv: (sign * kv[1], kv[0]))
    out = []
    for position, (member, score) in enumerate(listing):
        better = [s for s in model.values() if sign * s < sign * score]
        out.append((member, score, position + 1, len(better) + 1, len(set(better)) + 1))
    return out


def apply(board: mdss.SortedSet, model: dict[str, Any], writes: list[tuple[str, Any]]) -> None:
    for member, score in writes:
        if score is None:
            board.remove(member)
            model.pop(member, None)
        else:
            board.add(member, score)
            model[member] = score


def dense_reads_match(board: mdss.SortedSet, model: dict[str, Any], order: str, data: st.DataObject) -> None:
    want = ranked(model, order)
    dense = [(m, s, d) for m, s, _, _, d in want]
    assert [tuple(e) for e in board.range(0, len(want) + 1, ties="dense")] == dense
    for member, _, _, _, rank in want:
        assert board.rank(member, ties="dense") == rank
    if want:
        offset = data.draw(st.integers(0, len(want) - 1), label="offset")
        limit = data.draw(st.integers(1, 7), label="limit")
        assert [tuple(e) for e in board.range(offset, limit, ties="dense")] == dense[offset : offset + limit]
        member = data.draw(st.sampled_from(sorted(model)), label="around")
        i = [w[0] for w in want].index(member)
        assert [tuple(e) for e in board.around(member, 3, 2, ties="dense")] == dense[max(i - 3, 0) : i + 3]
        assert tuple(board.at(i + 1, ties="dense")) == dense[i]
    paged, cursor = [], None
    while True:
        page = board.page(4, cursor, ties="dense")
        paged.extend(tuple(e) for e in page.entries)
        if page.cursor is None:
            break
        cursor = page.cursor
    assert paged == dense


@settings(max_examples=budget(120), deadline=None)
@given(
    st.dictionaries(st.sampled_from(MEMBERS), SCORES) | st.dictionaries(st.sampled_from(MEMBERS), SCORES, min_size=30),
    st.lists(WRITES, max_size=5),
    st.sampled_from(["desc", "asc"]),
    st.integers(2, 5),
    st.sampled_from([None, 0, 1, 2, 7, 10_000]),
    st.data(),
)
def test_dense_ranks_match_the_model(start, steps, order, chunk, log_limit, data) -> None:
    """Loaded, then written in steps (each a few commits, logged or merged), merged at the end: after every
    step the set is sound and every dense read agrees with the model."""
    board = mdss.SortedSet.load(
        mdss.open_store("memory://"), "b", start, order=order, chunk_size=chunk, log_limit=log_limit, gc_grace=0
    )
    model = {m: s + 0.0 if isinstance(s, float) else s for m, s in start.items()}
    board._check()
    dense_reads_match(board, model, order, data)
    for writes in steps:
        apply(board, model, writes)
        board._check()
        dense_reads_match(board, model, order, data)
    board.merge()
    board._check()
    dense_reads_match(board, model, order, data)


@settings(max_examples=budget(120), deadline=None)
@given(
    st.dictionaries(st.sampled_from(MEMBERS), SCORES),
    WRITES,
    WRITES,
    st.sampled_from(["desc", "asc"]),
    st.integers(2, 4),
    st.booleans(),
)
def test_a_snapshot_that_later_appends_overtook_keeps_its_dense_ranks(start, writes, later, order, chunk, warm) -> None:
    """A read's view undoes the entries other threads appended after its snapshot: dense counts too."""
    store = mdss.open_store("memory://")
    board = mdss.SortedSet.load(store, "b", start, chunk_size=chunk, order=order, log_limit=10**4)
    model = dict(start)
    apply(board, model, writes)
    before, then = mdss._snapshot.snapshot(board.engine), dict(model)
    if warm:  # the overlay's tie groups are resolved before the later appends, else after them
        board.rank(next(iter(model), "m00"), ties="dense")
    apply(board, model, later)
    board.rank(next(iter(model), "m00"), ties="dense")  # the overlay's groups advance past ``before``
    for snap, state in ((before, then), (mdss._snapshot.snapshot(board.engine), model)):
        want = ranked(state, order)
        probes = [board._order.first_key(s) for _, s, _, _, _ in want]
        assert [d + 1 for d in _ranking.dense_below(snap.ranking, probes)] == [w[4] for w in want]


def test_dense_ranks_span_entry_sets_and_manifests() -> None:
    """Tie groups longer than an entry set and than a manifest's reach, at every boundary."""
    scores = [s for s in range(12) for _ in range(s % 4 * 5 + 1)]  # groups of 1, 6, 11 and 16 entries
    model = {f"p{i:03d}": s for i, s in enumerate(scores)}
    for order in ("desc", "asc"):
        board = mdss.SortedSet.load(mdss.open_store("memory://"), "b", model, order=order, chunk_size=3)
        assert board.info()["score_tree_height"] >= 4
        board._check()
        want = ranked(model, order)
        assert [e.rank for e in board.range(0, len(want), ties="dense")] == [w[4] for w in want]
        assert [board.rank(w[0], ties="dense") for w in want] == [w[4] for w in want]
        for offset in range(len(want)):
            assert board.range(offset, 1, ties="dense")[0].rank == want[offset][4]


def test_round_trips_of_a_dense_rank(store) -> None:
    """With manifests cached, a dense rank costs what a rank costs: head, member index and score entry sets (on Redis
    the first two in one round trip).
    Over a non-empty log too; the first dense read after appends reads the entry sets of the newly logged
    scores in its last round trip (more bytes, not more round trips)."""
    pairs = {f"p{i}": i % 500 for i in range(10_000)}
    mdss.SortedSet.load(store, "big", pairs, chunk_size=50)
    fresh = mdss.SortedSet(store, "big", log_limit=10_000)
    fresh.scores([e.member for e in fresh])  # warms every node of both trees

    def cost(call: Any) -> dict[str, int]:
        for key in [k for k, (node, _) in fresh.engines[0].cache._nodes.items() if isinstance(node, Leaf)]:
            fresh.engines[0].cache.discard(key)  # only manifests stay warm
        before = store.stats.snapshot()
        call()
        return store.stats.since(before)

    trips = 2 if store.get_along("absent", []) is not None else 3  # Redis: the head with the member's entry set
    assert cost(lambda: fresh.rank("p4567", ties="dense"))["calls"] == trips
    assert fresh.rank("p4567", ties="dense") == 433  # p4567 scores 67: 432 scores above it, in desc order
    moved = {f"p{i}": 1000 + i for i in range(0, 10_000, 97)}
    moved.update({f"p{i}": 5000 for i in range(100, 10_000, 500)})  # every member of score 100 leaves it
    fresh.add_many(moved)  # logged: new scores above p4567, and a group above it emptied
    assert fresh.info()["log_entries"] == 124
    first, second = cost(lambda: fresh.rank("p4567", ties="dense")), cost(lambda: fresh.rank("p4567", ties="dense"))
    assert first["calls"] == second["calls"] == trips
    assert first["bytes_read"] > second["bytes_read"]  # the logged scores' entry sets, once
    model = {**pairs, **moved}
    assert fresh.rank("p4567", ties="dense") == 1 + len({s for s in model.values() if s > 67}) == 433 - 1 + 104 + 1


def restore(store: mdss.Store, path: pathlib.Path) -> dict[str, Any]:
    fixture = json.loads(path.read_text(encoding="utf-8"))
    old, new = Keyspace("mdss", fixture["name"]).prefix, Keyspace(store.namespace, fixture["name"]).prefix
    for key, value in fixture["store"].items():
        store.put(new + key[len(old) :], base64.b64decode(value))
    return fixture


def manifests(store: mdss.Store, board: mdss.SortedSet) -> list[list[Any]]:
    """The score tree's stored manifests, decoded (format 1, 2, 3, or 5 when they name a patched entry set)."""
    snap = mdss._snapshot.snapshot(board.engine)
    found = []
    for height, path, _ in snap.score_tree.walk():
        if height:
            key = board.keys.node(path[-1])
            found.append(unpack(key, store.get(key).value, "node", (FORMAT, DENSE, PATCHED))[1])
    return found


@pytest.mark.parametrize("name", ["desc-ints", "unicode", "after-removals"])
@pytest.mark.parametrize("version", ["v1", "v2"])
def test_sets_stored_before_format_3_have_dense_ranks(version: str, name: str) -> None:
    """Written on top with no dense read first, the rewritten manifests record no counts for the children
    they did not rewrite (nil); dense reads compute those from the children, and check() stays clean."""
    store = mdss.open_store("memory://")
    fixture = restore(store, FORMAT_DATA / version / f"{name}.json")
    board = mdss.SortedSet(store, fixture["name"], gc_grace=0)
    model = {m: (float(s) if isinstance(s, str) else s) for m, s, _ in fixture["entries"]}
    writes = [(m, 3) for m in sorted(model)[:2]]
    apply(board, model, writes)
    board.merge()
    found = manifests(store, board)
    assert any(m[0] in (DENSE, PATCHED) and None in m[7] for m in found), "rewritten manifests with unknown children"
    assert board.check() == []
    for fresh in (mdss.SortedSet(store, fixture["name"]), board):
        want = ranked(model, fixture["order"])
        assert [e.rank for e in fresh.range(0, len(want), ties="dense")] == [w[4] for w in want]
        assert [fresh.rank(w[0], ties="dense") for w in want] == [w[4] for w in want]
    # What a dense read learned goes into the manifests the next write rewrites: fewer unknown children.
    unknown = sum(m[7].count(None) for m in found if m[0] in (DENSE, PATCHED))
    apply(board, model, [(sorted(model)[-1], -1)])
    board.merge()
    assert board.check() == []
    assert sum(m[7].count(None) for m in manifests(store, board) if m[0] in (DENSE, PATCHED)) < unknown


def test_check_finds_a_wrong_distinct_count() -> None:
    store = mdss.open_store("memory://")
    board = mdss.SortedSet.load(store, "b", {f"p{i:02d}": i // 3 for i in range(40)}, chunk_size=4, gc_grace=0)
    assert board.check() == []
    root = mdss._snapshot.snapshot(board.engine).head.scores.root
    key = board.keys.node(root)
    fields = msgpack.unpackb(store.get(key).value[:-4])
    assert fields[:2] == [3, 1]
    fields[7][1] += 1
    store.put(key, seal(msgpack.packb(fields)))
    problems = mdss.SortedSet(store, "b").check()
    assert any("distinct scores and last score" in p for p in problems), problems


@pytest.mark.parametrize(
    "damage",
    [
        lambda f: f[7].__setitem__(0, f[4][0] + 1),  # more distinct scores than entries
        lambda f: f[7].__setitem__(0, 0),
        lambda f: f[8].__setitem__(0, None),  # a last score without its count
        lambda f: f[8].__setitem__(0, float("nan")),
        lambda f: f[7].__setitem__(0, "1"),
        lambda f: f.pop(),
    ],
)
def test_malformed_distinct_counts_are_refused(damage: Any) -> None:
    store = mdss.open_store("memory://")
    mdss.SortedSet.load(store, "b", {f"p{i:02d}": i // 3 for i in range(40)}, chunk_size=4)
    board = mdss.SortedSet(store, "b")
    key = board.keys.node(mdss._snapshot.snapshot(board.engine).head.scores.root)
    fields = msgpack.unpackb(store.get(key).value[:-4])
    damage(fields)
    store.put(key, seal(msgpack.packb(fields)))
    with pytest.raises(mdss.CorruptDataError, match="malformed"):
        mdss.SortedSet(store, "b").rank("p00", ties="dense")


def test_dense_counts_stay_one_snapshot_while_other_threads_append() -> None:
    """Readers take snapshots and count tie groups over them while a writer thread appends to the log and
    extends the same overlay: each count is that of its own snapshot (its listing, counted naively)."""
    store = mdss.open_store("memory://")
    board = mdss.SortedSet.load(store, "b", {m: i % 7 for i, m in enumerate(MEMBERS)}, chunk_size=3, log_limit=10**4)
    stop, failures, appended = threading.Event(), [], [0]

    def write() -> None:
        i = 0
        while not stop.is_set():
            board.incr(MEMBERS[i * 7 % len(MEMBERS)], 1 if i % 3 else -2)
            i += 1
            appended[0] = i

    def read() -> None:
        deadline = time.monotonic() + 60
        try:
            for n in itertools.count():  # 100 reads at least, and on until the writer appended 100 entries
                if n >= 100 and (appended[0] > 100 or time.monotonic() > deadline):
                    break
                ranking = mdss._snapshot.snapshot(board.engine).ranking
                _, scores = ranking.slice(0, ranking.count)
                distinct = sorted(set(scores), reverse=True)
                probes = [board._order.first_key(s) for s in distinct]
                assert _ranking.dense_below(ranking, probes) == list(range(len(distinct)))
        except AssertionError as exc:
            failures.append(exc)

    writer = threading.Thread(target=write)
    readers = [threading.Thread(target=read) for _ in range(3)]
    writer.start()
    for t in readers:
        t.start()
    for t in readers:
        t.join()
    stop.set()
    writer.join()
    assert not failures, failures[0]
    assert board.info()["log_entries"] > 100
    board._check()
