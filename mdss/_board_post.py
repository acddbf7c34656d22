"""A post's values checked and applied to a row (as each window's commit applies them: ``mdss._board_ops.post``), a
load's rows checked and merged, and the expired post ids of the board's record of them."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from . import _ops
from ._board_format import (
    MAX_FIELDS,
    MAX_ROW_BYTES,
    Row,
    _Column,
    _number,
)
from ._board_settings import _check_field
from ._codec import pack
from ._order import INT_MAX, INT_MIN, check_choice, check_text, iterate
from .exceptions import InvalidArgumentError, InvalidScoreError, shown

#: The most expired post ids a post forgets in the board's record of them.
_PRUNE = 4


def _check_value(field: str, value: Any) -> Any:
    kind = type(value)
    if kind is bool:
        return value
    if kind is str:
        return check_text(value, f"field {field!r}: the value")
    if kind is int:
        if not INT_MIN <= value <= INT_MAX:
            raise InvalidScoreError(f"field {field!r}: integer {shown(value)} does not fit in 64 bits")
        return value
    if kind is float:
        if math.isnan(value):
            raise InvalidScoreError(f"field {field!r}: NaN is not a value")
        return value + 0.0
    raise InvalidArgumentError(
        f"field {field!r}: a value must be an int, float, str or bool, got {kind.__name__}: {shown(value)}"
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
        raise InvalidArgumentError(f"values must be a mapping of field -> value, got {shown(values)}")
    checked = {_check_field(f): _check_value(f, v) for f, v in values.items()}
    if len(checked) > MAX_FIELDS:
        raise InvalidArgumentError(f"a row has at most {MAX_FIELDS} fields, got {len(checked)}")
    for column in columns.values():
        for field, _ in column.parts:
            if field in checked and not _number(checked[field]):
                raise InvalidScoreError(
                    f"field {field!r} ranks column {column.name!r}: it must be an int or a "
                    f"float, got {shown(checked[field])}"
                )
    for field in numeric:
        if field in checked and not _number(checked[field]):
            raise InvalidScoreError(f"field {field!r} must be an int or a float, got {shown(checked[field])}")
    if ops is not None and not isinstance(ops, Mapping):
        raise InvalidArgumentError(f"ops must be a mapping of field -> op, got {shown(ops)}")
    ops = dict(ops or {})
    for field, op in ops.items():
        _check_field(field)
        check_choice(op, _ops.OPS, f"ops[{field!r}]")
        if op == "best":
            best_op(field, keep_best, columns)
    if only is not None:
        check_choice(only, _ops.ONLY, "only")
    if post_id is not None and (not isinstance(post_id, str) or not post_id or len(post_id) > 128):
        raise InvalidArgumentError(f"post_id must be a non-empty str of at most 128 characters, got {shown(post_id)}")
    if post_id is not None:
        check_text(post_id, "post_id")
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
        raise InvalidArgumentError(f"rows must be (owner, values) pairs or a mapping, got {shown(rows)}")
    numeric = (*accumulate, *keep_best)
    for item in rows.items() if isinstance(rows, Mapping) else iterate(rows, "(owner, values) pairs"):
        if not isinstance(item, (tuple, list)) or len(item) != 2:
            raise InvalidArgumentError(f"each row must be an (owner, values) pair, got {shown(item)}")
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
    """A loaded row's ``values`` with the owner's next row ``more`` applied, as a post applies it; a refusal names the
    owner (its rows may lie far apart in the input, and are merged once read)."""
    try:
        return new_row(Row(owner, values, 0.0), more, {}, accumulate, keep_best, columns)
    except InvalidArgumentError as exc:
        raise type(exc)(f"owner {shown(owner, 60)}, whose rows merge: {exc}") from None


def expired(ranking: Any, cutoff: float) -> list[tuple[str, Any]]:
    """The oldest entries of the board's record of post ids scored below ``cutoff`` (``_PRUNE`` at most)."""
    old = ranking.count_below([(cutoff,)])[0]
    names, scores = ranking.slice(0, min(old, _PRUNE)) if old > 0 else ([], [])
    return list(zip(names, scores))
