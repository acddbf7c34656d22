"""A board's views, each read in one snapshot of a window, and the prefetches that keep each to few round trips."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

from . import _cursor, _percentiles
from ._board_format import _GROUPS, Row, _Column, _decode_row, _group, _member, _row_entries, members
from ._estimate import Estimate
from ._order import TOP, column_owner, column_tag, column_tie
from .exceptions import CorruptDataError, InvalidArgumentError


class RankedRow(NamedTuple):
    """A row with its rank in a column (``None``: the row lacks a field of the column)."""

    rank: int | None
    owner: str
    values: dict[str, Any]
    updated: float


class Page(NamedTuple):
    """A page of ranked rows and the cursor that continues after it (``None`` after the last)."""

    rows: list[RankedRow]
    cursor: str | None


def rows_of(snap: Any, owners: Sequence[str], also: Sequence[Any] = ()) -> list[Row | None]:
    """Copies of the rows of ``owners`` (``None``: no row), reading also the entry sets of keys ``also``."""
    found: list[Row | None] = []
    for entry in _row_entries(snap, owners, also):
        row = None if entry is None else _decode_row(entry)[0]
        found.append(None if row is None else Row(row.owner, dict(row.values), row.updated))
    return found


def _probes(column: _Column, members: Sequence[str], ties: str) -> list[Any]:
    """The keys whose counts below rank ``members`` in ``column``: the column's start, then each member's (or tie's)."""
    parts = len(column.parts)
    if ties == "dense":  # 1 + the tie groups before the member's
        groups = column.slot + _GROUPS
        return [(groups,)] + [(groups, _group(column, column_tie(m, parts))) for m in members]
    return [(column.slot,)] + [(column.slot, m if ties == "ordinal" else column_tie(m, parts)) for m in members]


def _ranks(snap: Any, column: _Column, members: Sequence[str], ties: str) -> list[int]:
    """1-based ranks in ``column`` of entries spelled by ``members``, in one batched count."""
    counts = snap.ranking.count_below(_probes(column, members, ties))
    return [n - counts[0] + 1 for n in counts[1:]]


def _listing(snap: Any, column: _Column, start: int, stop: int, ties: str) -> tuple[list[RankedRow], str | None]:
    """Ranked rows at positions ``start`` to ``stop - 1`` of ``column``, and the member of the last one."""
    low, high = snap.ranking.count_below([(column.slot,), (column.slot, TOP)])
    found_members, _ = snap.ranking.slice(low + max(start, 0), min(low + stop, high))
    if not found_members:
        return [], None
    parts = len(column.parts)
    owners = [column_owner(m, parts) for m in found_members]
    # A tied first row's rank counts below its tie group, which may start in an entry set the listing did not read.
    found = rows_of(snap, owners, _probes(column, found_members[:1], ties) if ties != "ordinal" else ())
    ranks = list(range(start + 1, start + 1 + len(found_members)))
    if ties != "ordinal":
        ranks[0] = _ranks(snap, column, found_members[:1], ties)[0]
        for i in range(1, len(found_members)):
            if column_tie(found_members[i], parts) == column_tie(found_members[i - 1], parts):
                ranks[i] = ranks[i - 1]
            elif ties == "dense":
                ranks[i] = ranks[i - 1] + 1
    result = []
    for rank, owner, row in zip(ranks, owners, found):
        if row is None:
            raise CorruptDataError(f"column {column.name!r} names owner {owner!r}, who has no row")
        result.append(RankedRow(rank, owner, row.values, row.updated))
    return result, found_members[-1]


def column_size(snap: Any, column: _Column) -> int:
    low, high = snap.ranking.count_below([(column.slot,), (column.slot, TOP)])
    return high - low


def positions(
    snap: Any, columns: Mapping[str, _Column], owner: str, ties: str, estimate: Callable[[Any, Any], Any] | None
) -> dict[str, Any]:
    """The owner's rank in every column its row has; with ``estimate``, each an :class:`~mdss.Estimate`."""
    row = rows_of(snap, [owner])[0]
    if row is None:
        return {}
    spelled = members(columns, owner, row.values)
    if estimate is None:  # every column's two counts in one batched descent (one read per uncached level)
        probes = [p for name, m in spelled.items() for p in _probes(columns[name], [m], ties)]
        counts = snap.ranking.count_below(probes) if probes else []
        return {name: counts[2 * i + 1] - counts[2 * i] + 1 for i, name in enumerate(spelled)}
    found: dict[str, Any] = {}
    for name, member in spelled.items():
        start, at = (estimate(snap, p) for p in _probes(columns[name], [member], ties))
        found[name] = Estimate(max(at[0] - start[0] + 1, 1), max(at[1] - start[2] + 1, 1), at[2] - start[1] + 1)
    return found


def around(snap: Any, column: _Column, owner: str, before: int, after: int, ties: str) -> list[RankedRow]:
    row = rows_of(snap, [owner])[0]
    member = None if row is None else _member(column, owner, row.values)
    if member is None:
        return []
    slot = column.slot
    prefetch(snap, [((slot, member), before, after + 1), ((slot,), 0, 0), ((slot, TOP), 0, 0)])
    at = _ranks(snap, column, [member], "ordinal")[0] - 1
    return _listing(snap, column, max(at - before, 0), at + after + 1, ties)[0]


def ranked_rows(snap: Any, column: _Column, owners: list[str], ties: str) -> list[RankedRow]:
    found = [(o, r) for o, r in zip(owners, rows_of(snap, owners)) if r is not None]
    spelled = [_member(column, o, r.values) for o, r in found]
    ranked = [m for m in spelled if m is not None]
    ranks = iter(_ranks(snap, column, ranked, ties) if ranked else [])
    result = [
        (m is None, m or o, RankedRow(None if m is None else next(ranks), o, r.values, r.updated))
        for (o, r), m in zip(found, spelled)
    ]
    return [entry for _, _, entry in sorted(result, key=lambda t: t[:2])]  # a member's order is its rank's


def page(
    snap: Any, column: _Column, after: str | None, limit: int, ties: str, offset: int = 0
) -> tuple[list[RankedRow], str | None]:
    """``limit`` ranked rows, ``offset`` rows after member ``after`` (``None``: the column's first), and the last
    one's member (``None``: the column's end)."""
    slot = column.slot
    begin = (slot,) if after is None else (slot, after + "\0")
    prefetch(snap, [(begin, 0, limit if not offset else 0), ((slot,), 0, 0), ((slot, TOP), 0, 0)])
    low, high = snap.ranking.count_below([(slot,), (slot, TOP)])
    start = offset + (0 if after is None else snap.ranking.count_below([(slot, after + "\0")])[0] - low)
    found, last = _listing(snap, column, start, start + limit, ties)
    return found, last if start + len(found) < high - low else None


def percentile(snap: Any, column: _Column, owner: str, method: str) -> float | int | None:
    """The owner's percentile in ``column`` by ``method`` (``mdss._percentiles``); ``None`` without a key there."""
    row = rows_of(snap, [owner])[0]
    member = None if row is None else _member(column, owner, row.values)
    if member is None:
        return None
    if method == "agoragames":
        start, at, end = snap.ranking.count_below([(column.slot,), (column.slot, member), (column.slot, TOP)])
        return _percentiles.agoragames(at - start, end - start, _direction(column))
    probes = [*_probes(column, [member], "competition"), (column.slot, TOP)]
    start, better, end = snap.ranking.count_below(probes)  # one batched count
    return (better - start) / (end - start)


def score_for_percentile(snap: Any, column: _Column, percent: float) -> Any:
    """The agoragames library's ``score_for_percentile`` of a one-field column (``mdss._percentiles``)."""
    rows = column_size(snap, column)
    if not rows:
        return None
    first, second, fraction = _percentiles.positions(rows, percent, _direction(column))
    low = min(first, second)
    found, _ = _listing(snap, column, low, max(first, second) + 1, "ordinal")
    values = [r.values[column.parts[0][0]] for r in found]
    return _percentiles.interpolated(values[first - low], values[second - low], fraction)


def _direction(column: _Column) -> str:
    """A one-field column's order, as a set's (the direction of its field)."""
    return column.parts[0][1]


def at_percentile(snap: Any, column: _Column, p: float, ties: str) -> RankedRow | None:
    prefetch_at(snap, column, p)
    rows = column_size(snap, column)
    if not rows:
        return None
    at = min(int(p * rows), rows - 1)
    found, _ = _listing(snap, column, at, at + 1, ties)
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
    ends = [(column.slot,), (column.slot, TOP)]
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


def encode_cursor(tag: str, member: str) -> str:
    return _cursor.pack(tag, [member])


def decode_cursor(tag: str, cursor: Any, column: _Column, what: str) -> str:
    """The member a page cursor continues after; refuses a cursor of another board, window or column."""
    found = _cursor.unpack(tag, cursor, what)
    member = found[0] if len(found) == 1 else None
    if type(member) is not str or not member.startswith(column_tag(column.slot)):
        raise InvalidArgumentError(f"not a page cursor of {what}: {cursor!r:.80}")
    return member
