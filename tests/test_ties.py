"""Ranks in listings follow ``ties=`` as ``rank()`` does: range, at, around, range_by_score and page, with and
without the update log, against a model (issue 14)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import mdss

MEMBERS = [f"m{i:02d}" for i in range(30)]


def expected(model: dict[str, int], order: str, ties: str) -> list[tuple[str, int, int]]:
    """(member, score, rank) in set order: the model's listing."""
    sign = -1 if order == "desc" else 1
    ranked = sorted(model.items(), key=lambda kv: (sign * kv[1], kv[0]))
    out = []
    for position, (member, score) in enumerate(ranked):
        better = sum(1 for s in model.values() if sign * s < sign * score)
        out.append((member, score, position + 1 if ties == "ordinal" else better + 1))
    return out


@settings(max_examples=150, deadline=None)
@given(
    st.dictionaries(st.sampled_from(MEMBERS), st.integers(0, 4), min_size=1),
    st.lists(st.tuples(st.sampled_from(MEMBERS), st.none() | st.integers(0, 4)), max_size=12),
    st.sampled_from(["desc", "asc"]),
    st.integers(2, 4),
    st.sampled_from([None, 0, 1, 7]),
    st.sampled_from(["ordinal", "competition"]),
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
    paged, cursor = [], None
    while True:
        page = board.page(3, cursor, ties=ties)
        paged.extend(as_tuples(page.entries))
        if page.cursor is None:
            break
        cursor = page.cursor
    assert paged == want


def test_dense_and_unknown_ties_are_refused() -> None:
    board = mdss.SortedSet(mdss.open_store("memory://"), "b")
    board.add_many({"a": 1, "b": 1})
    for call in (lambda: board.range(0, 2, ties="dense"), lambda: board.page(2, ties="1224")):
        with pytest.raises(mdss.InvalidArgumentError, match="ties"):
            call()
