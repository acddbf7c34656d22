"""Snapshots: the head read (or made, by a first write) and decoded, with the update log applied.

Every read takes one snapshot: it reads the head once and descends immutable nodes, so whatever it returns is one
committed state (:func:`read` retries on a newer head when a node it needs was collected meanwhile). A head found
missing is told apart from a set never made by the set's marker (:func:`mark`, :func:`_unseen`).
"""

from __future__ import annotations

import contextlib
import functools
import heapq
import itertools
import secrets
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, TypeVar

from ._codec import MARKER
from ._engine import Engine
from ._head import Head
from ._log import entries
from ._order import Order, member_key, score_of
from ._overlay import Chain, View
from ._ranking import Index, Ranking
from ._tree import Source, Tree, parts
from .exceptions import (
    ConflictError,
    CorruptDataError,
    HeadMissingError,
    MdssError,
    MissingNodeError,
    StoreRefusedError,
    StoreUnavailableError,
)
from .stores.base import Record

T = TypeVar("T")
#: The members a read routes to the entry sets it reads along with the head (:func:`_along`): a few owners' rows, not a
#: long list's, whose routing would repeat the descent's work member by member.
ALONG = 64


class Snapshot:
    """One committed state: the head as read (with its record's version), both trees as it names them (the score tree
    by sort key, the member index member -> score), and the same with the update log applied: ``ranking`` and
    ``index``, what reads use (the trees themselves when the log is empty)."""

    __slots__ = ("version", "data", "head", "score_tree", "member_index", "view", "ranking", "index")

    def __init__(
        self,
        record: Record | None,
        head: Head,
        source: Source,
        order: Order,
        view: View | None,
        find_chain: Callable[[], Chain] | None = None,
    ) -> None:
        self.version = None if record is None else record.version
        self.data = record.values[0] if record is not None and len(record.values) == 1 else None
        self.head = head
        scores, members = head.scores, head.members
        bound = head.node_bytes
        plain = order.plain if order.reaching else None
        self.score_tree = Tree(source, order.tree_key, scores.root, scores.height, scores.count, bound, plain)
        self.member_index = Tree(source, member_key, members.root, members.height, members.count, bound)
        self.view = view
        if view is None:
            self.ranking: Tree | Ranking = self.score_tree
            self.index: Tree | Index = self.member_index
        else:
            self.ranking = Ranking(self.score_tree, view, order)
            self.index = Index(self.member_index, view, find_chain)

    def by_member(self, start: str | None = None, values: bool = False) -> Iterator[tuple[str, Any]]:
        """Every ``(member, score)`` of this state in member order, from ``start`` (inclusive) if given (``values``:
        the member's value, not its score): the member index's entry sets streamed (:meth:`Tree.leaves`), the update
        log's changes merged in as each entry set goes by. Memory stays near a batch of entry sets and the log,
        whatever the set's size (a union's source, a board's rows)."""
        changes = {} if self.view is None else self.view.changes()
        plain = _same if values else score_of
        logged = sorted((m, plain(now)) for m, (_, now) in changes.items() if start is None or m >= start)
        names = [m for m, _ in logged]
        j = 0
        for leaf in self.member_index.leaves(start):
            members, scores = leaf.members, leaf.scores
            if not values and tuple in set(map(type, scores)):  # values with data: their scores
                scores = tuple(map(score_of, scores))
            lo = 0 if start is None else bisect_left(members, start)
            if not members:
                continue
            if not changes:
                yield from zip(members[lo:], scores[lo:]) if lo else zip(members, scores)
                continue
            k = bisect_right(names, members[-1], j)
            kept = [(m, s) for m, s in zip(members[lo:], scores[lo:]) if m not in changes]
            yield from heapq.merge(kept, [(m, s) for m, s in logged[j:k] if s is not None])
            j = k
        yield from ((m, s) for m, s in logged[j:] if s is not None)


def _same(value: Any) -> Any:
    return value


def _kept(engine: Engine, record: Record, head: Head) -> Snapshot:
    """A snapshot of a head a fresh read kept (``mdss._recent``): decoded then, so that ``engine.head`` stays the newest
    one decoded; the snapshot the last read made of it if that is the one kept (``Engine.made``), else made again.
    Empty once the head has expired."""
    if head.expired():
        return absent(engine)
    made = _again(engine, head, record.version)
    if made is not None:
        return made
    logged = view(engine, head) if len(head.log) else None
    chain = functools.partial(engine.reader.earlier, head)
    return Snapshot(record, head, Source(engine.store, engine.keys, engine.cache), engine.ordering, logged, chain)


