"""The Erlang port server (mdss/port.py) from Python: terms in and out, errors, concurrency, framing.

The Erlang side of the same protocol, through a real VM, is tests/test_erlang.py.
"""

from __future__ import annotations

import io
import math
import os
import pathlib
import subprocess
import sys
import threading
from collections.abc import Iterator
from typing import Any

import pytest

import erlang
import mdss
from mdss.port import MAX_FRAME, OPS, PortServer
from mdss.stores.memory import MemoryStore

A, Ref = erlang.OtpErlangAtom, erlang.OtpErlangReference


def B(text: str) -> erlang.OtpErlangBinary:
    return erlang.OtpErlangBinary(text.encode("utf-8"))


def request(op: str, args: Any, ref: Any = 1) -> bytes:
    return erlang.term_to_binary((A("call"), ref, A(op), args))


def plain(term: Any) -> Any:
    """A decoded reply with binaries as str and atoms as ``:name``, so that tests can compare it."""
    if isinstance(term, erlang.OtpErlangBinary):
        return term.value.decode("utf-8")
    if isinstance(term, erlang.OtpErlangAtom):
        return ":" + (term.value if isinstance(term.value, str) else term.value.decode())
    if isinstance(term, (list, tuple)):
        return type(term)(plain(t) for t in term)
    if isinstance(term, dict):
        return {plain(k): plain(v) for k, v in term.items()}
    return term


class _AnyCursor:
    """Equal to any page cursor (a non-empty string)."""

    def __eq__(self, other: object) -> bool:
        return isinstance(other, str) and len(other) > 10


ask_cursor = _AnyCursor()


@pytest.fixture
def port(store: mdss.Store) -> PortServer:
    return PortServer(store)


def ask(port: PortServer, op: str, *args: Any) -> Any:
    return plain(erlang.binary_to_term(port.handle(request(op, list(args)))))


def test_sorted_set_operations(port: PortServer) -> None:
    s = B("board")
    assert ask(port, "add_many", s, [(B("ann"), 5), (B("bob"), 7), (B("cid"), 5)]) == (":reply", 1, 3)
    assert ask(port, "add", s, B("dee"), 1.5) == (":reply", 1, True)
    assert ask(port, "rank", s, B("cid")) == (":reply", 1, 3)
    assert ask(port, "rank", s, B("cid"), A("competition")) == (":reply", 1, 2)
    assert ask(port, "rank", s, B("dee"), A("dense")) == (":reply", 1, 3)
    assert ask(port, "rank", s, B("zed")) == (":reply", 1, None)
    assert ask(port, "range", s, 1, 2) == (":reply", 1, [("ann", 5, 2), ("cid", 5, 3)])
    assert ask(port, "incr", s, B("dee"), 10) == (":reply", 1, 11.5)
    assert ask(port, "add", s, B("top"), A("inf")) == (":reply", 1, True)
    assert ask(port, "at", s, 1) == (":reply", 1, ("top", ":inf", 1))
    assert ask(port, "score", s, B("top")) == (":reply", 1, ":inf")
    assert ask(port, "page", s, 3) == (":reply", 1, ([("top", ":inf", 1), ("dee", 11.5, 2), ("bob", 7, 3)], ask_cursor))
    reply = ask(port, "info", s)[2]
    assert (reply[":members"], reply[":order"], reply[":chunk_size"]) == (5, ":desc", 1000)
    assert reply[":tiebreak"] == ":member"  # an atom, as a request names it (was a binary)


