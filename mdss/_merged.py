"""A sharded set's keys merged across its shards, kept by a process that reads the set often.

An exact rank over ``S`` shards sums ``S`` counts, and a page selects across
``S`` shards: with every node cached that is ``S`` bisections (a cache miss
or two each) per rank, and windows of ``S`` shards sorted per page. A process
that reads one set again and again keeps instead all its keys, as of the
heads it read last, in one ``SortedList``: a rank is one bisection, a page
one slice, whatever ``S``.

The keys follow the heads by the update log's entries, never by reading
trees: a shard whose head moved from sequence number ``a`` to ``b`` in the
same incarnation changed by exactly entries ``a`` to ``b - 1``, whatever
merges folded meanwhile (a merge moves entries into the trees, it does not
change the set). The entries come from this process's overlays
(:func:`mdss._log.logged`); writes whose numbers no entry has (a batch folded
straight into the trees, a load, a drop) are not there, and the keys are
dropped, to be made again from the cached entry sets once the set is read
often enough. Every read checks the kept keys' count against its heads'.

The keys are made from the cached entry sets, and dropped as soon as a node
leaves the node cache other than by a commit that replaced it: they stand
for cached entry sets, and ``cache_bytes`` bounds them as it bounds those.
"""

from __future__ import annotations

import threading
from itertools import chain
from typing import Any

from sortedcontainers import SortedList

from . import _log
from ._cache import NodeCache
from ._gather import Gather, Part, _Uncached, layout

#: Reads before the keys are merged: at least ``BUILD_READS``, and one per ``READS_PER_KEY`` entries (making
#: them sorts every key: about as long as that many reads save). Each time they are dropped for a write
#: they cannot follow, the next making waits twice as long (up to ``2 ** MAX_BACKOFF`` times), so that a
#: process beside a writer of batches does not make them over and over; keys that lasted as long as they
#: waited start again at once.
BUILD_READS = 8
READS_PER_KEY = 250
MAX_BACKOFF = 10


class Merged:
    """One set's merged keys (``None`` until made) and the shards' parts they were brought up to."""

    __slots__ = ("keys", "parts", "lock", "reads", "cache", "dropped", "least", "per_key", "backoff", "most", "used")

    def __init__(self, cache: NodeCache) -> None:
        self.keys: SortedList | None = None
        self.parts: list[Part] = []
        self.lock = threading.Lock()  # a read holds it while it uses the keys; others read without them
        self.reads = 0  # reads since the keys were dropped
        self.cache, self.dropped = cache, cache.dropped  # the cache's drops when the keys were made
        self.least, self.per_key = BUILD_READS, READS_PER_KEY  # when to make them (tests make them at once)
        self.backoff, self.most = 0, MAX_BACKOFF  # the next making waits 2 ** backoff times as long
        self.used = 0  # reads that used the keys since they were made

    def _wait(self, count: int) -> int:
        return max(self.least, count // self.per_key) << self.backoff

    def drop(self) -> None:
        """Forget the keys; the next ones wait longer unless these lasted (see :data:`MAX_BACKOFF`)."""
        if self.keys is not None:
            lasted = self.used >= self._wait(len(self.keys))
            self.backoff = 0 if lasted else min(self.backoff + 1, self.most)
        self.keys, self.parts, self.reads, self.used = None, [], 0, 0

    def of(self, g: Gather) -> SortedList | None:
        """The keys of ``g``'s snapshot, brought up to its heads (call holding :attr:`lock`): ``None`` when
        they are not kept (yet)."""
        keys = self.keys
        if keys is None:
            return self._make(g)
        if self.cache.dropped != self.dropped:  # an entry set they stand for left the cache
            self.drop()
            return None
        for i, part in enumerate(g.parts):
            if part is not self.parts[i] and not self._advance(keys, i, part, g.keyfn):
                self.drop()
                return None
        if len(keys) != g.count:  # cannot happen while the log's entries are facts: a last guard
            self.drop()
            return None
        self.used += 1
        return keys

    def _advance(self, keys: SortedList, i: int, part: Part, keyfn: Any) -> bool:
        """Bring shard ``i``'s keys to ``part`` by the log's entries in between; ``False`` if it cannot."""
        was, now = self.parts[i].head, part.head
        start, end = was.log.seq, now.log.seq
        if now.incarnation != was.incarnation or end < start:
            return False
        if (now.scores, now.members) != (was.scores, was.members) and now.log.base <= was.log.base:
            return False  # new trees without a merge (which moves the base): a write no entry explains
        if end > start:
            entries = _log.logged(part.engine, now.incarnation, start, end)
            if entries is None:
                return False
            try:
                for member, old, new, _ in entries:
                    if old is not None:
                        keys.remove(keyfn(member, old))
                    if new is not None:
                        keys.add(keyfn(member, new))
            except ValueError:  # an entry's old score not among the keys
                return False
        self.parts[i] = part
        return True

    def _make(self, g: Gather) -> SortedList | None:
        """Merge every shard's keys from the cached entry sets, once the set was read often enough."""
        self.reads += 1
        if self.reads < self._wait(g.count):
            return None
        dropped = self.cache.dropped
        try:
            runs = [_keys_of(g, part) for part in g.parts]
        except _Uncached:
            self.reads = 0
            return None
        keys = SortedList(chain.from_iterable(runs))
        if len(keys) != g.count:
            self.reads = 0
            return None
        self.keys, self.parts, self.dropped = keys, list(g.parts), dropped
        return keys


def _keys_of(g: Gather, part: Part) -> list[Any]:
    """One shard's keys with its log applied, from its layout's regions (cached entry sets only)."""
    found = layout(g, part)
    return [key for j in range(len(found.ids)) for key in found.region(g, part, j)]
