"""SortedSet: a sorted set over one engine (one head, its trees and update log: ``mdss._engine``).

Reads and writes are ``mdss._facade``'s, over hooks on the engine's snapshots (``mdss._snapshot``); commits, merges, gc
and check are the engine's modules. See docs/architecture.md.
"""

from __future__ import annotations

import functools
import inspect
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from . import _check, _commit, _cursor, _estimate, _expiry, _garbage, _load, _merge, _ops, _shards, _snapshot
from ._engine import Engine, Resolver
from ._facade import TIES, Page, SetMethods, check_options, check_page, new_entry, page_around, staleness
from ._keys import Keyspace
from ._log import log_limit
from ._order import (
    DataEntry,
    Entry,
    Order,
    Score,
    check_choice,
    check_flag,
    check_member,
    check_seconds,
    data_of,
    score_of,
    spelled_number,
)
from ._ranking import Ranking, dense_below, dense_keys
from ._shards import ShardedSet
from ._snapshot import Snapshot
from ._tree import Source, Tree
from .exceptions import CorruptDataError, InvalidArgumentError, MissingNodeError
from .stores.base import Store

T = TypeVar("T")


def _ranked(order: Order, ranking: Any, start: int, members: list[str], scores: list[Any], ties: str) -> list[Entry]:
    """Entries for ``members`` and ``scores`` found at position ``start`` of ``ranking``, ranked by ``ties``: the first
    one's rank counted, each later one's following from it (the same, or one more at a change of score)."""
    ranks = list(range(start + 1, start + 1 + len(members)))
    if ties == "competition" and members:
        ranks[0] = ranking.count_below([order.first_key(scores[0])])[0] + 1
        for i in range(1, len(ranks)):
            if scores[i] == scores[i - 1]:
                ranks[i] = ranks[i - 1]
    elif ties == "dense" and members:
        ranks[0] = dense_below(ranking, [order.first_key(scores[0])])[0] + 1
        for i in range(1, len(ranks)):
            ranks[i] = ranks[i - 1] + (scores[i] != scores[i - 1])
    return list(map(new_entry, members, scores, ranks))


def _tree_of(ranking: Any) -> Tree:
    return ranking if isinstance(ranking, Tree) else ranking.tree


def _group_ids(ranking: Any, first: Any, ties: str) -> list[str]:
    """The entry sets besides the listing's that a competition or dense rank of its first entry may count in, from the
    manifests alone (``first``: the first key of the entry set where the listing starts, ``None`` for the leftmost): the
    one its score's first key routes to, and for a dense rank those of the scores logged since (``dense_keys``)."""
    probes = [] if first is None else [first[:1]]  # the first key of its score
    if ties == "dense":
        probes += dense_keys(ranking)
    return [span[0] for span in _tree_of(ranking).spans(sorted(probes))]


def _slice(ranking: Any, start: int, stop: int, ties: str) -> tuple[list[str], list[Any]]:
    """``ranking.slice(start, stop)``, reading in the same batch the entry sets :func:`_ranked` counts in."""
    if ties != "ordinal" and start < min(stop, ranking.count):
        ids = ranking.leaf_ids(start, stop)  # first: it descends the manifests a level per batch
        extra = _group_ids(ranking, ranking.first_at(start), ties)
        if extra:
            _tree_of(ranking).fetch([*ids, *extra])
    return ranking.slice(start, stop)


#: What a page's read returns: ranking, start, (members, scores), and their values when data is wanted.
_Sliced = tuple[Any, int, tuple[list[str], list[Any]], list[Any] | None]


class _Opens(type):
    """Calling ``SortedSet(...)`` is :meth:`SortedSet.open`, which picks the class."""

    def __call__(cls, *args: Any, **options: Any) -> Any:
        return cls.open(*args, **options)  # type: ignore[attr-defined]


#: The options a set takes, named as ``Engine`` takes them (with their defaults).
OPTIONS = (
    "order",
    "chunk_size",
    "tiebreak",
    "cache_bytes",
    "gc_grace",
    "retry_budget",
    "max_attempts",
    "max_batch",
    "max_wait",
    "log_limit",
    "max_staleness",
)