def test_conditional_writes_and_the_ties_of_reads(port: PortServer) -> None:
    s = B("cond")
    assert ask(port, "add_many", s, [(B("a"), 9), (B("b"), 5), (B("c"), 5)]) == (":reply", 1, 3)
    assert ask(port, "add", s, B("a"), 1, A("gt"), {A("changed"): True}) == (":reply", 1, False)
    assert ask(port, "add", s, B("a"), 10, A("gt"), {A("changed"): True}) == (":reply", 1, True)
    assert ask(port, "add", s, B("z"), 1, None, {A("only"): A("existing")}) == (":reply", 1, False)
    assert ask(port, "add_many", s, [(B("c"), 4), (B("d"), 1)], None, {A("only"): A("new")}) == (":reply", 1, 1)
    assert ask(port, "incr", s, B("a"), -1, {A("when"): A("gt")}) == (":reply", 1, None)
    assert ask(port, "incr", s, B("zz"), 1, {A("only"): A("existing")}) == (":reply", 1, None)
    assert ask(port, "scores", s, [B("a"), B("c"), B("z"), B("zz")]) == (":reply", 1, [10, 5, None, None])
    every = [("a", 10, 1), ("b", 5, 2), ("c", 5, 2), ("d", 1, 4)]
    assert ask(port, "range", s, 0, 10, A("competition")) == (":reply", 1, every)
    assert ask(port, "range_by_score", s, 10, 0, None, None, A("dense"))[2][3] == ("d", 1, 3)
    assert ask(port, "at", s, 3, A("competition")) == (":reply", 1, ("c", 5, 2))
    assert ask(port, "around", s, B("c"), 0, 1, A("dense")) == (":reply", 1, [("c", 5, 2), ("d", 1, 3)])
    assert ask(port, "page", s, 4, None, A("competition")) == (":reply", 1, (every, None))
    podium = (B("podium"), {A("n"): 3})
    assert ask(port, "topn_post_many", podium, [(B("a"), 9), (B("b"), 5), (B("c"), 5)]) == (":reply", 1, True)
    assert ask(port, "topn_top", podium, A("dense")) == (":reply", 1, [("a", 9, 1), ("b", 5, 2), ("c", 5, 2)])


def test_leaderboard_operations(port: PortServer) -> None:
    board = (
        B("game"),
        {
            A("columns"): {A("xp"): A("desc"), B("race"): [(A("laps"), A("desc")), (B("ms"), A("asc"))]},
            A("accumulate"): [A("shots")],
            A("keep_best"): {A("ms"): A("min")},
            A("windows"): [A("all"), B("day")],
        },
    )
    ann = {A("xp"): 5, A("shots"): 2, A("laps"): 3, A("ms"): 90, B("name"): B("Ann"), A("pro"): True}
    posted = ask(port, "board_post", board, B("ann"), ann, {A("post_id"): B("p1")})
    assert posted[0] == ":reply" and list(posted[2].values()) == [True, True] and "all" in posted[2]
    assert list(ask(port, "board_post", board, B("ann"), ann, {A("post_id"): B("p1")})[2].values()) == [False, False]
    ask(port, "board_post", board, B("bob"), {A("xp"): 7, A("laps"): 3, A("ms"): A("inf")})
    ask(port, "board_post", board, B("ann"), {A("shots"): 1, A("ms"): 99}, {A("ops"): {A("ms"): A("set")}})
    row = ask(port, "board_row", B("game"), B("ann"))[2]  # a stored board by name: its columns, windows [all]
    assert row[0] == "ann" and row[1] == {"xp": 5, "shots": 3, "laps": 3, "ms": 99, "name": "Ann", "pro": True}
    assert ask(port, "board_row", board, B("zed")) == (":reply", 1, None)
    assert ask(port, "board_positions", board, B("ann")) == (":reply", 1, {"xp": 2, "race": 1})
    assert ask(port, "board_positions", board, B("ann"), {A("window"): A("day"), A("ties"): A("dense")})[2] == {
        "xp": 2,
        "race": 1,
    }
    assert ask(port, "board_count", board, A("race")) == (":reply", 1, 2)
    top = ask(port, "board_top", board, A("race"), 10)[2]
    assert [(r[0], r[1]) for r in top] == [(1, "ann"), (2, "bob")] and top[1][2]["ms"] == ":inf"
    around = ask(port, "board_around", board, B("bob"), A("xp"), 0, 1, {A("ties"): A("competition")})[2]
    assert [(r[0], r[1]) for r in around] == [(1, "bob"), (2, "ann")]
    friends = ask(port, "board_rows", board, [B("ann"), B("zed"), B("bob")], A("xp"))[2]
    assert [(r[0], r[1]) for r in friends] == [(1, "bob"), (2, "ann")]
    first, cursor = ask(port, "board_page", board, A("xp"), 1)[2]
    assert [r[1] for r in first] == ["bob"] and cursor == ask_cursor
    second, end = ask(port, "board_page", board, A("xp"), 1, B(cursor), {A("window"): A("all")})[2]
    assert [r[1] for r in second] == ["ann"] and end is None
    by_rank, end = ask(port, "board_page", board, A("xp"), 5, None, {A("offset"): 1})[2]
    assert [(r[0], r[1]) for r in by_rank] == [(2, "ann")] and end is None
    assert (
        len(ask(port, "board_windows", board)[2]) == 2
        and ask(port, "board_windows", board, A("day"))[2][0][:4] == "day:"
    )
    assert ask(port, "board_percentile", board, B("ann"), A("xp")) == (":reply", 1, 0.5)
    assert ask(port, "board_at_percentile", board, A("xp"), 1)[2][1] == "ann"
    assert ask(port, "board_check", board, {A("window"): A("day")}) == (":reply", 1, [])
    assert isinstance(ask(port, "board_gc", board, {A("sweep"): True, A("wait"): False})[2], int)


