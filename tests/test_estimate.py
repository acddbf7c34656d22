"""Rank estimates: the bounds always hold and stay narrower than an entry set, against a plain sorted list;
they read no entry set of the score tree; bad arguments are refused."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
from depth import examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from model import Model
from strategies import chunk_sizes, orders

import mdss
from mdss._estimate import estimate_in_tree
from mdss._tree import Leaf

UNIVERSE = 300
score_pools = st.sampled_from(
    [
        [0, 1, 2],  # ties everywhere
        list(range(-20, 21)),
        [-2.5, 0.5, 0.25, 3.0, 1e300, float("inf"), float("-inf")],
        [2**53, 2**53 + 1, 2**63 - 1, -(2**63), 10**12, 0, 0.5],
    ]
)


def exact_counts(model: Model) -> tuple[list[mdss.Entry], list[int | float]]:
    """The model's entries in set order and their scores."""
    entries = model.entries()
    return entries, [e.score for e in entries]


def competition(model: Model, scores: list[int | float], score: int | float) -> int:
    return 1 + sum(1 for s in scores if model.better(s, score))


def assert_holds(est: mdss.Estimate, exact: int, chunk: int) -> None:
    assert est.low <= exact <= est.high, (est, exact)
    assert est.low <= est.rank <= est.high, est
    assert est.high - est.low < chunk, (est, chunk)


