"""Store-applied appends: a head with a tail of log appends that the store added without a compare-and-set.

A plain compare-and-set of the head loses whenever another commit landed
since the head was read, although an append that only adds log entries is
still valid on the newer head unless an entry logged since touches one of
its members (its old scores may then be wrong) or the head's *core* changed
(a merge, a sealed segment, a load, a drop). A store that checks that
atomically (:meth:`mdss.stores.base.Store.append_log`: a Lua script on
Redis and Redis Cluster, the lock on memory; SQLite, Riak and DynamoDB
compare-and-set instead) appends the commit as a *record* after the
head's bytes instead, so that writers of different members never conflict::

    TAILED, SHA-1 of the core (20 bytes), core length (4 bytes), core, record, record, ...

A seal (the log's inline entries moved to a segment), a merge and a merge's
claim are ordinary compare-and-sets that change the core, but not what any
member's score was: on these stores they write a *bridged* head, which also
keeps what came after the core before it::

    BRIDGED, SHA-1 of the core, core length, core,
        parent's core SHA-1 (20 bytes), parent's tail length (4 bytes), bridge length (4 bytes),
        bridge (the parent's records, then the commit's own, if it has entries), record, record, ...

so that a writer holding the parent still appends in one round trip: the
store checks its record against the bridge's records after those the writer
saw, then against the new tail (:func:`apply`). Only one core back: two core
changes since, or a load or a drop (not bridged), refuse.

The core is a head as an ordinary compare-and-set writes it (format 2). A
record is its length (2 bytes, of what follows) and a sealed body (CRC-32,
``mdss._codec.seal``): the commit's nonce (8 bytes), the number of members
it read (1 byte), an 8-byte token of each (BLAKE2b of the member), and the
msgpack list of its log entries, the last of which carries the nonce.
Decoding applies each record as one commit (:meth:`mdss._head.Head.decode`);
the next ordinary compare-and-set of the head (a seal, a merge) writes it
plain again. :func:`apply` is the store's side, which every store's
implementation follows; an append is idempotent: resent after a lost reply,
it finds its nonce and adds nothing.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import msgpack

from ._codec import _packb, _sealed, check_entry, seal
from .exceptions import ConflictError, CorruptDataError

#: The first byte of a head with a tail (a byte msgpack never uses, so no plain head starts with it).
TAILED = b"\xc1"
#: The first byte of a head with a tail and a bridge from the head a seal replaced (also never msgpack's).
BRIDGED = b"\xc2"
#: Bytes before the core: the marker, the core's SHA-1, its length.
HEADER = 25
#: Bytes before a bridge's records: the parent's core SHA-1, its tail's length, the bridge's length.
BRIDGE_HEADER = 28
#: Bytes of a member's token, and of a nonce.
TOKEN = NONCE = 8
#: The most members one record may guard (their count is one byte).
MOST_MEMBERS = 255
#: The largest record body (its length is two bytes).
MOST_BYTES = 0xFFFF
#: The most bytes of records a head's tail holds (the ``cap`` of :func:`apply`). A writer seals the log's
#: inline entries (the core's and the tail's) into a segment, with an ordinary compare-and-set, once they
#: pass ``mdss._log.INLINE_BYTES`` in the head it holds; the tail holds more only while other writers'
#: appends land meanwhile.
TAIL_BYTES = 3072


class Refused(ConflictError):
    """The store did not append: the head's core changed, a newer record touches one of the members, or
    the head would pass its cap (``full``)."""

    def __init__(self, message: str, *, full: bool = False) -> None:
        super().__init__(message, current_known=True)  # the store fills in ``current``
        self.full = full


def token(member: str) -> bytes:
    return hashlib.blake2b(member.encode(), digest_size=TOKEN).digest()


def record(nonce: str, entries: Sequence[Any], members: Sequence[str]) -> bytes | None:
    """One commit's record: ``entries`` (the last one carries ``nonce``), guarded by the tokens of every
    member it read; ``None`` when it is too large for one record (the commit then goes the ordinary way)."""
    if len(members) > MOST_MEMBERS:
        return None
    body = seal(bytes.fromhex(nonce) + bytes([len(members)]) + b"".join(map(token, members)) + _packb(entries))
    if len(body) > MOST_BYTES:
        return None
    return len(body).to_bytes(2, "big") + body


def layout(data: bytes) -> tuple[int, int, int, int]:
    """Where the parts of a tailed or bridged head begin: the core, the bridge's records (the core's end
    when it has none), the end of the parent's records in the bridge, the tail. Raises ValueError when
    the header or the bridge's header is truncated."""
    if len(data) < HEADER:
        raise ValueError("truncated header")
    end = HEADER + int.from_bytes(data[21:25], "big")
    if data[:1] != BRIDGED:
        return HEADER, end, end, end
    if len(data) < end + BRIDGE_HEADER:
        raise ValueError("truncated bridge header")
    bridge = end + BRIDGE_HEADER
    parents, size = int.from_bytes(data[end + 20 : end + 24], "big"), int.from_bytes(data[end + 24 : end + 28], "big")
    if parents > size or bridge + size > len(data):
        raise ValueError("truncated bridge")
    return HEADER, bridge, bridge + parents, bridge + size