def test_percentiles_estimates_and_random_members(port: PortServer) -> None:
    s = (B("pct"), {A("chunk_size"): 4})
    assert ask(port, "load", s, [(B(f"p{i}"), i) for i in range(10)] + [(B("p0"), 100)]) == (":reply", 1, 10)
    assert ask(port, "rank_with_score", s, B("p3")) == (":reply", 1, (8, 3))
    assert ask(port, "rank_with_score", s, B("p0"), A("competition")) == (":reply", 1, (1, 100))
    assert ask(port, "rank_with_score", s, B("zed")) == (":reply", 1, None)
    assert ask(port, "percentile", s, B("p3")) == (":reply", 1, 0.7)
    assert ask(port, "percentile", s, B("zed")) == (":reply", 1, None)
    assert ask(port, "at_percentile", s, 0.5) == (":reply", 1, ("p5", 5, 6))
    assert ask(port, "at_percentile", s, 1, A("competition")) == (":reply", 1, ("p1", 1, 10))
    rough = ask(port, "estimate_rank", s, (A("score"), 5))[2]
    assert rough[1] <= 6 <= rough[2]
    assert ask(port, "estimate_rank", s, B("p3"), {A("max_error"): 0}) == (":reply", 1, (8, 8, 8))
    assert ask(port, "estimate_rank", s, B("p3"), {A("ties"): A("competition"), A("max_error"): 0})[2] == (8, 8, 8)
    assert ask(port, "estimate_rank", s, B("zed")) == (":reply", 1, None)
    assert ask(port, "estimate_percentile", s, B("p3"), {A("max_error"): 0.0}) == (":reply", 1, (0.7, 0.7, 0.7))
    assert ask(port, "estimate_percentile", s, (A("score"), A("inf")), {A("max_error"): 0}) == (
        ":reply",
        1,
        (0.0, 0.0, 0.0),
    )
    drawn = ask(port, "random_members", s, 3)[2]
    assert len({e[0] for e in drawn}) == 3 and all(ask(port, "rank", s, B(e[0]))[2] == e[2] for e in drawn)
    assert len(ask(port, "random_members", s)[2]) == 1


def test_pops_range_removals_load_gc_and_drop(port: PortServer) -> None:
    s = B("take")
    assert ask(port, "load", s, {B(f"p{i}"): i for i in range(10)}) == (":reply", 1, 10)
    reply = ask(port, "load", s, [(B("a"), 1)])
    assert reply[0] == ":error" and reply[2][0] == ":InvalidArgumentError"  # the set has entries
    assert ask(port, "pop_min", s) == (":reply", 1, [("p0", 0, 10)])
    assert ask(port, "pop_max", s, 2) == (":reply", 1, [("p9", 9, 1), ("p8", 8, 2)])
    assert ask(port, "remove_range_by_score", s, 2, 4) == (":reply", 1, 3)
    assert ask(port, "remove_range_by_rank", s, 1, 2) == (":reply", 1, 2)
    assert ask(port, "range", s, 0, 10) == (":reply", 1, [("p5", 5, 1), ("p1", 1, 2)])
    assert ask(port, "check", s) == (":reply", 1, [])
    assert isinstance(ask(port, "gc", s, {A("wait"): False, A("sweep"): True, A("min_age"): 0})[2], int)
    assert ask(port, "load", s, [(B("a"), 1), (B("b"), 2)], {A("replace"): True}) == (":reply", 1, 2)
    assert ask(port, "drop", s) == (":reply", 1, None)
    assert ask(port, "len", (s, {A("order"): A("asc")})) == (":reply", 1, 0)  # dropped: opened anew, as asked
    assert ask(port, "info", s)[2][":order"] == ":asc"


