"""A post's write path: values checked and applied to a row, each window's commit, expired post ids forgotten."""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from typing import Any, NamedTuple

from . import _ops
from ._board_format import (
    _GROUPS,
    _MARK_SLOT,
    _POST_SLOT,
    _ROW,
    _ROW_SLOT,
    _SIZE,
    MAX_FIELDS,
    MAX_ROW_BYTES,
    Row,
    _Column,
    _group,
    _number,
    _row_entries,
    _row_member,
    members,
)
from ._board_settings import _check_field
from ._codec import pack
from ._order import INT_MAX, INT_MIN, check_choice, column_tie
from ._tree import CHILD_BYTES
from .exceptions import InvalidArgumentError, InvalidScoreError

#: The most expired post ids a post forgets, in each window it commits to and in the board's record of them.
_PRUNE = 4

Ops = list[tuple[str, str, Any]]


class _Plan(NamedTuple):
    """One window's part of a post: the ops of its commit."""

    instance: str
    ops: Ops


class _Post(NamedTuple):
    """A post with a ``post_id``, as each window's commit sees it."""

    post_id: str
    member: str  # of its entry in a window (and in the board's record of post ids)
    score: float  # of its entry in a window: ``_POST_SLOT`` + the moment it was first tried
    cutoff: float  # entries scored below this are older than ``post_id_ttl``: a post forgets a few


def _check_value(field: str, value: Any) -> Any:
    kind = type(value)
    if kind is bool or kind is str:
        return value
    if kind is int:
        if not INT_MIN <= value <= INT_MAX:
            raise InvalidScoreError(f"field {field!r}: integer {value} does not fit in 64 bits")
        return value
    if kind is float:
        if math.isnan(value):
            raise InvalidScoreError(f"field {field!r}: NaN is not a value")
        return value + 0.0
    raise InvalidArgumentError(
        f"field {field!r}: a value must be an int, float, str or bool, got {kind.__name__}: {value!r:.80}"
    )


def check_post(
    values: Any,
    ops: Mapping[str, str] | None,
    only: str | None,
    post_id: Any,
    columns: Mapping[str, _Column],
    numeric: Iterable[str],
    keep_best: Mapping[str, str],
) -> tuple[dict[str, Any], dict[str, str]]:
    """A post's values and ops, checked (``numeric``: the fields that must be numbers besides the columns')."""
    if not isinstance(values, Mapping):
        raise InvalidArgumentError(f"values must be a mapping of field -> value, got {values!r:.80}")
    checked = {_check_field(f): _check_value(f, v) for f, v in values.items()}
    if len(checked) > MAX_FIELDS:
        raise InvalidArgumentError(f"a row has at most {MAX_FIELDS} fields, got {len(checked)}")
    for column in columns.values():
        for field, _ in column.parts:
            if field in checked and not _number(checked[field]):
                raise InvalidScoreError(
                    f"field {field!r} ranks column {column.name!r}: it must be an int or a "
                    f"float, got {checked[field]!r:.80}"
                )
    for field in numeric:
        if field in checked and not _number(checked[field]):
            raise InvalidScoreError(f"field {field!r} must be an int or a float, got {checked[field]!r:.80}")
    ops = dict(ops or {})
    for field, op in ops.items():
        check_choice(op, _ops.OPS, f"ops[{field!r}]")
        if op == "best":
            best_op(field, keep_best, columns)
    if only is not None:
        check_choice(only, _ops.ONLY, "only")
    if post_id is not None and (not isinstance(post_id, str) or not post_id or len(post_id) > 128):
        raise InvalidArgumentError(f"post_id must be a non-empty str of at most 128 characters, got {post_id!r:.80}")
    return checked, ops


def best_op(field: str, keep_best: Mapping[str, str], columns: Mapping[str, _Column]) -> str:
    """The op of ``"best"`` for ``field``: from ``keep_best``, else from the first column ranking it."""
    if field in keep_best:
        return "lt" if keep_best[field] == "min" else "gt"
    for column in columns.values():
        for part, direction in column.parts:
            if part == field:
                return "gt" if direction == "desc" else "lt"
    raise InvalidArgumentError(f'op "best" for field {field!r} needs keep_best or a column to say what is best')


