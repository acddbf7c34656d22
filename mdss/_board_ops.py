"""The ops a leaderboard adds to its sets' commits, resolved by these functions (registered on each engine:
:attr:`mdss._engine.Engine.resolvers`; the core commit knows none of them)."""

from __future__ import annotations

from typing import Any

from ._ops import Stale
from ._order import same_value


def expect(trial: dict[str, Any], member: str, value: Any) -> bool:
    """A precondition of the whole caller: ``member`` is still ``value`` (a row's version), else refuse."""
    if not same_value(trial[member], value):
        raise Stale(f"member {member!r} is {trial[member]!r}, not {value!r}")
    return True


def forget(trial: dict[str, Any], member: str, value: Any) -> bool:
    """Remove an expired post id entry, only while it is the one read (so owners never conflict over it)."""
    gone = same_value(trial[member], value)
    if gone:
        trial[member] = None
    return gone


def group(trial: dict[str, Any], member: str, value: Any) -> bool:
    """A tie group's entry: present while its size entry (``value[0]``) counts rows, with score ``value[1]``."""
    size, slot = value
    alive = trial[size] not in (None, 0)
    if not alive:
        trial[size] = None
    trial[member] = slot if alive else None
    return alive


RESOLVERS = {"expect": expect, "forget": forget, "group": group}
