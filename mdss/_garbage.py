"""Garbage: deferred deletion of replaced nodes, and ``gc()`` for what interrupted writers left.

Safety does not depend on clocks (docs/architecture.md, "Garbage"). Every node id carries the **gc epoch** of the head
its commit read (``mdss._writer.new_id``), and a commit publishes only by a compare-and-set against the exact head
version it read (versions never repeat). Once ``gc()`` advanced the epoch from ``E`` to ``E + 1``, no commit that read
a head of epoch ``<= E`` can publish, and later heads only add nodes of epoch ``>= E + 1``: a node of epoch ``<= E``
that the head after the advance does not name is garbage forever. It is deleted after ``gc_grace`` seconds, so that
readers of older heads finish (one that still meets a missing node retries on a newer head); ``min_age`` only spares
young nodes for readers' sake, never what makes a deletion safe.

Normally nothing is listed: a commit knows the nodes it replaced, and the process deletes them ``gc_grace`` seconds
later. Listing the set's node keys is for ``gc()`` alone (orphans of crashed writers and of ended processes).
"""

from __future__ import annotations

import contextlib
import secrets
import time
from collections.abc import Callable, Sequence

import attrs

from . import _log, _snapshot, _writer
from ._codec import decode_note, decode_page, encode_note, encode_page
from ._deletions import BATCH
from ._engine import Engine
from ._head import EMPTY, NOTES_INLINE, Head, Log, new_lineage
from ._snapshot import Snapshot
from ._writer import id_epoch, id_millis
from .exceptions import ConflictError, CorruptDataError, HeadMissingError, StoreUnavailableError

#: Node ids per garbage note (about 120 KB): a commit that replaces more writes several.
NOTE_IDS = 4096


def notes_of(engine: Engine, head: Head, replaced: list[str]) -> dict[str, bytes]:
    """The garbage notes of the nodes ``replaced`` by a commit on ``head``: key -> bytes (none: nothing).

    The notes make the deferred deletion durable: if the process ends before the grace period, ``gc()`` finds the nodes
    with no listing. One note per :data:`NOTE_IDS` nodes, so that every note fits any store (DynamoDB: 400 KB).
    """
    return {
        engine.keys.note(_writer.new_id(head.epoch)): encode_note(replaced[i : i + NOTE_IDS])
        for i in range(0, len(replaced), NOTE_IDS)
    }


def attach_notes(engine: Engine, head: Head, keys: Sequence[str]) -> tuple[Head, dict[str, bytes]]:
    """``head`` naming the notes at ``keys`` (the last one newest), and a note page to store when the head's notes are
    full (:data:`NOTES_INLINE`)."""
    if not keys:
        return head, {}
    notes = (*(key[len(engine.keys.notes) :] for key in reversed(keys)), *head.notes)
    if len(notes) <= NOTES_INLINE:
        return attrs.evolve(head, notes=notes), {}
    page = _writer.new_id(head.epoch)
    return (
        attrs.evolve(head, notes=(), note_page=page),
        {engine.keys.note(page): encode_page(notes, head.note_page)},
    )


def discard(engine: Engine, keys: list[str]) -> None:
    """Delete what a commit wrote that no head can ever name. If the store fails, this object deletes them again before
    it takes a set without a head for a damaged one (:func:`mdss._snapshot.headless`), else ``gc(sweep=True)`` does."""
    try:
        engine.store.delete_many(keys)
    except StoreUnavailableError:
        engine.deletions.strand(keys)


def rewrite_head(engine: Engine, change: Callable[[Head], Head | None], what: str) -> Head | None:
    """Compare-and-set the head to ``change(head)`` until it lands or ``change`` answers ``None`` (nothing to do); the
    head after (``None``: there is no head)."""
    key = engine.keys.head
    for _ in engine.policy.attempts():
        record = engine.store.get(key)
        if record is None:
            return None
        head = engine.decode(record.value)
        nxt = change(head)
        if nxt is None:
            return head
        try:
            engine.store.cas(key, nxt.encode(), record.version)
        except ConflictError:
            continue
        return nxt
    raise ConflictError(f"{what} of set {engine.name!r} lost the head to writers for its whole retry budget")


def advance_epoch(engine: Engine, seen: Head) -> Head | None:
    """Move the head past the epoch of ``seen``, unless that is done already; the head after. Only once a commit has
    landed in the epoch (``gen > epoch_gen``), so that gc takes at most one head write per commit from the writers, and
    not while a merge's claim holds, so that gc never starves merges."""

    def advance(head: Head) -> Head | None:
        if head.epoch > seen.epoch or head.gen <= head.epoch_gen:
            return None
        claim = head.log.claim
        if claim is not None and claim[1] > _writer.clock() * 1000:
            return None  # a merge is folding the log: its nodes are of this epoch, it publishes in it
        return head.next(secrets.token_hex(8), epoch=head.epoch + 1)

    return rewrite_head(engine, advance, "gc")


