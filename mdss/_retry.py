"""One retry policy for every loop that waits out a transient condition.

A lost race for an object, a store that is briefly unreachable, an SQLite file locked by another process: each is
retried with *full jitter* exponential backoff (a uniform sleep between 0 and a ceiling that doubles per attempt, up to
``cap``) within a **time budget**, not a fixed count. A count of quick retries runs out on a store whose conditional
write takes milliseconds (a strongly consistent Riak PUT); a time budget does not care how slow one attempt is.

>>> policy = Backoff(budget=1.0, base=0.0, max_attempts=3)
>>> list(policy.attempts())
[0, 1, 2]
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator

import attrs


@attrs.frozen
class Backoff:
    """Jittered exponential backoff within a budget of ``budget`` seconds. ``base`` is the first ceiling (seconds); a
    caller that measures what one attempt costs passes it to :meth:`ceiling`. ``max_attempts`` optionally bounds the
    count too."""

    budget: float = 10.0
    base: float = 0.001
    cap: float = 0.25
    max_attempts: int | None = None

    def __attrs_post_init__(self) -> None:
        if not (self.budget >= 0 and self.base >= 0 and self.cap >= 0):
            raise ValueError(f"a backoff needs non-negative times, got {self!r}")

    def delay(self, attempt: int) -> float:
        """The sleep before attempt ``attempt`` (none before attempt 0), uniform up to :meth:`ceiling`."""
        return random.uniform(0, self.ceiling(attempt))

    def ceiling(self, attempt: int, latency: float = 0.0) -> float:
        """The longest sleep before attempt ``attempt``: ``base``, or ``latency`` (one attempt's measured time) if
        longer, doubled per attempt up to ``cap``: rivals spread over a few attempt-lengths, whatever the store."""
        return min(self.cap, max(self.base, latency) * 2 ** min(attempt - 1, 30))

    def attempts(self) -> Iterator[int]:
        """Attempt numbers 0, 1, 2, ..., sleeping before each but the first, until the budget is spent. The loop body
        ``break``s or ``return``s on success; falling out of the ``for`` means the budget ran out."""
        deadline = time.monotonic() + self.budget
        attempt = 0
        while True:
            yield attempt
            attempt += 1
            if self.max_attempts is not None and attempt >= self.max_attempts:
                return
            pause = self.delay(attempt)
            if time.monotonic() + pause > deadline:
                return
            time.sleep(pause)


#: Contention on a head: long enough that a healthy store never fails a write (losing every race for 10 s to writers
#: committing back to back does happen with millisecond calls). A commit that keeps losing reads the head every
#: :meth:`Backoff.ceiling` until it stops moving (``mdss._commit._quiet``); other users sleep :meth:`Backoff.delay`.
COMMITS = Backoff(budget=30.0, base=0.001, cap=0.1)
#: A store call that failed transiently (a dropped connection, a locked file).
STORE_CALLS = Backoff(budget=5.0, base=0.02, cap=1.0)
