"""Percentile definitions against the library they come from: ``method="agoragames"`` and ``score_for_percentile``
give what the agoragames ``leaderboard`` library (plain Redis sorted sets) gives for the same scores, on sets and
boards, in both orders; mdss' own definition is unchanged."""

from __future__ import annotations

import itertools
from urllib.parse import urlsplit

import pytest
import redis
from depth import budget
from hypothesis import given, settings
from hypothesis import strategies as st
from leaderboard.leaderboard import Leaderboard as Peer

import mdss

PERCENTS = (0, 1, 12.5, 33.3, 50, 66.7, 99.9, 100)
_names = itertools.count()


@pytest.fixture(scope="module")
def peer_redis(redis_url: str) -> redis.Redis:
    url = urlsplit(redis_url)
    return redis.Redis(host=url.hostname, port=url.port, db=int(url.path.lstrip("/") or 0))


def _peer(client: redis.Redis, scores: dict[str, int], order: str) -> Peer:
    name = f"peer-percentiles-{next(_names)}"
    client.delete(name)
    if scores:
        client.zadd(name, scores)
    return Peer(name, connection=client, order=order)


# Distinct scores: the two orders differ only inside ties (Redis lists tied members of a descending set by member
# descending, mdss by member ascending), which the docs say.
scored = st.lists(st.integers(-1000, 1000), unique=True, max_size=24).map(
    lambda values: {f"m{i:02d}": v for i, v in enumerate(values)}
)


@settings(max_examples=budget(25))
@given(scores=scored, order=st.sampled_from(["asc", "desc"]), shards=st.sampled_from([None, 3]))
def test_sets_match_the_agoragames_library(peer_redis: redis.Redis, scores: dict[str, int], order: str, shards) -> None:
    store = mdss.open_store("memory://")
    options = {"shards": shards} if shards else {}
    s = mdss.SortedSet(store, "s", order=order, chunk_size=2, log_limit=3, **options)
    for member, score in scores.items():  # one by one: the update log and splits, not one load
        s.add(member, score)
    peer = _peer(peer_redis, scores, order)
    for member in scores:
        assert s.percentile(member, method="agoragames") == peer.percentile_for(member)
    assert s.percentile("absent", method="agoragames") is None
    for percent in PERCENTS:
        expected = peer.score_for_percentile(percent)
        assert s.score_for_percentile(percent) == (None if expected is None else pytest.approx(expected, abs=1e-9))


@settings(max_examples=budget(15))
@given(scores=scored, direction=st.sampled_from(["asc", "desc"]))
def test_boards_match_the_agoragames_library(peer_redis: redis.Redis, scores: dict[str, int], direction: str) -> None:
    board = mdss.Leaderboard(
        mdss.open_store("memory://"), "b", columns={"xp": direction, "pair": [("xp", "asc"), ("k", "desc")]}
    )
    for owner, score in scores.items():
        board.post(owner, {"xp": score, "k": 1})
    peer = _peer(peer_redis, scores, direction)
    for owner in scores:
        assert board.percentile(owner, "xp", method="agoragames") == peer.percentile_for(owner)
    for percent in PERCENTS:
        expected = peer.score_for_percentile(percent)
        found = board.score_for_percentile("xp", percent)
        assert found == (None if expected is None else pytest.approx(expected, abs=1e-9))


def test_bad_arguments_are_refused_clearly() -> None:
    s = mdss.SortedSet.load(mdss.open_store("memory://"), "s", {"a": 1, "b": 2})
    with pytest.raises(mdss.InvalidArgumentError, match="method"):
        s.percentile("a", method="nearest")
    for percent in (-1, 100.5, float("nan"), True, "50"):
        with pytest.raises(mdss.InvalidArgumentError, match="percent"):
            s.score_for_percentile(percent)
    assert s.percentile("b") == 0.0 and s.percentile("a") == 0.5  # mdss' own definition, unchanged (descending)
    board = mdss.Leaderboard(mdss.open_store("memory://"), "b", columns={"race": [("laps", "desc"), ("ms", "asc")]})
    board.post("ann", {"laps": 3, "ms": 61000})
    with pytest.raises(mdss.InvalidArgumentError, match="one field"):
        board.score_for_percentile("race", 50)
    with pytest.raises(mdss.InvalidArgumentError, match="one field"):
        board.percentile("ann", "race", method="agoragames")
    assert board.percentile("ann", "race") == 0.0
    assert (
        mdss.Leaderboard(mdss.open_store("memory://"), "e", columns={"xp": "desc"}).score_for_percentile("xp", 50)
        is None
    )


def test_score_for_percentile_between_an_infinite_score_and_a_finite_one_is_never_nan() -> None:
    """A helper's probe: -inf and 1 interpolated to -inf + 0.2 * inf: NaN, which no score is."""
    sset = mdss.SortedSet.load(mdss.open_store("memory://"), "x", {"a": float("-inf"), "b": 1, "c": 2})
    assert [sset.score_for_percentile(p) for p in (0, 10, 50, 90, 100)] == [float("-inf"), float("-inf"), 1, 1.8, 2]
