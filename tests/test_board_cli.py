"""``mdss board``: posts and the five views through click's runner, on SQLite."""

from __future__ import annotations

import datetime as dt
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
    rows = run("rows", "ann", "bob", "zed", "xp")
    assert "ann" in rows and "zed" not in rows
    first = json.loads(run("--json", "page", "xp", "--limit", "1"))
    assert [r["owner"] for r in first["rows"]] == ["bob"]
    second = json.loads(run("--json", "page", "xp", "--limit", "1", "--cursor", first["cursor"]))
    assert [r["owner"] for r in second["rows"]] == ["ann"] and second["cursor"] is None
    back = json.loads(run("--json", "page", "xp", "--limit", "1", "--cursor", second["previous"]))
    assert [r["owner"] for r in back["rows"]] == ["bob"] and back["previous"] is None
    assert "previous: " in run("page", "xp", "--limit", "1", "--around", "ann")
    by_rank = json.loads(run("--json", "page", "xp", "--offset", "1", "--limit", "5"))
    assert [(r["rank"], r["owner"]) for r in by_rank["rows"]] == [(2, "ann")] and by_rank["cursor"] is None
    assert json.loads(run("--json", "row", "bob"))["values"]["pro"] is True
    assert json.loads(run("--json", "count", "race")) == 2
    assert json.loads(run("--json", "percentile", "ann", "xp")) == 0.5
    assert json.loads(run("--json", "percentile", "bob", "xp", "--method", "agoragames")) == 50
    assert json.loads(run("--json", "at-percentile", "xp", "0.5"))[0]["owner"] == "ann"
    assert json.loads(run("--json", "score-for-percentile", "xp", "50")) == 6.0
    assert "one field" in run("score-for-percentile", "race", "50", code=1)
    assert run("check").strip() == "ok" and json.loads(run("--json", "check", "--window", "all")) == []
    assert json.loads(run("--json", "windows", "day"))[0].startswith("day:")
    assert "ann" in run("--windows", "day", "around", "ann", "xp", "--window", "day")
    assert "must be an int or a float" in run("post", "ann", "xp=lots", code=1)
    assert "deleted" in run("--windows", "all,day", "gc", "--sweep", "--no-wait")
    assert json.loads(run("--json", "gc", "--window", "all", "--no-wait")) == 0
    assert json.loads(run("--json", "positions", "ann", "--ties", "dense")) == {"xp": 2, "race": 2}
    assert "columns must be a non-empty mapping" in run("--columns", "{}", "top", "xp", code=1)
    assert json.loads(run("--windows", "all,day", "--json", "remove", "bob", "--window", "all")) == {"all": True}
    assert [r["owner"] for r in json.loads(run("--json", "top", "xp"))] == ["ann"]
    assert json.loads(run("--json", "remove", "zed")) == {w: False for w in json.loads(run("--json", "windows"))}
    assert "dropped" in run("--windows", "all,day", "drop", "--window", "all", "--yes")
    assert [w.split(":")[0] for w in json.loads(run("--json", "windows"))] == ["day"]
    assert "nothing to drop" in run("drop", "--window", "day:2020-01-01", "--yes")
    assert "dropped" in run("drop", "--yes") and "no leaderboard 'game'" in run("windows", code=1)


def test_a_board_needs_its_columns_once(tmp_path) -> None:
    result = CliRunner().invoke(cli, ["--store", f"sqlite:///{tmp_path}/x.db", "--set", "g", "board", "top", "xp"])
    assert result.exit_code == 1 and "no leaderboard 'g'" in result.output


def test_load_reads_a_csv_of_rows(run, tmp_path) -> None:
    """``board load`` reads a header (owner, then the fields), then rows; an empty cell leaves its field out; an owner
    given twice merges as two posts; a window with rows is refused without --replace; a malformed file loads nothing."""
    path = tmp_path / "rows.csv"
    path.write_bytes("owner,xp,kills,name\nann,5,1,Änn\n\nbob,9,,\nann,,2,\n".encode())
    create = ["--columns", json.dumps({"xp": "desc"}), "--accumulate", "kills", "--windows", "all,day"]
    assert "2 rows loaded" in run(*create, "load", str(path))
    top = json.loads(run("--windows", "all,day", "--json", "top", "xp"))
    ann = {"xp": 5, "kills": 3, "name": "Änn"}
    assert [(r["owner"], r["values"]) for r in top] == [("bob", {"xp": 9}), ("ann", ann)]
    assert json.loads(run("--windows", "all,day", "--json", "top", "xp", "--window", "day")) == top
    assert "--replace" in run("load", str(path), code=1)
    assert run("--json", "load", str(path), "--window", "all", "--replace").strip() == "2"
    for text in ("owner\n", "owner,xp\nann,1,2\n", "owner,xp\nann,many\n", "", "owner,xp\n\xff\n"):
        path.write_bytes(text.encode("latin-1"))
        run("load", str(path), "--replace", code=1)
    assert len(json.loads(run("--json", "top", "xp"))) == 2


