"""How deep the suite searches: the default run samples, ``MDSS_DEEP=1`` enumerates everything.

The default run (the README's test command) covers every store and every fault class, but where a test
enumerates a large space (a fault at every store call of a commit, every layout of a set under every store)
it visits a deterministic sample of it: different points for different tests and stores, so that the run as
a whole still reaches most of the space. ``MDSS_DEEP=1`` (``tox -e deep``) visits all of it and loads
Hypothesis' ``deep`` profile (long searches) unless ``HYPOTHESIS_PROFILE`` names another one.

What the default run samples, each in full under ``MDSS_DEEP=1``:

- faults at a stride of a commit's store calls (:func:`sample`), and the ``grid`` marker's Latin-square
  row of a parameter grid per store (``conftest.py``);
- the Hypothesis budgets that tests name themselves (:func:`budget`: ten times as many deep), and those on
  the networked stores (:func:`examples`; an eighth on DynamoDB in the slowest
  searches, test_estimate.py's bounds among them), and the operations of test_concurrency.py's process
  race on DynamoDB (200 per writer, 400 deep);
- test_format_compat.py's per-member point reads on the networked stores (a :func:`sample` of each
  fixture's members; every fixture is still read whole and written on every store);
- faults at every store call of a leaderboard post in test_leaderboard.py's gc tests, on the networked
  stores (:func:`call_points`: the first, a stride, and the last);
- test_log_bounds.py's tiny-bounds machine with failures: 10 examples (20 deep);
- test_log_faults.py's enumerator: about 12 store calls of each operation and mode (:func:`sample`), not every one;
- loops beside racing writers run until an event count, not a fixed time: the reply-cut chaos of
  test_lost_replies.py (5 cuts, 14 deep), the reader of test_concurrency.py's process race and the
  collectors of test_reliability.py's skewed-clock gc (until the writers finish, the collectors at most
  6 s as before; at least 6 s deep).
"""

from __future__ import annotations

import itertools
import os
import zlib
from collections.abc import Iterator, Sequence
from typing import TypeVar

T = TypeVar("T")

#: Set by ``MDSS_DEEP=1`` (or true/yes): every enumeration in full, and Hypothesis' ``deep`` profile.
DEEP = os.environ.get("MDSS_DEEP", "").lower() in ("1", "true", "yes")


def offset(salt: str, modulus: int) -> int:
    """A stable offset in ``range(modulus)`` for ``salt`` (crc32: the same in every process and run)."""
    return zlib.crc32(salt.encode()) % modulus


def sample(points: Sequence[T], salt: str, keep: int = 8) -> list[T]:
    """``points`` in full under ``MDSS_DEEP``; by default about ``keep`` of them: the first, the last, and
    a stride through the rest starting at an offset derived from ``salt``.

    The first and last points are kept because the edges of an operation (its first read, its final
    compare-and-set) are where a fault most often shows; the offset moves the stride between tests, so
    that a family of tests (each operation, each fault mode) hits different points between them.
    """
    points = list(points)
    if DEEP or len(points) <= max(keep, 2):
        return points
    inner = points[1:-1]
    stride = -(-len(inner) // max(keep - 2, 1))  # ceiling: at most keep - 2 inner points
    return [points[0], *inner[offset(salt, stride) :: stride], points[-1]]


#: Stores where every store call is a network round trip to a server the tests started (or a real node).
NETWORKED = ("redis", "redis-cluster", "dynamodb", "riak")


def examples(kind: str, loaded: int, divisor: int = 4) -> int:
    """A Hypothesis example budget for a search on store ``kind``: the loaded profile's ``loaded`` on the
    in-process stores (memory, SQLite, the Riak fake), where the algorithm is searched; ``loaded //
    divisor`` (at least 3) on networked ones, where each step costs round trips and what is searched is
    the store's part (its conditional writes, its errors); the full budget everywhere under ``MDSS_DEEP``."""
    if DEEP or kind not in NETWORKED:
        return loaded
    return max(loaded // divisor, 3)


#: How many times its own budget a Hypothesis search that names one runs under ``MDSS_DEEP`` (:func:`budget`).
DEEP_SCALE = 10


def budget(default: int) -> int:
    """A Hypothesis example budget that a test names itself: ``default``, or :data:`DEEP_SCALE` times it under
    ``MDSS_DEEP`` (the ``deep`` profile's ``max_examples`` does not reach a test that names its own)."""
    return default * DEEP_SCALE if DEEP else default


def call_points(kind: str, salt: str, stride: int = 3) -> Iterator[int]:
    """The store calls (1, 2, 3, ...) at which a loop fails an operation in turn, until it passes the
    operation's last call (whose number the loop learns only then). On the in-process stores and under
    ``MDSS_DEEP`` every call; by default on networked stores the first and then every ``stride``-th from an
    offset derived from ``salt``: the loop then visits the last call itself if the stride skipped it."""
    if DEEP or kind not in NETWORKED:
        yield from itertools.count(1)
        return
    yield 1
    yield from itertools.count(2 + offset(salt, stride), stride)