def test_boards_with_schedules(port: PortServer) -> None:
    options = {
        A("columns"): {A("xp"): A("desc")},
        A("windows"): [A("all"), A("raid"), A("week")],
        A("schedules"): {A("raid"): B("0 18 * * FRI")},
        A("week_start"): A("sunday"),
    }
    reply = ask(port, "board_post", (B("sched"), options), B("ann"), {A("xp"): 5})
    assert reply[0] == ":reply" and sorted(k.split(":")[0] for k in reply[2]) == ["all", "raid", "week"], reply
    bad = ask(port, "board_post", (B("sched2"), {**options, A("schedules"): {A("raid"): B("not cron")}}), B("a"), {})
    assert bad[0] == ":error" and bad[2][0] == ":InvalidArgumentError"


def test_a_board_column_by_first(memory_port: PortServer) -> None:
    port = memory_port
    board = (B("tb"), {A("columns"): {A("xp"): A("desc")}, A("tiebreak"): {A("xp"): A("first")}})
    for owner in ("zed", "amy", "bob"):
        ask(port, "board_post", board, B(owner), {A("xp"): 5})
    ask(port, "board_post", board, B("zed"), {A("xp"): 5})  # the same key: zed keeps its place
    assert [r[1] for r in ask(port, "board_top", B("tb"), A("xp"), 10)[2]] == ["zed", "amy", "bob"]  # stored: by name
    bad = ask(port, "board_post", (B("tb2"), {**board[1], A("tiebreak"): {A("xp"): A("last")}}), B("a"), {})
    assert bad[0] == ":error" and bad[2][0] == ":InvalidArgumentError"


def test_unions_intersections_and_tiebreaks(port: PortServer) -> None:
    a, b = (B("ua"), {A("tiebreak"): A("member_desc")}), B("ub")
    assert ask(port, "add_many", a, [(B("x"), 1), (B("y"), 1), (B("z"), 3)]) == (":reply", 1, 3)
    assert ask(port, "range", a, 0, 3) == (":reply", 1, [("z", 3, 1), ("y", 1, 2), ("x", 1, 3)])  # ZREVRANGE's ties
    assert ask(port, "add_many", b, [(B("x"), 10), (B("w"), 5)]) == (":reply", 1, 2)
    assert ask(port, "union", B("uu"), [B("ua"), b]) == (":reply", 1, 4)
    assert ask(port, "range", B("uu"), 0, 2) == (":reply", 1, [("x", 11, 1), ("w", 5, 2)])
    opts = {A("weights"): [2, -1], A("aggregate"): A("max"), A("replace"): True}
    assert ask(port, "intersection", B("uu"), [B("ua"), b], opts) == (":reply", 1, 1)
    assert ask(port, "range", B("uu"), 0, 5) == (":reply", 1, [("x", 2, 1)])
    for bad in ({A("aggregate"): A("avg")}, {A("weights"): [1]}, {A("weights"): B("x")}):
        reply = ask(port, "union", B("uv"), [B("ua"), b], bad)
        assert reply[0] == ":error" and reply[2][0] == ":InvalidArgumentError", reply
    reply = ask(port, "union", B("uu"), [B("ua")])
    assert reply[0] == ":error" and reply[2][0] == ":InvalidArgumentError"  # it has entries: replace => true
    reply = ask(port, "len", (B("ua"), {A("tiebreak"): A("member")}))
    assert reply[0] == ":error" and reply[2][0] == ":SettingsMismatchError"


