"""A board's clock is range-checked: whatever ``now`` returns, every entry point of Leaderboard that reads
it answers with a moment from 0001-01-02 to 9999-12-30 UTC or an InvalidArgumentError naming ``now()``,
never a bare OverflowError or ValueError (``fromtimestamp(inf)``, ``datetime.max.astimezone(...)``)."""

from __future__ import annotations

import datetime as dt
import decimal
from collections.abc import Callable
from typing import Any

import pytest

import mdss
from mdss import _windows
from mdss.leaderboard import Leaderboard

UTC = dt.timezone.utc
EAST, WEST = "Pacific/Kiritimati", "Pacific/Pago_Pago"  # UTC+14, UTC-11


class _Broken(dt.tzinfo):
    def utcoffset(self, when: Any) -> dt.timedelta:
        raise RuntimeError("no offset")


class _Naive(dt.tzinfo):
    def utcoffset(self, when: Any) -> None:
        return None


BAD_CLOCKS: dict[str, Any] = {
    "inf": float("inf"),
    "-inf": float("-inf"),
    "nan": float("nan"),
    "1e20": 1e20,
    "-1e20": -1e20,
    "10**400": 10**400,
    "-10**400": -(10**400),
    "year-10000": dt.datetime(9999, 12, 31, tzinfo=UTC).timestamp() + 86400,
    "9999-12-31": dt.datetime(9999, 12, 31, tzinfo=UTC),
    "0001-01-01": dt.datetime(1, 1, 1, 23, tzinfo=UTC),
    "datetime.max": dt.datetime.max.replace(tzinfo=UTC),
    "datetime.min": dt.datetime.min.replace(tzinfo=UTC),
    "datetime.max-east": dt.datetime.max.replace(tzinfo=dt.timezone(dt.timedelta(hours=-23))),
    "datetime.min-east": dt.datetime.min.replace(tzinfo=dt.timezone(dt.timedelta(hours=23))),
    "naive": dt.datetime(2026, 11, 18),
    "naive-max": dt.datetime.max,
    "utcoffset-none": dt.datetime(2026, 11, 18, tzinfo=_Naive()),
    "utcoffset-fails": dt.datetime(2026, 11, 18, tzinfo=_Broken()),
    "True": True,
    "False": False,
    "None": None,
    "text": "2026-11-18",
    "date": dt.date(2026, 11, 18),
    "decimal": decimal.Decimal(1),
}

#: Every Leaderboard entry point that reads the clock (the current instance of a kind), as a call of a board.
CALLS: dict[str, Callable[[Leaderboard], Any]] = {
    "post": lambda b: b.post("ann", {"xp": 1}),
    "top": lambda b: b.top("xp"),
    "top-week": lambda b: b.top("xp", window="week"),
    "rows": lambda b: b.rows(["ann"], "xp"),
    "page": lambda b: b.page("xp"),
    "around": lambda b: b.around("ann", "xp"),
    "count": lambda b: b.count("xp"),
    "percentile": lambda b: b.percentile("ann", "xp"),
    "at_percentile": lambda b: b.at_percentile("xp", 0.5),
    "positions": lambda b: b.positions("ann"),
    "row": lambda b: b.row("ann"),
    "check": lambda b: b.check("month"),
    "gc": lambda b: b.gc("day"),
    "drop_window": lambda b: b.drop_window("day"),
}


def board_with(store: mdss.Store, clock: Any, tz: Any = None) -> Leaderboard:
    return Leaderboard(
        store, "g", columns={"xp": "desc"}, windows=["day", "week", "month", "all"], tz=tz, now=lambda: clock
    )


@pytest.mark.parametrize("tz", [None, EAST, WEST])
@pytest.mark.parametrize("clock", BAD_CLOCKS)
def test_every_entry_point_refuses_a_bad_clock(clock: str, tz: str | None) -> None:
    store = mdss.open_store("memory://")
    board = board_with(store, BAD_CLOCKS[clock], tz)
    for name, call in CALLS.items():
        with pytest.raises(mdss.InvalidArgumentError, match=r"now\(\)"):
            call(board)
            pytest.fail(f"{name} accepted the clock")
    assert board.windows() == []  # nothing was written
    assert board.top("xp", window="day:2026-11-18") == []  # what reads no clock (an instance by name) works
    assert board.windows("day") == []


