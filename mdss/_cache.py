"""A bounded, thread-safe LRU of decoded nodes.

Nodes are immutable and their ids never reused, so a cached node never needs invalidating: the cache only has to respect
its memory budget, measured in stored bytes (a fair proxy for the decoded size).
"""

from __future__ import annotations

import contextlib
import threading
from collections import OrderedDict
from collections.abc import Iterable
from typing import Any


class NodeCache:
    """Least-recently-used map of node key -> decoded node, at most ``max_bytes``."""

    def __init__(self, max_bytes: int = 64 << 20) -> None:
        self.max_bytes = max_bytes
        self.size = 0
        self._nodes: OrderedDict[str, tuple[Any, int]] = OrderedDict()
        self._lock = threading.Lock()
        self.leaf_entries = 0  # entries and stored bytes of the entry sets read from the store (sizes the log)
        self.leaf_bytes = 0
        self.dropped = 0  # nodes evicted or discarded, not counting those a commit replaced (mdss._allkeys)

    def get(self, key: str) -> Any:
        # Without the lock: each OrderedDict call is atomic, and the lock guards the size's sum, which a hit leaves
        # alone (a read's hot path: several gets per rank). A node evicted between the two calls is still returned.
        item = self._nodes.get(key)
        if item is None:
            return None
        with contextlib.suppress(KeyError):
            self._nodes.move_to_end(key)
        return item[0]

    def touch(self, keys: Iterable[str]) -> None:
        """Mark ``keys`` as just used (those still cached), as :meth:`get` would."""
        with self._lock:
            nodes = self._nodes
            for key in keys:
                if key in nodes:
                    nodes.move_to_end(key)

    def put(self, key: str, node: Any, size: int) -> None:
        if size > self.max_bytes:
            return
        with self._lock:
            old = self._nodes.pop(key, None)
            if old is not None:
                self.size -= old[1]
            self._nodes[key] = (node, size)
            self.size += size
            while self.size > self.max_bytes:
                _, (_, evicted) = self._nodes.popitem(last=False)
                self.size -= evicted
                self.dropped += 1

    def seen(self, entries: int, size: int) -> None:
        """Count an entry set read from the store: ``entries`` entries in ``size`` stored bytes."""
        self.leaf_entries += entries
        self.leaf_bytes += size

    def discard(self, key: str, *, replaced: bool = False) -> None:
        """Forget ``key``: ``replaced`` when a commit replaced the node (its content lives on in newer ones)."""
        with self._lock:
            old = self._nodes.pop(key, None)
            if old is not None:
                self.size -= old[1]
                self.dropped += not replaced

    def __len__(self) -> int:
        return len(self._nodes)
