"""A board's rows and columns, and what its windows held before record windows (layouts 1 and 2: read only, to move
them; ``mdss._board_rows`` is what windows hold now).

In slot (score) order, a window's set of layout 2 held:

- column entries: score the column's slot, member its composite key then the owner; its tie groups (slot + 64) and
  their size entries (``n:<tie>``). In a column that goes by who reached its key first, the member index's value is
  ``(slot, None, seq)`` and the score tree spells the number between key and owner;
- a row entry per owner: score ``_ROW_SLOT``, member ``w:``, the owner's length (2 hex digits), the owner, then the row
  (values, last update, and post ids boards of layout 1 kept in rows; msgpack, base64);
- a marker ``r:<owner>`` per owner (score ``_MARK_SLOT``);
- an entry per post id counted in the last ``post_id_ttl`` seconds: ``p:``, the owner's length, the owner, the post id;
  score ``_POST_SLOT`` plus the moment of its first try. Record windows name post ids by the same members.
"""

from __future__ import annotations

import base64
import functools
from collections.abc import Mapping
from typing import Any, NamedTuple

from ._codec import loads, pack
from ._order import PART_CHARS, column_tag, columns_first
from ._parse import HEX
from .exceptions import CorruptDataError

#: The most fields of a row, its most bytes (msgpack of the values), the longest field name.
MAX_FIELDS = 64
MAX_ROW_BYTES = 4096
MAX_FIELD_NAME = 64
#: Row entries of layout 2, above every column and tie group.
_ROW_SLOT = 2 * MAX_FIELDS
_ROWS = "w:"
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
        """Where the key ends in a member of this column (a column that goes by first spelled the number there in
        layout 2), and the tie in a record window's key."""
        return 3 + len(self.parts) * PART_CHARS


def _first_ends(columns: Mapping[str, _Column]) -> dict[str, int]:
    """The columns that go by first: tag -> where the key ends in their members (where the number is spelled)."""
    return {column_tag(c.slot): c.end() for c in columns.values() if c.first}


def window_tiebreak(columns: Mapping[str, _Column]) -> str | None:
    """The tiebreak of a window's set (``mdss._order.columns_first``): ``None`` when every column goes by owner."""
    ends = _first_ends(columns)
    return columns_first(ends) if ends else None


def _number(value: Any) -> bool:
    return type(value) in (int, float)


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
