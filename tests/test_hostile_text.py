"""Every place mdss reads a name or a number from text, walked with hostile spellings of valid text: a
trailing newline or carriage return (a regex's ``$`` matches before a trailing newline), a NUL, a leading
space, and the digits spelt full-width or Arabic-Indic (``\\d``, ``str.isdigit()`` and ``int()`` take
them). Each must be a clear mdss error (or, on the command line, a usage error): never a bare exception,
never accepted as some other thing."""

from __future__ import annotations

import datetime as dt
import fractions
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from click.testing import CliRunner

import mdss
from mdss import _keys, _parse, _windows, _writer
from mdss.cli import cli, looks_like_header, parse_score
from mdss.leaderboard import Leaderboard
from mdss.port import main as port_main

FULL_WIDTH = str.maketrans("0123456789", "０１２３４５６７８９")
ARABIC_INDIC = str.maketrans("0123456789", "٠١٢٣٤٥٦٧٨٩")
DEVANAGARI = str.maketrans("0123456789", "०१२३४५६७८९")


def hostile(text: str) -> Iterator[str]:
    """Spellings of ``text`` that must not pass for it (nor for anything else)."""
    yield from (text + "\n", text + "\r", text + "\r\n", text + "\x00", "\x00" + text, " " + text, "\n" + text)
    for table in (FULL_WIDTH, ARABIC_INDIC, DEVANAGARI):
        if text.translate(table) != text:
            yield text.translate(table)
            first = next(i for i, c in enumerate(text) if c in "0123456789")
            yield text[:first] + text[first].translate(table) + text[first + 1 :]  # one digit only
    if text[-1:].isdigit():  # an underscore between digits, which int() and float() skip
        yield text[:-1] + "_" + text[-1]


WINDOWS = ["all", "day", "week", "month", "day:2026-11-18", "week:2026-W47", "month:2026-11"]
BAD_WINDOWS = sorted({bad for good in WINDOWS for bad in hostile(good)})


def test_hostile_spellings_are_not_the_text() -> None:
    assert all(bad not in WINDOWS for bad in BAD_WINDOWS)
    assert {"day:２０２６-１１-１８", "day:٢026-11-18", "all\n", "day:2026-11-18\n"} <= set(BAD_WINDOWS)


@pytest.mark.parametrize("bad", BAD_WINDOWS)
def test_window_names(bad: str) -> None:
    with pytest.raises(mdss.InvalidArgumentError, match="window"):
        _windows.kind_of(bad)
    assert _windows.start(bad, _windows.UTC) is None


@pytest.fixture(scope="module")
def board() -> Leaderboard:
    board = Leaderboard(
        mdss.open_store("memory://"),
        "g",
        columns={"xp": "desc"},
        windows=["all", "day", "week", "month"],
        now=lambda: dt.datetime(2026, 11, 18, 12, tzinfo=dt.timezone.utc),
    )
    board.post("ann", {"xp": 1})
    return board


#: Every Leaderboard entry point that takes a window, as a call of (board, window).
WINDOW_CALLS: dict[str, Callable[[Leaderboard, Any], Any]] = {
    "top": lambda b, w: b.top("xp", window=w),
    "rows": lambda b, w: b.rows(["ann"], "xp", window=w),
    "page": lambda b, w: b.page("xp", window=w),
    "around": lambda b, w: b.around("ann", "xp", window=w),
    "count": lambda b, w: b.count("xp", window=w),
    "percentile": lambda b, w: b.percentile("ann", "xp", window=w),
    "at_percentile": lambda b, w: b.at_percentile("xp", 0.5, window=w),
    "positions": lambda b, w: b.positions("ann", window=w),
    "row": lambda b, w: b.row("ann", window=w),
    "check": lambda b, w: b.check(window=w),
    "gc": lambda b, w: b.gc(w),
    "drop_window": lambda b, w: b.drop_window(w),
}


@pytest.mark.parametrize("call", WINDOW_CALLS)
def test_every_board_entry_point_refuses_hostile_windows(board: Leaderboard, call: str) -> None:
    for bad in BAD_WINDOWS:
        with pytest.raises(mdss.InvalidArgumentError):
            WINDOW_CALLS[call](board, bad)
    assert board.windows() == ["all", "month:2026-11", "week:2026-W47", "day:2026-11-18"]
    assert board.count("xp", window="day:2026-11-18") == 1


