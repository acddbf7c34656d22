"""Scores, members and the order of a set: every key comparison lives here.

A set's entries are ordered by *sort key* ``(s, member)`` where ``s`` is the score for an ascending set and its negation
for a descending one, so that the best entry always has the smallest key and ties are broken by member (code point
order, ascending) in both orders. Python compares ``int`` and ``float`` exactly, so integer scores keep all 64 bits:
unlike Redis' doubles, 2**53 + 1 stays distinct from 2**53. Composite scores would change only this module.
"""

from __future__ import annotations

import functools
import json
import math
import numbers
import operator
import struct
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, NamedTuple

import msgpack

from .exceptions import CorruptDataError, InvalidArgumentError, InvalidMemberError, InvalidScoreError, shown

#: Longest member, in UTF-8 bytes: 1000 entries stay well under DynamoDB's 400 KB items and Riak's advised object size.
MAX_MEMBER_BYTES = 256

INT_MIN = -(2**63)
INT_MAX = 2**63 - 1

Score = int | float
KeyFn = Callable[[str, Any], Any]


def same_keys(a: Any, b: Any) -> bool:
    """Whether two sequences of sort keys are the same, score types included: ``(5, m) == (5.0, m)``, but a
    score changed from 5 to 5.0 must read back as 5.0, so kept results are reused only for identical keys."""
    return bool(a == b) and all(type(x[0]) is type(y[0]) for x, y in zip(a, b))


class Entry(NamedTuple):
    """One entry of a set as a read returns it: ``member``, ``score`` and 1-based ``rank``."""

    member: str
    score: Score
    rank: int


class DataEntry(NamedTuple):
    """An entry read with its member's data (``with_data=True``): ``member``, ``score``, ``rank`` and ``data``
    (``None`` when the member carries none)."""

    member: str
    score: Score
    rank: int
    data: str | bytes | None


def same_value(a: Any, b: Any) -> bool:
    """The same stored value: ``1`` and ``1.0`` differ (the type is kept), in a ``(score, data)`` value too."""
    return type(a) is type(b) and a == b and (type(a) is not tuple or type(a[0]) is type(b[0]))


class _Top:
    """Compares greater than any member: ``(s, TOP)`` follows every key with score key ``s``."""

    __slots__ = ()

    def __lt__(self, other: object) -> bool:
        return False

    def __gt__(self, other: object) -> bool:
        return other is not self

    def __repr__(self) -> str:
        return "TOP"


TOP = _Top()


def check_member(member: Any) -> str:
    """Return ``member`` if it is a valid member, else raise :class:`InvalidMemberError`."""
    if type(member) is not str:
        if not isinstance(member, str):
            raise InvalidMemberError(f"a member must be a str, got {type(member).__name__}: {shown(member)}")
        member = exact(member)
    if not member:
        raise InvalidMemberError("a member must not be empty")
    if len(member) > MAX_MEMBER_BYTES // 4 or not member.isascii():  # a shorter one cannot be over the limit
        try:
            size = len(member.encode("utf-8"))
        except UnicodeEncodeError as exc:
            raise InvalidMemberError(f"member {shown(member)} is not valid Unicode: {exc.reason}") from None
        if size > MAX_MEMBER_BYTES:
            raise InvalidMemberError(
                f"member {member[:40]!r}... is {size} bytes in UTF-8; the limit is {MAX_MEMBER_BYTES}"
            )
    return member


def check_members(members: Any) -> list[str]:
    """The valid members of an iterable (not a single string: a common slip), else an :class:`InvalidArgumentError`."""
    if isinstance(members, (str, bytes)) or not isinstance(members, Iterable):
        raise InvalidArgumentError(f"members must be an iterable of members, got {shown(members)}")
    return [check_member(m) for m in iterate(members, "an iterable of members")]


def check_score(score: Any) -> Score:
    """Return ``score`` as an ``int`` or ``float`` if valid, else raise :class:`InvalidScoreError`. Integers must fit in
    64 bits (signed); floats must not be NaN (±inf is allowed); ``-0.0`` becomes ``0.0``. Booleans are refused: a
    ``True`` score is almost always a bug."""
    kind = type(score)
    if kind is int:
        if INT_MIN <= score <= INT_MAX:
            return score
        raise InvalidScoreError(f"integer score {shown(score)} does not fit in 64 bits (limit ±2**63)")
    if kind is float:
        if score != score:
            raise InvalidScoreError("a score must not be NaN")
        return score + 0.0  # -0.0 -> 0.0
    if isinstance(score, bool) or not isinstance(score, numbers.Real):
        raise InvalidScoreError(f"a score must be an int or a float, got {kind.__name__}: {shown(score)}")
    # int and float subclasses, numpy scalars, fractions: as the plain type.
    if isinstance(score, numbers.Integral):
        return check_score(operator.index(score))
    try:
        return check_score(float(score))
    except (OverflowError, ValueError, TypeError) as exc:  # Fraction(10**400, 3): too large for a float
        raise InvalidScoreError(f"score {shown(score)} is not a float: {exc}") from None