def new_row(
    row: Row | None,
    values: Mapping[str, Any],
    ops: Mapping[str, str],
    accumulate: tuple[str, ...],
    keep_best: Mapping[str, str],
    columns: Mapping[str, _Column],
) -> dict[str, Any]:
    """The row's values with ``values`` applied by each field's op; refuses a row past the limits."""
    updated = dict(row.values) if row is not None else {}
    for field, value in values.items():
        op = ops.get(field)
        if op is None:
            op = (
                "incr"
                if field in accumulate
                else ({"min": "lt", "max": "gt"}[keep_best[field]] if field in keep_best else "set")
            )
        elif op == "best":
            op = best_op(field, keep_best, columns)
        current = updated.get(field)
        if op == "set" or current is None and op != "incr":
            updated[field] = value
            continue
        if not _number(value) or current is not None and not _number(current):
            raise InvalidScoreError(f"field {field!r}: op {op!r} needs numbers, got {current!r} and {value!r}")
        updated[field] = _ops.resolve(op, current, value, max)[0]
    if len(updated) > MAX_FIELDS:
        raise InvalidArgumentError(f"a row has at most {MAX_FIELDS} fields, this one would have {len(updated)}")
    size = len(pack(updated))
    if size > MAX_ROW_BYTES:
        raise InvalidArgumentError(f"a row is at most {MAX_ROW_BYTES} bytes (msgpack), this one would be {size}")
    return updated


def checked_rows(
    rows: Any,
    owner: Callable[[Any], str],
    accumulate: tuple[str, ...],
    keep_best: Mapping[str, str],
    columns: Mapping[str, _Column],
) -> Iterator[tuple[str, dict[str, Any]]]:
    """A load's ``(owner, values)`` pairs (or mapping), each checked as a post's values, as they are read (``owner``
    checks an owner)."""
    if isinstance(rows, (str, bytes)) or not isinstance(rows, (Mapping, Iterable)):
        raise InvalidArgumentError(f"rows must be (owner, values) pairs or a mapping, got {rows!r:.80}")
    numeric = (*accumulate, *keep_best)
    for item in rows.items() if isinstance(rows, Mapping) else rows:
        if not isinstance(item, (tuple, list)) or len(item) != 2:
            raise InvalidArgumentError(f"each row must be an (owner, values) pair, got {item!r:.80}")
        who = owner(item[0])
        values, _ = check_post(item[1], None, None, None, columns, numeric, keep_best)
        if len(pack(values)) > MAX_ROW_BYTES:  # a first row takes the values as they are (see new_row)
            raise InvalidArgumentError(f"a row is at most {MAX_ROW_BYTES} bytes (msgpack), got {len(pack(values))}")
        yield who, values


def merged_rows(
    rows: Iterable[tuple[str, dict[str, Any]]],
    accumulate: tuple[str, ...],
    keep_best: Mapping[str, str],
    columns: Mapping[str, _Column],
) -> dict[str, dict[str, Any]]:
    """Checked rows as owner -> values; an owner given again merges as a second post would."""
    found: dict[str, dict[str, Any]] = {}
    for who, values in rows:
        if who in found:
            found[who] = merge_row(who, found[who], values, accumulate, keep_best, columns)
        else:
            found[who] = values
    return found


def merge_row(
    owner: str,
    values: dict[str, Any],
    more: dict[str, Any],
    accumulate: tuple[str, ...],
    keep_best: Mapping[str, str],
    columns: Mapping[str, _Column],
) -> dict[str, Any]:
    """A loaded row's ``values`` with the owner's next row ``more`` applied, as a post applies it."""
    return new_row(Row(owner, values, 0.0), more, {}, accumulate, keep_best, columns)


