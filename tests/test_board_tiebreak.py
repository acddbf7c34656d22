"""``Leaderboard(..., tiebreak={"xp": "first"})``: a column's ties go by who reached the key first.

The stateful model test (test_leaderboard.py) draws the columns that go by first, for every view; test_every_store
there runs one such column on each backend. These are the examples and the edges."""

from __future__ import annotations

import json
import threading

import pytest
from click.testing import CliRunner

import erlang
import mdss
from mdss._order import columns_first, valid_tiebreak
from mdss._port_terms import _board_options
from mdss.cli import cli


def ranked(board: mdss.Leaderboard, column: str, ties: str = "ordinal", **options) -> list[tuple[int, str]]:
    return [(r.rank, r.owner) for r in board.top(column, 100, ties=ties, **options)]


def test_ties_go_to_who_reached_the_key_first_and_only_a_new_key_moves_it(store) -> None:
    """The issue's case: a later post that does not change the key keeps the owner's place (the timestamp workaround
    gets it wrong); a change of key, even back to the same value, moves it; competition and dense ranks still tie;
    the other column still breaks ties by owner."""
    board = mdss.Leaderboard(
        store, "first", columns={"xp": "desc", "kills": "desc"}, tiebreak={"xp": "first"}, chunk_size=2, log_limit=3
    )
    for owner in ("zed", "amy", "bob", "cat"):
        board.post(owner, {"xp": 10, "kills": 1})
    board.post("dan", {"xp": 12, "kills": 1})
    assert ranked(board, "xp") == [(1, "dan"), (2, "zed"), (3, "amy"), (4, "bob"), (5, "cat")]
    assert ranked(board, "kills") == [(1, "amy"), (2, "bob"), (3, "cat"), (4, "dan"), (5, "zed")]  # by owner
    board.post("zed", {"xp": 10, "kills": 3})  # the key of xp is unchanged: zed keeps its place
    board.post("amy", {"xp": 11})
    board.post("amy", {"xp": 10})  # back to 10: reached it last
    assert ranked(board, "xp") == [(1, "dan"), (2, "zed"), (3, "bob"), (4, "cat"), (5, "amy")]
    assert ranked(board, "xp", "competition") == [(1, "dan"), (2, "zed"), (2, "bob"), (2, "cat"), (2, "amy")]
    assert ranked(board, "xp", "dense") == [(1, "dan"), (2, "zed"), (2, "bob"), (2, "cat"), (2, "amy")]
    assert board.positions("amy") == {"xp": 5, "kills": 2}  # zed has 3 kills
    assert [r.owner for r in board.around("bob", "xp", before=1, after=1)] == ["zed", "bob", "cat"]
    assert [(r.rank, r.owner) for r in board.rows(["cat", "zed"], "xp")] == [(2, "zed"), (4, "cat")]
    page = board.page("xp", limit=2)
    rest = board.page("xp", limit=3, cursor=page.next)
    assert [r.owner for r in page.rows + rest.rows] == ["dan", "zed", "bob", "cat", "amy"]
    assert [r.owner for r in board.page("xp", limit=2, cursor=rest.previous).rows] == ["dan", "zed"]
    assert board.percentile("zed", "xp", method="agoragames") == 60  # by owner it would be last: 0
    board.remove("zed")
    board.post("zed", {"xp": 10})  # a new row: reached its key now
    assert ranked(board, "xp") == [(1, "dan"), (2, "bob"), (3, "cat"), (4, "amy"), (5, "zed")]
    assert board.check() == []
    again = mdss.Leaderboard.open(store, "first")  # the columns that go by first are stored with the board
    assert again.columns["xp"].first and not again.columns["kills"].first
    assert ranked(again, "xp") == ranked(board, "xp")


def test_a_composite_column_by_first() -> None:
    """Ties of a whole composite key (laps, then time) go by first; a better time is a new key."""
    board = mdss.Leaderboard(
        mdss.open_store("memory://"),
        "race",
        columns={"race": [("laps", "desc"), ("ms", "asc")]},
        tiebreak="first",  # every column
        keep_best={"ms": "min"},
        chunk_size=3,
    )
    for owner, laps, ms in [("c", 3, 90), ("b", 3, 90), ("a", 3, 95), ("d", 3, 90), ("e", 4, 99)]:
        board.post(owner, {"laps": laps, "ms": ms})
    assert [r.owner for r in board.top("race")] == ["e", "c", "b", "d", "a"]
    board.post("c", {"laps": 3, "ms": 91})  # not better: keep_best leaves 90, and c its place
    board.post("a", {"laps": 3, "ms": 90})  # a new key: ties the others, reached last
    assert [r.owner for r in board.top("race")] == ["e", "c", "b", "d", "a"]
    assert board.check() == []


