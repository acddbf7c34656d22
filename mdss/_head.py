"""The head: the one mutable record of a set, and the snapshot a read or a commit takes of it.

A head names the roots of both trees (the score tree and the member index),
the set's settings, a generation that every commit increments, the gc epoch
(see ``mdss._garbage``), and the nonces of the last :data:`RECENT` commits,
newest first, so that a writer whose compare-and-set reply was lost can prove
whether its commit landed. Every head write goes through :meth:`Head.next`,
which keeps ``recent[i]`` the nonce of generation ``gen - i``.
"""

from __future__ import annotations

import functools
import itertools
import secrets
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import attrs

from . import _tail
from ._codec import FORMAT, MARKER, MAX_HEIGHT, _packb, seal, unpack
from ._log import EMPTY_LOG, Chain, Index, Log, LogEntry, Ranking, View, earlier, overlay_view
from ._order import Order, member_key
from ._tree import Source, Tree
from .exceptions import (
    ConflictError,
    CorruptDataError,
    HeadMissingError,
    MissingNodeError,
    SettingsMismatchError,
    StoreUnavailableError,
)
from .stores.base import Record

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ._sortedset import SortedSet

#: How many commit nonces a head keeps (17 bytes each).
RECENT = 16
#: How many garbage notes a head holds before they move to a note page.
NOTES_INLINE = 8
#: Largest chunk size (entries per entry set, children per manifest).
MAX_CHUNK = 100_000

LANDED, LOST, PENDING, UNKNOWN = "landed", "lost", "pending", "unknown"


@attrs.frozen
class TreeRef:
    """Where a tree starts: its root node id (``None`` when empty), its height and its entry count."""

    root: str | None = None
    height: int = 0
    count: int = 0

    def _check(self) -> None:
        if type(self.height) is not int or type(self.count) is not int:
            raise TypeError("height and count must be ints")
        if self.root is None:
            if self.height or self.count:
                raise ValueError("an empty tree has height 0 and count 0")
        elif type(self.root) is not str or not 0 <= self.height <= MAX_HEIGHT or self.count < 1:
            raise ValueError(f"impossible tree {self.root!r}, height {self.height}, count {self.count}")


EMPTY = TreeRef()


