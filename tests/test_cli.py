"""The mdss command, through click's runner, on memory and SQLite stores."""

from __future__ import annotations

import sqlite3

import pytest
from click.testing import CliRunner
from wcwidth import wcswidth

import mdss
from mdss._cli_table import shown
from mdss.cli import cli


@pytest.fixture
def run(tmp_path):
    url = f"sqlite:///{tmp_path}/cli.db"

    def invoke(*args: str, input: str | None = None, code: int = 0) -> str:
        result = CliRunner().invoke(cli, ["--store", url, "--set", "board", *args], input=input)
        assert result.exit_code == code, result.output
        assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
        return result.output

    return invoke


def test_listings_rank_ties_as_asked(run) -> None:
    """top, page and around print competition and dense ranks with --ties, as rank does."""
    for member, score in (("ann", "30"), ("bob", "20"), ("cid", "20"), ("dan", "10")):
        run("add", member, score)

    def ranks(*args: str) -> list[int]:
        return [int(line.split()[0]) for line in run(*args).splitlines() if line.split() and line.split()[0].isdigit()]

    assert ranks("top", "-n", "4") == [1, 2, 3, 4]
    assert ranks("top", "-n", "4", "--ties", "competition") == [1, 2, 2, 4]
    assert ranks("top", "-n", "4", "--ties", "dense") == [1, 2, 2, 3]
    assert ranks("range", "2", "--limit", "2", "--ties", "dense") == [2, 3]
    assert ranks("around", "dan", "--before", "1", "--ties", "competition") == [2, 4]


def test_every_subcommand(run) -> None:
    assert "ann: 30 (new)" in run("add", "ann", "30")
    run("add", "bob", "20")
    run("add", "cid", "20.5")
    assert "bob: 25 (updated)" in run("add", "bob", "5", "--op", "incr")
    run("add", "bob", "1", "--op", "best")
    assert run("score", "bob").strip() == "25"
    assert run("rank", "ann") == "ann is ranked 1st of 3 with 30\n"
    assert "ranked 3rd of 3 with 20.5" in run("rank", "cid")
    assert run("rank-of-score", "21").strip() == "3" and run("rank-of-score", "-5").strip() == "4"
    assert [line.split()[1] for line in run("range-by-score", "30", "20.5").splitlines()[1:]] == ["ann", "bob", "cid"]
    assert "bob" in run("range-by-score", "30", "-1", "--offset", "1", "--limit", "1")
    assert run("percentile", "ann").strip() == "0" and "is not in set" in run("percentile", "zed", code=1)
    assert run("percentile", "ann", "--method", "agoragames").strip() == "67"  # ceil(100 * 2 / 3)
    assert run("score-for-percentile", "100").strip() == "30" and run("score-for-percentile", "0").strip() == "20.5"
    assert run("score-for-percentile", "75").strip() == "27.5"  # halfway from bob's 25 to ann's 30
    assert "0<=x<=100" in run("score-for-percentile", "101", code=2)
    assert len(run("random", "-n", "2").splitlines()) == 3
    assert "ranked 3rd of 3" in run("rank", "cid", "--ties", "dense")
    top = run("top", "-n", "2")
    assert top.index("ann") < top.index("bob") and "cid" not in top
    assert "cid" in run("range", "2", "--limit", "5")
    first = run("page", "--limit", "2")
    assert "ann" in first and "cid" not in first
    cursor = first.splitlines()[-1].removeprefix("next: ")
    assert "cid" in run("page", "--limit", "2", "--cursor", cursor) and "(last page)" in run("page", "--limit", "3")
    assert "not a page cursor" in run("page", "--cursor", "garbage", code=1)
    second = run("page", "--limit", "2", "--cursor", cursor)
    back = [line for line in second.splitlines() if line.startswith("previous: ")][0].removeprefix("previous: ")
    assert run("page", "--limit", "2", "--cursor", back).splitlines()[:3] == first.splitlines()[:3]
    assert "bob" in run("page", "--limit", "3", "--around", "bob") and "previous: " in run(
        "page", "--limit", "1", "--around", "cid"
    )
    assert "rank ~1 (from 1 to 1)" in run("estimate", "ann", "--max-error", "0")
    assert "rank ~2 " in run("estimate", "--score", "25") and "percentile ~" in run("estimate", "--score", "-3")
    assert "one of them" in run("estimate", "ann", "--score", "3", code=2) and "one of them" in run("estimate", code=2)
    assert "is not in set" in run("estimate", "zed", code=1)
    assert "bob" in run("around", "ann", "--after", "1")
    assert run("count", "30", "21").strip() == "2"
    assert "every invariant holds" in run("check")
    assert "members: 3" in run("stats")
    assert "removed 1 of 2" in run("remove", "cid", "zed")
    assert "bob" in run("pop") and "ann" in run("pop", "--max", "-n", "5") and "(no entries)" in run("pop")
    assert "deleted" in run("gc", "--no-wait")  # what the ended commands replaced (their grace never ran)
    run("add", "zed", "1")
    assert "dropped" in run("drop", "--yes") and "no set" in run("drop", "--yes")  # as DEL answers 1, then 0
    assert "(no entries)" in run("top")


