"""Conditional writes (``op="gt"|"lt"``, ``only="new"|"existing"``, ``incr(when=...)``) against a dict
model and against a real Redis' ``ZADD GT/LT/NX/XX/CH/INCR``, replies included."""

from __future__ import annotations

import math

import pytest
from depth import budget
from hypothesis import given, settings
from hypothesis import strategies as st

import mdss
from mdss import _ops

MEMBERS = st.sampled_from(["a", "b", "c", "d", "e"])
#: Exact as doubles, so that Redis' arithmetic is the model's.
SCORES = st.one_of(st.integers(-50, 50), st.sampled_from([0.5, -2.25, 1e15, math.inf, -math.inf]))
ONLY = st.sampled_from([None, "new", "existing"])


def model_apply(scores: dict, op: str, only: str | None, when: str | None, member: str, value, order: str):
    """One op on the dict model, as the ZADD documentation says: (new score or None, applied)."""
    current = scores.get(member)
    if only == "new" and current is not None or only == "existing" and current is None:
        return current, False
    if op == "incr":
        total = (0 if current is None else current) + value
        if isinstance(total, float) and math.isnan(total):
            raise mdss.InvalidScoreError("nan")
        if current is not None and when is not None and not (total > current if when == "gt" else total < current):
            return current, False
        scores[member] = total  # an increment applies whatever it adds (0 + 0 is the same int object: no `is`)
        return total, True
    elif op == "set" or current is None:
        new = value
    elif op == "gt" or op == "best" and order == "desc":
        new = value if value > current else current
    else:
        new = value if value < current else current
    if new is current:
        return current, False
    scores[member] = new
    return new, True


WRITES = st.lists(
    st.tuples(
        st.sampled_from(["set", "gt", "lt", "best", "incr"]),
        ONLY,
        st.sampled_from([None, "gt", "lt"]),
        st.lists(st.tuples(MEMBERS, SCORES), min_size=1, max_size=4),
        st.booleans(),
    ),
    max_size=25,
)


def _valid(op: str, only: str | None, when: str | None) -> bool:
    try:
        _ops.code(op, only, when)
    except mdss.InvalidArgumentError:
        return False
    return True


@pytest.mark.parametrize("order", ["desc", "asc"])
@pytest.mark.parametrize("log_limit", [0, None])
@given(writes=WRITES)
@settings(max_examples=budget(60))
def test_conditional_writes_match_the_model(order: str, log_limit: int | None, writes: list) -> None:
    board = mdss.SortedSet(mdss.open_store("memory://"), "b", order=order, chunk_size=3, log_limit=log_limit)
    model: dict = {}
    for op, only, when, pairs, changed in writes:
        if when is not None and op != "incr":
            when = None  # add() has no when: it conditions increments only
        if not _valid(op, only, when):
            with pytest.raises(mdss.InvalidArgumentError):
                if op == "incr":
                    board.incr(pairs[0][0], pairs[0][1], only=only, when=when)
                else:
                    board.add_many(pairs, op=op, only=only)
            continue
        if op == "incr" or when is not None:
            member, delta = pairs[0]
            trial = dict(model)
            try:
                new, applied = model_apply(trial, "incr", only, when, member, delta, order)
            except mdss.InvalidScoreError:
                with pytest.raises(mdss.InvalidScoreError):
                    board.incr(member, delta, only=only, when=when)
                continue
            model.update(trial)
            assert board.incr(member, delta, only=only, when=when) == (new if applied else None)
        else:
            before = dict(model)
            counted = 0
            for member, value in pairs:
                was = model.get(member)
                model_apply(model, op, only, None, member, value, order)
                now = model.get(member)
                counted += (was is None and now is not None) if not changed else (now is not None and was != now)
                del was
            del before
            assert board.add_many(pairs, op=op, only=only, changed=changed) == counted
        assert dict((e.member, e.score) for e in board) == model
    board._check()


