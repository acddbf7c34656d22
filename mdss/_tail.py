"""Store-applied appends: a head with a tail of log appends that the store added without a compare-and-set.

A compare-and-set of the head loses whenever another commit landed since the head was read, although an append that
only adds log entries stays valid on the newer head unless an entry logged since touches one of its members or the
head's *core* changed. A store that checks that atomically (:meth:`mdss.stores.base.Store.append_log`) appends the
commit as a *record* after the head's bytes instead, so that writers of different members never conflict::

    TAILED, SHA-1 of the core (20 bytes), core length (4 bytes), core, record, record, ...

A seal, a merge and a merge's claim change the core, but not any member's score: the store applies them (:func:`swap`)
as a *bridged* head, which keeps the records that came after the core it replaced (its *parent*), so that writers
holding the parent still append in one round trip (:func:`apply`)::

    BRIDGED, SHA-1 of the core, core length, core,
        parent's core SHA-1 (20 bytes), P (4 bytes), B (4 bytes),
        bridge (the parent's first B bytes of records), record, record, ...

A seal of a bridged head keeps the cores it bridges from as well when writers lag (:func:`swap`), while the records
since the oldest one's fit the cap (and at most :data:`MOST_BRIDGES`), so that a writer a few core changes behind (one
that waited on a throttled key while seals landed) still appends::

    BRIDGES, SHA-1 of the core, core length, core,
        N (1 byte, 2 or more), N times: a core's SHA-1 (20 bytes), start (4 bytes), end (4 bytes), then B (4 bytes),
        records ...

Offsets count from the first record, oldest core first: the records after a core ran from its start to its end (where
they stood when it was replaced; the next core held them up to its own start), and the tail starts at B. A writer whose
core is none of them, a load or a drop (never bridged) refuse.

A record is its length (2 bytes) and a sealed body: the commit's nonce (8 bytes), the number of members it read (1
byte), an 8-byte BLAKE2b token of each, and the msgpack list of its log entries, the last carrying the nonce. Decoding
applies each record as one commit (:meth:`mdss._head.Head.decode`). An append is idempotent: resent after a lost reply,
it finds its nonce and adds nothing. The byte layouts are in docs/format.md; :func:`apply` is the store's side, which
every store's implementation follows.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

from ._codec import _sealed, check_entry, loads, log_entry, pack, seal
from .exceptions import ConflictError, CorruptDataError

#: The first byte of a head with a tail (a byte msgpack never uses, so no plain head starts with it).
TAILED = b"\xc1"
#: The first byte of a head with a tail and a bridge from the head it replaced (msgpack's false: no plain head's).
BRIDGED = b"\xc2"
#: The first byte of a head bridged from several cores (msgpack's true: no plain head's).
BRIDGES = b"\xc3"
#: The first byte of a checkpoint of a store that keeps its heads in slots (``mdss.stores.slots``: msgpack's bin 8, no
#: head's first byte), which a head read without that store refuses.
CHECKPOINT = b"\xc4"
#: Bytes before the core: the marker, the core's SHA-1, its length.
HEADER = 25
#: Bytes before a bridge's records: the parent's core SHA-1, its records' length, the bridge's length.
BRIDGE_HEADER = 28
#: The most cores a head bridges from: a writer further behind reads the head (the records since are past a cap anyway).
MOST_BRIDGES = 8
#: Bytes of a member's token, and of a nonce.
TOKEN = NONCE = 8
#: The most members one record may guard (their count is one byte).
MOST_MEMBERS = 255
#: The largest record body (its length is two bytes).
MOST_BYTES = 0xFFFF
#: The most bytes of records a head's tail holds (the ``cap`` of :func:`apply`), and a bridged head's records since the
#: oldest core it bridges from when sealed. A writer seals the log's inline entries once they pass
#: ``mdss._log.INLINE_BYTES`` in the head it holds; the tail holds more only while others append. Under a per-key write
#: cap, 32 writers on one head made 0.70-0.73 posts per capped head write with 3 KB and one bridge, 0.78-0.83 with 5 KB;
#: bridged from several cores, 0.82-0.84 with 5 KB and 0.88-0.89 with 6 KB (docs/performance.md). Under such writers a
#: head holds at most about twice this after its core.
TAIL_BYTES = 6144


class Refused(ConflictError):
    """The store did not append: the head's core changed, a newer record touches one of the members, or the head would
    pass its cap (``full``)."""

    def __init__(self, message: str, *, full: bool = False) -> None:
        super().__init__(message, current_known=True)  # the store fills in ``current``
        self.full = full


def token(member: str) -> bytes:
    return hashlib.blake2b(member.encode(), digest_size=TOKEN).digest()


def record(nonce: str, entries: Sequence[Any], members: Sequence[str]) -> bytes | None:
    """One commit's record: ``entries`` (the last one carries ``nonce``), guarded by the tokens of every member it read;
    ``None`` when it is too large for one record (the commit then goes the ordinary way)."""
    if len(members) > MOST_MEMBERS:
        return None
    body = seal(bytes.fromhex(nonce) + bytes([len(members)]) + b"".join(map(token, members)) + pack(entries))
    if len(body) > MOST_BYTES:
        return None
    return len(body).to_bytes(2, "big") + body


def layout(data: bytes) -> tuple[int, tuple[tuple[bytes, int, int], ...], int]:
    """Where a tailed or bridged head's records begin; the cores it bridges from, oldest first, each ``(SHA-1, where
    the records after it begin, where they ended when it was replaced)``; and where the tail begins: offsets into
    ``data``. ValueError when a header is truncated or impossible. (Every append's view asks: the usual heads, tailed
    and bridged once, take a short path.)"""
    if len(data) < HEADER:
        raise ValueError("truncated header")
    end = HEADER + int.from_bytes(data[21:25], "big")
    mark = data[:1]
    if mark == TAILED:
        return end, (), end
    if mark == BRIDGED:
        start = end + BRIDGE_HEADER
        if len(data) < start:
            raise ValueError("truncated bridge header")
        first, tail = int.from_bytes(data[end + 20 : end + 24], "big"), int.from_bytes(data[end + 24 : end + 28], "big")
        if tail > first or start + first > len(data):
            raise ValueError("truncated bridge")
        return start, ((data[end : end + 20], start, start + first),), start + tail
    return _bridges(data, end)


def _bridges(data: bytes, end: int) -> tuple[int, tuple[tuple[bytes, int, int], ...], int]:
    """:func:`layout` of a head bridged from several cores, whose core ends at ``end``."""
    n, at = (data[end] if len(data) > end else 0), end + 1
    if not 2 <= n <= MOST_BRIDGES:
        raise ValueError("impossible number of bridges")
    start = at + 28 * n + 4
    if len(data) < start:
        raise ValueError("truncated bridge header")
    cores = []
    for _ in range(n):
        first, last = int.from_bytes(data[at + 20 : at + 24], "big"), int.from_bytes(data[at + 24 : at + 28], "big")
        cores.append((data[at : at + 20], first, last))
        at += 28
    tail = int.from_bytes(data[at : at + 4], "big")
    ordered = all(c[1] <= c[2] for c in cores) and cores[-1][1] <= tail <= cores[-1][2]
    ordered = ordered and all(a[1] <= b[1] <= a[2] <= b[2] for a, b in zip(cores, cores[1:]))
    if not ordered or start + cores[-1][2] > len(data):
        raise ValueError("truncated bridge")
    return start, tuple((sha, start + first, start + last) for sha, first, last in cores), start + tail


def marked(data: bytes) -> bool:
    """Whether ``data`` is a head with a tail (bridged or not), rather than a plain head."""
    return data[:1] in (TAILED, BRIDGED, BRIDGES)


def seen_bytes(held: bytes) -> int:
    """How many bytes of a tailed head hold what a writer holding ``held`` saw (its header and core too)."""
    return len(held) if marked(held) else HEADER + len(held)


def view(held: bytes) -> tuple[bytes, int]:
    """What a writer holding the head bytes ``held`` saw: the SHA-1 of its core, and how many tail bytes."""
    if marked(held):
        return held[1:21], len(held) - layout(held)[2]
    return hashlib.sha1(held).digest(), 0


def core(data: bytes) -> bytes:
    """The core head's bytes of a head, tailed or plain."""
    if not marked(data):
        return data
    return data[HEADER : HEADER + int.from_bytes(data[21:25], "big")]


