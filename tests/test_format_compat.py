"""Sets written by earlier versions stay readable: stored fixtures of each format version, read by today's code.

``tests/data/format/v<N>/*.json`` holds, for each fixture, every key and
value a version writing format ``N`` stored, and what every read must
answer (see ``tests/data/format/make_fixtures.py``, which made them). Each
test loads one dump into a fresh store of each selected backend, reads it
all, then writes on top of it.

Every store reads every fixture whole (ranges, iteration, scores, counts); the point reads of each member
(score, rank three ways, ``at``, ``rank_of_score``, each a few round trips) run for every member on the
in-process stores and for a sample of them on the networked ones (``depth.sample``: the first, the last
and a stride that moves with the fixture and the store), all of them under ``MDSS_DEEP=1``.
"""

from __future__ import annotations

import base64
import json
import pathlib
from typing import Any

import pytest
from depth import NETWORKED, sample

import mdss
from mdss._keys import Keyspace
from mdss._order import Order

DATA = pathlib.Path(__file__).parent / "data" / "format"
FIXTURES = sorted(DATA.glob("v*/*.json"))


def load_fixture(path: pathlib.Path) -> dict[str, Any]:
    fixture = json.loads(path.read_text(encoding="utf-8"))
    fixture["entries"] = [
        (member, float(score) if isinstance(score, str) else score, rank) for member, score, rank in fixture["entries"]
    ]
    return fixture


def restore(store: mdss.Store, fixture: dict[str, Any]) -> None:
    """Put the dumped keys into ``store``, moved from the dump's namespace to the store's."""
    old, new = Keyspace("mdss", fixture["name"]).prefix, Keyspace(store.namespace, fixture["name"]).prefix
    for key, value in fixture["store"].items():
        assert key.startswith(old), f"dumped key {key!r} is not under {old!r}"
        store.put(new + key[len(old) :], base64.b64decode(value))


def typed(entries: list[Any]) -> list[tuple[str, type, Any, int]]:
    """Entries with each score's type beside it: 1 == 1.0, but a stored int must read as an int."""
    return [(e[0], type(e[1]), e[1], e[2]) for e in entries]


def competition_ranks(entries: list[tuple[str, Any, int]]) -> dict[str, int]:
    ranks: dict[str, int] = {}
    for i, (member, score, rank) in enumerate(entries):
        tied = i > 0 and entries[i - 1][1] == score
        ranks[member] = ranks[entries[i - 1][0]] if tied else rank
    return ranks


def dense_ranks(entries: list[tuple[str, Any, int]]) -> dict[str, int]:
    """1 + the distinct scores before each entry's (entries are in set order)."""
    ranks: dict[str, int] = {}
    for i, (member, score, _) in enumerate(entries):
        ranks[member] = 1 if i == 0 else ranks[entries[i - 1][0]] + (entries[i - 1][1] != score)
    return ranks


def fixture_params(kind: str) -> list[Any]:
    return [pytest.param(p, id=f"{p.parent.name}-{p.stem}") for p in FIXTURES if load_fixture(p)["kind"] == kind]


def test_every_format_version_has_fixtures() -> None:
    """Each earlier format is read by this one."""
    assert {p.parent.name for p in FIXTURES} >= {"v1", "v2", "v3", "v4", "v5"}


#: Decoding is the same on every store (the store contract checks that bytes come back as written): each store reads
#: a third of the vectors, every vector is read on two stores at least, and on every store under MDSS_DEEP.
@pytest.mark.grid("path", size=3)
@pytest.mark.parametrize("path", fixture_params("sortedset"))
def test_sorted_set_reads_and_writes(store_factory, store, path: pathlib.Path) -> None:
    fixture = load_fixture(path)
    restore(store, fixture)
    board = mdss.SortedSet(store, fixture["name"])
    expected = fixture["entries"]
    assert (board.order, board.chunk_size, len(board)) == (fixture["order"], fixture["chunk_size"], fixture["len"])
    assert typed(board.range(0, len(expected) + 1)) == typed(expected)
    assert typed(list(board)) == typed(expected)
    competition, dense = competition_ranks(expected), dense_ranks(expected)
    # Manifests before format 3 record no distinct counts: the first dense read computes them from the subtrees.
    assert [e.rank for e in board.range(0, len(expected), ties="dense")] == [dense[m] for m, _, _ in expected]
    points = expected
    if store_factory.kind in NETWORKED:  # every member's point reads: the whole list under MDSS_DEEP
        points = sample(expected, f"{path.parent.name}-{path.stem}-{store_factory.kind}", keep=10)
    for member, score, rank in points:
        assert (board.score(member), type(board.score(member))) == (score, type(score))
        assert board.rank(member) == rank and board.rank(member, ties="competition") == competition[member]
        assert mdss.SortedSet(store, fixture["name"]).rank(member, ties="dense") == dense[member]  # nothing cached
        assert board.at(rank) == (member, score, rank)
        assert board.rank_of_score(score) == competition[member]
    assert board.scores([e[0] for e in expected]) == [e[1] for e in expected]
    if expected:
        best, worst = expected[0][1], expected[-1][1]
        assert board.count(best, worst) == len(expected)
        assert typed(board.range_by_score(best, worst)) == typed(expected)
        member, _, rank = expected[len(expected) // 2]
        assert board.around(member, 2, 2) == [mdss.Entry(*e) for e in expected[max(rank - 3, 0) : rank + 2]]
    assert board.check() == []

    model = {member: score for member, score, _ in expected}
    changes: dict[str, Any] = {"written on top ✓": 12345, "another": -7.25}
    if expected:
        changes[expected[-1][0]] = 0  # a member moves
        board.remove(expected[0][0])
        del model[expected[0][0]]
    board.add_many(changes)
    model.update(changes)
    order = Order(fixture["order"])
    ranked = sorted(model.items(), key=lambda kv: order.key(*kv))
    again = mdss.SortedSet(store, fixture["name"])  # a fresh object: nothing cached
    assert typed(again.range(0, len(ranked) + 1)) == typed([(m, s, i + 1) for i, (m, s) in enumerate(ranked)])
    dense = dense_ranks([(m, s, i + 1) for i, (m, s) in enumerate(ranked)])
    assert [again.rank(m, ties="dense") for m, _ in ranked] == [dense[m] for m, _ in ranked]
    assert again.check() == []


@pytest.mark.parametrize("path", fixture_params("topn"))
def test_top_n_reads_and_writes(store, path: pathlib.Path) -> None:
    fixture = load_fixture(path)
    restore(store, fixture)
    podium = mdss.TopN(store, fixture["name"], n=fixture["n"], order=fixture["order"])
    assert typed(podium.top()) == typed(fixture["entries"])
    entries = fixture["entries"]
    newcomer = ("!newcomer", entries[0][1])  # ties the best score, and "!" sorts before every stored member
    assert podium.post(*newcomer) is True
    expected = [(*newcomer, 1)] + [(m, s, r + 1) for m, s, r in entries[: fixture["n"] - 1]]
    assert typed(podium.top()) == typed(expected)
