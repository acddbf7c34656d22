"""Window kinds hour to year, weeks from any day, named cron schedules: checked against cronsim's own iteration.

Every calendar kind is a cron line in disguise (an hour starts when ``0 * * * *`` fires, a day at ``0 0 * * *``, a
week at ``0 0 * * MON``...), so cronsim iterating that line forward in the board's zone is the reference for all of
them, across the daylight-saving changes of zones north and south (and Lord Howe's half-hour one), ISO week 53, leap
days and year ends. Properties (Hypothesis) cover moments drawn across three centuries; the posting tests run a fake
clock through hour, year and schedule windows with retention, and retries across their boundaries on every store.
"""

from __future__ import annotations

import datetime as dt
import functools

import pytest
from cronsim import CronSim
from depth import DEEP
from hypothesis import given, settings
from hypothesis import strategies as st

import mdss
from mdss import _windows
from mdss._schedules import Calendar

UTC = dt.timezone.utc
ZONES = ["Europe/Paris", "America/New_York", "Australia/Sydney", "Australia/Lord_Howe"]
#: Under MDSS_DEEP, also zones with odd histories: Samoa skipped 2011-12-30, Sao Paulo's clocks moved at midnight.
DEEP_ZONES = ["Pacific/Apia", "America/Sao_Paulo", "Asia/Tehran", "Africa/Casablanca"] if DEEP else []
#: Each calendar kind as the cron line that fires where its instances start (weeks: from Monday, cron's 1).
KIND_LINES = {"hour": "0 * * * *", "day": "0 0 * * *", "week": "0 0 * * 1", "month": "0 0 1 * *", "year": "0 0 1 1 *"}
#: Schedules: a weekly raid, a local time that is skipped and repeated in Europe, a wildcard line, a leap day.
SCHEDULES = {"raid": "0 18 * * FRI", "night": "30 2 * * *", "half": "*/30 * * * *", "leap": "0 12 29 2 *"}
#: The kinds whose instances are at most hours long: checked near each change of offset only.
SHORT = ("hour", "half")