def marked(data: bytes) -> bool:
    """Whether ``data`` is a head with a tail (bridged or not), rather than a plain head."""
    return data[:1] in (TAILED, BRIDGED)


def seen_bytes(held: bytes) -> int:
    """How many bytes of a tailed head hold what a writer holding ``held`` saw (its header and core too)."""
    return len(held) if marked(held) else HEADER + len(held)


def view(held: bytes) -> tuple[bytes, int]:
    """What a writer holding the head bytes ``held`` saw: the SHA-1 of its core, and how many tail bytes."""
    if marked(held):
        return held[1:21], len(held) - layout(held)[3]
    return hashlib.sha1(held).digest(), 0


def core(data: bytes) -> bytes:
    """The core head's bytes of a head, tailed or plain."""
    if not marked(data):
        return data
    return data[HEADER : HEADER + int.from_bytes(data[21:25], "big")]


def tailed(core: bytes) -> bytes:
    """A plain head's bytes as a head with an empty tail."""
    return TAILED + hashlib.sha1(core).digest() + len(core).to_bytes(4, "big") + core


def bridged(core: bytes, held: bytes, record: bytes) -> bytes:
    """The head ``core`` that a seal writes in place of the head ``held``, bridged from it: the records of
    ``held``'s tail and ``record``, the sealing commit's own."""
    parent, seen = view(held)
    bridge = held[len(held) - seen :] + record
    return (
        BRIDGED
        + hashlib.sha1(core).digest()
        + len(core).to_bytes(4, "big")
        + core
        + parent
        + seen.to_bytes(4, "big")
        + len(bridge).to_bytes(4, "big")
        + bridge
    )


