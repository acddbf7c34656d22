"""Publishing a commit: its nodes and garbage notes written, then the head's compare-and-set.

The rule that keeps acknowledged data safe: a commit deletes the nodes it wrote only once it has *proven* that its head
can never be published (a definite conflict, or another commit took its generation). After an ambiguous outcome it
reads the head and decides by :meth:`Head.fate`: landed, lost, pending (resend the same compare-and-set), or unknown
(raise :class:`OutcomeUnknownError` and delete nothing: ``gc()`` collects the nodes if the commit did not land).
"""

from __future__ import annotations

from typing import Any

from . import _expiry, _garbage, _log, _retry, _tail
from ._engine import Engine
from ._head import LANDED, LOST, PENDING, UNKNOWN, Head
from ._nodes import cached_weight, stored_id
from ._snapshot import Snapshot
from ._writer import Writer
from .exceptions import (
    ConflictError,
    MissingNodeError,
    OutcomeUnknownError,
    StoreError,
    StoreRefusedError,
    StoreUnavailableError,
)
from .stores.base import Record


class Doubt:
    """A commit's store calls, and whether its outcome is in doubt (``ambiguous``: the first call whose reply was lost).
    A refusal from the store after that tells nothing of the lost call, which may have landed: it leaves as
    :class:`OutcomeUnknownError`, never as a refusal."""

    def __init__(self, engine: Engine, nonce: str) -> None:
        self.engine, self.nonce = engine, nonce
        self.ambiguous: StoreUnavailableError | None = None

    def __enter__(self) -> Doubt:
        return self

    def __exit__(self, kind: object, exc: BaseException | None, tb: object) -> None:
        if self.ambiguous is None or not isinstance(exc, StoreError):
            return
        if isinstance(exc, (ConflictError, StoreUnavailableError)) and not isinstance(exc, StoreRefusedError):
            return
        raise OutcomeUnknownError(
            f"commit {self.nonce} to set {self.engine.name!r} lost its reply ({self.ambiguous}), then the store "
            f"refused: {exc}; it is applied entirely or not at all: read the set before retrying"
        ) from exc


def publish(
    engine: Engine,
    snap: Snapshot,
    head: Head,
    writer: Writer,
    nodes: dict[str, bytes] | None = None,
    written: bool = False,
) -> bool:
    """Write the new nodes (``nodes``, else the writer's; unless ``written`` already) and the commit's garbage note,
    then compare-and-set the head. True once the head is published; False if another commit won (then the new nodes
    are deleted again, as nothing can ever name them)."""
    notes = _garbage.notes_of(engine, head, writer.garbage())
    head, stored = _garbage.attach_notes(engine, head, list(notes))
    stored.update(notes)
    data = head.encode()
    if nodes is None:
        nodes = writer.encoded(engine.keys)
    engine.store.put_many(stored if written else {**nodes, **stored})
    keys = [*nodes, *stored]
    try:
        landed = _cas_head(engine, snap, head, data)
    except _Dropped:
        _garbage.discard(engine, keys)
        raise
    if landed is None:
        _garbage.discard(engine, keys)
        return False
    engine.remember(head, data, landed[0])
    _expiry.follow(engine, head, landed[0], keys)  # a set expiring on a store's own expiry: these nodes too
    settle(engine, writer, nodes)
    # The notes go with the nodes they name (a page that lists them then finds them gone, as gc() expects).
    engine.deletions.defer([engine.keys.node(i) for i in writer.garbage()] + list(notes))
    return True


def put_head(engine: Engine, held: bytes | None, version: Any, head: Head) -> tuple[Record, Head]:
    """Write ``head``, which has no log entries of its own (a merge, a merge claim), over the head read as ``held`` (its
    bytes; ``None`` with siblings) and ``version``: as a seal (``mdss._tail.swap``) on a store that applies appends,
    else by compare-and-set. The record written and its head; :class:`ConflictError` (with ``current``) when the head,
    or for a seal its core, changed."""
    key, data = engine.keys.head, head.encode()
    if not engine.store.appends or held is None:
        return Record((data,), engine.store.cas(key, data, version)), head
    landed = engine.store.swap_core(key, held, data, b"", _tail.TAIL_BYTES)
    if _tail.core(landed.value) != data:  # another seal came first: nothing was changed
        engine.store.stats.add(conflicts=1)
        raise ConflictError("the head's core changed", current=landed, current_known=True)
    return landed, Head.decode(key, landed.value) if landed.value != data else head


def settle(engine: Engine, writer: Writer, nodes: dict[str, bytes]) -> None:
    """After a commit landed: forget the nodes it replaced, cache the nodes it made."""
    cache = engine.cache
    for node_id in writer.replaced:  # only readers of older heads could want them: they reload
        cache.discard(node_id, replaced=True)
    for node_id, node in writer.new.items():
        cache.put(node_id, node, cached_weight(node, nodes[engine.keys.node(stored_id(node_id))]))


class _Dropped(OutcomeUnknownError):
    """The set was dropped while a commit's outcome was in doubt: its nodes can go, its outcome cannot be told."""


def _cas_head(engine: Engine, snap: Snapshot, head: Head, data: bytes) -> tuple[Any] | None:
    """Compare-and-set the head: ``(version written,)`` if it landed (``None`` in it when the store cannot tell),
    ``None`` if it provably never will; :class:`OutcomeUnknownError` when neither can be proven in the call budget."""
    key, version = engine.keys.head, snap.version
    nonce = head.recent[0]
    doubt = Doubt(engine, nonce)
    with doubt:
        for _ in _retry.STORE_CALLS.attempts():
            try:
                return (engine.store.cas(key, data, version),)
            except ConflictError as exc:
                if doubt.ambiguous is None:  # a definite lost race: nothing of ours was written
                    if exc.current_known:
                        engine.writer.lost_to(exc.current)  # the rebase starts from it without reading it again
                    return None
            except StoreRefusedError:
                if doubt.ambiguous is None:
                    raise  # no attempt of this commit landed (the store spent its own retries): safe to call again
            except StoreUnavailableError as exc:
                doubt.ambiguous = exc
            try:
                record = engine.store.get(key)
            except StoreUnavailableError:
                continue
            if record is not None and record.value == data:
                return (record.version,)
            now = None if record is None else Head.decode(key, record.value)
            if now is None or now.incarnation != snap.head.incarnation:
                # Dropped (maybe started again) since: our nodes can go, but whether we landed first cannot be told.
                raise _Dropped(
                    f"set {engine.name!r} was dropped while commit {nonce} awaited its reply ({doubt.ambiguous}): it "
                    "may have been applied before the drop, or not at all"
                ) from doubt.ambiguous
            fate = now.fate(nonce, snap.head.gen)
            if fate == UNKNOWN and len(head.log) and head.log.base == snap.head.log.base:
                try:
                    fate = _log.fate(engine, now.log, head.log.seq - 1, nonce)  # an append: its last entry tells
                except (MissingNodeError, StoreUnavailableError):
                    # The log moved on since that head was read, or the read failed: read the head again. Never a
                    # rebase: it may have landed.
                    continue
            if fate == LANDED:
                return (None,)
            if fate == LOST:
                return None
            if fate != PENDING:
                break
        raise OutcomeUnknownError(
            f"the store did not confirm commit {nonce} to set {engine.name!r}, and it cannot be proven applied or not "
            f"({doubt.ambiguous}); it is applied entirely or not at all: read the set before retrying"
        ) from doubt.ambiguous
