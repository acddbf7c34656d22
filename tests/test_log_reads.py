"""Slices over the update log, exactly as if it were merged: every offset and length, deep trees of tiny
chunks, and a snapshot that other writes in this process overtook (its view undoes them on the fly)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

import mdss

MEMBERS = [f"m{i:02d}" for i in range(40)]
WRITES = st.lists(st.tuples(st.sampled_from(MEMBERS), st.none() | st.integers(-3, 3)), max_size=25)


def listing(model: dict[str, int], order: str) -> tuple[list[str], list[int]]:
    sign = -1 if order == "desc" else 1
    ranked = sorted(model.items(), key=lambda kv: (sign * kv[1], kv[0]))
    return [m for m, _ in ranked], [s for _, s in ranked]


def apply(board: mdss.SortedSet, model: dict[str, int], writes: list) -> None:
    for member, score in writes:
        if score is None:
            board.remove(member)
            model.pop(member, None)
        else:
            board.add(member, score)
            model[member] = score


def every_slice_matches(ranking, model: dict[str, int], order: str) -> None:
    members, scores = listing(model, order)
    assert ranking.count == len(members)
    for start in range(len(members) + 2):
        for length in (1, 2, 3, 5, 11, len(members)):
            got = ranking.slice(start, start + length)
            assert got == (members[start : start + length], scores[start : start + length]), (start, length)


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(st.sampled_from(MEMBERS), st.integers(-3, 3)),
    WRITES,
    WRITES,
    st.sampled_from(["desc", "asc"]),
    st.integers(2, 4),
)
def test_slices_over_the_log_match_the_model(start, writes, later, order, chunk) -> None:
    store = mdss.open_store("memory://")
    board = mdss.SortedSet.load(store, "b", start, chunk_size=chunk, order=order, log_limit=10_000)  # no merges
    model = dict(start)
    apply(board, model, writes)
    before, then = board._snapshot(), dict(model)
    apply(board, model, later)  # extends the overlay that ``before`` reads
    every_slice_matches(before.ranking, then, order)
    every_slice_matches(board._snapshot().ranking, model, order)