@attrs.frozen
class Head:
    """One committed state of a set (immutable: a commit makes a new one)."""

    order: str
    chunk: int
    gen: int = 0
    epoch: int = 0
    epoch_gen: int = 0
    recent: tuple[str, ...] = ()
    scores: TreeRef = EMPTY
    members: TreeRef = EMPTY
    #: Garbage notes of recent commits, newest first; older ones are in pages, newest ``note_page`` first,
    #: each naming the page before it, down to ``notes_done`` (collected already).
    notes: tuple[str, ...] = ()
    note_page: str | None = None
    notes_done: str | None = None
    #: Random, chosen when the set is created: a set dropped and started again is another incarnation, and a
    #: commit built on the old one can tell that its version is gone (generations start again at 1).
    incarnation: str = ""
    log: Log = EMPTY_LOG
    #: The bytes a node may weigh (``mdss._tree.weights``), for sets whose members can be large (leaderboard
    #: rows); ``None``: nodes are bounded in items only. Chosen when the set is created.
    node_bytes: int | None = None
    #: Random, and new whenever a write changes the set other than by the log's entries (a load, a drop),
    #: or when the head was written by a version of mdss that did not write one (``None``): within one
    #: lineage the set at log sequence number ``b`` is the set at ``a`` plus entries ``a`` to ``b - 1``, so
    #: that a reader can follow it by the entries alone (``mdss._merged``).
    lineage: str | None = None

    def next(self, nonce: str, **changes: Any) -> Head:
        """The head a commit with ``nonce`` makes from this one: one generation on, its nonce first.

        A new ``epoch`` records the generation it starts at (``epoch_gen``); a head without a lineage gets
        one.
        """
        if "epoch" in changes:
            changes["epoch_gen"] = self.gen + 1
        if self.lineage is None and "lineage" not in changes:
            changes["lineage"] = new_lineage()
        return attrs.evolve(self, gen=self.gen + 1, recent=(nonce, *self.recent)[:RECENT], **changes)

    def appended(self, records: Sequence[tuple[str, Sequence[LogEntry]]]) -> Head:
        """The head after ``records``, commits that each appended entries to the log (``mdss._tail``): what
        as many :meth:`next` calls make, in one step (a writer follows every other writer's appends)."""
        if not records:
            return self
        entries = [entry for _, appended in records for entry in appended]
        nonces = tuple(nonce for nonce, _ in reversed(records))
        return attrs.evolve(
            self,
            gen=self.gen + len(records),
            recent=(*nonces, *self.recent)[:RECENT],
            log=self.log.extended(entries),
            lineage=new_lineage() if self.lineage is None else self.lineage,
        )

    def fate(self, nonce: str, base_gen: int) -> str:
        """What became of a commit with ``nonce`` built on generation ``base_gen``, as this head tells.

        :data:`LANDED`, :data:`LOST` (another commit took its generation: it
        can never land), :data:`PENDING` (the head has not moved: it may
        still land) or :data:`UNKNOWN` (so many commits followed that its
        generation scrolled out of ``recent``).
        """
        if self.gen <= base_gen:
            return PENDING
        index = self.gen - base_gen - 1
        if index >= len(self.recent):
            return UNKNOWN
        return LANDED if self.recent[index] == nonce else LOST

    def encode(self) -> bytes:
        return seal(
            _packb(
                {
                    "v": FORMAT,
                    "order": self.order,
                    "chunk": self.chunk,
                    "gen": self.gen,
                    "epoch": self.epoch,
                    "epoch_gen": self.epoch_gen,
                    "recent": self.recent,  # tuples pack as msgpack arrays, as lists do
                    "score": (self.scores.root, self.scores.height, self.scores.count),
                    "member": (self.members.root, self.members.height, self.members.count),
                    "notes": self.notes,
                    "note_page": self.note_page,
                    "notes_done": self.notes_done,
                    "inc": self.incarnation,
                    **({} if self.log == EMPTY_LOG else {"log": self.log.encode()}),
                    **({} if self.node_bytes is None else {"nb": self.node_bytes}),
                    **({} if self.lineage is None else {"lin": self.lineage}),
                }
            )
        )

    @classmethod
    def decode(cls, key: str, data: bytes) -> Head:
        """A head from stored bytes (format 2, or format 1 which had no epoch); validates every value's range.

        A head with a tail (``mdss._tail.TAILED``, or ``BRIDGED``) is its core head plus the appends the store
        applied after it (``mdss._tail``), each one commit.
        """
        if _tail.marked(data):
            core, records = _tail.split(key, data)
            if _tail.marked(core):
                raise CorruptDataError("stored head's core has a tail of its own", key)
            return cls.decode(key, core).appended(records)
        _, found = unpack(key, data, "head")
        if type(found) is not dict:
            raise CorruptDataError("stored head is malformed (not a map)", key)
        try:
            head = cls(
                order=found["order"],
                chunk=found["chunk"],
                gen=found["gen"],
                epoch=found.get("epoch", 0),
                epoch_gen=found.get("epoch_gen", 0),
                recent=tuple(found.get("recent", ())),
                scores=TreeRef(*found["score"]),
                members=TreeRef(*found["member"]),
                notes=tuple(found.get("notes", ())),
                note_page=found.get("note_page"),
                notes_done=found.get("notes_done"),
                incarnation=found.get("inc", ""),
                log=Log.decode(found.get("log")),
                node_bytes=found.get("nb"),
                lineage=found.get("lin"),
            )
            head._check()
        except (KeyError, TypeError, ValueError) as exc:
            raise CorruptDataError(f"stored head is malformed ({type(exc).__name__}: {exc})", key) from None
        return head

    def _check(self) -> None:
        if self.order not in ("asc", "desc"):
            raise ValueError(f"order {self.order!r}")
        for name in ("chunk", "gen", "epoch", "epoch_gen"):
            if type(getattr(self, name)) is not int:
                raise TypeError(f"{name} must be an int")
        if not 2 <= self.chunk <= MAX_CHUNK:
            raise ValueError(f"chunk {self.chunk} outside 2..{MAX_CHUNK}")
        if self.node_bytes is not None and (type(self.node_bytes) is not int or not 256 <= self.node_bytes <= 1 << 30):
            raise ValueError(f"node_bytes {self.node_bytes!r} outside 256..2**30")
        if self.gen < 0 or self.epoch < 0 or not 0 <= self.epoch_gen <= self.gen:
            raise ValueError(f"impossible generation {self.gen}, epoch {self.epoch} from generation {self.epoch_gen}")
        if len(self.recent) > min(self.gen, RECENT) or not all(type(n) is str for n in self.recent):
            raise ValueError("recent commit nonces do not match the generation")
        if not all(type(n) is str for n in self.notes) or len(self.notes) > NOTES_INLINE:
            raise ValueError(f"garbage notes must be at most {NOTES_INLINE} ids")
        if type(self.incarnation) is not str:
            raise TypeError("the incarnation is a string")
        if self.lineage is not None and (type(self.lineage) is not str or len(self.lineage) > 64):
            raise TypeError("the lineage is a string of at most 64 characters")
        if not all(p is None or type(p) is str for p in (self.note_page, self.notes_done)):
            raise TypeError("note pages are named by id strings")
        self.scores._check()
        self.members._check()
        if self.scores.count != self.members.count:
            raise ValueError(f"{self.scores.count} scores but {self.members.count} members")


