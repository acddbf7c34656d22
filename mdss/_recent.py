"""Bounded staleness: reads that accept a snapshot up to ``max_staleness`` seconds old skip the head's round trip.

A read within the bound answers from the head this object's last read that accepted staleness took (its record for a
set, every shard's head bytes for a sharded set): exact for that snapshot, with no store call when the nodes it needs
are cached. The first read past the bound reads the head again and keeps it; reads that accept no staleness keep
nothing, and drop what was kept (else a later read within the bound would answer from a state older than theirs). Any
write through the object forgets what was kept, so its own
later reads see it; an epoch counter keeps a read that began before a write from keeping its older head after it.
"""

from __future__ import annotations

import threading
import time
from typing import Any

#: The clock of ages (seconds, monotonic); tests replace it.
clock = time.monotonic


class Recent:
    """The head(s) a fresh read took last and when: an engine's head, or a sharded set's every head."""

    __slots__ = ("bound", "_outer", "_kept", "_epoch", "_lock", "_ages")

    def __init__(self, bound: float = 0.0, outer: Recent | None = None) -> None:
        self.bound = bound  # the object's default max_staleness (0: every read reads the head)
        self._outer = outer  # a sharded set's, for reads of every shard: it forgets what it kept with this one
        #: What the last fresh read took, when it began and ended, by clock(), and the state it read: one tuple, so a
        #: thread never pairs one read's head with another's time.
        self._kept: tuple[Any, float, float, Any] | None = None
        self._epoch = 0  # bumped by every write: a read that began under an older epoch keeps nothing
        self._lock = threading.Lock()
        self._ages = threading.local()  # the age of the snapshot each thread's last read used

    def within(self, bound: float | None) -> Any:
        """What a read may use instead of reading the head (``bound``: the call's max_staleness, ``None`` the
        object's), or ``None``; records the age of what it returns for :meth:`age`."""
        bound = self.bound if bound is None else bound
        kept = self._kept
        if bound > 0 and kept is not None:
            age = clock() - kept[1]
            if age <= bound:
                self._ages.age = age
                return kept[0]
        return None

    def begin(self, bound: float | None) -> tuple[int, float] | None:
        """Before a fresh read of the head: the epoch and time that :meth:`keep` takes (the time the read began, so
        that an age is never under the truth); ``None`` when neither the object nor the read (``bound``) accepts
        staleness: then nothing is kept (what was, is dropped: it is older than this read), and a read of the head
        pays no more than before. An object with a bound keeps the head of every fresh read known to be the newest
        (:meth:`keep`), so its reads never go back to an older one."""
        self._ages.age = 0.0
        if not (self.bound or bound):
            self.fresh()
            return None
        return self._epoch, clock()

    def keep(self, held: Any, began: tuple[int, float], state: Any) -> None:
        """Keep ``held``, read by a read that :meth:`begin` returned ``began`` to (``state``: the head bytes it read,
        equal for equal states), unless a write came since (what it read may be older than the write). Two reads of
        the head are ordered only when one ended before the other began (the store answered the first before it was
        asked the second): the later is kept, or either where both read the same state. Where they overlapped and
        read different states, which is the newer is unknown, so neither is kept: the next read within the bound reads
        the head, and no thread's read goes back past one it made."""
        epoch, taken = began
        ended = clock()
        with self._lock:
            if epoch != self._epoch:
                return
            kept = self._kept
            if kept is not None and kept[3] == state:  # the same state: known current from the later of the two reads
                self._kept = (held, max(taken, kept[1]), ended, state)
            elif kept is None or kept[2] < taken:
                self._kept = (held, taken, ended, state)
            elif ended >= kept[1]:  # overlapping reads of different states
                self._kept = None

    def fresh(self) -> None:
        """A read that accepts no staleness began: what was kept, here or by the sharded set this shard belongs to, is
        older than it, and no later read within the bound may go back to it; nor may a read within the bound still in
        flight keep its head, which may be older too (the epoch moves on, whether or not anything was kept)."""
        self.forget()  # the outer's too

    def forget(self) -> None:
        """A write went through this object (or may have): nothing kept may be reused."""
        with self._lock:
            self._epoch += 1
            self._kept = None
        if self._outer is not None:
            self._outer.forget()

    def age(self) -> float:
        """Seconds between the head the calling thread's last read used being read and that read (0.0: fresh)."""
        return getattr(self._ages, "age", 0.0)
