"""Time windows of a leaderboard: the instance (``day:2026-11-23``, ``week:2026-W48``...) of a moment, its start."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from .exceptions import InvalidArgumentError

KINDS = ("all", "day", "week", "month")
UTC = dt.timezone.utc

#: An instance name, matched whole (``$`` would let a trailing newline through) in ASCII digits (``\d`` takes any).
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


#: The moments a clock may give, a day inside the years 1 to 9999: in any time zone the moment has a date.
EARLIEST = dt.datetime(1, 1, 2, tzinfo=UTC)
LATEST = dt.datetime(9999, 12, 31, tzinfo=UTC)  # excluded
_SECONDS = (EARLIEST.timestamp(), LATEST.timestamp())


def moment(now: Callable[[], Any]) -> dt.datetime:
    """The moment (UTC) ``now()`` gives as an aware datetime or epoch seconds, from :data:`EARLIEST` to :data:`LATEST`;
    :class:`InvalidArgumentError` for anything else (NaN, a naive datetime...), never an OverflowError.

    >>> moment(lambda: 0).isoformat(), moment(lambda: dt.datetime(2026, 11, 23, 1, tzinfo=UTC)).day
    ('1970-01-01T00:00:00+00:00', 23)
    >>> moment(lambda: float("inf"))
    Traceback (most recent call last):
    ...
    mdss.exceptions.InvalidArgumentError: now() must give a moment from 0001-01-02 to 9999-12-30 UTC, got inf
    """
    found = now()
    if isinstance(found, dt.datetime):
        try:
            offset = found.utcoffset()
        except Exception as exc:  # the caller's tzinfo failed
            raise InvalidArgumentError(f"now() gave a datetime whose utcoffset() fails: {exc!r:.80}") from None
        if offset is None:
            raise InvalidArgumentError("now() must return an aware datetime (with tzinfo) or epoch seconds")
        try:
            when = found.astimezone(UTC)
        except (OverflowError, ValueError):  # datetime.min in a zone east of UTC...
            when = None
        if when is not None and EARLIEST <= when < LATEST:
            return when
    elif isinstance(found, (int, float)) and not isinstance(found, bool):
        if _SECONDS[0] <= found < _SECONDS[1]:  # False for NaN; exact for an int of any size
            return dt.datetime.fromtimestamp(found, UTC)
    else:
        raise InvalidArgumentError(f"now() must return a datetime or epoch seconds, got {found!r:.80}")
    raise InvalidArgumentError(f"now() must give a moment from 0001-01-02 to 9999-12-30 UTC, got {found!r:.80}")


def instance(kind: str, when: dt.datetime, tz: dt.tzinfo) -> str:
    """The name of the instance of window ``kind`` that ``when`` falls in, cut in ``tz``.

    >>> t = dt.datetime(2026, 11, 23, 1, 30, tzinfo=UTC)
    >>> [instance(k, t, UTC) for k in KINDS]
    ['all', 'day:2026-11-23', 'week:2026-W48', 'month:2026-11']
    >>> instance("day", t, ZoneInfo("America/New_York"))
    'day:2026-11-22'
    """
    try:
        local = when.astimezone(tz)
    except Exception as exc:  # a tzinfo of the caller's that fails, or whose offset is a day or more
        raise InvalidArgumentError(f"the time zone {tz!r:.80} fails: {exc!r:.80}") from None
    if kind == "all":
        return "all"
    if kind == "day":  # not strftime: its %Y does not pad a year before 1000 on every platform ("1-01-02")
        return f"day:{local.year:04d}-{local.month:02d}-{local.day:02d}"
    if kind == "week":
        year, week, _ = local.isocalendar()
        return f"week:{year:04d}-W{week:02d}"
    if kind == "month":
        return f"month:{local.year:04d}-{local.month:02d}"
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
    try:
        return int(dt.datetime(day.year, day.month, day.day, tzinfo=tz).timestamp())
    except Exception as exc:  # a tzinfo of the caller's that fails (see instance)
        raise InvalidArgumentError(f"the time zone {tz!r:.80} fails: {exc!r:.80}") from None


#: The name of a window made by ``Leaderboard.combine`` rather than by time: a label that is not a kind, a colon, an id
#: (``season:2026``, ``team:red``).
_COMBINED = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,31}:[A-Za-z0-9_.:-]{1,64}", re.ASCII)


def combined(name: Any) -> bool:
    """Whether ``name`` can name a combined window (``season:2026``): not a time window's name."""
    return isinstance(name, str) and bool(_COMBINED.fullmatch(name)) and name.partition(":")[0] not in KINDS
