"""A board's settings (columns and field rules) checked, stored and read back; retention; the move of old boards."""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from . import _tail
from ._board_format import _MARK_SLOT, _ROW, _ROW_SLOT, MAX_FIELD_NAME, MAX_FIELDS, _Column, _row_member
from ._codec import FORMAT, pack, seal, unpack
from ._keys import Keyspace, board_keyspace
from ._order import MAX_PARTS, check_choice, check_count, check_text
from ._schedules import Calendar
from .exceptions import CorruptDataError, InvalidArgumentError, shown
from .stores.base import Record, Store

#: How rows are stored, in the board's settings: 2, as entries of the window's set (boards stored without it kept them
#: in records); 3, as the values of record windows (``mdss._board_rows``), at the parts :func:`record_part` names.
ROWS_LAYOUT = 2
RECORDS_LAYOUT = 3


def record_part(instance: str) -> str:
    """The part of a board holding window ``instance`` as a record window: beside the part of layouts 1 and 2 (the
    instance itself), so that a move from them writes the new window whole before the old one goes."""
    return f"r#{instance}"


#: The gc epoch entry of each window in boards that kept rows in records (see :func:`migration`).
_LEGACY_EPOCH = "e:"


def _check_field(name: Any, what: str = "field") -> str:
    if not isinstance(name, str) or not name or len(name) > MAX_FIELD_NAME:
        raise InvalidArgumentError(
            f"a {what} name must be a non-empty str of at most {MAX_FIELD_NAME} characters, got {shown(name)}"
        )
    return check_text(name, f"a {what} name")


def _strings(items: Any, what: str) -> list[Any]:
    if isinstance(items, (str, bytes)) or not isinstance(items, Iterable):
        raise InvalidArgumentError(f"{what} must be a list of names, got {shown(items)}")
    return list(items)


def check_columns(columns: Any) -> dict[str, _Column]:
    if not isinstance(columns, Mapping) or not columns:
        raise InvalidArgumentError(f"columns must be a non-empty mapping of name -> direction, got {shown(columns)}")
    if len(columns) > MAX_FIELDS:
        raise InvalidArgumentError(f"a leaderboard has at most {MAX_FIELDS} columns, got {len(columns)}")
    found: dict[str, _Column] = {}
    for slot, (column, spec) in enumerate(columns.items()):
        _check_field(column, "column")
        if isinstance(spec, str):
            parts: Any = [(column, spec)]
        elif isinstance(spec, (list, tuple)) and spec:
            parts = list(spec)
        else:
            raise InvalidArgumentError(
                f"column {column!r} must be a direction or a list of (field, direction), got {shown(spec)}"
            )
        if len(parts) > MAX_PARTS:
            raise InvalidArgumentError(f"column {column!r} has {len(parts)} parts; the limit is {MAX_PARTS}")
        checked = []
        for part in parts:
            if not isinstance(part, (list, tuple)) or len(part) != 2:
                raise InvalidArgumentError(f"column {column!r}: a part must be (field, direction), got {shown(part)}")
            field, direction = part
            checked.append((_check_field(field), check_choice(direction, ("desc", "asc"), f"{column!r} direction")))
        if len({f for f, _ in checked}) != len(checked):
            raise InvalidArgumentError(f"column {column!r} names a field twice")
        found[column] = _Column(column, slot, tuple(checked))
    return found


def check_tiebreak(tiebreak: Any, columns: dict[str, _Column]) -> dict[str, _Column]:
    """``columns`` with the ties ``tiebreak`` asks for: a mapping of column -> ``"owner"`` (ties by owner id) or
    ``"first"`` (by who reached the key first), or one of those for every column; ``None``: by owner."""
    if tiebreak is None:
        return columns
    if isinstance(tiebreak, str):
        tiebreak = dict.fromkeys(columns, tiebreak)
    if not isinstance(tiebreak, Mapping):
        raise InvalidArgumentError(f'tiebreak must map columns to "owner" or "first", got {shown(tiebreak)}')
    unknown = [name for name in tiebreak if name not in columns]
    if unknown:
        raise InvalidArgumentError(f"tiebreak names columns the board does not have: {shown(unknown[:5])}")
    ties = {
        name: check_choice(tiebreak.get(name, "owner"), ("owner", "first"), f"tiebreak[{name!r}]") for name in columns
    }
    return {name: column._replace(first=ties[name] == "first") for name, column in columns.items()}


def check_rules(accumulate: Any, keep_best: Any, windows: Any, retention: Any, calendar: Calendar) -> tuple[Any, ...]:
    """``accumulate``, ``keep_best``, the window kinds (those of ``calendar``) and ``retention``, checked."""
    accumulated = tuple(dict.fromkeys(_check_field(f) for f in _strings(accumulate, "accumulate")))
    best = dict(keep_best or {})
    for field, how in best.items():
        _check_field(field)
        check_choice(how, ("min", "max"), f"keep_best[{field!r}]")
    both = set(best) & set(accumulated)
    if both:
        raise InvalidArgumentError(f"fields both accumulated and kept best: {sorted(both)}")
    kinds = tuple(dict.fromkeys(calendar.kind(k) for k in _strings(windows, "windows")))
    if not kinds:
        raise InvalidArgumentError(f"windows must name at least one kind among {calendar.kinds}, got {shown(windows)}")
    kept = dict(retention or {})
    for kind, keep in kept.items():
        if kind not in kinds or kind == "all":
            raise InvalidArgumentError(f"retention names {kind!r}, which is not a dated window of this board")
        check_count(keep, f"retention[{kind!r}]", least=1)
    return accumulated, best, kinds, kept