def test_member_data_commands(run) -> None:
    """add --data, data, set-data and --with-data listings; bad input is a one-line error."""
    assert "ann: 5 (new)" in run("add", "ann", "5", "--data", "team red")
    run("add", "bob", "7")
    assert run("data", "ann") == "team red\n" and run("data", "bob") == "bob carries no data\n"
    assert "ann: 5 (unchanged)" in run("add", "ann", "3", "--op", "best", "--data", "lost")
    assert run("data", "ann") == "team red\n"
    assert run("set-data", "bob", "blue") == "bob: data set\n" and run("data", "bob") == "blue\n"
    assert run("set-data", "bob", "--clear") == "bob: data cleared\n"
    listed = run("top", "--with-data").splitlines()
    assert listed[0].split() == ["rank", "member", "score", "data"]
    assert [line.split() for line in listed[1:]] == [["1", "bob", "7", "-"], ["2", "ann", "5", "team", "red"]]
    assert run("range", "1", "--with-data").splitlines()[1].split()[-1] == "red"
    assert run("page", "--with-data").splitlines()[1:3] == listed[1:]
    assert run("around", "ann", "--with-data").splitlines()[1:] == listed[1:]
    assert "is not in set" in run("data", "zed", code=1) and "is not in set" in run("set-data", "zed", "x", code=1)
    assert "give TEXT, or --clear" in run("set-data", "ann", code=2)
    error = run("add", "ann", "1", "--data", "x" * 1100, code=1)
    assert error.count("\n") == 1 and "1100 bytes is over the 1024" in error


def test_add_takes_negative_scores_says_unchanged_and_refuses_out_of_range_numbers(run) -> None:
    assert "bob: -5 (new)" in run("add", "bob", "-5")
    assert "bob: -7.5 (updated)" in run("add", "bob", "-2.5", "--op", "incr")
    assert "bob: -7.5 (unchanged)" in run("add", "bob", "90", "--op", "lt")
    assert "bob: -7.5 (unchanged)" in run("add", "bob", "-7.5")
    assert "bob: -1 (updated)" in run("add", "bob", "-1", "--op", "best")
    assert "bob: -1 (unchanged)" in run("add", "bob", "-3", "--op", "best")
    assert run("count", "-1", "-10").strip() == "1"
    for text in ("1e400", "-1e400", "1e309"):
        out = run("add", "a", text, code=1)  # one line, as NaN and 2**64 are refused (it was a usage error)
        assert "out of range" in out and "Traceback" not in out and len(out.strip().splitlines()) == 1
    assert "a: inf (new)" in run("add", "a", "inf")
    assert "Traceback" not in run("add", "bob", "1", "--opp", "x", code=2)  # a misspelt option: a usage error