#: Clocks at the ends of the range, in the zones at the ends of the offsets: every window has an instance.
EDGES = {
    "earliest": _windows.EARLIEST,
    "earliest-seconds": _windows.EARLIEST.timestamp(),
    "latest": _windows.LATEST - dt.timedelta(microseconds=1),
    "latest-seconds": _windows.LATEST.timestamp() - 1,
    "latest-east": (_windows.LATEST - dt.timedelta(seconds=1)).astimezone(dt.timezone(dt.timedelta(hours=23))),
}


@pytest.mark.parametrize("tz", [None, EAST, WEST])
@pytest.mark.parametrize("edge", EDGES)
def test_clocks_at_the_ends_of_the_range_work(store: mdss.Store, edge: str, tz: str | None) -> None:
    board = board_with(store, EDGES[edge], tz)
    for call in CALLS.values():
        call(board)
    board.post("ann", {"xp": 3})
    assert board.top("xp") == board.top("xp", window="day")
    assert len(board.windows()) == 4
    for instance in board.windows():
        assert board.count("xp", window=instance) == 1 or instance.startswith("day")
    years = {instance.partition(":")[2][:4] for instance in board.windows() if instance != "all"}
    assert years <= {"0001", "9999"}, years


class _TooFar(dt.tzinfo):
    def utcoffset(self, when: Any) -> dt.timedelta:
        return dt.timedelta(hours=30)


@pytest.mark.parametrize("tz", [_Broken(), _TooFar()], ids=["fails", "30h"])
def test_a_failing_time_zone_of_the_caller_is_an_invalid_argument(tz: dt.tzinfo) -> None:
    board = board_with(mdss.open_store("memory://"), 1_790_000_000, tz)  # type: ignore[arg-type]
    for name, call in CALLS.items():
        with pytest.raises(mdss.InvalidArgumentError, match="time zone"):
            call(board)
            pytest.fail(f"{name} accepted the time zone")
    assert board.top("xp", window="day:2026-11-18") == []  # an instance named in full needs no zone to read
    with pytest.raises(mdss.InvalidArgumentError, match="time zone"):
        _windows.start("day:2026-11-18", tz)  # (where a post registers its instances)
    assert _windows.start("day:2026-11-18", _windows.UTC) == dt.datetime(2026, 11, 18, tzinfo=UTC).timestamp()


def test_moment_is_utc_and_exact() -> None:
    east = dt.datetime(2026, 11, 18, 1, tzinfo=dt.timezone(dt.timedelta(hours=5)))
    assert _windows.moment(lambda: east) == east and _windows.moment(lambda: east).tzinfo is UTC
    assert _windows.moment(lambda: 1_790_000_000) == dt.datetime.fromtimestamp(1_790_000_000, UTC)
    latest = int(_windows.LATEST.timestamp())
    assert _windows.moment(lambda: latest - 1).year == 9999  # an int: compared exactly, not through a float
    with pytest.raises(mdss.InvalidArgumentError):
        _windows.moment(lambda: latest)


def test_a_float_just_short_of_a_window_start_stays_in_the_window_before() -> None:
    """``now()`` half a microsecond before midnight, a float strictly below it, was rounded up to the microsecond and
    posted to the next day (a helper's probe): moments floor to the microsecond, as whole seconds do."""
    boundary = 1_795_046_400  # 2026-11-19T00:00Z
    for t in (boundary - 4e-7, boundary - 1e-6, float(boundary)):
        board = mdss.Leaderboard(
            mdss.open_store("memory://"), "g", columns={"xp": "desc"}, windows=["day"], now=lambda t=t: t
        )
        assert list(board.post("a", {"xp": 1})) == ["day:2026-11-18" if t < boundary else "day:2026-11-19"]
