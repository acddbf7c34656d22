"""How many shards a set needs: from a target post rate and the store's per-key write limit.

Every post writes its shard's head, and a head is one key: on DynamoDB a key takes about 1,000 write units a second,
and a write costs one unit per started KB of the item (a head is 1-3 KB). Under a per-key cap, 32 writer processes
writing heads by compare-and-set, as on DynamoDB, made **0.27-0.33 posts per capped write unit** of a head
(``benchmarks/capped_writers.py --cas``, docs/performance.md, "Posts under a per-key cap"): the rest of a head's units
go to lost races (which DynamoDB charges), the head's size, seals and merges. A set of S shards takes S times that.
"""

from __future__ import annotations

import math

from ._codec import MAX_SHARDS
from ._order import check_positive
from .exceptions import InvalidArgumentError

#: Posts per write unit a head's key takes, measured under a per-key cap with 32 writer processes.
POSTS_PER_HEAD_UNIT = 0.3


def shards_for(
    posts_per_second: float,
    *,
    key_write_units: float = 1000.0,
    posts_per_unit: float = POSTS_PER_HEAD_UNIT,
    headroom: float = 1.5,
) -> int:
    """The shard count for ``posts_per_second`` when each key takes ``key_write_units`` write units a second
    (DynamoDB: about 1,000), with ``headroom`` for bursts: ``ceil(posts * headroom / (units * posts_per_unit))``.

    >>> shards_for(200), shards_for(2_000), shards_for(20_000)
    (1, 10, 100)
    """
    for what, value in (
        ("posts_per_second", posts_per_second),
        ("key_write_units", key_write_units),
        ("posts_per_unit", posts_per_unit),
        ("headroom", headroom),
    ):
        check_positive(value, what)
    if headroom < 1:
        raise InvalidArgumentError(f"headroom must be at least 1, got {headroom!r}")
    shards = max(1, math.ceil(posts_per_second * headroom / (key_write_units * posts_per_unit)))
    if shards > MAX_SHARDS:
        raise InvalidArgumentError(
            f"{posts_per_second:g} posts/s need {shards} shards, more than a set takes ({MAX_SHARDS}): "
            "split the set, or raise the store's per-key limit"
        )
    return shards
