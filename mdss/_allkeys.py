"""A sharded set's keys merged across its shards, kept by a process that reads the set often.

A rank is one bisection of one ``SortedList`` and a page one slice, whatever ``S``. The keys follow the heads by the
update log's entries within a lineage, else by comparing a shard's keys before and after (O(n/S)); each read checks
their count. Kept only while the entry sets fit the node cache (:data:`ENTRY_BYTES` each), and dropped when a node
leaves it other than by a commit. See docs/architecture.md ("Merged keys").
"""

from __future__ import annotations

import threading
from itertools import chain
from typing import Any

from sortedcontainers import SortedList

from ._cache import NodeCache
from ._gather import Gather, Part, Uncached, layout

#: Reads before the keys are merged: at least ``BUILD_READS``, and one per ``READS_PER_KEY`` entries (what sorting every
#: key costs). Each drop for a write they cannot follow doubles the next wait, up to ``2 ** MAX_BACKOFF`` times.
BUILD_READS = 8
READS_PER_KEY = 250
MAX_BACKOFF = 10

#: Stored bytes per entry of both trees' entry sets, about (17-20 in the benchmarks).
ENTRY_BYTES = 32


class AllKeys:
    """One set's merged keys (``None`` until made) and the shards' parts they were brought up to."""

    __slots__ = (
        *("keys", "parts", "lock", "reads", "cache", "dropped"),
        *("least", "per_key", "backoff", "most", "used", "made"),
    )

    def __init__(self, cache: NodeCache) -> None:
        self.keys: SortedList | None = None
        self.parts: list[Part] = []
        self.lock = threading.Lock()  # a read holds it while it uses the keys; others read without them
        self.reads = 0  # reads since the keys were dropped
        self.cache, self.dropped = cache, cache.dropped  # the cache's drops when the keys were made
        self.least, self.per_key = BUILD_READS, READS_PER_KEY  # when to make them (tests make them at once)
        self.backoff, self.most = 0, MAX_BACKOFF  # the next making waits 2 ** backoff times as long
        self.used = 0  # reads that used the keys since they were made
        self.made = 0  # times they were made

    def _wait(self, count: int) -> int:
        return max(self.least, count // self.per_key) << self.backoff

    def drop(self) -> None:
        """Forget the keys; the next ones wait longer unless these lasted (see :data:`MAX_BACKOFF`)."""
        if self.keys is not None:
            lasted = self.used >= self._wait(len(self.keys))
            self.backoff = 0 if lasted else min(self.backoff + 1, self.most)
        self.keys, self.parts, self.reads, self.used = None, [], 0, 0

    def of(self, g: Gather) -> SortedList | None:
        """The keys of ``g``'s snapshot (call holding :attr:`lock`); ``None`` when they are not kept (yet)."""
        if g.count * ENTRY_BYTES > self.cache.max_bytes:  # too large for the cache they stand for
            self.drop()
            return None
        keys = self.keys
        if keys is None:
            return self._make(g)
        if self.cache.dropped != self.dropped:  # an entry set they stand for left the cache
            self.drop()
            return None
        for i, part in enumerate(g.parts):
            if part is not self.parts[i] and not self._advance(g, keys, i, part):
                self.drop()
                return None
        if len(keys) != g.count:  # cannot happen while the log's entries are facts: a last guard
            self.drop()
            return None
        self.used += 1
        return keys

    def _advance(self, g: Gather, keys: SortedList, i: int, part: Part) -> bool:
        """Bring shard ``i``'s keys to ``part`` by the log's entries in between, else :meth:`_resync`; False if not."""
        was, now = self.parts[i].head, part.head
        start, end = was.log.seq, now.log.seq
        same = now.incarnation == was.incarnation and now.lineage is not None and now.lineage == was.lineage
        entries = part.engine.reader.logged(now.incarnation, start, end) if same and end >= start else None
        if entries is None:  # replaced (load, drop), folded without entries, merged by another process, ...
            return self._resync(g, keys, i, part)
        keyfn = part.engine.ordering.key  # of a member's value (a "first" set's tree keys spell the number in)
        try:
            for member, old, new, _ in entries:
                if old is not None:
                    keys.remove(keyfn(member, old))
                if new is not None:
                    keys.add(keyfn(member, new))
        except ValueError:  # an entry's old score not among the keys (and some applied): start afresh
            return False
        self.parts[i] = part
        return True

    def _resync(self, g: Gather, keys: SortedList, i: int, part: Part) -> bool:
        """Bring shard ``i``'s keys to ``part`` by the difference between its keys before (from cached entry sets, else
        ``False``) and after (read if not cached, one ``get_many`` per level): O(n/S), not a sort of every key."""
        try:
            before = _keys_of(g, self.parts[i])
        except Uncached:
            return False
        try:
            after = _keys_of(g, part)
        except Uncached:
            _read_trees(g, [part])
            after = _keys_of(g, part)
        typed = _typed  # (5, m) == (5.0, m): a score changed from 5 to 5.0 is a change
        was, now = set(map(typed, before)), set(map(typed, after))
        try:
            for key, _ in was - now:
                keys.remove(key)
        except ValueError:  # a key the kept part had is not among the keys (and some removed): start afresh
            return False
        for key, _ in now - was:
            keys.add(key)
        self.parts[i] = part
        return True

    def _make(self, g: Gather) -> SortedList | None:
        """Merge every shard's keys from the cached entry sets, once the set was read often enough."""
        self.reads += 1
        if self.reads < self._wait(g.count):
            return None
        try:
            runs = [_keys_of(g, part) for part in g.parts]
        except Uncached:  # after another process's merges, say: read what is missing, then merge
            _read_trees(g, g.parts)
            runs = [_keys_of(g, part) for part in g.parts]
        keys = SortedList(chain.from_iterable(runs))
        if len(keys) != g.count:
            self.reads = 0
            return None
        self.keys, self.parts, self.dropped = keys, list(g.parts), self.cache.dropped
        self.made += 1
        return keys


def _keys_of(g: Gather, part: Part) -> list[Any]:
    """One shard's keys with its log applied, from its layout's regions (cached entry sets only)."""
    found = layout(g, part)
    return [key for j in range(len(found.ids)) for key in found.region(g, part, j)]


def _typed(key: Any) -> tuple[Any, type]:
    return key, type(key[0])


def _read_trees(g: Gather, parts: list[Part]) -> None:
    """Pin every node of these shards' score trees, reading those not cached one ``get_many`` per level."""
    level = [(part, part.root, part.height) for part in parts if part.root is not None]
    while level:
        g.fetch((part, node_id, height, g.keyfn) for part, node_id, height in level)
        level = [
            (part, child, height - 1)
            for part, node_id, height in level
            if height
            for child in g.peek(part, node_id, height).ids
        ]