def test_leaderboard_removals_loads_and_drops(port: PortServer) -> None:
    board = (
        B("g"),
        {A("columns"): {A("xp"): A("desc")}, A("windows"): [A("all"), A("day")], A("accumulate"): [A("k")]},
    )
    rows = [(B("ann"), {A("xp"): 5, A("k"): 1}), (B("bob"), {A("xp"): 9}), (B("ann"), {B("k"): 2})]
    assert ask(port, "board_load", board, rows) == (":reply", 1, 2)
    assert [(r[1], r[2]) for r in ask(port, "board_top", board, A("xp"), 5, {A("window"): A("day")})[2]] == [
        ("bob", {"xp": 9}),
        ("ann", {"xp": 5, "k": 3}),
    ]
    reply = ask(port, "board_load", board, {B("cid"): {A("xp"): 1}}, {A("window"): A("all")})
    assert reply[0] == ":error" and reply[2][0] == ":InvalidArgumentError"  # the window has rows
    assert ask(port, "board_load", board, {B("cid"): {A("xp"): 1}}, {A("window"): A("all"), A("replace"): True}) == (
        ":reply",
        1,
        1,
    )
    day = ask(port, "board_windows", board, A("day"))[2][0]
    assert ask(port, "board_remove", board, B("ann")) == (":reply", 1, {"all": False, day: True})
    assert ask(port, "board_remove", board, B("bob"), {A("window"): A("day")}) == (":reply", 1, {day: True})
    assert ask(port, "board_count", board, A("xp"), {A("window"): B(day)}) == (":reply", 1, 0)
    same = (B("g"), {A("windows"): [A("all"), A("day")]})  # the board under other options: another object
    assert ask(port, "board_post", same, B("eve"), {A("xp"): 2})[2] == {"all": True, day: True}
    assert ask(port, "board_drop_window", board, B(day)) == (":reply", 1, None)
    assert ask(port, "board_windows", B("g")) == (":reply", 1, ["all"])
    assert ask(port, "board_post", same, B("dee"), {A("xp"): 4})[2] == {"all": True, day: True}
    assert ask(port, "board_windows", board) == (":reply", 1, ["all", day])  # the window is back, and listed
    assert ask(port, "board_drop_window", same, A("day")) == (":reply", 1, None)
    assert ask(port, "board_drop", B("g")) == (":reply", 1, None)
    reply = ask(port, "board_row", B("g"), B("cid"))
    assert reply[0] == ":error" and reply[2][0] == ":InvalidArgumentError"  # no such board any more
    assert ask(port, "board_count", board, A("xp")) == (":reply", 1, 0)  # created anew


@pytest.fixture
def memory_port() -> PortServer:
    return PortServer(MemoryStore())


@pytest.mark.parametrize(
    "op, args, kind",
    [
        ("rank_with_score", [B("s"), B("m"), A("best")], "InvalidArgumentError"),
        ("rank_with_score", [B("s"), A("m")], "InvalidMemberError"),
        ("percentile", [B("s"), b"m"], "InvalidMemberError"),
        ("at_percentile", [B("s"), B("0.5")], "InvalidArgumentError"),
        ("at_percentile", [B("s"), 1.5], "InvalidArgumentError"),
        ("at_percentile", [B("s"), 0.5, A("fair")], "InvalidArgumentError"),
        ("estimate_rank", [B("s"), (A("score"), B("5"))], "InvalidScoreError"),
        ("estimate_rank", [B("s"), (A("points"), 5)], "InvalidMemberError"),
        ("estimate_rank", [B("s"), (A("score"), 5), {A("ties"): A("ordinal")}], "InvalidArgumentError"),
        ("estimate_rank", [B("s"), B("m"), {A("ties"): A("dense")}], "InvalidArgumentError"),
        ("estimate_rank", [B("s"), B("m"), {A("max_error"): -1}], "InvalidArgumentError"),
        ("estimate_rank", [B("s"), B("m"), {A("max_error"): A("none")}], "InvalidArgumentError"),
        ("estimate_percentile", [B("s"), B("m"), {A("ties"): A("ordinal")}], "InvalidArgumentError"),
        ("estimate_percentile", [B("s"), B("m"), {A("max_error"): -0.5}], "InvalidArgumentError"),
        ("random_members", [B("s"), -1], "InvalidArgumentError"),
        ("pop_min", [B("s"), 1.0], "InvalidArgumentError"),
        ("pop_max", [B("s"), -2], "InvalidArgumentError"),
        ("remove_range_by_score", [B("s"), 1, A("nan")], "InvalidScoreError"),
        ("remove_range_by_rank", [B("s"), 0, 3], "InvalidArgumentError"),
        ("remove_range_by_rank", [B("s"), 1], "InvalidArgumentError"),
        ("load", [B("s"), [(B("m"), 1, 2)]], "InvalidArgumentError"),
        ("load", [B("s"), [(B("m"), B("1"))]], "InvalidScoreError"),
        ("load", [B("s"), [], {A("replace"): A("yes")}], "InvalidArgumentError"),
        ("load", [B("s"), [], {A("window"): A("all")}], "InvalidArgumentError"),
        ("gc", [B("s"), {A("min_age"): -1}], "InvalidArgumentError"),
        ("gc", [B("s"), {A("wait"): 0}], "InvalidArgumentError"),
        ("drop", [B("s"), B("extra")], "InvalidArgumentError"),
        ("add", [B("s"), B("m"), 1, A("set"), {A("only"): A("old")}], "InvalidArgumentError"),
        ("add", [B("s"), B("m"), 1, None, {A("changed"): 1}], "InvalidArgumentError"),
        ("add", [B("s"), B("m"), 1, None, {A("when"): A("gt")}], "InvalidArgumentError"),
        ("add_many", [B("s"), [], None, {A("ties"): A("dense")}], "InvalidArgumentError"),
        ("incr", [B("s"), B("m"), 1, {A("when"): A("ge")}], "InvalidArgumentError"),
        ("incr", [B("s"), B("m"), 1, {A("changed"): True}], "InvalidArgumentError"),
        ("range", [B("s"), 0, 1, A("fair")], "InvalidArgumentError"),
        ("at", [B("s"), 1, 1], "InvalidArgumentError"),
        ("around", [B("s"), B("m"), 1, 1, B("dense")], "InvalidArgumentError"),
        ("page", [B("s"), 1, None, A("fair")], "InvalidArgumentError"),
        ("range_by_score", [B("s"), 1, 0, 0, None, A("fair")], "InvalidArgumentError"),
        ("board_remove", [B("nope"), B("ann")], "InvalidArgumentError"),
        ("board_load", [B("nope"), []], "InvalidArgumentError"),
        ("board_drop", [B("nope")], "InvalidArgumentError"),
        ("board_drop_window", [B("nope"), A("all")], "InvalidArgumentError"),
    ],
)
def test_bad_arguments_of_the_newer_operations(memory_port: PortServer, op: str, args: Any, kind: str) -> None:
    reply = ask(memory_port, op, *args)
    assert reply[0] == ":error" and reply[2][0] == ":" + kind, reply


