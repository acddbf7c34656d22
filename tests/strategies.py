"""Shared Hypothesis strategies: few members (so they collide) and tie-heavy scores."""

from hypothesis import strategies as st

MEMBERS = [
    "ann",
    "bob",
    "cid",
    "dee",
    "eve",
    "fay",
    "gus",
    "hal",
    "ivy",
    "jo",
    "kai",
    "lu",
    "ñandú",
    "日本",
    "a b",
    "a:b",
    "{x}",
    "z" * 60,
    "0",
    "~",
]

members = st.sampled_from(MEMBERS)
ints = st.integers(-6, 6) | st.sampled_from([2**53, 2**53 + 1, 2**63 - 1, -(2**63), 10**12])
floats = st.sampled_from([0.5, -2.5, 3.0, 1e300, float("inf"), float("-inf")])
scores = ints | floats
small_scores = st.integers(-6, 6)
#: What members carry beside their score (``add(..., data=)``): str and bytes, empty and not.
member_data = st.sampled_from(["", "red", "blue", "\u00e9t\u00e9", b"", b"\x00\xff", b"id:7"])
orders = st.sampled_from(["desc", "asc"])
chunk_sizes = st.integers(2, 8)
ops = st.sampled_from(["set", "incr", "best"])
#: Update log limits: derived (None), none (0: commits go straight into the trees), and tiny ones so that
#: merges interleave with every operation.
log_limits = st.sampled_from([None, 0, 1, 2, 7])
