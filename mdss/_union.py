"""Unions and intersections of sets (Redis ZUNIONSTORE and ZINTERSTORE), exact at any size.

Each source is read from one snapshot per engine (one for a set, one per shard of a sharded set) and streamed in member
order (:meth:`mdss._snapshot.Snapshot.by_member`); a k-way merge by member groups each member's scores, and the result
goes to the destination through a load (``mdss._load``): built bottom-up, spilled past ``memory_bytes``, published in
one commit. Nothing is written before every source has been read and every score checked. See docs/guide.md ("Unions
and intersections").
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Iterator, Sequence
from operator import itemgetter
from typing import Any

from . import _load, _snapshot
from ._order import INT_MAX, INT_MIN, Score, add_scores, check_choice, check_score
from ._shards import ShardedSet
from ._snapshot import Snapshot
from ._sortedset import SortedSet
from .exceptions import ConflictError, InvalidArgumentError, InvalidScoreError, MissingNodeError, shown
from .stores.base import Store

#: How a member's scores in several sources combine.
AGGREGATES = ("sum", "min", "max")


def union(
    store: Store,
    dest: str,
    sources: Sequence[str | SortedSet | ShardedSet],
    *,
    weights: Sequence[Score] | None = None,
    aggregate: str = "sum",
    replace: bool = False,
    order: str | None = None,
    memory_bytes: int = _load.MEMORY_BYTES,
    spill_dir: str | None = None,
    **options: Any,
) -> int:
    """Store in set ``dest`` every member of any of ``sources``, its score its scores' ``aggregate`` (``"sum"``,
    ``"min"`` or ``"max"``), each first multiplied by its source's weight (``weights``: one per source, 1 by default):
    Redis' ZUNIONSTORE. Returns the result's size.

    ``sources`` are set names (opened on ``store``; a name without a set is an empty set) or :class:`SortedSet` and
    :class:`ShardedSet` objects (on any store), each read from one snapshot (a sharded set's: one per shard). ``dest``
    is an unsharded set on ``store``, written as :meth:`SortedSet.load` writes (one commit, visible at once, spilled
    past ``memory_bytes`` to ``spill_dir``): a ``dest`` with entries is refused unless ``replace=True``, which may name
    a source (the result replaces it only if it did not change meanwhile, else the union starts again). ``order`` is the
    result's order: by default the sources', which must then agree. ``options`` (``chunk_size``...) open ``dest``.

    A result score that does not fit 64 bits or is NaN (``inf - inf``, ``inf * 0``) raises
    :class:`InvalidScoreError` before anything is written. O((n + m) log k) for k sources of n entries, m in the
    result.

    >>> store = mdss.open_store("memory://")
    >>> _ = SortedSet.load(store, "week1", {"ann": 5, "bob": 3})
    >>> _ = SortedSet.load(store, "week2", {"bob": 4, "cid": 1})
    >>> mdss.union(store, "season", ["week1", "week2"])
    3
    >>> SortedSet(store, "season").range(0, 3)
    [Entry(member='bob', score=7, rank=1), Entry(member='ann', score=5, rank=2), Entry(member='cid', score=1, rank=3)]
    """
    return _store(store, dest, sources, weights, aggregate, False, replace, order, memory_bytes, spill_dir, options)


def intersection(
    store: Store,
    dest: str,
    sources: Sequence[str | SortedSet | ShardedSet],
    *,
    weights: Sequence[Score] | None = None,
    aggregate: str = "sum",
    replace: bool = False,
    order: str | None = None,
    memory_bytes: int = _load.MEMORY_BYTES,
    spill_dir: str | None = None,
    **options: Any,
) -> int:
    """:func:`union`, keeping only the members found in every source: Redis' ZINTERSTORE.

    >>> store = mdss.open_store("memory://")
    >>> _ = SortedSet.load(store, "a", {"ann": 5, "bob": 3})
    >>> _ = SortedSet.load(store, "b", {"bob": 4, "cid": 1})
    >>> mdss.intersection(store, "both", ["a", "b"], aggregate="max"), SortedSet(store, "both").score("bob")
    (1, 4)
    """
    return _store(store, dest, sources, weights, aggregate, True, replace, order, memory_bytes, spill_dir, options)


def _store(
    store: Any,
    dest: Any,
    sources: Any,
    weights: Any,
    aggregate: Any,
    every: bool,
    replace: Any,
    order: Any,
    memory_bytes: Any,
    spill_dir: Any,
    options: dict[str, Any],
) -> int:
    """Union (``every`` False) or intersection of ``sources`` into ``dest``: the arguments checked, then merged and
    loaded, again from fresh snapshots if a source lost a node to gc meanwhile or ``dest`` (a source) changed."""
    if not isinstance(store, Store):
        raise InvalidArgumentError(f"store must be an mdss Store (see mdss.open_store), got {shown(store)}")
    sets = _opened(store, sources)
    factors = _weights(weights, len(sets))
    check_choice(aggregate, AGGREGATES, "aggregate")
    _load.checked((), replace, None, 1, memory_bytes)
    if order is None:  # the sources' order; a name without members is an empty set of no order (as Redis has none)
        orders = {s.order for s in sets}
        if len(orders) > 1:
            orders = {s.order for s in sets if len(s)} or {sets[0].order}
        if len(orders) > 1:
            raise InvalidArgumentError("the sources differ in order (asc and desc): pass order= for the result")
        order = orders.pop()
    if options.get("shards") not in (None, 1):  # refused before opening it would store a sharded set's settings
        raise InvalidArgumentError("a union or intersection writes an unsharded set: shards must be 1")
    target = SortedSet(store, dest, order=order, **options)
    if isinstance(target, ShardedSet):
        raise InvalidArgumentError(f"set {dest!r} is sharded: a union or intersection writes an unsharded set")
    engine = target.engine
    for _ in engine.policy.attempts():
        snaps = [[_snapshot.snapshot(e) for e in s.engines] for s in sets]
        expect = _unchanged(target, sets, snaps)
        count = [0]
        pairs = _counted(_combined([_stream(s, w) for s, w in zip(snaps, factors)], aggregate, every), count)
        try:
            _load.load(engine, pairs, replace, None, 256, memory_bytes, spill_dir, expect)
        except ConflictError:  # dest changed while it was read (a source) or written: read again
            continue
        except MissingNodeError:  # a node of a source's snapshot collected meanwhile: read again; else damaged
            if not _snapshot.any_moved((e, snap) for s, found in zip(sets, snaps) for e, snap in zip(s.engines, found)):
                raise
            continue
        return count[0]
    raise ConflictError(f"set {dest!r}: its sources kept changing under the union; nothing was applied")


def _opened(store: Store, sources: Any) -> list[SortedSet | ShardedSet]:
    """The source sets: names opened on ``store``, set objects as they are."""
    if isinstance(sources, (str, bytes, SortedSet, ShardedSet)) or not isinstance(sources, (list, tuple)):
        raise InvalidArgumentError(f"sources must be a list of set names or sets, got {shown(sources)}")
    if not sources:
        raise InvalidArgumentError("sources must name at least one set")
    sets: list[SortedSet | ShardedSet] = []
    for source in sources:
        if isinstance(source, str):
            sets.append(SortedSet(store, source))
        elif isinstance(source, (SortedSet, ShardedSet)):
            sets.append(source)
        else:
            raise InvalidArgumentError(f"a source must be a set name, a SortedSet or a ShardedSet, got {shown(source)}")
    return sets


def _weights(weights: Any, count: int) -> list[Score | None]:
    """One factor per source (``None``: 1, scores left as they are), checked: a finite or infinite number, not NaN."""
    if weights is None:
        return [None] * count
    if isinstance(weights, (str, bytes)) or not isinstance(weights, (list, tuple)):
        raise InvalidArgumentError(f"weights must be a list of numbers, got {shown(weights)}")
    if len(weights) != count:
        raise InvalidArgumentError(f"weights must hold one number per source ({count}), got {len(weights)}")
    found: list[Score | None] = []
    for weight in weights:
        try:
            found.append(check_score(weight))
        except InvalidScoreError as exc:
            raise InvalidArgumentError(f"a weight must be an int (64 bits) or a float other than NaN: {exc}") from None
    return [None if type(w) is int and w == 1 else w for w in found]


def _unchanged(target: SortedSet, sets: list[Any], snaps: list[list[Snapshot]]) -> Callable[[Snapshot], bool] | None:
    """What ``dest``'s state must still be when it is replaced, if it is one of the sources: as it was read."""
    for s, found in zip(sets, snaps):
        if s.store is target.store and s.engines[0].keys.head == target.engine.keys.head:
            return _load.as_read(found[0])
    return None


def _stream(snaps: list[Snapshot], weight: Score | None) -> Iterator[tuple[str, Any]]:
    """One source's pairs in member order (its shards' merged), each score multiplied by ``weight``: not checked yet
    (:func:`_checked`), since an intersection drops the members of some sources."""
    pairs = snaps[0].by_member() if len(snaps) == 1 else heapq.merge(*(snap.by_member() for snap in snaps))
    if weight is None:
        return pairs
    return ((m, s * weight) for m, s in pairs)


def _checked(member: str, score: Any) -> Score:
    """A weighted score as stored: refused if NaN (``inf * 0``) or past 64 bits, ``-0.0`` as ``0.0``."""
    kind = type(score)
    if kind is int and INT_MIN <= score <= INT_MAX:
        return score
    if kind is float and score == score:
        return score + 0.0
    what = "NaN" if kind is float and math.isnan(score) else f"{score} (past 64 bits)"
    raise InvalidScoreError(f"member {shown(member)}: a weighted score is {what}")


def _aggregated(member: str, values: list[Any], aggregate: str) -> Score:
    """One member's weighted scores, in source order, combined (a sum added in that order)."""
    values = [_checked(member, v) for v in values]
    if aggregate == "min":
        return min(values)
    if aggregate == "max":
        return max(values)
    total = values[0]
    try:
        for value in values[1:]:
            total = add_scores(total, value)
    except InvalidScoreError as exc:
        raise InvalidScoreError(f"member {shown(member)}: {exc}") from None
    return total


def _combined(streams: list[Iterator[tuple[str, Any]]], aggregate: str, every: bool) -> Iterator[tuple[str, Score]]:
    """Each member's scores (in source order) combined by ``aggregate``; only members of every stream if ``every``.
    A score is checked only where the result keeps its member."""
    merged = heapq.merge(*streams, key=itemgetter(0)) if len(streams) > 1 else streams[0]
    need = len(streams) if every else 1
    member: str | None = None
    first: Any = None
    more: list[Any] | None = None  # the member's scores when it has several
    for m, s in merged:
        if m == member:
            if more is None:
                more = [first, s]
            else:
                more.append(s)
            continue
        if member is not None:
            if more is None:
                if need == 1:
                    yield member, _checked(member, first)
            elif len(more) >= need:
                yield member, _aggregated(member, more, aggregate)
        member, first, more = m, s, None
    if member is not None:
        if more is None:
            if need == 1:
                yield member, _checked(member, first)
        elif len(more) >= need:
            yield member, _aggregated(member, more, aggregate)


def _counted(pairs: Iterator[tuple[str, Score]], count: list[int]) -> Iterator[tuple[str, Score]]:
    for pair in pairs:
        count[0] += 1
        yield pair
