"""A board's load: its rows checked and merged by owner, and the values of a record window that holds them, in memory
while they fit the load's budget, else spilled to temporary SQLite databases (``mdss._spill``) as a set's load spills.

Spilled, the rows are kept by owner (all of an owner's rows, merged as posts would merge them when read back in owner
order), and each merged row's value goes to the window's spill (msgpack), so that no step holds more than a block of
rows, however many rows an owner has.
"""

from __future__ import annotations

import contextlib
import heapq
from collections.abc import Callable, Iterator, Mapping, Sequence
from itertools import islice
from operator import itemgetter
from typing import Any

import msgpack

from ._board_format import _POST, _POST_SLOT, _ROWS, _Column, _decode_row, _post_member
from ._board_post import checked_rows, merge_row, merged_rows
from ._board_rows import OWNER, as_row, check_fits, loaded_value, owner_member, post_value
from ._codec import loads, pack
from ._load import PAIR_BYTES
from ._spill import BLOCK, Spill

#: What a row costs a load held in memory (its values, its value in the window, its entries in both trees), in bytes.
ROW_BYTES = 8 * PAIR_BYTES

Settings = tuple[tuple[str, ...], Mapping[str, str], Mapping[str, _Column]]


@contextlib.contextmanager
def window_source(
    rows: Any,
    owner: Callable[[Any], str],
    settings: Settings,
    stamp: float,
    node_bytes: int,
    memory_bytes: int,
    spill_dir: str | None,
) -> Iterator[tuple[int, dict[str, Any] | Spill]]:
    """How many rows ``rows`` hold (owners), and the values of a window holding them, updated at ``stamp``: a dict
    (member -> value) if they fit ``memory_bytes``, else a :class:`~mdss._spill.Spill` of ``(member, msgpack of the
    value)`` (deleted on exit). Every row is checked, and its weight (``node_bytes``), before this yields: a load
    refuses bad rows before it writes. ``settings``: the board's accumulate, keep_best and columns."""
    accumulate, keep_best, columns = settings
    firsts = any(c.first for c in columns.values())
    stream = iter(checked_rows(rows, owner, accumulate, keep_best, columns))
    held = list(islice(stream, max(memory_bytes // ROW_BYTES, 1)))
    more = list(islice(stream, 1))
    if not more:
        found = merged_rows(held, accumulate, keep_best, columns)
        values = {owner_member(o): loaded_value(v, stamp, firsts) for o, v in found.items()}
        check_fits(values.items(), node_bytes)
        yield len(found), values
        return
    block = min(BLOCK, max(memory_bytes // (8 * ROW_BYTES), 64))
    with (
        Spill(spill_dir, memory_bytes // 2, block) as by_owner,
        Spill(spill_dir, memory_bytes // 2, block) as window,
    ):
        by_owner.add((who, pack(values)) for who, values in held)
        del held
        by_owner.add((who, pack(values)) for who, values in more)
        while read := list(islice(stream, block)):
            by_owner.add((who, pack(values)) for who, values in read)
        count = 0
        pending: list[tuple[str, Any]] = []
        for who, values in _merged(by_owner.in_order(), settings):
            count += 1
            pending.append((owner_member(who), loaded_value(values, stamp, firsts)))
            if len(pending) >= block:
                _add(window, pending, node_bytes)
                pending = []
        _add(window, pending, node_bytes)
        yield count, window


@contextlib.contextmanager
def legacy_source(
    snap: Any, columns: Mapping[str, _Column], now: float, node_bytes: int, memory_bytes: int, spill_dir: str | None
) -> Iterator[tuple[dict[str, Any] | Spill, list[str]]]:
    """The values of a record window holding what a window of layout 1 or 2 (``snap``: rows spelled as entries of its
    set) holds: each row as it was updated, and the post ids it still counts (``mdss._board_format``), held in a dict
    while they fit ``memory_bytes``, else spilled as :func:`window_source` spills; and the members of the post ids rows
    of layout 1 held in themselves, which had no moment: each first tried ``now`` (the board records them so)."""
    firsts = any(c.first for c in columns.values())
    held_ids: list[str] = []

    def values() -> Iterator[tuple[str, Any]]:
        for member, _ in _prefixed(snap, _ROWS):
            row, post_ids = _decode_row(member)
            yield owner_member(row.owner), loaded_value(dict(row.values), row.updated, firsts)
            for post_id in post_ids:
                held_ids.append(_post_member(row.owner, post_id))
                yield held_ids[-1], post_value(now)
        for member, score in _prefixed(snap, _POST):  # entries of their own win over ids rows held (loads: last wins)
            yield member, post_value(float(score) - _POST_SLOT)

    stream = values()
    held = dict(islice(stream, max(memory_bytes // ROW_BYTES, 1)))
    more = list(islice(stream, 1))
    if not more:
        check_fits(held.items(), node_bytes)
        yield held, held_ids
        return
    block = min(BLOCK, max(memory_bytes // (8 * ROW_BYTES), 64))
    with Spill(spill_dir, memory_bytes, block) as window:
        _add(window, list(held.items()), node_bytes)
        del held
        _add(window, more, node_bytes)
        while read := list(islice(stream, block)):
            _add(window, read, node_bytes)
        yield window, held_ids


def _prefixed(snap: Any, prefix: str) -> Iterator[tuple[str, Any]]:
    """The ``(member, score)`` of a set's members that start with ``prefix``, in member order."""
    for member, score in snap.by_member(prefix):
        if not member.startswith(prefix):
            return
        yield member, score


def combined_rows(snaps: Sequence[Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """The rows of the windows ``snaps`` (one snapshot each) as ``(owner, values)``, an owner's rows together and in
    the order they were last updated (equal times: in the order of ``snaps``), so that a load merging them as posts
    (:func:`window_source`) adds the accumulated fields, keeps the best of the best-of fields and the newest value of
    the others. Streamed: each window's rows are read in member order (its member index)."""
    streams = [_rows_of(snap, i) for i, snap in enumerate(snaps)]
    group: list[tuple[str, float, int, dict[str, Any]]] = []
    for row in heapq.merge(*streams, key=itemgetter(0)):
        if group and row[0] != group[0][0]:
            group.sort(key=itemgetter(1, 2))
            yield from ((owner, values) for owner, _, _, values in group)
            group = []
        group.append(row)
    group.sort(key=itemgetter(1, 2))
    yield from ((owner, values) for owner, _, _, values in group)


def _rows_of(snap: Any, i: int) -> Iterator[tuple[str, float, int, dict[str, Any]]]:
    """Window ``i``'s rows in owner order: ``(owner, updated, i, values)``."""
    for member, value in snap.by_member(OWNER, values=True):
        if not member.startswith(OWNER):
            return
        row = as_row(member[len(OWNER) :], value)
        yield row.owner, row.updated, i, row.values


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


def _add(spill: Spill, values: list[tuple[str, Any]], node_bytes: int) -> None:
    if values:
        check_fits(values, node_bytes)
        spill.add((member, msgpack.packb(value)) for member, value in values)
