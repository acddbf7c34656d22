"""Corruption fuzz: damaged stored bytes are refused, never served.

A small set (chunk size 4, both trees of height 2 or more) lives on a memory
store. One damage at a time (a random non-zero byte xor-ed into one byte, or
into 2-4 adjacent bytes, of a stored node or of the head) is applied and then
undone; in between, a freshly opened set runs every read. Each read must
answer exactly what it answers on the pristine set (same values, same score
types) or raise :class:`mdss.CorruptDataError` (of which ``MissingNodeError``
and ``HeadMissingError`` are kinds). The damages come from a seeded generator,
so a failure names its seed, key and offset and reproduces.
"""

from __future__ import annotations

import contextlib
import random
import re
import threading
from collections.abc import Callable, Iterator
from typing import Any

import lz4.block
import msgpack
import pytest
from depth import DEEP, budget, sample
from hypothesis import given, settings
from hypothesis import strategies as st

import mdss
from mdss._codec import (
    ZIPPED,
    decode_delta,
    decode_node,
    decode_note,
    decode_patch,
    encode_leaf,
    pack,
    seal,
    weight_of,
)
from mdss._keys import Keyspace

NAME = "fuzz"
ABSENT = "no such member"


def build(order: str) -> tuple[mdss.Store, list[str], list[Any]]:
    """The set, its members and its distinct scores, best first."""
    rng = random.Random(f"fuzz set {order}")
    scores: list[Any] = [rng.randrange(-20, 20) for _ in range(30)] + [rng.uniform(-20, 20) for _ in range(6)]
    scores += [2**63 - 1, -(2**63), float("inf"), float("-inf")]
    members = [f"m{i:02d}" if i % 5 else f"ü{i:02d}☃" for i in range(len(scores))]
    store = mdss.open_store("memory://")
    board = mdss.SortedSet.load(store, NAME, dict(zip(members, scores)), order=order, chunk_size=4)
    info = board.info()
    assert min(info["score_tree_height"], info["member_index_height"]) >= 2, info
    ranked = [e.score for e in board.range(0, len(board))]
    return store, members, sorted(set(ranked), key=ranked.index)