def tailed(core: bytes) -> bytes:
    """A plain head's bytes as a head with an empty tail."""
    return TAILED + hashlib.sha1(core).digest() + len(core).to_bytes(4, "big") + core


def _bridged(core: bytes, parent: bytes, records: bytes, seen: int) -> bytes:
    """The head ``core`` bridged from the core whose SHA-1 is ``parent``, whose ``records`` came after it: the first
    ``seen`` bytes of them (which ``core`` holds) in the bridge, the rest in the tail."""
    return b"".join(
        (
            BRIDGED,
            hashlib.sha1(core).digest(),
            len(core).to_bytes(4, "big"),
            core,
            parent,
            len(records).to_bytes(4, "big"),
            seen.to_bytes(4, "big"),
            records,
        )
    )


def _chained(core: bytes, value: bytes, cores: list[tuple[bytes, int, int]], tail: int) -> bytes:
    """The head ``core`` bridged from ``cores`` of ``value`` (oldest first, offsets into ``value``; the last is the one
    ``core`` replaced), its tail starting at ``tail``: ``value``'s records from the oldest's start on."""
    start = cores[0][1]
    return b"".join(
        (
            BRIDGES,
            hashlib.sha1(core).digest(),
            len(core).to_bytes(4, "big"),
            core,
            bytes([len(cores)]),
            *(sha + (a - start).to_bytes(4, "big") + (b - start).to_bytes(4, "big") for sha, a, b in cores),
            (tail - start).to_bytes(4, "big"),
            value[start:],
        )
    )


