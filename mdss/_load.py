"""Loads: a whole set built bottom-up from its pairs and published in one commit (``Engine.load``).

A load whose pairs fit its memory budget sorts them in memory. A larger one spills them to a temporary SQLite
database (``mdss._spill``) and builds each tree from blocks read back in order, writing entry sets as they are made:
its memory stays near the budget whatever the set's size.
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Callable, Iterable, Iterator
from itertools import islice
from typing import Any

import msgpack

from . import _expiry, _garbage, _log, _snapshot
from ._codec import weight_of
from ._engine import Engine
from ._head import Log, TreeRef, new_lineage
from ._order import Order, check_count, checked_pairs
from ._publish import publish
from ._snapshot import Snapshot
from ._spill import BLOCK, Spill
from ._writer import Writer
from .exceptions import ConflictError, CorruptDataError, InvalidArgumentError, StoreError, failed_after, shown

#: What a pair costs a load held in memory (the dict, both sorted copies, its share of the encoded nodes), in bytes:
#: measured 213 at 10^7 members (docs/performance.md); a load of more than ``memory_bytes`` / this many pairs spills.
PAIR_BYTES = 256

#: The default memory budget of a load.
MEMORY_BYTES = 256 << 20


def as_read(snap: Snapshot) -> Callable[[Snapshot], bool]:
    """The ``expect`` of a load that must replace the state ``snap`` read (a union into one of its sources): the same
    head, or, read without one, still no entries."""
    version = snap.version
    if version is None:
        return lambda now: now.ranking.count == 0
    return lambda now: now.version == version


def checked(pairs: Any, replace: Any, progress: Any, batch: Any, memory_bytes: Any = MEMORY_BYTES) -> None:
    """Refuse a load's arguments, but its pairs (checked as they are read)."""
    if type(replace) is not bool:
        raise InvalidArgumentError(f"replace must be True or False, got {shown(replace)}")
    check_count(batch, "batch", least=1)
    check_count(memory_bytes, "memory_bytes", least=1 << 20)
    if memory_bytes > 1 << 50:
        raise InvalidArgumentError(f"memory_bytes must be at most 2**50 (a PiB), got {shown(memory_bytes)}")
    if progress is not None and not callable(progress):
        raise InvalidArgumentError(f"progress must be callable, got {shown(progress)}")


def load(
    engine: Engine,
    pairs: Any,
    replace: bool,
    progress: Any,
    batch: int,
    memory_bytes: int = MEMORY_BYTES,
    spill_dir: str | None = None,
    expect: Callable[[Snapshot], bool] | None = None,
) -> None:
    """Build both trees bottom-up from ``pairs`` and publish them in one commit (``SortedSet.load``): in memory if the
    pairs fit ``memory_bytes``, else through a :class:`~mdss._spill.Spill` in ``spill_dir``. ``expect``: what the
    replaced state must still be (a union whose destination is one of its sources), else :class:`ConflictError`."""
    checked(pairs, replace, progress, batch, memory_bytes)
    with sources(pairs, 1, None, memory_bytes, spill_dir, lambda: _refused(engine, replace, expect)) as (source,):
        fill(engine, source, replace, progress, batch, expect)


