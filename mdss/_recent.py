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
        #: What the last fresh read took and when it began, by clock(): one tuple, so a thread never pairs one read's
        #: head with another's time.
        self._kept: tuple[Any, float] | None = None
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
        pays no more than before. An object with a bound keeps every fresh read's head, so its reads never go back to
        an older one."""
        self._ages.age = 0.0
        if not (self.bound or bound):
            self.fresh()
            return None
        return self._epoch, clock()

    def keep(self, held: Any, began: tuple[int, float]) -> None:
        """Keep ``held``, read by a read that :meth:`begin` returned ``began`` to, unless a write came since (what it
        read may be older than the write) or a read that began later kept its own."""
        epoch, taken = began
        with self._lock:
            kept = self._kept
            if epoch == self._epoch and (kept is None or taken >= kept[1]):
                self._kept = (held, taken)

    def fresh(self) -> None:
        """A read that accepts no staleness began: what was kept, here or by the sharded set this shard belongs to, is
        older than it, and no later read within the bound may go back to it."""
        if self._kept is not None:
            self.forget()  # the outer's too
        elif self._outer is not None:
            self._outer.fresh()

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
