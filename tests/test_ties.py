"""Ranks in listings follow ``ties=`` as ``rank()`` does: range, at, around, range_by_score, page and
at_percentile, with and without the update log, against a model (issue 14). Dense ranks are refused on sharded
sets."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import mdss

MEMBERS = [f"m{i:02d}" for i in range(30)]
SCORES = st.integers(0, 4) | st.sampled_from([1.0, 2.5, float("inf"), float("-inf")])


def expected(model: dict[str, float], order: str, ties: str) -> list[tuple[str, float, int]]:
    """(member, score, rank) in set order: the model's listing, ranks computed naively."""
    sign = -1 if order == "desc" else 1
    ranked = sorted(model.items(), key=lambda kv: (sign * kv[1], kv[0]))
    out = []
    for position, (member, score) in enumerate(ranked):
        better = [s for s in model.values() if sign * s < sign * score]
        rank = {"ordinal": position + 1, "competition": len(better) + 1, "dense": len(set(better)) + 1}[ties]
        out.append((member, score, rank))
    return out


@settings(max_examples=300, deadline=None)
@given(
    st.dictionaries(st.sampled_from(MEMBERS), SCORES, min_size=1),
    st.lists(st.tuples(st.sampled_from(MEMBERS), st.none() | SCORES), max_size=12),
    st.sampled_from(["desc", "asc"]),
    st.integers(2, 5),
    st.sampled_from([None, 0, 1, 2, 7]),
    st.sampled_from(["ordinal", "competition", "dense"]),
    st.sampled_from([1, 3]),
    st.data(),
)
def test_listing_ranks_follow_ties(start, later, order, chunk, log_limit, ties, shards, data) -> None:
    sharded = {"shards": shards} if shards > 1 else {}
    board = mdss.SortedSet.load(
        mdss.open_store("memory://"), "b", start, chunk_size=chunk, order=order, log_limit=log_limit, **sharded
    )
    model = dict(start)
    for member, score in later:  # logged (or committed) after the load: listings read over the log too
        if score is None:
            board.remove(member)
            model.pop(member, None)
        else:
            board.add(member, score)
            model[member] = score
    want = expected(model, order, ties)
    if not want:
        return
    if shards > 1 and ties == "dense":
        with pytest.raises(mdss.InvalidArgumentError, match="tie group spans shards"):
            board.range(0, 3, ties=ties)
        return
    as_tuples = lambda entries: [(e.member, e.score, e.rank) for e in entries]  # noqa: E731
    offset = data.draw(st.integers(0, len(want)))
    limit = data.draw(st.integers(0, 6))
    assert as_tuples(board.range(offset, limit, ties=ties)) == want[offset : offset + limit]
    rank = data.draw(st.integers(1, len(want)))
    assert as_tuples([board.at(rank, ties=ties)]) == [want[rank - 1]]
    member = data.draw(st.sampled_from(sorted(model)))
    i = [w[0] for w in want].index(member)
    assert as_tuples(board.around(member, 2, 3, ties=ties)) == want[max(i - 2, 0) : i + 4]
    assert board.rank(member, ties=ties) == want[i][2]
    low, high = sorted(data.draw(st.tuples(st.integers(0, 4), st.integers(0, 4))))
    best, worst = (high, low) if order == "desc" else (low, high)
    in_range = [w for w in want if low <= w[1] <= high]
    assert as_tuples(board.range_by_score(best, worst, offset=1, ties=ties)) == in_range[1:]
    p = data.draw(st.sampled_from([0, 0.25, 0.5, 0.99, 1]) | st.floats(0, 1))
    assert as_tuples([board.at_percentile(p, ties=ties)]) == [want[min(int(p * len(want)), len(want) - 1)]]
    competition = {e[0]: e[2] for e in expected(model, order, "competition")}
    assert board.percentile(member) == (competition[member] - 1) / len(want)
    paged, cursor = [], None
    while True:
        page = board.page(3, cursor, ties=ties)
        paged.extend(as_tuples(page.entries))
        if page.cursor is None:
            break
        cursor = page.cursor
    assert paged == want


def test_unknown_ties_are_refused_and_dense_on_sharded_sets() -> None:
    board = mdss.SortedSet(mdss.open_store("memory://"), "b")
    board.add_many({"a": 1, "b": 1})
    assert board.range(0, 2, ties="dense") == [mdss.Entry("a", 1, 1), mdss.Entry("b", 1, 1)]
    for call in (lambda: board.page(2, ties="1224"), lambda: board.rank("a", ties="Dense")):
        with pytest.raises(mdss.InvalidArgumentError, match="ties must be one of 'ordinal', 'competition', 'dense'"):
            call()
    with pytest.raises(mdss.InvalidArgumentError, match="estimates count entries"):
        board.estimate_rank("a", ties="dense")
    sharded = mdss.SortedSet(mdss.open_store("memory://"), "s", shards=2)
    sharded.add_many({"a": 1, "b": 1})
    for call in (
        lambda: sharded.rank("a", ties="dense"),
        lambda: sharded.range(0, 2, ties="dense"),
        lambda: sharded.at(1, ties="dense"),
        lambda: sharded.around("a", ties="dense"),
        lambda: sharded.page(2, ties="dense"),
        lambda: sharded.range_by_score(1, 1, ties="dense"),
        lambda: sharded.at_percentile(0.5, ties="dense"),
    ):
        with pytest.raises(mdss.InvalidArgumentError, match="tie group spans shards"):
            call()
    assert sharded.rank("b", ties="competition") == 1 and sharded.percentile("b") == 0.0


def test_percentiles_refuse_bad_arguments() -> None:
    board = mdss.SortedSet(mdss.open_store("memory://"), "b")
    assert board.at_percentile(0.5) is None and board.percentile("a") is None
    for p in (-0.1, 1.5, "0.5", True, float("nan"), None):
        with pytest.raises(mdss.InvalidArgumentError, match="p must be a number from 0 to 1"):
            board.at_percentile(p)
    with pytest.raises(mdss.InvalidMemberError):
        board.percentile("")
