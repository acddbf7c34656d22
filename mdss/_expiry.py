"""Expiry: a set dropped at a moment named in its head (Redis' EXPIRE, EXPIREAT, PERSIST and TTL).

The moment lives in the head (:attr:`mdss._head.Head.expires`, milliseconds since the Unix epoch) and is set or cleared
by a head-only commit: the same trees and log, one generation on, by compare-and-set with lost-race retries, as gc
moves its epoch (``mdss._garbage.rewrite_head``). Once the moment has passed by the reading process's clock
(``mdss._head.clock``, looked up at each call: the tests replace it), the set reads as absent
(``mdss._snapshot.absent``), as after ``drop()``; the next write drops it in the store first, only if its head is still
the expired one (:func:`writable`), then writes into a fresh set; ``gc(sweep=True)`` drops it too (:func:`sweep`). On a
store that expires keys itself (one Redis server, DynamoDB's TTL), the set's nodes also get its expiry, fenced by the
head (:func:`_move`, :func:`_arm`; docs/architecture.md, "Expiry").
"""

from __future__ import annotations

import contextlib
import datetime
import math
import secrets
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from . import _garbage, _head, _snapshot
from ._head import FENCED, Head
from ._order import finite
from .exceptions import InvalidArgumentError, MdssError, shown

if TYPE_CHECKING:
    from ._engine import Engine
    from ._snapshot import Snapshot
    from .stores.base import Record

#: The latest moment a head can hold (milliseconds since the epoch, below 2**53: exact in a double).
LATEST = (1 << 53) - 1


def after(seconds: float) -> int:
    """The moment ``seconds`` from now (this process's clock), in milliseconds since the epoch; refuses what is not a
    finite number of seconds (``bool`` included)."""
    if not finite(seconds):
        raise InvalidArgumentError(f"expire() takes a finite number of seconds, not {shown(seconds, 40)}")
    return _bounded(_head.clock() * 1000 + seconds * 1000)


def at(when: datetime.datetime | float) -> int:
    """The moment ``when`` (an aware datetime, or seconds since the Unix epoch) in milliseconds since the epoch; a naive
    datetime is refused: whose clock it reads would be a guess."""
    if isinstance(when, datetime.datetime):
        if when.tzinfo is None or when.utcoffset() is None:
            raise InvalidArgumentError("expire_at() takes an aware datetime (with a tzinfo), not a naive one")
        return _bounded(when.timestamp() * 1000)
    if not finite(when):
        raise InvalidArgumentError(f"expire_at() takes an aware datetime or epoch seconds, not {shown(when, 40)}")
    return _bounded(when * 1000)


def _bounded(ms: float) -> int:
    if ms > LATEST:
        raise InvalidArgumentError(f"expiry moment {ms / 1000:g} s after the epoch is past the latest a head holds")
    return max(math.floor(ms), 0)  # down: a moment of now (expire(0)) has passed at once


def passed(moment: int) -> bool:
    """Whether ``moment`` has passed by this process's clock (as :meth:`Head.expired` tells of a head's)."""
    return moment <= _head.clock() * 1000


def expire(engine: Engine, moment: int, create: bool = False) -> bool:
    """Set the set's moment by a head-only commit; whether the set existed (a set already expired does not). A moment
    already passed expires the set at once: it reads as dropped, the next write drops it. With ``create``, a set
    without a head gets an empty one first (a shard of a sharded set that has others: ``mdss._shards``)."""
    if create:
        writable(engine, _snapshot.snapshot(engine, True))
    return _move(engine, moment)[0]


def has_members(engine: Engine) -> bool:
    """Whether the set holds a member now (read fresh): Redis' EXPIRE finds no key a set's last member left."""
    return bool(_snapshot.read(engine, lambda snap: snap.ranking.count, 0.0))


def persist(engine: Engine) -> bool:
    """Clear the set's moment; whether it had one (a set expired already has none: it is gone, as in Redis)."""
    existed, had = _move(engine, None)
    return existed and had


