"""Ranks in listings follow ``ties=`` as ``rank()`` does: range, at, around, range_by_score, page and
at_percentile, with and without the update log, against a model (issue 14). Dense ranks are refused on sharded
sets."""

from __future__ import annotations

import pytest
from depth import budget
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


@settings(max_examples=budget(300), deadline=None)
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


@pytest.mark.parametrize("order", ["desc", "asc"])
@pytest.mark.parametrize("logged", [0, 40], ids=["trees", "over-the-log"])
def test_listings_cost_the_round_trips_of_ordinal(logged: int, order: str) -> None:
    """With only the manifests cached, range, at, around and page cost the same store calls in every ties
    mode as with ``ties="ordinal"``: 1000 entries with 11 distinct scores in entry sets of 50 (tie groups of
    about 90 entries span entry sets, so a listing often starts inside a group that began in an entry set
    before it), on the tree alone and with ``logged`` updates in the update log. Every answer is the
    model's."""
    from collections import Counter

    from mdss._tree import Manifest

    start = {f"m{i:04d}": i % 11 for i in range(1000)}
    board = mdss.SortedSet.load(mdss.open_store("memory://"), "b", start, chunk_size=50, order=order, log_limit=10_000)
    board.merge()
    model = dict(start)
    for i in range(logged):  # stay in the update log: entries, removals and new scores the tree lacks
        member = f"m{(i * 37 + 5) % 1000:04d}"
        if i % 4 == 3:
            board.remove(member)
            model.pop(member)
        else:
            board.add(member, (i % 13) - 1)  # -1 and 11: scores the tree lacks
            model[member] = (i % 13) - 1
    assert len(mdss._snapshot.snapshot(board.engine).head.log) >= logged * 3 // 4  # (a few adds change nothing)
    board.scores([e.member for e in board])  # every node of both trees cached
    want = {ties: expected(model, order, ties) for ties in ("ordinal", "competition", "dense")}
    stats = board.store.stats
    as_tuples = lambda entries: [(e.member, e.score, e.rank) for e in entries]  # noqa: E731

    def manifests_only(fn):
        for key in [k for k, (node, _) in board.engines[0].cache._nodes.items() if not isinstance(node, Manifest)]:
            board.engines[0].cache.discard(key)
        before = stats.snapshot()
        found = fn()
        return stats.since(before)["calls"], found

    listed = [member for member, _, _ in want["ordinal"]]
    n = len(listed)
    calls = {  # name: (call by ties, the model's answer by ties)
        **{
            f"range {offset}": (
                lambda ties, offset=offset: as_tuples(board.range(offset, 7, ties=ties)),
                lambda ties, offset=offset: want[ties][offset : offset + 7],
            )
            for offset in range(0, n + 7, 13)
        },
        **{
            f"at {rank}": (
                lambda ties, rank=rank: as_tuples([board.at(rank, ties=ties)]),
                lambda ties, rank=rank: [want[ties][rank - 1]],
            )
            for rank in range(1, n + 1, 11)
        },
        **{
            f"around {member}": (
                lambda ties, member=member: as_tuples(board.around(member, 3, 4, ties=ties)),
                lambda ties, i=i: want[ties][max(i - 3, 0) : i + 5],
            )
            for i, member in list(enumerate(listed))[::17]
        },
    }
    trips: dict[str, Counter] = {ties: Counter() for ties in want}
    for name, (call, answer) in calls.items():
        for ties in want:
            spent, found = manifests_only(lambda: call(ties))  # noqa: B023
            assert found == answer(ties), (name, ties)
            trips[ties][spent] += 1
            if ties == "ordinal":
                ordinal = spent
            # around may cost fewer: the entry set its tie group starts in can be the one a window reaching
            # into an earlier entry set reads next
            assert spent <= ordinal if name.startswith("around") else spent == ordinal, (name, ties, spent, ordinal)
            if name.startswith(("range", "at")):
                assert spent == (2 if found else 1), (name, ties)  # the head, and the entry sets the slice spans
    for ties in want:  # every page of 7
        paged, cursor, spent = [], None, []
        while True:
            n_calls, page = manifests_only(lambda: board.page(7, cursor, ties=ties))  # noqa: B023
            spent.append(n_calls)
            paged.extend(as_tuples(page.entries))
            cursor = page.cursor
            if cursor is None:
                break
        assert paged == want[ties]
        trips[ties]["pages"] = tuple(spent)
    assert trips["competition"]["pages"] == trips["dense"]["pages"] == trips["ordinal"]["pages"], trips
