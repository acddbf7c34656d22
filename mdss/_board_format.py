"""What a leaderboard stores in each window instance's set: slots, members and rows.

In slot (score) order, a window's set holds:

- column entries: score the column's slot, member its composite key then the owner, so a column is one run ordered
  by key, then owner; its tie groups (slot + ``_GROUPS``, for dense ranks) and their size entries (``n:<tie>``). In a
  column that goes by who reached its key first, the member index's value is ``(slot, None, seq)`` (the sequence
  number of the entry that gave the row that key) and the score tree spells the number between key and owner, so
  ties go by it;
- a row entry per owner: score ``_ROW_SLOT``, member ``w:``, the owner's length (2 hex digits), the owner, then the row
  (values, last update, and post ids older boards kept in rows; msgpack, base64): the manifests route a read to it;
- a marker ``r:<owner>`` per owner (score ``_MARK_SLOT``): a first post expects none, so only one first post lands;
- an entry per post id counted in the last ``post_id_ttl`` seconds: ``p:``, the owner's length, the owner, the post id;
  score ``_POST_SLOT`` plus the moment of its first try, so the oldest come first (kept after the owner's row is
  removed, until they expire: a retry of a post counted before counts nothing).
"""

from __future__ import annotations

import base64
import functools
from bisect import bisect_left
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from ._codec import loads, pack
from ._order import PART_CHARS, SEQ_CHARS, column_member, column_tag, column_tie, columns_first, encode_part
from ._parse import HEX
from .exceptions import CorruptDataError

#: The most fields of a row, its most bytes (msgpack of the values), the longest field name.
MAX_FIELDS = 64
MAX_ROW_BYTES = 4096
MAX_FIELD_NAME = 64
#: A column's tie groups live at its slot plus ``_GROUPS``; a group's size entry starts with ``_SIZE``.
_GROUPS = MAX_FIELDS
_SIZE = "n:"
#: Row entries, above every column and tie group. The base64 alphabet lies below ``_PAST_ROW``.
_ROW_SLOT = 2 * _GROUPS
_ROWS = "w:"
_PAST_ROW = "\x7f"
#: Owner markers.
_ROW = "r:"
_MARK_SLOT = _ROW_SLOT + 1
#: Post id entries, above every row and marker.
_POST = "p:"
_POST_SLOT = _MARK_SLOT + 1


class Row(NamedTuple):
    """An owner's row in one window: its values and when it was last updated (seconds since the epoch)."""

    owner: str
    values: dict[str, Any]
    updated: float


class _Column(NamedTuple):
    name: str
    slot: int
    parts: tuple[tuple[str, str], ...]  # (field, "asc" | "desc")
    first: bool = False  # ties go by who reached the key first, not by owner

    def end(self) -> int:
        """Where the key ends in a member of this column: a column that goes by first spells the number there."""
        return 3 + len(self.parts) * PART_CHARS

    def owner(self, stored: str) -> str:
        """The owner of a column member as the window's score tree stores it (after its number, if it has one)."""
        return stored[self.end() + (SEQ_CHARS if self.first else 0) :]


def _first_ends(columns: Mapping[str, _Column]) -> dict[str, int]:
    """The columns that go by first: tag -> where the key ends in their members (where the number is spelled)."""
    return {column_tag(c.slot): c.end() for c in columns.values() if c.first}


def window_tiebreak(columns: Mapping[str, _Column]) -> str | None:
    """The tiebreak of a window's set (``mdss._order.columns_first``): ``None`` when every column goes by owner."""
    ends = _first_ends(columns)
    return columns_first(ends) if ends else None


def _number(value: Any) -> bool:
    return type(value) in (int, float)


def _group(column: _Column, tie: str) -> str:
    """The member of a tie group's entry: the tie's parts under the column's group slot."""
    return column_tag(column.slot + _GROUPS) + tie[3:]


def _member(column: _Column, owner: str, values: Mapping[str, Any]) -> str | None:
    """The member that spells the row's key in ``column``; ``None`` if the row lacks one of its fields."""
    parts: list[tuple[Any, str]] = [(values.get(field), direction) for field, direction in column.parts]
    if all(_number(v) for v, _ in parts):
        return column_member(column.slot, parts, owner)
    return None