def _move(engine: Engine, moment: int | None) -> tuple[bool, bool]:
    """Move the head's moment to ``moment`` (``None``: none): whether the set existed, and whether it had a moment.

    On a store that expires keys itself, the invariant is: a node a live head names expires by itself no earlier than
    the head's moment. Moving the moment later (or clearing it) while nodes may carry an expiry (``Head.native``)
    therefore takes two head commits: the first fences further expiries off (:data:`FENCED` and an id: the scripts
    that give them check the head's value), then every key's expiry is cancelled, once per fence (on DynamoDB the key
    keeps the fenced head's generation, which no armer of an older head passes), then the second moves
    the moment (retried on lost races without cancelling again while the fence is the same). Interrupted between them,
    the head keeps its moment and its fence: the next call goes on. Then the nodes are given the new moment's expiry
    (:func:`_arm`)."""
    store = engine.store
    existed = had = False
    moved: Head | None = None
    cancelled: str | None = None  # the fence under which every key's expiry was cancelled

    def step(head: Head) -> Head | None:
        nonlocal existed, had, moved, cancelled
        existed, had, moved = not head.expired(), head.expires is not None, None
        if not existed:
            return None
        nonce, native = secrets.token_hex(8), head.native
        later = moment is None or head.expires is None or moment > head.expires
        if native is not None and later:
            if not native.startswith(FENCED):
                return head.next(nonce, native=FENCED + secrets.token_hex(4))
            if cancelled != native:
                listed = _listed(engine)  # cancelled before the head moves: no live head names a node due earlier
                for i in range(0, len(listed), ARM_BATCH):
                    store.persist_keys(listed[i : i + ARM_BATCH], gen=head.gen)
                cancelled = native
            native = None
        elif head.expires == moment and (moment is None or not store.expires_keys or armed(native)):
            moved = head  # nothing to change (armed already, by this call or another)
            return None
        if moment is not None and store.expires_keys:
            native = secrets.token_hex(8)
        moved = head.next(nonce, expires=moment, native=native)
        return moved

    for _ in engine.policy.attempts():
        _garbage.rewrite_head(engine, step, "expire")
        if moved is not None or not existed:
            break
    engine.recent.forget()  # this object's next read sees it
    if moved is not None and moment is not None and armed(moved.native):
        _arm(engine, moment, moved.native)  # type: ignore[arg-type]
    return existed, had


def armed(native: str | None) -> bool:
    """Whether a head's ``native`` is a token: a process may give nodes the store's own expiry."""
    return native is not None and not native.startswith(FENCED)


#: How often :func:`_arm` reads the head again when writers move it between its listing and its script.
ARM_TRIES = 3
#: Keys per call of :meth:`~mdss.stores.base.Store.expire_keys` (one script on Redis).
ARM_BATCH = 500


def follow(engine: Engine, head: Head, version: Any, keys: Sequence[str]) -> None:
    """After a commit that wrote ``keys`` landed ``head`` (whose stored value has ``version``; ``None``: unknown): on a
    store that expires keys itself, give them the expiry :func:`_arm` gave the set's other nodes, by the same script,
    fenced by that version (refused, and nothing changed, if any writer moved the head since; on DynamoDB by the head's
    generation: refused for each key a later fence reached). Never fails the commit that called it: a key left without
    an expiry only takes space."""
    store = engine.store
    if not (store.expires_keys and armed(head.native) and head.expires is not None and version is not None and keys):
        return
    at = head.expires + round(engine.gc_grace * 1000)
    with contextlib.suppress(MdssError):  # whatever fails: the commit landed
        for i in range(0, len(keys), ARM_BATCH):
            if not store.expire_keys(keys[i : i + ARM_BATCH], at, engine.keys.head, version, gen=head.gen):
                return


def _listed(engine: Engine) -> list[str]:
    store, keys = engine.store, engine.keys
    return [*store.keys(keys.nodes), *store.keys(keys.notes)]


