"""SortedSet: the public face of a score tree and its member index under one head.

Every read takes one snapshot: it reads the head once and descends immutable
nodes, so whatever it returns is one committed state. Every write is one
commit (``mdss._commit``): apply the batch copy-on-write, write the new
nodes, compare-and-set the head, and rebase on a lost race. Replaced nodes
are deleted later (``mdss._garbage``); ``check()`` lives in ``mdss._check``.
See docs/architecture.md.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, NamedTuple, TypeVar

import attrs

from . import _check, _commit, _cursor, _estimate, _garbage, _head, _log, _merge, _ops
from ._cache import NodeCache
from ._group import GroupCommit
from ._head import MAX_CHUNK, Head, Snapshot
from ._keys import Keyspace
from ._log import Overlay
from ._order import (
    Entry,
    Order,
    Score,
    check_choice,
    check_count,
    check_member,
    check_members,
    check_score,
    check_seconds,
    each_pair,
)
from ._retry import COMMITS
from ._tree import Source, Tree
from ._writer import check_chunk_size
from .exceptions import (
    ConflictError,
    InvalidArgumentError,
    MissingNodeError,
)
from .stores.base import Record, Stats, Store

T = TypeVar("T")

DEFAULT_CHUNK = 1000
OPS = _ops.OPS
TIES = ("ordinal", "competition", "dense")

_entry = Entry.__new__.__get__(Entry)  # Entry(member, score, rank) without NamedTuple's keyword handling


def _ranked(order: Order, ranking: Any, start: int, members: list[str], scores: list[Any], ties: str) -> list[Entry]:
    """Entries for ``members`` and ``scores`` found at position ``start`` of ``ranking``, ranked by ``ties``.

    A competition rank is 1 + the entries with a strictly better score: the
    count below the first entry's score, then each later entry's position
    unless it ties with the one before. A dense rank is 1 + the distinct
    scores strictly better: the first entry's (``mdss._log.dense_below``),
    then one more at each change of score.
    """
    ranks = list(range(start + 1, start + 1 + len(members)))
    if ties == "competition" and members:
        ranks[0] = ranking.count_below([order.first_key(scores[0])])[0] + 1
        for i in range(1, len(ranks)):
            if scores[i] == scores[i - 1]:
                ranks[i] = ranks[i - 1]
    elif ties == "dense" and members:
        ranks[0] = _log.dense_below(ranking, [order.first_key(scores[0])])[0] + 1
        for i in range(1, len(ranks)):
            ranks[i] = ranks[i - 1] + (scores[i] != scores[i - 1])
    return list(map(_entry, members, scores, ranks))


def _tree_of(ranking: Any) -> Tree:
    return ranking if isinstance(ranking, Tree) else ranking.tree


def _group_ids(ranking: Any, first: Any, ties: str) -> list[str]:
    """The entry sets a competition or dense rank of a listing's first entry may count in besides the
    listing's, from the manifests alone: ``first`` is the first key of the entry set (region) where the
    listing starts (``None`` for the leftmost). The first entry's tie group starts in an earlier entry set
    only if that one begins with its score: then in the one the first key of that score routes to. A dense
    rank over the log also reads those of the scores logged since its last dense read
    (:func:`mdss._log.dense_keys`)."""
    probes = [] if first is None else [first[:1]]  # the first key of its score
    if ties == "dense":
        probes += _log.dense_keys(ranking)
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


class Page(NamedTuple):
    """A page of entries and the cursor that continues after it (``None`` at the end)."""

    entries: list[Entry]
    cursor: str | None


class Batch:
    """The operations of one :meth:`SortedSet.batch` block, and their results once committed."""

    __slots__ = ("ops", "want_scores", "results")

    def __init__(self) -> None:
        self.ops: list[tuple[str, str, Any]] = []
        self.want_scores: list[bool | str] = []
        self.results: list[Any] | None = None


def check_options(
    store: Any,
    *,
    order: str | None = None,
    chunk_size: int | None = None,
    cache_bytes: int = 0,
    gc_grace: float = 0.0,
    retry_budget: float = 0.0,
    max_attempts: int | None = None,
    max_batch: int = 1,
    max_wait: float = 0.0,
    log_limit: int | None = None,
) -> None:
    """Refuse bad options of a set (:class:`SortedSet`'s) before anything is stored: a sharded set checks
    them before it stores its settings, so that a refused constructor leaves nothing behind."""
    if not isinstance(store, Store):
        raise InvalidArgumentError(f"store must be an mdss Store (see mdss.open_store), got {store!r:.80}")
    if order is not None:
        check_choice(order, ("desc", "asc"), "order")
    if chunk_size is not None and (type(chunk_size) is not int or not 2 <= chunk_size <= MAX_CHUNK):
        raise InvalidArgumentError(f"chunk_size must be an int from 2 to {MAX_CHUNK}, got {chunk_size!r:.80}")
    check_count(cache_bytes, "cache_bytes")
    check_count(max_batch, "max_batch", least=1)
    for what, seconds in (("gc_grace", gc_grace), ("retry_budget", retry_budget), ("max_wait", max_wait)):
        check_seconds(seconds, what)
    if max_attempts is not None:
        check_count(max_attempts, "max_attempts", least=1)
    if log_limit is not None:
        check_count(log_limit, "log_limit")


class SortedSet:
    """A sorted set of ``(member, score)`` kept in a key-value store.

    ``order`` is ``"desc"`` (highest score first, the usual leaderboard) or
    ``"asc"``; ties are broken by member. ``chunk_size`` is the most entries
    an entry set and the most children a manifest hold. Both default to the
    stored settings of an existing set (or of the set another process
    creates first), else ``"desc"`` and 1000; opening an existing set with
    different ones raises :class:`SettingsMismatchError`. ``cache_bytes``
    bounds the cache of decoded nodes. Replaced nodes are deleted
    ``gc_grace`` seconds after the commit that replaced them, so that
    readers on an older head can finish. A commit that loses races retries
    for up to ``retry_budget`` seconds (and at most ``max_attempts`` rounds
    of up to three lost races, if given; between rounds it waits for a pause
    in the other writers' commits). Writes from concurrent threads are
    grouped into one commit of up to ``max_batch`` operations; a commit
    waits up to ``max_wait`` seconds for more to join (0: only what queued
    while the previous commit ran).
    ``shards=S`` (fixed when the set is created, stored in its settings)
    splits the set into ``S`` independent trees with their own heads and
    update logs; every read still answers exactly. ``SortedSet(...)`` then
    returns a :class:`mdss.ShardedSet` (see docs/architecture.md).

    >>> board = SortedSet(mdss.open_store("memory://"), "board", chunk_size=4)
    >>> board.add_many({"ann": 5, "bob": 7, "cid": 5, "dee": 1})
    4
    >>> board.rank("cid"), board.rank("cid", ties="competition"), board.rank("dee", ties="dense")
    (3, 2, 3)
    """

    #: Commits in a row whose held head was current before the next starts from it without reading (a
    #: shard's: ``mdss._shards.TRUST_AFTER``; see ``mdss._commit._read_first``).
    _trust_after = 0
    #: The keys of a set that is an internal part of another object (:meth:`_internal`, a shard); else
    #: those of its name.
    _fixed_keys: Keyspace | None = None

    def __new__(cls, *args: Any, **options: Any) -> Any:
        # A sharded set (``shards`` > 1 given, or stored in the set's settings) is a ShardedSet (mdss._shards),
        # whether ``store`` and ``name`` come by position or by keyword.
        by_keyword = ("store", "name")[len(args) :]
        if cls is not SortedSet or len(args) > 2 or not all(n in options for n in by_keyword):
            return super().__new__(cls)  # __init__ says what is wrong
        store, name = (*args, *(options.pop(n) for n in by_keyword))
        from . import _shards

        return _shards.open_set(cls, store, name, options)

    def __init__(
        self,
        store: Store,
        name: str,
        *,
        shards: int | None = None,
        order: str | None = None,
        chunk_size: int | None = None,
        cache_bytes: int = 64 << 20,
        gc_grace: float = 30.0,
        retry_budget: float = COMMITS.budget,
        max_attempts: int | None = None,
        max_batch: int = 1000,
        max_wait: float = 0.0,
        log_limit: int | None = None,
    ) -> None:
        check_options(
            store,
            order=order,
            chunk_size=chunk_size,
            cache_bytes=cache_bytes,
            gc_grace=gc_grace,
            retry_budget=retry_budget,
            max_attempts=max_attempts,
            max_batch=max_batch,
            max_wait=max_wait,
            log_limit=log_limit,
        )
        self.store = store
        self.name = name
        self._keys = self._fixed_keys or Keyspace(store.namespace, name)
        self._cache = NodeCache(cache_bytes)
        self.gc_grace = gc_grace
        self._policy = attrs.evolve(COMMITS, budget=float(retry_budget), max_attempts=max_attempts)
        self._garbage = _garbage.Garbage(self)
        self._local = threading.local()
        self._group = GroupCommit(lambda pendings: _commit.commit(self, pendings), max_batch, max_wait)
        self.log_limit = log_limit
        self.commits = 0  # commits this object published
        self.retries = 0  # commits it re-applied after losing the race for the head
        self.merges = 0  # merges of the update log it published
        self._head_bytes: bytes | None = None
        self._head: Head | None = None
        self._marked = False  # whether this object stored the set's marker (mdss._head.mark)
        self._held: tuple[Record, Head] | None = None  # the newest head record seen: where a commit starts
        self._rival_head: tuple[Record | None] | None = None  # the head a lost race returned, for the rebase
        self._stale = [0.0]  # how often the held head had moved by the next commit (mdss._commit._learn)
        self._current = 0  # commits in a row that found the held head current (mdss._commit._learn)
        self._tail_full = False  # the store refused an append as too large: the next attempt seals (mdss._tail)
        self._sealer = False  # this writer's commit crossed the inline budget: it seals from the head it reads
        self._built: tuple[str | None, str | None] | None = None  # the roots of the trees it last made (_merge_at)
        self._overlay: Overlay | None = None  # the update log applied in memory (mdss._log)
        self._past_overlays: dict[tuple[Any, ...], Overlay] = {}  # superseded ones, for cursors made on them
        self._overlay_lock = threading.Lock()
        self._log_pages: dict[str, Any] = {}  # log manifests read (immutable)
        self._entry_bytes: float | None = None  # stored bytes per member, both trees, measured (sizes the log)
        #: The bytes a node may weigh, given to the head when this object creates the set (``None``: no bound;
        #: ``Leaderboard`` bounds its windows' sets, whose members hold rows). The head's value rules writes.
        self._node_bytes: int | None = None
        self._explicit = order is not None or chunk_size is not None
        self._settle(order or "desc", chunk_size or DEFAULT_CHUNK)
        _head.adopt_stored_settings(self, order, chunk_size)

    @classmethod
    def _internal(cls, keys: Keyspace, store: Store, name: str, **options: Any) -> SortedSet:
        """A set stored at ``keys``, an internal part of another object (a board's window, settings or
        registry: :meth:`mdss._keys.Keyspace.internal`), which no set name reaches; ``name`` is for messages.
        Never sharded."""
        sset: SortedSet = object.__new__(cls)
        sset._fixed_keys = keys
        sset.__init__(store, name, **options)  # type: ignore[misc]
        return sset

    def _started(self) -> None:
        """A write made the set's head afresh (mdss._head.snapshot); a shard of a sharded set hooks in."""

    def _settle(self, order: str, chunk_size: int) -> None:
        check_chunk_size(chunk_size, self.store.max_value_bytes, type(self.store).__name__)  # DynamoDB: 400 KB
        self.order: str = order
        self.chunk_size: int = chunk_size
        self._order = Order(order)

    def __repr__(self) -> str:
        return f"SortedSet({self.name!r}, order={self.order!r}, chunk_size={self.chunk_size})"

    @property
    def stats(self) -> Stats:
        """The store's counters of round trips and bytes (shared by every set on that store)."""
        return self.store.stats

    # -- heads and snapshots ---------------------------------------------

    def _snapshot(self, *, create: bool = False) -> Snapshot:
        """The current state; ``create``: make an empty head first if there is none (a first write)."""
        return _head.snapshot(self, create)

    def _read(self, fn: Callable[[Snapshot], T]) -> T:
        """Run ``fn`` on a fresh snapshot; if a node it needs was collected meanwhile, on a newer one."""
        snap = self._snapshot()
        try:
            return fn(snap)  # the common case, without the retry loop's bookkeeping
        except MissingNodeError:
            _head.collected_meanwhile(self, snap)
        for _ in self._policy.attempts():
            snap = self._snapshot()
            try:
                return fn(snap)
            except MissingNodeError:
                _head.collected_meanwhile(self, snap)
        raise ConflictError(
            f"reads of set {self.name!r} kept losing their snapshot to garbage collection for "
            f"{self._policy.budget:g} s: raise gc_grace above the time a read takes"
        )

    # -- reads -------------------------------------------------------------

    def __len__(self) -> int:
        """Number of members. One round trip (the head)."""
        return self._read(lambda snap: snap.ranking.count)

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
            "log_limit": _log.log_limit(self, head),
        }

    def __contains__(self, member: object) -> bool:
        return self.score(member) is not None  # type: ignore[arg-type]

    def score(self, member: str) -> Score | None:
        """The member's score, or ``None``. O(log n); head + member index leaf when manifests are cached.

        >>> board = SortedSet(mdss.open_store("memory://"), "b")
        >>> board.add("ann", 3); board.score("ann"), board.score("zed")
        True
        (3, None)
        """
        member = check_member(member)
        return self._read(lambda snap: snap.index.get(member))

    def scores(self, members: Iterable[str]) -> list[Score | None]:
        """The scores of many members (``None`` where absent), in one batched descent."""
        wanted = check_members(members)
        return self._read(lambda snap: snap.index.find(wanted))

    def rank(self, member: str, *, ties: str = "ordinal") -> int | None:
        """The member's 1-based rank, or ``None`` if absent. O(log n).

        ``ties="ordinal"``: ties broken by member, every rank distinct.
        ``ties="competition"``: 1 + the number of members with a strictly
        better score ("1224" ranking). ``ties="dense"``: 1 + the number of
        distinct scores strictly better ("1223"). With manifests cached:
        three round trips (head, member index entry set, score entry set),
        whichever ``ties``; a dense rank over the update log also reads, in
        that last round trip, the entry sets of the scores logged since the
        last dense read (see docs/architecture.md).

        >>> board = SortedSet(mdss.open_store("memory://"), "b")
        >>> board.add_many({"ann": 9, "bob": 9, "cid": 7, "dee": 5})
        4
        >>> [board.rank("dee", ties=t) for t in ("ordinal", "competition", "dense")]
        [4, 4, 3]
        """
        member = check_member(member)
        self._check_ties(ties)

        def run(snap: Snapshot) -> int | None:
            score = snap.index.get(member)
            if score is None:
                return None
            if ties == "dense":
                return _log.dense_below(snap.ranking, [self._order.first_key(score)])[0] + 1
            probe = self._order.key(member, score) if ties == "ordinal" else self._order.first_key(score)
            return snap.ranking.rank_of(probe) + 1

        return self._read(run)

    def _check_ties(self, ties: Any) -> None:
        check_choice(ties, TIES, "ties")

    def percentile(self, member: str) -> float | None:
        """The share of members with a strictly better score than ``member``'s: ``(competition rank - 1) /
        len(self)``, 0.0 for the best score (ties share it); ``None`` if the member is absent. The exact
        value of :meth:`estimate_percentile`; costs as :meth:`rank`.

        >>> board = SortedSet.load(mdss.open_store("memory://"), "b", {f"p{i}": i for i in range(10)})
        >>> board.percentile("p9"), board.percentile("p0"), board.at_percentile(0.5)
        (0.0, 0.9, Entry(member='p4', score=4, rank=6))
        """
        member = check_member(member)

        def run(snap: Snapshot) -> float | None:
            score = snap.index.get(member)
            if score is None:
                return None
            return snap.ranking.rank_of(self._order.first_key(score)) / snap.ranking.count

        return self._read(run)

    def at_percentile(self, p: float, *, ties: str = "ordinal") -> Entry | None:
        """The entry at share ``p`` (0 to 1) of the set: position ``floor(p * len)`` (the last entry for 1.0),
        so that :meth:`percentile` of its member is at most ``p``; its rank follows ``ties``. ``None`` for an
        empty set. Costs as :meth:`at`."""
        if not isinstance(p, (int, float)) or isinstance(p, bool) or not 0 <= p <= 1:
            raise InvalidArgumentError(f"p must be a number from 0 to 1, got {p!r:.80}")
        self._check_ties(ties)

        def run(snap: Any) -> Entry | None:
            size = self._size(snap)
            if not size:
                return None
            at = min(int(p * size), size - 1)
            found = self._entries(snap, at, at + 1, ties)
            return found[0] if found else None

        return self._read(run)

    def _size(self, snap: Snapshot) -> int:
        return snap.ranking.count

    def rank_of_score(self, score: Score) -> int:
        """The competition rank a member with ``score`` would have (1 + members strictly better).

        Needs no member: the Datastore ranking tree's FindRank. Two round trips
        with manifests cached (head, one entry set).
        """
        probe = self._order.first_key(check_score(score))
        return self._read(lambda snap: snap.ranking.rank_of(probe) + 1)

    def _entries(self, snap: Snapshot, start: int, stop: int, ties: str = "ordinal") -> list[Entry]:
        members, scores = _slice(snap.ranking, start, stop, ties)
        return _ranked(self._order, snap.ranking, start, members, scores, ties)

    def range(self, offset: int = 0, limit: int = 10, *, ties: str = "ordinal") -> list[Entry]:
        """Up to ``limit`` entries from position ``offset`` (0 is rank 1), in set order.

        O(log n + limit); with manifests cached, two round trips (head and the
        entry sets the page spans, fetched together). Each entry's ``rank``
        follows ``ties`` (as :meth:`rank`): ``"competition"`` counts the
        entries better than the first one's score, ``"dense"`` their distinct
        scores, and later ranks follow from it; the entry set that count can
        need is fetched with the page's, so every ``ties`` costs the same
        round trips.
        """
        check_count(offset, "offset")
        check_count(limit, "limit")
        self._check_ties(ties)
        return self._read(lambda snap: self._entries(snap, offset, offset + limit, ties))

    def at(self, rank: int, *, ties: str = "ordinal") -> Entry | None:
        """The entry at a 1-based ordinal rank (position), or ``None`` past the end (FindScore); its
        ``rank`` follows ``ties``."""
        if type(rank) is not int or rank < 1:
            raise InvalidArgumentError(f"rank must be an int >= 1, got {rank!r}")
        found = self.range(rank - 1, 1, ties=ties)
        return found[0] if found else None

    def _score_bounds(self, snap: Snapshot, best: Score, worst: Score) -> tuple[int, int]:
        low, high = self._order.first_key(best), self._order.last_key(worst)
        if high < low:
            return 0, 0
        start, stop = snap.ranking.count_below([low, high])
        return start, stop

    def range_by_score(
        self, best: Score, worst: Score, *, offset: int = 0, limit: int | None = None, ties: str = "ordinal"
    ) -> list[Entry]:
        """Entries whose score lies between ``best`` and ``worst`` inclusive, best first.

        For a ``desc`` set ``best`` is the higher bound. ``offset`` and
        ``limit`` page within the range.
        """
        best, worst = check_score(best), check_score(worst)
        check_count(offset, "offset")
        if limit is not None:
            check_count(limit, "limit")
        self._check_ties(ties)

        def run(snap: Snapshot) -> list[Entry]:
            start, stop = self._score_bounds(snap, best, worst)
            start += offset
            if limit is not None:
                stop = min(stop, start + limit)
            return self._entries(snap, start, stop, ties)

        return self._read(run)

    def count(self, best: Score, worst: Score) -> int:
        """How many members have a score between ``best`` and ``worst`` inclusive. O(log n)."""
        best, worst = check_score(best), check_score(worst)

        def run(snap: Snapshot) -> int:
            start, stop = self._score_bounds(snap, best, worst)
            return stop - start

        return self._read(run)

    def around(self, member: str, before: int = 5, after: int = 5, *, ties: str = "ordinal") -> list[Entry]:
        """The entries around ``member`` (it included), or ``[]`` if it is absent; ranks follow ``ties``."""
        member = check_member(member)
        check_count(before, "before")
        check_count(after, "after")
        self._check_ties(ties)

        def run(snap: Snapshot) -> list[Entry]:
            score = snap.index.get(member)
            if score is None:
                return []
            key = self._order.key(member, score)
            tree = _tree_of(snap.ranking)
            if ties != "ordinal" and tree.root is not None:  # the member's entry set, with what its ranks count in
                ((leaf_id, base, _),) = tree.spans([key])
                tree.fetch([leaf_id, *_group_ids(snap.ranking, tree.first_at(base), ties)])
            position = snap.ranking.rank_of(key)
            return self._entries(snap, max(position - before, 0), position + after + 1, ties)

        return self._read(run)

    def page(self, limit: int = 100, cursor: str | None = None, *, ties: str = "ordinal") -> Page:
        """A page of ``limit`` entries and the cursor of the next page (``None`` after the last).

        Pages read the snapshot of the first page (no head read), so paging
        never yields a member twice and never skips one, however the set
        changes meanwhile, for as long as that snapshot's nodes are kept
        (``gc_grace`` after they are replaced). After that, the next page
        continues on the newest state just after the last entry returned: a
        member unchanged throughout is still never skipped nor repeated. The
        cursor is a URL-safe string, bound to this set; it pins no storage.

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
            state = _cursor.decode(self._keys.prefix, self.name, cursor)
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
        return Page(entries, _cursor.encode(self._keys.prefix, _cursor.state_of(ranking, position, entries[-1])))

    def _cursor_ranking(self, state: _cursor.State) -> Tree | _log.Ranking:
        """The snapshot a cursor was made on; MissingNodeError when it can no longer be had exactly."""
        tree = Tree(Source(self.store, self._keys, self._cache), self._order.key, state.root, state.height, state.size)
        if state.base == state.end:
            return tree
        for attempt in range(2):
            overlay = _log.overlay_of(self, state.root, state.base, state.end)
            if overlay is not None:
                return _log.Ranking(tree, overlay.view(state.end), self._order.score_of)
            if attempt == 0:
                self._read(lambda snap: None)  # catches this process's overlay up with the head
        raise MissingNodeError("the log of the cursor's snapshot was merged", self._keys.head)

    def __iter__(self) -> Iterator[Entry]:
        """Every entry in order, one entry set at a time, from one snapshot while its nodes are kept; after
        that it goes on from the newest state, after the last entry it yielded (see :meth:`page`)."""
        cursor = None
        while True:
            entries, cursor = self.page(self.chunk_size, cursor)
            yield from entries
            if cursor is None:
                return

    # -- estimates (the logic is in mdss._estimate) ------------------------

    def _estimate_probe(self, snap: Snapshot, member: str | None, score: Score | None, ties: str) -> Any:
        """The score tree probe of an estimate: the member's key (or its score's), or a score's first key."""
        if member is None:
            return self._order.first_key(score)  # type: ignore[arg-type]
        found = snap.index.get(member)
        if found is None:
            return None
        return self._order.key(member, found) if ties == "ordinal" else self._order.first_key(found)

    @staticmethod
    def _estimate_below(snap: Snapshot, probe: Any, max_error: float | None) -> tuple[int, int, int]:
        """Entries below ``probe``: the tree's estimate and bounds, shifted by the update log exactly."""
        shift = 0 if snap.view is None else snap.view.shift(probe)
        return tuple(n + shift for n in _estimate.bounded(snap.score_tree, probe, max_error))  # type: ignore[return-value]

    def estimate_rank(
        self,
        member: str | None = None,
        *,
        score: Score | None = None,
        ties: str | None = None,
        max_error: int | None = None,
    ) -> _estimate.Estimate | None:
        """An estimated 1-based rank with bounds that always hold: ``low <= rank() <= high``.

        Give exactly one of ``member`` (its rank, ``ties`` as in :meth:`rank`:
        ``"ordinal"`` by default; ``None`` if it is absent) or ``score`` (the
        competition rank, as :meth:`rank_of_score`). Reads the manifests of
        the score tree only, never an entry set of it, so with them cached a
        ``score`` estimate costs one round trip (the head) and a ``member``
        one two (head, member index entry set); ``high - low < chunk_size``.
        The update log adds no uncertainty: its shift is known exactly.
        If the bounds are wider than ``max_error``, it reads the one entry
        set and returns the exact rank (``low == high``); ``max_error=0``
        always does.

        >>> board = SortedSet.load(mdss.open_store("memory://"), "b", {f"p{i}": i for i in range(100)}, chunk_size=10)
        >>> rough = board.estimate_rank(score=42)
        >>> rough.low <= board.rank_of_score(42) <= rough.high, rough.high - rough.low < 10
        (True, True)
        >>> board.estimate_rank("p42", max_error=0)
        Estimate(rank=58, low=58, high=58)
        """
        member, score, ties = self._estimate_rank_args(member, score, ties, max_error)

        def run(snap: Snapshot) -> _estimate.Estimate | None:
            probe = self._estimate_probe(snap, member, score, ties or "competition")
            if probe is None:
                return None
            return _estimate.as_rank(self._estimate_below(snap, probe, max_error))

        return self._read(run)

    def estimate_percentile(
        self, member: str | None = None, *, score: Score | None = None, max_error: float | None = None
    ) -> _estimate.Percentile | None:
        """The estimated share of members with a strictly better score than ``member``'s or than ``score``.

        ``(rank_of_score(s) - 1) / len(self)``: 0.0 for the best score, and
        ties share a value; ``1 - value`` is the share at or below it. An
        empty set gives 0.0; an absent member ``None``. ``low <= exact <=
        high`` always holds; if ``high - low`` exceeds ``max_error`` (a
        fraction from 0) it reads the one entry set and is exact. Costs as
        :meth:`estimate_rank`.

        >>> board = SortedSet.load(mdss.open_store("memory://"), "b", {f"p{i}": i for i in range(100)}, chunk_size=10)
        >>> board.estimate_percentile("p89", max_error=0.0)
        Percentile(value=0.1, low=0.1, high=0.1)
        """
        member, score = self._estimate_args(member, score)
        if max_error is not None and (
            not isinstance(max_error, (int, float)) or isinstance(max_error, bool) or not max_error >= 0
        ):
            raise InvalidArgumentError(f"max_error must be a fraction >= 0, got {max_error!r:.80}")

        def run(snap: Snapshot) -> _estimate.Percentile | None:
            probe = self._estimate_probe(snap, member, score, "competition")
            if probe is None:
                return None
            total = snap.ranking.count
            keys = None if max_error is None else max_error * total
            return _estimate.as_percentile(self._estimate_below(snap, probe, keys), total)

        return self._read(run)

    @staticmethod
    def _estimate_rank_args(member: Any, score: Any, ties: Any, max_error: Any) -> tuple[str | None, Score | None, Any]:
        """:meth:`estimate_rank`'s arguments checked: the member or score, and the ties mode (``None``: a
        score's competition rank)."""
        member, score = SortedSet._estimate_args(member, score)
        ties = "ordinal" if ties is None and member is not None else ties
        if member is None and ties not in (None, "competition"):
            raise InvalidArgumentError(f"a score's rank is its competition rank: ties={ties!r} needs a member")
        if ties == "dense":
            raise InvalidArgumentError("estimates count entries, not distinct scores: use rank(member, ties='dense')")
        if ties is not None:
            check_choice(ties, TIES, "ties")
        if max_error is not None:
            check_count(max_error, "max_error")
        return member, score, ties

    @staticmethod
    def _estimate_args(member: Any, score: Any) -> tuple[str | None, Score | None]:
        if (member is None) == (score is None):
            raise InvalidArgumentError("give exactly one of member and score")
        if member is not None:
            return check_member(member), None
        return None, check_score(score)

    # -- writes --------------------------------------------------------------

    def add(
        self, member: str, score: Score, *, op: str = "set", only: str | None = None, changed: bool = False
    ) -> bool | None:
        """Set (``op="set"``), add to (``"incr"``), improve (``"best"``), raise (``"gt"``) or lower
        (``"lt"``) a member's score; ``only="new"`` / ``"existing"`` restricts it to absent / present
        members (Redis' ``ZADD`` NX/XX/GT/LT, see ``mdss._ops``).

        Returns whether the member was added, or with ``changed=True`` whether it was added or its
        score changed (Redis' ``CH``); ``None`` inside :meth:`batch`. One commit: O(log n).

        >>> board = SortedSet(mdss.open_store("memory://"), "b")
        >>> board.add("ann", 5), board.add("ann", 3, op="gt", changed=True), board.add("bob", 1, only="existing")
        (True, False, False)
        """
        added = self.add_many([(member, score)], op=op, only=only, changed=changed)
        return None if added is None else added == 1

    def add_many(
        self,
        pairs: Mapping[str, Score] | Iterable[tuple[str, Score]],
        *,
        op: str = "set",
        only: str | None = None,
        changed: bool = False,
    ) -> int | None:
        """Apply ``op`` (as in :meth:`add`) to many ``(member, score)`` pairs in one commit.

        Returns how many members were added (Redis' ``ZADD`` reply), or with
        ``changed=True`` how many were added or changed score (``ZADD CH``).
        """
        how = _ops.code(op, only)
        if type(changed) is not bool:
            raise InvalidArgumentError(f"changed must be True or False, got {changed!r:.80}")
        ops = [(how, member, score) for member, score in each_pair(pairs)]
        results = self._submit(ops, want_score="changed" if changed else False)
        return None if results is None else sum(1 for new in results if new)

    def incr(self, member: str, delta: Score, *, only: str | None = None, when: str | None = None) -> Score | None:
        """Add ``delta`` to the member's score (absent members start from 0); returns the new score.

        ``only="new"`` / ``"existing"`` and ``when="gt"`` / ``"lt"`` (the
        result must be greater / less than the current score) are Redis'
        ``ZADD INCR`` with NX/XX/GT/LT: when a condition fails nothing
        changes and it returns ``None``, as Redis answers ``nil``.

        >>> board = SortedSet(mdss.open_store("memory://"), "b")
        >>> board.incr("ann", 5), board.incr("ann", -1, when="gt"), board.incr("bob", 1, only="existing")
        (5, None, None)
        """
        how = _ops.code("incr", only, when)
        results = self._submit([(how, check_member(member), check_score(delta))], want_score=True)
        return None if results is None else results[0]

    def remove(self, member: str) -> bool | None:
        """Remove a member; returns whether it was there."""
        results = self._submit([("remove", check_member(member), None)])
        return None if results is None else results[0]

    def remove_many(self, members: Iterable[str]) -> int | None:
        """Remove many members in one commit; returns how many were there."""
        results = self._submit([("remove", m, None) for m in check_members(members)])
        return None if results is None else sum(1 for found in results if found)

    @contextmanager
    def batch(self) -> Iterator[Batch]:
        """Collect this thread's writes to the set and commit them once, atomically, at the end.

        Inside the block the write methods return ``None``; the yielded
        :class:`Batch` has every operation's result in ``results`` afterwards.
        An exception in the block discards the batch.

        >>> board = SortedSet(mdss.open_store("memory://"), "b")
        >>> with board.batch() as batch:
        ...     board.add("ann", 1)
        ...     board.incr("ann", 4)
        >>> batch.results, board.score("ann")
        ([True, 5], 5)
        """
        if getattr(self._local, "batch", None) is not None:
            yield self._local.batch  # nested: the outer batch commits
            return
        batch = self._local.batch = Batch()
        try:
            yield batch
        finally:
            self._local.batch = None
        if batch.ops:
            batch.results = self._submit(batch.ops, want_score=batch.want_scores)

    def _submit(
        self, ops: list[tuple[str, str, Any]], want_score: bool | str | list[bool | str] = False
    ) -> list[Any] | None:
        """Commit ``ops`` (through group commit), or add them to this thread's open batch."""
        batch = getattr(self._local, "batch", None)
        if batch is not None:
            batch.ops.extend(ops)
            batch.want_scores.extend(want_score if isinstance(want_score, list) else [want_score] * len(ops))
            return None
        if not ops:
            return []
        return self._group.submit(ops, want_score)  # type: ignore[arg-type]

    # -- whole-set operations -------------------------------------------

    @classmethod
    def load(
        cls,
        store: Store,
        name: str,
        pairs: Mapping[str, Score] | Iterable[tuple[str, Score]],
        *,
        order: str | None = None,
        chunk_size: int | None = None,
        replace: bool = False,
        progress: Callable[[int, int], None] | None = None,
        batch: int = 256,
        **options: Any,
    ) -> SortedSet:
        """Build a whole set bottom-up in one commit: O(n log n), a million entries in seconds.

        ``pairs`` may repeat a member (the last score wins). An existing
        non-empty set is refused unless ``replace=True``, which also replaces
        a damaged set. ``progress(done, total)`` is called as nodes are
        written, ``batch`` nodes per round trip.

        >>> board = SortedSet.load(mdss.open_store("memory://"), "b", {"a": 1, "b": 2}, chunk_size=4)
        >>> [e.member for e in board]
        ['b', 'a']
        """
        sset = cls(store, name, order=order, chunk_size=chunk_size, **options)
        if not isinstance(sset, SortedSet):  # sharded: each shard loads its members (mdss._shards)
            sset._load(pairs, replace, progress, batch)
            return sset
        _commit.load(sset, pairs, replace, progress, batch)
        return sset

    def gc(self, *, min_age: float = 0.0, wait: bool = True, sweep: bool = False) -> int:
        """Delete stored nodes that no head can ever name again; returns how many it deleted.

        Without ``sweep`` it lists nothing: the head's garbage notes name the
        nodes that landed commits replaced, which processes that ended before
        their grace period did not delete. ``sweep=True`` also finds, by a
        paged listing of the set's keys (O(nodes): a maintenance call after
        crashes), the nodes of commits that never published. Both are safe
        whatever the clocks and timings and whatever runs beside them (gc
        epochs, see docs/architecture.md). ``min_age`` spares swept nodes
        minted less than that many seconds ago (by their writer's clock).
        Unless ``wait=False``, it waits ``gc_grace`` seconds before deleting,
        so that readers holding an older head finish.
        """
        if type(sweep) is not bool:
            raise InvalidArgumentError(f"sweep must be True or False, got {sweep!r:.80}")
        return _garbage.gc(self, check_seconds(min_age, "min_age"), wait, sweep)

    def merge(self) -> bool:
        """Fold the whole update log into the trees now; True if this call merged (False: the log was
        empty, or another process's merge holds its claim).

        Writes merge by themselves once the log reaches ``log_limit`` (or its
        manifest half its bound, ``mdss._log.PAGE_SEGS``); this is for a
        quiet moment, a benchmark, or before a backup.
        """
        return _merge.merge(self)

    def unreferenced(self, min_age: float = 0.0) -> list[str]:
        """Keys of stored nodes the current head does not name, minted over ``min_age`` seconds ago.

        That is garbage waiting for its grace period or for ``gc()``, and
        nodes of commits in flight. Not a problem: :meth:`check` does not
        report it.
        """
        return _garbage.unreferenced(self, min_age)

    def node_keys(self) -> list[str]:
        """The store keys of every node the current head names (reads manifests only)."""
        return self._read(lambda snap: sorted(self._keys.node(i) for i in _garbage.named(self, snap)))

    def drop(self) -> None:
        """Remove the whole set, even a damaged one: its nodes, then its marker, then its head."""
        _garbage.drop(self)

    def check(self) -> list[str]:
        """Verify every invariant of the stored set; the problems found (empty when sound).

        Reads every node: O(n). Checks checksums, field types, sortedness and
        node sizes, minimum fill of non-root nodes, manifest summaries against
        their children, equal leaf depth, the member index against the score
        tree, the head's counts against the trees, and that a set with nodes
        has a head. Garbage awaiting ``gc()`` is not a problem (see
        :meth:`unreferenced`). Damage is returned, never raised: a lost head
        too (what reads raise as :class:`HeadMissingError`).
        """
        return _check.check(self)

    def _check(self) -> None:
        """Assert :meth:`check` finds nothing; print the head and nodes when it does (for tests)."""
        problems = self.check()
        if problems:
            raise AssertionError(f"{self!r} is broken:\n  " + "\n  ".join(problems) + "\n  " + _check.describe(self))
