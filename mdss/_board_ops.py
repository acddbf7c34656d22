"""The ops a leaderboard adds to its sets' commits, resolved by these functions (registered on each engine:
:attr:`mdss._engine.Engine.resolvers`; the core commit knows none of them)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from ._board_format import _Column
from ._board_post import new_row
from ._board_rows import as_row, check_fits, post_value, reached, row_value
from ._ops import Stale
from ._order import same_value


class Posted(NamedTuple):
    """What a post asks of one window's commit (the value of its ``"post"`` op on the owner's member)."""

    values: dict[str, Any]
    ops: dict[str, str]
    only: str | None
    stamp: float
    accumulate: tuple[str, ...]
    keep_best: Mapping[str, str]
    columns: Mapping[str, _Column]
    post_member: str | None  # the post id's member (named by a "look" op of the same commit), or None
    moment: float  # of the post id's first try
    node_bytes: int  # the window's bound: a row too heavy for it is refused


def post(trial: dict[str, Any], member: str, posted: Posted) -> bool:
    """Merge the posted values into the row the commit finds (no read before the post, no precondition): False, and
    nothing written, if the post id is counted already (recorded at the moment of its first try: one recorded at
    another moment was forgotten by the board's record, and is replaced) or ``only`` excludes the row. Refuses
    (raises) a row past the limits or a sum that overflows."""
    old = trial[member]
    if posted.post_member is not None:
        seen = trial[posted.post_member]
        if seen is not None and seen[0] == posted.moment:  # this try's post id: counted (an older one expired)
            return False
    if posted.only is not None and (old is None) != (posted.only == "new"):
        return False
    row = None if old is None else as_row(member, old)
    values = new_row(row, posted.values, posted.ops, posted.accumulate, posted.keep_best, posted.columns)
    value = row_value(values, posted.stamp, reached(posted.columns, old, values))
    check_fits([(member, value)], posted.node_bytes)
    trial[member] = value
    if posted.post_member is not None:
        trial[posted.post_member] = post_value(posted.moment)
    return True


def look(trial: dict[str, Any], member: str, value: Any) -> None:
    """Nothing: names ``member`` so that the commit looks up its value for another op (a post id for ``post``)."""


def expire(trial: dict[str, Any], member: str, cutoff: float) -> bool:
    """Remove a post id first tried before ``cutoff``, if it still is (so owners never conflict over it)."""
    value = trial[member]
    gone = value is not None and value[0] < cutoff
    if gone:
        trial[member] = None
    return gone


def expect(trial: dict[str, Any], member: str, value: Any) -> bool:
    """A precondition of the whole caller: ``member`` is still ``value`` (a row's version), else refuse."""
    if not same_value(trial[member], value):
        raise Stale(f"member {member!r} is {trial[member]!r}, not {value!r}")
    return True


def forget(trial: dict[str, Any], member: str, value: Any) -> bool:
    """Remove an expired post id entry of the board's record of them, only while it is the one read."""
    gone = same_value(trial[member], value)
    if gone:
        trial[member] = None
    return gone


RESOLVERS: dict[str, Callable[[dict[str, Any], str, Any], Any]] = {
    "expect": expect,
    "forget": forget,
    "post": post,
    "look": look,
    "expire": expire,
}