def named(engine: Engine, snap: Snapshot) -> set[str]:
    """The ids of every node ``snap``'s head names: both trees' nodes, the log's manifest and segments."""
    return snap.score_tree.node_ids() | snap.member_index.node_ids() | _log.node_ids(engine, snap.head.log)


def leads_to(engine: Engine, snap: Snapshot) -> list[str]:
    """The keys of every node and note ``snap``'s head leads to: the nodes it names (:func:`named`), its garbage notes
    and their pages (one read per page), not the replaced nodes the notes name."""
    keys = engine.keys
    notes, pages = _walk(engine, snap.head)
    return [*(keys.node(i) for i in sorted(named(engine, snap))), *(keys.note(i) for i in (*notes, *pages))]


def _unnamed(engine: Engine, nodes: list[str], notes: list[str], min_age: float) -> tuple[Head, list[str]]:
    """The head now, and those of ``nodes`` and ``notes`` (keys) it does not lead to, minted over ``min_age`` seconds
    ago (by their writer's clock)."""

    def look(snap: Snapshot) -> tuple[Head, set[str], set[str]]:
        return snap.head, named(engine, snap), {i for ids in _walk(engine, snap.head) for i in ids}

    head, live, noted = _snapshot.read(engine, look)
    cutoff, out = (_writer.clock() - min_age) * 1000, list[str]()
    for keys, prefix, kept in ((nodes, engine.keys.nodes, live), (notes, engine.keys.notes, noted)):
        start = len(prefix)
        out.extend(k for k in keys if k[start:] not in kept and (not min_age or id_millis(k[start:]) <= cutoff))
    return head, out


def unreferenced(engine: Engine, min_age: float = 0.0) -> list[str]:
    """Keys of stored nodes and notes the current head does not lead to, minted over ``min_age`` seconds ago."""
    store, keys = engine.store, engine.keys
    return store.existing(_unnamed(engine, list(store.keys(keys.nodes)), list(store.keys(keys.notes)), min_age)[1])


def gc(engine: Engine, min_age: float = 0.0, wait: bool = True, sweep: bool = False) -> int:
    """Delete what the head's garbage notes name (no listing); with ``sweep``, also what only a listing finds, and what
    the store keeps beside the head that ended processes left (:meth:`~mdss.stores.base.Store.sweep`: a store with
    slots' covered slots, deleted once its grace has passed; without ``wait``, by this store's later calls)."""
    store = engine.store
    held = store.sweep(engine.keys.head) if sweep else 0.0
    snap = _snapshot.snapshot(engine)
    head = snap.head
    if snap.version is None:
        if _snapshot.headless(engine):
            raise HeadMissingError(
                f"set {engine.name!r} has stored nodes but no head (evicted, or a drop() was interrupted); "
                "gc() will not guess what they were: drop() removes them",
                engine.keys.head,
            )
        garbage: list[str] = []
    else:
        notes, pages, garbage = _collect_noted(engine, head)
        if sweep:
            garbage = sorted({*garbage, *_swept(engine, min_age)})
    pause = max(engine.gc_grace if garbage else 0.0, held)
    if pause and wait:
        time.sleep(pause)
    if held and wait:
        store.sweep(engine.keys.head)  # deletes what the first doomed
    if snap.version is None:
        return 0
    for first in range(0, len(garbage), BATCH):
        store.delete_many(garbage[first : first + BATCH])
    store.delete_many(store.existing([engine.keys.note(i) for i in notes] + [engine.keys.note(i) for i in pages]))
    if notes or pages:
        _detach(engine, head, set(notes))
    return len(garbage)


def _walk(engine: Engine, head: Head) -> tuple[list[str], list[str]]:
    """The garbage notes and the note pages the head leads to, newest first, down to ``notes_done``: one read per page
    (of :data:`NOTES_INLINE` + 1 notes)."""
    notes, pages, page = list(head.notes), [], head.note_page
    while page is not None and page != head.notes_done:
        record = engine.store.get(engine.keys.note(page))
        if record is None:
            break  # collected by an earlier gc that could not detach it from the head
        more, previous = decode_page(engine.keys.note(page), record.value)
        pages.append(page)
        notes.extend(more)
        page = previous
    return notes, pages


def _collect_noted(engine: Engine, head: Head) -> tuple[list[str], list[str], list[str]]:
    """The notes and pages the head leads to (down to ``notes_done``), and the stored nodes they name: replaced for
    good (the head names the note, so its commit landed)."""
    store, keys = engine.store, engine.keys
    notes, pages = _walk(engine, head)
    replaced: list[str] = []
    found = store.get_many([keys.note(i) for i in notes])
    for note, data in zip(notes, found):
        if data is not None:  # else deleted with the nodes it names, by the process that wrote it
            replaced.extend(keys.node(i) for i in decode_note(keys.note(note), data))
    return notes, pages, store.existing(list(dict.fromkeys(replaced)))