def iterate(values: Any, what: str) -> Iterator[Any]:
    """An iterator over ``values``, or :class:`InvalidArgumentError` saying they should be ``what``: some objects look
    iterable and are not (a numpy array of no dimension)."""
    try:
        return iter(values)
    except TypeError:
        raise InvalidArgumentError(f"expected {what}, got {shown(values)}") from None


def _pairs(pairs: Any) -> Iterable[tuple[Any, Any]]:
    if isinstance(pairs, (str, bytes)) or not isinstance(pairs, (Mapping, Iterable)):
        raise InvalidArgumentError(f"expected a mapping or an iterable of (member, score), got {shown(pairs)}")
    for pair in pairs.items() if isinstance(pairs, Mapping) else iterate(pairs, "an iterable of (member, score)"):
        try:
            member, score = pair
        except (TypeError, ValueError):
            raise InvalidArgumentError(f"expected (member, score) pairs, got {shown(pair)}") from None
        yield member, score


def each_pair(pairs: Any) -> Iterable[tuple[str, Score]]:
    """Validated ``(member, score)`` pairs, in order, from a mapping or an iterable of pairs."""
    for member, score in _pairs(pairs):
        yield check_member(member), check_score(score)


def checked_pairs(pairs: Any) -> Iterator[tuple[str, Score]]:
    """Many ``(member, score)`` pairs, validated as they are read. The same rules as :func:`check_member` and
    :func:`check_score`, with the common case (short ASCII members, int or float scores) inlined: a bulk load of a
    million pairs spends its time sorting, not validating."""
    short = MAX_MEMBER_BYTES // 4
    for member, score in _pairs(pairs):
        if type(member) is not str or not member or len(member) > short or not member.isascii():
            member = check_member(member)
        kind = type(score)
        if not ((kind is int and INT_MIN <= score <= INT_MAX) or (kind is float and score == score and score)):
            score = check_score(score)
        yield member, score


def check_pairs(pairs: Any) -> dict[str, Score]:
    """Validate many ``(member, score)`` pairs into a dict (the last score of a repeated member wins)."""
    return dict(checked_pairs(pairs))


def exact(text: Any) -> Any:
    """A ``str`` subclass as the plain ``str`` of its text (anything else as it is): names and members are stored by
    their text, where a subclass's own ``__str__`` or ``__format__`` may say something else (an ``Enum``'s
    ``"Team.RED"``, which f-strings spell differently from one Python to the next)."""
    return str.__str__(text) if isinstance(text, str) and type(text) is not str else text


def check_text(text: str, what: str) -> str:
    """``text`` (a ``str``) if it is valid Unicode: a lone surrogate has no UTF-8, so it can be neither stored nor
    packed (an :class:`InvalidArgumentError` naming ``what``, not msgpack's ``UnicodeEncodeError``)."""
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise InvalidArgumentError(f"{what} {shown(text)} is not valid Unicode: {exc.reason}") from None
    return exact(text)


def check_choice(value: Any, allowed: tuple[str, ...], what: str) -> str:
    """``value`` if it is one of ``allowed``, else :class:`InvalidArgumentError` naming ``what``."""
    if not isinstance(value, str) or value not in allowed:
        raise InvalidArgumentError(f"{what} must be one of {', '.join(map(repr, allowed))}, got {shown(value)}")
    return value


def check_count(value: Any, what: str, least: int = 0, most: int | None = None) -> int:
    """``value`` if it is an int of at least ``least`` (and at most ``most``), else :class:`InvalidArgumentError` naming
    ``what``."""
    if type(value) is not int or value < least or (most is not None and value > most):
        bounds = f">= {least}" if most is None else f"from {least} to {most:,}"
        raise InvalidArgumentError(f"{what} must be an int {bounds}, got {shown(value)}")
    return value


