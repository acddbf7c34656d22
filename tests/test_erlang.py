"""The Erlang client (erlang/) against a real Erlang VM: its EUnit suite on SQLite and Redis, its
rebar3 build, and a rank in a set `mdss demo` built, compared with `mdss rank`.

Needs ``erl`` and ``erlc`` (``apt-get install erlang-nox``; ``rebar3`` for the build test): skipped
without them on a developer's machine, a failure under ``CI=true`` (see ``conftest.unavailable``).
"""

from __future__ import annotations

import os
import pathlib
import random
import re
import shutil
import subprocess
import sys
import uuid

import pytest

from conftest import SELECTED, unavailable

ERLANG = pathlib.Path(__file__).resolve().parent.parent / "erlang"


def tool(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        unavailable("erlang", f"{name} is not installed (apt-get install erlang-nox rebar3)")
    return found  # type: ignore[return-value]


@pytest.fixture(scope="module")
def ebin(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """The client and its EUnit suite compiled with plain erlc."""
    out = tmp_path_factory.mktemp("ebin")
    sources = [ERLANG / "src" / "mdss.erl", ERLANG / "test" / "mdss_tests.erl"]
    subprocess.run([tool("erlc"), "-Wall", "+warnings_as_errors", "-o", out, *sources], check=True, timeout=120)
    return out


def erl(ebin: pathlib.Path, expression: str, store: str, **env: str) -> subprocess.CompletedProcess[str]:
    """Evaluate ``expression`` in a fresh VM with the client on its path and this Python as the port's."""
    env = {**os.environ, "MDSS_PYTHON": sys.executable, "MDSS_TEST_STORE": store, **env}
    command = [tool("erl"), "-noshell", "-pa", str(ebin), "-eval", expression]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("kind", [k for k in ("sqlite", "redis") if k in SELECTED])
def test_eunit_suite(kind: str, ebin: pathlib.Path, tmp_path: pathlib.Path, request: pytest.FixtureRequest) -> None:
    if kind == "sqlite":
        store = f"sqlite:///{tmp_path}/eunit.db"
    else:
        url = request.getfixturevalue("redis_url")
        store = f"{url}{'&' if '?' in url else '?'}namespace=erl{uuid.uuid4().hex[:12]}"
    done = erl(ebin, "halt(case eunit:test(mdss_tests, [verbose]) of ok -> 0; _ -> 1 end).", store)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "All 18 tests passed" in done.stdout, done.stdout


def test_every_client_function_is_listed_in_the_docs() -> None:
    """erlang/README.md and the guide's "From Erlang" list every exported function with all its arities."""
    source = (ERLANG / "src" / "mdss.erl").read_text(encoding="utf-8")
    arities: dict[str, list[str]] = {}
    for exported in re.findall(r"^-export\(\[(.*?)\]\)\.", source, re.M | re.S):
        for name, arity in re.findall(r"(\w+)/(\d+)", exported):
            arities.setdefault(name, []).append(arity)
    callbacks = {"init", "handle_call", "handle_cast", "handle_info", "terminate"}
    listed = [f"`{name}/{','.join(sorted(found))}`" for name, found in arities.items() if name not in callbacks]
    assert len(listed) > 50
    guide = (ERLANG.parent / "docs" / "guide.md").read_text(encoding="utf-8").split("## From Erlang", 1)[1]
    for doc in ((ERLANG / "README.md").read_text(encoding="utf-8"), guide):
        assert [f for f in listed if f not in doc] == []


def test_the_examples_in_the_docs_run(ebin: pathlib.Path, tmp_path: pathlib.Path) -> None:
    """The first example of erlang/README.md and the guide's "From Erlang" one, each in the VM against a new file."""
    readme = (ERLANG / "README.md").read_text(encoding="utf-8")
    guide = (ERLANG.parent / "docs" / "guide.md").read_text(encoding="utf-8").split("## From Erlang", 1)[1]
    examples = []
    for n, text in enumerate((readme, guide)):
        example = re.search(r"```erlang\n(\{ok, Pid\} = mdss:start_link.*?)\.\n```", text, re.S)
        assert example, "no example"
        examples.append(
            example[1].replace("sqlite:///board.db", f"sqlite:///{tmp_path}/{n}.db").replace("Pid", f"P{n}")
        )
    done = erl(ebin, ",\n".join([*examples, "halt(0)."]), "unused", ERL_CRASH_DUMP_SECONDS="0")  # no dump if wrong
    assert done.returncode == 0, done.stdout + done.stderr


def test_rebar3_builds_the_application(tmp_path: pathlib.Path) -> None:
    project = tmp_path / "erlang"
    shutil.copytree(ERLANG, project, ignore=shutil.ignore_patterns("_build"))
    env = {**os.environ, "HOME": str(tmp_path), "REBAR_CACHE_DIR": str(tmp_path / "cache")}
    done = subprocess.run(
        [tool("rebar3"), "compile"], cwd=project, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout + done.stderr
    ebin = project / "_build" / "default" / "lib" / "mdss" / "ebin"
    assert {p.name for p in ebin.iterdir()} >= {"mdss.app", "mdss.beam"}


RANKS = """
{ok, Pid} = mdss:start_link(os:getenv("MDSS_TEST_STORE"), #{timeout => 60000}),
lists:foreach(fun(Player) ->
    {ok, Rank} = mdss:rank(Pid, <<"leaderboard">>, list_to_binary(Player)),
    io:format("~s ~b~n", [Player, Rank])
end, string:tokens(os:getenv("PLAYERS"), ",")),
halt(0).
"""


@pytest.mark.parametrize("members", [20_000, pytest.param(1_000_000, marks=pytest.mark.slow)])
def test_rank_in_a_demo_set_equals_mdss_rank(members: int, ebin: pathlib.Path, tmp_path: pathlib.Path) -> None:
    store = f"sqlite:///{tmp_path}/demo.db"
    cli = [sys.executable, "-m", "mdss.cli", "--store", store]
    subprocess.run([*cli, "demo", "--members", str(members)], check=True, capture_output=True, timeout=600)
    rng = random.Random(members)
    players = [f"player-{i:07d}" for i in [0, members - 1, *rng.sample(range(members), 8)]]
    done = erl(ebin, RANKS, store, PLAYERS=",".join(players))
    assert done.returncode == 0, done.stdout + done.stderr
    from_erlang = dict(line.split() for line in done.stdout.splitlines())
    for player in players:
        said = subprocess.run([*cli, "rank", player], check=True, capture_output=True, text=True, timeout=120).stdout
        rank = re.fullmatch(rf"{player} is ranked ([\d,]+)\w\w of {members:,} with [\d,.e+-]+\n", said)
        assert rank, said
        assert int(from_erlang[player]) == int(rank[1].replace(",", "")), player
