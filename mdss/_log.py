"""The update log: writes append resolved entries to the head; this module stores and reads them.

A write appends one entry per changed member, ``(member, old score, new score, nonce)``, to the log the head carries
(:class:`mdss._head.Log`) instead of rewriting tree nodes. The writer resolves the old score, so that the log alone says
what each logged member was in the trees and is now. A merge (``mdss._merge``) folds the log into both trees, rewriting
each touched node once for many updates (docs/architecture.md, "The update log").

The newest entries live in the head itself, up to :data:`INLINE_BYTES`; then they are sealed into an immutable segment,
named by the head (up to :data:`SEGS_INLINE` of them) and then, compacted into one, by an immutable log manifest of at
most :data:`PAGE_SEGS` segments: a log whose manifest fills merges, so that no value grows with the history. Reads see
the log through an in-memory overlay (``mdss._overlay``, ``mdss._ranking``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import attrs

from ._codec import decode_log_page, decode_segment, encode_log_page, encode_segment, pack
from ._engine import Engine
from ._head import Head, Log, LogEntry
from ._writer import new_id
from .exceptions import CorruptDataError, MissingNodeError

#: The most bytes of entries the head holds inline before they are sealed into a segment.
INLINE_BYTES = 1024
#: The most bytes of entries in one segment: a batch appended at once is sealed into several (DynamoDB takes
#: values up to 400 KB).
SEGMENT_BYTES = 256 << 10
#: The most sealed segments the head names before they move to a new log manifest.
SEGS_INLINE = 8
#: The most bytes of entries one commit appends to the log; a larger batch goes straight into the trees (a direct
#: commit): so that one commit's segments are always far fewer than a log manifest holds.
BATCH_BYTES = SEGS_INLINE * SEGMENT_BYTES
#: The most segments a log manifest lists: about 56 KB with the longest ids, a seventh of DynamoDB's 400 KB item; about
#: 8 MB of log. A log whose manifest lists half of it merges; an append whose move would pass it merges first
#: (:class:`Full`), so no manifest is ever longer (docs/architecture.md, "The log's bounds").
PAGE_SEGS = 1024
#: Bytes of merge written per update that the default ``log_limit`` aims at: with the head write (up to
#: 1.5 KB) and the segments' share, an update writes about 2.5-3 KB in all, under the 4 KB target.
MERGE_BYTES = 1024
#: Bounds of the default ``log_limit``: small sets still batch; huge ones keep the overlay and a cold
#: reader's catch-up bounded (100,000 entries: a few MB).
LOG_MIN, LOG_MAX = 16, 100_000
#: Stored bytes per member over both trees before any is measured (the benchmark's members: about 41).
ENTRY_BYTES_GUESS = 40.0
#: How long a merge claim holds off other mergers (a crashed merger's claim expires).
CLAIM_MS = 10_000

_MISSING = object()


def log_limit(engine: Engine, head: Head) -> int:
    """How long the log grows before a merge: the set's ``log_limit``, else derived from the byte target.

    A merge of ``L`` random updates rewrites about every entry set of both trees, so an update costs about ``tree bytes
    / L`` of merge, plus a head write and its share of segments: ``L = n * entry bytes / MERGE_BYTES`` (both trees).
    """
    if engine.log_limit is not None:
        return engine.log_limit
    wanted = math.ceil(head.scores.count * entry_bytes(engine) / MERGE_BYTES)
    return min(max(wanted, LOG_MIN), LOG_MAX)


def entry_bytes(engine: Engine) -> float:
    """Stored bytes per member, both trees: as this process's last load or merge measured them, else from the entry sets
    it has read, else a guess; so that processes that never merged derive about the same limit as those that did."""
    if engine.writer.entry_bytes is not None:
        return engine.writer.entry_bytes
    cache = engine.cache
    if cache.leaf_entries >= 1000:
        return 2 * cache.leaf_bytes / cache.leaf_entries
    return ENTRY_BYTES_GUESS


# -- appending ----------------------------------------------------------------


def sealing(log: Log, entries: Sequence[LogEntry]) -> bool:
    """Whether appending ``entries`` to ``log`` seals its inline entries into a segment (:func:`appended`): a commit
    that seals writes nodes first, and decides how before it builds them."""
    return len(pack((*log.inline, *entries))) > INLINE_BYTES


def appended(
    engine: Engine, head: Head, entries: Sequence[LogEntry], *, seal: bool = False
) -> tuple[Log, dict[str, bytes], list[str]]:
    """The head's log with ``entries`` appended, the segments and log manifest to store first, and the ids of what
    they replace.

    When the inline entries pass :data:`INLINE_BYTES` (or ``seal``) they are sealed into a segment; when the head would
    name more than :data:`SEGS_INLINE` segments, its segments move to a new log manifest (the old one is replaced),
    rewritten as one segment (:func:`_compacted`): so the manifest grows by one entry per :data:`SEGS_INLINE` seals, and
    never past :data:`PAGE_SEGS`: a move that would pass it raises :class:`Full` instead, before anything is written.
    """
    log = head.log
    inline = (*log.inline, *entries)
    seq = log.seq + len(entries)
    if not seal and len(pack(inline)) <= INLINE_BYTES:
        return attrs.evolve(log, seq=seq, inline=inline), {}, []
    keys = engine.keys
    first = seq - len(inline)
    stored, sealed = {}, []
    for start, part in _pieces(inline):
        segment = new_id(head.epoch)
        stored[keys.node(segment)] = encode_segment(first + start, part)
        sealed.append((segment, first + start))
    segs, pages, replaced = (*log.segs, *sealed), log.pages, []
    if len(segs) > SEGS_INLINE:
        older = read_log_page(engine, log.pages) if log.pages is not None else ()
        moved, written = _compacted(engine, head) if log.segs else ([], {})
        segs = tuple(sealed)
        if len(segs) > SEGS_INLINE:  # one batch sealed into more pieces than the head names: they move too
            moved, segs = [*moved, *segs], ()
        listed = (*older, *moved)
        if len(listed) > PAGE_SEGS:
            raise Full(f"the update log manifest of set {engine.name!r} would list {len(listed)} segments")
        stored.update(written)
        pages = new_id(head.epoch)
        stored[keys.node(pages)] = encode_log_page(listed)
        engine.reader.keep_page(pages, listed)  # this writer's next move starts from it: no read, no decoding
        replaced = [seg for seg, _ in log.segs]
        if log.pages is not None:
            replaced.append(log.pages)
    return attrs.evolve(log, seq=seq, inline=(), segs=segs, pages=pages), stored, replaced


def _compacted(engine: Engine, head: Head) -> tuple[list[tuple[str, int]], dict[str, bytes]]:
    """The head's sealed segments rewritten as one (several if past :data:`SEGMENT_BYTES`), from the log's base on:
    ``(id, first sequence number)`` of each, and what to store (else the manifest would gain an entry per seal). The
    entries come from this process's overlay, which a commit's snapshot has just extended (no read), else the segments.
    """
    log = head.log
    start, end = max(log.segs[0][1], log.base), log.seq - len(log.inline)
    found = engine.reader.logged(head.incarnation, start, end)
    if found is None:
        found = entries(engine, log, start)[: end - start]
    out, stored = [], {}
    for offset, part in _pieces(found):
        segment = new_id(head.epoch)
        stored[engine.keys.node(segment)] = encode_segment(start + offset, part)
        out.append((segment, start + offset))
    return out, stored


def listed(engine: Engine, log: Log) -> int:
    """How many segments the log manifest lists (it is read unless cached; none without a manifest)."""
    return 0 if log.pages is None else len(read_log_page(engine, log.pages))


def crowded(engine: Engine, log: Log) -> bool:
    """Whether the log manifest lists half of :data:`PAGE_SEGS` or more, as far as this process knows without a read
    (the writer that moved segments to it has it cached): then the log merges, as at ``log_limit`` entries. The hard
    bound (:class:`Full`) holds without it."""
    found = None if log.pages is None else engine.reader.page(log.pages)
    return found is not None and len(found) >= PAGE_SEGS // 2


class Full(Exception):
    """An append would move segments to a log manifest past :data:`PAGE_SEGS`: nothing was written, the commit merges
    the log first (``mdss._commit``), as a log at twice ``log_limit`` does."""


def _pieces(entries: Sequence[LogEntry]) -> list[tuple[int, Sequence[LogEntry]]]:
    """``entries`` cut into runs of at most about :data:`SEGMENT_BYTES` (one run, mostly): ``(offset, run)``."""
    if len(pack(entries)) <= SEGMENT_BYTES:
        return [(0, entries)]
    pieces, start, size = [], 0, 0
    for i, entry in enumerate(entries):
        weight = len(pack(entry))
        if size + weight > SEGMENT_BYTES and i > start:
            pieces.append((start, entries[start:i]))
            start, size = i, 0
        size += weight
    pieces.append((start, entries[start:]))
    return pieces


def read_log_page(engine: Engine, page: str) -> tuple[tuple[str, int], ...]:
    """The segments a log manifest lists (cached: manifests are immutable)."""
    cached = engine.reader.page(page)
    if cached is None:
        key = engine.keys.node(page)
        data = engine.store.get_many([key])[0]
        if data is None:
            raise MissingNodeError("a log manifest the head names is missing", key)
        cached = decode_log_page(key, data)
        engine.reader.keep_page(page, cached)
    return cached


def segments(engine: Engine, log: Log) -> list[tuple[str, int]]:
    """Every sealed segment the head's log leads to, oldest first (reads the log manifest if there is one)."""
    older = read_log_page(engine, log.pages) if log.pages is not None else ()
    return [*older, *log.segs]


