"""Loads: a whole set built bottom-up from its pairs and published in one commit (``Engine.load``)."""

from __future__ import annotations

import secrets
from typing import Any

from . import _garbage, _log, _snapshot
from ._codec import weight_of
from ._engine import Engine
from ._head import Log, TreeRef, new_lineage
from ._order import check_count, check_pairs
from ._publish import publish
from ._snapshot import Snapshot
from ._writer import Writer
from .exceptions import ConflictError, CorruptDataError, InvalidArgumentError


def checked(pairs: Any, replace: Any, progress: Any, batch: Any) -> dict[str, Any]:
    """A load's arguments checked: its pairs as ``member -> score`` (the last score of a member wins)."""
    if type(replace) is not bool:
        raise InvalidArgumentError(f"replace must be True or False, got {replace!r:.80}")
    check_count(batch, "batch", least=1)
    if progress is not None and not callable(progress):
        raise InvalidArgumentError(f"progress must be callable, got {progress!r:.80}")
    return check_pairs(pairs)


def load(engine: Engine, pairs: Any, replace: bool, progress: Any, batch: int) -> None:
    """Build both trees bottom-up from ``pairs`` and publish them in one commit (``SortedSet.load``)."""
    build(engine, checked(pairs, replace, progress, batch), replace, progress, batch)


def build(engine: Engine, pairs: dict[str, Any], replace: bool, progress: Any, batch: int) -> None:
    """:func:`load` of pairs already checked (``member -> score``): a sharded load's parts, a board's windows."""
    try:
        snap = _snapshot.snapshot(engine, True)
    except CorruptDataError:  # a damaged head, or nodes without one: replace removes what is left first
        if not replace:
            raise
        _garbage.drop(engine)
        snap = _snapshot.snapshot(engine, True)
    if snap.ranking.count and not replace:
        raise InvalidArgumentError(f"set {engine.name!r} already has entries; pass replace=True to replace them")
    writer = Writer(engine.chunk_size, snap.head.epoch)
    members = sorted(pairs)
    scores = [pairs[m] for m in members]
    index = TreeRef(*writer.build(snap.member_index, members, scores))
    ranked = engine.ordering.ranked(members, scores)
    by_score = TreeRef(*writer.build(snap.score_tree, [members[i] for i in ranked], [scores[i] for i in ranked]))
    if replace:
        writer.replaced = _replaced(engine, snap)
    nodes = writer.encoded(engine.keys)
    engine.measure(len(members), sum(map(weight_of, nodes.values())))
    names = list(nodes)
    for done in range(0, len(names), batch):
        engine.store.put_many({k: nodes[k] for k in names[done : done + batch]})
        if progress is not None:
            progress(min(done + batch, len(names)), len(names))
    writer.new = {}  # a load does not fill the cache with the whole set
    end = snap.head.log.seq
    head = snap.head.next(
        secrets.token_hex(8), scores=by_score, members=index, log=Log(end, end), lineage=new_lineage()
    )
    if not publish(engine, snap, head, writer, nodes, written=True):
        raise ConflictError(f"set {engine.name!r} changed while it was being loaded; nothing was applied")
    engine.writer.made(by_score.root, index.root)


def _replaced(engine: Engine, snap: Snapshot) -> list[str]:
    """The nodes a replacing load makes unreachable; those of a damaged tree are left to ``gc()``."""
    try:
        return [*snap.score_tree.node_ids(), *snap.member_index.node_ids(), *_log.node_ids(engine, snap.head.log)]
    except CorruptDataError:
        return []
