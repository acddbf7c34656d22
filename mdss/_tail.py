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
#: Bytes before the core: the marker, the core's SHA-1, its length.
HEADER = 25
#: Bytes of a member's token, and of a nonce.
TOKEN = NONCE = 8
#: The most members one record may guard (their count is one byte).
MOST_MEMBERS = 255
#: The largest record body (its length is two bytes).
MOST_BYTES = 0xFFFF
#: The most bytes of records a head's tail holds. A writer seals the log's inline entries (the core's and
#: the tail's) into a segment, with an ordinary compare-and-set, once they pass ``mdss._log.INLINE_BYTES``
#: in the head it holds; the tail holds more only while other writers' appends land meanwhile.
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


def seen_bytes(held: bytes) -> int:
    """How many bytes of a tailed head hold what a writer holding ``held`` saw (its header and core too)."""
    return len(held) if held[:1] == TAILED else HEADER + len(held)


def view(held: bytes) -> tuple[bytes, int]:
    """What a writer holding the head bytes ``held`` saw: the SHA-1 of its core, and how many tail bytes."""
    if held[:1] == TAILED:
        return held[1:21], len(held) - HEADER - int.from_bytes(held[21:25], "big")
    return hashlib.sha1(held).digest(), 0


def core(data: bytes) -> bytes:
    """The core head's bytes of a head, tailed or plain."""
    if data[:1] != TAILED:
        return data
    return data[HEADER : HEADER + int.from_bytes(data[21:25], "big")]


def tailed(core: bytes) -> bytes:
    """A plain head's bytes as a head with an empty tail."""
    return TAILED + hashlib.sha1(core).digest() + len(core).to_bytes(4, "big") + core


def apply(value: bytes | None, sha: bytes, seen: int, record: bytes, cap: int) -> bytes:
    """The store's side of an append: ``value`` with ``record`` appended, or :class:`Refused`.

    ``sha`` and ``seen`` are the writer's :func:`view`. Appends unless the
    head is gone, its core's SHA-1 is not ``sha``, a record after the
    writer's ``seen`` tail bytes has one of ``record``'s tokens, the tail's
    framing is damaged (the writer's rebase then reads the head, and refuses
    it as corrupt), or the value would pass ``cap`` bytes (``full``). A
    record whose nonce is there already (after the writer's view: a resend)
    is not added again (``value`` comes back unchanged).
    """
    if value is None:
        raise Refused("the head is gone")
    if value[:1] == TAILED:
        if value[1:21] != sha:
            raise Refused("the head's core changed")
        start = HEADER + int.from_bytes(value[21:25], "big")
    else:
        if hashlib.sha1(value).digest() != sha:
            raise Refused("the head changed")
        value = TAILED + sha + len(value).to_bytes(4, "big") + value
        start = len(value)
    at = start + seen  # the writer saw the records before: none of them is its own, none conflicts
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
    if len(value) + len(record) > cap:
        raise Refused("the head is full", full=True)
    return value + record


def split(key: str, data: bytes) -> tuple[bytes, list[tuple[str, list[Any]]]]:
    """A tailed head's core bytes, and each record's ``(nonce, entries)``; its SHA-1 verified."""
    if len(data) < HEADER:
        raise CorruptDataError("stored head's tail header is truncated", key)
    n = int.from_bytes(data[21:25], "big")
    found = data[HEADER : HEADER + n]
    if len(found) != n or hashlib.sha1(found).digest() != data[1:21]:
        raise CorruptDataError("stored head's core is damaged (its SHA-1 does not match)", key)
    return found, records(key, data[HEADER + n :])


def records(key: str, data: bytes) -> list[tuple[str, list[Any]]]:
    """Each record's ``(nonce, entries)`` in a tail's bytes."""
    at, found = 0, []
    while at < len(data):
        size = int.from_bytes(data[at : at + 2], "big")
        body = data[at + 2 : at + 2 + size]
        payload = _sealed(body) if len(body) == size else None
        if payload is None or len(payload) < NONCE + 1 or len(payload) < NONCE + 1 + TOKEN * payload[NONCE]:
            raise CorruptDataError("stored head's tail is truncated or damaged", key)
        nonce = bytes(payload[:NONCE]).hex()
        try:
            entries = [tuple(e) for e in _unpackb(payload[NONCE + 1 + TOKEN * payload[NONCE] :])]
        except (TypeError, ValueError):
            raise CorruptDataError("stored head append is malformed", key) from None
        if not entries or not all(map(check_entry, entries)) or entries[-1][3] != nonce:
            raise CorruptDataError("stored head append is malformed", key)
        found.append((nonce, entries))
        at += 2 + size
    return found


def _unpackb(data: Any) -> Any:
    try:
        return msgpack.unpackb(data, raw=False)
    except Exception as exc:  # msgpack raises several unrelated types on garbage
        raise ValueError(str(exc)) from exc
