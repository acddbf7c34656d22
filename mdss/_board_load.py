"""A board's load: its rows checked and merged by owner, and the entries of a window that holds them, in memory while
they fit the load's budget, else spilled to temporary SQLite databases (``mdss._spill``) as a set's load spills.

Spilled, the rows are kept by owner (all of an owner's rows, merged as posts would merge them when read back in owner
order), each merged row's entries go to the window's spill, and each tie group's members to a third spill that counts
them (in SQLite), so that no step holds more than a block of rows, however many rows an owner or a tie has.
"""

from __future__ import annotations

import contextlib
import heapq
from collections.abc import Callable, Iterator, Mapping, Sequence
from itertools import islice
from operator import itemgetter
from typing import Any

from ._board_format import (
    _GROUPS,
    _MARK_SLOT,
    _ROW,
    _ROW_SLOT,
    _ROWS,
    _SIZE,
    _Column,
    _decode_row,
    _group,
    _row_member,
    _row_prefix,
    members,
    window_entries,
)
from ._board_post import check_fits, checked_rows, merge_row, merged_rows
from ._codec import loads, pack
from ._load import PAIR_BYTES
from ._order import column_tie
from ._spill import BLOCK, Spill

#: What a row costs a load held in memory (its values, its entries in the window, their tie groups), in bytes:
#: about 1,450 measured (393 MB peak at 250,000 rows of two fields held: ``benchmarks/load_memory.py board``).
ROW_BYTES = 8 * PAIR_BYTES


@contextlib.contextmanager
def window_source(
    rows: Any,
    owner: Callable[[Any], str],
    settings: tuple[tuple[str, ...], Mapping[str, str], Mapping[str, _Column]],
    stamp: float,
    node_bytes: int,
    memory_bytes: int,
    spill_dir: str | None,
) -> Iterator[tuple[int, dict[str, Any] | Spill]]:
    """How many rows ``rows`` hold (owners), and the entries of a window holding them, updated at ``stamp``: a dict
    (member -> score) if they fit ``memory_bytes``, else a :class:`~mdss._spill.Spill` (deleted on exit). Every row is
    checked, and every entry's size (``node_bytes``), before this yields: a load refuses bad rows before it writes.
    ``settings``: the board's accumulate, keep_best and columns."""
    accumulate, keep_best, columns = settings
    stream = iter(checked_rows(rows, owner, accumulate, keep_best, columns))
    held = list(islice(stream, max(memory_bytes // ROW_BYTES, 1)))
    more = list(islice(stream, 1))
    if not more:
        found = merged_rows(held, accumulate, keep_best, columns)
        entries = window_entries(columns, found, stamp)
        if entries:
            check_fits(entries, node_bytes)
        yield len(found), entries
        return
    block = min(BLOCK, max(memory_bytes // (8 * ROW_BYTES), 64))
    with (
        Spill(spill_dir, memory_bytes // 3, block) as by_owner,
        Spill(spill_dir, memory_bytes // 3, block) as window,
        Spill(spill_dir, memory_bytes // 3, block) as ties,
    ):
        by_owner.add((who, pack(values)) for who, values in held)
        del held
        by_owner.add((who, pack(values)) for who, values in more)
        while read := list(islice(stream, block)):
            by_owner.add((who, pack(values)) for who, values in read)
        count = 0
        pending: list[tuple[str, Any]] = []
        grouped: list[tuple[str, str]] = []
        for who, values in _merged(by_owner.in_order(), settings):
            count += 1
            pending += [(_row_member(who, values, stamp, []), _ROW_SLOT), (_ROW + who, _MARK_SLOT)]
            for name, member in members(columns, who, values).items():
                pending.append((member, columns[name].slot))
                grouped.append((column_tie(member, len(columns[name].parts)), name))
            if len(pending) >= block:
                _add(window, pending, node_bytes)
                ties.add(grouped)
                pending, grouped = [], []
        ties.add(grouped)
        for tie, size, name in ties.counts():
            column = columns[name]
            pending += [(_group(column, tie), column.slot + _GROUPS), (_SIZE + tie, -size)]
            if len(pending) >= block:
                _add(window, pending, node_bytes)
                pending = []
        _add(window, pending, node_bytes)
        yield count, window


def combined_rows(snaps: Sequence[Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """The rows of the windows ``snaps`` (one snapshot each) as ``(owner, values)``, an owner's rows together and in
    the order they were last updated (equal times: in the order of ``snaps``), so that a load merging them as posts
    (:func:`window_source`) adds the accumulated fields, keeps the best of the best-of fields and the newest value of
    the others. Streamed: each window's row entries are read in member order (the tail of its member index)."""
    streams = [_rows_of(snap, i) for i, snap in enumerate(snaps)]
    group: list[tuple[str, float, int, str, dict[str, Any]]] = []
    for row in heapq.merge(*streams, key=itemgetter(0)):
        if group and row[0] != group[0][0]:
            group.sort(key=itemgetter(1, 2))
            yield from ((owner, values) for _, _, _, owner, values in group)
            group = []
        group.append(row)
    group.sort(key=itemgetter(1, 2))
    yield from ((owner, values) for _, _, _, owner, values in group)


def _rows_of(snap: Any, i: int) -> Iterator[tuple[str, float, int, str, dict[str, Any]]]:
    """Window ``i``'s rows in the order of their entries: ``(row prefix, updated, i, owner, values)``."""
    for member, _ in snap.by_member(_ROWS):
        if not member.startswith(_ROWS):
            return
        row, _ = _decode_row(member)
        yield _row_prefix(row.owner), row.updated, i, row.owner, dict(row.values)


def _merged(
    rows: Iterator[tuple[str, bytes]], settings: tuple[tuple[str, ...], Mapping[str, str], Mapping[str, _Column]]
) -> Iterator[tuple[str, dict[str, Any]]]:
    """Rows in owner order (packed values) as one merged row per owner: its rows applied in turn, as posts."""
    accumulate, keep_best, columns = settings
    owner, values = None, {}
    for who, packed in rows:
        if who != owner:
            if owner is not None:
                yield owner, values
            owner, values = who, loads(packed)
        else:
            values = merge_row(who, values, loads(packed), accumulate, keep_best, columns)
    if owner is not None:
        yield owner, values


def _add(spill: Spill, entries: list[tuple[str, Any]], node_bytes: int) -> None:
    if entries:
        check_fits([member for member, _ in entries], node_bytes)
        spill.add(entries)