def test_errors_are_one_line_with_exit_code_1(run) -> None:
    assert "Error: a score must not be NaN" in run("add", "ann", "nan", code=1)
    assert "not a number" in run("add", "ann", "lots", code=2)
    assert "is not in set" in run("rank", "nobody", code=1)
    assert "Error: a member must not be empty" in run("add", "", "1", code=1)
    result = CliRunner().invoke(cli, ["--store", "bogus://x", "top"])
    assert result.exit_code == 1 and "unknown store URL" in result.output


def test_load_csv_with_header_and_bad_rows(run, tmp_path) -> None:
    good = tmp_path / "good.csv"
    good.write_text("member,score\nann,3\nbob,2.5\n\ncid,-1\n")
    assert "3 members loaded; the set holds 3" in run("load", str(good))
    more = tmp_path / "more.csv"
    more.write_text("dee,10\nann,1\n")
    assert "the set holds 4" in run("load", str(more))
    assert run("score", "ann").strip() == "1"
    bad = tmp_path / "bad.csv"
    bad.write_text("ann,1\nbob,nan\ncid\n,4\n")
    out = run("load", str(bad), code=1)
    assert "3 bad rows" in out and "line 2" in out and "line 3" in out and "line 4" in out
    assert "the set holds 2" in run("load", "-", "--replace", input="x,1\ny,2\n")
    assert "cannot read" in run("load", str(tmp_path / "missing.csv"), code=1)
    bad.write_bytes(b"ann,1\rbob,2\r")  # classic Mac line endings: Python's advice was about open()
    assert "line 1: a carriage return alone ends no line" in run("load", str(bad), code=1)


def test_a_csv_past_the_memory_budget_is_sorted_on_disk(run, tmp_path) -> None:
    """With --memory-mb 1 (4,096 pairs held), 6,000 rows spill to --spill-dir; a bad row at the end refuses the whole
    file before anything is written, and leaves nothing in the spill directory."""
    rows = [f"p{i * 7 % 6000:05d},{i % 101}" for i in range(6000)]
    good, spill = tmp_path / "big.csv", tmp_path / "spill"
    spill.mkdir()
    good.write_text("member,score\n" + "\n".join(rows) + "\np00003,500\n")
    out = run("load", str(good), "--memory-mb", "1", "--spill-dir", str(spill))
    assert "6,000 members loaded; the set holds 6,000" in out and list(spill.iterdir()) == []
    assert run("score", "p00003").strip() == "500" and "ranked 1st of 6,000" in run("rank", "p00003")
    bad = tmp_path / "bad.csv"
    bad.write_text("\n".join(rows) + "\nlast,nan\n")
    out = run("load", str(bad), "--replace", "--memory-mb", "1", "--spill-dir", str(spill), code=1)
    assert "1 bad rows" in out and "line 6001" in out and "nothing loaded" in out and list(spill.iterdir()) == []
    assert "last" not in run("top") and run("score", "p00003").strip() == "500"


def test_demo_small(tmp_path) -> None:
    url = f"sqlite:///{tmp_path}/demo.db"
    result = CliRunner().invoke(cli, ["--store", url, "demo", "--members", "2000"])
    assert result.exit_code == 0, result.output
    for section in (
        "Top 10",
        "Page at offset 1,000",
        "Score of player-",
        "Rank of player-",
        "Around player-",
        "round trip",
    ):
        assert section in result.output
    assert " of 2,000" in result.output


def test_memory_store_and_env(monkeypatch) -> None:
    monkeypatch.setenv("MDSS_STORE", "memory://")
    monkeypatch.setenv("MDSS_SET", "x")
    result = CliRunner().invoke(cli, ["add", "ann", "1"])
    assert result.exit_code == 0 and "ann: 1 (new)" in result.output


def _one_line_error(output: str, *parts: str, preamble: int = 0) -> None:
    """The output is ``preamble`` lines of progress, then one line of error: no traceback."""
    lines = output.splitlines()
    assert len(lines) == preamble + 1 and lines[-1].startswith("Error: ") and "Traceback" not in output, output
    for part in parts:
        assert part in lines[-1], output


