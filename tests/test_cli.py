"""The mdss command, through click's runner, on memory and SQLite stores."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

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


def test_every_subcommand(run) -> None:
    assert "ann: 30 (new)" in run("add", "ann", "30")
    run("add", "bob", "20")
    run("add", "cid", "20.5")
    assert "bob: 25 (updated)" in run("add", "bob", "5", "--op", "incr")
    run("add", "bob", "1", "--op", "best")
    assert run("score", "bob").strip() == "25"
    assert "ranked 1st of 3" in run("rank", "ann")
    assert "ranked 3rd of 3" in run("rank", "cid")
    top = run("top", "-n", "2")
    assert top.index("ann") < top.index("bob") and "cid" not in top
    assert "cid" in run("page", "2", "--limit", "5")
    assert "bob" in run("around", "ann", "--after", "1")
    assert run("count", "30", "21").strip() == "2"
    assert "every invariant holds" in run("check")
    assert "members: 3" in run("stats")
    assert "removed 1 of 2" in run("remove", "cid", "zed")
    assert "deleted 0" in run("gc")
    assert "dropped" in run("drop", "--yes")
    assert "(no entries)" in run("top")


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