@pytest.mark.parametrize(
    "op, args, kind",
    [
        ("board_remove", [B("ann"), {A("window"): 7}], "InvalidArgumentError"),
        ("board_remove", [b"ann"], "InvalidMemberError"),
        ("board_load", [[(B("ann"),)]], "InvalidArgumentError"),
        ("board_load", [[(B("ann"), [1])]], "InvalidArgumentError"),
        ("board_load", [{B("ann"): {A("xp"): B("lots")}}], "InvalidScoreError"),
        ("board_load", [[], {A("replace"): 1}], "InvalidArgumentError"),
        ("board_load", [[], {A("ties"): A("dense")}], "InvalidArgumentError"),
        ("board_drop_window", [7], "InvalidArgumentError"),
        ("board_drop_window", [A("fortnight")], "InvalidArgumentError"),
    ],
)
def test_bad_arguments_of_board_removals_and_loads(memory_port: PortServer, op: str, args: Any, kind: str) -> None:
    board = (B("g"), {A("columns"): {A("xp"): A("desc")}})
    reply = ask(memory_port, op, board, *args)
    assert reply[0] == ":error" and reply[2][0] == ":" + kind, reply


@pytest.mark.parametrize(
    "args, kind",
    [
        ([(B("g"), {A("columns"): {A("xp"): A("up")}}), B("ann"), {}], "InvalidArgumentError"),
        ([(B("g"), {A("columns"): {A("xp"): [(A("a"),)]}}), B("ann"), {}], "InvalidArgumentError"),
        ([(B("g"), {A("colour"): A("red")}), B("ann"), {}], "InvalidArgumentError"),
        ([(B("g"), {A("columns"): {A("xp"): A("desc")}}), B("ann"), {A("xp"): [1]}], "InvalidArgumentError"),
        ([(B("g"), {A("columns"): {A("xp"): A("desc")}}), B("ann"), {A("xp"): B("lots")}], "InvalidScoreError"),
        (
            [(B("g"), {A("columns"): {A("xp"): A("desc")}}), B("ann"), {A("xp"): 1}, {A("only"): A("old")}],
            "InvalidArgumentError",
        ),
        ([(B("g"), {A("columns"): {A("xp"): A("desc")}}), b"ann", {A("xp"): 1}], "InvalidMemberError"),
        ([B("never stored"), B("ann"), {A("xp"): 1}], "InvalidArgumentError"),
    ],
)
def test_bad_board_posts_name_the_exception(port: PortServer, args: Any, kind: str) -> None:
    reply = ask(port, "board_post", *args)
    assert reply[0] == ":error" and reply[2][0] == ":" + kind, reply