def at(seconds: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(seconds, UTC)


def utc(*fields: int) -> int:
    return int(dt.datetime(*fields, tzinfo=UTC).timestamp())


@functools.cache
def calendar(zone: str, week_start: str = "monday") -> Calendar:
    return Calendar(zone, week_start, SCHEDULES)


@functools.cache
def changes(zone: str, year: int) -> tuple[int, ...]:
    """The days (noon UTC) in ``year`` before which the offset of ``zone`` changed."""
    tz = _windows.check_tz(zone)
    noons = [utc(year, 1, 1, 12) + 86400 * d for d in range(366)]
    return tuple(
        b for a, b in zip(noons, noons[1:]) if at(a).astimezone(tz).utcoffset() != at(b).astimezone(tz).utcoffset()
    )


def reference(zone: str, kind: str, first: int, last: int, week_start: str = "monday") -> list[int]:
    """The starts of ``kind``'s instances from the last before ``first`` to the first after ``last``, by cronsim."""
    cal = calendar(zone, week_start)
    line = SCHEDULES.get(kind) or KIND_LINES[kind]
    if kind == "week":
        line = f"0 0 * * {(cal.week_start + 1) % 7}"
    firings = CronSim(line, next(CronSim(line, _windows.local(first, cal.tz), reverse=True)) - dt.timedelta(seconds=1))
    found = [_windows.whole_seconds(next(firings))]
    while found[-1] <= last:
        found.append(_windows.whole_seconds(next(firings)))
    return found


def assert_cut_as(cal: Calendar, kind: str, starts: list[int]) -> None:
    """Each instance between two reference firings is named once, bounded by them, and holds its moments."""
    names = []
    for begins, ends in zip(starts, starts[1:]):
        name = cal.instance(kind, at(begins))
        assert cal.bounds(name) == (begins, ends), (name, _windows.local(begins, cal.tz), _windows.local(ends, cal.tz))
        assert cal.instance(kind, at(ends - 1)) == cal.instance(kind, at((begins + ends) // 2)) == name
        assert cal.kind_of(name) == kind and cal.start(name) == begins
        names.append(name)
    assert names == sorted(names) and len(set(names)) == len(names)


@pytest.mark.parametrize("zone", ZONES + DEEP_ZONES)
@pytest.mark.parametrize("kind", [*KIND_LINES, *SCHEDULES])
def test_instances_are_the_periods_between_cron_firings_across_daylight_saving(zone: str, kind: str) -> None:
    """Near each change of offset in 2026 (a day either side for hours, a fortnight otherwise), and over years for
    months, years and the leap-day schedule; under MDSS_DEEP, every instance of 2011 to 2027."""
    cal = calendar(zone)
    if DEEP:
        assert_cut_as(cal, kind, reference(zone, kind, utc(2011, 1, 1), utc(2027, 1, 1)))
        return
    if kind in ("month", "year", "leap"):
        assert_cut_as(cal, kind, reference(zone, kind, utc(2026, 1, 1), utc(2033, 1, 1)))
        return
    reach = 86400 if kind in SHORT else 14 * 86400
    for change in changes(zone, 2026):
        assert_cut_as(cal, kind, reference(zone, kind, change - reach, change + reach))


@pytest.mark.parametrize("zone", ["UTC", "Europe/Paris", "Pacific/Auckland"])
@pytest.mark.parametrize("kind", [*KIND_LINES, "raid", "leap"])
def test_year_ends_iso_week_53_and_leap_days(zone: str, kind: str) -> None:
    """2026 ends in ISO week 53 (Dec 28 to Jan 3); 2028-02-29 is a leap day. Weeks from Monday and from Sunday."""
    for week_start in ("monday", "sunday") if kind == "week" else ("monday",):
        cal = calendar(zone, week_start)
        for middle in (utc(2027, 1, 1), utc(2028, 2, 29, 12)):
            reach = 2 * 86400 if kind == "hour" else 40 * 86400
            assert_cut_as(cal, kind, reference(zone, kind, middle - reach, middle + reach, week_start))


def test_iso_week_53_leap_days_and_year_ends_by_name() -> None:
    cal = calendar("UTC")
    sunday = calendar("UTC", "sunday")
    assert cal.instance("week", at(utc(2027, 1, 3, 23, 59, 59))) == "week:2026-W53"
    assert cal.bounds("week:2026-W53") == (utc(2026, 12, 28), utc(2027, 1, 4))
    assert sunday.instance("week", at(utc(2027, 1, 2, 23, 59, 59))) == "week:2026-12-27"
    assert sunday.bounds("week:2026-12-27") == (utc(2026, 12, 27), utc(2027, 1, 3))
    assert cal.bounds("day:2028-02-29") == (utc(2028, 2, 29), utc(2028, 3, 1))
    assert cal.bounds("month:2028-02") == (utc(2028, 2, 1), utc(2028, 3, 1))
    assert cal.bounds("year:2028")[1] - cal.bounds("year:2028")[0] == 366 * 86400
    assert [cal.instance("year", at(utc(2027, 1, 1) + d)) for d in (-1, 0)] == ["year:2026", "year:2027"]
    assert cal.instance("leap", at(utc(2031, 1, 1))) == "leap:2028-02-29T12:00Z"
    assert cal.bounds("leap:2028-02-29T12:00Z") == (utc(2028, 2, 29, 12), utc(2032, 2, 29, 12))
    for bad in ("day:2027-02-29", "week:2027-W53", "week:2026-12-27", "leap:2027-03-01T12:00Z"):
        with pytest.raises(mdss.InvalidArgumentError):
            cal.kind_of(bad)
    with pytest.raises(mdss.InvalidArgumentError, match="week:2026-11-29"):
        sunday.kind_of("week:2026-W53")  # the ISO spelling is Monday's weeks'


def test_daylight_saving_in_new_york_and_paris() -> None:
    """An hour repeated when the clocks go back is two instances; days of 23 and 25 hours; a cron line at a local time
    that does not exist fires at the end of the gap, at one that repeats, once (cronsim's choice, documented)."""
    board = mdss.Leaderboard(mdss.open_store("memory://"), "g", columns={"xp": "desc"}, tz="America/New_York")
    first, second = (board.calendar.instance("hour", at(utc(2026, 11, 1, h, 30))) for h in (5, 6))
    assert (first, second) == ("hour:2026-11-01T05:00Z", "hour:2026-11-01T06:00Z")
    (a, b), (c, d) = board.window_bounds(first), board.window_bounds(second)
    assert b == c and a.hour == c.hour == 1 and (a.fold, c.fold) == (0, 1)
    assert b.timestamp() - a.timestamp() == 3600  # not b - a: Python subtracts times of one zone by the wall clock
    assert [str(t.utcoffset()) for t in (a, c, d)] == ["-1 day, 20:00:00", "-1 day, 19:00:00", "-1 day, 19:00:00"]
    spring = board.window_bounds("hour:2026-03-08T07:00Z")  # 03:00 EDT follows 01:59:59 EST
    assert [t.isoformat() for t in spring] == ["2026-03-08T03:00:00-04:00", "2026-03-08T04:00:00-04:00"]
    for day, hours in (("day:2026-03-08", 23), ("day:2026-11-01", 25), ("day:2026-11-02", 24)):
        begins, ends = board.window_bounds(day)
        assert (ends.timestamp() - begins.timestamp()) / 3600 == hours and begins.hour == ends.hour == 0
    paris = Calendar("Europe/Paris", "monday", {"night": "30 2 * * *", "half": "*/30 * * * *"})
    assert paris.instance("night", at(utc(2026, 3, 29, 1, 30))) == "night:2026-03-29T01:00Z"  # 03:00 CEST
    assert paris.bounds("night:2026-10-25T00:30Z") == (utc(2026, 10, 25, 0, 30), utc(2026, 10, 26, 1, 30))
    halves = [paris.instance("half", at(utc(2026, 10, 25, 0, 0) + 1800 * i)) for i in range(5)]
    assert len(set(halves)) == 5  # 02:00, 02:30 CEST, then 02:00, 02:30 CET: every half hour fires


def test_southern_hemisphere_and_half_hour_changes() -> None:
    """Sydney's clocks go forward in October and back in April; Lord Howe's by half an hour: its hours are then 90
    minutes (the clock reads no whole hour at the change), as ``0 * * * *`` fires."""
    sydney = calendar("Australia/Sydney")
    assert sydney.bounds("day:2026-10-04")[1] - sydney.bounds("day:2026-10-04")[0] == 23 * 3600
    assert sydney.bounds("day:2026-04-05")[1] - sydney.bounds("day:2026-04-05")[0] == 25 * 3600
    howe = calendar("Australia/Lord_Howe")
    begins, ends = howe.bounds(howe.instance("hour", at(utc(2026, 10, 3, 15, 45))))  # 02:00 +10:30 -> 02:30 +11
    assert ends - begins == 5400


#: Moments over three centuries, whole seconds (boundaries are); zones with and without daylight saving.
MOMENTS = st.integers(utc(1900, 1, 1), utc(2200, 1, 1))
PROPERTY_ZONES = st.sampled_from([*ZONES, "UTC", "Asia/Kolkata", "America/St_Johns", "Pacific/Chatham"])
PROPERTY_KINDS = st.sampled_from([*KIND_LINES, *SCHEDULES])


@given(zone=PROPERTY_ZONES, kind=PROPERTY_KINDS, moment=MOMENTS, week_start=st.sampled_from(_windows.WEEKDAYS))
def test_an_instance_holds_its_moment_and_the_next_starts_where_it_ends(zone, kind, moment, week_start) -> None:
    cal = calendar(zone, week_start)
    name = cal.instance(kind, at(moment))
    begins, ends = cal.bounds(name)
    assert begins <= moment < ends
    assert cal.kind_of(name) == kind and cal.start(name) == begins and cal.instance(kind, at(begins)) == name
    after = cal.instance(kind, at(ends))
    assert cal.bounds(after)[0] == ends and after > name  # contiguous, and the names sort by time
    before = cal.instance(kind, at(begins - 1))
    assert cal.bounds(before)[1] == begins and before < name


@settings(max_examples=settings().max_examples // 2)
@given(zone=PROPERTY_ZONES, moment=MOMENTS)
def test_a_board_reads_the_windows_it_names(zone, moment) -> None:
    """window_bounds and next_reset through a board, as aware datetimes in its zone; named instances round-trip."""
    board = mdss.Leaderboard(
        mdss.open_store("memory://"), "g", columns={"xp": "desc"}, tz=zone, schedules=SCHEDULES, now=lambda: moment
    )
    for kind in ("hour", "year", "raid"):
        begins, ends = board.window_bounds(kind)
        assert begins.tzinfo is ends.tzinfo is board.tz and begins.timestamp() <= moment < ends.timestamp()
        assert board.next_reset(kind) == ends
        assert board.window_bounds(board.calendar.instance(kind, at(moment))) == (begins, ends)


def test_posting_into_hour_year_and_schedule_windows_with_retention() -> None:
    clock = [utc(2026, 12, 31, 16, 30)]  # a Thursday
    board = mdss.Leaderboard(
        mdss.open_store("memory://"),
        "g",
        columns={"xp": "desc"},
        accumulate=["xp"],
        windows=["all", "hour", "year", "raid"],
        schedules={"raid": "0 18 * * THU"},
        retention={"hour": 2, "raid": 2},
        now=lambda: clock[0],
    )
    for step in range(4):  # 16:30, 17:30, 18:30, 19:30 on 2026-12-31
        board.post("ann", {"xp": 1})
        board.post(f"p{step}", {"xp": 10})
        clock[0] += 3600
    assert board.windows("hour") == ["hour:2026-12-31T18:00Z", "hour:2026-12-31T19:00Z"]
    assert board.windows("raid") == ["raid:2026-12-24T18:00Z", "raid:2026-12-31T18:00Z"]
    assert board.row("ann", window="raid:2026-12-24T18:00Z").values == {"xp": 2}
    assert [r.owner for r in board.top("xp", window="raid")] == ["p2", "p3", "ann"]
    assert board.row("ann", window="year").values == {"xp": 4}
    clock[0] = utc(2027, 1, 7, 18, 0, 1)
    board.post("bob", {"xp": 1})
    assert board.windows("raid") == ["raid:2026-12-31T18:00Z", "raid:2027-01-07T18:00Z"]
    assert board.windows("year") == ["year:2026", "year:2027"]  # no retention: both kept
    assert board.next_reset("raid") == dt.datetime(2027, 1, 14, 18, tzinfo=UTC)
    assert board.window_bounds("hour")[0] == dt.datetime(2027, 1, 7, 18, tzinfo=UTC)
    with pytest.raises(mdss.InvalidArgumentError, match="retention"):  # a window past keeping is not recreated
        board.load([("zed", {"xp": 1})], window="hour:2026-12-31T16:00Z")


def test_a_retry_goes_to_the_first_tries_hour_and_schedule_instances(store) -> None:
    """A post that died after recording its post id, retried after an hour and a schedule turned, lands in the
    instances of its first try; a retry of one that landed changes nothing."""
    clock = [utc(2026, 11, 27, 17, 59, 59)]

    def board() -> mdss.Leaderboard:
        return mdss.Leaderboard(
            store,
            "g",
            columns={"xp": "desc"},
            accumulate=["xp"],
            windows=["hour", "raid"],
            schedules={"raid": "0 18 * * FRI"},
            now=lambda: clock[0],
        )

    dying = board()
    dying.post("ann", {"xp": 1}, post_id="landed")
    first = ["hour:2026-11-27T17:00Z", "raid:2026-11-20T18:00Z"]
    dying._set(first[1]).engine.group.submit = _dies  # type: ignore[method-assign]
    with pytest.raises(RuntimeError):
        dying.post("bob", {"xp": 5}, post_id="job")
    clock[0] += 3
    survivor = board()
    assert survivor.post("bob", {"xp": 5}, post_id="job") == {first[0]: False, first[1]: True}
    assert survivor.post("ann", {"xp": 1}, post_id="landed") == dict.fromkeys(first, False)
    assert survivor.post("cy", {"xp": 1}) == {"hour:2026-11-27T18:00Z": True, "raid:2026-11-27T18:00Z": True}
    assert [survivor.row("bob", window=w).values for w in first] == [{"xp": 5}, {"xp": 5}]
    assert survivor.row("bob", window="raid") is None


def _dies(ops, want_score=False):
    raise RuntimeError("the process died")


@pytest.mark.parametrize(
    "options",
    [
        {"windows": ["fortnight"]},
        {"windows": ["raid"]},  # a schedule not given
        {"schedules": {"raid": "0 18 * * FRX"}},
        {"schedules": {"raid": "0 18 * *"}},
        {"schedules": {"raid": "0 0 18 * * FRI"}},  # six fields: cronsim's seconds, refused
        {"schedules": {"raid": "0 0 30 2 *"}},  # never fires
        {"schedules": {"raid": 18}},
        {"schedules": {"day": "0 0 * * *"}},
        {"schedules": {"a:b": "0 0 * * *"}},
        {"schedules": ["0 0 * * *"]},
        {"week_start": "Sunday"},
        {"week_start": 6},
        {"windows": ["all"], "retention": {"hour": 2}},
        {"now": lambda: dt.datetime(2026, 11, 27, 18)},  # naive: refused at the first post
        {"windows": ["week"], "week_start": "sunday", "now": lambda: _windows.EARLIEST},  # starts in the year 0
        {"windows": ["raid"], "schedules": {"raid": "0 18 * * FRI"}, "now": lambda: _windows.EARLIEST},  # no firing
    ],
)
def test_bad_schedules_and_kinds_are_invalid_arguments(options) -> None:
    with pytest.raises(mdss.InvalidArgumentError):
        board = mdss.Leaderboard(mdss.open_store("memory://"), "g", columns={"xp": "desc"}, **options)
        board.post("ann", {"xp": 1})


def test_bad_windows_are_invalid_arguments() -> None:
    board = mdss.Leaderboard(
        mdss.open_store("memory://"), "g", columns={"xp": "desc"}, schedules=SCHEDULES, now=lambda: 1_795_453_200
    )
    calls = [
        lambda: board.window_bounds("all"),
        lambda: board.window_bounds("fortnight"),
        lambda: board.window_bounds("hour:2026-11-23T17:30Z"),  # not where an hour starts in UTC
        lambda: board.window_bounds("hour:2026-11-23T17:00:00Z"),  # one spelling per moment
        lambda: board.window_bounds("raid:2026-11-26T18:00Z"),  # a Thursday: not a firing
        lambda: board.window_bounds("year:9999"),  # ends past the last representable year
        lambda: board.next_reset("all"),
        lambda: board.next_reset("day:2026-11-23"),  # a kind, not an instance
        lambda: board.windows("fortnight"),
        lambda: board.top("xp", window="week:2026-11-22"),  # a Sunday week on a board of ISO weeks
    ]
    for call in calls:
        with pytest.raises(mdss.InvalidArgumentError):
            call()
    assert board.window_bounds("raid:2026-11-27T18:00Z")[0] == dt.datetime(2026, 11, 27, 18, tzinfo=UTC)


@pytest.mark.parametrize("line", ["0 */2 * * *", "30 * * * *"])
def test_an_instance_is_the_same_whatever_the_calendar_looked_up_before(line) -> None:
    """Lord Howe's clocks go back 30 minutes: iterating cronsim forward from before the change skips 02:00+10:30,
    which iterating from just before it finds, and the instance a moment fell in depended on where an earlier lookup
    had started (two boards put one post in two overlapping instances, and refused each other's names: a helper's
    probe). Fresh, warmed going forward, or going back, every moment of the two change days gets one instance, and
    instances do not overlap."""
    tz = "Australia/Lord_Howe"
    for day in ("2026-04-04T10:00", "2026-10-03T10:00"):
        base = int(dt.datetime.fromisoformat(day).replace(tzinfo=UTC).timestamp())
        moments = range(base, base + 12 * 3600, 600)
        fresh = {
            s: Calendar(tz, "monday", {"x": line}).instance("x", dt.datetime.fromtimestamp(s, UTC)) for s in moments
        }
        for order in (moments, moments[::-1]):
            calendar = Calendar(tz, "monday", {"x": line})
            for s in order:
                name = calendar.instance("x", dt.datetime.fromtimestamp(s, UTC))
                assert name == fresh[s], (line, s)
                begins, ends = calendar.bounds(name)
                assert begins <= s < ends
        spans = sorted({Calendar(tz, "monday", {"x": line}).bounds(name) for name in fresh.values()})
        assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:])), spans


def test_a_lookup_on_chathams_fall_back_night_returns() -> None:
    """cronsim's reverse iteration never returns for '0 */2 * * *' from some moments of the night Chatham's clocks go
    back (03:45+13:45 -> 02:45+12:45): a board with that schedule hung in post() there (a helper's sweep; a fifth of
    that night's moments). Lookups iterate forward only now; every moment of the night gets its instance."""
    calendar = Calendar("Pacific/Chatham", "monday", {"x": "0 */2 * * *"})
    assert calendar._firings("x", 1_743_855_304) == (1_743_855_300, 1_743_866_100)  # 02:00:04+13:45
    for s in range(1_743_855_304 - 4 * 3600, 1_743_855_304 + 4 * 3600, 300):
        begins, ends = Calendar("Pacific/Chatham", "monday", {"x": "0 */2 * * *"})._firings("x", s)
        assert begins <= s < ends


def test_the_first_hours_of_year_one_are_hours_like_any_other() -> None:
    """``hour:0001-01-01T00:00Z`` raised a bare OverflowError from every call naming it (looking an hour back from it
    left the dates a datetime holds: a helper's probe)."""
    for tz, name in (("UTC", "hour:0001-01-01T00:00Z"), ("America/New_York", "hour:0001-01-01T04:56:02Z")):
        board = mdss.Leaderboard(mdss.open_store("memory://"), "g", columns={"xp": "desc"}, windows=["hour"], tz=tz)
        start, end = board.window_bounds(name)
        assert (end - start).total_seconds() == 3600 and start.year == 1
        assert board.load({"ann": {"xp": 1}}, window=name) == 1 and board.row("ann", window=name).values == {"xp": 1}
        assert board.drop_window(name) is True


def test_a_board_opened_with_another_calendar_lists_and_drops_the_windows_it_does_not_cut() -> None:
    """How a board cuts time is the caller's: opened without its schedule, in another zone, with ISO weeks, it still
    lists the old instances and drops them by name. It reads the schedule's as it reads windows made by combine (their
    label is no kind of its own), and refuses hours and weeks it would cut otherwise."""
    store = mdss.open_store("memory://")
    options = {"tz": "Asia/Kolkata", "week_start": "sunday", "schedules": {"raid": "0 18 * * FRI"}}
    first = mdss.Leaderboard(
        store, "g", columns={"xp": "desc"}, windows=["hour", "week", "raid"], now=lambda: 1_795_453_200, **options
    )
    assert set(first.post("ann", {"xp": 1})) == {"hour:2026-11-23T16:30Z", "week:2026-11-22", "raid:2026-11-20T12:30Z"}
    again = mdss.Leaderboard.open(store, "g")
    assert again.windows() == ["raid:2026-11-20T12:30Z", "week:2026-11-22", "hour:2026-11-23T16:30Z"]
    assert again.row("ann", window="raid:2026-11-20T12:30Z").values == {"xp": 1}
    for name in ("week:2026-11-22", "hour:2026-11-23T16:30Z"):
        with pytest.raises(mdss.InvalidArgumentError):
            again.row("ann", window=name)
    again.drop_window("hour:2026-11-23T16:30Z")
    assert again.windows() == ["raid:2026-11-20T12:30Z", "week:2026-11-22"]
    again.drop()
    assert list(store.keys("")) == []


def test_combined_windows_beside_schedules() -> None:
    """A schedule's label names time windows: combine() into one of its instances checks it as one, and refuses a
    name of one's own under that label; other labels stay free for windows of one's own."""
    board = mdss.Leaderboard(
        mdss.open_store("memory://"),
        "g",
        columns={"xp": "desc"},
        accumulate=["xp"],
        windows=["day", "raid"],
        schedules={"raid": "0 18 * * FRI"},
        now=lambda: utc(2026, 11, 25, 12),
    )
    board.post("ann", {"xp": 2})
    assert board.combine(["day"], into="raid:2026-11-13T18:00Z") == 1  # an earlier raid, as a time window
    assert board.combine(["day"], into="year:2026") == 1
    assert board.combine(["day", "raid"], into="season:2026") == 1
    assert board.row("ann", window="season:2026").values == {"xp": 4}
    with pytest.raises(mdss.InvalidArgumentError, match="into must name a window"):
        board.combine(["day"], into="raid:finals")
    assert board.windows("raid") == ["raid:2026-11-13T18:00Z", "raid:2026-11-20T18:00Z"]
