"""Commits as appends the store applies to the head (``mdss._tail``), and the seals of their entries.

On a store that applies appends (Redis), a commit that only appends to the update log sends its record, which the store
adds after whatever head it holds; when the inline entries pass their budget, one writer seals them into a segment.
"""

from __future__ import annotations

import time
from typing import Any

import attrs

from . import _garbage, _log, _retry, _tail
from ._codec import pack
from ._engine import Engine
from ._head import Head, Log
from ._publish import Doubt
from ._snapshot import Snapshot
from .exceptions import (
    ConflictError,
    CorruptDataError,
    MissingNodeError,
    OutcomeUnknownError,
    StoreRefusedError,
    StoreUnavailableError,
)
from .stores.base import Record


def usable(engine: Engine, snap: Snapshot) -> bool:
    """Whether the commit goes to the store as an append (``mdss._tail``): on a store that applies them, unless the
    last one found the head full (then this one seals the tail into a segment)."""
    if not engine.store.appends or snap.data is None:
        return False
    return not engine.writer.take_full()


def seals(engine: Engine, log: Log) -> bool:
    """Whether a commit that takes the log's inline entries past ``INLINE_BYTES`` (in the head this writer holds) seals
    them, on a store that applies appends: only the writer whose commit crossed it (others append: a beaten seal is a
    segment written for nothing), or after the last append found the tail full, or past twice that (the one that
    crossed did not seal). The one that crossed reads the head first (``engine.writer.sealer``) and seals it."""
    if engine.writer.tail_full:
        return True
    size = len(pack(log.inline))
    return size <= _log.INLINE_BYTES or size > 2 * _log.INLINE_BYTES


def seal(engine: Engine, snap: Snapshot, record: bytes, nonce: str, changed: list[Any]) -> bool:
    """Seal the inline entries of the head this writer holds into a segment, and have the store put the new core under
    the records appended since, then ``record`` (``mdss._tail.swap``): True if it landed, False if refused. Other
    writers' appends never make it lose. If another seal came first, the record is appended across that one; the
    segment is deleted again whenever it is not the head's."""
    sealed, stored, replaced = _log.appended(engine, snap.head, (), seal=True)
    head = attrs.evolve(snap.head, log=sealed)  # no commit of its own: the same entries, sealed
    notes = _garbage.notes_of(engine, head, replaced)  # of the log manifest a new one replaces
    head, pages = _garbage.attach_notes(engine, head, list(notes))
    core, written = head.encode(), {**stored, **notes, **pages}
    atomic = engine.store.seals_nodes  # the nodes go with the core, or not at all: nothing to discard
    if not atomic:
        engine.store.put_many(written)
    if not append(engine, snap, record, nonce, changed, (core, head, written if atomic else {})):
        if not atomic:
            _garbage.discard(engine, list(written))
        return False
    engine.writer.take_full()
    if engine.writer.held is None:
        return True  # landed after a lost reply, sealed or not: gc() finds what is not named
    if _tail.core(engine.writer.held[0].value) != core:
        if not atomic:
            _garbage.discard(engine, list(written))  # another seal came first: only the record was appended
    else:
        engine.deletions.defer([engine.keys.node(i) for i in replaced] + list(notes))
    return True