@contextlib.contextmanager
def sources(
    pairs: Any,
    parts: int,
    part_of: Callable[[str], int] | None,
    memory_bytes: int,
    spill_dir: str | None,
    spilling: Callable[[], Any],
) -> Iterator[list[dict[str, Any] | Spill]]:
    """``pairs`` checked and split into ``parts`` by ``part_of(member)``: dicts (``member -> score``) if they fit
    ``memory_bytes``, else :class:`~mdss._spill.Spill` objects (``spilling()`` is called first: refuse there what
    would be refused at the end), deleted on exit."""
    stream = iter(checked_pairs(pairs))
    held = dict(islice(stream, max(memory_bytes // PAIR_BYTES, 1)))
    more = list(islice(stream, 1))
    if not more:
        split: list[dict[str, Any]] = [held] if parts == 1 else [{} for _ in range(parts)]
        if part_of is not None and parts > 1:
            for member, score in held.items():
                split[part_of(member)][member] = score
        yield list(split)
        return
    spilling()
    with contextlib.ExitStack() as stack:
        block = min(BLOCK, max(memory_bytes // (8 * PAIR_BYTES), 64))  # its working set: an eighth of the budget
        spills = [stack.enter_context(Spill(spill_dir, memory_bytes // parts, block)) for _ in range(parts)]

        def route(block: Iterable[tuple[str, Any]]) -> None:
            if part_of is None or parts == 1:
                spills[0].add(block)
                return
            routed: list[list[tuple[str, Any]]] = [[] for _ in range(parts)]
            for pair in block:
                routed[part_of(pair[0])].append(pair)
            for spill, mine in zip(spills, routed):
                spill.add(mine)

        route(held.items())
        del held
        route(more)
        while pairs_read := list(islice(stream, block)):
            route(pairs_read)
        yield list(spills)


def fill(
    engine: Engine,
    source: dict[str, Any] | Spill,
    replace: bool,
    progress: Any,
    batch: int,
    expect: Callable[[Snapshot], bool] | None = None,
) -> None:
    """Load one set from a part :func:`sources` made (``expect``: as :func:`load`'s)."""
    if isinstance(source, Spill):
        _spilled(engine, _start(engine, replace, expect), source, replace, progress, batch)
    else:
        build(engine, source, replace, progress, batch, expect)


def build(
    engine: Engine,
    pairs: dict[str, Any],
    replace: bool,
    progress: Any,
    batch: int,
    expect: Callable[[Snapshot], bool] | None = None,
) -> None:
    """:func:`load` of pairs already checked (``member -> score``), in memory: a sharded load's parts, a board's
    windows."""
    snap = _start(engine, replace, expect)
    writer, order = Writer(engine.chunk_size, snap.head.epoch), engine.ordering
    members = sorted(pairs)
    scores = [pairs[m] for m in members]
    index = TreeRef(*writer.build(snap.member_index, members, order.loaded(members, scores)))
    if order.records:  # a record window's values: their entries, a row's one per column, in key order
        entries = sorted(entry for m, v in zip(members, scores) for entry in order.entries(m, v))
        by_score = TreeRef(*writer.build(snap.score_tree, [e[1] for e in entries], [e[2] for e in entries]))
    else:
        ranked = order.ranked(members, scores)
        stored = order.loaded_members([members[i] for i in ranked])
        by_score = TreeRef(*writer.build(snap.score_tree, stored, [scores[i] for i in ranked]))
    nodes = writer.encoded(engine.keys)
    engine.measure(len(members), sum(map(weight_of, nodes.values())))
    names = list(nodes)
    for done in range(0, len(names), batch):
        engine.store.put_many({k: nodes[k] for k in names[done : done + batch]})
        if progress is not None:
            progress(min(done + batch, len(names)), len(names))
    _publish(engine, snap, writer, index, by_score, nodes, replace)


def _start(engine: Engine, replace: bool, expect: Callable[[Snapshot], bool] | None = None) -> Snapshot:
    """The snapshot a load replaces: refused if it has entries, unless ``replace``; :class:`ConflictError` if
    ``expect`` refuses it (the load's commit is a compare-and-set on this snapshot's head)."""
    try:
        snap = _snapshot.snapshot(engine, True)
    except CorruptDataError:  # a damaged head, or nodes without one: replace removes what is left first
        if not replace:
            raise
        _garbage.drop(engine)
        snap = _snapshot.snapshot(engine, True)
    snap = _expiry.writable(engine, snap)  # an expired set is dropped first: the load starts a fresh one
    if snap.ranking.count and not replace:
        raise InvalidArgumentError(f"set {engine.name!r} already has entries; pass replace=True to replace them")
    if expect is not None and not expect(snap):
        raise ConflictError(f"set {engine.name!r} changed while it was being read; nothing was applied")
    return snap


def _refused(engine: Engine, replace: bool, expect: Callable[[Snapshot], bool] | None) -> None:
    """What :func:`_start` would refuse, read before a load spills (to refuse early) without making a head: nothing is
    written before every pair has been read and checked."""
    try:
        snap = _snapshot.snapshot(engine)
    except CorruptDataError:
        if not replace:
            raise
        return
    if snap.ranking.count and not replace:
        raise InvalidArgumentError(f"set {engine.name!r} already has entries; pass replace=True to replace them")
    if expect is not None and not expect(snap):
        raise ConflictError(f"set {engine.name!r} changed while it was being read; nothing was applied")


def _spilled(engine: Engine, snap: Snapshot, spill: Spill, replace: bool, progress: Any, batch: int) -> None:
    """Build both trees from ``spill``, writing entry sets block by block, and publish them. ``progress`` counts nodes
    against an estimate (the entry sets of full nodes) that grows if passed, and ends equal to it."""
    writer = Writer(engine.chunk_size, snap.head.epoch)
    written: dict[str, bytes] = {}  # key -> b"": the nodes already in the store, deleted again if the load fails
    estimate, stored = 2 * -(-spill.count // engine.chunk_size), [0]

    def put(nodes: dict[str, bytes]) -> None:
        names = list(nodes)
        for done in range(0, len(names), batch):
            engine.store.put_many({k: nodes[k] for k in names[done : done + batch]})
            written.update(dict.fromkeys(names[done : done + batch], b""))
            if progress is not None:
                progress(len(written), max(estimate, len(written) + 1))
        stored[0] += sum(map(weight_of, nodes.values()))

    def flush(built: dict[str, bytes]) -> None:
        put({engine.keys.node(node_id): data for node_id, data in built.items()})

    try:
        order = engine.ordering
        if order.records:
            with spill.sibling() as entries:
                index = TreeRef(*writer.stream(snap.member_index, _rows(spill, order, entries), flush))
                by_score = TreeRef(*writer.stream(snap.score_tree, entries.by_key(False), flush))
        else:
            by_member = ((members, order.loaded(members, scores)) for members, scores in spill.by_member())
            index = TreeRef(*writer.stream(snap.member_index, by_member, flush))
            keys = spill.by_key(order.name == "desc", order.tiebreak == "member_desc")
            by_score = TreeRef(*writer.stream(snap.score_tree, ((order.loaded_members(m), s) for m, s in keys), flush))
        put(writer.encoded(engine.keys))  # the manifests
    except BaseException:
        _garbage.discard(engine, list(written))
        raise
    if progress is not None:
        progress(len(written), len(written))
    engine.measure(spill.count, stored[0])
    _publish(engine, snap, writer, index, by_score, written, replace)


def _rows(spill: Spill, order: Order, entries: Spill) -> Iterator[tuple[list[str], list[Any]]]:
    """A record window's spilled rows (values in msgpack) in member order, each block's score tree entries (member,
    tie) added to ``entries`` as it goes by, to be read back in key order."""
    for members, packed in spill.by_member():
        try:
            values = [msgpack.unpackb(p, use_list=False) for p in packed]
        except Exception as exc:  # msgpack raises several kinds on garbage
            raise StoreError(f"a load's spilled row does not decode ({type(exc).__name__})") from None
        entries.add((stored, tie) for m, v in zip(members, values) for _, stored, tie in order.entries(m, v))
        yield members, values


def _publish(
    engine: Engine,
    snap: Snapshot,
    writer: Writer,
    index: TreeRef,
    by_score: TreeRef,
    nodes: dict[str, bytes],
    replace: bool,
) -> None:
    """Publish a load's trees, whose ``nodes`` are written: one commit, on the head ``snap`` read. A replacing load
    writes the set afresh, as Redis' ZUNIONSTORE overwrites a key: its expiry goes, in the same commit where no node
    may carry the store's own expiry (``Head.native``), else after it by :func:`mdss._expiry.persist`'s fenced steps
    (an expiry armed meanwhile may have reached the nodes just written)."""
    afresh: dict[str, Any] = {}
    if replace:
        writer.replaced = _replaced(engine, snap)
        if snap.head.native is None:
            afresh = {"expires": None}
    writer.new = {}  # a load does not fill the cache with the whole set
    end = snap.head.log.seq
    head = snap.head.next(
        secrets.token_hex(8), scores=by_score, members=index, log=Log(end, end), lineage=new_lineage(), **afresh
    )
    if not publish(engine, snap, head, writer, nodes, written=True):
        raise ConflictError(f"set {engine.name!r} changed while it was being loaded; nothing was applied")
    engine.writer.made(by_score.root, index.root)
    if replace and head.expires is not None:
        try:
            _expiry.persist(engine)
        except StoreError as exc:  # the load landed: no refusal of the call
            failed_after(exc, "after the set was loaded, its expiry not yet cleared: persist() clears it")


def _replaced(engine: Engine, snap: Snapshot) -> list[str]:
    """The nodes a replacing load makes unreachable; those of a damaged tree are left to ``gc()``."""
    try:
        return [*snap.score_tree.node_ids(), *snap.member_index.node_ids(), *_log.node_ids(engine, snap.head.log)]
    except CorruptDataError:
        return []
