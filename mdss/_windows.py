"""Time windows of a leaderboard: which instance (``day:2026-11-23``, ``week:2026-W48``, ``month:2026-11``,
``all``) a moment falls in, in UTC or in a given time zone, and when an instance starts.

Each instance is its own set, so an old week stays readable after the next
one starts; its start (seconds since the epoch) orders the instances of a
kind in the board's registry.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from .exceptions import InvalidArgumentError

KINDS = ("all", "day", "week", "month")
UTC = dt.timezone.utc

#: An instance name, matched whole (``fullmatch``: ``$`` would let a trailing newline through) in ASCII digits
#: (``\d`` takes any Unicode digit, and ``int()`` reads them).
_NAME = re.compile(
    r"all|day:([0-9]{4})-([0-9]{2})-([0-9]{2})|week:([0-9]{4})-W([0-9]{2})|month:([0-9]{4})-([0-9]{2})", re.ASCII
)


def check_tz(tz: Any) -> dt.tzinfo:
    """``tz`` as a tzinfo: ``None`` is UTC, a string an IANA zone name (zoneinfo)."""
    if tz is None:
        return UTC
    if isinstance(tz, dt.tzinfo):
        return tz
    if isinstance(tz, str):
        try:
            return ZoneInfo(tz)
        except (ZoneInfoNotFoundError, ValueError) as exc:
            raise InvalidArgumentError(f"unknown time zone {tz!r:.80}: {exc}") from None
    raise InvalidArgumentError(f"tz must be None, a zone name or a tzinfo, got {tz!r:.80}")


def moment(now: Callable[[], Any]) -> dt.datetime:
    """The current moment from an injectable clock returning an aware datetime or epoch seconds."""
    found = now()
    if isinstance(found, dt.datetime):
        if found.tzinfo is None:
            raise InvalidArgumentError("now() must return an aware datetime (with tzinfo) or epoch seconds")
        return found
    if isinstance(found, (int, float)) and not isinstance(found, bool):
        return dt.datetime.fromtimestamp(found, UTC)
    raise InvalidArgumentError(f"now() must return a datetime or epoch seconds, got {found!r:.80}")


def instance(kind: str, when: dt.datetime, tz: dt.tzinfo) -> str:
    """The name of the instance of window ``kind`` that ``when`` falls in, cut in ``tz``.

    >>> t = dt.datetime(2026, 11, 23, 1, 30, tzinfo=UTC)
    >>> [instance(k, t, UTC) for k in KINDS]
    ['all', 'day:2026-11-23', 'week:2026-W48', 'month:2026-11']
    >>> instance("day", t, ZoneInfo("America/New_York"))
    'day:2026-11-22'
    """
    local = when.astimezone(tz)
    if kind == "all":
        return "all"
    if kind == "day":
        return f"day:{local:%Y-%m-%d}"
    if kind == "week":
        year, week, _ = local.isocalendar()
        return f"week:{year:04d}-W{week:02d}"
    if kind == "month":
        return f"month:{local:%Y-%m}"
    raise InvalidArgumentError(f"window must be one of {', '.join(map(repr, KINDS))}, got {kind!r:.80}")


def kind_of(name: Any) -> str:
    """The kind of an instance name or of a bare kind; :class:`InvalidArgumentError` for anything else."""
    if isinstance(name, str):
        if name in KINDS:
            return name
        if _NAME.fullmatch(name) and start(name, UTC) is not None:
            return name.partition(":")[0]
    raise InvalidArgumentError(
        f"window must be a kind ({', '.join(KINDS)}) or an instance such as 'day:2026-11-23', 'week:2026-W48', "
        f"'month:2026-11', got {name!r:.80}"
    )


def start(name: str, tz: dt.tzinfo) -> int | None:
    """When instance ``name`` starts, in seconds since the epoch (0 for ``all``); ``None`` if no such date.

    >>> start("week:2026-W48", UTC) == dt.datetime(2026, 11, 23, tzinfo=UTC).timestamp()
    True
    """
    found = _NAME.fullmatch(name)
    if found is None:
        return None
    if name == "all":
        return 0
    g = found.groups()
    try:
        if g[0] is not None:
            day = dt.date(int(g[0]), int(g[1]), int(g[2]))
        elif g[3] is not None:
            day = dt.date.fromisocalendar(int(g[3]), int(g[4]), 1)
        else:
            day = dt.date(int(g[5]), int(g[6]), 1)
    except ValueError:
        return None
    return int(dt.datetime(day.year, day.month, day.day, tzinfo=tz).timestamp())
