"""SortedSet: a sorted set over one engine (one head, its trees and update log: ``mdss._engine``).

Its reads and writes are ``mdss._facade``'s, over this class's hooks on the engine's snapshots (``mdss._snapshot``);
commits, merges, gc and check are the engine's modules (``_commit``, ``_merge``, ``_garbage``, ``_check``).
``SortedSet(...)`` is :meth:`SortedSet.open`, which makes a ``ShardedSet`` (``mdss._shards``) for a sharded set. See
docs/architecture.md.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from . import _check, _commit, _cursor, _estimate, _garbage, _load, _merge, _shards, _snapshot
from ._engine import Engine, Resolver
from ._facade import TIES, Page, SetMethods, check_options, new_entry
from ._keys import Keyspace
from ._log import log_limit
from ._order import Entry, Order, Score, check_choice
from ._ranking import Ranking, dense_below, dense_keys
from ._shards import ShardedSet
from ._snapshot import Snapshot
from ._tree import Source, Tree
from .exceptions import InvalidArgumentError, MissingNodeError
from .stores.base import Store

T = TypeVar("T")


def _ranked(order: Order, ranking: Any, start: int, members: list[str], scores: list[Any], ties: str) -> list[Entry]:
    """Entries for ``members`` and ``scores`` found at position ``start`` of ``ranking``, ranked by ``ties``.

    A competition rank is 1 + the entries with a strictly better score: the count below the first entry's score, then
    each later entry's position unless it ties with the one before. A dense rank is 1 + the distinct scores strictly
    better: the first entry's (``mdss.dense_below``), then one more at each change of score.
    """
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
    """The entry sets a competition or dense rank of a listing's first entry may count in besides the listing's, from
    the manifests alone: ``first`` is the first key of the entry set (region) where the listing starts (``None`` for the
    leftmost). The first entry's tie group starts in an earlier entry set only if that one begins with its score: then
    in the one the first key of that score routes to. A dense rank over the log also reads those of the scores logged
    since its last dense read (:func:`mdss.dense_keys`)."""
    probes = [] if first is None else [first[:1]]  # the first key of its score
    if ties == "dense":
        probes += dense_keys(ranking)
    return [span[0] for span in _tree_of(ranking).spans(sorted(probes))]


def _slice(ranking: Any, start: int, stop: int, ties: str) -> tuple[list[str], list[Any]]:
    """``ranking.slice(start, stop)``, reading in the same batch the entry sets that :func:`_ranked` then
    counts in by ``ties`` (:func:`_group_ids`): every ``ties`` costs the round trips of ``"ordinal"``."""
    if ties != "ordinal" and start < min(stop, ranking.count):
        ids = ranking.leaf_ids(start, stop)  # first: it descends the manifests a level per batch
        extra = _group_ids(ranking, ranking.first_at(start), ties)
        if extra:
            _tree_of(ranking).fetch([*ids, *extra])
    return ranking.slice(start, stop)


class _Opens(type):
    """Calling ``SortedSet(...)`` is :meth:`SortedSet.open`, which picks the class: a sharded set is a
    ``ShardedSet``."""

    def __call__(cls, *args: Any, **options: Any) -> Any:
        return cls.open(*args, **options)  # type: ignore[attr-defined]


class SortedSet(SetMethods, metaclass=_Opens):
    """A sorted set of ``(member, score)`` kept in a key-value store.

    ``order`` is ``"desc"`` (highest score first, the usual leaderboard) or ``"asc"``; ties are broken by member.
    ``chunk_size`` is the most entries an entry set and the most children a manifest hold. Both default to the stored
    settings of an existing set (or of the set another process creates first), else ``"desc"`` and 1000; opening an
    existing set with different ones raises :class:`SettingsMismatchError`. ``cache_bytes`` bounds the cache of decoded
    nodes. Replaced nodes are deleted ``gc_grace`` seconds after the commit that replaced them, so that readers on an
    older head can finish. A commit that loses races retries for up to ``retry_budget`` seconds (and at most
    ``max_attempts`` rounds of up to three lost races, if given; between rounds it waits for a pause in the other
    writers' commits). Writes from concurrent threads are grouped into one commit of up to ``max_batch`` operations; a
    commit waits up to ``max_wait`` seconds for more to join (0: only what queued while the previous commit ran).
    ``shards=S`` (fixed when the set is created, stored in its settings) splits the set into ``S`` independent trees
    with their own heads and update logs; every read still answers exactly. ``SortedSet(...)`` is :meth:`open`: it then
    returns a :class:`mdss.ShardedSet`.

    >>> board = SortedSet(mdss.open_store("memory://"), "board", chunk_size=4)
    >>> board.add_many({"ann": 5, "bob": 7, "cid": 5, "dee": 1})
    4
    >>> board.rank("cid"), board.rank("cid", ties="competition"), board.rank("dee", ties="dense")
    (3, 2, 3)
    """

    engine: Engine  # the one engine this set is a facade over

    @classmethod
    def open(cls, store: Store, name: str, *, shards: int | None = None, **options: Any) -> SortedSet | ShardedSet:
        """The set ``name``: a ``SortedSet``, or a :class:`ShardedSet` when ``shards`` > 1 is given or the
        stored set is sharded (its settings record: one round trip)."""
        sharded = _shards.open_sharded(store, name, shards, options)
        if sharded is not None:
            return sharded
        sset = object.__new__(cls)
        sset.__init__(store, name, **options)  # type: ignore[misc]
        return sset

    @classmethod
    def at_keys(
        cls,
        keys: Keyspace,
        store: Store,
        name: str,
        *,
        node_bytes: int | None = None,
        resolvers: Mapping[str, Resolver] | None = None,
        **options: Any,
    ) -> SortedSet:
        """A set stored at ``keys``: an internal part of another object (a board's window, settings or
        registry: :meth:`mdss._keys.Keyspace.internal`), which no set name reaches; ``name`` is for
        messages. Never sharded. ``node_bytes`` bounds its nodes' bytes when it creates the set (its
        members hold rows); ``resolvers`` are the ops its owner adds to commits (``mdss._commit``)."""
        check_options(store, **options)
        engine = Engine(store, name, keys, _commit.commit, node_bytes=node_bytes, **options)
        engine.resolvers.update(resolvers or {})
        sset = object.__new__(cls)
        cls._attach(sset, engine, options)
        return sset

    def __init__(self, store: Store, name: str, **options: Any) -> None:
        """The set ``name`` in ``store``, unsharded; ``options`` as the class documents them."""
        check_options(store, **options)
        self._attach(Engine(store, name, Keyspace(store.namespace, name), _commit.commit, **options), options)

    def _attach(self, engine: Engine, options: dict[str, Any]) -> None:
        """Become the facade of ``engine``, which takes the stored set's settings (one round trip)."""
        _snapshot.adopt_stored_settings(engine, options.get("order"), options.get("chunk_size"))
        self.store, self.name, self.engine = engine.store, engine.name, engine
        self._local = threading.local()

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
        """Commits this object published."""
        return self.engine.commits

    @property
    def retries(self) -> int:
        """Commits it re-applied after losing the race for the head."""
        return self.engine.retries

    @property
    def merges(self) -> int:
        """Merges of the update log it published."""
        return self.engine.merges

    # -- the hooks of mdss._facade ---------------------------------------------

    def _read(self, fn: Callable[[Snapshot], T]) -> T:
        return _snapshot.read(self.engine, fn)

    @staticmethod
    def _count(snap: Snapshot) -> int:
        return snap.ranking.count

    @staticmethod
    def _count_below(snap: Snapshot, probes: list[Any]) -> list[int]:
        if len(probes) == 1:
            return [snap.ranking.rank_of(probes[0])]
        return snap.ranking.count_below(probes)

    @staticmethod
    def _score(snap: Snapshot, member: str) -> Score | None:
        return snap.index.get(member)

    @staticmethod
    def _find(snap: Snapshot, members: list[str]) -> list[Score | None]:
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
    def _check_ties(ties: Any) -> None:
        check_choice(ties, TIES, "ties")

    def _commit_ops(self, ops: list[tuple[str, str, Any]], wants: list[Any]) -> list[Any]:
        return self.engine.group.submit(ops, wants)

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
            "chunk_size": self.chunk_size,
            "generation": head.gen,
            "gc_epoch": head.epoch,
            "score_tree_height": head.scores.height + (head.scores.root is not None),
            "member_index_height": head.members.height + (head.members.root is not None),
            "log_entries": len(head.log),
            "log_limit": log_limit(self.engine, head),
        }

    def page(self, limit: int = 100, cursor: str | None = None, *, ties: str = "ordinal") -> Page:
        """A page of ``limit`` entries and the cursor of the next page (``None`` after the last).

        Pages read the snapshot of the first page (no head read), so paging never yields a member twice and never skips
        one, however the set changes meanwhile, for as long as that snapshot's nodes are kept (``gc_grace`` after they
        are replaced). After that, the next page continues on the newest state just after the last entry returned: a
        member unchanged throughout is still never skipped nor repeated. The cursor is a URL-safe string, bound to this
        set; it pins no storage.

        >>> board = SortedSet.load(mdss.open_store("memory://"), "b", {"a": 3, "b": 2, "c": 1})
        >>> first = board.page(2)
        >>> first.entries[-1], board.page(2, first.cursor)
        (Entry(member='b', score=2, rank=2), Page(entries=[Entry(member='c', score=1, rank=3)], cursor=None))
        """
        if type(limit) is not int or limit < 1:
            raise InvalidArgumentError(f"limit must be an int >= 1, got {limit!r:.80}")
        self._check_ties(ties)

        if cursor is None:
            ranking, position, (members, scores) = self._read(
                lambda snap: (snap.ranking, 0, _slice(snap.ranking, 0, limit, ties))
            )
        else:
            state = _cursor.decode(self.engine.keys.prefix, self.name, cursor)
            position, member, score = state.position, state.member, state.score
            try:
                ranking = self._cursor_ranking(state)
                members, scores = _slice(ranking, position, position + limit, ties)
            except MissingNodeError:  # the snapshot is gone: go on from the newest head, after the last entry

                def resume(snap: Snapshot) -> tuple[Any, int, tuple[list[str], list[Any]]]:
                    at = snap.ranking.count_below([self._order.key_after(member, score)])[0]
                    return snap.ranking, at, _slice(snap.ranking, at, at + limit, ties)

                ranking, position, (members, scores) = self._read(resume)
        entries = _ranked(self._order, ranking, position, members, scores, ties)
        position += len(entries)
        if position >= ranking.count or not entries:
            return Page(entries, None)
        state = _cursor.state_of(ranking, position, entries[-1])
        return Page(entries, _cursor.encode(self.engine.keys.prefix, state))

    def _cursor_ranking(self, state: _cursor.State) -> Tree | Ranking:
        """The snapshot a cursor was made on; MissingNodeError when it can no longer be had exactly."""
        engine = self.engine
        source = Source(self.store, engine.keys, engine.cache)
        tree = Tree(source, self._order.key, state.root, state.height, state.size)
        if state.base == state.end:
            return tree
        for attempt in range(2):
            overlay = engine.reader.of(state.root, state.base, state.end)
            if overlay is not None:
                return Ranking(tree, overlay.view(state.end), self._order.score_of)
            if attempt == 0:
                self._read(lambda snap: None)  # catches this process's overlay up with the head
        raise MissingNodeError("the log of the cursor's snapshot was merged", engine.keys.head)

    # -- whole-set operations -------------------------------------------

    def load_from(
        self,
        pairs: Mapping[str, Score] | Iterable[tuple[str, Score]],
        *,
        replace: bool = False,
        progress: Callable[[int, int], None] | None = None,
        batch: int = 256,
    ) -> None:
        """Build the whole set from ``pairs`` bottom-up in one commit (see :meth:`load`)."""
        _load.load(self.engine, pairs, replace, progress, batch)

    def gc(self, *, min_age: float = 0.0, wait: bool = True, sweep: bool = False) -> int:
        """Delete stored nodes that no head can ever name again; returns how many it deleted.

        Without ``sweep`` it lists nothing: the head's garbage notes name the nodes that landed commits replaced, which
        processes that ended before their grace period did not delete. ``sweep=True`` also finds, by a paged listing of
        the set's keys (O(nodes): a maintenance call after crashes), the nodes of commits that never published. Both are
        safe whatever the clocks and timings and whatever runs beside them (gc epochs, see docs/architecture.md).
        ``min_age`` spares swept nodes minted less than that many seconds ago (by their writer's clock). Unless
        ``wait=False``, it waits ``gc_grace`` seconds before deleting, so that readers holding an older head finish.
        """
        return _garbage.gc(self.engine, self._checked_gc(min_age, sweep), wait, sweep)

    def merge(self) -> bool:
        """Fold the whole update log into the trees now; True if this call merged (False: the log was
        empty, or another process's merge holds its claim).

        Writes merge by themselves once the log reaches ``log_limit`` (or its manifest half its bound,
        ``mdss._log.PAGE_SEGS``); this is for a quiet moment, a benchmark, or before a backup.
        """
        return _merge.merge(self.engine)

    def unreferenced(self, min_age: float = 0.0) -> list[str]:
        """Keys of stored nodes the current head does not name, minted over ``min_age`` seconds ago.

        That is garbage waiting for its grace period or for ``gc()``, and nodes of commits in flight. Not a problem:
        :meth:`check` does not report it.
        """
        return _garbage.unreferenced(self.engine, min_age)

    def node_keys(self) -> list[str]:
        """The store keys of every node the current head names (reads manifests only)."""
        return _garbage.node_keys(self.engine)

    def drop(self) -> None:
        """Remove the whole set, even a damaged one: its nodes, then its marker, then its head."""
        _garbage.drop(self.engine)

    def check(self) -> list[str]:
        """Verify every invariant of the stored set; the problems found (empty when sound).

        Reads every node: O(n). Checks checksums, field types, sortedness and node sizes, minimum fill of non-root
        nodes, manifest summaries against their children, equal leaf depth, the member index against the score tree, the
        head's counts against the trees, and that a set with nodes has a head. Garbage awaiting ``gc()`` is not a
        problem (see :meth:`unreferenced`). Damage is returned, never raised: a lost head too (what reads raise as
        :class:`HeadMissingError`).
        """
        return _check.check(self.engine)

    def _describe(self) -> str:
        return _check.describe(self.engine)
