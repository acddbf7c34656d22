"""One retry policy for every loop that waits out a transient condition.

A lost race for a head, a store that is briefly unreachable, an SQLite file
locked by another process: each is retried with *full jitter* exponential
backoff (a uniform sleep between 0 and a ceiling that doubles per attempt, up
to ``cap``) within a **time budget**, not a fixed count. A count of quick
retries runs out on a store whose conditional write takes milliseconds (a
strongly consistent Riak PUT); a time budget does not care how slow one
attempt is.

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
    """Jittered exponential backoff within a budget of ``budget`` seconds.

    ``base`` is the first ceiling (seconds); callers that know what one
    attempt costs (a measured compare-and-set latency) pass a ``base`` near
    it with :meth:`scaled`. ``max_attempts`` optionally bounds the count too.
    """

    budget: float = 10.0
    base: float = 0.001
    cap: float = 0.25
    max_attempts: int | None = None

    def __attrs_post_init__(self) -> None:
        if not (self.budget >= 0 and self.base >= 0 and self.cap >= 0):
            raise ValueError(f"a backoff needs non-negative times, got {self!r}")

    def scaled(self, latency: float) -> Backoff:
        """This policy with its first ceiling raised to ``latency`` (one attempt's measured duration)."""
        return attrs.evolve(self, base=max(self.base, latency))

    def delay(self, attempt: int) -> float:
        """The sleep before attempt number ``attempt`` (1-based: there is no sleep before attempt 0)."""
        return random.uniform(0, min(self.cap, self.base * 2 ** min(attempt - 1, 30)))

    def attempts(self) -> Iterator[int]:
        """Attempt numbers 0, 1, 2, ...; sleeps before each but the first; stops when the budget is spent.

        The loop body runs the attempt and ``break``s or ``return``s on
        success; falling out of the ``for`` means the budget ran out.
        """
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


#: Contention on a head: long enough that a healthy store never fails a write.
COMMITS = Backoff(budget=10.0, base=0.001, cap=0.25)
#: A store call that failed transiently (a dropped connection, a locked file).
STORE_CALLS = Backoff(budget=5.0, base=0.02, cap=1.0)