def apply(value: bytes | None, sha: bytes, seen: int, record: bytes, cap: int) -> bytes:
    """The store's side of an append: ``value`` with ``record`` appended, or :class:`Refused`.

    ``sha`` and ``seen`` are the writer's :func:`view`. Refuses when the head is gone, its core's SHA-1 is neither
    ``sha`` nor its parent's, a record after the writer's view has one of ``record``'s tokens, the framing is damaged
    (the writer's rebase then refuses the head as corrupt), or the tail would pass ``cap`` bytes (``full``; from a
    parent, when the records since it would: once refused, refused for good). A resend whose nonce is there already
    is not added again (``value`` comes back unchanged).
    """
    return _change(value, sha, seen, record, cap, None)


def swap(
    value: bytes | None, sha: bytes, seen: int, core: bytes, record: bytes, cap: int, lagging: bool = False
) -> bytes:
    """The store's side of a seal: ``core`` (made from the writer's view) in place of ``value``'s, over the
    records appended since that view, then ``record`` (the sealing commit's own; empty for a merge or a
    merge claim, which change the core but log nothing), or :class:`Refused`.

    Refuses where :func:`apply` would, but never for size when it seals. The result is bridged from ``value``'s core
    (:func:`_bridged`), and, when writers lag (``lagging``: one of the sealer's appends lately took long, as under a
    throttled key; or over a sixteenth of ``cap`` of records appended after its view), from the cores that one bridged
    from while the records since the oldest's and ``record`` fit ``cap`` (:func:`_chained`), so that writers holding any
    of them still append. When another seal (or a merge) replaced the writer's core already, only ``record`` is
    appended, across the bridge, as by :func:`apply`: the writer's core is never used.
    """
    return _change(value, sha, seen, record, cap, core, lagging)


def _change(
    value: bytes | None, sha: bytes, seen: int, record: bytes, cap: int, core: bytes | None, lagging: bool = False
) -> bytes:
    if value is None:
        raise Refused("the head is gone")
    across, since = False, 0
    cores: tuple[tuple[bytes, int, int], ...] = ()
    if not marked(value):
        if hashlib.sha1(value).digest() != sha:
            raise Refused("the head changed")
        value = tailed(value)
        at = tail = len(value)
    else:
        try:
            _, cores, tail = layout(value)
        except ValueError:
            raise Refused("the head's header is damaged") from None
        if value[1:21] == sha:
            at = tail
        else:
            # From a core this one bridges from (the newest first): its records after the writer's view, and the rest.
            found = next((c for c in reversed(cores) if c[0] == sha), None)
            if found is None:
                raise Refused("the head's core changed")
            at = since = found[1]
            across = True
            if seen > found[2] - found[1]:
                raise Refused("the head's core changed")
    at += seen  # the writer saw the records before: none of them is its own, none conflicts
    if at > len(value):
        raise Refused("the writer's view is not a prefix of the head")
    if _walk(value, at, record):
        return value  # a resend that finds its record: landed, whatever the size
    if across and len(value) - since + len(record) > cap:
        raise Refused("the head's core changed")  # the records since that core with it would pass the cap
    if core is not None and not across:
        # The cores this one bridges from are kept only when writers lag: the sealer says one of its appends lately
        # took long (``lagging``: a throttled key), or others appended over a sixteenth of the cap since its view;
        # some writers may then hold those cores. Writers that keep up (alone, or a few on one Redis)
        # keep their heads as small as one bridge does.
        lag = lagging or 16 * (len(value) - tail - seen) > cap
        kept = [*(cores if lag else ()), (sha, tail, len(value))]
        while len(kept) > 1 and (len(kept) > MOST_BRIDGES or len(value) - kept[0][1] + len(record) > cap):
            del kept[0]
        if len(kept) == 1:
            return _bridged(core, sha, value[tail:], seen) + record
        return _chained(core, value, kept, tail + seen) + record
    if not record:  # a seal with no commit of its own (a merge) that another seal came before
        return value
    if len(value) - tail + len(record) > cap:
        raise Refused("the head is full", full=True)
    return value + record