def members(columns: Mapping[str, _Column], owner: str, values: Mapping[str, Any]) -> dict[str, str]:
    """Column name -> the member that spells the row's key there (columns whose fields it all has)."""
    found = {}
    for column in columns.values():
        member = _member(column, owner, values)
        if member is not None:
            found[column.name] = member
    return found


def _row_prefix(owner: str) -> str:
    """What every row entry of ``owner`` starts with, and no other entry: the length makes it unambiguous."""
    return f"{_ROWS}{len(owner):02x}{owner}"


def _row_member(owner: str, values: dict[str, Any], updated: float, posts: list[str]) -> str:
    """The member of a row entry: the owner's prefix, then the row (msgpack, base64)."""
    data = pack([values, updated, posts])
    return _row_prefix(owner) + base64.b64encode(data).decode("ascii")


@functools.lru_cache(maxsize=16384)
def _decode_row(member: str) -> tuple[Row, tuple[str, ...]]:
    """The row and the post ids a row entry holds (cached: the row's values are shared, callers copy them)."""
    try:
        if not HEX.fullmatch(member[2:4]):
            raise ValueError("length")
        size = int(member[2:4], 16)
        owner = member[4 : 4 + size]
        found = loads(base64.b64decode(member[4 + size :], validate=True))
    except Exception:  # msgpack raises several unrelated types on garbage
        found, owner, size = None, "", -1
    if (
        len(owner) != size
        or type(found) is not list
        or len(found) != 3
        or type(found[0]) is not dict
        or type(found[1]) not in (int, float)
        or type(found[2]) is not list
        or not all(type(p) is str for p in found[2])
    ):
        raise CorruptDataError(f"leaderboard row entry {member[:60]!r} is damaged")
    return Row(owner, found[0], found[1]), tuple(found[2])


def _post_member(owner: str, post_id: str) -> str:
    """The member of a post id entry: the owner's length makes it unambiguous, as in a row entry's."""
    return f"{_POST}{len(owner):02x}{owner}{post_id}"


def _post_owner(member: str) -> str | None:
    """The owner a post id entry names; ``None`` if it is damaged."""
    try:
        size = int(member[2:4], 16)
    except ValueError:
        return None
    owner = member[4 : 4 + size]
    return owner if len(owner) == size and len(member) > 4 + size else None


def _row_entries(snap: Any, owners: Sequence[str], also: Sequence[Any] = ()) -> list[str | None]:
    """The row entry of each owner in one snapshot (``None``: no row).

    An owner's row is the one entry from ``(_ROW_SLOT, prefix)`` to ``(_ROW_SLOT, prefix + _PAST_ROW)``, in the log or
    the entry set the range's end routes to: one batched read at most, with the entry sets of keys ``also``.
    """
    prefixes = [_row_prefix(o) for o in owners]
    found: list[str | None] = [None] * len(owners)
    view = snap.view
    todo = list(range(len(owners)))
    if view is not None:
        todo = []
        # Many owners: the log's row keys once, then bisections per owner.
        logged = view.between((_ROW_SLOT,), (_ROW_SLOT + 1,), closed=False) if len(owners) > 4 else None
        for i, prefix in enumerate(prefixes):
            low, high = (_ROW_SLOT, prefix), (_ROW_SLOT, prefix + _PAST_ROW)
            keys = logged if logged is not None else view.between(low, high, closed=False)
            added, removed = _within(keys[0], low, high), _within(keys[1], low, high)
            if added is not None:
                found[i] = added[1]
            elif removed is None:  # not logged: the tree's
                todo.append(i)
    if (todo or also) and snap.score_tree.root is not None:
        ends = [(_ROW_SLOT, prefixes[i] + _PAST_ROW) for i in todo]
        for i, end, (leaf, _) in zip(todo, ends, snap.score_tree.descend([*ends, *also])):
            keys = leaf.keys
            at = bisect_left(keys, end) - 1
            if at >= 0 and keys[at][0] == _ROW_SLOT and keys[at][1].startswith(prefixes[i]):
                found[i] = keys[at][1]
    return found


def _within(keys: list[Any], low: Any, high: Any) -> Any:
    """The key of sorted ``keys`` from ``low`` to ``high`` (excluded; a row has one at most), or ``None``."""
    i = bisect_left(keys, low)
    return keys[i] if i < len(keys) and keys[i] < high else None


