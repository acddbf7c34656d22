"""Percentile definitions: mdss' own, and those of the Redis leaderboard libraries (the agoragames ``leaderboard``).

mdss' ``percentile`` is the share of members ranked strictly better (0.0 for the best); the agoragames library's
``percentile_for`` runs the other way, in whole percents, and its ``score_for_percentile`` interpolates between the
scores either side of a position. Users moving from that library keep its numbers with ``method="agoragames"`` and
``score_for_percentile``; these functions are its arithmetic, step for step, on mdss' positions (set order, best
first), so that the results match it wherever the two orders agree (they differ only inside ties: Redis lists tied
members of a descending set by member descending, mdss by member ascending).
"""

from __future__ import annotations

import math
from typing import Any

from .exceptions import InvalidArgumentError, shown

#: The definitions ``percentile(..., method=)`` takes.
METHODS = ("better", "agoragames")


def check_percent(percent: Any) -> float:
    """A percentile in percents, from 0 to 100 (``score_for_percentile``'s scale, as the agoragames library's)."""
    if not isinstance(percent, (int, float)) or isinstance(percent, bool) or not 0 <= percent <= 100:
        raise InvalidArgumentError(f"percent must be a number from 0 to 100, got {shown(percent)}")
    return percent


def agoragames(position: int, size: int, order: str) -> int:
    """The agoragames library's ``percentile_for`` of the member at 0-based ``position`` in set order (best first) of
    a set of ``size`` in ``order``: the percent of members below it in Redis' descending order, rounded up, and 100
    minus that in an ascending set (100 for the best there, where a descending set's best gets ``ceil(100 (n-1)/n)``).
    """
    reverse = position if order == "desc" else size - 1 - position  # its ZREVRANK
    percent = math.ceil(float(size - reverse - 1) / float(size) * 100)
    return 100 - percent if order == "asc" else percent


def positions(size: int, percent: float, order: str) -> tuple[int, int, float]:
    """Where the agoragames library's ``score_for_percentile(percent)`` reads a set of ``size`` (non-empty) in
    ``order``: the 0-based positions in set order of the two scores it interpolates between (ascending score order's
    floor and ceiling of ``(size - 1) * percent / 100``, 100 minus the percent in an ascending set) and the fraction of
    the way from the first to the second."""
    if order == "asc":
        percent = 100 - percent
    index = (size - 1) * (percent / 100.0)
    low, high = math.floor(index), math.ceil(index)
    if order == "desc":  # ascending score order is the set's order reversed
        return size - 1 - low, size - 1 - high, index - low
    return low, high, index - low


def interpolated(low: Any, high: Any, fraction: float) -> Any:
    """The score ``fraction`` of the way from ``low`` to ``high`` (``low`` itself at 0, as the library returns it).
    Where the way is infinite (an infinite score at one end or both), the nearer end (``high`` from halfway): never NaN,
    which no score is; between finite scores whose difference overflows, the same weighted without it.

    >>> interpolated(1, 3, 0.5), interpolated(-math.inf, 2, 0.25), interpolated(5, math.inf, 0.02)
    (2.0, -inf, 5)
    >>> interpolated(-1e308, 1e308, 0.5)
    0.0
    """
    if fraction == 0 or low == high:
        return low
    if math.isinf(low) or math.isinf(high):
        return low if fraction < 0.5 else high
    found = low + fraction * (high - low)
    return found if math.isfinite(found) else low * (1 - fraction) + high * fraction