def adopt_stored_settings(engine: Engine, order: str | None, chunk_size: int | None, tiebreak: str | None) -> None:
    """At open: take the stored set's settings, or refuse different ones. A damaged head does not stop an open: reads
    raise, ``check()`` reports, ``drop()`` and ``load(replace=True)`` work."""
    record = engine.store.get(engine.keys.head)
    try:
        stored = None if record is None else Head.decode(engine.keys.head, record.value)
    except CorruptDataError:
        return
    if stored is not None and not stored.expired():  # an expired set is a dropped one: any settings start it afresh
        engine.adopt(stored, order, chunk_size, tiebreak)


def read(
    engine: Engine,
    fn: Callable[[Snapshot], T],
    max_staleness: float | None = None,
    near: Sequence[str] = (),
    guess: bool = False,
) -> T:
    """Run ``fn`` on a snapshot: the one read last if it is at most ``max_staleness`` seconds old (``None``: the set's
    bound; ``mdss._recent``), else a fresh one; if a node it needs was collected meanwhile, on a newer one. A fresh
    one is read with the member index's entry sets that hold ``near`` (members ``fn`` looks up), as the last head
    decoded names them, in the head's round trip where the store can (:func:`_along`). ``guess``: ``fn`` reads only
    (it may run twice); it runs on the snapshot of the head read last while the head's read travels where the store
    can (:func:`_guessed`), and what it returned is the answer when the head comes back unchanged."""
    recent = engine.recent
    kept = recent.within(max_staleness)
    if kept is not None:
        try:
            return fn(_kept(engine, *kept))
        except MissingNodeError:  # a node of the kept head collected since: read fresh from here on
            recent.forget()
    began = recent.begin(max_staleness)
    known = _along(engine, near) if near else None
    guessed: tuple[Snapshot, Source, T] | None = None
    if known is None and guess:
        known, guessed = _guessed(engine, fn)
    snap = snapshot(engine, known=known, again=True)
    if began is not None and snap.data is not None:
        recent.keep((Record((snap.data,), snap.version), snap.head), began, snap.data)
    if guessed is not None and guessed[0] is snap:  # the head unchanged: the snapshot the guess used is this read's
        guessed[1].online(engine.store)
        return guessed[2]
    try:
        return fn(snap)  # the common case, without the retry loop's bookkeeping
    except MissingNodeError:
        collected_meanwhile(engine, snap)
    for _ in engine.policy.attempts():
        snap = snapshot(engine)
        try:
            return fn(snap)
        except MissingNodeError:
            collected_meanwhile(engine, snap)
    raise ConflictError(
        f"reads of set {engine.name!r} kept losing their snapshot to garbage collection for "
        f"{engine.policy.budget:g} s: raise gc_grace above the time a read takes"
    )


def _guessed(
    engine: Engine, fn: Callable[[Snapshot], T]
) -> tuple[tuple[Record | None] | None, tuple[Snapshot, Source, T] | None]:
    """The head's record, read while ``fn`` runs on the snapshot the last read found unchanged (``Engine.settled``)
    with the nodes this process has cached alone, where the store overlaps them (``Store.get_during``): on Redis a
    warm read then costs about the head's round trip, its Python spent while the reply travels. ``(None, None)``: no
    such snapshot (the last read found a new head: writes are frequent, a guess would mostly be wasted). The guess,
    ``(that snapshot, the guess's node source, what fn returned)``, is ``None`` when ``fn`` needed a node not cached,
    or failed: the read answers on the head as read."""
    last = engine.settled() if engine.store.overlaps_reads else None
    if last is None:
        return None, None
    source = Source(OFFLINE, engine.keys, engine.cache)
    offline = Snapshot(
        None if last.data is None else Record((last.data,), last.version),
        last.head,
        source,
        engine.ordering,
        last.view,
        functools.partial(engine.reader.earlier, last.head),
    )
    record, ran, answer = engine.store.get_during(engine.keys.head, lambda: fn(offline))
    return (record,), ((last, source, answer) if ran else None)  # type: ignore[return-value]