def _detach(engine: Engine, collected: Head, notes: set[str]) -> None:
    """Compare-and-set the head to forget the notes and pages just collected (one head write per gc). If writers keep
    it from landing, the next gc walks the same notes again, finds them gone, and detaches them then."""

    def forget_notes(head: Head) -> Head:
        done = collected.note_page if collected.note_page is not None else head.notes_done
        kept = tuple(n for n in head.notes if n not in notes)
        return head.next(secrets.token_hex(8), notes=kept, notes_done=done)

    with contextlib.suppress(ConflictError):
        rewrite_head(engine, forget_notes, "gc")


def _swept(engine: Engine, min_age: float) -> list[str]:
    """What only a listing finds: nodes and notes of interrupted commits. Those of epochs before the head's that it
    does not name are garbage (see the module docstring); the epoch is advanced first when the current one's wait too.
    """
    store, keys = engine.store, engine.keys
    # What is minted after these listings is of later epochs.
    listed, notes = list(store.keys(keys.nodes)), list(store.keys(keys.notes))
    head, unnamed = _unnamed(engine, listed, notes, min_age)
    if any(id_epoch(k.rpartition(":")[2]) >= head.epoch for k in unnamed):
        advanced = advance_epoch(engine, head)
        if advanced is not None and advanced.epoch > head.epoch:
            head, unnamed = _unnamed(engine, listed, notes, min_age)  # as named by a head after the advance
    return store.existing([k for k in unnamed if id_epoch(k.rpartition(":")[2]) < head.epoch])


def drop(engine: Engine, only: Callable[[Head], bool] | None = None) -> bool:
    """Remove a whole set, damaged or not: its nodes and notes, then its marker (``_snapshot.mark``), then its head.
    With ``only``, only if the head, read at the compare-and-set that empties it, passes it (an expired set dropped by
    its next writer: ``mdss._expiry``), and the emptied head keeps its moment: every other writer takes it for the
    expired set it was (and drops it too, or reads it as absent), none for a set to write on, whatever its settings;
    whether the set was dropped (without ``only``: whether there was anything to drop, a head or nodes).

    The head first moves to an empty state in a new epoch, so that commits in flight fail. A commit made on that empty
    head meanwhile keeps its nodes (of the new epoch) and its head: the head is deleted last, only if still the emptied
    one. A head that does not decode (no epoch to go by) is deleted with everything.
    """
    store, keys = engine.store, engine.keys
    nonce = secrets.token_hex(8)
    refused = False

    def empty(h: Head) -> Head | None:
        nonlocal refused
        refused = only is not None and not only(h)
        if refused:
            return None
        return h.next(
            nonce,
            epoch=h.epoch + 1,
            scores=EMPTY,
            members=EMPTY,
            notes=(),
            note_page=None,
            log=Log(h.log.seq, h.log.seq),
            lineage=new_lineage(),
            expires=None if only is None else h.expires,
            native=None if only is None else h.native,  # it names no node, so none that may expire by itself
        )

    try:
        emptied = rewrite_head(engine, empty, "drop")
        if refused or (only is not None and emptied is None):
            # Not the set ``only`` meant, or gone already: a writer may be starting a new one, whose nodes stay.
            return False
        spare, data = (None, None) if emptied is None else (emptied.epoch, emptied.encode())
        existed = emptied is not None
    except CorruptDataError:
        if only is not None:  # a damaged head is not an expired one: reads and writes report it
            raise
        record = store.get(keys.head)
        spare, data = None, None if record is None else record.value
        existed = record is not None
    listed = [*store.keys(keys.nodes), *store.keys(keys.notes)]
    doomed = [k for k in listed if spare is None or id_epoch(k.rpartition(":")[2]) < spare]
    names = store.existing(doomed)  # not what is deleted already (tombstones)
    for start in range(0, len(names), BATCH):
        store.delete_many(names[start : start + BATCH])
    # The marker goes before the head, after the nodes: an interrupted drop leaves a head, or a marker
    # with the nodes left (HeadMissingError: drop again), or nothing a reader could take for a lost head.
    record = store.get(keys.head)
    if record is None or record.value == data:  # not a set a writer started afresh meanwhile
        store.delete(keys.marker)
        if record is not None:
            try:
                store.delete_if(keys.head, record.version)
            except ConflictError:  # a writer did so just now: its set stays, marked
                _snapshot.mark(engine)
    engine.forget()
    return existed or bool(names)


def node_keys(engine: Engine) -> list[str]:
    """The store keys of every node the current head names (reads manifests only)."""
    return _snapshot.read(engine, lambda snap: sorted(engine.keys.node(i) for i in named(engine, snap)))
