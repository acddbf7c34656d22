"""A board's views, each read in one snapshot of a record window (``mdss._board_rows``), and the prefetches that keep
each to few round trips.

A column's keys are ``(tie, stored member)``: an ordinal rank counts the keys below the row's, a competition
rank those below its tie, a dense rank the distinct ties below it (``mdss._ranking.dense_below``); each less those
below the column's start.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from . import _cursor, _percentiles
from ._board_format import Row, _Column
from ._board_rows import OWNER, as_row, end, owner_member, start
from ._estimate import Estimate
from ._facade import PageCursors, around_span, page_around
from ._order import Order, column_tag
from ._ranking import dense_below
from .exceptions import CorruptDataError, InvalidArgumentError, shown


class RankedRow(NamedTuple):
    """A row with its rank in a column (``None``: the row lacks a field of the column)."""

    rank: int | None
    owner: str
    values: dict[str, Any]
    updated: float


@dataclass(frozen=True, slots=True)
class Page(PageCursors):
    """A page of ranked rows of a board's column, with its cursors (:class:`~mdss._facade.PageCursors`)."""

    rows: list[RankedRow]
    next: str | None
    previous: str | None = None


def _values(snap: Any, owners: Sequence[str]) -> list[Any]:
    """The values of the owners' rows in one batched lookup (``None``: no row)."""
    members = [owner_member(o) for o in owners]
    return snap.index.find(members) if len(members) > 1 else [snap.index.get(members[0])] if members else []


def rows_of(snap: Any, owners: Sequence[str]) -> list[Row | None]:
    """Copies of the rows of ``owners`` (``None``: no row)."""
    return [None if v is None else as_row(o, v) for o, v in zip(owners, _values(snap, owners))]


def _key(order: Order, owner: str, value: Any, column: _Column) -> Any:
    """The key of an owner's row in ``column`` (``None``: it lacks one of the column's fields)."""
    return order.column_key(owner_member(owner), value, column_tag(column.slot))


#: The start of the first column: no key lies below it (columns and post ids follow), so its counts need no descent.
_FIRST = start(_Column("", 0, ()))


def _below(snap: Any, probes: Sequence[Any], ties: str = "ordinal") -> list[int]:
    """For each probe, the keys below it (``ties="dense"``: the distinct ties), in one batched descent; the first
    column's start counts none without one."""
    asked = [p for p in probes if p != _FIRST]
    if not asked:
        return [0] * len(probes)
    found = iter(dense_below(snap.ranking, asked) if ties == "dense" else snap.ranking.count_below(asked))
    return [0 if p == _FIRST else next(found) for p in probes]


def _probes(column: _Column, keys: Sequence[Any], ties: str) -> list[Any]:
    """The probes whose counts below rank ``keys`` in ``column``: the column's start, then each key (or its tie)."""
    return [start(column)] + [key if ties == "ordinal" else (key[0],) for key in keys]


def _ranks(snap: Any, column: _Column, keys: Sequence[Any], ties: str) -> list[int]:
    """1-based ranks in ``column`` of ``keys``, in one batched count."""
    probes = _probes(column, keys, ties)
    counts = _below(snap, probes, ties)
    return [n - counts[0] + 1 for n in counts[1:]]


def _listing(
    snap: Any, order: Order, column: _Column, begin: int, stop: int, ties: str
) -> tuple[list[RankedRow], list[Any]]:
    """Ranked rows at positions ``begin`` to ``stop - 1`` of ``column``, and their keys."""
    low, high = _below(snap, [start(column), end(column)])
    members, scores = snap.ranking.slice(low + max(begin, 0), min(low + stop, high))
    if not members:
        return [], []
    owners = [m[len(OWNER) :] for m in members]
    values = snap.index.find(members) if len(members) > 1 else [snap.index.get(members[0])]
    ranks = list(range(begin + 1, begin + 1 + len(members)))
    if ties != "ordinal":  # scores are ties: a tie's rows share the rank of its first
        ranks[0] = _ranks(snap, column, [(scores[0],)], ties)[0]
        for i in range(1, len(members)):
            if scores[i] == scores[i - 1]:
                ranks[i] = ranks[i - 1]
            elif ties == "dense":
                ranks[i] = ranks[i - 1] + 1
    result, keys = [], []
    for rank, owner, value in zip(ranks, owners, values):
        if value is None:
            raise CorruptDataError(f"column {column.name!r} names owner {owner!r}, who has no row")
        row = as_row(owner, value)
        result.append(RankedRow(rank, owner, row.values, row.updated))
        keys.append(_key(order, owner, value, column))
    return result, keys


def column_size(snap: Any, column: _Column) -> int:
    low, high = _below(snap, [start(column), end(column)])
    return high - low


