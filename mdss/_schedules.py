"""A board's calendar: its time zone, the first day of its weeks, and its named schedules (cron lines).

A named schedule's instance is the time from one firing of its cron line to the next, as the cron library (cronsim)
iterates it in the board's zone, named by its first firing in UTC (``raid:2026-11-27T17:00Z``: a local time can repeat
when the clocks go back, a UTC time never does; names sort by time). Across a daylight-saving change the firings are
cronsim's: a line with a fixed minute and hour (``0 18 * * FRI``) fires once at a local time that repeats (the first
time), and at the end of the gap for one that does not exist (02:30 on a spring-forward night fires at 03:00); a line
with a wildcard minute or hour (``*/30 * * * *``) fires at each moment the clock reads a matching time, also where
cronsim's forward iteration from before a half-hour change skips one (:meth:`Calendar._between`).
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping
from typing import Any

from cronsim import CronSim, CronSimError

from . import _windows
from .exceptions import InvalidArgumentError, shown

#: A schedule's name: it names its windows (``raid:...``) and their keys, so no ``:`` or ``#``.
_SCHEDULE_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,39}", re.ASCII)


def check_schedules(schedules: Any, tz: dt.tzinfo) -> dict[str, str]:
    """``schedules`` (name -> five-field cron line), checked: each name new, each line parsed by cronsim and firing."""
    if schedules is None:
        return {}
    if not isinstance(schedules, Mapping):
        raise InvalidArgumentError(f"schedules must be a mapping of name -> cron line, got {shown(schedules)}")
    found = {}
    for name, line in schedules.items():
        if not isinstance(name, str) or not _SCHEDULE_NAME.fullmatch(name):
            raise InvalidArgumentError(
                f"a schedule name is a letter then up to 39 letters, digits, '_' or '-', got {shown(name)}"
            )
        if name in _windows.KINDS:
            raise InvalidArgumentError(f"schedule {name!r} has the name of a window kind; name it otherwise")
        if not isinstance(line, str) or len(line.split()) != 5:
            raise InvalidArgumentError(
                f"schedule {name!r} must be a cron line of 5 fields (minute hour day month weekday), got {shown(line)}"
            )
        try:
            next(CronSim(line, _windows.local(0, tz)))
        except (CronSimError, StopIteration) as exc:
            raise InvalidArgumentError(
                f"schedule {name!r}: {shown(line)} is not a cron line that fires: {exc}"
            ) from None
        found[name] = line
    return found


class Calendar:
    """How a board cuts time into window instances: calendar kinds (:mod:`mdss._windows`) in ``tz`` with weeks from
    ``week_start``, and ``schedules``. Instances are contiguous: each ends where the next of its kind starts."""

    def __init__(self, tz: Any, week_start: Any, schedules: Any) -> None:
        self.tz = _windows.check_tz(tz)
        self.week_start = _windows.check_week_start(week_start)
        self.schedules = check_schedules(schedules, self.tz)
        self.kinds = (*_windows.KINDS, *self.schedules)
        #: The last instance found of each schedule, (start, end): most posts fall in it, without a cron search.
        self._last: dict[str, tuple[int, int]] = {}

    def kind(self, kind: Any) -> str:
        """``kind`` if it is one of this calendar's kinds."""
        if not isinstance(kind, str) or kind not in self.kinds:
            schedules = f"; schedules: {', '.join(self.schedules)}" if self.schedules else " (no schedules given)"
            raise InvalidArgumentError(
                f"a window kind is one of {', '.join(_windows.KINDS)}{schedules}; got {shown(kind)}"
            )
        return kind

    def kind_of(self, name: Any) -> str:
        """The kind of a bare kind or of an instance this calendar can cut; :class:`InvalidArgumentError` otherwise."""
        if isinstance(name, str) and name in self.kinds:
            return name
        kind, _, text = name.partition(":") if isinstance(name, str) else ("", "", "")
        if kind == "hour" or kind in self.schedules:
            at = _windows.parse_moment(text)
            if at is not None and self._boundary(kind, at) == at:
                return kind
            raise InvalidArgumentError(
                f"window {shown(name)} is not an instance of {kind!r} in {self.tz}: instances are named by their start "
                f"in UTC, e.g. {self.instance(kind, _windows.local(1_795_453_200, _windows.UTC))!r}"
            )
        return _windows.kind_of(name, self.week_start)

    def combined(self, name: Any) -> bool:
        """Whether ``name`` can name a window made by ``Leaderboard.combine`` (``season:2026``): its label is neither a
        calendar kind nor one of this calendar's schedules, whose instances are time windows."""
        return _windows.combined(name) and name.partition(":")[0] not in self.schedules

    def instance(self, kind: str, when: dt.datetime) -> str:
        """The name of the instance of ``kind`` that the moment ``when`` falls in."""
        if kind in self.schedules:
            return f"{kind}:{_windows.moment_name(self._firings(kind, _windows.whole_seconds(when))[0])}"
        return _windows.instance(kind, when, self.tz, self.week_start)

    def start(self, name: str) -> int | None:
        """When instance ``name`` starts (seconds since the epoch; 0 for ``all``), ``None`` if it names none. Names of
        schedules this calendar lacks are read too (a board opened without them still lists their windows)."""
        kind, _, text = name.partition(":")
        if kind in _windows.KINDS or kind == name:
            return _windows.start(name, self.tz)
        return _windows.parse_moment(text)

    def bounds(self, name: str) -> tuple[int, int]:
        """When instance ``name`` (checked by :meth:`kind_of`) starts and ends, seconds since the epoch."""
        kind = self.kind_of(name)
        if kind == "all":
            raise InvalidArgumentError("the window 'all' has no start or end")
        begins = self.start(name)
        if begins is None:  # a bare kind: the board passes its current instance instead
            raise InvalidArgumentError(f"bounds are those of an instance, such as 'day:2026-11-23'; got {shown(name)}")
        if kind in self.schedules:
            return self._firings(kind, begins)
        return begins, _windows.end(name, self.tz)

    def _boundary(self, kind: str, seconds: int) -> int:
        """The start of the instance of ``kind`` (an hour or a schedule) that ``seconds`` falls in."""
        return _windows.hour_start(seconds, self.tz) if kind == "hour" else self._firings(kind, seconds)[0]

    def _firings(self, kind: str, seconds: int) -> tuple[int, int]:
        """The last firing of schedule ``kind`` at or before ``seconds`` and the next, iterating cronsim forward from a
        minute before, else four times as far back, until a firing comes at or before it (with the firings that forward
        iteration skips put back: :meth:`_between`). Not cronsim's reverse iteration, which differs across a
        daylight-saving change and never returns for some lines and moments (Chatham's ``0 */2 * * *`` on the night
        its clocks go back)."""
        last = self._last.get(kind)
        if last is not None and last[0] <= seconds < last[1]:
            return last
        line, tz = self.schedules[kind], self.tz
        span, floor = 60, int(_windows.EARLIEST.timestamp())
        try:
            while True:
                begins = max(seconds - span, floor)
                firings = CronSim(line, _windows.local(begins, tz))
                fired = _windows.whole_seconds(next(firings))
                if fired <= seconds:
                    for then in map(_windows.whole_seconds, firings):
                        if then > seconds:
                            found = self._between(line, fired, then, seconds)
                            self._last[kind] = found
                            return found
                        fired = then
                    raise StopIteration  # no firing after it within cronsim's 50 years
                if begins == floor:
                    raise StopIteration  # none before it
                span *= 4
        except (StopIteration, OverflowError, ValueError):
            raise InvalidArgumentError(
                f"schedule {kind!r} ({line}) has no firing before and after {_windows.moment_name(seconds)}"
            ) from None

    def _between(self, line: str, fired: int, then: int, seconds: int) -> tuple[int, int]:
        """``(fired, then)``, two firings in a row of cronsim's forward iteration around ``seconds``, with the firings
        it skipped between them put back: across a change of 30 minutes (Lord Howe), iterating forward from before the
        change skips a time the clock reads after it (02:00+10:30), which iterating from just before that time finds,
        so the instance a moment fell in depended on where an earlier search had started. At each change of the zone's
        offset between them, the first firing iterating forward from just before the change, or from just before the
        end of the time it repeats, counts if iterating forward from just before it finds it too. (Not cronsim's
        reverse iteration: it never returns for some lines and moments, Chatham's '0 */2 * * *' at 02:00:04+13:45 on
        the night its clocks go back.)"""
        tz, start = self.tz, fired
        while (change := _offset_change(tz, start, then)) is not None:
            moved = _windows.local(change - 1, tz).utcoffset() - _windows.local(change, tz).utcoffset()  # type: ignore[operator]
            for probe in (change - 1, change + max(int(moved.total_seconds()), 0) - 1):  # before it; the repeat's end
                found = _windows.whole_seconds(next(CronSim(line, _windows.local(probe, tz))))
                if fired < found < then and self._fires(line, found):
                    fired, then = (found, then) if found <= seconds else (fired, found)
            start = change
        return fired, then

    def _fires(self, line: str, moment: int) -> bool:
        """Whether iterating ``line`` forward from the second before ``moment`` finds it."""
        return _windows.whole_seconds(next(CronSim(line, _windows.local(moment - 1, self.tz)))) == moment


#: How far apart :func:`_offset_change` looks: no zone changes its offset twice within a day.
_DAY = 86_400


def _offset_change(tz: dt.tzinfo, after: int, before: int) -> int | None:
    """The first second in ``(after, before)`` at which ``tz``'s offset from UTC differs from the second before it;
    ``None`` if there is none."""
    if isinstance(tz, dt.timezone):  # a fixed offset (UTC, the default): it never changes
        return None
    offset = _windows.local(after, tz).utcoffset()
    low = after
    while low + 1 < before:
        high = min(low + _DAY, before - 1)
        if _windows.local(high, tz).utcoffset() == offset:
            low = high
            continue
        while high - low > 1:  # the offset is ``offset`` at low and another at high: the change lies between
            middle = (low + high) // 2
            low, high = (middle, high) if _windows.local(middle, tz).utcoffset() == offset else (low, middle)
        return high
    return None