def test_batches_carry_conditions_and_change_replies() -> None:
    board = mdss.SortedSet(mdss.open_store("memory://"), "b")
    board.add_many({"ann": 5, "bob": 1})
    with board.batch() as batch:
        board.add("ann", 3, op="gt")
        board.add("ann", 3, op="lt", changed=True)
        board.add("cid", 9, only="existing")
        board.add("dee", 2, only="new", changed=True)
        board.incr("bob", -1, when="gt")
        board.incr("bob", 4, only="existing")
    assert batch.results == [False, True, False, True, None, 5]
    assert dict((e.member, e.score) for e in board) == {"ann": 3, "bob": 5, "dee": 2}


def test_changed_counts_a_score_that_differs_numerically_as_zadd_ch_does() -> None:
    """``add("a", 3.0, changed=True)`` on a score of 3 answered True, where Redis' ``ZADD CH`` counts 0: 3 and 3.0 are
    one score (the set keeps the type it was given last, as before)."""
    board = mdss.SortedSet(mdss.open_store("memory://"), "b")
    board.add_many({"a": 3, "b": 0})
    assert board.add("a", 3.0, changed=True) is False and type(board.score("a")) is float
    assert board.add_many({"a": 3, "b": 0.0, "c": 1}, changed=True) == 1
    assert board.add("b", 0.0, op="incr", changed=True) is False and board.add("b", 2, changed=True) is True


def test_bad_combinations_are_refused_like_redis() -> None:
    board = mdss.SortedSet(mdss.open_store("memory://"), "b")
    for kwargs in ({"op": "gt", "only": "new"}, {"op": "lt", "only": "new"}, {"op": "nope"}, {"only": "old"}):
        with pytest.raises(mdss.InvalidArgumentError):
            board.add("a", 1, **kwargs)
    with pytest.raises(mdss.InvalidArgumentError):
        board.incr("a", 1, only="new", when="gt")
    with pytest.raises(mdss.InvalidArgumentError):
        board.add("a", 1, changed=1)  # type: ignore[arg-type]
    assert len(board) == 0


# -- the Redis oracle --------------------------------------------------------


@pytest.fixture(scope="module")
def redis_client(redis_url: str):
    redis = pytest.importorskip("redis")
    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


REDIS_WRITES = st.lists(
    st.tuples(
        st.sampled_from(["set", "gt", "lt", "incr"]),
        ONLY,
        st.sampled_from([None, "gt", "lt"]),
        st.lists(st.tuples(MEMBERS, st.integers(-20, 20) | st.sampled_from([0.5, -1.5])), min_size=1, max_size=4),
        st.booleans(),
    ),
    max_size=20,
)


@given(writes=REDIS_WRITES)
@settings(max_examples=budget(80))
def test_conditional_writes_match_redis_zadd(redis_client, writes: list) -> None:
    """Every reply and the final set equal Redis' own ``ZADD`` with the same flags."""
    key = "mdss-test:zadd-oracle"
    redis_client.delete(key)
    board = mdss.SortedSet(mdss.open_store("memory://"), "b", chunk_size=3)
    for op, only, when, pairs, changed in writes:
        incr = op == "incr"
        flags = {
            "nx": only == "new",
            "xx": only == "existing",
            "gt": op == "gt" or incr and when == "gt",
            "lt": op == "lt" or incr and when == "lt",
            "ch": changed and not incr,
            "incr": incr,
        }
        if incr:
            pairs = pairs[:1]
        try:
            expected = redis_client.zadd(key, dict(pairs) if not incr else {pairs[0][0]: pairs[0][1]}, **flags)
            refused = False
        except Exception:  # redis.ResponseError: GT/LT with NX
            refused = True
        if refused:
            with pytest.raises(mdss.InvalidArgumentError):
                if incr:
                    board.incr(*pairs[0], only=only, when=when)
                else:
                    board.add_many(pairs, op=op, only=only, changed=changed)
            continue
        if incr:
            got = board.incr(*pairs[0], only=only, when=None if not incr else when)
            assert got == expected, (op, only, when, pairs)
        else:
            if len(dict(pairs)) != len(pairs):
                # A repeated member: Redis keeps only the last pair of a mapping; so does the model below.
                pairs = list(dict(pairs).items())
            got = board.add_many(pairs, op=op, only=only, changed=changed)
            assert got == expected, (op, only, when, pairs, changed)
        stored = {m.decode(): s for m, s in redis_client.zrange(key, 0, -1, withscores=True)}
        assert {e.member: e.score for e in board} == stored
    board._check()