def _arm(engine: Engine, moment: int, token: str) -> None:
    """Give every node and note key of the set the store's own expiry, ``gc_grace`` after ``moment`` (readers of a
    snapshot taken before the moment get that long, as after any commit), by scripts that check the head is still the
    one read, with this call's ``token``. Writers that move the head meanwhile make it try again, :data:`ARM_TRIES`
    times; then it gives up, leaving the rest to the next write or ``gc(sweep=True)`` (never unsafe: a key without an
    expiry only takes space). Keys written after it get none.

    A store that fences by generation alone (``Store.expiry_checks_head`` false: DynamoDB) gets, once, only the keys
    the head read leads to (:func:`_arm_named`)."""
    store, key = engine.store, engine.keys.head
    at = moment + round(engine.gc_grace * 1000)
    if not store.expiry_checks_head:
        _arm_named(engine, at, moment, token)
        return
    for _ in range(ARM_TRIES):
        record = store.get(key)
        if record is None:
            return
        head = engine.decode(record.value)
        if head.native != token or head.expires != moment or head.expired():
            return
        listed = _listed(engine)
        if all(
            store.expire_keys(listed[i : i + ARM_BATCH], at, key, record.version, gen=head.gen)
            for i in range(0, len(listed), ARM_BATCH)
        ):
            return


def _arm_named(engine: Engine, at: int, moment: int, token: str) -> None:
    """:func:`_arm` where the store checks no head, only the fence of each key (DynamoDB): the keys the head read names,
    fenced by its generation. Each was written before that head landed, so any later fence lists it and cancels its
    expiry (or refuses this one); a key listed instead could be a node written after a fence and named by a later,
    live head (docs/architecture.md, "Expiry"). Orphans and replaced nodes get none: gc collects them."""

    def look(snap: Snapshot) -> tuple[Head, Any, list[str]] | None:
        head = snap.head
        if snap.version is None or head.native != token or head.expires != moment:
            return None  # absent, expired, or moved on by another expire() or persist()
        return head, snap.version, _garbage.leads_to(engine, snap)

    found = _snapshot.read(engine, look, 0.0)
    if found is None:
        return
    head, version, keys = found
    for i in range(0, len(keys), ARM_BATCH):
        if not engine.store.expire_keys(keys[i : i + ARM_BATCH], at, engine.keys.head, version, gen=head.gen):
            return  # fenced by a later persist() or expire() (or a key collected meanwhile): theirs to finish


def moment(engine: Engine) -> int | None:
    """The set's moment as its head holds it now (``None``: none, or the set is absent or expired), read fresh."""
    return _snapshot.read(engine, lambda snap: snap.head.expires, 0.0)


def left(moment: int | None) -> float | None:
    """What ``ttl()`` answers for ``moment``: the seconds left by this process's clock (``None`` for none)."""
    return None if moment is None else max(moment / 1000 - _head.clock(), 0.0)


def writable(engine: Engine, snap: Snapshot) -> Snapshot:
    """The snapshot a write starts from: ``snap`` (taken with ``create``) unless its head has expired; then the set is
    dropped, only if its head is still an expired one (another writer may have dropped it and written the fresh set
    already: that write stays), and a fresh head made. The drop is ``drop()``'s, with its handling of commits in
    flight."""
    while snap.head.expired():
        _garbage.drop(engine, Head.expired)
        snap = _snapshot.snapshot(engine, True)
    return snap


def expired(engine: Engine) -> bool:
    """Whether the set's stored head has expired (one read; a damaged head, or another set's settings, is not)."""
    record: Record | None = engine.store.get(engine.keys.head)
    try:
        return record is not None and engine.decode(record.value).expired()
    except ValueError:  # gc or check reports it as they would
        return False


def sweep(engine: Engine) -> bool:
    """``gc(sweep=True)``'s part: drop the set if its head has expired (on a store without its own expiry, nothing else
    reclaims the space of a set nobody writes again); whether it was dropped."""
    return expired(engine) and _garbage.drop(engine, Head.expired)


def stored_members(engine: Engine) -> list[str]:
    """Every member of the set as its head stands, expired or not (a board's registry: its windows are still stored
    until dropped). For small sets: one list."""
    snap = _snapshot.snapshot(engine, expired=True)
    return snap.ranking.slice(0, snap.ranking.count)[0]
