"""Time windows of a leaderboard: the instance of a moment for each calendar kind, its start and end, in a time zone.

Calendar kinds: ``all``; ``hour`` (named by its start in UTC, ``hour:2026-11-23T17:00Z``: a local hour can repeat when
the clocks go back, a UTC time never does); ``day``, ``week``, ``month``, ``year`` (named by their local date:
``day:2026-11-23``, ``week:2026-W48`` (ISO, from Monday) or ``week:2026-11-22`` (weeks from another day, named by
their first day), ``month:2026-11``, ``year:2026``). Names sort by time within a kind. Named schedules (cron) are in
:mod:`mdss._schedules`.

Where a day, week, month or year starts is the first moment the local clock reads its first day's midnight or later:
a day is 23 or 25 hours long across a daylight-saving change, and starts at the end of the gap where midnight does not
exist. An hour starts each time the local clock reads a whole hour (``HH:00:00``, as the cron line ``0 * * * *``
fires): when the clocks go back, the repeated hour is a second instance.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from .exceptions import InvalidArgumentError, shown

KINDS = ("all", "hour", "day", "week", "month", "year")
#: The days a week may start on (``week_start``), Monday (ISO weeks, the default) first.
WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
UTC = dt.timezone.utc
_HOUR = dt.timedelta(hours=1)

#: A moment in UTC as instance names of hours and schedules spell it: seconds only where not 0 (offsets of the
#: 19th century have seconds). Two instances of a kind are at least a minute apart, so these names sort by time.
_MOMENT = r"([0-9]{4})-([0-9]{2})-([0-9]{2})T([0-9]{2}):([0-9]{2})(?::([0-9]{2}))?Z"
_DATE = r"([0-9]{4})-([0-9]{2})-([0-9]{2})"
#: The names of each dated kind, after ``kind:``, matched whole in ASCII digits (``\d`` takes any, ``$`` a newline).
_NAMES = {
    "hour": re.compile(_MOMENT, re.ASCII),
    "day": re.compile(_DATE, re.ASCII),
    "week": re.compile(r"([0-9]{4})-W([0-9]{2})|" + _DATE, re.ASCII),
    "month": re.compile(r"([0-9]{4})-([0-9]{2})", re.ASCII),
    "year": re.compile(r"([0-9]{4})", re.ASCII),
}


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
            raise InvalidArgumentError(f"unknown time zone {shown(tz)}: {exc}") from None
    raise InvalidArgumentError(f"tz must be None, a zone name or a tzinfo, got {shown(tz)}")


def check_week_start(day: Any) -> int:
    """``week_start`` (a day's name, ``"monday"`` for ISO weeks) as a weekday number (Monday 0)."""
    if not isinstance(day, str) or day not in WEEKDAYS:
        raise InvalidArgumentError(f"week_start must be one of {', '.join(WEEKDAYS)}, got {shown(day)}")
    return WEEKDAYS.index(day)


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
            raise InvalidArgumentError(f"now() gave a datetime whose utcoffset() fails: {shown(exc)}") from None
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
            when = dt.datetime.fromtimestamp(found, UTC)
            if isinstance(found, float) and when.timestamp() > found:  # rounded up to the microsecond: not past a
                when -= dt.timedelta(microseconds=1)  # window's start a float falls short of (it floors, as ints do)
            return when
    else:
        raise InvalidArgumentError(f"now() must return a datetime or epoch seconds, got {shown(found)}")
    raise InvalidArgumentError(f"now() must give a moment from 0001-01-02 to 9999-12-30 UTC, got {shown(found)}")


def _zone_fails(tz: dt.tzinfo, exc: Exception) -> InvalidArgumentError:
    """The error for a tzinfo of the caller's that fails, or whose offset is a day or more, or a date past year 9999."""
    return InvalidArgumentError(f"the time zone {shown(tz)} fails: {shown(exc)}")


def moment_name(seconds: int) -> str:
    """A moment's spelling in instance names (hours, schedules): ``2026-11-23T17:00Z``, in UTC.

    >>> moment_name(1_795_453_200), moment_name(-2_717_650_800 + 2)
    ('2026-11-23T17:00Z', '1883-11-18T17:00:02Z')
    """
    t = dt.datetime(1970, 1, 1) + dt.timedelta(seconds=seconds)  # fromtimestamp refuses years before 1 on some OSes
    name = f"{t.year:04d}-{t.month:02d}-{t.day:02d}T{t.hour:02d}:{t.minute:02d}"
    return f"{name}:{t.second:02d}Z" if t.second else f"{name}Z"


def parse_moment(text: str) -> int | None:
    """The seconds since the epoch that :func:`moment_name` spells as ``text``; ``None`` for anything else."""
    found = _NAMES["hour"].fullmatch(text)
    if found is None or found.group(6) == "00":  # one spelling per moment
        return None
    try:
        year, month, day, hour, minute, second = (int(g or 0) for g in found.groups())
        t = dt.datetime(year, month, day, hour, minute, second, tzinfo=UTC)
    except ValueError:
        return None
    return (t - dt.datetime(1970, 1, 1, tzinfo=UTC)) // dt.timedelta(seconds=1)


def local(seconds: float, tz: dt.tzinfo) -> dt.datetime:
    """The moment ``seconds`` as an aware datetime in ``tz`` (its ``fold`` set where the local time repeats)."""
    try:
        return (dt.datetime(1970, 1, 1, tzinfo=UTC) + dt.timedelta(seconds=seconds)).astimezone(tz)
    except Exception as exc:
        raise _zone_fails(tz, exc) from None


def whole_seconds(when: dt.datetime) -> int:
    """An aware datetime's whole seconds since the epoch (boundaries are whole seconds)."""
    return (when - dt.datetime(1970, 1, 1, tzinfo=UTC)) // dt.timedelta(seconds=1)


def _skipped(wall: dt.datetime) -> bool:
    """Whether the clock never reads the aware ``wall``, skipped when the clocks go forward: in such a gap PEP 495 gives
    fold 1 the offset after it, larger than fold 0's (where the time repeats, fold 1's is the smaller)."""
    try:
        return wall.replace(fold=1).utcoffset() > wall.replace(fold=0).utcoffset()  # type: ignore[operator]
    except Exception as exc:
        raise _zone_fails(wall.tzinfo, exc) from None  # type: ignore[arg-type]


def first_moment(wall: dt.datetime, tz: dt.tzinfo) -> int:
    """The first moment at which the clock of ``tz`` reads ``wall`` (naive) or later: where it first reads ``wall``,
    or the end of the gap that skips it (clocks going forward at midnight).

    >>> paris = ZoneInfo("Europe/Paris")
    >>> local(first_moment(dt.datetime(2026, 3, 29, 2, 30), paris), paris).isoformat()
    '2026-03-29T03:00:00+02:00'
    """
    aware = wall.replace(tzinfo=tz)
    try:
        found = whole_seconds(aware)  # fold 0: the first reading, or in a gap the offset before it (a moment after)
        if not _skipped(aware):
            return found
        low = whole_seconds(aware.replace(fold=1))  # in a gap, the offset after it: a moment before the gap
    except InvalidArgumentError:
        raise
    except Exception as exc:
        raise _zone_fails(tz, exc) from None
    while low + 1 < found:  # the last moment whose clock reads before wall is in [low, found)
        middle = (low + found) // 2
        if local(middle, tz).replace(tzinfo=None) >= wall:
            found = middle
        else:
            low = middle
    return found


def _unit(kind: str, wall: dt.datetime, week_start: int) -> dt.datetime:
    """The first wall time of the ``kind`` unit that the naive ``wall`` is in (not for hours)."""
    day = dt.datetime(wall.year, wall.month, wall.day)
    if kind == "day":
        return day
    if kind == "week":
        try:
            return day - dt.timedelta(days=(day.weekday() - week_start) % 7)
        except OverflowError:  # 0001-01-01 is a Monday
            raise InvalidArgumentError(f"the week of {day.date()} starts before the year 1") from None
    if kind == "month":
        return day.replace(day=1)
    return day.replace(month=1, day=1)


def _step(kind: str, wall: dt.datetime, by: int) -> dt.datetime | None:
    """The first wall time of the unit ``by`` (1 or -1) after ``wall``'s; ``None`` outside the years 1 to 9999."""
    try:
        if kind in ("day", "week"):
            return wall + dt.timedelta(days=by if kind == "day" else 7 * by)
        if kind == "month":
            months = wall.year * 12 + wall.month - 1 + by
            return wall.replace(year=months // 12, month=months % 12 + 1)
        return wall.replace(year=wall.year + by)
    except (OverflowError, ValueError):
        return None


def _name(kind: str, wall: dt.datetime, week_start: int) -> str:
    # not strftime: its %Y does not pad a year before 1000 on every platform ("1-01-02")
    if kind == "week" and week_start == 0:
        year, week, _ = wall.isocalendar()
        return f"week:{year:04d}-W{week:02d}"
    if kind in ("day", "week"):
        return f"{kind}:{wall.year:04d}-{wall.month:02d}-{wall.day:02d}"
    if kind == "month":
        return f"month:{wall.year:04d}-{wall.month:02d}"
    return f"year:{wall.year:04d}"


def hour_start(seconds: int, tz: dt.tzinfo) -> int:
    """The last moment at or before ``seconds`` at which the clock of ``tz`` read a whole hour."""
    wall = local(seconds, tz).replace(minute=0, second=0, microsecond=0, tzinfo=None)
    found = None
    for back in range(-1, 49):  # the clock may have gone back over the hour it reads (once), or skipped it
        try:
            shifted = wall - back * _HOUR
        except OverflowError:  # before year 1 or after 9999: no such hour
            continue
        for fold in (1, 0):
            hour = shifted.replace(tzinfo=tz, fold=fold)
            try:
                at = whole_seconds(hour)
            except Exception as exc:
                raise _zone_fails(tz, exc) from None
            if at <= seconds and (found is None or at > found) and not _skipped(hour):
                found = at
        if found is not None and back >= 1:
            return found
    if found is not None:  # the first hours of year 1: none earlier to look at
        return found
    raise _zone_fails(tz, ValueError("no whole hour in two days"))


def next_boundary(start_of: Callable[[int], int], begins: int, step: int) -> int:
    """The first boundary after ``begins`` of the instances that ``start_of`` (the last boundary at or before a moment)
    cuts, looking ``step`` seconds ahead at a time (about the shortest instance)."""
    probe = begins + step
    while (found := start_of(probe)) <= begins:
        probe += step
    while (earlier := start_of(found - 1)) > begins:  # an instance shorter than step
        found = earlier
    return found


def _parse(kind: str, text: str) -> dt.datetime | None:
    """The first wall time (naive) of the dated instance ``kind:text`` (not an hour), ``None`` if it names none."""
    found = _NAMES[kind].fullmatch(text)
    if found is None:
        return None
    g = [None if x is None else int(x) for x in found.groups()]
    try:
        if kind == "week" and g[0] is not None:
            day = dt.date.fromisocalendar(g[0], g[1], 1)  # type: ignore[arg-type]
        elif kind == "week":
            day = dt.date(g[2], g[3], g[4])  # type: ignore[arg-type]
        else:
            day = dt.date(*g, *[1] * (3 - len(g)))  # type: ignore[arg-type]
    except ValueError:
        return None
    return dt.datetime(day.year, day.month, day.day)


def instance(kind: str, when: dt.datetime, tz: dt.tzinfo, week_start: int = 0) -> str:
    """The name of the instance of calendar kind ``kind`` that ``when`` falls in, cut in ``tz``.

    >>> t = dt.datetime(2026, 11, 23, 1, 30, tzinfo=UTC)
    >>> [instance(k, t, UTC) for k in KINDS]
    ['all', 'hour:2026-11-23T01:00Z', 'day:2026-11-23', 'week:2026-W48', 'month:2026-11', 'year:2026']
    >>> instance("day", t, ZoneInfo("America/New_York")), instance("week", t, UTC, week_start=6)
    ('day:2026-11-22', 'week:2026-11-22')
    """
    try:
        wall = when.astimezone(tz).replace(tzinfo=None)
    except Exception as exc:  # a tzinfo of the caller's that fails, or whose offset is a day or more
        raise _zone_fails(tz, exc) from None
    if kind == "all":
        return "all"
    seconds = whole_seconds(when)
    if kind == "hour":
        return f"hour:{moment_name(hour_start(seconds, tz))}"
    if kind not in KINDS:
        raise InvalidArgumentError(f"window must be one of {', '.join(map(repr, KINDS))}, got {shown(kind)}")
    unit = _unit(kind, wall, week_start)
    # where a clock goes back over midnight (or forward past it), the local date and the instance may differ
    while first_moment(unit, tz) > seconds and (earlier := _step(kind, unit, -1)) is not None:
        unit = earlier
    while (later := _step(kind, unit, 1)) is not None and first_moment(later, tz) <= seconds:
        unit = later
    return _name(kind, unit, week_start)


def kind_of(name: Any, week_start: int = 0) -> str:
    """The kind of a calendar instance name or of a bare kind; :class:`InvalidArgumentError` for anything else. Weeks
    are named as weeks from ``week_start`` are; hours are checked against a zone by :mod:`mdss._schedules`."""
    if isinstance(name, str):
        if name in KINDS:
            return name
        kind, _, text = name.partition(":")
        if kind == "hour" and parse_moment(text) is not None:
            return kind
        wall = _parse(kind, text) if kind in _NAMES and kind != "hour" else None
        if wall is not None and (kind != "week" or _week_spelling(text, wall, week_start)):
            return kind
    week = "'week:2026-W48'" if week_start == 0 else f"'week:{dt.date(2026, 11, 23 + week_start)}' (its first day)"
    raise InvalidArgumentError(
        f"window must be a kind ({', '.join(KINDS)}) or an instance such as 'hour:2026-11-23T17:00Z', "
        f"'day:2026-11-23', {week}, 'month:2026-11', 'year:2026', got {shown(name)}"
    )


def _week_spelling(text: str, wall: dt.datetime, week_start: int) -> bool:
    """Whether week ``text`` (first day ``wall``) is spelled as weeks from ``week_start`` are: ISO weeks from Monday,
    weeks from another day by their first day's date (never the ISO spelling, whose weeks start on Monday)."""
    return (text[4:6] == "-W") == (week_start == 0) and wall.weekday() == week_start


def start(name: str, tz: dt.tzinfo) -> int | None:
    """When calendar instance ``name`` starts, in seconds since the epoch (0 for ``all``); ``None`` if no such date.
    Weeks of either spelling are read (a board opened with another ``week_start`` lists both).

    >>> start("week:2026-W48", UTC) == dt.datetime(2026, 11, 23, tzinfo=UTC).timestamp()
    True
    """
    if name == "all":
        return 0
    kind, sep, text = name.partition(":")
    if kind == "hour":
        return parse_moment(text)
    wall = _parse(kind, text) if sep and kind in _NAMES else None
    return None if wall is None else first_moment(wall, tz)


def end(name: str, tz: dt.tzinfo) -> int:
    """When calendar instance ``name`` (a valid one, not ``all``) ends: when the next one starts."""
    kind, _, text = name.partition(":")
    if kind == "hour":
        return next_boundary(lambda s: hour_start(s, tz), start(name, tz) or 0, 1800)
    wall = _parse(kind, text)
    later = None if wall is None else _step(kind, wall, 1)
    if later is None:
        raise InvalidArgumentError(f"window {name!r} ends after the year 9999")
    return first_moment(later, tz)


#: The name of a window made by ``Leaderboard.combine`` rather than by time: a label that is not a kind, a colon, an id
#: (``season:2026``, ``team:red``).
_COMBINED = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,31}:[A-Za-z0-9_.:-]{1,64}", re.ASCII)


def combined(name: Any) -> bool:
    """Whether ``name`` can name a combined window (``season:2026``): not a time window's name."""
    return isinstance(name, str) and bool(_COMBINED.fullmatch(name)) and name.partition(":")[0] not in KINDS