def test_board_settings_refuse_hostile_windows_kinds_and_zones(board: Leaderboard) -> None:
    store = mdss.open_store("memory://")
    for bad in BAD_WINDOWS:
        with pytest.raises(mdss.InvalidArgumentError):
            Leaderboard(store, "h", columns={"xp": "desc"}, windows=[bad])
        with pytest.raises(mdss.InvalidArgumentError):
            Leaderboard(store, "h", columns={"xp": "desc"}, windows=["day"], retention={bad: 2})
        with pytest.raises(mdss.InvalidArgumentError):
            board.windows(bad)
    for bad in hostile("Europe/Paris"):
        with pytest.raises(mdss.InvalidArgumentError, match="time zone"):
            Leaderboard(store, "h", columns={"xp": "desc"}, tz=bad)


#: Store URLs, each with an option or a seed to spoil; all are refused before any connection.
URLS = {
    "memory-flag": "memory://?appends=true",
    "sqlite-timeout": "sqlite:///{tmp}/x.db?timeout=5",
    "redis-retries": "redis://127.0.0.1:1/0?retries=3",
    "redis-budget": "redis://127.0.0.1:1/0?retry_budget=2.5",
    "cluster-seed-port": "redis+cluster://127.0.0.1:7000",
    "riak-retries": "riak://127.0.0.1:1?retries=3",
    "riak-timeout": "riak://127.0.0.1:1?timeout=5",
    "riak-quorum": "riak://127.0.0.1:1?r=2",
    "riak-port": "riak://127.0.0.1:8098",
    "dynamodb-retries": "dynamodb://t?region=eu-west-1&endpoint=http://127.0.0.1:1&retries=3",
    "dynamodb-timeout": "dynamodb://t?region=eu-west-1&endpoint=http://127.0.0.1:1&timeout=5",
}


@pytest.mark.parametrize("name", URLS)
def test_store_url_options(name: str, tmp_path: Any) -> None:
    url = URLS[name].format(tmp=tmp_path)
    good = url.rpartition("=")[2] if "?" in url and not name.endswith("port") else url.rpartition(":")[2]
    for bad in hostile(good):
        spoilt = url[: len(url) - len(good)] + bad.replace("\n", "%0A").replace("\r", "%0D").replace("\x00", "%00")
        with pytest.raises(mdss.InvalidArgumentError):
            mdss.open_store(spoilt)


@pytest.mark.parametrize("shards", [1, 3])
def test_page_cursors(shards: int) -> None:
    sset = mdss.SortedSet(mdss.open_store("memory://"), "s", chunk_size=4, shards=shards)
    sset.add_many([(f"m{i}", i) for i in range(20)])
    page = sset.page(5)
    assert page.cursor and sset.page(5, page.cursor)
    for bad in (page.cursor + "\n", page.cursor + "\r", page.cursor + "\x00", " " + page.cursor, page.cursor + "="):
        with pytest.raises(mdss.InvalidArgumentError, match="cursor"):
            sset.page(5, bad)


def test_board_page_cursors(board: Leaderboard) -> None:
    board.post("bob", {"xp": 2})
    _, cursor = board.page("xp", limit=1)
    assert cursor and board.page("xp", limit=1, cursor=cursor)
    for bad in (cursor + "\n", cursor + "\r", cursor + "\x00", " " + cursor):
        with pytest.raises(mdss.InvalidArgumentError, match="cursor"):
            board.page("xp", limit=1, cursor=bad)


@pytest.mark.parametrize("good", ["42", "-7", "2.5", "1e3", "inf"])
def test_cli_scores(good: str) -> None:
    assert parse_score(good) == float(good)
    assert parse_score(f" {good}\t") == float(good)  # spaces around a CSV field are fine
    for bad in hostile(good):
        if bad == " " + good:
            continue
        with pytest.raises(mdss.InvalidScoreError):
            parse_score(bad)
        assert not looks_like_header(["ann", bad]) or not any(c.isdigit() for c in bad)


#: Command lines with one integer (or number) argument, spelt {}.
COMMANDS = [
    ["--store", "memory://", "--set", "s", "top", "-n", "{}"],
    ["--store", "memory://", "--set", "s", "range", "{}"],
    ["--store", "memory://", "--set", "s", "page", "--limit", "{}"],
    ["--store", "memory://", "--set", "s", "load", "--chunk-size", "{}", "-"],
    ["--store", "memory://", "--set", "s", "around", "ann", "--before", "{}"],
    ["--store", "memory://", "--set", "b", "board", "top", "xp", "-n", "{}"],
    ["--store", "memory://", "gc", "--min-age", "{}"],
    ["--store", "memory://", "bench", "--shards", "{}"],
]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c[4:-1]))
def test_cli_integers(command: list[str]) -> None:
    if "bench" not in command:  # (a benchmark would run)
        result = CliRunner().invoke(cli, [part.format("5") for part in command])
        assert result.exit_code != 2, result.output
    for bad in hostile("5"):
        result = CliRunner().invoke(cli, [part.format(bad) for part in command])
        assert result.exit_code == 2, (bad, result.output, result.exception)  # a usage error, named
        assert "Invalid value" in result.output and "ASCII" in result.output or "shard counts" in result.output


