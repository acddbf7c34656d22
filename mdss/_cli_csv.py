"""The CSVs that ``mdss load`` and ``mdss board load`` read, and the scores and values typed on the command line."""

from __future__ import annotations

import csv
import math
import re
from collections.abc import Iterable, Iterator
from typing import Any

from . import _parse
from ._order import check_member, check_score
from .exceptions import InvalidArgumentError, InvalidScoreError, MdssError

#: What is dropped around a number: a CSV's spaces and tabs (not a newline).
SPACES = " \t"


def parse_score(text: str) -> int | float:
    """A score typed on the command line: an int when the text is integral, else a float.

    >>> parse_score("42"), parse_score("-7"), parse_score("2.5"), parse_score("inf")
    (42, -7, 2.5, inf)

    A number past a double's range (``1e400``) is refused, not taken for ``inf``.
    """
    text = text.strip(SPACES)
    found = read_number(text)
    if found is None:
        raise InvalidScoreError(f"not a number: {text!r}")
    return found


def read_number(text: str) -> int | float | None:
    """``text`` as an int or a float (ASCII digits: see mdss._parse), ``None`` if it is no number; a number past a
    double's range (``1e400``) is refused, not taken for ``inf``."""
    try:
        return _parse.integer(text)
    except ValueError:
        pass
    try:
        found = _parse.number(text)
    except ValueError:
        return None
    if math.isinf(found) and "inf" not in text.lower():  # 1e400: past a double's range, not a stated infinity
        raise InvalidScoreError(f"out of range for a score (a float is at most about 1.8e308): {text!r}")
    return found


#: A header's score column: a word such as ``score`` or ``Points`` (letters, no digits).
_HEADER_WORD = re.compile(r"[^\W\d_]+(?:[ _-][^\W\d_]+)*")


def looks_like_header(row: list[str]) -> bool:
    """Whether a first CSV row is clearly a header: its second field is a word, not a number (a typo such as
    ``3O`` for ``30`` is not: it is reported, not skipped).

    >>> [looks_like_header(r) for r in (["member", "score"], ["Name", "Total points"], ["ann", "3O"], ["ann", "nan"])]
    [True, True, False, False]
    """
    if len(row) != 2 or not _HEADER_WORD.fullmatch(row[1].strip()):
        return False
    try:
        parse_score(row[1])  # "nan", "inf", "infinity" are words and numbers
    except InvalidScoreError:
        return True
    return False


def utf8_lines(stream: Iterable[bytes]) -> Iterator[str]:
    """The lines of a byte stream as text, each checked to be UTF-8 (a byte-order mark is dropped)."""
    for number, raw in enumerate(stream, start=1):
        try:
            yield raw.decode("utf-8-sig" if number == 1 else "utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidArgumentError(
                f"line {number}: not UTF-8 text (byte 0x{raw[exc.start]:02x} at byte {exc.start + 1} of the line)"
            ) from None


def _unreadable(line: int, exc: csv.Error) -> InvalidArgumentError:
    """A csv module error in a file's words (its advice on a lone carriage return is about Python's ``open``)."""
    if "new-line character seen in unquoted field" in str(exc):
        return InvalidArgumentError(f"line {line}: a carriage return alone ends no line; save the file with LF or CRLF")
    return InvalidArgumentError(f"line {line}: {exc}")


def csv_pairs(stream: Iterable[bytes], header: bool | None, problems: list[str]) -> Iterator[tuple[str, int | float]]:
    """The pairs of a ``member,score`` CSV as they are read; the problems go to ``problems`` by line number
    (``header`` None: a first row is skipped when it :func:`looks_like_header`). An unreadable line (not UTF-8, a
    field over the csv module's 128 KiB limit) raises :class:`~mdss.InvalidArgumentError` naming it."""
    reader = csv.reader(utf8_lines(stream), strict=True)  # a stray or unclosed quote is an error, not part of a field
    rows = 0
    try:
        for row in reader:
            if not row or (len(row) == 1 and not row[0].strip()):
                continue
            rows += 1
            if rows == 1 and (header or (header is None and looks_like_header(row))):
                continue
            try:
                if len(row) != 2:
                    raise InvalidArgumentError(f"expected 2 columns (member,score), got {len(row)}")
                pair = check_member(row[0]), check_score(parse_score(row[1]))
            except MdssError as exc:
                hint = " (a header? then pass --header)" if rows == 1 and header is None else ""
                problems.append(f"line {reader.line_num}: {exc}{hint}")
                continue
            yield pair
    except csv.Error as exc:
        raise _unreadable(reader.line_num, exc) from None


def parse_value(text: str, *, padded: bool = False) -> Any:
    """A field value typed on the command line: int, float (in ASCII digits), true/false, else the text as typed; in a
    CSV (``padded``), spaces and tabs around a number or a boolean are the file's, as :func:`parse_score` reads them.

    >>> [parse_value(t) for t in ("3", " 5", "-2.5", "inf", "true", "False", "ann", "٣", "1_0", "3\\n")]
    [3, ' 5', -2.5, inf, True, False, 'ann', '٣', '1_0', '3\\n']
    >>> parse_value(" 5 ", padded=True), parse_value(" ann ", padded=True)
    (5, ' ann ')

    A number past a double's range (``1e400``) is refused, not taken for ``inf``.
    """
    word = text.strip(SPACES) if padded else text
    found = read_number(word)
    if found is not None:
        return found
    return {"true": True, "false": False}.get(word.lower(), text)


class RowLines:
    """The line numbers of the rows :func:`read_rows` hands out: :attr:`line` is the last one's, ``None`` before the
    first and after the last, so that an error the consumer raises about a row can name its line."""

    def __init__(self) -> None:
        self.line: int | None = None

    def named(self, exc: MdssError) -> MdssError:
        """``exc`` with the line of the row it was raised on, if one was being read."""
        return exc if self.line is None else InvalidArgumentError(f"line {self.line}: {exc}")


def read_rows(stream: Iterable[bytes], lines: RowLines | None = None) -> Iterator[tuple[str, dict[str, Any]]]:
    """A board's rows from a CSV whose header names the owner column then the fields: ``owner,xp,kills``, as they are
    read. Each value is read as :func:`parse_value` reads one; an empty cell leaves its field out. A malformed line
    raises :class:`~mdss.InvalidArgumentError` naming it; ``lines`` follows the line of the row last handed out."""
    lines = lines or RowLines()
    reader = csv.reader(utf8_lines(stream), strict=True)  # an unclosed quote is an error, not one long field
    try:
        header = next(reader, None)
        if not header or len(header) < 2:
            raise InvalidArgumentError("the first line must be a header: the owner column, then the fields")
        fields = [f.strip() for f in header[1:]]
        twice = sorted({f for f in fields if fields.count(f) > 1})
        if twice:
            raise InvalidArgumentError(f"line 1: the header names {', '.join(map(repr, twice))} more than once")
        for row in reader:
            if not row or (len(row) == 1 and not row[0].strip()):
                continue
            if len(row) != len(header):
                raise InvalidArgumentError(f"line {reader.line_num}: {len(row)} fields, the header names {len(header)}")
            try:
                values = {f: parse_value(t, padded=True) for f, t in zip(fields, row[1:]) if t.strip()}
            except MdssError as exc:
                raise InvalidArgumentError(f"line {reader.line_num}: {exc}") from None
            lines.line = reader.line_num
            yield row[0], values
            lines.line = None
    except csv.Error as exc:
        raise _unreadable(reader.line_num, exc) from None
