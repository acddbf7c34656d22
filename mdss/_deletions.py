"""Deferred deletion: the nodes this process's commits replaced, deleted once their grace period is over.

Readers of an older head may read a replaced node for ``grace`` seconds (after that they retry on a newer head). What a
failed store call leaves is named by the head's garbage notes, so ``gc()`` finds it.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import deque

from .exceptions import StoreUnavailableError
from .stores.base import Store

#: Keys deleted (and verified) per store call.
BATCH = 1000
#: The most keys of lost commits an object keeps to delete again (beyond: ``gc(sweep=True)`` finds them).
STRANDED = 100_000


class Deletions:
    """The keys one engine replaced, each deleted once ``grace`` seconds have passed, and the keys of its lost commits
    that a failing store kept it from deleting (``stranded``)."""

    def __init__(self, store: Store, grace: float) -> None:
        self.store, self.grace = store, grace
        self._due: deque[tuple[float, list[str]]] = deque()  # (monotonic deadline, keys), deadlines in order
        self._lock = threading.Lock()
        self._stranded: list[str] = []

    def strand(self, keys: list[str]) -> None:
        with self._lock:
            self._stranded = [*self._stranded, *keys][-STRANDED:]

    def delete_stranded(self) -> None:
        """Delete what :meth:`strand` kept; a store that still fails raises :class:`StoreUnavailableError`."""
        with self._lock:
            keys, self._stranded = self._stranded, []
        try:
            for start in range(0, len(keys), BATCH):
                self.store.delete_many(keys[start : start + BATCH])
        except StoreUnavailableError:
            self.strand(keys)
            raise

    def defer(self, keys: list[str]) -> None:
        """Schedule keys (replaced nodes, their note) for deletion after the grace period; delete those due."""
        now = time.monotonic()
        due: list[str] = []
        with self._lock:
            if keys:
                self._due.append((now + self.grace, keys))
            while self._due and self._due[0][0] <= now:
                due.extend(self._due.popleft()[1])
        if due:  # a failure leaves them to gc(): their notes name them; the commit that got here has landed
            with contextlib.suppress(StoreUnavailableError):
                self.store.delete_many(due)
