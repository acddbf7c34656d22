"""check_pairs, with its inlined common case, agrees with check_member and check_score."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

import mdss
from mdss._order import INT_MAX, check_member, check_pairs, check_score

members = st.one_of(st.text(max_size=80), st.text(alphabet="ab", min_size=1, max_size=3), st.integers(), st.none())
scores = st.one_of(
    st.integers(min_value=-(2**64), max_value=2**64), st.floats(), st.booleans(), st.just(-0.0), st.just(INT_MAX)
)


def reference(pairs: list[tuple[object, object]]) -> dict[str, object] | type[Exception]:
    try:
        return {check_member(m): check_score(s) for m, s in pairs}
    except mdss.MdssError as exc:
        return type(exc)


@given(st.lists(st.tuples(members, scores), max_size=20))
def test_check_pairs_agrees_with_the_single_checks(pairs: list[tuple[object, object]]) -> None:
    expected = reference(pairs)
    if isinstance(expected, type):
        with pytest.raises(mdss.MdssError):
            check_pairs(pairs)
        return
    got = check_pairs(iter(pairs))
    assert got.keys() == expected.keys()
    for member, score in got.items():
        want = expected[member]
        assert type(score) is type(want)
        assert score == want
        assert math.copysign(1, score) == math.copysign(1, want)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [[("a",)], [5], [("a", 1, 2)], [None]])
def test_malformed_pairs_are_refused(bad: list[object]) -> None:
    with pytest.raises(mdss.InvalidArgumentError, match="expected \\(member, score\\) pairs"):
        check_pairs(bad)  # type: ignore[arg-type]