def check_flag(value: Any, what: str) -> bool:
    """``value`` if it is True or False (not merely truthy), else :class:`InvalidArgumentError` naming ``what``."""
    if type(value) is not bool:
        raise InvalidArgumentError(f"{what} must be True or False, got {shown(value)}")
    return value


def finite(value: Any) -> bool:
    """Whether ``value`` is an int or float (not a bool) that is a finite double: an int past a double's range (10**400)
    is not, as every duration and moment mdss computes with is a float."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


#: The most seconds a duration option may name: a wait or a sleep of more overflows the platform's timers (about 292
#: years on Linux, 49 days on Windows), and no grace, budget or staleness needs it.
MAX_SECONDS = threading.TIMEOUT_MAX


def check_seconds(value: Any, what: str) -> float:
    """``value`` if it is a finite, non-negative number of seconds up to :data:`MAX_SECONDS`, else
    :class:`InvalidArgumentError`."""
    if not finite(value) or not 0 <= value <= MAX_SECONDS:
        raise InvalidArgumentError(f"{what} must be a number of seconds from 0 to {MAX_SECONDS:g}, got {shown(value)}")
    return value


def check_positive(value: Any, what: str) -> float:
    """``value`` if it is a finite number above 0, else :class:`InvalidArgumentError`."""
    if not finite(value) or value <= 0:
        raise InvalidArgumentError(f"{what} must be a positive number, got {shown(value)}")
    return value


def add_scores(a: Score, b: Score) -> Score:
    """``a + b`` for ``incr``, refusing a result that overflows 64 bits or is NaN (inf - inf)."""
    total = a + b
    if type(total) is float and math.isnan(total):
        raise InvalidScoreError(f"{a!r} + {b!r} is NaN")
    return check_score(total)


#: Longest data beside a member (``add(..., data=)``), in bytes: str (UTF-8) or bytes. A store with a value limit
#: allows less at large chunk sizes (:func:`data_room`).
MAX_DATA_BYTES = 1024


def score_of(value: Any) -> Score:
    """The score in a member's value: the value itself, or the first item of ``(score, data)`` (or of a ``"first"``
    set's ``(score, data, seq)``)."""
    return value[0] if type(value) is tuple else value


def data_of(value: Any) -> Any:
    """The data in a member's value (``None``: none)."""
    return value[1] if type(value) is tuple else None


def valued(score: Score | None, data: Any) -> Any:
    """The value a member holds: its score alone, or ``(score, data)`` when it carries data (``None``: absent)."""
    return score if data is None or score is None else (score, data)


def check_data(data: Any, room: int = MAX_DATA_BYTES) -> str | bytes | None:
    """``data`` if it is ``None``, or a ``str`` or ``bytes`` of at most ``room`` bytes (UTF-8 for a ``str``), else
    :class:`InvalidArgumentError`. Strings, as the peers keep member data in Redis hashes: structured data is the
    caller's JSON or msgpack."""
    if data is None:
        return None
    if isinstance(data, str):
        data = exact(data)
        try:
            size = len(data.encode("utf-8"))
        except UnicodeEncodeError as exc:
            raise InvalidArgumentError(f"data {data[:40]!r} is not valid Unicode: {exc.reason}") from None
    elif isinstance(data, (bytes, bytearray, memoryview)):
        data = memoryview(data).tobytes()  # its bytes: a subclass's own __bytes__ may say anything
        size = len(data)
    else:
        raise InvalidArgumentError(f"data must be str or bytes (or None), got {type(data).__name__}: {shown(data)}")
    if size > room:
        limit = f"the {room} bytes a member may carry"
        if room < MAX_DATA_BYTES:
            limit += " in a set of this chunk_size on this store (a smaller chunk_size leaves more)"
        raise InvalidArgumentError(f"data of {size} bytes is over {limit}")
    return data


def member_key(member: str, score: Any) -> str:
    """The member index's key: the member alone (code point order)."""
    return member


class _Desc(str):
    """A member that sorts in reverse code point order, in the keys of a set whose ties go member descending.

    Its comparisons are ``str``'s own, swapped (C slot wrappers, no Python frames); equality and hashing are
    ``str``'s. Compared with a plain ``str``, Python asks the subclass first, so the order holds either way round."""

    __slots__ = ()
    __lt__ = str.__gt__
    __gt__ = str.__lt__
    __le__ = str.__ge__
    __ge__ = str.__le__