def node_ids(engine: Engine, log: Log) -> set[str]:
    """The ids of the log's stored objects: its manifest and its segments."""
    found = {seg for seg, _ in segments(engine, log)}
    if log.pages is not None:
        found.add(log.pages)
    return found


def entries(engine: Engine, log: Log, since: int) -> list[LogEntry]:
    """The log's entries from sequence number ``since`` (at least ``log.base``) to ``log.seq - 1``, reading only the
    segments that hold them: none, the head's newer segments (one round trip), or also the log manifest (one more)."""
    inline_first = log.seq - len(log.inline)
    if since >= inline_first:
        return list(log.inline[since - inline_first :])
    segs = list(log.segs)
    if not segs or segs[0][1] > since:
        segs = segments(engine, log)
    ends = [s[1] for s in segs[1:]] + [inline_first]
    wanted = [(seg, first) for (seg, first), end in zip(segs, ends) if end > since]
    keys = [engine.keys.node(seg) for seg, _ in wanted]
    start = wanted[0][1] if wanted else inline_first
    found: list[LogEntry] = []
    for key, data, (_, listed) in zip(keys, engine.store.get_many(keys), wanted):
        if data is None:
            raise MissingNodeError("a log segment the head names is missing", key)
        first, stored = decode_segment(key, data)
        if first != listed or first != start + len(found):
            raise CorruptDataError(f"log segment starts at {first}, not {start + len(found)}", key)
        found.extend(stored)
    if start + len(found) != inline_first or start > since:
        raise CorruptDataError("the log's segments do not reach its inline entries", engine.keys.head)
    return [*found[since - start :], *log.inline]


def fate(engine: Engine, log: Log, seq: int, nonce: str) -> str:
    """What became of an append whose last entry would be number ``seq``, as the log tells (its nonce is there, or
    another's): ``landed``, ``lost``, or ``unknown`` when merged already."""
    if seq < log.base:
        return "unknown"
    if seq >= log.seq:  # sequence numbers never go back: it did not land where it was built to
        return "lost"
    return "landed" if entries(engine, log, seq)[0][3] == nonce else "lost"