def test_a_csv_that_is_not_utf8_is_a_one_line_error(run, tmp_path) -> None:
    latin1 = tmp_path / "latin1.csv"
    latin1.write_bytes("ann,1\nbjörn,2\n".encode("latin-1"))
    _one_line_error(run("load", str(latin1), code=1), "nothing loaded", "line 2: not UTF-8 text (byte 0xf6")
    bom = tmp_path / "bom.csv"
    bom.write_bytes("member,score\nann,1\n".encode("utf-8-sig"))  # as Excel writes it
    assert "1 member loaded" in run("load", str(bom))


def test_a_csv_field_over_the_csv_limit_is_a_one_line_error(run, tmp_path) -> None:
    huge = tmp_path / "huge.csv"
    huge.write_text("ann,1\n" + "x" * 200_000 + ",2\n")
    _one_line_error(run("load", str(huge), code=1), "nothing loaded", "line 2: field larger than field limit")
    assert "(no entries)" in run("top")


def test_only_a_clear_header_is_skipped(run, tmp_path) -> None:
    typo = tmp_path / "typo.csv"
    typo.write_text("ann,3O\nbob,2\n")
    out = run("load", str(typo), code=1)
    assert "1 bad rows" in out and "line 1: not a number: '3O' (a header? then pass --header)" in out
    assert "1 member loaded" in run("load", str(typo), "--header")
    assert run("score", "bob").strip() == "2"
    headed = tmp_path / "headed.csv"
    headed.write_text("Player Name,Total points\ncid,7\n")
    assert "1 member loaded; the set holds 2" in run("load", str(headed))
    assert "line 1: not a number: 'Total points'\n" in run("load", str(headed), "--no-header", code=1)


@pytest.mark.parametrize("query", ["foo=1", "timeout=abc", "synchronous=maybe"])
def test_bad_store_url_options_are_a_one_line_error(tmp_path, query) -> None:
    result = CliRunner().invoke(cli, ["--store", f"sqlite:///{tmp_path}/x.db?{query}", "top"])
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit)
    _one_line_error(result.output, query.split("=")[0])


@pytest.mark.parametrize(
    "error",
    [
        mdss.CorruptDataError("bad bytes", "mdss:board:n:1"),
        mdss.MissingNodeError("node gone", "mdss:board:n:2"),
        mdss.StoreUnavailableError("store down"),
        mdss.OutcomeUnknownError("reply lost"),
        mdss.ConflictError("lost the race"),
        mdss.SettingsMismatchError("other settings"),
        mdss.SiblingsError("two values"),
    ],
    ids=lambda e: type(e).__name__,
)
def test_any_mdss_error_is_a_one_line_message(run, monkeypatch, error) -> None:
    def fail(*args: object, **kwargs: object) -> None:
        raise error

    for method in ("range", "add", "check", "info", "drop", "gc", "load"):
        monkeypatch.setattr(mdss.SortedSet, method, fail)
    for command in (
        ["top"],
        ["add", "ann", "1"],
        ["check"],
        ["stats"],
        ["drop", "--yes"],
        ["gc"],
        ["load", "-", "--replace"],
    ):
        _one_line_error(run(*command, code=1, input="ann,1\n"), str(error))
    _one_line_error(run("demo", "--members", "10", code=1), str(error), preamble=1)


def test_a_corrupt_head_is_a_one_line_error(run, tmp_path) -> None:
    run("add", "ann", "1")
    with sqlite3.connect(tmp_path / "cli.db") as db:
        db.execute("UPDATE kv SET value = ? WHERE key = 'mdss:board:h'", (b"\x93garbage",))
    _one_line_error(run("top", code=1), "mdss:board:h")