def _spell(columns: Mapping[str, _Column], owner: str, values: Mapping[str, Any], into: dict[str, Any]) -> None:
    """Add to ``into`` the column entries of the row: its members, their tie groups, the groups' sizes (negative)."""
    for name, member in members(columns, owner, values).items():
        column = columns[name]
        into[member] = column.slot
        tie = column_tie(member, len(column.parts))
        into[_group(column, tie)] = column.slot + _GROUPS
        into[_SIZE + tie] = into.get(_SIZE + tie, 0) - 1


def window_entries(columns: Mapping[str, _Column], rows: Mapping[str, dict[str, Any]], stamp: float) -> dict[str, Any]:
    """Every entry (member -> score) of a window holding ``rows`` (owner -> values, updated at ``stamp``): a load's.

    The entries :func:`_spell` adds row by row, a column at a time (a load's hot loop)."""
    entries: dict[str, Any] = {}
    for owner, values in rows.items():
        entries[_row_member(owner, values, stamp, [])] = _ROW_SLOT
        entries[_ROW + owner] = _MARK_SLOT
    for column in columns.values():
        slot, group, tag, fields = column.slot, column.slot + _GROUPS, column_tag(column.slot), column.parts
        group_tag = column_tag(group)
        sizes: dict[str, int] = {}
        for owner, values in rows.items():
            parts: list[tuple[Any, str]] = [(values.get(field), direction) for field, direction in fields]
            if all(type(v) is int or type(v) is float for v, _ in parts):
                key = "".join([encode_part(v, d) for v, d in parts])
                entries[tag + key + owner] = slot
                sizes[key] = sizes.get(key, 0) - 1
        for key, size in sizes.items():
            entries[group_tag + key] = group
            entries[_SIZE + tag + key] = size
    return entries


def _unreached(stored: str, reached: Mapping[str, int]) -> str:
    """A column member as the window's score tree stores it, without the number a column that goes by first spells."""
    at = reached.get(stored[:3])
    return stored if at is None else stored[:at] + stored[at + SEQ_CHARS :]


def window_problems(entries: Sequence[Any], columns: Mapping[str, _Column]) -> list[str]:
    """What is wrong with a window's ``entries``: each owner must have one row entry and one marker, each post id entry
    name an owner (whose row may have been removed since: ``Leaderboard.remove`` leaves post ids to expire), and the
    column entries be exactly those the rows spell."""
    found: list[str] = []
    markers = {e.member[len(_ROW) :] for e in entries if e.member.startswith(_ROW)}
    if any(e.score != _MARK_SLOT for e in entries if e.member.startswith(_ROW)):
        found.append("an owner's marker has the wrong score")
    rows: dict[str, Row] = {}
    for e in (e for e in entries if e.member.startswith(_ROWS)):
        try:
            row = _decode_row(e.member)[0]
        except CorruptDataError as exc:
            found.append(str(exc))
            continue
        if e.score != _ROW_SLOT or row.owner in rows:
            found.append(f"row entry of {row.owner!r}: score {e.score!r}, or a second one")
        rows[row.owner] = row
    if set(rows) != markers:
        found.append(f"owners with a marker but no row, or the reverse: {sorted(set(rows) ^ markers)[:5]}")
    for e in (e for e in entries if e.member.startswith(_POST)):
        if _post_owner(e.member) is None or type(e.score) is not float or not e.score >= _POST_SLOT:
            found.append(f"post id entry {e.member[:60]!r} (score {e.score!r}) names no owner, or is damaged")
    reached = _first_ends(columns)
    column_entries = {
        _unreached(e.member, reached): e.score for e in entries if not e.member.startswith((_ROW, _ROWS, _POST))
    }
    expected: dict[str, Any] = {}
    for owner, row in rows.items():
        _spell(columns, owner, row.values, expected)
    if column_entries != expected:
        extra = sorted(set(column_entries) - set(expected))[:5]
        missing = sorted(set(expected) - set(column_entries))[:5]
        wrong = sorted(m for m in set(expected) & set(column_entries) if expected[m] != column_entries[m])[:5]
        found.append(f"column entries disagree with the rows: extra {extra}, missing {missing}, wrong counts {wrong}")
    return found