def reads(members: list[str], scores: list[Any]) -> Iterator[tuple[str, Callable[[mdss.SortedSet], Any]]]:
    """Every read, named: per member, per rank, per score, and over the whole set."""
    best, worst = scores[0], scores[-1]
    yield "len", len
    yield "iteration", list
    yield "range(all)", lambda b: b.range(0, len(members) + 1)
    yield "range(all, dense)", lambda b: b.range(0, len(members) + 1, ties="dense")
    yield "range(middle)", lambda b: b.range(len(members) // 3, 7)
    yield "range_by_score(all)", lambda b: b.range_by_score(best, worst)
    yield "range_by_score(middle)", lambda b: b.range_by_score(scores[3], scores[-4], offset=1, limit=9)
    yield "count(all)", lambda b: b.count(best, worst)
    yield "count(middle)", lambda b: b.count(scores[3], scores[-4])
    yield "scores(all)", lambda b: b.scores(members + [ABSENT])
    for member in members + [ABSENT]:
        yield f"score({member!r})", lambda b, m=member: b.score(m)
        yield f"rank({member!r})", lambda b, m=member: b.rank(m)
        yield f"rank({member!r}, competition)", lambda b, m=member: b.rank(m, ties="competition")
        yield f"rank({member!r}, dense)", lambda b, m=member: b.rank(m, ties="dense")
        yield f"around({member!r})", lambda b, m=member: b.around(m, 2, 2)
    for rank in range(1, len(members) + 2):
        yield f"at({rank})", lambda b, r=rank: b.at(r)
    for score in scores + [0.5]:
        yield f"rank_of_score({score!r})", lambda b, s=score: b.rank_of_score(s)


def answers(store: mdss.Store, calls: list[tuple[str, Callable[[mdss.SortedSet], Any]]]) -> Iterator[tuple[str, str]]:
    """``(read, repr of its answer)`` for every read on a freshly opened set (nothing cached);
    ``CorruptDataError`` as the answer ``"refused"``, any other exception by its type and text.
    """
    try:
        board = mdss.SortedSet(store, NAME)
    except mdss.CorruptDataError:
        return
    except Exception as exc:
        yield "open", f"raised {type(exc).__name__}: {exc}"
        return
    for what, call in calls:
        try:
            yield what, repr(call(board))  # repr: 5 and 5.0 are equal, but a stored int must read as an int
        except mdss.CorruptDataError:
            yield what, "refused"
        except Exception as exc:
            yield what, f"raised {type(exc).__name__}: {exc}"


def without_ids(value: bytes) -> bytes:
    """A stored value with the node ids (random, 20+ hex digits) taken out: an order of the stored keys
    that is the same in every run, so that a seed picks the same damages."""
    return re.sub(rb"[0-9a-f]{20,}", b"", value)


def damages(store: mdss.Store, rng: random.Random, per_key: int | None) -> list[tuple[str, int, bytes]]:
    """``(key, offset, xor mask)``, shuffled: ``per_key`` random single-byte flips of every stored key
    (every offset when ``None``; by default a quarter of them, every fourth from a per-key start, and
    all under ``MDSS_DEEP=1``), and as many bursts of 2-4 adjacent bytes."""
    found = []
    for key in sorted(store.keys(store.namespace + ":"), key=lambda k: without_ids(store.get(k).value)):
        size = len(store.get(key).value)
        if per_key is None:
            offsets = sample(range(size), key, keep=size // 4)
        else:
            offsets = [rng.randrange(size) for _ in range(per_key)]
        for offset in offsets:
            found.append((key, offset, bytes([rng.randrange(1, 256)])))
        for _ in range(len(offsets)):
            width = min(rng.randint(2, 4), size)
            found.append((key, rng.randrange(size - width + 1), bytes(rng.randrange(1, 256) for _ in range(width))))
    rng.shuffle(found)
    return found


def around_change(got: str, pristine: str) -> str:
    """Where two answers first differ: ``got`` against ``pristine``, a few characters either side."""
    at = next((i for i, (a, b) in enumerate(zip(got, pristine)) if a != b), min(len(got), len(pristine)))
    start = max(at - 30, 0)
    cut = "..." if start else ""
    return f"{cut}{got[start : at + 50]} where the pristine set answers {cut}{pristine[start : at + 50]}"


def fuzz(order: str, seed: int, per_key: int | None) -> int:
    """Apply every damage in turn; fail on the first that makes a read answer differently. Returns the count."""
    store, members, scores = build(order)
    calls = list(reads(members, scores))
    pristine = {"open": "the set", **dict(answers(store, calls))}
    assert "refused" not in pristine.values() and not any(a.startswith("raised") for a in pristine.values())
    todo = damages(store, random.Random(seed), per_key)
    assert Keyspace(store.namespace, NAME).head in {key for key, _, _ in todo}
    count = 0
    for key, offset, mask in todo:
        original = store.get(key).value
        damaged = bytearray(original)
        for i, m in enumerate(mask):
            damaged[offset + i] ^= m
        store.put(key, bytes(damaged))
        try:
            wrong = [(what, got) for what, got in answers(store, calls) if got not in ("refused", pristine[what])]
        finally:
            store.put(key, original)
        count += 1
        if wrong:
            shown = "\n".join(f"  {what}: {around_change(got, pristine[what])}" for what, got in wrong[:5])
            pytest.fail(
                f"order={order} seed={seed}, damage #{count}: {key!r} ({len(original)} bytes), "
                f"bytes {offset}..{offset + len(mask) - 1} xor {mask.hex()}: {len(wrong)} of {len(calls)} reads "
                f"answered wrongly instead of raising CorruptDataError, e.g.\n{shown}",
                pytrace=False,
            )
    return count


def test_damaged_bytes_are_refused_or_read_as_before() -> None:
    assert fuzz("desc", seed=1, per_key=5) >= 200


@pytest.mark.slow
@pytest.mark.parametrize("order", ["desc", "asc"])
def test_damaged_bytes_are_refused_or_read_as_before_at_every_offset(order: str) -> None:
    assert fuzz(order, seed=2, per_key=None) >= (2000 if DEEP else 500)  # a quarter of the offsets by default


def test_a_forged_compressed_entry_set_is_refused() -> None:
    """A compressed entry set (format 4) whose checksum holds but whose size, block or payload is wrong is refused as
    corrupt, never served; the node cache counts it at its uncompressed size, as it decodes."""
    members, scores = [f"player-{i:05d}" for i in range(100)], list(range(100))
    raw = pack([members, scores])
    good = encode_leaf(members, scores)
    assert good[:3] == bytes([0x94, ZIPPED, 0]) and len(good) < len(raw) // 2 and weight_of(good) == len(raw)
    assert decode_node("k", good) == (0, tuple(members), tuple(scores))
    block = lz4.block.compress(raw, store_size=False)
    forged = [
        [ZIPPED, 0, len(raw) + 1, block],  # a size that is not the block's
        [ZIPPED, 0, len(raw) - 1, block],
        [ZIPPED, 0, len(raw), block[:-3]],  # a truncated block
        [ZIPPED, 0, 2**40, block],  # a size past any node: refused before decompressing
        [ZIPPED, 0, len(raw), bytes(40)],
        [ZIPPED, 0, "12", block],
        [ZIPPED, 1, len(raw), block],  # compressed manifests do not exist
        [ZIPPED, 0, 3, lz4.block.compress(pack([[], [], []]), store_size=False)],  # not a leaf's two fields
        [ZIPPED, 0, len(raw), block, b""],
    ]
    for fields in forged:
        value = seal(pack(fields))
        with pytest.raises(mdss.CorruptDataError):
            decode_node("k", value)
        assert weight_of(value) >= 1


_NOT_STR = [1, b"b", None, 1.5, ["x"], True]


@pytest.mark.parametrize("odd", _NOT_STR, ids=repr)
@pytest.mark.parametrize(
    "node",
    [
        lambda x: [2, 0, ["a", x], [1, 2]],  # an entry set's member
        lambda x: [2, 1, 1, ["i", x], [1, 1], ["a", "b"], [1, 2]],  # a manifest's child id
        lambda x: [2, 1, 1, ["i", "j"], [1, 1], ["a", x], [1, 2]],  # a manifest's first member
        lambda x: [3, 1, 1, ["i", "j"], [1, 1], [x, "b"], [2, 1], [1, 1], [2, 1]],
    ],
    ids=["leaf member", "manifest id", "manifest member", "dense manifest member"],
)
def test_a_sealed_node_whose_members_or_ids_are_not_all_strings_is_refused(node, odd) -> None:
    """Bytes that pass the checksum but hold a member or an id of another type (what a foreign or broken writer could
    store) are CorruptDataError, never a node that fails later."""
    with pytest.raises(mdss.CorruptDataError, match="malformed"):
        decode_node("k", seal(pack(node(odd))))


@pytest.mark.parametrize("odd", _NOT_STR, ids=repr)
def test_patches_deltas_and_notes_with_a_member_or_id_not_a_string_are_refused(odd) -> None:
    cases = [
        (decode_patch, [5, 6, ["a", odd], [1, 2], [], []]),
        (decode_patch, [5, 6, [], [], [odd], [1]]),
        (decode_delta, [6, 7, 1, [odd], [1], [], [], [], [], None, None]),
        (decode_delta, [6, 7, 1, [], [], ["i", odd], [1, 1], ["a", "b"], [1, 2], None, None]),
        (decode_note, [2, 2, ["i", odd]]),
    ]
    for decode, fields in cases:
        with pytest.raises(mdss.CorruptDataError, match="malformed"):
            decode("k", seal(pack(fields)))


def _name_the_other_tree(store, keys, damaged, other) -> None:
    """Damage the first manifest of height 1 in tree ``damaged``: its second child becomes an entry set of ``other``."""
    parent_id = next(path[-1] for height, path, _ in damaged.walk() if height == 1)
    stranger = next(path[-1] for height, path, _ in other.walk() if height == 0)
    key = keys.node(parent_id)
    fields = msgpack.unpackb(store.get(key).value[:-4])
    fields[3][1] = stranger
    store.put(key, seal(msgpack.packb(fields)))


@pytest.mark.parametrize("warm", [False, True], ids=["cold", "the other tree read first"])
@pytest.mark.parametrize("tree", ["member_index", "score_tree"])
def test_a_manifest_naming_a_node_of_the_other_tree_is_damage_not_a_type_error(tree, warm) -> None:
    """Both trees' nodes share one cache, and the member index keys by string where the score tree keys by tuple: a
    damaged manifest naming an entry set of the other tree is reported by check() and refused by reads as
    CorruptDataError, whichever tree decoded that entry set first."""
    store = mdss.open_store("memory://")
    mdss.SortedSet.load(store, "s", {f"m{i:02d}": i for i in range(40)}, chunk_size=4)
    sset = mdss.SortedSet(store, "s")
    snap = mdss._snapshot.snapshot(sset.engine)
    damaged, other = (
        (snap.member_index, snap.score_tree) if tree == "member_index" else (snap.score_tree, snap.member_index)
    )
    _name_the_other_tree(store, sset.keys, damaged, other)
    fresh = mdss.SortedSet(store, "s")
    if warm:
        list(fresh)  # reads the other tree's entry set through the cache, decoded with that tree's keys
    problems = fresh.check()
    assert any("other tree" in p or "key" in p for p in problems), problems
    for read in (lambda: [fresh.rank(f"m{i:02d}") for i in range(40)], lambda: fresh.range(0, 40)):
        with contextlib.suppress(mdss.CorruptDataError):  # or answered from what it reads; never a TypeError
            read()


@pytest.mark.parametrize("warm", [False, True], ids=["cold", "the other tree read first"])
def test_a_shard_s_manifest_naming_a_node_of_the_other_tree_is_damage_not_a_type_error(warm) -> None:
    """The same damage in one shard of a sharded set: its score tree's manifest names an entry set of its member index.
    Sharded reads (whose page selection takes entry sets from the cache by id) refuse it as CorruptDataError or answer
    from what they read; never a TypeError from keys of the two kinds meeting."""
    store = mdss.open_store("memory://")
    sset = mdss.SortedSet(store, "s", shards=2, chunk_size=4)
    sset.add_many({f"m{i:02d}": i for i in range(80)})
    engine = sset.engines[0]
    snap = mdss._snapshot.snapshot(engine)
    _name_the_other_tree(store, engine.keys, snap.score_tree, snap.member_index)
    fresh = mdss.SortedSet(store, "s")
    if warm:
        fresh.scores([f"m{i:02d}" for i in range(80)])  # the member index's entry sets, into the shared cache
    assert any("other tree" in p or "key" in p for p in fresh.check())
    reads = [
        lambda: [fresh.rank(f"m{i:02d}") for i in range(80)],
        lambda: fresh.range(0, 80),
        lambda: [fresh.range(i, 5) for i in range(0, 80, 5)],  # pages by offset: the guessing selection
        lambda: fresh.around("m40", 5),
    ]
    for read in reads:
        for _ in range(2):  # again, with what the first read cached
            with contextlib.suppress(mdss.CorruptDataError):
                read()


_ANY_VALUE = st.one_of(
    st.integers(-(2**63), 2**64 - 1),
    st.floats(),  # NaN and both infinities among them
    st.booleans(),
    st.none(),
    st.text(max_size=3),
    st.binary(max_size=3),
)
_ROW = st.tuples(_ANY_VALUE, _ANY_VALUE) | st.tuples(_ANY_VALUE, _ANY_VALUE, _ANY_VALUE) | st.tuples(_ANY_VALUE)


@settings(max_examples=budget(600), deadline=None)
@given(
    st.lists(_ANY_VALUE | _ROW, max_size=12)
    | st.lists(st.floats(), max_size=12)
    | st.lists(st.tuples(st.floats() | st.integers(0, 9), st.binary(max_size=2) | st.text(max_size=2)), max_size=12)
)
def test_an_entry_sets_values_are_checked_as_one_by_one(values) -> None:
    """The checks that run at C speed on a decoded entry set (a join, a type scan, a sum for NaN) accept exactly what
    checking each value alone accepts: scores (ints and floats, no NaN), a record window's ties (all strings), values
    ``(score, data)`` and ``(score, data, seq)``."""
    from mdss import _codec

    values = tuple(values)
    numbers = all(type(v) in (int, float) and v == v for v in values)
    strings = all(type(v) is str for v in values)
    assert _codec._scores_ok(values) == (numbers or strings)
    assert _codec._values_ok(values) == (strings or all(_codec._value_ok(v) for v in values))


@pytest.mark.parametrize("bad", [(float("nan"), b"d"), ("1", b"d"), (1, 2), (1, b"d", "x"), "text", None])
def test_a_value_with_data_the_decode_left_unchecked_is_refused_when_read(bad) -> None:
    """A member index's values with data are checked as each is read, or all at once when all are used
    (``mdss._codec.values_later``): an entry set whose stored values include one of the wrong type (sealed, so only
    a writer could make it) answers its other members, refuses that member's lookup with CorruptDataError, and
    refuses a whole listing the same way; a fresh object reads it so."""
    store = mdss.open_store("memory://")
    board = mdss.SortedSet(store, "b", chunk_size=4)
    for i in range(12):
        board.add(f"m{i:02d}", i, data=f"d{i}")
    board.merge()
    victim = None
    for key in list(store.keys("mdss:b:")):
        record = store.get(key)
        try:
            kind, members, values = decode_node(key, record.value)[:3]
        except mdss.CorruptDataError:
            continue
        if kind == 0 and "m05" in members and type(values[0]) is tuple:
            victim = key
            values = tuple(bad if m == "m05" else v for m, v in zip(members, values))
            store.put(key, encode_leaf(members, values))
    assert victim is not None
    fresh = mdss.SortedSet(store, "b")
    others = [m for m in (f"m{i:02d}" for i in range(12)) if m != "m05"]
    with pytest.raises(mdss.CorruptDataError):
        fresh.data("m05")
    assert fresh.data(others[0]) == "d0"
    with pytest.raises(mdss.CorruptDataError):
        fresh.range(0, 20, with_data=True)
    with pytest.raises(mdss.CorruptDataError):
        mdss.SortedSet(store, "b").range(0, 20, with_data=True)


def _swapped(store: mdss.Store, node: str, holding: bytes) -> mdss.Store:
    """A copy of ``store`` in which the node at key ``node`` holds ``holding`` (another node's valid bytes)."""
    copy = mdss.open_store("memory://")
    for key in store.keys(""):
        copy.put(key, store.get(key).value)
    copy.put(node, holding)
    return copy


def _logged_set(longer: bool) -> tuple[mdss.Store, dict[str, bytes]]:
    """A set of entry sets of 4 with an update log not merged (one add, or also a float, a removal, an increment), and
    its nodes."""
    store = mdss.open_store("memory://")
    board = mdss.SortedSet(store, "c", chunk_size=4)
    board.add_many({f"m{i:02d}": i for i in range(40)})
    board.add("m05", 100)
    if longer:
        board.add("f", 1.5)
        board.remove("m06")
        board.incr("m07", 3)
    return store, {k: store.get(k).value for k in store.keys("mdss:c:n:")}


def _outcome(call: Callable[[], Any], seconds: float = 20.0) -> BaseException | str | None:
    """``None`` if ``call()`` returned or raised an mdss error within ``seconds``; else what it raised, or "hung"."""
    found: list[BaseException | None] = []

    def run() -> None:
        try:
            call()
            found.append(None)
        except mdss.MdssError:
            found.append(None)
        except BaseException as exc:  # what the test looks for
            found.append(exc)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(seconds)
    return found[0] if found else "hung"


@pytest.mark.parametrize("longer", [False, True], ids=["one-add-logged", "four-writes-logged"])
def test_a_node_holding_another_nodes_bytes_is_damage_not_a_crash_nor_a_hang(longer: bool) -> None:
    """The checksum covers a node's bytes, not the key they belong at: a node that holds another valid node's bytes
    (its parent's, a sibling's, one of the other tree's) decodes. Every read and write then answers or raises
    CorruptDataError, on a fresh object and on one whose check() cached the misplaced node: a manifest naming itself
    had sent the member index's cached descent round forever, and a swapped entry set under a log raised IndexError."""
    store, nodes = _logged_set(longer)
    ops: list[tuple[str, Callable[[mdss.SortedSet], Any]]] = [
        ("range", lambda s: s.range(0, 100)),
        ("rank", lambda s: s.rank("m10")),
        ("score", lambda s: s.score("m20")),
        ("add", lambda s: s.add("zz", 5)),
        ("remove", lambda s: s.remove("m11")),
    ]
    pairs = [(a, b) for a in sorted(nodes) for b in sorted(nodes) if a != b]
    named = [(a, b) for a, b in pairs if a.rpartition(":")[2].encode() in nodes[b]]  # a node holding its parent's
    for a, b in named + sample([p for p in pairs if p not in named], "swapped nodes", keep=40):
        for name, op in ops:
            for checked_first in (False, True):
                board = mdss.SortedSet(_swapped(store, a, nodes[b]), "c")
                if checked_first:
                    board.check()  # reports the damage, and caches what it read
                outcome = _outcome(lambda board=board, op=op: op(board))
                assert outcome is None, f"{name} with {a} holding {b}'s bytes: {outcome!r}"


def test_a_node_whose_checksummed_bytes_hold_another_count_is_refused() -> None:
    """Bytes that pass the checksum yet are another node's (an older commit's root replayed under the new one's key)
    or a count altered and sealed again answered wrong ranks and counts, and a negative count (a helper's fuzz):
    each node must hold the entries its manifest, or for a root the head, records for it."""
    store = mdss.open_store("memory://")
    board = mdss.SortedSet.load(store, "s", {f"m{i:02d}": i for i in range(40)}, chunk_size=4)
    head = board.engine.decode(store.get(board.keys.head).value)
    old_root, old_bytes = head.scores.root, store.get(board.keys.node(head.scores.root)).value
    board.add("late", 100)
    board.merge()
    new_root = board.engine.decode(store.get(board.keys.head).value).scores.root
    assert new_root != old_root
    store.put(board.keys.node(new_root), old_bytes)  # the older root, sealed, where the newer one belongs
    fresh = mdss.SortedSet(store, "s")
    reads = (lambda: fresh.range(0, 50), lambda: fresh.count(50, 0), lambda: fresh.rank("m10"), lambda: list(fresh))
    for read in reads:
        with pytest.raises(mdss.CorruptDataError, match="entries where"):
            read()