# Each takes a score or a member's value (``(score, data)``: a member index's value keys as its score).
def _desc_key(member: str, score: Any) -> tuple[Any, str]:
    return (-(score if type(score) is not tuple else score[0]), member)


def _asc_key(member: str, score: Any) -> tuple[Any, str]:
    return (score if type(score) is not tuple else score[0], member)


def _desc_key_rev(member: str, score: Any) -> tuple[Any, str]:
    return (-(score if type(score) is not tuple else score[0]), _Desc(member))


def _asc_key_rev(member: str, score: Any) -> tuple[Any, str]:
    return (score if type(score) is not tuple else score[0], _Desc(member))


#: The key functions of whole nodes, at C speed (a node decodes a thousand keys at once): keyfn -> (members, scores)
#: -> keys.
NODE_KEYS: dict[KeyFn, Callable[[Sequence[str], Sequence[Any]], tuple[Any, ...]]] = {
    member_key: lambda members, scores: tuple(members),
    _desc_key: lambda members, scores: tuple(zip(map(operator.neg, scores), members)),
    _asc_key: lambda members, scores: tuple(zip(scores, members)),
    _desc_key_rev: lambda members, scores: tuple(zip(map(operator.neg, scores), map(_Desc, members))),
    _asc_key_rev: lambda members, scores: tuple(zip(scores, map(_Desc, members))),
}

#: How a set orders members with equal scores: by member (code point order; Redis' order in ascending sets), by
#: member descending (Redis' order in descending sets: ZREVRANGE lists a tie's members from the greatest), or by who
#: reached the score first (the set's own commit order: the update log's sequence number of the entry that gave the
#: member its score).
TIEBREAKS = ("member", "member_desc", "first")

#: Added to a sequence number before it is spelled (16 hex digits, code point order = numeric order).
_SEQ_BIAS = 1 << 63
#: Characters a ``"first"`` set's score tree puts before each member: its sequence number (:func:`spell`).
SEQ_CHARS = 16
#: The sequence number of every entry a load writes: before any commit's (those count from 0), ties among them by
#: member.
LOADED = -1


def spell(seq: int, member: str) -> str:
    """A ``"first"`` set's score tree member: the sequence number as 16 hex digits, then the member; comparing two
    compares the numbers first."""
    return f"{seq + _SEQ_BIAS:016x}{member}"


def spelled_number(spelled: str) -> int:
    """The sequence number :func:`spell` put before a member."""
    return int(spelled[:SEQ_CHARS], 16) - _SEQ_BIAS


def spell_at(member: str, at: int, seq: int) -> str:
    """``member`` with ``seq`` spelled (as :func:`spell` does) before its character ``at``: a board column's key, its
    number, then the owner."""
    return f"{member[:at]}{seq + _SEQ_BIAS:016x}{member[at:]}"


#: A board window's tiebreak: ``"first:"`` then, for each column ranked by who reached its key first, its tag and
#: where its key ends (``"first:00:22,03:41"``). Internal: a board passes it to its windows' sets.
COLUMNS_FIRST = "first:"


def columns_first(ends: Mapping[str, int]) -> str:
    """The tiebreak of a board window whose columns (tag -> where the key ends in a column member) go by first."""
    return COLUMNS_FIRST + ",".join(f"{tag}{at}" for tag, at in sorted(ends.items()))


def _column_ends(tiebreak: str) -> dict[str, int]:
    """The columns a board window's tiebreak names (tag -> where the key ends); ValueError if it is malformed."""
    ends = {}
    for item in tiebreak[len(COLUMNS_FIRST) :].split(","):
        tag, at = item[:3], int(item[3:], 10)
        hexed = len(tag) == 3 and tag[2] == ":" and all(c in "0123456789abcdef" for c in tag[:2])
        if not hexed or not 3 <= at <= MAX_MEMBER_BYTES or tag in ends:
            raise ValueError(item)
        ends[tag] = at
    return ends


#: A record window's tiebreak: ``"rows:"`` then its columns (:func:`rows_tiebreak`). Its members' values are rows, and
#: each row makes one key per column whose fields it has (:class:`Order`, ``entries``).
ROWS = "rows:"

#: Columns of a record window: ``(slot, ((field, "asc" | "desc"), ...), first)`` each, ``first`` whether its ties go by
#: who reached the key first (else by member).
RowColumns = tuple[tuple[int, tuple[tuple[str, str], ...], bool], ...]