def commit_ops(
    columns: Mapping[str, _Column],
    owner: str,
    entry: str | None,
    row: Row | None,
    merged: dict[str, Any],
    stamp: float,
    posts: tuple[str, ...],
    post: _Post | None,
    expired: list[tuple[str, Any]],
    node_bytes: int,
) -> Ops:
    """One window's commit of a post: if the row entry is still ``entry`` (a new owner: no marker yet), move the column
    entries whose key changed and replace the row entry; with a ``post``, add its post id entry, forget ``expired``."""
    # Rows stored before post ids had entries keep the ids they hold (8 at most), still honoured.
    fresh_entry = _row_member(owner, merged, stamp, list(posts))
    old = members(columns, owner, row.values) if row is not None else {}
    new = members(columns, owner, merged)
    check_fits((fresh_entry, *new.values(), *([post.member] if post else [])), node_bytes)
    marker = _ROW + owner
    if entry is None:
        commit: Ops = [("expect", marker, None), ("set", marker, _MARK_SLOT)]
    else:
        commit = [("expect", entry, _ROW_SLOT)]
    for column, member in old.items():
        if new.get(column) != member:
            commit.append(("remove", member, None))
            commit += _group_ops(columns[column], member, leaving=True)
    for column, member in new.items():
        if old.get(column) != member:
            commit.append(("set", member, columns[column].slot))
            commit += _group_ops(columns[column], member, leaving=False)
    if fresh_entry != entry:
        if entry is not None:
            commit.append(("remove", entry, None))
        commit.append(("set", fresh_entry, _ROW_SLOT))
    if post is not None:
        commit += [("forget", m, s) for m, s in expired if m != post.member]
        commit.append(("set", post.member, post.score))
    return commit


def removal_ops(columns: Mapping[str, _Column], owner: str, entry: str, row: Row) -> Ops:
    """One window's commit of the owner's removal: if the row entry is still ``entry``, remove it, its column entries
    (their tie groups counted down) and the owner's marker. Its post id entries stay until they expire: a retry of a
    post counted before the removal counts nothing."""
    commit: Ops = [("expect", entry, _ROW_SLOT)]
    for column, member in members(columns, owner, row.values).items():
        commit.append(("remove", member, None))
        commit += _group_ops(columns[column], member, leaving=True)
    return [*commit, ("remove", entry, None), ("remove", _ROW + owner, None)]


def check_fits(entries: Collection[str], node_bytes: int) -> None:
    """Refuse entries too heavy for nodes of ``node_bytes`` (a node holds at least four items)."""
    if 4 * (4 * max(map(len, entries)) + CHILD_BYTES) <= node_bytes:  # fits at 4 UTF-8 bytes per character
        return
    heaviest = max(len(m.encode("utf-8")) for m in entries) + CHILD_BYTES
    if 4 * heaviest > node_bytes:
        raise InvalidArgumentError(
            f"a row entry of {heaviest} bytes does not fit nodes of node_bytes={node_bytes} (a node "
            "holds at least four items)"
        )


def _group_ops(column: _Column, member: str, leaving: bool) -> Ops:
    """The ops that keep the tie group of ``member`` counted as a row joins or leaves it.

    Both resolve in the commit (``incr`` and the ``group`` op), so posts of owners in one group never conflict.
    """
    tie = column_tie(member, len(column.parts))
    size = _SIZE + tie
    return [("incr", size, 1 if leaving else -1), ("group", _group(column, tie), (size, column.slot + _GROUPS))]


def _look(snap: Any, owner: str, post: _Post | None) -> tuple[str | None, bool, list[tuple[str, Any]]]:
    """In one snapshot of a window: the owner's row entry; whether the window counted ``post``; the oldest post id
    entries older than its cutoff (``_PRUNE`` at most), with their scores. One round trip."""
    if post is None:
        return _row_entries(snap, [owner])[0], False, []
    key, past = (post.score, post.member), (post.cutoff,)
    entry = _row_entries(snap, [owner], [key, (_POST_SLOT,), past])[0]
    first, at, after, old = snap.ranking.count_below([(_POST_SLOT,), key, (post.score, post.member + "\0"), past])
    expired: list[tuple[str, Any]] = []
    if old > first:
        names, scores = snap.ranking.slice(first, min(old, first + _PRUNE))
        expired = list(zip(names, scores))
    return entry, after > at, expired


def expired(ranking: Any, cutoff: float) -> list[tuple[str, Any]]:
    """The oldest entries of the board's record of post ids scored below ``cutoff`` (``_PRUNE`` at most)."""
    old = ranking.count_below([(cutoff,)])[0]
    names, scores = ranking.slice(0, min(old, _PRUNE)) if old > 0 else ([], [])
    return list(zip(names, scores))