def test_port_threads_option(capsys: pytest.CaptureFixture[str]) -> None:
    for bad in hostile("4"):
        with pytest.raises(SystemExit) as raised:
            port_main(["--store", "memory://", "--threads", bad])
        assert raised.value.code == 2
        assert "invalid integer value" in capsys.readouterr().err


def test_stored_ids_and_shard_parts() -> None:
    """Text mdss wrote itself, read back: a node id's epoch and clock, a shard's part name."""
    node_id = _writer.new_id(5)
    assert _writer.id_epoch(node_id) == 5 and _writer.id_millis(node_id) > 0
    for bad in hostile("5"):
        assert _writer.id_epoch(bad + node_id[1:]) == 0
    millis = node_id.partition(".")[2][:11]
    for bad in (millis.translate(FULL_WIDTH), " " + millis[1:], millis[:-1] + "\n"):
        assert _writer.id_millis(node_id.replace(millis, bad)) == 0
    part = _keys.shard_parts("ns", "s", 2)[0]
    assert _keys.PARTS.fullmatch(part)
    for bad in hostile(part):
        if bad.strip(" \x00\n") != part:  # (the name before "|" is free text: a set's name)
            assert not _keys.PARTS.fullmatch(bad), bad
    assert not _keys.PARTS.fullmatch(part + "\n")


def test_the_strict_parsers() -> None:
    for good, value in (("0", 0), ("-12", -12), ("+3", 3)):
        assert _parse.integer(good) == value
        for bad in hostile(good):
            with pytest.raises(ValueError):
                _parse.integer(bad)
    for good in ("1.5", "-2e3", ".5", "5.", "nan", "-Infinity"):
        assert _parse.number(good) == float(good) or good == "nan"
        for bad in hostile(good):
            with pytest.raises(ValueError):
                _parse.number(bad)
    with pytest.raises(ValueError):
        _parse.number("ınf")  # a dotless i: re.IGNORECASE alone would take it


def test_a_score_too_large_for_a_float_is_an_invalid_score() -> None:
    """(Not text, but the same class: a number Python's float() refuses with a bare OverflowError.)"""
    sset = mdss.SortedSet(mdss.open_store("memory://"), "s")
    with pytest.raises(mdss.InvalidScoreError):
        sset.add("ann", fractions.Fraction(10**400, 3))
    assert sset.add("ann", fractions.Fraction(1, 4)) and sset.score("ann") == 0.25


def test_board_cli_values_in_other_digits_are_text() -> None:
    """``mdss board post OWNER field=VALUE``: a number only in ASCII digits, otherwise the text as typed."""
    args = ["--store", "memory://", "--set", "b", "board", "--json", "--columns", '{"xp": "desc"}', "post", "ann"]
    assert CliRunner().invoke(cli, [*args, "xp=3"]).exit_code == 0
    for bad in hostile("3"):
        result = CliRunner().invoke(cli, [*args, f"xp={bad}"])
        assert result.exit_code == 1 and "must be an int or a float" in result.output, (bad, result.output)


LONE = "\ud800"  # a lone surrogate: a str with no UTF-8