def test_load_past_its_memory_sorts_rows_on_disk(run, tmp_path) -> None:
    """With --memory-mb 1 (512 rows held), 1,500 rows (one owner twice) are sorted in --spill-dir and leave nothing
    there; a bad row at the end refuses the whole file."""
    spill, path = tmp_path / "spill", tmp_path / "rows.csv"
    spill.mkdir()
    lines = [f"p{i:04d},{i % 37},1" for i in range(1500)]
    path.write_text("owner,xp,kills\n" + "\n".join([*lines, "p0005,,4"]) + "\n")
    create = ["--columns", json.dumps({"xp": "desc"}), "--accumulate", "kills"]
    out = run(*create, "load", str(path), "--memory-mb", "1", "--spill-dir", str(spill))
    assert "1,500 rows loaded" in out and list(spill.iterdir()) == []
    assert json.loads(run("--json", "row", "p0005"))["values"] == {"xp": 5, "kills": 5}
    assert len(json.loads(run("--json", "top", "xp", "-n", "1500"))) == 1500
    path.write_text("owner,xp\n" + "\n".join([*(line.rsplit(",", 1)[0] for line in lines), "last,many"]) + "\n")
    run("load", str(path), "--replace", "--memory-mb", "1", "--spill-dir", str(spill), code=1)
    assert list(spill.iterdir()) == [] and json.loads(run("--json", "row", "p0005"))["values"]["kills"] == 5


def test_schedules_week_starts_bounds_and_next_reset(run) -> None:
    """--windows takes every kind and the names of --schedule lines; bounds and next-reset print in --tz."""
    board = ["--tz", "Europe/Paris", "--schedule", "raid=0 18 * * FRI", "--week-start", "sunday"]
    create = [*board, "--columns", '{"xp": "desc"}', "--windows", "all,hour,year,week,raid"]
    posted = json.loads(run(*create, "--json", "post", "ann", "xp=5"))
    assert {name.partition(":")[0] for name in posted} == {"all", "hour", "year", "week", "raid"}
    raid = next(name for name in posted if name.startswith("raid:"))
    assert json.loads(run(*board, "--json", "windows", "raid")) == [raid]
    assert json.loads(run(*board, "--json", "top", "xp", "--window", raid))[0]["owner"] == "ann"
    bounds = json.loads(run(*board, "--json", "bounds", "raid:2026-11-27T17:00Z"))
    assert bounds == {"start": "2026-11-27T18:00:00+01:00", "end": "2026-12-04T18:00:00+01:00"}
    assert run(*board, "bounds", "week:2026-11-22").split() == [
        "2026-11-22T00:00:00+01:00",
        "2026-11-29T00:00:00+01:00",
    ]
    assert run("--tz", "America/New_York", "bounds", "day:2026-11-01").split()[1] == "2026-11-02T00:00:00-05:00"
    start, end = run(*board, "bounds", "hour").split()
    assert dt.datetime.fromisoformat(end) == dt.datetime.fromisoformat(
        json.loads(run(*board, "--json", "next-reset", "hour"))
    )
    assert dt.datetime.fromisoformat(run(*board, "next-reset", "raid").strip()).weekday() == 4
    assert dt.datetime.fromisoformat(start).tzinfo is not None


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--schedule", "raid", "bounds", "raid"], "NAME=CRON"),
        (["--schedule", "raid=0 18 * * FRX", "bounds", "raid"], "raid"),
        (["--schedule", "day=0 0 * * *", "bounds", "day"], "name of a window kind"),
        (["--week-start", "sun", "bounds", "week"], "week-start"),
        (["--windows", "all,fortnight", "windows"], "fortnight"),
        (["bounds", "all"], "no start or end"),
        (["bounds", "week:2026-11-22"], "week:2026-W48"),
        (["next-reset", "raid"], "no schedules"),
        (["bounds", "hour:2026-11-23T17:30Z"], "not an instance"),
    ],
)
def test_bad_schedules_and_windows_are_one_line_errors(run, args, message) -> None:
    run("--columns", '{"xp": "desc"}', "post", "ann", "xp=1")
    out = run(*args, code=2 if message in ("NAME=CRON", "week-start") else 1)
    assert message in out and "Traceback" not in out


def test_load_refuses_a_malformed_csv_and_numbers_past_a_double(run, tmp_path) -> None:
    """A helper's probe: an unclosed quote loaded one owner named by the rest of the file, a header naming a field
    twice kept the last value, a row of fewer fields than the header loaded without them, ``1e400`` was stored as
    infinity, and spaces around a number made it text; the replace advice named --replace twice."""
    path = tmp_path / "rows.csv"
    create = ["--columns", json.dumps({"xp": "desc"})]
    for text, message in (
        ('owner,xp\n"ann,5\n', "line 2"),
        ("owner,xp,xp\nann,1,2\n", "'xp' more than once"),
        ("owner,xp,name\nann,1\n", "line 2: 2 fields"),
        ("owner,xp\nann,1e400\n", "line 2: out of range"),
        ("owner,xp\nann,1\n\nbob,lots\n", "line 4: field 'xp' ranks column 'xp'"),  # refused by the board
        ("owner,xp\nann,1\n,2\n", "line 3: "),
    ):
        path.write_text(text)
        assert message in run(*create, "load", str(path), code=1)
    assert "out of range" in run(*create, "post", "ann", "xp=1e400", code=1)
    path.write_text("owner,xp,kills\nann, 5 ,\t7\n")
    assert "1 rows loaded" in run(*create, "load", str(path))
    assert [r["values"] for r in json.loads(run("--json", "top", "xp"))] == [{"xp": 5, "kills": 7}]
    advice = run("load", str(path), code=1)
    assert advice.count("--replace") == 1


def test_json_output_spells_infinities_as_redis_does(run) -> None:
    """JSON has no number for an infinity: ``--json`` wrote ``Infinity``, which strict parsers refuse."""
    run("--columns", '{"xp": "desc"}', "post", "ann", "xp=inf")
    run("post", "bob", "xp=-inf")
    out = run("--json", "top", "xp")
    top = json.loads(out, parse_constant=lambda name: pytest.fail(f"{name} in {out}"))
    assert [r["values"]["xp"] for r in top] == ["inf", "-inf"]