def _walk(value: bytes, at: int, record: bytes) -> bool:
    """Whether ``record``'s nonce is among the records of ``value`` from ``at``; :class:`Refused` if one of them has one
    of its tokens, or the framing is damaged."""
    nonce, tokens = (record[2:10], record[11 : 11 + TOKEN * record[10]]) if record else (None, b"")
    mine = {tokens[i : i + TOKEN] for i in range(0, len(tokens), TOKEN)}
    while at < len(value):
        if at + 11 > len(value) or at + 11 + TOKEN * value[at + 10] > len(value):
            raise Refused("the head's tail is damaged")  # the writer's rebase reads it: CorruptDataError
        if value[at + 2 : at + 10] == nonce:
            return True
        if any(value[t : t + TOKEN] in mine for t in range(at + 11, at + 11 + TOKEN * value[at + 10], TOKEN)):
            raise Refused("a newer append touched the same members")
        at += 2 + int.from_bytes(value[at : at + 2], "big")
    if at != len(value):
        raise Refused("the head's tail is damaged")
    return False


def split(key: str, data: bytes) -> tuple[bytes, list[tuple[str, list[Any]]]]:
    """A tailed (or bridged) head's core bytes, and each record's ``(nonce, entries)`` in its tail; the core's SHA-1 and
    the bridge's framing and CRC-32s verified (the core holds its records' entries)."""
    try:
        start, cores, tail = layout(data)
    except ValueError as exc:
        raise CorruptDataError(f"stored head's tail header is damaged ({exc})", key) from None
    found = data[HEADER : HEADER + int.from_bytes(data[21:25], "big")]
    if hashlib.sha1(found).digest() != data[1:21]:
        raise CorruptDataError("stored head's core is damaged (its SHA-1 does not match)", key)
    frames = _frames(key, data[tail:])  # framed and checked once: the bridges' ends and the records both use them
    if cores:
        ends = {start, tail}
        ends.update(start + end for end, _ in _frames(key, data[start:tail]))
        ends.update(tail + end for end, _ in frames)
        if cores[0][1] != start or not all(c[1] in ends and c[2] in ends for c in cores):
            raise CorruptDataError("stored head's bridge is damaged (its parent's records end mid-record)", key)
    return found, _decoded(key, frames)


def _frames(key: str, data: bytes) -> list[tuple[int, memoryview]]:
    """Each record's end offset and payload (CRC-32 verified) in ``data``, a run of records."""
    at, found = 0, []
    while at < len(data):
        size = int.from_bytes(data[at : at + 2], "big")
        body = data[at + 2 : at + 2 + size]
        payload = _sealed(body) if len(body) == size else None
        if payload is None or len(payload) < NONCE + 1 or len(payload) < NONCE + 1 + TOKEN * payload[NONCE]:
            raise CorruptDataError("stored head's tail is truncated or damaged", key)
        at += 2 + size
        found.append((at, payload))
    return found


def records(key: str, data: bytes) -> list[tuple[str, list[Any]]]:
    """Each record's ``(nonce, entries)`` in a tail's bytes."""
    return _decoded(key, _frames(key, data))


def _decoded(key: str, frames: list[tuple[int, memoryview]]) -> list[tuple[str, list[Any]]]:
    """Each record's ``(nonce, entries)`` from its checked frame (:func:`_frames`)."""
    found = []
    for _, payload in frames:
        nonce = bytes(payload[:NONCE]).hex()
        try:
            entries = [log_entry(e) for e in _unpackb(payload[NONCE + 1 + TOKEN * payload[NONCE] :])]
        except (TypeError, ValueError):
            raise CorruptDataError("stored head append is malformed", key) from None
        if not entries or not all(map(check_entry, entries)) or entries[-1][3] != nonce:
            raise CorruptDataError("stored head append is malformed", key)
        found.append((nonce, entries))
    return found


def after(data: bytes, held: bytes) -> bytes:
    """The records of the head ``data`` (which took an append or a seal from a writer holding ``held``) that the writer
    had not seen, in order: ``data``'s tail after ``held``'s; or, when ``data``'s core replaced ``held``'s, its
    records since ``held``'s core after ``held``'s, and the rest of its tail."""
    sha, seen = view(held)
    if data[1:21] == sha:
        return data[seen_bytes(held) :]
    return data[next(c[1] for c in reversed(layout(data)[1]) if c[0] == sha) + seen :]


def _unpackb(data: Any) -> Any:
    try:
        return loads(data)
    except Exception as exc:  # msgpack raises several unrelated types on garbage
        raise ValueError(str(exc)) from exc