def test_a_board_option_sets_how_long_post_ids_are_remembered(port: PortServer) -> None:
    board = (B("ttl"), {A("columns"): {A("xp"): A("desc")}, A("post_id_ttl"): 3600})
    assert list(ask(port, "board_post", board, B("ann"), {A("xp"): 1}, {A("post_id"): B("p1")})[2].values()) == [True]
    assert list(ask(port, "board_post", board, B("ann"), {A("xp"): 1}, {A("post_id"): B("p1")})[2].values()) == [False]
    reply = ask(port, "board_post", (B("ttl"), {A("post_id_ttl"): B("1h")}), B("ann"), {A("xp"): 1})
    assert reply[0] == ":error" and reply[2][0] == ":InvalidArgumentError", reply


def test_every_operation_is_documented() -> None:
    text = (pathlib.Path(__file__).resolve().parent.parent / "erlang" / "README.md").read_text(encoding="utf-8")
    assert [name for name in OPS if f"`{name}`" not in text] == []


@pytest.mark.parametrize(
    "frame, kind",
    [
        (b"", "InvalidArgumentError"),
        (b"not a term", "InvalidArgumentError"),
        (b"\x83h\x02", "InvalidArgumentError"),  # a truncated tuple
        (b"\x83l\xff\xff\xff\xff", "InvalidArgumentError"),  # a list claiming 4 billion elements
        (erlang.term_to_binary((A("hello"), 1)), "InvalidArgumentError"),
        (erlang.term_to_binary([A("call"), 1, A("len"), [B("s")]]), "InvalidArgumentError"),
    ],
)
def test_unreadable_requests_answer_undefined(port: PortServer, frame: bytes, kind: str) -> None:
    reply = plain(erlang.binary_to_term(port.handle(frame)))
    assert reply[:2] == (":error", None) and reply[2][0] == ":" + kind


@pytest.mark.parametrize(
    "op, args, kind",
    [
        ("nope", [B("s")], "InvalidArgumentError"),
        ("rank", [B("s")], "InvalidArgumentError"),
        ("rank", [B("s"), B("m"), A("ordinal"), 1], "InvalidArgumentError"),
        ("rank", B("not a list"), "InvalidArgumentError"),
        ("rank", [B("s"), b"charlist"], "InvalidMemberError"),
        ("rank", [B("s"), erlang.OtpErlangBinary(b"\xff")], "InvalidMemberError"),
        ("rank", [B("s"), erlang.OtpErlangBinary(b"m", bits=3)], "InvalidMemberError"),
        ("rank", [B("s"), B("m"), A("1223")], "InvalidArgumentError"),
        ("add", [B("s"), B("m"), True], "InvalidScoreError"),
        ("add", [B("s"), B("m"), 2**63], "InvalidScoreError"),
        ("add", [B("s"), B("m"), A("nan")], "InvalidScoreError"),
        ("add", [B("s"), B("m"), 1, A("double")], "InvalidArgumentError"),
        ("add_many", [B("s"), [(B("m"),)]], "InvalidArgumentError"),
        ("range", [B("s"), 0, 1.0], "InvalidArgumentError"),
        ("range", [B("s"), -1, 1], "InvalidArgumentError"),
        ("len", [(B("s"), {A("colour"): A("red")})], "InvalidArgumentError"),
        ("len", [(B("s"), {A("chunk_size"): 1})], "InvalidArgumentError"),
        ("len", [A("s")], "InvalidArgumentError"),
        ("page", [B("s"), 1, B("garbage")], "InvalidArgumentError"),
        ("topn_top", [(B("t"), {A("n"): 0})], "InvalidArgumentError"),
    ],
)
def test_bad_arguments_name_the_exception(port: PortServer, op: str, args: Any, kind: str) -> None:
    ref = Ref(A("nonode@nohost"), b"\x00\x00\x00\x01" * 3, b"\x00\x00\x00\x01")
    reply = erlang.binary_to_term(port.handle(request(op, args, ref)))
    assert plain(reply[0]) == ":error" and reply[1] == ref and plain(reply[2])[0] == ":" + kind, plain(reply)


