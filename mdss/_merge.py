"""Merges: fold the update log's prefix into both trees in one batched copy-on-write commit.

A merge of the log up to sequence number ``m`` rewrites every tree node the logged members touch (each once), then
publishes the new roots with ``log.base = m`` and the entries appended meanwhile, only while the head still names the
roots and log base it started from: a prefix is never applied twice, and appends meanwhile only cost a re-publish.

Merges do not herd: the head carries a claim with a lease (:data:`mdss._log.CLAIM_MS`); others skip merging while it
holds, and an append past twice the log limit merges itself or waits. A merge publishes only in the gc epoch it minted
its nodes in; ``gc()`` does not advance it while a claim holds, yet a merge never blocks gc longer than its lease.
"""

from __future__ import annotations

import contextlib
import secrets
import time
from collections.abc import Callable
from operator import itemgetter
from typing import Any

import attrs

from . import _expiry, _garbage, _log, _publish, _snapshot, _writer
from ._codec import encode_log_page, weight_of
from ._engine import Engine
from ._head import Head, Log, TreeRef
from ._nodes import Leaf
from ._order import same_value
from ._snapshot import Snapshot
from ._writer import Writer, deltas_fit, patches_fit
from .exceptions import ConflictError, MissingNodeError, OutcomeUnknownError, StoreError, StoreUnavailableError
from .stores.base import Record


def fold(
    engine: Engine,
    snap: Snapshot,
    changes: dict[str, tuple[Any, Any]],
    flush: Callable[[dict[str, bytes]], None] | None = None,
) -> tuple[Writer, TreeRef, TreeRef]:
    """Apply ``member -> (value in the trees, new value)`` to both trees copy-on-write (the member index holds values,
    the score tree scores): the writer with the new nodes, and the new trees (full entry sets go to ``flush`` as they
    are made, if given: see :class:`Writer`)."""
    keys, entries = engine.ordering.keys, engine.ordering.entries
    score_ops: list[tuple[Any, str, Any]] = []
    member_ops: list[tuple[str, str, Any]] = []
    for member, (was, now) in changes.items():
        if same_value(was, now):
            continue
        if was is not None:
            score_ops += [(key, member, None) for key in keys(member, was)]
        if now is not None:
            score_ops += entries(member, now)
        member_ops.append((member, member, now))
    score_ops.sort(key=itemgetter(0))
    member_ops.sort(key=itemgetter(0))
    limit = engine.store.max_value_bytes
    patches, deltas = patches_fit(engine.chunk_size, limit), deltas_fit(engine.chunk_size, limit)
    writer = Writer(engine.chunk_size, snap.head.epoch, flush, patches, deltas, snap.head.merges)
    scores = TreeRef(*writer.apply(snap.score_tree, score_ops))
    index = TreeRef(*writer.apply(snap.member_index, member_ops))
    return writer, scores, index


def rest_of_log(engine: Engine, head: Head, merged: int) -> tuple[Log, dict[str, bytes], list[str]]:
    """``head``'s log without the entries before ``merged`` (now in the trees): the log, a log manifest to store if one
    is still needed, and the ids of segments and manifests it drops."""
    log = head.log
    segs = _log.segments(engine, log)
    ends = [s[1] for s in segs[1:]] + [log.seq - len(log.inline)]
    kept = [s for s, end in zip(segs, ends) if end > merged]
    dropped = [s[0] for s, end in zip(segs, ends) if end <= merged]
    inline_first = log.seq - len(log.inline)
    inline = log.inline[max(merged - inline_first, 0) :]
    stored: dict[str, bytes] = {}
    pages = None
    newer = set(log.segs)
    older = [s for s in kept if s not in newer]
    if log.pages is not None:
        dropped.append(log.pages)
        if older:
            pages = _writer.new_id(head.epoch)
            stored[engine.keys.node(pages)] = encode_log_page(older)
    rest = Log(merged, log.seq, pages, tuple(s for s in kept if s in newer), inline, None)
    return rest, stored, dropped