def append(
    engine: Engine,
    snap: Snapshot,
    record: bytes,
    nonce: str,
    changed: list[Any],
    sealing: tuple[bytes, Head, dict[str, bytes]] | None = None,
) -> bool:
    """Have the store append ``record`` to the head (``mdss._tail``; with ``sealing``, a core's bytes and head, and the
    nodes the store writes with it where it can, seal: put it in place of the head's core first): True if it landed,
    False if refused (it never will; the rebase starts from the head returned).

    After a lost reply the same request is sent again: the store adds the record only once. If the store then refuses
    it, :func:`_appended` tells from the head whether the first one landed.
    """
    held = snap.data
    assert held is not None
    key, doubt = engine.keys.head, Doubt(engine, nonce)
    with doubt:
        for _ in _retry.STORE_CALLS.attempts():
            sent = time.monotonic()
            try:
                if sealing is None:
                    landed = engine.store.append_log(key, held, record, _tail.TAIL_BYTES)
                else:
                    landed = engine.store.swap_core(
                        key, held, sealing[0], record, _tail.TAIL_BYTES, sealing[2], lagging=engine.writer.lagging()
                    )
            except ConflictError as exc:
                engine.writer.took(time.monotonic() - sent)
                if doubt.ambiguous is None:
                    engine.writer.lost_to(exc.current, full=bool(getattr(exc, "full", False)))
                    return False
                try:
                    if not _appended(engine, snap, exc.current, nonce, doubt.ambiguous):
                        engine.writer.lost_to(exc.current)
                        return False
                except OutcomeUnknownError:
                    raise
                except (MissingNodeError, StoreUnavailableError):
                    continue  # the log moved on while it was read, or the read failed: ask the store again
                engine.writer.release()  # landed, under commits this process has not decoded: the next one reads
                engine.commits += 1
                return True
            except StoreRefusedError:
                if doubt.ambiguous is None:
                    raise  # no attempt of this append landed (the store spent its own retries): safe to call again
                continue
            except StoreUnavailableError as exc:
                doubt.ambiguous = exc
                continue
            engine.writer.took(time.monotonic() - sent)
            _landed(engine, snap, landed, record, changed, sealing)
            engine.commits += 1
            return True
        raise OutcomeUnknownError(
            f"the store did not confirm append {nonce} to set {engine.name!r}, and it cannot be proven applied or not "
            f"({doubt.ambiguous}); it is applied entirely or not at all: read the set before retrying"
        ) from doubt.ambiguous


def _landed(
    engine: Engine,
    snap: Snapshot,
    landed: Record,
    record: bytes,
    changed: list[Any],
    sealing: tuple[bytes, Head, dict[str, bytes]] | None,
) -> None:
    """Hold the head an append landed in: the head it was sent from, plus the records others appended meanwhile, plus
    its own (unless a resend found it among those); when its core replaced the writer's (a bridged head), that core:
    the writer's own when its seal landed (no need to decode it), else another's, decoded."""
    assert snap.data is not None
    value, head = landed.value, snap.head
    suffix = _tail.after(value, snap.data)
    mine = suffix.endswith(record)
    records = _tail.records(engine.keys.head, suffix[: -len(record)] if mine else suffix)
    if mine:
        records.append((changed[-1][3], changed))
    head = head.appended(records)
    entries = [entry for _, appended in records for entry in appended]
    now = _tail.core(value)
    if now != _tail.core(snap.data):
        if sealing is not None and now == sealing[0]:
            sealed = sealing[1].appended(records)  # the records after its bridge: what decoding would apply
        else:
            sealed = Head.decode(engine.keys.head, value)
        if sealed.log.seq != head.log.seq or sealed.incarnation != head.incarnation:
            raise CorruptDataError("a bridged head does not follow from the head it replaced", engine.keys.head)
        head = sealed
    engine.remember(head, value, landed.version)
    engine.reader.applied(head, snap.head.log.seq, entries, engine.ordering.keys)


def _appended(engine: Engine, snap: Snapshot, current: Record | None, nonce: str, ambiguous: Exception) -> bool:
    """Whether an append whose reply was lost landed, from the head the store holds now (which refused the same append
    sent again). Raises :class:`OutcomeUnknownError` when that cannot be told."""
    key = engine.keys.head
    now = None if current is None else Head.decode(key, current.value)
    if now is None or now.incarnation != snap.head.incarnation:
        raise OutcomeUnknownError(
            f"set {engine.name!r} was dropped while append {nonce} awaited its reply ({ambiguous}): it may have "
            "been applied before the drop, or not at all"
        ) from ambiguous
    if nonce in now.recent:
        return True
    if now.gen - snap.head.gen <= len(now.recent):
        return False  # every commit since the writer's view is among the recent ones, and it is not: it never lands
    assert current is not None and snap.data is not None
    if _tail.core(current.value) == _tail.core(snap.data):
        return False  # the same core: the store would have found the record, and it never will take it
    seq = snap.head.log.seq  # the append's first entry came at or after it
    if seq < now.log.base:
        raise OutcomeUnknownError(
            f"append {nonce} to set {engine.name!r} lost its reply ({ambiguous}), and a merge folded the log "
            "since: it is applied entirely or not at all; read the set before retrying"
        ) from ambiguous
    # The core moved on (a seal, a merge): the append landed before it, or it never will.
    return any(entry[3] == nonce for entry in _log.entries(engine, now.log, seq))