@pytest.mark.parametrize("spilled", [False, True])
def test_a_load_reaches_its_rows_at_once_before_later_posts(monkeypatch, tmp_path, spilled) -> None:
    """A load's rows are reached all at once (ties among them by owner), before any post after it; spilled too."""
    if spilled:
        monkeypatch.setattr(mdss._board_load, "ROW_BYTES", (1 << 20) // 2)
        for module in (mdss._spill, mdss._board_load):
            monkeypatch.setattr(module, "BLOCK", 3)
    board = mdss.Leaderboard(
        mdss.open_store(f"sqlite:///{tmp_path}/l.db"), "l", columns={"xp": "desc"}, tiebreak="first", chunk_size=2
    )
    rows = [("zed", {"xp": 5}), ("amy", {"xp": 5}), ("bob", {"xp": 7}), ("cat", {"xp": 5})]
    board.load(rows, memory_bytes=(1 << 20) if spilled else mdss._load.MEMORY_BYTES, spill_dir=str(tmp_path))
    board.post("abe", {"xp": 5})
    board.post("zed", {"xp": 5})  # unchanged: keeps its loaded place
    assert [r.owner for r in board.top("xp")] == ["bob", "amy", "cat", "zed", "abe"]
    assert board.check() == []


def test_posts_acknowledged_before_another_began_rank_first(store) -> None:
    """Threads post the same key to one column, while merges run: an owner whose post returned before another's
    began ranks above it; every owner has its own number and check() holds."""
    board = mdss.Leaderboard(store, "race", columns={"xp": "desc"}, tiebreak="first", chunk_size=3, log_limit=4)
    spans: dict[str, tuple[float, float]] = {}
    clock = threading.Lock()
    counter = iter(range(10**6))

    def work(t: int) -> None:
        for k in range(5):
            owner = f"t{t}-{k}"
            with clock:
                began = next(counter)
            board.post(owner, {"xp": 1})
            with clock:
                spans[owner] = (began, next(counter))

    pool = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    order = [r.owner for r in board.top("xp", 100)]
    assert sorted(order) == sorted(spans)
    at = {owner: i for i, owner in enumerate(order)}
    for a, (_, ended) in spans.items():
        for b, (began, _) in spans.items():
            if ended < began:
                assert at[a] < at[b], (a, b)
    assert board.check() == []


def test_bad_tiebreaks_are_refused_and_a_stored_board_keeps_its_own() -> None:
    store = mdss.open_store("memory://")
    for bad, match in [
        ({"nope": "first"}, "does not have"),
        ({"xp": "last"}, "tiebreak"),
        ("member", "tiebreak"),
        (["xp"], "tiebreak"),
    ]:
        with pytest.raises(mdss.InvalidArgumentError, match=match):
            mdss.Leaderboard(store, "bad", columns={"xp": "desc"}, tiebreak=bad)
    mdss.Leaderboard(store, "g", columns={"xp": "desc"}, tiebreak={"xp": "first"})
    with pytest.raises(mdss.SettingsMismatchError, match="tiebreak"):
        mdss.Leaderboard(store, "g", columns={"xp": "desc"})
    plain = mdss.Leaderboard(store, "h", columns={"xp": "desc"}, tiebreak={"xp": "owner"})
    assert not plain.columns["xp"].first
    mdss.Leaderboard(store, "h", columns={"xp": "desc"})  # "owner" everywhere is the default: the same settings
    with pytest.raises(mdss.InvalidArgumentError, match="as stored"):
        mdss.Leaderboard.open(store, "g", tiebreak={"xp": "owner"})


def test_a_window_tiebreak_is_checked_where_it_is_read() -> None:
    """A window head names its columns that go by first; a malformed one reads as damaged, never as another order;
    a set cannot be made with one."""
    assert valid_tiebreak(columns_first({"00:": 22, "0a:": 41})) and valid_tiebreak("first")
    for bad in ("first:", "first:00:x", "first:0g:22", "first:00:2", "first:00:22,00:22", "first:00:+22", 7):
        assert not valid_tiebreak(bad), bad
    with pytest.raises(mdss.InvalidArgumentError, match="tiebreak"):
        mdss.SortedSet(mdss.open_store("memory://"), "s", tiebreak="first:00:22")


def test_the_command_line_and_the_port_options(tmp_path) -> None:
    url = f"sqlite:///{tmp_path}/cli.db"

    def run(*args: str) -> str:
        result = CliRunner().invoke(cli, ["--store", url, "--set", "game", "board", *args])
        assert result.exit_code == 0, result.output
        return result.output

    create = ["--columns", json.dumps({"xp": "desc"}), "--tiebreak", "xp=first"]
    for owner in ("zed", "amy"):
        run(*create, "post", owner, "xp=5")
    assert [r["owner"] for r in json.loads(run("--json", "top", "xp"))] == ["zed", "amy"]
    result = CliRunner().invoke(cli, ["--store", url, "--set", "game", "board", "--tiebreak", "xp=first", "top", "xp"])
    assert result.exit_code != 0 and "--columns" in result.output
    atom = erlang.OtpErlangAtom
    options = {atom("columns"): {atom("xp"): atom("desc")}, atom("tiebreak"): {atom("xp"): atom("first")}}
    assert _board_options(options)["tiebreak"] == {"xp": "first"}
    with pytest.raises(mdss.InvalidArgumentError, match="tiebreak"):
        _board_options({atom("tiebreak"): {atom("xp"): atom("last")}})
