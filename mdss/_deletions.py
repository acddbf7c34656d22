"""Deferred deletion: the nodes this process's commits replaced, deleted once their grace period is over.

Readers of an older head may read a replaced node for ``grace`` seconds (after that they retry on a newer head). On a
busy set that would keep every node replaced in the last ``grace`` seconds: a merge replaces about every entry set of
both trees, a seal the log's manifest, so a board posting 1,500 times a second kept 13 times its live data. A busy
set's garbage is therefore deleted sooner: what a commit replaced is due once :data:`MIN_GRACE` has passed and a later
commit of this object has replaced something too; only the last replacements before a lull wait the whole grace. What a
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
#: Seconds replaced nodes are kept at least, however busy the set: longer than a read of one snapshot takes (a page, a
#: rank); a reader that still meets a deleted node retries on a newer head.
MIN_GRACE = 2.0


class Deletions:
    """The keys one engine replaced, each deleted once its grace has passed (see the module), and the keys of its lost
    commits that a failing store kept it from deleting (``stranded``)."""

    def __init__(self, store: Store, grace: float) -> None:
        self.store, self.grace = store, grace
        self._due: deque[tuple[float, list[str]]] = deque()  # (monotonic time replaced, keys), oldest first
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
        """Schedule keys (replaced nodes, their note) for deletion; delete those due: replaced ``grace`` seconds ago, or
        :data:`MIN_GRACE` seconds ago when ``keys`` come after them (a busy set)."""
        now = time.monotonic()
        due: list[str] = []
        with self._lock:
            soon = min(MIN_GRACE, self.grace) if keys else self.grace
            while self._due and self._due[0][0] + soon <= now:
                due.extend(self._due.popleft()[1])
            if keys:
                self._due.append((now, keys))
        if due:  # a failure leaves them to gc(): their notes name them; the commit that got here has landed
            with contextlib.suppress(StoreUnavailableError):
                self.store.delete_many(due)