def new_lineage() -> str:
    """A new :attr:`Head.lineage`: 48 random bits."""
    return secrets.token_hex(6)


class Snapshot:
    """One committed state: the head as read (with its record's version), both trees as it names them,
    the score tree (by sort key) and the member index (member -> score), and the same with the update
    log applied: ``ranking`` and ``index``, what reads use (the trees themselves when the log is empty).
    """

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
        self.score_tree = Tree(source, order.key, scores.root, scores.height, scores.count, bound)
        self.member_index = Tree(source, member_key, members.root, members.height, members.count, bound)
        self.view = view
        if view is None:
            self.ranking: Tree | Ranking = self.score_tree
            self.index: Tree | Index = self.member_index
        else:
            self.ranking = Ranking(self.score_tree, view, order.score_of)
            self.index = Index(self.member_index, view, find_chain)


def adopt_stored_settings(sset: SortedSet, order: str | None, chunk_size: int | None) -> None:
    """At open: take the stored set's settings, or refuse different ones. A damaged head does not stop an
    open: reads raise, ``check()`` reports, ``drop()`` and ``load(replace=True)`` work."""
    record = sset.store.get(sset._keys.head)
    try:
        stored = None if record is None else Head.decode(sset._keys.head, record.value)
    except CorruptDataError:
        return
    if stored is not None:
        for what, wanted, have in (("order", order, stored.order), ("chunk_size", chunk_size, stored.chunk)):
            if wanted is not None and wanted != have:
                raise SettingsMismatchError(f"set {sset.name!r} is stored with {what}={have!r}, not {wanted!r}")
        sset._settle(stored.order, stored.chunk)
        sset._explicit = True


def remember(sset: SortedSet, head: Head, data: bytes, version: Any) -> None:
    """The head (its bytes, the version written) a commit of ``sset`` just published: the next read of them
    needs no decoding, and the next commit starts from it without reading (when the version is known)."""
    sset._head_bytes, sset._head = data, head
    sset._held = None if version is None else (Record((data,), version), head)
    sset._explicit = True


def forget(sset: SortedSet) -> None:
    sset._head_bytes = sset._head = sset._held = None


def decode_for(sset: SortedSet, data: bytes) -> Head:
    """The head of ``sset`` from stored bytes (decoded once per distinct value), checked against its settings.

    An object opened without settings before its set existed adopts those of
    whoever created it; otherwise different settings mean another set.
    """
    if data == sset._head_bytes:
        return sset._head  # type: ignore[return-value]
    head = _extended(sset, data) or Head.decode(sset._keys.head, data)
    if (head.order, head.chunk) != (sset.order, sset.chunk_size):
        if sset._explicit or sset._head is not None:
            raise SettingsMismatchError(
                f"set {sset.name!r} is stored with order={head.order!r}, chunk_size={head.chunk}, "
                f"not order={sset.order!r}, chunk_size={sset.chunk_size} (was it dropped and recreated?)"
            )
        sset._settle(head.order, head.chunk)
    sset._explicit = True
    sset._head_bytes, sset._head = data, head
    return head


def _extended(sset: SortedSet, data: bytes) -> Head | None:
    """The head of ``data`` when it is the head this object decoded last plus store-applied appends: only
    the new appends are decoded (``mdss._tail``)."""
    known, head = sset._head_bytes, sset._head
    if known is None or head is None or not _tail.marked(data):
        return None
    if _tail.marked(known):
        if not data.startswith(known):
            return None
        rest = data[len(known) :]
    elif data.startswith(_tail.tailed(known)):  # its header too: the SHA-1 a full decode checks
        rest = data[_tail.HEADER + len(known) :]
    else:
        return None
    return head.appended(_tail.records(sset._keys.head, rest))


def headless(sset: SortedSet) -> bool:
    """Whether nodes of the set are stored while it has no head (a listing of its node keys, stopped at the
    first that exists).

    The head is read again after the listing: a writer may have created the
    set (its head first, then its nodes) since the caller found no head.
    Nodes that this object's own lost commits could not delete (a commit
    beside a ``drop()`` whose cleanup failed) are deleted first: they are not
    the set's.
    """
    sset._garbage.delete_stranded()
    listing = sset.store.keys(sset._keys.nodes)
    while listed := list(itertools.islice(listing, 16)):  # past tombstones (Riak lists deleted keys a while)
        if sset.store.existing(listed):
            return sset.store.get(sset._keys.head) is None
    return False