def test_top_reads_while_another_process_holds_the_write_lock(run, tmp_path) -> None:
    run("add", "ann", "1")
    other = sqlite3.connect(tmp_path / "cli.db", isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    try:
        assert "ann" in run("top")
    finally:
        other.rollback()
        other.close()


def test_check_reports_garbage_apart_from_damage(run, tmp_path) -> None:
    run("add", "ann", "30")
    store = mdss.open_store(f"sqlite:///{tmp_path}/cli.db")
    board = mdss.SortedSet(store, "board")
    store.put(board.keys.node("0.00000000001" + "f" * 16), b"left by a killed writer")
    out = run("check")  # exit code 0: garbage awaiting gc is not damage
    assert "every invariant holds" in out and "1 stored node no head names await gc" in out
    assert "deleted 0" in run("gc", "--no-wait")  # no head ever named it: only a sweep finds it
    assert "deleted 1" in run("gc", "--no-wait", "--sweep")
    assert "await gc" not in run("check")


def test_merge_folds_the_log(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'm.db'}"
    board = mdss.SortedSet(mdss.open_store(url), "b", log_limit=100)
    board.add_many({"ann": 1, "bob": 2})
    run = CliRunner().invoke
    result = run(cli, ["--store", url, "--set", "b", "merge"])
    assert result.exit_code == 0 and "merged 2 log entries" in result.output, result.output
    assert "nothing to merge" in run(cli, ["--store", url, "--set", "b", "merge"]).output
    assert mdss.SortedSet(mdss.open_store(url), "b").info()["log_entries"] == 0


def test_load_makes_a_set_whose_ties_go_to_who_reached_the_score_first(run, tmp_path) -> None:
    (tmp_path / "t.csv").write_text("a,5\nb,5\nc,7\n", encoding="utf-8")
    assert "3 members loaded" in run("load", str(tmp_path / "t.csv"), "--tiebreak", "first")
    run("add", "0", "5")  # reached 5 after the load: last among the 5s, whatever its name
    assert [line.split()[1] for line in run("top").splitlines()[1:]] == ["c", "a", "b", "0"]
    assert "'last' is not one of" in run("load", str(tmp_path / "t.csv"), "--tiebreak", "last", code=2)


def test_a_stray_quote_in_a_csv_is_refused_and_a_second_demo_takes_other_settings(tmp_path, monkeypatch) -> None:
    """A helper's probe: ``"bo"b",2`` loaded the member ``bob"`` (the csv module's lenient reading), and a demo run
    with another chunk size than the last one failed on the stored settings."""
    path = tmp_path / "pairs.csv"
    path.write_text('"bo"b",2\nann,5\n')
    result = CliRunner().invoke(cli, ["--store", f"sqlite:///{tmp_path}/q.db", "load", str(path)])
    assert result.exit_code == 1 and "line 1" in result.output and "nothing loaded" in result.output
    monkeypatch.chdir(tmp_path)
    for chunk in ("100", "10"):
        result = CliRunner().invoke(cli, ["demo", "--members", "500", "--chunk-size", chunk])
        assert result.exit_code == 0, result.output


def test_tables_show_control_characters_escaped_and_align_wide_names(run, tmp_path) -> None:
    """A member or owner is whatever was stored: an escape sequence in one reached the operator's terminal as it was
    (colours, a cleared screen), a newline split a row, and a CJK name (two columns a character) pushed every column
    after it out of line."""
    url = f"sqlite:///{tmp_path}/cli.db"
    names = ["evil\x1b[2J", "名前テスト", "new\nline", "rlo\u202eevil", "bob"]
    sset = mdss.SortedSet(mdss.open_store(url), "board")
    board = mdss.Leaderboard(mdss.open_store(url), "game", columns={"xp": "desc"})
    for i, name in enumerate(names):
        sset.add(name, 10 - i, data=f"d\x07{i}")
        board.post(name, {"xp": 10 - i})
    game = CliRunner().invoke(cli, ["--store", url, "--set", "game", "board", "top", "xp"]).output
    for text in (run("top", "--with-data"), game):
        lines = text.splitlines()
        assert len(lines) == 6 and not {"\x1b", "\u202e", "\x07", "\r"} & set(text), text
        assert "evil\\x1b[2J" in text and "new\\nline" in text and "rlo\\u202eevil" in text
        last = [wcswidth(line[: line.rindex("  ") + 2]) for line in lines]
        assert len(set(last)) == 1, text  # the last column starts at one screen column on every row
    assert shown("lit\\x1b") == "lit\\\\x1b" != shown("lit\x1b")  # a backslash spelt out is no escape