def merge(engine: Engine, *, wait: bool = False) -> bool:
    """Fold the whole log into the trees; True if this call merged. Skips (False) while another merger's claim holds,
    unless ``wait``: then it waits for that merge, or for its lease to lapse and merges itself."""
    record: tuple[Record] | None = None  # the head as a waiting call last read it
    mine: tuple[str, int] | None = None  # the claim this call made, if its merge met a node collected since
    deadline = time.monotonic() + engine.policy.budget  # a wait for another's claim ends with the budget too
    for _ in engine.policy.attempts():
        snap = _snapshot.snapshot(engine, False, record)
        record, log = None, snap.head.log
        if not len(log):
            return False
        if mine is not None and log.claim == mine and claimed_by_another(log):
            # Still ours: merge the head as it stands now (taken for another's, it would hold every merge off).
            claimed: Snapshot | None = snap
        elif claimed_by_another(log):
            if not wait:
                return False
            # Poll the head alone: the merger is about to replace the log.
            while claimed_by_another(log) and time.monotonic() < deadline:
                time.sleep(0.005)
                found = engine.store.get(engine.keys.head)
                if found is None:
                    break
                record, log = (found,), engine.decode(found.value).log
            continue
        else:
            claimed = _claim(engine, snap)
        if claimed is None:
            continue
        mine = claimed.head.log.claim
        try:
            landed = _merge_claimed(engine, claimed)
        except MissingNodeError:  # a node of the claimed head was collected: only if the head moved on
            _snapshot.collected_meanwhile(engine, claimed)
            continue
        if landed and not engine.writer.marked:  # a set made before markers gets one (mdss._snapshot.mark)
            _snapshot.mark(engine)
        return landed
    raise ConflictError(f"merge of set {engine.name!r} could not claim the log for its whole retry budget")


def claimed_by_another(log: Log) -> bool:
    """Whether ``log`` carries a merge claim whose lease still runs."""
    return log.claim is not None and log.claim[1] > _now_ms()


def _now_ms() -> int:
    return int(_writer.clock() * 1000)


def _claim(engine: Engine, snap: Snapshot) -> Snapshot | None:
    """Compare-and-set a merge claim into the head: the snapshot of the claimed head, or ``None`` if it lost."""
    nonce = secrets.token_hex(8)
    log = attrs.evolve(snap.head.log, claim=(nonce, _now_ms() + _log.CLAIM_MS))
    head = snap.head.next(nonce, log=log)
    data = head.encode()
    try:
        written, head = _publish.put_head(engine, snap.data, snap.version, head)
        data, version = written.value, written.version
    except ConflictError:
        return None  # another writer moved the head
    except StoreUnavailableError:  # the reply was lost: the claim is ours if the head holds it
        record = engine.store.get(engine.keys.head)
        if record is None:
            return None
        if record.value != data:  # appends since carry the claim on: ours if the head names its nonce
            now = engine.decode(record.value)
            if now.incarnation != head.incarnation or now.log.claim != log.claim:
                return None
            head, data = now, record.value
        version = record.version
    engine.remember(head, data, version)
    return _snapshot.snapshot(engine, False, None if version is None else (Record((data,), version),))


