"""Garbage: deferred deletion of replaced nodes, and ``gc()`` for what interrupted writers left.

Safety does not depend on clocks or timings. The head carries a **gc
epoch**; every node id carries the epoch of the head its commit read
(``mdss._writer.new_id``). A commit publishes only by a compare-and-set
against the exact head version it read, and head versions never repeat
(every head has a new generation and commit nonce). ``gc()`` first advances
the epoch from ``E`` to ``E + 1`` by compare-and-set. From then on:

- a commit that read a head of epoch ``<= E`` can never publish: its
  compare-and-set compares against a version that is gone;
- every later head is built from the head after the advance or a later one,
  so the nodes of epoch ``<= E`` that any later head can name are exactly
  those the head after the advance names (later commits only add nodes of
  epoch ``>= E + 1``).

So a node of epoch ``<= E`` that the head after the advance does not name is
garbage forever, and ``gc()`` deletes it, after ``gc_grace`` seconds so that
readers holding an older head finish (a reader that still meets a missing
node re-reads the head and retries). ``min_age`` only spares young nodes for
readers' sake; it is never what makes a deletion safe.

In the normal path nothing is listed: a commit knows the nodes it replaced,
and the process deletes them ``gc_grace`` seconds later. Listing the set's
node keys is for ``gc()`` alone (orphans of crashed writers and of ended
processes), a maintenance call.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING

from . import _writer
from ._head import EMPTY, Head, decode_for, forget, has_nodes
from ._writer import id_epoch, id_millis
from .exceptions import ConflictError, CorruptDataError, HeadMissingError

if TYPE_CHECKING:
    from ._sortedset import SortedSet

#: Keys deleted (and verified) per store call.
BATCH = 1000


class Garbage:
    """The nodes this process replaced, each deleted once its grace period is over."""

    def __init__(self, sset: SortedSet) -> None:
        self.sset = sset
        self._due: list[tuple[float, list[str]]] = []  # (monotonic deadline, node keys)
        self._lock = threading.Lock()

    def defer(self, node_ids: Iterable[str]) -> None:
        """Schedule replaced nodes for deletion after the grace period; delete those that are due."""
        sset, now = self.sset, time.monotonic()
        keys = [sset._keys.node(i) for i in node_ids]
        with self._lock:
            if keys:
                self._due.append((now + sset.gc_grace, keys))
            due = [keys for deadline, keys in self._due if deadline <= now]
            self._due = [item for item in self._due if item[0] > now]
        if due:
            sset.store.delete_many([key for keys in due for key in keys])

    def scheduled(self) -> set[str]:
        """Keys this process will delete when their grace period ends."""
        with self._lock:
            return {key for _, keys in self._due for key in keys}


def advance_epoch(sset: SortedSet, seen: Head) -> Head:
    """Move the head past the epoch of ``seen`` by compare-and-set, unless that is done already; the head after.

    An epoch is only advanced once a commit has landed in it (``gen >
    epoch_gen``): so that gc, however often it runs, never takes more than
    one head write per commit from the writers.
    """
    key = sset._keys.head
    for _ in sset._policy.attempts():
        record = sset.store.get(key)
        if record is None:
            break
        head = decode_for(sset, record.value)
        if head.epoch > seen.epoch or head.gen <= head.epoch_gen:
            return head
        nxt = head.next(secrets.token_hex(8), epoch=head.epoch + 1)
        try:
            sset.store.cas(key, nxt.encode(), record.version)
        except ConflictError:
            continue
        return nxt
    raise ConflictError(f"gc of set {sset.name!r} could not advance the epoch: writers kept moving the head")


def _unnamed(sset: SortedSet, keys: list[str], min_age: float) -> tuple[Head, list[str]]:
    """The head now, and those of ``keys`` (node keys) it does not name, minted over ``min_age`` seconds ago."""
    head, live = sset._read(lambda snap: (snap.head, snap.scores.node_ids() | snap.members.node_ids()))
    start, cutoff = len(sset._keys.nodes), (_writer.clock() - min_age) * 1000
    return head, [k for k in keys if k[start:] not in live and (not min_age or id_millis(k[start:]) <= cutoff)]


def unreferenced(sset: SortedSet, min_age: float = 0.0) -> list[str]:
    """Keys of stored nodes the current head does not name, minted over ``min_age`` seconds ago."""
    return sset.store.existing(_unnamed(sset, list(sset.store.keys(sset._keys.nodes)), min_age)[1])


def gc(sset: SortedSet, min_age: float = 0.0, wait: bool = True) -> int:
    """Delete the nodes of epochs before the head's that the head does not name, advancing the epoch when
    nodes of the current one wait too. One listing of the set's node keys."""
    if sset._snapshot().version is None:
        if has_nodes(sset):
            raise HeadMissingError(
                f"set {sset.name!r} has stored nodes but no head (evicted, or a drop() was interrupted); "
                "gc() will not guess what they were: drop() removes them",
                sset._keys.head,
            )
        return 0
    keys = list(sset.store.keys(sset._keys.nodes))  # nodes minted after this listing are of later epochs
    head, unnamed = _unnamed(sset, keys, min_age)
    if any(id_epoch(k[len(sset._keys.nodes) :]) >= head.epoch for k in unnamed):
        advanced = advance_epoch(sset, head)
        if advanced.epoch > head.epoch:
            head, unnamed = _unnamed(sset, keys, min_age)  # the live set as of a head after the advance
    start = len(sset._keys.nodes)
    garbage = sset.store.existing([k for k in unnamed if id_epoch(k[start:]) < head.epoch])
    if garbage and wait:
        time.sleep(sset.gc_grace)
    for first in range(0, len(garbage), BATCH):
        sset.store.delete_many(garbage[first : first + BATCH])
    return len(garbage)


def drop(sset: SortedSet) -> None:
    """Remove a whole set, damaged or not: every listed node, then the head.

    The head first moves to a new epoch with empty trees, so that commits in
    flight fail and readers see an empty set; it is deleted last, and only if
    no writer has started the set afresh meanwhile.
    """
    store, keys = sset.store, sset._keys
    emptied = _empty_head(sset)
    names = store.existing(list(store.keys(keys.nodes)))  # not what is deleted already (tombstones)
    for start in range(0, len(names), BATCH):
        store.delete_many(names[start : start + BATCH])
    record = store.get(keys.head)
    if record is not None and (emptied is None or record.value == emptied):
        store.delete(keys.head)
    forget(sset)


def _empty_head(sset: SortedSet) -> bytes | None:
    """Compare-and-set the head to an empty set in a new epoch; its bytes (``None``: there was no head).

    A head that does not decode is left to be deleted as it is.
    """
    key = sset._keys.head
    for _ in sset._policy.attempts():
        record = sset.store.get(key)
        if record is None:
            return None
        try:
            head = Head.decode(key, record.value)
        except CorruptDataError:  # a damaged head must not stop a drop
            return record.value
        data = head.next(secrets.token_hex(8), epoch=head.epoch + 1, scores=EMPTY, members=EMPTY).encode()
        try:
            sset.store.cas(key, data, record.version)
        except ConflictError:
            continue
        return data
    raise ConflictError(f"drop of set {sset.name!r} lost to writers for its whole retry budget")