def positions(
    snap: Any,
    order: Order,
    columns: Mapping[str, _Column],
    owner: str,
    ties: str,
    estimate: Callable[[Any, Any], Any] | None,
) -> dict[str, Any]:
    """The owner's rank in every column its row has; with ``estimate``, each an :class:`~mdss.Estimate`."""
    value = _values(snap, [owner])[0]
    if value is None:
        return {}
    keyed = {name: _key(order, owner, value, column) for name, column in columns.items()}
    keyed = {name: key for name, key in keyed.items() if key is not None}
    if estimate is None or ties == "dense":  # every column's two counts in one batched descent (one read per level)
        probes = [p for name, key in keyed.items() for p in _probes(columns[name], [key], ties)]
        counts = _below(snap, probes, ties)
        exact = {name: counts[2 * i + 1] - counts[2 * i] + 1 for i, name in enumerate(keyed)}
        # Estimates count entries, not distinct ties: a dense rank is exact, an Estimate of no width.
        return exact if estimate is None else {name: Estimate(r, r, r) for name, r in exact.items()}
    found: dict[str, Any] = {}
    for name, key in keyed.items():
        low, at = (estimate(snap, p) for p in _probes(columns[name], [key], ties))
        found[name] = Estimate(max(at[0] - low[0] + 1, 1), max(at[1] - low[2] + 1, 1), at[2] - low[1] + 1)
    return found


def _around(
    snap: Any, order: Order, column: _Column, owner: str, before: int, after: int, fill: bool
) -> tuple[int, int, int]:
    """Positions ``begin`` to ``stop - 1`` of the rows around the owner's in ``column`` (``mdss._facade.around_span``;
    an empty span without its row) and the column's rows: one batched count, its entry sets read with those around."""
    value = _values(snap, [owner])[0]
    key = None if value is None else _key(order, owner, value, column)
    if key is None:
        return 0, 0, 0
    prefetch(snap, [(key, before, after + 1), (start(column), 0, 0), (end(column), 0, 0)])
    low, at, high = _below(snap, [start(column), key, end(column)])
    return (*around_span(at - low, before, after, high - low, fill), high - low)


def around(
    snap: Any, order: Order, column: _Column, owner: str, before: int, after: int, ties: str, fill: bool
) -> list[RankedRow]:
    begin, stop, _ = _around(snap, order, column, owner, before, after, fill)
    return _listing(snap, order, column, begin, stop, ties)[0] if stop else []


def ranked_rows(snap: Any, order: Order, column: _Column, owners: list[str], ties: str) -> list[RankedRow]:
    found = [(o, v) for o, v in zip(owners, _values(snap, owners)) if v is not None]
    keys = [_key(order, o, v, column) for o, v in found]
    ranks = iter(_ranks(snap, column, [k for k in keys if k is not None], ties) if any(keys) else [])
    result = []
    for (owner, value), key in zip(found, keys):
        row = as_row(owner, value)
        result.append((key is None, key or owner, RankedRow(None if key is None else next(ranks), owner, *row[1:])))
    return [entry for _, _, entry in sorted(result, key=lambda t: t[:2])]  # a row's order is its rank's


Listed = tuple[list[RankedRow], str | None, str | None]


def page(
    snap: Any,
    order: Order,
    column: _Column,
    cursor: tuple[str, bool] | None,
    limit: int,
    ties: str,
    offset: int = 0,
) -> Listed:
    """``limit`` ranked rows ``offset`` rows after the key of a forward ``cursor`` (``(key, False)``, the key's parts
    joined; ``None``: the column's first), or ending ``offset`` rows before that of a backward one (``(key, True)``);
    see :func:`_paged` for the rest."""
    spelled, back = (None, False) if cursor is None else cursor
    cut = column.end()
    key = start(column) if spelled is None else (spelled[:cut], spelled[cut:] if back else spelled[cut:] + "\0")
    reach = 0 if offset else limit
    near = [(key, reach if back else 0, 0 if back else reach), (start(column), 0, 0), (end(column), 0, 0)]
    if spelled is not None and ties != "ordinal":  # where the cursor's tie starts: the page's first rank may need it
        near.append(((key[0],), 0, 0))
    prefetch(snap, near)
    low, high = _below(snap, [start(column), end(column)])
    at = 0 if spelled is None else snap.ranking.count_below([key])[0] - low
    begin, stop = (at - offset - limit, at - offset) if back else (at + offset, at + offset + limit)
    return _paged(snap, order, column, max(begin, 0), stop, high - low, ties)


def page_of(snap: Any, order: Order, column: _Column, owner: str, limit: int, ties: str) -> Listed:
    """The page of ``limit`` rows around the owner's (``mdss._facade.page_around``), slid to stay full at either end
    of the column; empty if the owner has no key in it. See :func:`_paged` for the rest."""
    begin, stop, rows = _around(snap, order, column, owner, *page_around(limit), True)
    return _paged(snap, order, column, begin, stop, rows, ties)