def apply(value: bytes | None, sha: bytes, seen: int, record: bytes, cap: int) -> bytes:
    """The store's side of an append: ``value`` with ``record`` appended, or :class:`Refused`.

    ``sha`` and ``seen`` are the writer's :func:`view`. Appends unless the
    head is gone, its core's SHA-1 is not ``sha`` (nor its bridge's parent's,
    whose records up to ``seen`` bytes the writer saw), a record after the
    writer's view (in the bridge or the tail) has one of ``record``'s tokens,
    the framing is damaged (the writer's rebase then reads the head, and
    refuses it as corrupt), or the tail would pass ``cap`` bytes (``full``;
    across a bridge, also when the parent's tail would have: so that once
    refused, an append is refused for good). A record whose nonce is there
    already (after the writer's view: a resend) is not added again
    (``value`` comes back unchanged).
    """
    if value is None:
        raise Refused("the head is gone")
    if marked(value):
        try:
            _, bridge, parents, tail = layout(value)
        except ValueError:
            raise Refused("the head's header is damaged") from None
        if value[1:21] == sha:
            at = tail + seen  # the writer saw the records before: none of them is its own, none conflicts
        elif value[:1] == BRIDGED and value[bridge - BRIDGE_HEADER : bridge - 8] == sha:
            at = bridge + seen  # from the head this one sealed: check the rest of the bridge too
            if at > parents or parents - bridge + len(record) > cap:
                raise Refused("the head's core changed")
        else:
            raise Refused("the head's core changed")
    else:
        if hashlib.sha1(value).digest() != sha:
            raise Refused("the head changed")
        value = tailed(value)
        tail = len(value)
        at = tail + seen
    if at > len(value):
        raise Refused("the writer's view is not a prefix of the head")
    nonce, tokens = record[2:10], record[11 : 11 + TOKEN * record[10]]
    mine = {tokens[i : i + TOKEN] for i in range(0, len(tokens), TOKEN)}
    while at < len(value):
        if at + 11 > len(value) or at + 11 + TOKEN * value[at + 10] > len(value):
            raise Refused("the head's tail is damaged")  # the writer's rebase reads it: CorruptDataError
        if value[at + 2 : at + 10] == nonce:
            return value
        if any(value[t : t + TOKEN] in mine for t in range(at + 11, at + 11 + TOKEN * value[at + 10], TOKEN)):
            raise Refused("a newer append touched the same members")
        at += 2 + int.from_bytes(value[at : at + 2], "big")
    if at != len(value):
        raise Refused("the head's tail is damaged")
    if len(value) - tail + len(record) > cap:
        raise Refused("the head is full", full=True)
    return value + record


def split(key: str, data: bytes) -> tuple[bytes, list[tuple[str, list[Any]]]]:
    """A tailed (or bridged) head's core bytes, and each record's ``(nonce, entries)`` in its tail; the
    core's SHA-1 and the bridge's framing and CRC-32s verified (its records are facts of the core)."""
    try:
        start, bridge, parents, tail = layout(data)
    except ValueError as exc:
        raise CorruptDataError(f"stored head's tail header is damaged ({exc})", key) from None
    found = data[start : start + int.from_bytes(data[21:25], "big")]
    if hashlib.sha1(found).digest() != data[1:21]:
        raise CorruptDataError("stored head's core is damaged (its SHA-1 does not match)", key)
    if bridge != tail:
        ends = [at for at, _ in _frames(key, data[bridge:tail])]
        if parents - bridge not in (0, *ends):
            raise CorruptDataError("stored head's bridge is damaged", key)
    return found, records(key, data[tail:])


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
    found = []
    for _, payload in _frames(key, data):
        nonce = bytes(payload[:NONCE]).hex()
        try:
            entries = [tuple(e) for e in _unpackb(payload[NONCE + 1 + TOKEN * payload[NONCE] :])]
        except (TypeError, ValueError):
            raise CorruptDataError("stored head append is malformed", key) from None
        if not entries or not all(map(check_entry, entries)) or entries[-1][3] != nonce:
            raise CorruptDataError("stored head append is malformed", key)
        found.append((nonce, entries))
    return found


def after(data: bytes, held: bytes) -> bytes:
    """The records of the head ``data``, which took an append from a writer holding ``held``, that the
    writer had not seen, in the order they came: ``data``'s tail after ``held``'s; or, when ``data``
    sealed ``held``'s core, its bridge's records after ``held``'s tail, then its own tail."""
    sha, seen = view(held)
    if data[1:21] == sha:
        return data[seen_bytes(held) :]
    return data[layout(data)[1] + seen :]


def _unpackb(data: Any) -> Any:
    try:
        return msgpack.unpackb(data, raw=False)
    except Exception as exc:  # msgpack raises several unrelated types on garbage
        raise ValueError(str(exc)) from exc