def rows_tiebreak(columns: RowColumns) -> str:
    """The tiebreak of a record window with ``columns``: the columns in JSON (field names are any text), each
    ``[slot, parts]``, or ``[slot, parts, "first"]`` for one whose ties go by first."""
    spelled = [[slot, [list(p) for p in parts], *(["first"] if first else [])] for slot, parts, first in columns]
    return ROWS + json.dumps(spelled, separators=(",", ":"))


@functools.lru_cache(maxsize=64)
def row_columns(tiebreak: str) -> RowColumns:
    """The columns a record window's tiebreak names; ValueError if it is malformed (not as :func:`rows_tiebreak`
    spells them, slots repeated or out of 0..255, parts not 1..``MAX_PARTS`` of ``(field, direction)``)."""
    try:
        found = json.loads(tiebreak[len(ROWS) :])
    except ValueError:
        raise ValueError("not JSON") from None
    columns: list[tuple[int, tuple[tuple[str, str], ...], bool]] = []
    for column in found if type(found) is list else [None]:
        if type(column) is not list or len(column) not in (2, 3) or type(column[0]) is not int:
            raise ValueError(f"column {shown(column, 40)}")
        given = column[1] if type(column[1]) is list else []
        parts = tuple((p[0], p[1]) for p in given if type(p) is list and len(p) == 2 and type(p[0]) is str)
        if len(parts) != len(given) or not 1 <= len(parts) <= MAX_PARTS or not 0 <= column[0] <= 255:
            raise ValueError(f"column {shown(column, 40)}")
        if any(d not in ("asc", "desc") for _, d in parts) or column[2:] not in ([], ["first"]):
            raise ValueError(f"column {shown(column, 40)}")
        columns.append((column[0], parts, len(column) == 3))
    result = tuple(columns)
    if not result or len({c[0] for c in result}) != len(result) or rows_tiebreak(result) != tiebreak:
        raise ValueError("columns")
    return result


def valid_tiebreak(tiebreak: Any) -> bool:
    """Whether a stored tiebreak is one this version knows: a set's (:data:`TIEBREAKS`) or a board window's."""
    if tiebreak in TIEBREAKS:
        return True
    if type(tiebreak) is not str:
        return False
    try:
        if tiebreak.startswith(ROWS):
            return bool(row_columns(tiebreak))
        return tiebreak.startswith(COLUMNS_FIRST) and tiebreak == columns_first(_column_ends(tiebreak))
    except ValueError:
        return False


def is_row(value: Any) -> bool:
    """Whether a member's value in a record window is a row: ``(updated, bytes)``, or ``(updated, bytes, seq)`` in a
    window with columns whose ties go by first (``seq``: the number of the log entry that wrote it)."""
    return type(value) is tuple and 2 <= len(value) <= 3 and type(value[1]) is bytes


def row_record(value: tuple[Any, ...]) -> tuple[dict[str, Any], dict[str, Any]]:
    """A row's values and, per column tag whose ties go by first, the number of the entry that gave the row its key
    there (``None``: the row's own entry, ``value[2]``). Its bytes are msgpack: the values' map, or ``[values,
    numbers]``. :class:`CorruptDataError` if they are neither."""
    try:
        found = msgpack.unpackb(value[1], raw=False)
    except Exception as exc:  # msgpack raises several kinds on garbage
        raise CorruptDataError(f"a row's values are not msgpack ({type(exc).__name__})") from None
    if type(found) is dict:
        return found, {}
    if type(found) is list and len(found) == 2 and type(found[0]) is dict and type(found[1]) is dict:
        return found[0], found[1]
    raise CorruptDataError(f"a row's values are not a map: {shown(found, 40)}")


def row_values(value: tuple[Any, ...]) -> dict[str, Any]:
    """The values of a row (:func:`row_record`)."""
    return row_record(value)[0]


def tie_key(member: str, tie: str) -> tuple[str, str]:
    """A record window's score tree key, ``(tie, member)``, from an entry ``(member, tie)``: the tie (the column's tag
    and key) first, so that a column is one run in key order, then by member. A function of its own, so that a node
    read for this tree is told from one of a set's, whose scores are numbers (``mdss._nodes.decode``)."""
    return (tie, member)


NODE_KEYS[tie_key] = lambda members, scores: tuple(zip(scores, members))


