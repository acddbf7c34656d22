"""Write operations and their conditions, resolved at commit time against the member's current score.

A write names an *op* and, optionally, a condition on the member's presence (``only``) and, for ``incr``, on the
direction of the change (``when``), with the meanings of Redis' ``ZADD``:

===================  ==============================================================================================
``op="set"``         the score becomes ``value``
``op="incr"``        the score becomes current + ``value`` (absent: 0 + value)
``op="best"``        the better of current and ``value`` in the set's order
``op="gt"``          ``value`` if the member is absent or ``value`` > current (numerically, any order: ``ZADD GT``)
``op="lt"``          ``value`` if the member is absent or ``value`` < current
``only="new"``       applies only to an absent member (``ZADD NX``)
``only="existing"``  applies only to a present member (``ZADD XX``)
``when="gt"|"lt"``   ``incr`` only if the score rises / falls (``ZADD INCR GT|LT``); an absent member is added
===================  ==============================================================================================

The op travels to the commit as one short code (``"gt"``, ``"set:new"``, ``"incr:gt:existing"``), so that the commit,
which re-reads every member's current score on each attempt, resolves it against the state it publishes: a condition is
never judged on a stale read.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ._order import Score, add_scores, check_choice
from .exceptions import ConflictError, InvalidArgumentError

#: The ops a caller may name (``remove`` has its own methods).
OPS = ("set", "incr", "best", "gt", "lt")
ONLY = ("new", "existing")
WHEN = ("gt", "lt")


def code(op: Any = "set", only: Any = None, when: Any = None) -> str:
    """Validate an op and its conditions into the code a commit resolves.

    >>> code("gt", only="existing"), code("incr", when="lt"), code()
    ('gt:existing', 'incr:lt', 'set')
    """
    check_choice(op, OPS, "op")
    parts = [op]
    if when is not None:
        check_choice(when, WHEN, "when")
        if op != "incr":
            raise InvalidArgumentError(f'when={when!r} conditions an increment: it needs op="incr", got op={op!r}')
        parts.append(when)
    if only is not None:
        check_choice(only, ONLY, "only")
        if only == "new" and (op in ("gt", "lt") or when is not None):
            # Redis refuses GT/LT with NX: a new member has no score to compare with, so the pair is a mistake.
            raise InvalidArgumentError(f'only="new" cannot be combined with a comparison ({"/".join(parts)})')
        parts.append(only)
    return ":".join(parts)


_PARSED: dict[str, tuple[str, str | None, str | None]] = {}


def _parse(text: str) -> tuple[str, str | None, str | None]:
    found = _PARSED.get(text)
    if found is None:
        parts = text.split(":")
        only = parts.pop() if parts[-1] in ONLY else None
        when = parts.pop() if len(parts) > 1 and parts[-1] in WHEN else None
        found = _PARSED[text] = (parts[0], when, only)
    return found


def resolve(
    text: str, current: Score | None, value: Score, better: Callable[[Score, Score], Score]
) -> tuple[Score | None, bool]:
    """The member's score after op ``text`` (``None``: absent), and whether the op applied.

    An op whose condition fails leaves ``current`` and did not apply (Redis answers ``nil`` to such a ``ZADD INCR``);
    ``best``, ``gt`` and ``lt`` that keep a better current score did not apply either. ``better`` is the set's order
    (``max`` for ``desc``). Raises :class:`InvalidScoreError` for an increment that overflows or gives NaN.

    >>> resolve("gt", 5, 3, max), resolve("gt", None, 3, max), resolve("set:existing", None, 3, max)
    ((5, False), (3, True), (None, False))
    >>> resolve("incr:lt", 5, 2, max), resolve("incr:lt", 5, -2, max)
    ((5, False), (3, True))
    """
    op, when, only = _parse(text)
    if only is not None and (current is None) != (only == "new"):
        return current, False
    if current is None:
        return (value if op != "incr" else add_scores(0, value)), True
    if op == "set":
        return value, True
    if op == "incr":
        total = add_scores(current, value)
        if when is not None and not (total > current if when == "gt" else total < current):
            return current, False
        return total, True
    if op == "best":  # only a strictly better value applies (an equal one keeps the current score, and its data)
        wins = value > current if better is max else value < current
        return (value, True) if wins else (current, False)
    if op == "gt":
        return (value, True) if value > current else (current, False)
    return (value, True) if value < current else (current, False)  # lt


class Stale(ConflictError):
    """An ``expect`` precondition of a caller's ops failed at commit time; none of its ops applied."""


#: The op that sets a present member's data and leaves its score (``SortedSet.set_data``).
DATA = "data"