def _paged(snap: Any, order: Order, column: _Column, begin: int, stop: int, rows: int, ties: str) -> Listed:
    """The ranked rows at positions ``begin`` to ``stop - 1`` of ``column`` (of ``rows`` rows), the key of the last
    one (the next page's cursor; ``None``: the column's end) and of the first (the previous page's; ``None``: the
    column's start), each its parts joined (the tie has the column's length). An empty page has neither."""
    found, keys = _listing(snap, order, column, begin, stop, ties)
    if not found:
        return [], None, None
    last, first = "".join(keys[-1]), "".join(keys[0])
    return found, last if begin + len(found) < rows else None, first if begin else None


def percentile(snap: Any, order: Order, column: _Column, owner: str, method: str) -> float | int | None:
    """The owner's percentile in ``column`` by ``method`` (``mdss._percentiles``); ``None`` without a key there."""
    value = _values(snap, [owner])[0]
    key = None if value is None else _key(order, owner, value, column)
    if key is None:
        return None
    if method == "agoragames":
        low, at, high = _below(snap, [start(column), key, end(column)])
        return _percentiles.agoragames(at - low, high - low, _direction(column))
    low, better, high = _below(snap, [start(column), (key[0],), end(column)])  # one batched count
    return (better - low) / (high - low)


def score_for_percentile(snap: Any, order: Order, column: _Column, percent: float) -> Any:
    """The agoragames library's ``score_for_percentile`` of a one-field column (``mdss._percentiles``)."""
    rows = column_size(snap, column)
    if not rows:
        return None
    first, second, fraction = _percentiles.positions(rows, percent, _direction(column))
    low = min(first, second)
    found, _ = _listing(snap, order, column, low, max(first, second) + 1, "ordinal")
    values = [r.values[column.parts[0][0]] for r in found]
    return _percentiles.interpolated(values[first - low], values[second - low], fraction)


def _direction(column: _Column) -> str:
    """A one-field column's order, as a set's (the direction of its field)."""
    return column.parts[0][1]


def at_percentile(snap: Any, order: Order, column: _Column, p: float, ties: str) -> RankedRow | None:
    prefetch_at(snap, column, p)
    rows = column_size(snap, column)
    if not rows:
        return None
    at = min(int(p * rows), rows - 1)
    found, _ = _listing(snap, order, column, at, at + 1, ties)
    return found[0] if found else None


def prefetch(snap: Any, around: Sequence[tuple[Any, int, int]]) -> None:
    """Read, in one round trip, the entry sets that counts below and a slice near each ``(key, before, after)`` need
    (``mdss._tree.Tree.leaves_around``). A guess that falls short costs a round trip, never an answer."""
    tree, view = snap.score_tree, snap.view
    size = None
    if view is not None:

        def size(low: Any, high: Any, count: int) -> int:
            added, removed = view.between(low, high, closed=False)
            return count + len(added) - len(removed)

    tree.fetch([leaf for key, before, after in around for leaf in tree.leaves_around(key, before, after, size)])


def prefetch_at(snap: Any, column: _Column, p: float) -> None:
    """Read, in one round trip, the entry sets :func:`at_percentile` reads: the cached manifests bound the column's
    ends, and the position, growing with both, spans one entry set at most between its bounds."""
    tree, view = snap.score_tree, snap.view
    ends = [start(column), end(column)]
    spans = tree.spans(ends)
    if not spans:
        return
    shifts = [0, 0] if view is None else [view.shift(key) for key in ends]
    (_, low, low_count), (_, high, high_count) = spans
    low, high = low + shifts[0], high + shifts[1]

    def at(low: int, high: int) -> int:  # high > low
        return low + min(int(p * (high - low)), high - low - 1)

    first = at(low, max(high, low + 1))
    last = at(low + low_count, max(high + high_count, low + low_count + 1))
    tree.fetch([spans[0][0], spans[1][0], *snap.ranking.leaf_ids(first, last + 1)])


def encode_cursor(tag: str, spelled: str | None, back: bool = False) -> str | None:
    """The cursor of the page after the key ``spelled`` (its parts joined; before it, ``back``); ``None`` for none."""
    return None if spelled is None else _cursor.pack(tag, [spelled], back)


def decode_cursor(tag: str, cursor: Any, column: _Column, what: str) -> tuple[str, bool]:
    """The key (its parts joined) a page cursor continues after (or ends before: then True); refuses a cursor of
    another board, window or column."""
    found, back = _cursor.unpack(tag, cursor, what)
    spelled = found[0] if len(found) == 1 else None
    if type(spelled) is not str or not spelled.startswith(column_tag(column.slot)) or len(spelled) <= column.end():
        raise InvalidArgumentError(f"not a page cursor of {what}: {shown(cursor)}")
    return spelled, back