def test_a_bug_is_an_error_reply_not_a_dead_port(port: PortServer, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: Any) -> Any:
        raise ZeroDivisionError("a bug")

    monkeypatch.setitem(OPS, "len", OPS["len"]._replace(handler=broken))
    assert ask(port, "len", B("s")) == (":error", 1, (":ZeroDivisionError", "a bug"))


class SlowStore(MemoryStore):
    """A memory store whose reads of one set's head wait until released."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()

    def _get(self, key: str) -> Any:
        if ":slow:" in key:
            assert self.release.wait(10)
        return super()._get(key)


def frames(stream: Any) -> Iterator[Any]:
    while header := stream.read(4):
        yield erlang.binary_to_term(stream.read(int.from_bytes(header, "big")))


def test_a_slow_call_does_not_block_the_others() -> None:
    store = SlowStore()
    into_r, into_w = os.pipe()
    out_r, out_w = os.pipe()
    with open(into_r, "rb") as reader, open(out_w, "wb") as writer:
        server = threading.Thread(target=PortServer(store, threads=4).serve, args=(reader, writer))
        server.start()
        with open(into_w, "wb", buffering=0) as send, open(out_r, "rb") as replies:
            for ref, name in enumerate(["slow", "fast", "fast"]):
                frame = request("len", [B(name)], ref)
                send.write(len(frame).to_bytes(4, "big") + frame)
            got = frames(replies)
            assert [plain(next(got))[1] for _ in range(2)] == [1, 2]  # the slow call (ref 0) still waits
            store.release.set()
            assert plain(next(got)) == (":reply", 0, 0)
            send.close()  # EOF: the server finishes and returns
            server.join(10)
            assert not server.is_alive()


def run_port(*args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "mdss.port", *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def test_a_real_port_answers_every_concurrent_request_whole(tmp_path: Any) -> None:
    proc = run_port("--store", f"sqlite:///{tmp_path}/port.db", "--threads", "8")
    assert proc.stdin and proc.stdout
    payload = b"".join(
        (len(f := request("incr", [B("s"), B(f"m{i % 10}"), 1], i)).to_bytes(4, "big") + f) for i in range(300)
    )
    proc.stdin.write(payload + len(bad := b"\x83junk").to_bytes(4, "big") + bad)
    proc.stdin.close()
    replies = [plain(r) for r in frames(proc.stdout)]
    assert proc.wait(30) == 0
    assert sorted(r[1] for r in replies if r[0] == ":reply") == list(range(300))
    assert [r[:2] for r in replies if r[0] == ":error"] == [(":error", None)]
    assert sorted(r[2] for r in replies if r[0] == ":reply")[-10:] == [30] * 10


def test_an_oversized_frame_stops_the_port_with_an_error() -> None:
    proc = run_port("--store", "memory://")
    out, _ = proc.communicate((MAX_FRAME + 1).to_bytes(4, "big"), timeout=30)
    assert plain(erlang.binary_to_term(out[4:]))[2][0] == ":InvalidArgumentError"
    assert proc.returncode == 0


def test_a_bad_store_url_exits_with_a_message() -> None:
    proc = run_port("--store", "nosuch://x")
    _, err = proc.communicate(b"", timeout=30)
    assert proc.returncode == 1 and b"mdss port:" in err and b"Traceback" not in err


def test_infinities_and_big_integers_round_trip(port: PortServer) -> None:
    s = B("edges")
    for member, score in [("a", 2**63 - 1), ("b", -(2**63)), ("c", -0.0), ("d", A("-inf")), ("e", 1e308)]:
        ask(port, "add", s, B(member), score)
    scores = ask(port, "scores", s, [B(m) for m in "abcdez"])[2]
    assert scores == [2**63 - 1, -(2**63), 0.0, ":-inf", 1e308, None]
    assert not any(isinstance(x, float) and math.isinf(x) for x in scores)


def test_the_mdss_port_command_serves_the_protocol(tmp_path: Any) -> None:
    command = [sys.executable, "-m", "mdss.cli", "--store", f"sqlite:///{tmp_path}/cli.db", "port", "--threads", "2"]
    frame = request("add", [B("s"), B("m"), 1])
    done = subprocess.run(command, input=len(frame).to_bytes(4, "big") + frame, capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert [plain(r) for r in frames(io.BytesIO(done.stdout))] == [(":reply", 1, True)]