def _signature() -> inspect.Signature:
    """What ``SortedSet(...)`` takes, for ``help()``, ``inspect`` and editors (the metaclass's call says only
    ``*args, **options``)."""
    engine = inspect.signature(Engine.__init__).parameters
    return inspect.Signature(
        [
            *[inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD) for n in ("store", "name")],
            inspect.Parameter("shards", inspect.Parameter.KEYWORD_ONLY, default=None),
            *[engine[n] for n in OPTIONS],
        ]
    )


class SortedSet(SetMethods, metaclass=_Opens):
    """A sorted set of ``(member, score)`` kept in a key-value store.

    ``order`` is ``"desc"`` (highest score first) or ``"asc"``; ties are broken by member, or by member descending
    with ``tiebreak="member_desc"`` (Redis' order in descending sets), stored with the set. ``chunk_size`` is the most
    entries an entry set and children a manifest hold. Both default to those stored, else ``"desc"`` and 1000; others
    raise :class:`SettingsMismatchError`. ``cache_bytes`` bounds the cache of decoded nodes. Replaced nodes are deleted
    ``gc_grace`` seconds after the commit that replaced them, for readers of older heads (on a busy set, 2 s after,
    once a later commit replaced more: see docs/architecture.md, "Garbage"). A commit that loses races
    retries for up to ``retry_budget`` seconds (and ``max_attempts`` rounds, if given). Concurrent threads' writes are
    grouped into commits of up to ``max_batch`` operations, waiting up to ``max_wait`` seconds for more. ``shards=S``
    (fixed at creation) splits the set into ``S`` trees with their own heads and logs: a :class:`mdss.ShardedSet`.

    >>> board = SortedSet(mdss.open_store("memory://"), "board", chunk_size=4)
    >>> board.add_many({"ann": 5, "bob": 7, "cid": 5, "dee": 1})
    4
    >>> board.rank("cid"), board.rank("cid", ties="competition"), board.rank("dee", ties="dense")
    (3, 2, 3)
    """

    engine: Engine  # the one engine this set is a facade over

    @classmethod
    def open(cls, store: Store, name: str, *, shards: int | None = None, **options: Any) -> SortedSet | ShardedSet:
        """The set ``name``: a :class:`ShardedSet` if ``shards`` > 1 or the stored set is sharded, else a SortedSet."""
        sharded = _shards.open_sharded(store, name, shards, options)
        if sharded is not None:
            return sharded
        return type.__call__(cls, store, name, **options)

    @classmethod
    def at_keys(
        cls,
        keys: Keyspace,
        store: Store,
        name: str,
        *,
        node_bytes: int | None = None,
        resolvers: Mapping[str, Resolver] | None = None,
        on_start: Callable[[], None] = lambda: None,
        tiebreak: str | None = None,
        **options: Any,
    ) -> SortedSet:
        """An unsharded set at ``keys`` (a part of another object: a board's window...); ``name`` is for messages,
        ``node_bytes`` bounds the nodes of a set it creates, ``resolvers`` are the ops its owner adds to commits,
        ``on_start`` is called when a write makes its head afresh (a board lists the window again), ``tiebreak`` may
        also be a board window's (``mdss._order.columns_first``)."""
        check_options(store, **options)
        engine = Engine(
            store,
            name,
            keys,
            _commit.commit,
            node_bytes=node_bytes,
            resolvers=resolvers,
            on_start=on_start,
            tiebreak=tiebreak,
            **options,
        )
        sset = object.__new__(cls)
        cls._attach(sset, engine, {**options, "tiebreak": tiebreak})
        return sset

    def __init__(self, store: Store, name: str, **options: Any) -> None:
        """The set ``name`` in ``store``, unsharded; ``options`` as the class documents them."""
        check_options(store, **options)
        self._attach(Engine(store, name, Keyspace(store.namespace, name), _commit.commit, **options), options)

    def _attach(self, engine: Engine, options: dict[str, Any]) -> None:
        """Become the facade of ``engine``, which takes the stored set's settings (one round trip)."""
        _snapshot.adopt_stored_settings(
            engine, options.get("order"), options.get("chunk_size"), options.get("tiebreak")
        )
        self.store, self.name, self.engine = engine.store, engine.name, engine
        self._recent, self._policy = engine.recent, engine.policy
        self._local = threading.local()
        # The hook of mdss._facade, without a frame of its own; its functions only read, so they may guess.
        self._read = functools.partial(_snapshot.read, engine, guess=True)

    @property
    def keys(self) -> Keyspace:
        """Where the set lives in the store (its head, nodes and marker keys)."""
        return self.engine.keys

    @property
    def engines(self) -> list[Engine]:
        """The engines this set is a facade over: its one."""
        return [self.engine]

    def __repr__(self) -> str:
        return f"SortedSet({self.name!r}, order={self.order!r}, chunk_size={self.chunk_size})"

    @property
    def order(self) -> str:
        return self.engine.order

    @property
    def tiebreak(self) -> str:
        """How equal scores are ordered: ``"member"``, ``"member_desc"`` or ``"first"`` (who reached it first)."""
        return self.engine.tiebreak

    @property
    def chunk_size(self) -> int:  # type: ignore[override]
        return self.engine.chunk_size

    @property
    def _order(self) -> Order:  # type: ignore[override]
        return self.engine.ordering

    @property
    def gc_grace(self) -> float:
        return self.engine.gc_grace

    @property
    def log_limit(self) -> int | None:
        return self.engine.log_limit

    @property
    def commits(self) -> int:
        return self.engine.commits

    @property
    def retries(self) -> int:
        return self.engine.retries

    @property
    def merges(self) -> int:
        return self.engine.merges

    # -- the hooks of mdss._facade ---------------------------------------------

    @staticmethod
    def _count(snap: Snapshot) -> int:
        return snap.ranking.count

    @staticmethod
    def _count_below(snap: Snapshot, probes: list[Any]) -> list[int]:
        return snap.ranking.count_below(probes)

    @staticmethod
    def _rank_of(snap: Snapshot, probe: Any) -> int:
        return snap.ranking.rank_of(probe)

    @staticmethod
    def _score(snap: Snapshot, member: str) -> Score | None:
        return score_of(snap.index.get(member))

    @staticmethod
    def _value(snap: Snapshot, member: str) -> Any:
        return snap.index.get(member)

    @staticmethod
    def _find(snap: Snapshot, members: list[str]) -> list[Score | None]:
        return list(map(score_of, snap.index.find(members)))

    @staticmethod
    def _values(snap: Snapshot, members: list[str]) -> list[Any]:
        return snap.index.find(members)

    def _entries(self, snap: Snapshot, start: int, stop: int, ties: str = "ordinal") -> list[Any]:
        members, scores = _slice(snap.ranking, start, stop, ties)
        return _ranked(self._order, snap.ranking, start, members, scores, ties)

    def _dense_below(self, snap: Snapshot, score: Score) -> int:
        return dense_below(snap.ranking, [self._order.first_key(score)])[0]

    @staticmethod
    def _estimate_below(snap: Snapshot, probe: Any, max_error: float | None) -> _estimate.Below:
        return _estimate.in_snapshot(snap, probe, max_error)

    @staticmethod
    def _prefetch_around(snap: Snapshot, key: Any, ties: str) -> None:
        """The member's entry set, with what its ranks count in (:func:`_group_ids`), in one round trip."""
        tree = _tree_of(snap.ranking)
        if ties != "ordinal" and tree.root is not None:
            ((leaf_id, base, _),) = tree.spans([key])
            tree.fetch([leaf_id, *_group_ids(snap.ranking, tree.first_at(base), ties)])

    @staticmethod
    def _prefetch_positions(snap: Snapshot, positions: list[int]) -> None:
        """The entry sets holding ``positions``, found from the manifests and read in one round trip."""
        ranking = snap.ranking
        ids = [leaf_id for p in positions for leaf_id in ranking.leaf_ids(p, p + 1)]
        if ids:
            _tree_of(ranking).fetch(dict.fromkeys(ids))

    @staticmethod
    def _check_ties(ties: Any) -> None:
        check_choice(ties, TIES, "ties")

    def _commit_ops(self, ops: list[tuple[str, str, Any]], wants: list[Any]) -> list[Any]:
        return self.engine.group.submit(ops, wants)

    def _take(self, entries: list[Entry]) -> list[Entry]:
        """Remove ``entries`` in one commit if each still holds its score (a pop); those removed: all or none."""
        try:
            self.engine.group.submit([("take", e.member, e.score) for e in entries])
        except _ops.Stale:
            return []
        return entries

    # -- reads of one engine ----------------------------------------------------

    def info(self) -> dict[str, Any]:
        """The head's facts: members, settings, generation, each tree's height. One round trip.

        >>> SortedSet(mdss.open_store("memory://"), "b").info()["members"]
        0
        """
        head, members = self._read(lambda snap: (snap.head, snap.ranking.count))
        return {
            "members": members,
            "order": self.order,
            "tiebreak": self.tiebreak,
            "chunk_size": self.chunk_size,
            "generation": head.gen,
            "gc_epoch": head.epoch,
            "score_tree_height": head.scores.height + (head.scores.root is not None),
            "member_index_height": head.members.height + (head.members.root is not None),
            "log_entries": len(head.log),
            "log_limit": log_limit(self.engine, head),
        }

    def page(
        self,
        limit: int = 100,
        cursor: str | None = None,
        *,
        around: str | None = None,
        ties: str = "ordinal",
        with_data: bool = False,
        max_staleness: float | None = None,
    ) -> Page:
        """A page of ``limit`` entries with the cursors of the page after it (``next``) and before it (``previous``),
        each ``None`` at that end. ``cursor`` takes either: a ``previous`` cursor gives the ``limit`` entries just
        before the page it came from, in set order. ``around=member`` is the page of ``limit`` entries with the member
        at index ``limit // 2``, slid to stay full at either end of the set (as :meth:`around` with ``fill=True``);
        an empty page if the member is absent. ``with_data=True``: :class:`DataEntry` entries, each with its member's
        data (one more round trip, as :meth:`range`), from the page's snapshot; a page read on the snapshot a cursor
        kept takes them from the newest state (a read of its own: the head, then the member index).

        Pages read the first page's snapshot, so none skips or repeats a member, while its nodes are kept
        (``gc_grace``); then the newest state after the last entry returned (before the first, going back): a member
        unchanged meanwhile is neither skipped nor repeated. A cursor is a URL-safe string bound to this set and its
        direction; it pins no storage.

        >>> board = SortedSet.load(mdss.open_store("memory://"), "b", {"a": 3, "b": 2, "c": 1})
        >>> first = board.page(2)
        >>> first.entries[-1], board.page(2, first.next).entries, first.previous
        (Entry(member='b', score=2, rank=2), [Entry(member='c', score=1, rank=3)], None)
        >>> [e.member for e in board.page(2, board.page(2, first.next).previous).entries]
        ['a', 'b']
        """
        check_page(limit, cursor, around)
        self._check_ties(ties)
        check_flag(with_data, "with_data")
        bound = staleness(max_staleness)
        values: list[Any] | None = None

        def valued(snap: Snapshot, start: int, sliced: tuple[list[str], list[Any]]) -> _Sliced:
            """What a page read: its ranking, start, members and scores, and their values if data is wanted."""
            members = sliced[0]
            values = self._values(snap, members) if with_data and members else None
            return snap.ranking, start, sliced, values

        if around is not None:
            member, (before, after) = check_member(around), page_around(limit)

            def centred(snap: Snapshot) -> _Sliced:
                start, stop = self._around(snap, member, before, after, True, ties) or (0, 0)
                return valued(snap, start, _slice(snap.ranking, start, stop, ties))

            ranking, start, (members, scores), values = self._read(centred, bound)
        elif cursor is None:
            ranking, start, (members, scores), values = self._read(
                lambda snap: valued(snap, 0, _slice(snap.ranking, 0, limit, ties)), bound
            )
        else:
            state, back = _cursor.decode(self.engine.keys.prefix, self.name, cursor)
            start = max(state.position - limit, 0) if back else state.position
            try:
                ranking = self._cursor_ranking(state)
                members, scores = _slice(ranking, start, state.position if back else start + limit, ties)
            except MissingNodeError as missing:  # the snapshot is gone: go on from the newest head, by its entry
                order, gone = self._order, missing
                node = gone.key != self.engine.keys.head  # a node gone (not this process's view of the log)

                def resume(snap: Snapshot) -> _Sliced:
                    if node and state.root is not None and snap.head.scores.root == state.root:
                        raise gone  # under the head that names it: the set is damaged, not moved on
                    value: Any = state.score  # a "first" set's key needs the entry's number among its ties
                    if order.first and state.tie is not None:
                        value = (state.score, None, state.tie)
                    elif order.first:  # a cursor made before they carried it: the entry's number now, if unchanged
                        found = snap.index.get(state.member)
                        value = found if found is not None and score_of(found) == state.score else value
                    key = order.key(state.member, value)
                    probe = key if back else (*key, 0)
                    at = snap.ranking.count_below([probe])[0]
                    first, stop = (max(at - limit, 0), at) if back else (at, at + limit)
                    return valued(snap, first, _slice(snap.ranking, first, stop, ties))

                ranking, start, (members, scores), values = self._read(resume, bound)
        ranked = _ranked(self._order, ranking, start, members, scores, ties)
        entries: list[Any] = ranked
        if with_data and ranked:
            if values is None:  # read on the cursor's snapshot, which names no member index: the newest state
                values = self._read(lambda snap: self._values(snap, members), bound)
            entries = [DataEntry(*entry, data_of(value)) for entry, value in zip(ranked, values)]
        if not entries:
            return Page(entries, None, None)
        prefix, stop = self.engine.keys.prefix, start + len(entries)
        ends = (self._tie_at(ranking, start), self._tie_at(ranking, stop - 1))
        return Page(
            entries,
            _cursor.encode(prefix, _cursor.state_of(ranking, stop, entries[-1], ends[1]))
            if stop < ranking.count
            else None,
            _cursor.encode(prefix, _cursor.state_of(ranking, start, entries[0], ends[0]), back=True) if start else None,
        )

    def _tie_at(self, ranking: Any, position: int) -> int | None:
        """In a set whose ties go by ``"first"``, the number among its ties of the entry at ``position`` of the page's
        ranking, from its key there (the entry set the page read): what lets a cursor go on after the entry once it has
        moved. ``None`` in any other set."""
        if self.engine.tiebreak != "first":
            return None
        return spelled_number(ranking.stored_member_at(position))

    def _cursor_ranking(self, state: _cursor.State) -> Tree | Ranking:
        """The snapshot a cursor was made on; MissingNodeError when it can no longer be had exactly."""
        engine = self.engine
        source = Source(self.store, engine.keys, engine.cache)
        order = self._order
        if state.root is not None:
            self._check_cursor_root(source, state)
        tree = Tree(
            source, order.tree_key, state.root, state.height, state.size, None, order.plain if order.reaching else None
        )
        if state.base == state.end:
            return tree
        for attempt in range(2):
            overlay = engine.reader.of(state.root, state.base, state.end)
            if overlay is not None:
                return Ranking(tree, overlay.view(state.end), self._order)
            if attempt == 0:
                self._read(lambda snap: None)  # catches this process's overlay up with the head
        raise MissingNodeError("the log of the cursor's snapshot was merged", engine.keys.head)

    def _check_cursor_root(self, source: Source, state: _cursor.State) -> None:
        """Refuse a cursor whose score tree is not the one it names: a root stored at another height, in the other
        tree, or over another count is a cursor made up or altered (its checksum is no secret), not damage in the
        store, which an honest cursor never meets there (node ids are never reused)."""
        assert state.root is not None
        try:
            root = source.load_one(state.root, self._order.tree_key, state.height)
        except CorruptDataError:
            if source.pins.get(state.root) is None:  # did not decode: damage, as the error says
                raise
            root = None  # decoded, but not where the cursor puts it
        if root is None or (root.total if root.height else len(root)) != state.size:
            raise InvalidArgumentError("cursor names a snapshot of this set that never was (altered or made up)")

    # -- whole-set operations -------------------------------------------

    def load_from(
        self,
        pairs: Mapping[str, Score] | Iterable[tuple[str, Score]],
        *,
        replace: bool = False,
        progress: Callable[[int, int], None] | None = None,
        batch: int = 256,
        memory_bytes: int = _load.MEMORY_BYTES,
        spill_dir: str | None = None,
    ) -> None:
        """Build the whole set from ``pairs`` bottom-up in one commit (see :meth:`load`)."""
        _load.load(self.engine, pairs, replace, progress, batch, memory_bytes, spill_dir)

    def gc(self, *, min_age: float = 0.0, wait: bool = True, sweep: bool = False) -> int:
        """Delete stored nodes that no head can ever name again; returns how many it deleted.

        Without ``sweep``, the head's garbage notes name what to delete; ``sweep=True`` also lists the set's keys
        (O(nodes): after crashes) for nodes of commits never published, minted over ``min_age`` seconds ago. Safe
        whatever runs beside it. Unless ``wait=False``, it waits ``gc_grace`` seconds first, for readers of older heads.
        ``sweep=True`` also drops the set if it has expired (``expire()``): what reclaims an expired set's space when no
        write comes to drop it.
        """
        min_age = self._checked_gc(min_age, sweep)
        if sweep and _expiry.sweep(self.engine):
            return 0
        return _garbage.gc(self.engine, min_age, wait, sweep)

    def merge(self) -> bool:
        """Fold the whole update log into the trees now (writes do at ``log_limit``); True if this call merged, False
        if the log was empty or another process's merge holds its claim."""
        return _merge.merge(self.engine)

    def unreferenced(self, min_age: float = 0.0) -> list[str]:
        """Keys of stored nodes the current head does not name, minted over ``min_age`` seconds ago: garbage awaiting
        ``gc()`` and nodes of commits in flight (not a problem :meth:`check` reports)."""
        return _garbage.unreferenced(self.engine, check_seconds(min_age, "min_age"))

    def node_keys(self) -> list[str]:
        """The store keys of every node the current head names (reads manifests only)."""
        return _garbage.node_keys(self.engine)

    def warm(self) -> int:
        """Read the set's nodes into this process's cache (``cache_bytes``), a batch of entry sets per round trip,
        until all are read or the cache is full: how many entry sets it read. A service calls it once as it starts, so
        that reads and writes find the nodes they need in memory from the first call, as they do once warm (a cache
        holds a set's nodes at their stored size, which the process holds about three times over, decoded)."""
        return _snapshot.warm(self.engine)

    def drop(self) -> bool:
        """Remove the whole set, even a damaged one: its nodes, then its marker, then its head. Whether it held a
        member or is damaged (Redis' DEL answers 1 or 0: an expired key, or one whose last member left, is none)."""
        try:
            held = _expiry.has_members(self.engine)
        except CorruptDataError:
            held = True
        return _garbage.drop(self.engine) and held

    def _set_moment(self, moment: int) -> bool:
        return _expiry.has_members(self.engine) and _expiry.expire(self.engine, moment)

    def _persist(self) -> bool:
        return _expiry.persist(self.engine)

    def _moment(self) -> int | None:
        return _expiry.moment(self.engine)

    def check(self) -> list[str]:
        """Verify every invariant of the stored set; the problems found (empty when sound).

        Reads every node: O(n). Checks checksums, types, order, node sizes and fill, manifest summaries, leaf depth, the
        member index against the score tree and the head's counts. Damage is returned, never raised (a lost head too).
        """
        return _check.check(self.engine)

    def _describe(self) -> str:
        return _check.describe(self.engine)


SortedSet.__signature__ = _signature()  # type: ignore[attr-defined]