class _Offline:
    """The store of a guess's snapshot (:func:`_guessed`): a node not cached ends the guess."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):  # what introspection asks (doctest, copy): not a read
            raise AttributeError(name)
        raise MissingNodeError("a guess needs a node this process has not cached")


OFFLINE: Any = _Offline()


class Switch:
    """The store of a sharded set's guess (``ShardedSet._guessed``): every call goes to ``target``, :data:`OFFLINE`
    while the guess runs, the store once it is kept, so that what its answer holds on to reads from then on."""

    def __init__(self, target: Any) -> None:
        self.target = target

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.target, name)


def _along(engine: Engine, members: Sequence[str]) -> tuple[Record | None] | None:
    """The head's record, read with the entry sets of the member index that hold ``members`` and that this process has
    not cached, as the last head it decoded names them (routed by cached manifests), in one round trip where the store
    can (``Store.get_along``): a cold lookup of a member then costs no round trip of its own while no merge replaced
    those entry sets. Nodes are immutable: one read for a head since replaced is cached for nothing. ``None``: nothing
    to read along, or a store that cannot."""
    head = engine.head
    if head is None or head.members.root is None or not engine.store.reads_along:
        return None
    source = Source(engine.store, engine.keys, engine.cache)
    tree = Tree(source, member_key, head.members.root, head.members.height, head.members.count)
    routed = members[:ALONG]  # the rest, if any, are read in the descent's batch, as without this
    ids = list(dict.fromkeys(node_id for node_id in map(tree.cached_leaf, routed) if node_id is not None))
    if not ids:
        return None
    stored = [[engine.keys.node(part) for part in parts(node_id)] for node_id in ids]
    found = engine.store.get_along(engine.keys.head, [key for keys in stored for key in keys])
    if found is None:
        return None
    record, values = found
    datas = iter(values)
    for node_id, keys in zip(ids, stored):
        got = [next(datas) for _ in keys]
        with contextlib.suppress(MdssError):  # collected or damaged: the read meets it in its own descent
            source.keep(node_id, keys, got, member_key)
    return (record,)


def warm(engine: Engine) -> int:
    """Read the set's entry sets (both trees, a batch per round trip) into this process's node cache until all are read
    or the cache would evict one: how many it read. Best effort: a node replaced and collected meanwhile ends it."""
    snap, cache = snapshot(engine), engine.cache
    evicted, read = cache.dropped, 0
    try:
        for tree in (snap.score_tree, snap.member_index):
            for _ in tree.leaves() if tree.root is not None else ():
                read += 1
                if cache.dropped != evicted:
                    return read
    except MissingNodeError:
        pass
    return read


def headless(engine: Engine) -> bool:
    """Whether nodes of the set are stored while it has no head (a listing, stopped at the first that exists; the head
    read again after it). Nodes that this object's own lost commits could not delete are deleted first."""
    engine.deletions.delete_stranded()
    listing = engine.store.keys(engine.keys.nodes)
    while listed := list(itertools.islice(listing, 16)):  # past tombstones (Riak lists deleted keys a while)
        if engine.store.existing(listed):
            return engine.store.get(engine.keys.head) is None
    return False


def mark(engine: Engine) -> None:
    """Store the set's marker when this object made the head (:func:`snapshot`), and once per object after a merge it
    landed (sets made before markers, or whose maker's put failed): from now on a head found missing was lost, not never
    made (:func:`_unseen`). A blind put, not a compare-and-set "only if absent", which would count a conflict on every
    set that has one. If the store fails, the write goes on; the next merge tries again."""
    try:
        engine.store.put(engine.keys.marker, MARKER)
    except (ConflictError, StoreUnavailableError):
        return
    engine.writer.mark()


def _unseen(engine: Engine) -> Record | None:
    """The head of a set this object has not seen, which a read just found missing: ``None`` if the set was never made
    or was dropped (its marker is absent: one more round trip); the head if it was made meanwhile. A marked set without
    a head whose nodes remain lost its head: :class:`HeadMissingError`. A marker without a head nor nodes (a first write
    whose ``drop()`` came between its read of the head and its marker) is deleted: later reads are one round trip."""
    store, keys = engine.store, engine.keys
    if store.get(keys.marker) is None:
        return None
    record = store.get(keys.head)  # made just now (the head comes before the marker)?
    if record is None:
        if headless(engine):
            raise _missing(engine)
        store.delete(keys.marker)
    return record


def _missing(engine: Engine) -> HeadMissingError:
    return HeadMissingError(
        f"set {engine.name!r} has stored nodes but no head: the head was lost (a Redis evicting keys "
        "needs maxmemory-policy noeviction) or a drop() was interrupted; drop() removes the rest",
        engine.keys.head,
    )