def _row_entries(
    columns: RowColumns,
) -> tuple[Callable[[str, Any], tuple[tuple[Any, str, Any], ...]], Callable[[str, Any, str], Any]]:
    """A record window's ``entries(member, row)``: one ``(key, stored member, tie)`` per column whose fields the row
    has as numbers, the tie spelling the column's tag and key (each part in code point order, as a board's column
    members do) and the key being :func:`tie_key`'s. The stored member is the member, or in a column whose ties go by
    first the number of the entry that gave the row that key spelled before it (:func:`spell`; a row a load wrote:
    :data:`LOADED`). Equal keys are equal scores: dense ranks count ties as a set counts equal scores. Refuses a value
    that is not a row. And ``key(member, row, tag)``: the row's key in the column of ``tag`` alone (``None``: none)."""
    spec = {
        column_tag(slot): (tuple(f for f, _ in parts), tuple(d for _, d in parts), first)
        for slot, parts, first in columns
    }

    def one(member: str, value: Any, row: dict[str, Any], numbers: dict[str, Any], tag: str) -> Any:
        fields, directions, first = spec[tag]
        parts: list[Any] = [row.get(f) for f in fields]
        if not all(type(v) is int or type(v) is float for v in parts):
            return None
        tie = tag + "".join(map(encode_part, parts, directions))
        if not first:
            return (tie, member), member, tie
        seq = numbers.get(tag)
        if seq is None:
            seq = value[2] if len(value) == 3 and value[2] is not None else LOADED
        stored = spell(seq, member)
        return (tie, stored), stored, tie

    def record(member: str, value: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        if not is_row(value):
            raise InvalidArgumentError(f"member {shown(member)} of a record window holds rows, not {shown(value, 40)}")
        return row_record(value)

    def entries(member: str, value: Any) -> tuple[tuple[Any, str, Any], ...]:
        row, numbers = record(member, value)
        found = (one(member, value, row, numbers, tag) for tag in spec)
        return tuple(entry for entry in found if entry is not None)

    def key(member: str, value: Any, tag: str) -> Any:
        row, numbers = record(member, value)
        entry = one(member, value, row, numbers, tag)
        return None if entry is None else entry[0]

    return entries, key


def _first_desc(member: str, value: Any) -> tuple[Any, str]:
    # A value (score, data, seq); a bare score (a cursor's entry, whose number is not known) sorts first of its ties.
    if type(value) is tuple:
        return (-value[0], spell(value[2], member))
    return (-value, spell(-_SEQ_BIAS, member))


def _first_asc(member: str, value: Any) -> tuple[Any, str]:
    if type(value) is tuple:
        return (value[0], spell(value[2], member))
    return (value, spell(-_SEQ_BIAS, member))


def _columns_key(ends: dict[str, int], sign: int) -> Callable[[str, Any], tuple[Any, str]]:
    """The key of a member's value in a board window whose columns ``ends`` go by first: a ``(slot, None, seq)`` value
    spells its number where its key ends; any other value keys as in a plain set."""

    def key(member: str, value: Any) -> tuple[Any, str]:
        if type(value) is tuple:
            if len(value) == 3:
                return (sign * value[0], spell_at(member, ends[member[:3]], value[2]))
            value = value[0]
        return (sign * value, member)

    return key


def _no_column_key(member: str, value: Any, tag: str) -> Any:
    raise InvalidArgumentError("only a record window's values have a key per column")


def _record_key(member: str, value: Any) -> tuple[Any, str]:
    raise InvalidArgumentError(f"member {shown(member)} holds a row, which has a key per column, not one")


class Order:
    """The direction of a set, how it breaks ties, and everything that follows from them."""

    __slots__ = (
        "name",
        "tiebreak",
        "first",
        "reaching",
        "records",
        "_ends",
        "_firsts",
        "key",
        "keys",
        "entries",
        "column_key",
        "tree_key",
        "probe",
        "better",
        "score_of",
        "scores_of",
        "member_of",
        "members_of",
    )

    def __init__(self, name: str, tiebreak: str = "member") -> None:
        if not valid_tiebreak(tiebreak):
            raise InvalidArgumentError(f'tiebreak must be "member", "member_desc" or "first", got {shown(tiebreak)}')
        reverse, self.first = tiebreak == "member_desc", tiebreak == "first"
        # A board window's columns that go by first (tag -> where a column member's key ends); None in a set.
        self._ends = _column_ends(tiebreak) if tiebreak.startswith(COLUMNS_FIRST) else None
        #: Whether some members' values carry the sequence number of the entry that gave them their score.
        self.reaching = self.first or self._ends is not None
        # key(member, value): a member's key from its value; tree_key(stored member, score): from a score tree entry.
        # They differ where values carry numbers: the score tree stores those members spelled with them.
        if name == "desc":
            self.key: KeyFn = _desc_key_rev if reverse else _first_desc if self.first else _desc_key
            self.tree_key = _desc_key_rev if reverse else _desc_key
            self.score_of = lambda key: -key[0]
            self.scores_of = lambda keys: [-key[0] for key in keys]
            self.probe = lambda score: (-score,)
            self.better = max
        elif name == "asc":
            self.key = _asc_key_rev if reverse else _first_asc if self.first else _asc_key
            self.tree_key = _asc_key_rev if reverse else _asc_key
            self.score_of = lambda key: key[0]
            self.scores_of = lambda keys: [key[0] for key in keys]
            self.probe = lambda score: (score,)
            self.better = min
        else:
            raise InvalidArgumentError(f'order must be "desc" or "asc", got {shown(name, 40)}')
        if self._ends is not None:
            self.key = _columns_key(self._ends, -1 if name == "desc" else 1)
        #: Whether members' values are rows, each making a key per column (a record window: ``rows_tiebreak``).
        self.records = tiebreak.startswith(ROWS)
        if self.records:
            if name != "asc":
                raise InvalidArgumentError("a record window's set is ascending: its keys spell each column's order")
            # Rows of a window with columns that go by first carry the number of their entry: a commit folding them
            # into the trees gives it (mdss._commit), as to a "first" set's values.
            self._firsts = {column_tag(slot) for slot, _, first in row_columns(tiebreak) if first}
            self.reaching = bool(self._firsts)
            self.entries, self.column_key = _row_entries(row_columns(tiebreak))
            self.keys = lambda member, value: tuple(e[0] for e in self.entries(member, value))
            self.key = _record_key
            self.tree_key = tie_key  # type: ignore[assignment]
        else:
            self.column_key = _no_column_key
            key, stored = self.key, self.stored
            # entries(member, value): the score tree's (key, stored member, score) of each key; keys: the keys alone.
            self.entries = lambda member, value: ((key(member, value), stored(member, value), score_of(value)),)
            self.keys = lambda member, value: (key(member, value),)
        self.name, self.tiebreak = name, tiebreak
        # A key's member, as the plain str it was (a ``member_desc`` key holds it as a _Desc, which compares reversed).
        # A board window's keys keep their numbers: the board reads its column keys as stored (mdss._board_views).
        if reverse:
            self.member_of = lambda key: str(key[-1])
            self.members_of = lambda keys: [str(key[-1]) for key in keys]
        elif self.first:
            self.member_of = lambda key: key[-1][SEQ_CHARS:]
            self.members_of = lambda keys: [key[-1][SEQ_CHARS:] for key in keys]
        elif self.records:  # (tie, member), a number before the member in a column whose ties go by first
            firsts = self._firsts
            self.member_of = lambda key: key[1][SEQ_CHARS:] if key[0][:3] in firsts else key[1]
            self.members_of = lambda keys: list(map(self.member_of, keys))
        else:
            self.member_of = operator.itemgetter(-1)
            self.members_of = lambda keys: [key[-1] for key in keys]

    def reaches(self, member: str) -> bool:
        """Whether ``member``'s value carries the number of the entry that gave it its score."""
        return self.first or (self._ends is not None and member[:3] in self._ends)

    def plain(self, stored: Sequence[str], scores: Sequence[Any]) -> Sequence[str]:
        """The members of score tree entries as stored (``stored``, with their ``scores``), as the members they are (as
        stored in a board window of entries; without their numbers in a record window's columns that go by first)."""
        if self.first:
            return [m[SEQ_CHARS:] for m in stored]
        if self.records and self.reaching:
            firsts = self._firsts
            return [m[SEQ_CHARS:] if s[:3] in firsts else m for m, s in zip(stored, scores)]
        return stored

    def stored(self, member: str, value: Any) -> str:
        """What the score tree stores for ``member`` holding ``value``: the member, spelled with its number where the
        value carries one."""
        if self.first:
            return spell(value[2], member)
        if self._ends is not None and type(value) is tuple and len(value) == 3:
            return spell_at(member, self._ends[member[:3]], value[2])
        return member

    def loaded(self, members: Sequence[str], scores: Sequence[Any]) -> Sequence[Any]:
        """The member index values of entries a load writes with ``scores``: those that carry a number are each
        reached at :data:`LOADED` (before every commit; ties among them by member)."""
        if self.first:
            return [(s, None, LOADED) for s in scores]
        if self._ends is not None:
            ends = self._ends
            return [(s, None, LOADED) if m[:3] in ends else s for m, s in zip(members, scores)]
        return scores

    def loaded_members(self, members: Sequence[str]) -> Sequence[str]:
        """The score tree members of entries a load writes (spelled with :data:`LOADED` where they carry a number)."""
        if self.first:
            return [spell(LOADED, m) for m in members]
        if self._ends is not None:
            ends = self._ends
            return [spell_at(m, ends[m[:3]], LOADED) if m[:3] in ends else m for m in members]
        return members

    def first_key(self, score: Score) -> tuple[Score, ...]:
        """A probe below every key with ``score``: counting keys under it counts strictly better entries."""
        return self.probe(score)

    def last_key(self, score: Score) -> tuple[Score, _Top]:
        """A probe above every key with ``score``."""
        return (self.probe(score)[0], TOP)

    def ranked(self, members: list[str], scores: list[Score]) -> list[int]:
        """Positions of ``members`` (sorted by member) in set order. A stable sort by score alone keeps ties in the
        order it is given them, in either direction: member order, or its reverse for ``member_desc``; cheaper than
        sorting by full keys."""
        given = range(len(members) - 1, -1, -1) if self.tiebreak == "member_desc" else range(len(members))
        return sorted(given, key=scores.__getitem__, reverse=self.name == "desc")

    def __repr__(self) -> str:
        return f"Order({self.name!r})" if self.tiebreak == "member" else f"Order({self.name!r}, {self.tiebreak!r})"


# -- composite keys (mdss.Leaderboard) ------------------------------------------------------------------------------
# A leaderboard column orders rows by several parts, each with its own direction, then by owner. Its entries live in an
# ascending set whose score is the column's slot and whose member spells the key: the slot, each part as a fixed-width
# string whose code point order is the part's order, then the owner: comparing members compares keys, exactly.

#: Characters of one encoded part: 16 hex digits of the float just below or at the value, 3 of the exact rest.
PART_CHARS = 19
#: Longest owner, in UTF-8 bytes: a member of five parts and an owner stays within MAX_MEMBER_BYTES.
MAX_OWNER_BYTES = 128
MAX_PARTS = 5
_MASK64 = (1 << 64) - 1
_DOUBLE = struct.Struct(">d")
_BITS = struct.Struct(">Q")


def encode_part(value: Score, direction: str) -> str:
    """A fixed-width string whose code point order is the order of ``value`` (reversed for ``"desc"``).

    Exact for 64-bit ints, floats and ±inf, and across them (``3`` and ``3.0`` encode alike): ``value`` is the float at
    or just below it plus an integer rest below 2048 (the float spacing near 2**63).

    >>> encode_part(2**53 + 1, "asc") > encode_part(2**53, "asc") > encode_part(-math.inf, "asc")
    True
    >>> encode_part(1, "desc") < encode_part(0.5, "desc"), encode_part(3, "asc") == encode_part(3.0, "asc")
    (True, True)
    """
    if type(value) is int:
        low = float(value)  # rounds to nearest: step down when it rounded up
        if int(low) > value:
            low = math.nextafter(low, -math.inf)
        rest = value - int(low)
    else:
        low, rest = value + 0.0, 0  # -0.0 -> 0.0
    bits = _BITS.unpack(_DOUBLE.pack(low))[0]
    bits = bits ^ _MASK64 if bits >> 63 else bits | 1 << 63  # IEEE-754 bits in numeric order
    if direction == "desc":
        bits, rest = bits ^ _MASK64, 0xFFF - rest
    return f"{bits:016x}{rest:03x}"


def column_tag(slot: int) -> str:
    """The prefix of every member of a leaderboard column (slots 0..255)."""
    return f"{slot:02x}:"


def column_member(slot: int, parts: Iterable[tuple[Score, str]], owner: str) -> str:
    """The member that spells a row's key in a column: slot, encoded parts (value, direction), owner."""
    return column_tag(slot) + "".join(encode_part(v, d) for v, d in parts) + owner


def column_tie(member: str, parts: int) -> str:
    """A column member without its owner: equal for every row with an equal key (a tie group)."""
    return member[: 3 + parts * PART_CHARS]