def settings(
    columns: Mapping[str, _Column], accumulate: Iterable[str], keep_best: Mapping[str, str], layout: int | None
) -> bytes:
    """The stored settings: columns, field rules, how rows are stored (``None``: in records, as older boards), and the
    columns that go by first, when there are some (so the settings of a board without them are what they were)."""
    found = [
        FORMAT,
        [[c.name, [list(p) for p in c.parts]] for c in columns.values()],
        list(accumulate),
        sorted(keep_best.items()),
    ]
    firsts = [c.name for c in columns.values() if c.first]
    return seal(pack(found if layout is None else [*found, layout, firsts] if firsts else [*found, layout]))


def stored_settings(store: Store, name: str) -> tuple[Record | None, bool]:
    """The board's settings record (``None``: no board), and whether its parts are at their names from before they were
    internal (``legacy``: :func:`mdss._keys.board_keyspace`). The internal key first; then the old key, where a user's
    set ``<board>#board`` may be stored instead (its head is a map, board settings an array)."""
    record = store.get(board_keyspace(store, name, "board", False).head)
    if record is not None:
        return record, False
    key = board_keyspace(store, name, "board", True).head
    old = store.get(key)
    if old is None or _tail.marked(old.value):
        return None, False
    return (old, True) if type(unpack(key, old.value, "leaderboard settings")[1]) is list else (None, False)


def stored_rules(store: Store, name: str) -> dict[str, Any]:
    """The ``columns``, ``accumulate``, ``keep_best`` and ``tiebreak`` board ``name`` was stored with."""
    record, legacy = stored_settings(store, name)
    if record is None:
        raise InvalidArgumentError(f"there is no leaderboard {name!r} in this store (create it with its columns)")
    key = board_keyspace(store, name, "board", legacy).head
    _, found = unpack(key, record.value, "leaderboard settings")
    try:
        columns = {column: [(field, how) for field, how in parts] for column, parts in found[1]}
        firsts = found[5] if len(found) > 5 else []
        if type(firsts) is not list or not set(firsts) <= set(columns):
            raise TypeError(firsts)
        return {
            "columns": columns,
            "accumulate": list(found[2]),
            "keep_best": {f: how for f, how in found[3]},
            "tiebreak": dict.fromkeys(firsts, "first"),
        }
    except (TypeError, ValueError, IndexError):
        raise CorruptDataError("stored leaderboard settings have the wrong shape", key) from None


def migration(store: Store, records: Keyspace, entries: Iterable[Any]) -> Iterator[list[tuple[str, str, Any]]]:
    """The commits that move one window of a board stored before rows were entries of its sets.

    Each owner had a pointer ``r:<owner>`` naming a row record (in ``records``): each commit of 1000 owners expects
    their pointers unchanged, makes them markers and adds their row entries.
    """
    pointers = [(e.member, e.score) for e in entries if e.member.startswith(_ROW) and e.score != _MARK_SLOT]
    for first in range(0, len(pointers), 1000):
        batch = pointers[first : first + 1000]
        keys = [records.node(f"{version:x}") for _, version in batch]
        ops: list[tuple[str, str, Any]] = []
        for (pointer, version), key, data in zip(batch, keys, store.get_many(keys)):
            if data is None:
                raise CorruptDataError("a row record its pointer names is missing", key)
            _, found = unpack(key, data, "leaderboard row")
            if type(found) is not list or len(found) != 5 or found[1] != pointer[len(_ROW) :]:
                raise CorruptDataError("stored leaderboard row has the wrong shape", key)
            ops += [("expect", pointer, version), ("set", pointer, _MARK_SLOT)]
            ops.append(("set", _row_member(found[1], found[2], found[3], found[4]), _ROW_SLOT))
        yield ops


def retired(instance: str, names: list[str], keep: int, calendar: Calendar) -> list[str] | None:
    """With ``keep`` windows of the kind of ``instance`` retained (``names``: those listed): the older windows to drop
    once ``instance`` is listed, or ``None`` if ``instance`` is itself past keeping."""
    begins = calendar.start(instance) or 0
    if sum(1 for n in names if (calendar.start(n) or 0) > begins) >= keep:
        return None
    older = [n for n in names if (calendar.start(n) or 0) < begins]
    return older[: max(0, len(older) - (keep - 1))]


def check_storage(now: Any, node_bytes: Any, post_id_ttl: Any, options: dict[str, Any]) -> tuple[Any, ...]:
    """``now``, ``node_bytes``, ``post_id_ttl`` and the windows' set options (unsharded), checked."""
    if now is not None and not callable(now):
        raise InvalidArgumentError(f"now must be callable, got {shown(now)}")
    if type(node_bytes) is not int or not 256 <= node_bytes <= 1 << 30:
        raise InvalidArgumentError(f"node_bytes must be an int from 256 to 2**30, got {shown(node_bytes)}")
    if type(post_id_ttl) not in (int, float) or not 0 < post_id_ttl < math.inf:
        raise InvalidArgumentError(f"post_id_ttl must be a positive number of seconds, got {shown(post_id_ttl)}")
    shards = options.pop("shards", None)
    if shards is not None and not (type(shards) is int and shards == 1):
        raise InvalidArgumentError(f"a leaderboard's windows are unsharded: shards must be 1, got {shown(shards)}")
    return now, node_bytes, post_id_ttl, options
