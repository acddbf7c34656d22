"""What a leaderboard stores in each window instance's set since layout 3: a record window (docs/format.md, "Record
windows"; docs/leaderboard.md).

The member index maps each owner's member (``o`` then the owner) to its row, ``(updated, msgpack of the values)``, and
each post id counted in the last ``post_id_ttl`` seconds (``p:``, the owner's length, the owner, the post id) to a row
holding only the field ``""`` (which no board row has: field names are not empty), the moment of its first try. The
score tree holds what the window's :class:`~mdss._order.Order` derives from them: per column a row has, the entry
``(member, tie)``, the tie spelling the column's tag and key; post ids in a column of their own, oldest first. In a
window with columns that go by first, a row is ``(updated, msgpack of [values, numbers], seq)``: ``numbers`` keeps, per
such column, the number of the entry that gave the row its key there while the key stays.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import msgpack

from ._board_format import _POST, _POST_SLOT, Row, _Column, _post_owner
from ._order import (
    LOADED,
    MAX_PARTS,
    PART_CHARS,
    SEQ_CHARS,
    RowColumns,
    column_tag,
    encode_part,
    row_record,
    rows_tiebreak,
)
from ._tree import CHILD_BYTES
from .exceptions import CorruptDataError, InvalidArgumentError

#: The prefix of an owner's member (owners are any text: post ids' members start otherwise).
OWNER = "o"
#: The column of post ids: the slot past every column and its tie groups of earlier layouts, ordered by the moment.
POSTS = (_POST_SLOT, (("", "asc"),), False)
POSTS_TAG = column_tag(_POST_SLOT)
#: Greater than every tie of a column after its tag (ties are hex digits): the probe of a column's end.
_PAST = "g"
#: The most expired post ids a post forgets in each window it commits to.
_PRUNE = 4
#: The longest tie (a score tree entry's score) with the number a column that goes by first adds to its member.
_TIE_BYTES = 3 + MAX_PARTS * PART_CHARS + SEQ_CHARS


def record_columns(columns: Mapping[str, _Column]) -> RowColumns:
    """A window's columns as its record order takes them, the post ids' column last."""
    return (*((c.slot, c.parts, c.first) for c in columns.values()), POSTS)


def window_tiebreak(columns: Mapping[str, _Column]) -> str:
    """The tiebreak of a board's window sets: a record window of its columns."""
    return rows_tiebreak(record_columns(columns))


def owner_member(owner: str) -> str:
    return OWNER + owner


def row_value(values: dict[str, Any], updated: float, numbers: dict[str, Any] | None) -> tuple[Any, ...]:
    """A row's value: ``numbers`` (column tag -> number, ``None``: this row's own entry) in a window with columns that
    go by first, else ``None``."""
    if numbers is None:
        return (updated, msgpack.packb(values))
    return (updated, msgpack.packb([values, numbers]), None)


def loaded_value(values: dict[str, Any], updated: float, firsts: bool) -> tuple[Any, ...]:
    """A row's value as a load writes it: in a window with columns that go by first, reached at :data:`LOADED`."""
    if not firsts:
        return (updated, msgpack.packb(values))
    return (updated, msgpack.packb([values, {}]), LOADED)


def post_value(moment: float) -> tuple[Any, ...]:
    """A post id's value: a row of the field ``""``, the moment of the post's first try."""
    return (moment, msgpack.packb({"": moment}))


def as_row(owner: str, value: Any) -> Row:
    """The :class:`Row` a value holds (a copy of its values)."""
    return Row(owner, row_record(value)[0], value[0])


def tie(column: _Column, values: Mapping[str, Any]) -> str | None:
    """The tie of a row's values in ``column``: its tag and encoded key (``None``: the row lacks one of its fields)."""
    parts: list[Any] = [values.get(field) for field, _ in column.parts]
    if all(type(v) is int or type(v) is float for v in parts):
        return column_tag(column.slot) + "".join(encode_part(v, d) for v, (_, d) in zip(parts, column.parts))
    return None


def start(column: _Column) -> tuple[str]:
    """The probe below every key of ``column``."""
    return (column_tag(column.slot),)


def end(column: _Column) -> tuple[str]:
    """The probe above every key of ``column``, below the next column's."""
    return (column_tag(column.slot) + _PAST,)


def reached(columns: Mapping[str, _Column], old: Any, values: dict[str, Any]) -> dict[str, Any] | None:
    """A new row's numbers in the columns that go by first: the number the ``old`` row held its key by, where the key
    stays; none (the new row's own entry) where it changes. ``None`` in a window without such columns."""
    firsts = [c for c in columns.values() if c.first]
    if not firsts:
        return None
    if old is None:
        return {}
    had, numbers = row_record(old)
    kept = {}
    for column in firsts:
        now = tie(column, values)
        if now is not None and now == tie(column, had):
            tag = column_tag(column.slot)
            own = old[2] if len(old) == 3 else LOADED
            kept[tag] = own if numbers.get(tag) is None else numbers[tag]
    return kept


def expired_ids(ranking: Any, cutoff: float) -> list[str]:
    """The members of the oldest post ids of a window first tried before ``cutoff`` (:data:`_PRUNE` at most)."""
    low, old = ranking.count_below([(POSTS_TAG,), (POSTS_TAG + encode_part(cutoff, "asc"),)])
    return ranking.slice(low, min(old, low + _PRUNE))[0] if old > low else []


def window_problems(snap: Any, columns: Mapping[str, _Column]) -> list[str]:
    """What is wrong with a record window's rows (its set's own invariants are ``SortedSet.check``'s): each member an
    owner's, whose row's values are a map of field names, or a post id's, holding only the moment of its first try."""
    found: list[str] = []
    for member, value in snap.by_member(values=True):
        try:
            values = row_record(value)[0]
        except CorruptDataError as exc:
            found.append(f"member {member[:60]!r}: {exc}")
            continue
        if member.startswith(OWNER):
            if "" in values or not all(type(f) is str for f in values):
                found.append(f"row of {member[1:60]!r} has a field that is not a name: {sorted(map(repr, values))[:5]}")
        elif not member.startswith(_POST) or _post_owner(member) is None or list(values) != [""]:
            found.append(f"member {member[:60]!r} is neither an owner's row nor a post id's")
        elif values[""] != value[0]:
            found.append(f"post id {member[:60]!r} holds {values['']!r}, not its moment {value[0]!r}")
    return found


def check_fits(values: Iterable[tuple[str, Any]], node_bytes: int) -> None:
    """Refuse a row too heavy for nodes of ``node_bytes`` (a node holds at least four items): its member and value in
    the member index, its tie and member in the score tree."""
    heaviest = max((len(m.encode("utf-8")) + max(len(v[1]), _TIE_BYTES) for m, v in values), default=0)
    if 4 * (heaviest + CHILD_BYTES) > node_bytes:
        raise InvalidArgumentError(
            f"a row of {heaviest} bytes with its owner does not fit nodes of node_bytes={node_bytes} (a node holds "
            "at least four items)"
        )
