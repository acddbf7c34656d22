"""``mdss board``: posts and the five views through click's runner, on SQLite."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from mdss.cli import cli


@pytest.fixture
def run(tmp_path):
    url = f"sqlite:///{tmp_path}/cli.db"

    def invoke(*args: str, code: int = 0) -> str:
        result = CliRunner().invoke(cli, ["--store", url, "--set", "game", "board", *args])
        assert result.exit_code == code, result.output
        assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
        return result.output

    return invoke


def test_posts_and_views(run) -> None:
    columns = json.dumps({"xp": "desc", "race": [["laps", "desc"], ["ms", "asc"]]})
    create = ["--columns", columns, "--accumulate", "shots", "--keep-best", "ms=min", "--windows", "all,day"]
    out = run(*create, "--json", "post", "ann", "xp=5", "shots=2", "laps=3", "ms=100", "name=Ann", "--post-id", "p1")
    assert list(json.loads(out).values()) == [True, True]
    run("--windows", "all,day", "post", "bob", "xp=7", "laps=3", "ms=90", "pro=true")
    out = run("--windows", "all,day", "--json", "post", "ann", "xp=5", "shots=2", "--post-id", "p1")
    assert list(json.loads(out).values()) == [False, False]
    top = json.loads(run("--json", "top", "xp"))
    assert [(r["rank"], r["owner"]) for r in top] == [(1, "bob"), (2, "ann")]
    assert top[1]["values"] == {"xp": 5, "shots": 2, "laps": 3, "ms": 100, "name": "Ann"}
    assert "bob" in run("top", "race")
    assert json.loads(run("--json", "positions", "ann")) == {"xp": 2, "race": 2}
    rows = run("rows", "xp", "ann", "bob", "zed")
    assert "ann" in rows and "zed" not in rows
    first = json.loads(run("--json", "page", "xp", "--limit", "1"))
    assert [r["owner"] for r in first["rows"]] == ["bob"]
    second = json.loads(run("--json", "page", "xp", "--limit", "1", "--cursor", first["cursor"]))
    assert [r["owner"] for r in second["rows"]] == ["ann"] and second["cursor"] is None
    by_rank = json.loads(run("--json", "page", "xp", "--offset", "1", "--limit", "5"))
    assert [(r["rank"], r["owner"]) for r in by_rank["rows"]] == [(2, "ann")] and by_rank["cursor"] is None
    assert json.loads(run("--json", "row", "bob"))["values"]["pro"] is True
    assert json.loads(run("--json", "windows", "day"))[0].startswith("day:")
    assert "ann" in run("--windows", "day", "around", "ann", "xp", "--window", "day")
    assert "must be an int or a float" in run("post", "ann", "xp=lots", code=1)
    assert "deleted" in run("--windows", "all,day", "gc", "--sweep", "--no-wait")
    assert json.loads(run("--json", "gc", "--window", "all", "--no-wait")) == 0
    assert json.loads(run("--json", "positions", "ann", "--ties", "dense")) == {"xp": 2, "race": 2}
    assert "columns must be a non-empty mapping" in run("--columns", "{}", "top", "xp", code=1)


def test_a_board_needs_its_columns_once(tmp_path) -> None:
    result = CliRunner().invoke(cli, ["--store", f"sqlite:///{tmp_path}/x.db", "--set", "g", "board", "top", "xp"])
    assert result.exit_code == 1 and "no leaderboard 'g'" in result.output