def _merge_claimed(engine: Engine, snap: Snapshot) -> bool:
    """Merge the log of ``snap`` (claimed by this process) and publish it; True if it landed."""
    start = snap.head
    merged = start.log.seq
    changes = snap.view.changes() if snap.view is not None else {}
    flushed: dict[str, bytes] = {}  # key -> b"": entry sets already written

    def flush(nodes: dict[str, bytes]) -> None:
        stored = {engine.keys.node(node_id): data for node_id, data in nodes.items()}
        flushed.update(dict.fromkeys(stored, b""))  # before the write: a failed one may have written some
        engine.store.put_many(stored)

    try:
        writer, scores, index = fold(engine, snap, changes, flush)
    except BaseException:
        _garbage.discard(engine, list(flushed))
        raise
    nodes = writer.encoded(engine.keys)
    leaves = [(i, len(node)) for i, node in writer.new.items() if isinstance(node, Leaf) and node.patch is None]
    engine.measure(
        (sum(n for _, n in leaves) + writer.flushed[0]) // 2,
        sum(weight_of(nodes[engine.keys.node(i)]) for i, _ in leaves) + writer.flushed[1],
    )
    notes = _garbage.notes_of(engine, start, writer.garbage())
    written = {**flushed, **nodes, **notes}
    engine.store.put_many({**nodes, **notes})
    current, held, version = start, snap.data, snap.version
    prepared: _Prepared | None = None
    # No backoff: each lost race returns the winner's head, and the merge re-publishes over its appends at once.
    for _ in attrs.evolve(engine.policy, base=0.0, cap=0.0).attempts():
        if (current.scores, current.members, current.log.base, current.incarnation) != (
            start.scores,
            start.members,
            start.log.base,
            start.incarnation,
        ) or current.epoch != start.epoch:
            # Another merge or commit took the trees: ours can never be named.
            _garbage.discard(engine, [*written, *(prepared.stored if prepared else ())])
            return False
        if prepared is None or not prepared.fits(current):
            if prepared is not None:
                _garbage.discard(engine, list(prepared.stored))
            prepared = _Prepared.make(engine, current, merged, list(notes))
        head = prepared.head(engine, current, merged, scores, index)
        try:
            landed, head = _publish.put_head(engine, held, version, head)
        except ConflictError as exc:
            record = exc.current if exc.current_known else engine.store.get(engine.keys.head)
            if record is None:
                _garbage.discard(engine, [*written, *prepared.stored])
                return False
            current, held, version = engine.decode(record.value), record.value, record.version
            continue
        except StoreUnavailableError as exc:
            if not _landed(engine, scores, exc):
                raise
        else:
            engine.remember(head, landed.value, landed.version)
            _expiry.follow(engine, head, landed.version, [*written, *prepared.stored])
        _publish.settle(engine, writer, nodes)
        engine.writer.made(scores.root, index.root)  # its cache holds them: it merges next
        engine.deletions.defer(
            [engine.keys.node(i) for i in (*writer.garbage(), *prepared.dropped)] + [*notes, *prepared.drop_keys]
        )
        engine.merged()
        return True
    _garbage.discard(engine, [*written, *(prepared.stored if prepared else ())])
    raise ConflictError(f"merge of set {engine.name!r} lost the head to writers for its whole retry budget")


@attrs.frozen
class _Prepared:
    """What a merge's publish stores besides its nodes, for one shape of the current head's log: the log manifest of
    the segments left, the note of the segments dropped, the head's notes naming both. Reused while appends only add
    inline entries, so a re-publish is one compare-and-set."""

    shape: tuple[Any, ...]
    log: Log  # the log left, less its inline entries
    notes: tuple[Any, Any]  # the head's (notes, note_page) once the merge's notes are attached
    stored: dict[str, bytes]
    dropped: list[str]
    drop_keys: tuple[str, ...]

    @staticmethod
    def _shape(head: Head) -> tuple[Any, ...]:
        return (head.log.segs, head.log.pages, head.notes, head.note_page)

    @classmethod
    def make(cls, engine: Engine, current: Head, merged: int, note_keys: list[str]) -> _Prepared:
        rest, stored, dropped = rest_of_log(engine, current, merged)
        drop_notes = _garbage.notes_of(engine, current, dropped)
        head, pages = _garbage.attach_notes(engine, current, [*note_keys, *drop_notes])
        stored.update(pages)
        stored.update(drop_notes)
        if stored:
            engine.store.put_many(stored)
        return cls(cls._shape(current), rest, (head.notes, head.note_page), stored, dropped, tuple(drop_notes))

    def fits(self, current: Head) -> bool:
        return self._shape(current) == self.shape

    def head(self, engine: Engine, current: Head, merged: int, scores: TreeRef, index: TreeRef) -> Head:
        """The head to publish over ``current``: the new trees, and the log after ``merged``."""
        log = current.log
        inline = log.inline[max(merged - (log.seq - len(log.inline)), 0) :]
        rest = attrs.evolve(self.log, seq=log.seq, inline=inline)
        notes, note_page = self.notes
        return current.next(
            secrets.token_hex(8),
            scores=scores,
            members=index,
            log=rest,
            notes=notes,
            note_page=note_page,
            merges=current.merges + 1,
        )


def _landed(engine: Engine, scores: TreeRef, error: StoreUnavailableError) -> bool:
    """After an ambiguous publish: True if the head names the merge's score tree (its root id is new and unique, so only
    this merge can have put it there); else :class:`OutcomeUnknownError`, deleting nothing (``gc(sweep=True)`` collects
    the nodes if it did not land). A read that fails or is refused tells nothing either."""
    with contextlib.suppress(StoreError):
        record = engine.store.get(engine.keys.head)
        if record is not None and engine.decode(record.value).scores == scores:
            return True
    raise OutcomeUnknownError(
        f"the store did not confirm a merge of set {engine.name!r} ({error}); the log is intact either way"
    ) from error