def mark(sset: SortedSet) -> None:
    """Store the set's marker (a blind put: one round trip, two on Riak, whose heads' type needs the vclock;
    not a compare-and-set "only if absent", which would count a conflict on every set that has one) when
    this object made the head (:func:`snapshot`), and once per object after a merge it landed (sets made
    before markers, or whose maker's put failed): the set has a head, so from now on a head found missing
    was lost, not never made (:func:`_unseen`). If the store fails, the write goes on; the next merge
    tries again. Writes in between cost nothing more."""
    try:
        sset.store.put(sset._keys.marker, MARKER)
    except (ConflictError, StoreUnavailableError):
        return
    sset._marked = True


def _unseen(sset: SortedSet) -> Record | None:
    """The head of a set this object has not seen, which a read just found missing: ``None`` if the set
    was never made or was dropped (its marker is absent: one more round trip); the head if it was made
    meanwhile. A marked set without a head whose nodes remain lost its head: :class:`HeadMissingError`.

    A marker without a head nor nodes is left by a first write whose ``drop()`` came between its read of
    the head and its marker: it is deleted, so that later reads of the set are one round trip again.
    """
    store, keys = sset.store, sset._keys
    if store.get(keys.marker) is None:
        return None
    record = store.get(keys.head)  # made just now (the head comes before the marker)?
    if record is None:
        if headless(sset):
            raise _missing(sset)
        store.delete(keys.marker)
    return record


def _missing(sset: SortedSet) -> HeadMissingError:
    return HeadMissingError(
        f"set {sset.name!r} has stored nodes but no head: the head was lost (a Redis evicting keys "
        "needs maxmemory-policy noeviction) or a drop() was interrupted; drop() removes the rest",
        sset._keys.head,
    )


def snapshot(sset: SortedSet, create: bool, known: tuple[Record | None] | None = None) -> Snapshot:
    """The current state of ``sset``; ``create``: make an empty head first if there is none (a first write).

    ``known`` holds the head's record when a lost compare-and-set just
    returned it: then it is not read again.

    A new set's first write creates an empty head of epoch 1 by
    compare-and-set "only if absent", so every node is minted under a head.
    A head that vanished (the head of a set this object has seen, or any
    set's head when a write would start it afresh) while nodes remain is
    refused with :class:`HeadMissingError`, never taken for an empty set. On
    a store whose keys never vanish unless deleted (``Store.evicts`` false:
    DynamoDB, where that check is a scan of the whole table), only the head
    of a set this object has seen is looked for: there a set without a head
    is new, or its ``drop()`` was interrupted.

    An object that never saw the head and reads (no ``create``) tells a set
    never made (or dropped) from one whose head was lost by the set's
    marker (``Keyspace.marker``, :func:`mark`: stored by the writer that
    made the head, and after merges; deleted by ``drop()`` before the
    head), one more round trip when there is no head: see
    :func:`_unseen`.
    """
    store, key = sset.store, sset._keys.head
    record = store.get(key) if known is None else known[0]
    if record is None and not create and sset._head is None and known is None:
        record = _unseen(sset)
    while record is None and (create or sset._head is not None):
        if (store.evicts or sset._head is not None) and headless(sset):
            raise _missing(sset)
        if not create:
            forget(sset)
            break
        fresh = Head(
            sset.order, sset.chunk_size, epoch=1, incarnation=secrets.token_hex(8), node_bytes=sset._node_bytes
        )
        try:
            store.cas(key, fresh.next(secrets.token_hex(8)).encode(), None)
        except (ConflictError, StoreUnavailableError):  # made by another writer (which marks it), or reply lost
            pass
        else:
            mark(sset)
        sset._started()  # a shard of a sharded set stores the set's settings again if a drop removed them
        record = store.get(key)
    if record is None:
        return Snapshot(
            None, Head(sset.order, sset.chunk_size), Source(store, sset._keys, sset._cache), sset._order, None
        )
    head = decode_for(sset, record.value)
    hold(sset, record, head)
    try:
        view = overlay_view(sset, head)
    except MissingNodeError:  # a log segment of an older head, collected since: take the newer head
        now = store.get(key)
        if now is not None and now.version == record.version:
            raise
        sset._held = None
        return snapshot(sset, create, (now,))
    chain = functools.partial(earlier, sset, head)  # found when first needed (Index)
    return Snapshot(record, head, Source(store, sset._keys, sset._cache), sset._order, view, chain)


def hold(sset: SortedSet, record: Record, head: Head) -> None:
    """Keep the newest head record seen, so that the next commit can compare-and-set without reading it."""
    held = sset._held
    if held is None or held[1].gen <= head.gen or held[1].incarnation != head.incarnation:
        sset._held = (record, head)


def collected_meanwhile(sset: SortedSet, snap: Snapshot) -> None:
    """After a MissingNodeError: return if the head moved since ``snap`` (the caller retries), else raise."""
    record = sset.store.get(sset._keys.head)
    if (None if record is None else record.version) == snap.version:
        raise MissingNodeError(
            f"set {sset.name!r}: a node the current head names is missing from the store (the set is damaged)"
        )