@pytest.mark.parametrize(
    "call",
    [
        lambda s: mdss.SortedSet(s, LONE),
        lambda s: mdss.SortedSet(s, "x" + LONE),
        lambda s: mdss.Leaderboard(s, LONE, columns={"xp": "desc"}),
        lambda s: mdss.TopN(s, LONE, 5),
        lambda s: mdss.SortedSet(mdss.open_store("memory://", namespace=LONE), "x"),
        lambda s: mdss.Leaderboard(s, "b", columns={"xp": "desc"}).post("o", {"xp": 1, LONE: 1}),
        lambda s: mdss.Leaderboard(s, "b", columns={"xp": "desc"}).post("o", {"xp": 1, "name": LONE}),
        lambda s: mdss.Leaderboard(s, "b", columns={"xp": "desc"}).post("o", {"xp": 1}, post_id=LONE),
        lambda s: mdss.Leaderboard(s, "b", columns={"xp": "desc"}).post("o", {"xp": 1}, ops={LONE: "set"}),
        lambda s: mdss.Leaderboard(s, "b", columns={"xp": "desc"}).load([("o", {"xp": 1, "name": LONE})]),
        lambda s: mdss.Leaderboard(s, "b", columns={"xp": "desc"}).load([("o", {LONE: 1})]),
    ],
)
def test_a_lone_surrogate_in_any_name_or_text_is_an_invalid_argument(call) -> None:
    """Set, board and top-N names, namespaces, field names, text values and post ids with a lone surrogate are refused
    as InvalidArgumentError (they had raised UnicodeEncodeError from quoting a key or packing a row); nothing is
    written."""
    store = mdss.open_store("memory://")
    with pytest.raises(mdss.InvalidArgumentError):
        call(store)
    assert mdss.Leaderboard(store, "b", columns={"xp": "desc"}).rows(["o"], "xp") == []


@pytest.mark.parametrize(
    "call",
    [
        lambda s, b: s.expire(10**400),
        lambda s, b: s.expire_at(10**400),
        lambda s, b: s.unreferenced(10**400),
        lambda s, b: s.unreferenced(None),
        lambda s, b: mdss.SortedSet(s.store, "y", retry_budget=10**400),
        lambda s, b: mdss.SortedSet.load(s.store, "z", {"a": 1}, memory_bytes=10**30),
        lambda s, b: b.load([("o", {"xp": 1})], memory_bytes=10**30),
        lambda s, b: b.post("o", {"xp": 1}, ops=True),
        lambda s, b: b.post("o", {"xp": 1}, ops="set"),
        lambda s, b: b.post("o", {"xp": 1}, ops={1: "set"}),
        lambda s, b: s.add_many(_ZeroD()),
        lambda s, b: s.remove_many(_ZeroD()),
        lambda s, b: s.scores(_ZeroD()),
        lambda s, b: b.rows(_ZeroD(), "xp"),
        lambda s, b: b.load(_ZeroD()),
        lambda s, b: s.estimate_rank("a", ties=_Ambiguous()),
    ],
)
def test_numbers_past_a_double_and_objects_that_look_iterable_are_invalid_arguments(call) -> None:
    """Durations and moments past a double's range (10**400) and a load's memory past 2**50 bytes are refused (they had
    raised OverflowError, or islice's ValueError); so are ops that are no mapping of field names, and objects that
    claim to iterate and do not (a numpy array of no dimension: TypeError from iter())."""
    store = mdss.open_store("memory://")
    sset = mdss.SortedSet(store, "x")
    sset.add("a", 1)
    board = mdss.Leaderboard(store, "b", columns={"xp": "desc"})
    with pytest.raises(mdss.InvalidArgumentError):
        call(sset, board)
    assert sset.score("a") == 1 and sset.check() == []


class _ZeroD:
    """Like a numpy array of no dimension: it has ``__iter__``, which raises TypeError."""

    def __iter__(self):
        raise TypeError("iteration over a 0-d array")


class _Ambiguous:
    """Like a numpy array of several values: comparing it answers something whose truth is an error."""

    def __eq__(self, other: object) -> bool:
        raise ValueError("the truth value of an array with more than one element is ambiguous")

    __hash__ = None  # type: ignore[assignment]


HUGE = 10**5000  # past the digits Python spells (sys.get_int_max_str_digits): a message naming it must not fail


@pytest.mark.parametrize(
    "call",
    [
        lambda s: mdss.SortedSet(s, "a").add("x", HUGE),
        lambda s: mdss.SortedSet(s, "a", log_limit=HUGE),
        lambda s: mdss.SortedSet(s, "a", chunk_size=HUGE),
        lambda s: mdss.SortedSet(s, "a").rank_of_score(HUGE),
        lambda s: mdss.Leaderboard(s, "b", columns={"xp": "desc"}).post("o", {"xp": HUGE}),
        lambda s: mdss.Leaderboard(s, "b", columns={"xp": "desc"}).post("o", {"xp": 1, "n": HUGE}),
        lambda s: mdss.TopN(s, "t", HUGE),
        lambda s: mdss.union(s, "u", ["a"], weights=[HUGE]),
    ],
)
def test_an_int_too_long_to_spell_is_refused_by_mdss_not_by_its_message(call) -> None:
    with pytest.raises(mdss.InvalidArgumentError, match="bits"):
        call(mdss.open_store("memory://"))