def snapshot(
    engine: Engine,
    create: bool = False,
    known: tuple[Record | None] | None = None,
    *,
    expired: bool = False,
    again: bool = False,
) -> Snapshot:
    """The current state of ``engine``'s set; ``create``: make an empty head first if there is none (a first write, by
    compare-and-set "only if absent", so every node is minted under a head). ``known`` holds the head's record when a
    lost compare-and-set just returned it: then it is not read again. A head whose moment has passed (``mdss._expiry``)
    reads as absent; with ``create`` it is returned as it is, for the writer to drop it first, and with ``expired`` too
    (what a board's ``drop()`` lists of its expired registry). ``again`` (a read's, :func:`read`): the snapshot the
    last such read made, if the head is unchanged since (``Engine.made``), and the one made now is kept for the next.

    A head that vanished (of a set this object has seen, or any set's when a write would start it afresh) while nodes
    remain is refused with :class:`HeadMissingError`, never taken for an empty set. On a store whose keys never vanish
    unless deleted (``Store.evicts`` false: DynamoDB, where that check is a scan), only the head of a set this object
    has seen is looked for. A reader that never saw the head tells the cases apart by the marker (:func:`_unseen`).
    """
    store, key = engine.store, engine.keys.head
    record = store.get(key) if known is None else known[0]
    if record is None and not create and engine.head is None and known is None:
        record = _unseen(engine)
    while record is None and (create or engine.head is not None):
        if (store.evicts or engine.head is not None) and headless(engine):
            raise _missing(engine)
        if not create:
            engine.forget()
            break
        fresh = Head(
            engine.order,
            engine.chunk_size,
            epoch=1,
            incarnation=secrets.token_hex(8),
            node_bytes=engine.node_bytes,
            tiebreak=engine.tiebreak,
        )
        try:
            store.cas(key, fresh.next(secrets.token_hex(8)).encode(), None)
        except StoreRefusedError:  # nothing written, and reading again would ask the same (a read-only file)
            raise
        except (ConflictError, StoreUnavailableError):  # made by another writer (which marks it), or reply lost
            pass
        else:
            mark(engine)
        engine.on_start()  # a shard of a sharded set stores the set's settings again if a drop removed them
        record = store.get(key)
    if record is None:
        return absent(engine)
    head = engine.decode(record.value)
    engine.writer.hold(record, head)
    reading = not (create or expired)
    if reading and head.expired():  # dropped at its moment (mdss._expiry): the next write drops it in the store
        return absent(engine)
    again = again and reading
    if again and (made := _again(engine, head, record.version)) is not None:
        return made  # the head read last, unchanged: its snapshot as made then
    try:
        logged = view(engine, head) if len(head.log) else None
    except MissingNodeError:  # a log segment of an older head, collected since: take the newer head
        now = store.get(key)
        if now is not None and now.version == record.version:
            raise
        engine.writer.release()
        return snapshot(engine, create, (now,), expired=expired, again=again)
    chain = functools.partial(engine.reader.earlier, head)  # found when first needed (Index)
    snap = Snapshot(record, head, Source(store, engine.keys, engine.cache), engine.ordering, logged, chain)
    if again:
        engine.make(head, record.version, snap)
    return snap


def _again(engine: Engine, head: Head, version: Any) -> Snapshot | None:
    """The snapshot a read made of ``head`` at ``version`` (``Engine.made``), to use again; ``None``: none kept."""
    made = engine.made(head, version)
    if made is not None:
        made.score_tree.source.unpin()  # an operation's pins, not the snapshot's: the cache bounds what stays
    return made


def absent(engine: Engine) -> Snapshot:
    """The snapshot of a set without a head (never made, dropped, or expired: ``mdss._expiry``): empty."""
    return Snapshot(
        None,
        Head(engine.order, engine.chunk_size, tiebreak=engine.tiebreak),
        Source(engine.store, engine.keys, engine.cache),
        engine.ordering,
        None,
    )


def collected_meanwhile(engine: Engine, snap: Snapshot) -> None:
    """After a MissingNodeError: return if the head moved since ``snap`` (the caller retries), else raise."""
    record = engine.store.get(engine.keys.head)
    if (None if record is None else record.version) == snap.version:
        raise MissingNodeError(
            f"set {engine.name!r}: a node the current head names is missing from the store (the set is damaged)"
        )


def any_moved(pairs: Iterable[tuple[Engine, Snapshot]]) -> bool:
    """After a MissingNodeError in a read of several snapshots (a union's sources): whether any head moved since its
    snapshot (read them again), else the node is missing from a current tree (the set is damaged)."""
    for engine, snap in pairs:
        record = engine.store.get(engine.keys.head)
        if (None if record is None else record.version) != snap.version:
            return True
    return False


def view(engine: Engine, head: Head) -> View | None:
    """The view of ``head``'s update log in the engine's overlay, read up to it (``None``: an empty log)."""
    return engine.reader.view(head, engine.ordering.keys, functools.partial(entries, engine))
