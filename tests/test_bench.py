"""A quick smoke run of ``mdss bench`` on every store with an anchor: the figures the issue names exist."""

from __future__ import annotations

import json
import sys

import pytest
from click.testing import CliRunner

import mdss.cli
from mdss.cli import cli

FIGURES = {
    "load_per_s",
    "update_per_s",
    "rank_p50_us",
    "rank_p99_us",
    "page_p50_us",
    "top_p50_us",
    "round_trips_per_rank",
}


@pytest.mark.parametrize("kind", ["memory", "sqlite", "redis"])
def test_bench_smoke(kind, tmp_path, request) -> None:
    url = {"memory": "memory://", "sqlite": f"sqlite:///{tmp_path}/bench.db"}.get(kind)
    if kind == "redis":
        url = request.getfixturevalue("redis_url")
    out = tmp_path / "bench.json"
    result = CliRunner().invoke(
        cli,
        ["bench", "--store", url, "--members", "2000", "--samples", "50", "--singles", "300", "--batch-size", "500"]
        + ["--board-owners", "300", "--board-posts", "60", "--json", str(out)],
    )
    assert result.exit_code == 0, result.output
    figures = json.loads(out.read_text())
    assert figures["members"] == 2000 and figures["store"] == kind
    anchors = {
        "memory": ["sortedcontainers"],
        "sqlite": ["sortedcontainers", "sql_count"],
        "redis": ["sortedcontainers", "redis_zset"],
    }[kind]
    for system in ["mdss", *anchors]:
        assert set(figures[system]) >= FIGURES, system
    assert {"around_p50_us", "bytes_per_member", "single_update_per_s", "bytes_written_per_update"} <= set(
        figures["mdss"]
    )
    assert {"rank_full_log_p50_us", "page_full_log_p50_us", "around_full_log_p50_us"} <= set(figures["mdss"])
    assert figures["mdss"]["round_trips_per_rank"] <= 3
    assert "mdss / sortedcontainers" in result.output
    board = figures["leaderboard"]
    board_anchors = {"memory": ["sortedcontainers"], "sqlite": ["sortedcontainers", "sql"]}.get(
        kind, ["sortedcontainers", "redis_commands"]
    )
    assert set(board) == {"owners", "posts", "friends", "samples", "mdss", *board_anchors}
    for system in ["mdss", *board_anchors]:
        assert {"posts_per_s", "rows_p50_us", "rows_p99_us", "round_trips_per_post"} <= set(board[system]), system
    assert board["mdss"]["round_trips_per_rows"] <= 3  # everything cached after the warm-up: head, rows, nothing else
    assert "leaderboard: 300 owners, 60 posts" in result.output and "mdss / sortedcontainers: posts/s" in result.output


def test_bench_compares_shard_counts_side_by_side(tmp_path) -> None:
    """``--shards 1,3`` measures each count on the same workload: rank and page p50 against the first count,
    and round trips, entry sets and bytes per read with only the manifests cached (issue 13)."""
    out = tmp_path / "bench.json"
    args = ["bench", "--members", "3000", "--samples", "40", "--singles", "200", "--batch-size", "500"]
    board = ["--board-owners", "300", "--board-posts", "60"]  # the leaderboard row at smoke size: not judged here
    result = CliRunner().invoke(cli, [*args, *board, "--chunk-size", "50", "--shards", "1,3", "--json", str(out)])
    assert result.exit_code == 0, result.output
    figures = json.loads(out.read_text())
    assert figures["shards"] == [1, 3]
    for system in ("mdss", "mdss S=3"):
        mine = figures[system]
        assert mine["round_trips_per_rank"] == mine["round_trips_per_page"] == 1  # every node cached: the heads
        assert mine["round_trips_per_rank_manifests_only"] <= 3 and mine["round_trips_per_page_manifests_only"] <= 3
        assert mine["entry_sets_per_page_manifests_only"] >= 1 and mine["bytes_per_page_manifests_only"] > 0
    assert (
        figures["mdss S=3"]["entry_sets_per_page_manifests_only"]
        > figures["mdss"]["entry_sets_per_page_manifests_only"]
    )
    assert "mdss S=3 / S=1: rank p50 " in result.output and "mdss S=3 / sortedcontainers" not in result.output
    for bad in ("0", "1,x", "2000"):
        refused = CliRunner().invoke(cli, [*args, "--shards", bad])
        assert refused.exit_code == 2 and "shard count" in refused.output


def test_bench_outside_a_source_checkout_is_a_clear_error(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(mdss.cli, "BENCHMARKS", tmp_path / "benchmarks")  # as in a wheel: no benchmarks/
    result = CliRunner().invoke(cli, ["bench", "--members", "200"])
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit)
    assert "mdss bench runs from a source checkout" in result.output and result.output.count("\n") == 1


def test_bench_without_its_extra_is_a_clear_error(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "sortedcontainers", None)  # import fails as if not installed
    result = CliRunner().invoke(cli, ["bench", "--members", "200"])
    assert result.exit_code == 1 and "the benchmark needs sortedcontainers: pip install 'mdss[bench]'" in result.output
