"""A board's views, each read in one snapshot of a window, and the prefetches that keep each to few round trips."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from . import _cursor, _percentiles
from ._board_format import _GROUPS, Row, _Column, _decode_row, _group, _member, _row_entries, members
from ._estimate import Estimate
from ._facade import PageCursors, around_span, page_around
from ._order import TOP, column_tag, column_tie, spell_at
from .exceptions import CorruptDataError, InvalidArgumentError


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


def rows_of(snap: Any, owners: Sequence[str], also: Sequence[Any] = ()) -> list[Row | None]:
    """Copies of the rows of ``owners`` (``None``: no row), reading also the entry sets of keys ``also``."""
    found: list[Row | None] = []
    for entry in _row_entries(snap, owners, also):
        row = None if entry is None else _decode_row(entry)[0]
        found.append(None if row is None else Row(row.owner, dict(row.values), row.updated))
    return found


def stored(snap: Any, spelled: Sequence[tuple[_Column, str]]) -> list[str]:
    """Each ``(column, member)`` as the window's score tree stores the member: with the number of the entry that gave
    the row its key, in a column that goes by first (their values read in one batch from the member index)."""
    found = [member for _, member in spelled]
    firsts = [i for i, (column, _) in enumerate(spelled) if column.first]
    if firsts:
        for i, value in zip(firsts, snap.index.find([found[i] for i in firsts])):
            if type(value) is not tuple or len(value) != 3:
                raise CorruptDataError(f"column entry {found[i][:60]!r} holds {value!r:.40}, not when it was reached")
            found[i] = spell_at(found[i], spelled[i][0].end(), value[2])
    return found


def _probes(column: _Column, members: Sequence[str], ties: str) -> list[Any]:
    """The keys whose counts below rank ``members`` in ``column``: the column's start, then each member's (or tie's).
    Ordinal ranks take the members as stored (:func:`stored`)."""
    parts = len(column.parts)
    if ties == "dense":  # 1 + the tie groups before the member's
        groups = column.slot + _GROUPS
        return [(groups,)] + [(groups, _group(column, column_tie(m, parts))) for m in members]
    return [(column.slot,)] + [(column.slot, m if ties == "ordinal" else column_tie(m, parts)) for m in members]


def _ranks(snap: Any, column: _Column, members: Sequence[str], ties: str) -> list[int]:
    """1-based ranks in ``column`` of entries spelled by ``members``, in one batched count."""
    counts = snap.ranking.count_below(_probes(column, members, ties))
    return [n - counts[0] + 1 for n in counts[1:]]


def _listing(snap: Any, column: _Column, start: int, stop: int, ties: str) -> tuple[list[RankedRow], list[str]]:
    """Ranked rows at positions ``start`` to ``stop - 1`` of ``column``, and their column entries' members."""
    low, high = snap.ranking.count_below([(column.slot,), (column.slot, TOP)])
    found_members, _ = snap.ranking.slice(low + max(start, 0), min(low + stop, high))
    if not found_members:
        return [], []
    parts = len(column.parts)
    owners = [column.owner(m) for m in found_members]
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
    return result, found_members


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
    if ties == "ordinal":
        spelled = dict(zip(spelled, stored(snap, [(columns[name], m) for name, m in spelled.items()])))
    if estimate is None:  # every column's two counts in one batched descent (one read per uncached level)
        probes = [p for name, m in spelled.items() for p in _probes(columns[name], [m], ties)]
        counts = snap.ranking.count_below(probes) if probes else []
        return {name: counts[2 * i + 1] - counts[2 * i] + 1 for i, name in enumerate(spelled)}
    found: dict[str, Any] = {}
    for name, member in spelled.items():
        start, at = (estimate(snap, p) for p in _probes(columns[name], [member], ties))
        found[name] = Estimate(max(at[0] - start[0] + 1, 1), max(at[1] - start[2] + 1, 1), at[2] - start[1] + 1)
    return found


def _around(snap: Any, column: _Column, owner: str, before: int, after: int, fill: bool) -> tuple[int, int, int]:
    """Positions ``start`` to ``stop - 1`` of the rows around the owner's in ``column`` (``mdss._facade.around_span``;
    an empty span without its row) and the column's rows: one batched count, its entry sets read with those around."""
    row = rows_of(snap, [owner])[0]
    member = None if row is None else _member(column, owner, row.values)
    if member is None:
        return 0, 0, 0
    member, slot = stored(snap, [(column, member)])[0], column.slot
    prefetch(snap, [((slot, member), before, after + 1), ((slot,), 0, 0), ((slot, TOP), 0, 0)])
    low, at, high = snap.ranking.count_below([(slot,), (slot, member), (slot, TOP)])
    return (*around_span(at - low, before, after, high - low, fill), high - low)


def around(snap: Any, column: _Column, owner: str, before: int, after: int, ties: str, fill: bool) -> list[RankedRow]:
    start, stop, _ = _around(snap, column, owner, before, after, fill)
    return _listing(snap, column, start, stop, ties)[0] if stop else []


def ranked_rows(snap: Any, column: _Column, owners: list[str], ties: str) -> list[RankedRow]:
    found = [(o, r) for o, r in zip(owners, rows_of(snap, owners)) if r is not None]
    spelled = [_member(column, o, r.values) for o, r in found]
    ranked = stored(snap, [(column, m) for m in spelled if m is not None])
    keys = iter(ranked)
    spelled = [None if m is None else next(keys) for m in spelled]
    ranks = iter(_ranks(snap, column, ranked, ties) if ranked else [])
    result = [
        (m is None, m or o, RankedRow(None if m is None else next(ranks), o, r.values, r.updated))
        for (o, r), m in zip(found, spelled)
    ]
    return [entry for _, _, entry in sorted(result, key=lambda t: t[:2])]  # a member's order is its rank's


Listed = tuple[list[RankedRow], str | None, str | None]


def page(snap: Any, column: _Column, cursor: tuple[str, bool] | None, limit: int, ties: str, offset: int = 0) -> Listed:
    """``limit`` ranked rows ``offset`` rows after the member of a forward ``cursor`` (``(member, False)``; ``None``:
    the column's first), or ending ``offset`` rows before that of a backward one (``(member, True)``); see
    :func:`_paged` for the rest."""
    slot = column.slot
    member, back = (None, False) if cursor is None else cursor
    key = (slot,) if member is None else (slot, member if back else member + "\0")
    reach = 0 if offset else limit
    prefetch(snap, [(key, reach if back else 0, 0 if back else reach), ((slot,), 0, 0), ((slot, TOP), 0, 0)])
    low, high = snap.ranking.count_below([(slot,), (slot, TOP)])
    at = 0 if member is None else snap.ranking.count_below([key])[0] - low
    start, stop = (at - offset - limit, at - offset) if back else (at + offset, at + offset + limit)
    return _paged(snap, column, max(start, 0), stop, high - low, ties)


def page_of(snap: Any, column: _Column, owner: str, limit: int, ties: str) -> Listed:
    """The page of ``limit`` rows around the owner's (``mdss._facade.page_around``), slid to stay full at either end
    of the column; empty if the owner has no key in it. See :func:`_paged` for the rest."""
    start, stop, rows = _around(snap, column, owner, *page_around(limit), True)
    return _paged(snap, column, start, stop, rows, ties)


def _paged(snap: Any, column: _Column, start: int, stop: int, rows: int, ties: str) -> Listed:
    """The ranked rows at positions ``start`` to ``stop - 1`` of ``column`` (of ``rows`` rows), the member of the last
    one (the next page's cursor; ``None``: the column's end) and of the first (the previous page's; ``None``: the
    column's start). An empty page has neither."""
    found, spelled = _listing(snap, column, start, stop, ties)
    if not found:
        return [], None, None
    return found, spelled[-1] if start + len(found) < rows else None, spelled[0] if start else None


def percentile(snap: Any, column: _Column, owner: str, method: str) -> float | int | None:
    """The owner's percentile in ``column`` by ``method`` (``mdss._percentiles``); ``None`` without a key there."""
    row = rows_of(snap, [owner])[0]
    member = None if row is None else _member(column, owner, row.values)
    if member is None:
        return None
    if method == "agoragames":
        member = stored(snap, [(column, member)])[0]
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


def encode_cursor(tag: str, member: str | None, back: bool = False) -> str | None:
    """The cursor of the page after member ``member`` (before it, ``back``); ``None`` for no member."""
    return None if member is None else _cursor.pack(tag, [member], back)


def decode_cursor(tag: str, cursor: Any, column: _Column, what: str) -> tuple[str, bool]:
    """The member a page cursor continues after (or ends before: then True); refuses a cursor of another board,
    window or column."""
    found, back = _cursor.unpack(tag, cursor, what)
    member = found[0] if len(found) == 1 else None
    if type(member) is not str or not member.startswith(column_tag(column.slot)):
        raise InvalidArgumentError(f"not a page cursor of {what}: {cursor!r:.80}")
    return member, back