def test_bounds_hold_for_every_member_and_score(store_factory) -> None:
    """By default a quarter of the examples on the networked stores, an eighth on DynamoDB (``depth.examples``):
    the bounds are searched on the in-process ones."""

    @settings(
        max_examples=examples(
            store_factory.kind, settings().max_examples, divisor=8 if store_factory.kind == "dynamodb" else 4
        ),
        suppress_health_check=[HealthCheck.too_slow],
        deadline=None,
    )
    @given(
        chunk=chunk_sizes,
        order=orders,
        size=st.integers(0, UNIVERSE),
        pool=score_pools,
        seed=st.integers(0, 2**32),
        writes=st.integers(0, 40),
    )
    def check(chunk, order, size, pool, seed, writes) -> None:
        rng = random.Random(seed)
        model = Model(order)
        model.scores = {f"m{k:03d}": rng.choice(pool) for k in rng.sample(range(UNIVERSE), size)}
        board = mdss.SortedSet.load(store_factory(), "b", model.scores, chunk_size=chunk, order=order)
        if writes:  # commits leave nodes anywhere between half full and full, unlike a bulk load
            changes = {f"m{rng.randrange(UNIVERSE):03d}": rng.choice(pool) for _ in range(writes)}
            gone = [f"m{rng.randrange(UNIVERSE):03d}" for _ in range(writes // 2)]
            board.add_many(changes)
            model.scores.update(changes)
            board.remove_many(gone)
            for member in gone:
                model.scores.pop(member, None)
        entries, scores = exact_counts(model)
        n = len(entries)
        for entry in entries:
            assert_holds(board.estimate_rank(entry.member), entry.rank, chunk)
            tied = competition(model, scores, entry.score)
            assert_holds(board.estimate_rank(entry.member, ties="competition"), tied, chunk)
            assert board.estimate_rank(entry.member, max_error=0) == (entry.rank,) * 3
            share = board.estimate_percentile(entry.member)
            assert share.low <= (tied - 1) / n <= share.high
        for score in [*pool, *{s + 0.5 for s in pool if abs(s) < 1e300}, -(2**63), 2**63 - 1]:
            exact = competition(model, scores, score)
            assert_holds(board.estimate_rank(score=score), exact, chunk)
            assert board.estimate_rank(score=score, max_error=0) == (exact,) * 3
            assert board.rank_of_score(score) == exact
            share = board.estimate_percentile(score=score)
            assert share.low <= (exact - 1) / max(n, 1) <= share.high
            exact_share = board.estimate_percentile(score=score, max_error=0.0)
            assert exact_share.low == exact_share.high == exact_share.value == (exact - 1) / max(n, 1)
        assert board.estimate_rank("zzz") is None and board.estimate_percentile("zzz") is None

    check()


def test_max_error_reads_the_entry_set_only_when_the_bounds_are_wider() -> None:
    board = mdss.SortedSet.load(mdss.open_store("memory://"), "b", {f"p{i:03d}": i for i in range(500)}, chunk_size=10)
    rough = board.estimate_rank(score=250.5)
    assert rough.high - rough.low == 9  # inside an entry set of 10: its first entry is known better
    assert board.estimate_rank(score=250.5, max_error=9) == rough
    assert board.estimate_rank(score=250.5, max_error=8) == (250, 250, 250)
    assert board.estimate_rank(score=499) == (1, 1, 1)  # the first entry set's first key: exact
    assert board.estimate_rank(score=10**6) == (1, 1, 1)  # before everything
    assert board.estimate_rank(score=-1).high == 501  # after everything


def test_an_estimate_reads_no_entry_set_of_the_score_tree(store) -> None:
    mdss.SortedSet.load(store, "big", {f"p{i}": i % 997 for i in range(5000)}, chunk_size=8)
    board = mdss.SortedSet(store, "big")
    board.node_keys()  # reads the manifests of both trees, no entry set
    for key, (node, _) in list(board.engines[0].cache._nodes.items()):
        assert not isinstance(node, Leaf), key
    before = store.stats.snapshot()
    for score in (0, 17, 996.5, 500, -3, 10**9):
        board.estimate_rank(score=score)
        board.estimate_percentile(score=score)
    assert store.stats.since(before)["calls"] == 12  # the head, each time
    assert not any(isinstance(node, Leaf) for node, _ in board.engines[0].cache._nodes.values())
    before = store.stats.snapshot()
    board.estimate_rank("p1234")
    assert store.stats.since(before)["calls"] == 2  # the head, the member index entry set
    before = store.stats.snapshot()
    assert board.estimate_rank(score=17.5, max_error=0) == (board.rank_of_score(17.5),) * 3
    assert store.stats.since(before)["calls"] == 3  # head, the score entry set; then the head, cached


def test_tiny_trees() -> None:
    board = mdss.SortedSet(
        mdss.open_store("memory://"), "b", chunk_size=4, log_limit=0
    )  # the tree itself is probed below
    assert board.estimate_rank(score=3) == (1, 1, 1)
    assert board.estimate_percentile(score=3) == (0.0, 0.0, 0.0)
    board.add_many({"a": 1, "b": 2, "c": 3})  # a root that is an entry set: read, exact
    assert board.estimate_rank(score=2) == (2, 2, 2)
    assert board.estimate_rank("a") == (3, 3, 3)
    assert estimate_in_tree(mdss._snapshot.snapshot(board.engine).score_tree, (-2.5,)) == (1, 1, 1)


@pytest.mark.parametrize(
    "call, error",
    [
        (lambda b: b.estimate_rank(), mdss.InvalidArgumentError),
        (lambda b: b.estimate_rank("a", score=1), mdss.InvalidArgumentError),
        (lambda b: b.estimate_rank(score=float("nan")), mdss.InvalidScoreError),
        (lambda b: b.estimate_rank(score="1"), mdss.InvalidScoreError),
        (lambda b: b.estimate_rank(7), mdss.InvalidMemberError),
        (lambda b: b.estimate_rank(""), mdss.InvalidMemberError),
        (lambda b: b.estimate_rank("a", ties="dense"), mdss.InvalidArgumentError),
        (lambda b: b.estimate_rank(score=1, ties="ordinal"), mdss.InvalidArgumentError),
        (lambda b: b.estimate_rank("a", max_error=-1), mdss.InvalidArgumentError),
        (lambda b: b.estimate_rank("a", max_error=1.5), mdss.InvalidArgumentError),
        (lambda b: b.estimate_rank("a", max_error=True), mdss.InvalidArgumentError),
        (lambda b: b.estimate_percentile(), mdss.InvalidArgumentError),
        (lambda b: b.estimate_percentile("a", score=2), mdss.InvalidArgumentError),
        (lambda b: b.estimate_percentile(score=float("nan")), mdss.InvalidScoreError),
        (lambda b: b.estimate_percentile("a", max_error=-0.1), mdss.InvalidArgumentError),
        (lambda b: b.estimate_percentile("a", max_error=float("nan")), mdss.InvalidArgumentError),
        (lambda b: b.estimate_percentile("a", max_error="0"), mdss.InvalidArgumentError),
    ],
)
def test_bad_arguments(call, error) -> None:
    board = mdss.SortedSet(mdss.open_store("memory://"), "b")
    board.add("a", 1)
    with pytest.raises(error):
        call(board)


def test_competition_ties_with_a_score_are_accepted() -> None:
    board = mdss.SortedSet.load(mdss.open_store("memory://"), "b", {"a": 1, "b": 1, "c": 0}, chunk_size=2)
    assert board.estimate_rank(score=1, ties="competition", max_error=0) == (1, 1, 1)
    assert board.estimate_rank("b", ties="competition", max_error=0) == (1, 1, 1)
    assert board.estimate_rank("b", max_error=0) == (2, 2, 2)


def test_benchmark_smoke() -> None:
    script = Path(__file__).resolve().parent.parent / "benchmarks" / "estimates.py"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(script.parent.parent), os.environ.get("PYTHONPATH", "")])}
    args = ["--members", "5000", "--samples", "100", "--chunk-size", "50"]
    out = subprocess.run([sys.executable, str(script), *args], env=env, capture_output=True, text=True, check=True)
    rows = [line for line in out.stdout.splitlines() if "| estimate_rank |" in line]
    assert len(rows) == 2 and all("| 1.00 |" in row for row in rows), out.stdout
