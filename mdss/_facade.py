"""The public methods of a sorted set, written once over hooks that ``SortedSet`` (one engine, ``mdss._sortedset``)
and ``ShardedSet`` (S engines, ``mdss._shards``) implement.

The hooks are the callables :class:`SetMethods` declares. ``_read(fn, max_staleness, members)`` runs ``fn(x)`` on
a snapshot ``x`` of the whole set (an engine's :class:`mdss._snapshot.Snapshot`, the shards'
:class:`mdss._gather.Gather`), again on a newer one if a node it needs was collected meanwhile (``members``: those
``fn`` looks up, whose entry sets the head's round trip may bring along); the others take that ``x``
(``_count_below(x, probes)``: entries below each key; ``_entries(x, start, stop, ties)``: positions ``start`` to
``stop - 1``; ``_prefetch_positions(x, positions)``: the entry sets those positions lie in, in one round trip where it
can), but ``_check_ties`` and ``_commit_ops``.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, fields
from typing import Any, Literal, overload

from . import _estimate, _expiry, _ops, _percentiles
from ._head import MAX_CHUNK
from ._order import (
    TIEBREAKS,
    DataEntry,
    Entry,
    Order,
    Score,
    check_choice,
    check_count,
    check_data,
    check_flag,
    check_member,
    check_members,
    check_score,
    check_seconds,
    data_of,
    each_pair,
    score_of,
)
from ._recent import Recent
from ._retry import Backoff
from ._writer import data_room
from .exceptions import ConflictError, InvalidArgumentError, StoreError, failed_after, shown
from .stores.base import Stats, Store

TIES = ("ordinal", "competition", "dense")

new_entry = Entry.__new__.__get__(Entry)  # Entry(member, score, rank) without NamedTuple's keyword handling


class PageCursors:
    """What a page of a set or a board has beside its items: the cursors of the page after it (``next``) and before
    it (``previous``), each ``None`` at that end; ``cursor``, ``next`` by its older name; and unpacking as ``items,
    next``, as the two-field named tuples pages were (``previous`` came later)."""

    __slots__ = ()
    next: str | None

    @property
    def cursor(self) -> str | None:
        """The cursor of the next page: :attr:`next`."""
        return self.next

    def __iter__(self) -> Iterator[Any]:
        return iter((getattr(self, fields(self)[0].name), self.next))  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True)
class Page(PageCursors):
    """A page of entries of a set, with its cursors (:class:`PageCursors`)."""

    entries: list[Entry]
    next: str | None
    previous: str | None = None


def around_span(position: int, before: int, after: int, size: int, fill: bool) -> tuple[int, int]:
    """Positions ``start`` to ``stop - 1`` of the entries around ``position`` in ``size``: ``before`` ahead of it and
    ``after`` behind, cut at the ends; with ``fill``, slid away from either end instead, so as to hold ``before + after
    + 1`` entries where there are that many (the agoragames ``leaderboard`` library's around-me pages slide at the
    top alone: around its last member they hold that member and those before it, about half a page)."""
    start, stop = position - before, position + after + 1
    if fill:
        shift = max(-start, 0) - max(stop - size, 0)
        start, stop = start + shift, stop + shift
    return max(start, 0), min(stop, size)


def page_around(limit: int) -> tuple[int, int]:
    """The entries before and after the member a page of ``limit`` around it is centred on: ``limit // 2`` before (12
    of 25, as the agoragames library's around-me), the rest after."""
    return limit // 2, limit - 1 - limit // 2


def check_page(limit: Any, cursor: Any, around: Any) -> None:
    """Refuse a bad ``limit``, or a page asked both by ``cursor`` and ``around`` a member."""
    if type(limit) is not int or limit < 1:
        raise InvalidArgumentError(f"limit must be an int >= 1, got {shown(limit)}")
    if cursor is not None and around is not None:
        raise InvalidArgumentError("give a cursor or around, not both")


class Batch:
    """The operations of one :meth:`SetMethods.batch` block, and their results once committed."""

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
    tiebreak: str | None = None,
    cache_bytes: int = 0,
    gc_grace: float = 0.0,
    retry_budget: float = 0.0,
    max_attempts: int | None = None,
    max_batch: int = 1,
    max_wait: float = 0.0,
    log_limit: int | None = None,
    max_staleness: float = 0.0,
    **unknown: Any,
) -> None:
    """Refuse bad options of a set before anything is stored: a refused constructor leaves nothing behind."""
    if unknown:
        raise InvalidArgumentError(f"unknown option {shown(next(iter(unknown)))} of a sorted set")
    if not isinstance(store, Store):
        raise InvalidArgumentError(f"store must be an mdss Store (see mdss.open_store), got {shown(store)}")
    if order is not None:
        check_choice(order, ("desc", "asc"), "order")
    if tiebreak is not None:
        check_choice(tiebreak, TIEBREAKS, "tiebreak")
    if chunk_size is not None and (type(chunk_size) is not int or not 2 <= chunk_size <= MAX_CHUNK):
        raise InvalidArgumentError(f"chunk_size must be an int from 2 to {MAX_CHUNK}, got {shown(chunk_size)}")
    check_count(cache_bytes, "cache_bytes")
    check_count(max_batch, "max_batch", least=1)
    for what, seconds in (
        ("gc_grace", gc_grace),
        ("retry_budget", retry_budget),
        ("max_wait", max_wait),
        ("max_staleness", max_staleness),
    ):
        check_seconds(seconds, what)
    if max_attempts is not None:
        check_count(max_attempts, "max_attempts", least=1)
    if log_limit is not None:
        check_count(log_limit, "log_limit", most=2**63 - 1)  # past it, the log's sizing overflows a float


def staleness(max_staleness: Any) -> float | None:
    """A read's ``max_staleness``: ``None`` (the set's own) or a number of seconds (``mdss._recent``)."""
    return None if max_staleness is None else check_seconds(max_staleness, "max_staleness")


class SetMethods:
    """The reads and writes ``SortedSet`` and ``ShardedSet`` share; see the module's docstring for the hooks."""

    name: str
    store: Store
    chunk_size: int
    _order: Order
    _local: threading.local
    _recent: Recent
    _policy: Backoff  # the set's commit retries (retry_budget, max_attempts): pops and range removals follow it
    _read: Callable[..., Any]
    _count: Callable[..., int]
    _count_below: Callable[..., list[int]]
    _rank_of: Callable[..., int]
    _score: Callable[..., Any]
    _find: Callable[..., list[Any]]
    _value: Callable[..., Any]
    _values: Callable[..., list[Any]]
    _entries: Callable[..., list[Entry]]
    _dense_below: Callable[..., int]
    _estimate_below: Callable[..., _estimate.Below]
    _prefetch_around: Callable[..., None]
    _prefetch_positions: Callable[..., None]
    _check_ties: Callable[[Any], None]
    _commit_ops: Callable[..., list[Any]]
    _take: Callable[[list[Entry]], list[Entry]]
    page: Callable[..., Page]
    load_from: Callable[..., None]
    check: Callable[[], list[str]]
    _set_moment: Callable[[int], bool]
    _persist: Callable[[], bool]
    _moment: Callable[[], int | None]
    _describe: Callable[[], str]

    @property
    def stats(self) -> Stats:
        """The store's counters of round trips and bytes (shared by every set on that store)."""
        return self.store.stats

    @property
    def read_age(self) -> float:
        """How old, in seconds, the snapshot that this thread's last read used was when it answered: 0.0 for a read
        of the head, up to ``max_staleness`` for one answered from the snapshot kept (no round trip)."""
        return getattr(self._local, "recent", self._recent).age()  # a shard's, after a read of one shard

    # -- reads -------------------------------------------------------------

    def __len__(self) -> int:
        """Number of members. One round trip (the heads)."""
        return self._read(self._count)

    def __contains__(self, member: object) -> bool:
        return self.score(member) is not None  # type: ignore[arg-type]

    def score(self, member: str, *, max_staleness: float | None = None) -> Score | None:
        """The member's score, or ``None``. O(log n); head + member index leaf when manifests are cached (one round
        trip on Redis, which reads them together).

        >>> board = SortedSet(mdss.open_store("memory://"), "b")
        >>> board.add("ann", 3); board.score("ann"), board.score("zed")
        True
        (3, None)
        """
        member = check_member(member)
        return self._read(lambda x: self._score(x, member), staleness(max_staleness), (member,))

    def scores(self, members: Iterable[str], *, max_staleness: float | None = None) -> list[Score | None]:
        """The scores of many members (``None`` where absent), in one batched descent."""
        wanted = check_members(members)
        return self._read(lambda x: self._find(x, wanted), staleness(max_staleness), wanted)

    @overload
    def rank(
        self,
        member: str,
        *,
        ties: str = ...,
        with_score: Literal[False] = ...,
        max_staleness: float | None = ...,
    ) -> int | None: ...

    @overload
    def rank(
        self, member: str, *, ties: str = ..., with_score: Literal[True], max_staleness: float | None = ...
    ) -> tuple[int, Score] | None: ...

    def rank(
        self, member: str, *, ties: str = "ordinal", with_score: bool = False, max_staleness: float | None = None
    ) -> int | tuple[int, Score] | None:
        """The member's 1-based rank, or ``None`` if absent: O(log n), three round trips with manifests cached (two on
        Redis, whose head comes with the member's entry set; one with the entry sets cached too).
        ``with_score=True``: ``(rank, score)`` from one snapshot (Redis' ``ZRANK ... WITHSCORE``), or ``None``.

        ``ties="ordinal"``: ties broken by member, all ranks distinct; ``"competition"``: 1 + the members with a
        strictly better score ("1224"); ``"dense"``: 1 + the distinct scores strictly better ("1223"; not sharded).

        >>> board = SortedSet(mdss.open_store("memory://"), "b")
        >>> board.add_many({"ann": 9, "bob": 9, "cid": 7, "dee": 5})
        4
        >>> [board.rank("dee", ties=t) for t in ("ordinal", "competition", "dense")]
        [4, 4, 3]
        >>> board.rank("cid", with_score=True), board.rank("zed", with_score=True)
        ((3, 7), None)
        """
        member = check_member(member)
        self._check_ties(ties)
        if type(with_score) is not bool:
            raise InvalidArgumentError(f"with_score must be True or False, got {shown(with_score)}")

        def run(x: Any) -> int | tuple[int, Score] | None:
            keyed = self._keyed(x, member)
            if keyed is None:
                return None
            score, key = keyed
            if ties == "dense":
                found = self._dense_below(x, score) + 1
            else:
                probe = key if ties == "ordinal" else self._order.first_key(score)
                found = self._rank_of(x, probe) + 1
            return (found, score) if with_score else found

        return self._read(run, staleness(max_staleness), (member,))

    def percentile(
        self, member: str, *, method: str = "better", max_staleness: float | None = None
    ) -> float | int | None:
        """The share of members with a strictly better score: ``(competition rank - 1) / len(self)``, 0.0 for the best
        (ties share it); ``None`` if the member is absent. Costs as :meth:`rank`.

        ``method="agoragames"``: the agoragames ``leaderboard`` library's ``percentile_for`` instead, in whole percents
        the other way round: ``ceil(100 * (len - rank) / len)`` by the member's ordinal rank in a descending set, 100
        minus ``ceil(100 * (rank - 1) / len)`` in an ascending one (``mdss._percentiles``).

        >>> board = SortedSet.load(mdss.open_store("memory://"), "b", {f"p{i}": i for i in range(10)})
        >>> board.percentile("p9"), board.percentile("p0"), board.at_percentile(0.5)
        (0.0, 0.9, Entry(member='p4', score=4, rank=6))
        >>> board.percentile("p9", method="agoragames"), board.percentile("p0", method="agoragames")
        (90, 0)
        """
        member = check_member(member)
        check_choice(method, _percentiles.METHODS, "method")

        def run(x: Any) -> float | int | None:
            keyed = self._keyed(x, member)
            if keyed is None:
                return None
            score, key = keyed
            if method == "agoragames":
                position = self._rank_of(x, key)
                return _percentiles.agoragames(position, self._count(x), self._order.name)
            return self._rank_of(x, self._order.first_key(score)) / self._count(x)

        return self._read(run, staleness(max_staleness))

    def score_for_percentile(self, percent: float, *, max_staleness: float | None = None) -> Score | None:
        """The agoragames ``leaderboard`` library's ``score_for_percentile``: ``percent`` from 0 (the worst score) to
        100 (the best), the score at position ``(len - 1) * percent / 100`` from the worst, interpolated linearly
        between the two scores either side; ``None`` for an empty set. Costs as :meth:`range` of two entries.

        >>> board = SortedSet.load(mdss.open_store("memory://"), "s", {"a": 10, "b": 20, "c": 40}, order="desc")
        >>> board.score_for_percentile(100), board.score_for_percentile(75), board.score_for_percentile(0)
        (40, 30.0, 10)
        """
        percent = _percentiles.check_percent(percent)

        def run(x: Any) -> Score | None:
            size = self._count(x)
            if not size:
                return None
            first, second, fraction = _percentiles.positions(size, percent, self._order.name)
            low = min(first, second)
            scores = [e.score for e in self._entries(x, low, max(first, second) + 1, "ordinal")]
            return _percentiles.interpolated(scores[first - low], scores[second - low], fraction)

        return self._read(run, staleness(max_staleness))

    def at_percentile(self, p: float, *, ties: str = "ordinal", max_staleness: float | None = None) -> Entry | None:
        """The entry at position ``floor(p * len)`` (``p`` from 0 to 1; the last for 1.0), whose :meth:`percentile` is
        at most ``p``; ``None`` for an empty set. Costs as :meth:`at`."""
        if not isinstance(p, (int, float)) or isinstance(p, bool) or not 0 <= p <= 1:
            raise InvalidArgumentError(f"p must be a number from 0 to 1, got {shown(p)}")
        self._check_ties(ties)

        def run(x: Any) -> Entry | None:
            size = self._count(x)
            if not size:
                return None
            at = min(int(p * size), size - 1)
            found = self._entries(x, at, at + 1, ties)
            return found[0] if found else None

        return self._read(run, staleness(max_staleness))

    def rank_of_score(self, score: Score, *, max_staleness: float | None = None) -> int:
        """The competition rank a member with ``score`` would have. Two round trips with manifests cached."""
        probe = self._order.first_key(check_score(score))
        return self._read(lambda x: self._rank_of(x, probe) + 1, staleness(max_staleness))

    def range(
        self,
        offset: int = 0,
        limit: int = 10,
        *,
        ties: str = "ordinal",
        with_data: bool = False,
        max_staleness: float | None = None,
    ) -> list[Entry]:
        """Up to ``limit`` entries from position ``offset`` (0 is rank 1), in set order.

        O(log n + limit); with manifests cached, two round trips (heads, then the entry sets the page spans and those
        its first rank counts in), whatever ``ties`` (as in :meth:`rank`). ``with_data=True``: :class:`DataEntry`
        entries, each with its member's data, from the same snapshot (one more round trip: the member index).
        """
        check_count(offset, "offset")
        check_count(limit, "limit")
        self._check_ties(ties)
        check_flag(with_data, "with_data")
        return self._read(
            lambda x: self._with_data(x, self._entries(x, offset, offset + limit, ties), with_data),
            staleness(max_staleness),
        )

    def _keyed(self, x: Any, member: str) -> tuple[Score, Any] | None:
        """The member's score and key in snapshot ``x`` (its member index entry set), or ``None`` if absent."""
        value = self._value(x, member)
        return None if value is None else (score_of(value), self._order.key(member, value))

    def _with_data(self, x: Any, entries: list[Entry], wanted: bool = True) -> list[Any]:
        """``entries`` as :class:`DataEntry`, each with its member's data in snapshot ``x`` (if ``wanted``)."""
        if not wanted or not entries:
            return entries
        values = self._values(x, [e.member for e in entries])
        return [DataEntry(*entry, data_of(value)) for entry, value in zip(entries, values)]

    def data(self, member: str, *, max_staleness: float | None = None) -> str | bytes | None:
        """The data the member carries (``add(..., data=)``, :meth:`set_data`), or ``None`` (none, or absent): its
        member index entry set, as :meth:`score`.

        >>> board = SortedSet(mdss.open_store("memory://"), "b")
        >>> board.add("ann", 3, data='{"team": "red"}'); board.data("ann"), board.range(with_data=True)
        True
        ('{"team": "red"}', [DataEntry(member='ann', score=3, rank=1, data='{"team": "red"}')])
        """
        member = check_member(member)
        return self._read(lambda x: data_of(self._value(x, member)), staleness(max_staleness), (member,))

    def at(self, rank: int, *, ties: str = "ordinal", max_staleness: float | None = None) -> Entry | None:
        """The entry at a 1-based ordinal rank (position), or ``None`` past the end; its ``rank`` follows ``ties``."""
        if type(rank) is not int or rank < 1:
            raise InvalidArgumentError(f"rank must be an int >= 1, got {shown(rank, 40)}")
        found = self.range(rank - 1, 1, ties=ties, max_staleness=max_staleness)
        return found[0] if found else None

    def _score_bounds(self, x: Any, best: Score, worst: Score) -> tuple[int, int]:
        low, high = self._order.first_key(best), self._order.last_key(worst)
        if high < low:
            return 0, 0
        start, stop = self._count_below(x, [low, high])
        return start, stop

    def range_by_score(
        self,
        best: Score,
        worst: Score,
        *,
        offset: int = 0,
        limit: int | None = None,
        ties: str = "ordinal",
        with_data: bool = False,
        max_staleness: float | None = None,
    ) -> list[Entry]:
        """Entries scored from ``best`` to ``worst`` inclusive (``best`` is the higher bound for ``desc``), best first;
        ``offset`` and ``limit`` page within them; ``with_data`` as in :meth:`range`."""
        best, worst = check_score(best), check_score(worst)
        check_count(offset, "offset")
        if limit is not None:
            check_count(limit, "limit")
        self._check_ties(ties)
        check_flag(with_data, "with_data")

        def run(x: Any) -> list[Entry]:
            start, stop = self._score_bounds(x, best, worst)
            start += offset
            if limit is not None:
                stop = min(stop, start + limit)
            return self._with_data(x, self._entries(x, start, stop, ties), with_data)

        return self._read(run, staleness(max_staleness))

    def count(self, best: Score, worst: Score, *, max_staleness: float | None = None) -> int:
        """How many members have a score between ``best`` and ``worst`` inclusive. O(log n)."""
        best, worst = check_score(best), check_score(worst)

        def run(x: Any) -> int:
            start, stop = self._score_bounds(x, best, worst)
            return stop - start

        return self._read(run, staleness(max_staleness))

    def around(
        self,
        member: str,
        before: int = 5,
        after: int = 5,
        *,
        ties: str = "ordinal",
        fill: bool = False,
        with_data: bool = False,
        max_staleness: float | None = None,
    ) -> list[Entry]:
        """The entries around ``member`` (it included): up to ``before`` better and ``after`` worse; ``[]`` if it is
        absent. Ranks follow ``ties``. ``fill=True`` slides the span away from either end of the set so that it holds
        ``before + after + 1`` entries where the set has that many: 12 and 12 around the leader are the leader and the
        24 after it, as in the agoragames ``leaderboard`` library's around-me, and around the last, the last 25 (where
        that library lists 13). ``with_data`` as in :meth:`range`.

        >>> board = SortedSet.load(mdss.open_store("memory://"), "b", {f"p{i}": i for i in range(9)})
        >>> [e.rank for e in board.around("p8", 2, 2)], [e.rank for e in board.around("p8", 2, 2, fill=True)]
        ([1, 2, 3], [1, 2, 3, 4, 5])
        """
        member = check_member(member)
        check_count(before, "before")
        check_count(after, "after")
        check_flag(fill, "fill")
        check_flag(with_data, "with_data")
        self._check_ties(ties)

        def run(x: Any) -> list[Entry]:
            found = self._around(x, member, before, after, fill, ties)
            return [] if found is None else self._with_data(x, self._entries(x, *found, ties), with_data)

        return self._read(run, staleness(max_staleness))

    def _around(self, x: Any, member: str, before: int, after: int, fill: bool, ties: str) -> tuple[int, int] | None:
        """The positions of the entries around ``member`` in snapshot ``x`` (:func:`around_span`), its entry set read
        (with what its ranks count in); ``None`` if it is absent."""
        keyed = self._keyed(x, member)
        if keyed is None:
            return None
        key = keyed[1]
        self._prefetch_around(x, key, ties)
        return around_span(self._rank_of(x, key), before, after, self._count(x), fill)

    def random_members(
        self, n: int = 1, *, rng: random.Random | None = None, max_staleness: float | None = None
    ) -> list[Entry]:
        """Up to ``n`` distinct entries drawn uniformly from one snapshot (all of them, shuffled, if ``n`` is the
        size or more), as Redis' ``ZRANDMEMBER`` with a positive count; ``rng`` draws the positions. With manifests
        cached, two round trips: the head, then every entry set drawn from.

        >>> board = SortedSet.load(mdss.open_store("memory://"), "b", {"ann": 3, "bob": 2, "cid": 1})
        >>> len(board.random_members(2)), sorted(e.member for e in board.random_members(5))
        (2, ['ann', 'bob', 'cid'])
        """
        check_count(n, "n")
        if rng is not None and not isinstance(rng, random.Random):
            raise InvalidArgumentError(f"rng must be a random.Random, got {shown(rng)}")
        draw = rng or random

        def run(x: Any) -> list[Entry]:
            size = self._count(x)
            positions = draw.sample(range(size), min(n, size))
            self._prefetch_positions(x, positions)
            return [self._entries(x, p, p + 1)[0] for p in positions]

        return self._read(run, staleness(max_staleness))

    def __iter__(self) -> Iterator[Entry]:
        """Every entry in order, a :meth:`page` of ``chunk_size`` at a time."""
        cursor = None
        while True:
            page = self.page(self.chunk_size, cursor)
            yield from page.entries
            cursor = page.next
            if cursor is None:
                return

    # -- estimates (the logic is in mdss._estimate) ------------------------

    def estimate_rank(
        self,
        member: str | None = None,
        *,
        score: Score | None = None,
        ties: str | None = None,
        max_error: int | None = None,
        max_staleness: float | None = None,
    ) -> _estimate.Estimate | None:
        """An estimated 1-based rank with bounds that always hold: ``low <= rank() <= high``.

        Give exactly one of ``member`` (``ties`` as in :meth:`rank`; ``None`` if absent) or ``score`` (as
        :meth:`rank_of_score`). Reads cached manifests only: one round trip for a ``score``, two for a ``member``;
        ``high - low < chunk_size`` (times the shards). Bounds wider than ``max_error`` are made exact.

        >>> board = SortedSet.load(mdss.open_store("memory://"), "b", {f"p{i}": i for i in range(100)}, chunk_size=10)
        >>> rough = board.estimate_rank(score=42)
        >>> rough.low <= board.rank_of_score(42) <= rough.high, rough.high - rough.low < 10
        (True, True)
        >>> board.estimate_rank("p42", max_error=0)
        Estimate(rank=58, low=58, high=58)
        """
        member, score = self._estimate_args(member, score)
        if ties is not None:
            check_choice(ties, TIES, "ties")
        ties = "ordinal" if ties is None and member is not None else ties
        if member is None and ties not in (None, "competition"):
            raise InvalidArgumentError(f"a score's rank is its competition rank: ties={ties!r} needs a member")
        if ties == "dense":
            raise InvalidArgumentError("estimates count entries, not distinct scores: use rank(member, ties='dense')")
        if max_error is not None:
            check_count(max_error, "max_error")

        def run(x: Any) -> _estimate.Estimate | None:
            probe = self._estimate_probe(x, member, score, ties or "competition")
            return None if probe is None else _estimate.as_rank(self._estimate_below(x, probe, max_error))

        return self._read(run, staleness(max_staleness))

    def estimate_percentile(
        self,
        member: str | None = None,
        *,
        score: Score | None = None,
        max_error: float | None = None,
        max_staleness: float | None = None,
    ) -> _estimate.Percentile | None:
        """The estimated :meth:`percentile` of ``member`` or ``score`` (0.0 for an empty set; ``None`` for an absent
        member). ``low <= exact <= high``; bounds wider than ``max_error`` (a fraction) are made exact. Costs as
        :meth:`estimate_rank`.

        >>> board = SortedSet.load(mdss.open_store("memory://"), "b", {f"p{i}": i for i in range(100)}, chunk_size=10)
        >>> board.estimate_percentile("p89", max_error=0.0)
        Percentile(value=0.1, low=0.1, high=0.1)
        """
        member, score = self._estimate_args(member, score)
        if max_error is not None and (
            not isinstance(max_error, (int, float)) or isinstance(max_error, bool) or not max_error >= 0
        ):
            raise InvalidArgumentError(f"max_error must be a fraction >= 0, got {shown(max_error)}")

        def run(x: Any) -> _estimate.Percentile | None:
            probe = self._estimate_probe(x, member, score, "competition")
            if probe is None:
                return None
            total = self._count(x)
            keys = None if max_error is None else max_error * total
            return _estimate.as_percentile(self._estimate_below(x, probe, keys), total)

        return self._read(run, staleness(max_staleness))

    def _estimate_probe(self, x: Any, member: str | None, score: Score | None, ties: str) -> Any:
        """The score tree probe of an estimate: the member's key (or its score's), or a score's first key."""
        if member is None:
            return self._order.first_key(score)  # type: ignore[arg-type]
        keyed = self._keyed(x, member)
        if keyed is None:
            return None
        return keyed[1] if ties == "ordinal" else self._order.first_key(keyed[0])

    @staticmethod
    def _estimate_args(member: Any, score: Any) -> tuple[str | None, Score | None]:
        if (member is None) == (score is None):
            raise InvalidArgumentError("give exactly one of member and score")
        if member is not None:
            return check_member(member), None
        return None, check_score(score)

    # -- writes --------------------------------------------------------------

    def add(
        self,
        member: str,
        score: Score,
        *,
        op: str = "set",
        only: str | None = None,
        changed: bool = False,
        data: str | bytes | None = None,
    ) -> bool | None:
        """Set (``op="set"``), add to (``"incr"``), improve (``"best"``), raise (``"gt"``) or lower (``"lt"``) a
        member's score; ``only="new"`` / ``"existing"`` restricts it to absent / present members (Redis' ``ZADD``).

        ``data`` (a ``str`` or ``bytes``, up to 1 KB; :meth:`data`) is stored with the score in the same commit when the
        op takes the score; an op that keeps the current score (a condition failed, ``best`` found it better) keeps the
        current data too. ``None`` leaves the data as it is (:meth:`set_data` clears it).

        Returns whether the member was added, or with ``changed=True`` whether it was added or its score changed
        (Redis' ``CH``); ``None`` inside :meth:`batch`. One commit: O(log n).

        >>> board = SortedSet(mdss.open_store("memory://"), "b")
        >>> board.add("ann", 5), board.add("ann", 3, op="gt", changed=True), board.add("bob", 1, only="existing")
        (True, False, False)
        """
        if data is None:
            added = self.add_many([(member, score)], op=op, only=only, changed=changed)
            return None if added is None else added == 1
        how, member, score = _ops.code(op, only), check_member(member), check_score(score)
        check_flag(changed, "changed")
        data = check_data(data, data_room(self.chunk_size, self.store.max_value_bytes))
        results = self._submit([(how, member, (score, data))], want_score="changed" if changed else False)
        return None if results is None else bool(results[0])

    def set_data(self, member: str, data: str | bytes | None) -> bool | None:
        """Set the data of a present member (``None`` clears it), its score unchanged; returns whether the member
        was there (an absent one gets nothing). One commit.

        >>> board = SortedSet(mdss.open_store("memory://"), "b")
        >>> board.set_data("ann", "x"), board.add("ann", 1), board.set_data("ann", b"id:7"), board.data("ann")
        (False, True, True, b'id:7')
        """
        member = check_member(member)
        data = check_data(data, data_room(self.chunk_size, self.store.max_value_bytes))
        results = self._submit([(_ops.DATA, member, data)])
        return None if results is None else results[0]

    def add_many(
        self,
        pairs: Mapping[str, Score] | Iterable[tuple[str, Score]],
        *,
        op: str = "set",
        only: str | None = None,
        changed: bool = False,
    ) -> int | None:
        """Apply ``op`` (as in :meth:`add`) to many ``(member, score)`` pairs in one commit (one per shard); returns
        how many members were added, or with ``changed=True`` added or changed score (``ZADD`` / ``ZADD CH``)."""
        how = _ops.code(op, only)
        if type(changed) is not bool:
            raise InvalidArgumentError(f"changed must be True or False, got {shown(changed)}")
        ops = [(how, member, score) for member, score in each_pair(pairs)]
        results = self._submit(ops, want_score="changed" if changed else False)
        return None if results is None else sum(1 for new in results if new)

    def incr(self, member: str, delta: Score, *, only: str | None = None, when: str | None = None) -> Score | None:
        """Add ``delta`` to the member's score (absent members start from 0); returns the new score.

        ``only="new"`` / ``"existing"`` and ``when="gt"`` / ``"lt"`` (than the current score) are Redis' ``ZADD INCR``
        with NX/XX/GT/LT: when a condition fails nothing changes and it returns ``None``.

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
        """Remove many members in one commit (one per shard); returns how many were there."""
        results = self._submit([("remove", m, None) for m in check_members(members)])
        return None if results is None else sum(1 for found in results if found)

    def remove_range_by_score(self, lo: Score, hi: Score) -> int:
        """Remove every member scored from ``lo`` to ``hi`` inclusive (numerically, whatever the order: Redis'
        ``ZREMRANGEBYSCORE``); returns how many. Read from a fresh snapshot and removed on condition that each entry
        still holds the score read, as :meth:`pop_max` is: one commit (per shard when sharded); a range found changed
        is read again.

        >>> board = SortedSet.load(mdss.open_store("memory://"), "b", {"ann": 3, "bob": 2, "cid": 1})
        >>> board.remove_range_by_score(2, 5), [e.member for e in board]
        (2, ['cid'])
        """
        lo, hi = check_score(lo), check_score(hi)
        best, worst = (hi, lo) if self._order.name == "desc" else (lo, hi)

        def found(x: Any, _: int) -> list[Entry]:
            start, stop = self._score_bounds(x, best, worst)
            return self._entries(x, start, stop)

        return len(self._take_found(found, 0))

    def remove_range_by_rank(self, first: int, last: int) -> int:
        """Remove the entries ranked ``first`` to ``last`` (1-based, inclusive; ordinal ranks); returns how many. As
        :meth:`remove_range_by_score`; on a sharded set, where one shard's part changed meanwhile, the ranks from
        ``first`` are read again for the entries still to remove.

        >>> board = SortedSet.load(mdss.open_store("memory://"), "b", {"ann": 3, "bob": 2, "cid": 1})
        >>> board.remove_range_by_rank(1, 2), [e.member for e in board]
        (2, ['cid'])
        """
        if type(first) is not int or type(last) is not int or first < 1 or last < 0:
            raise InvalidArgumentError(
                f"first and last must be ints, first >= 1 and last >= 0 (ranks from 1; no negative index as in Redis),"
                f" got {shown(first, 40)}, {shown(last, 40)}"
            )
        span = max(last - first + 1, 0)
        return len(self._take_found(lambda x, done: self._entries(x, first - 1, last - done), span))

    def _take_found(self, found: Callable[[Any, int], list[Entry]], most: int, pop: bool = False) -> list[Entry]:
        """Take (:meth:`_take`) what ``found(snapshot, how many taken so far)`` lists, from fresh snapshots, until it
        lists nothing, all of it is taken, or ``most`` (if not 0) are: the entries taken, in the order found. Pops and
        range removals, within the set's commit policy; past it, a ``pop`` returns what it took, and a removal that
        took some raises :class:`StoreUnavailableError` saying how many."""
        taken: list[Entry] = []
        for _ in self._policy.attempts():
            done = len(taken)
            entries = self._read(lambda x, done=done: found(x, done), 0.0)
            try:
                took = {e.member for e in self._take(entries)} if entries else set()
            except StoreError as exc:
                failed_after(exc, f"after {len(taken)} entries were taken" if taken else "")
            taken.extend(e for e in entries if e.member in took)
            if len(took) == len(entries) or (most and len(taken) >= most):
                return taken
        if taken and pop:  # what it took is returned, or it would be lost to every caller
            return taken
        failed_after(
            ConflictError(f"entries of set {self.name!r} kept changing under their removal"),
            f"after {len(taken)} entries were taken" if taken else "",
        )

    def pop_min(self, n: int = 1) -> list[Entry]:
        """Remove and return up to ``n`` entries with the lowest scores, lowest first (Redis' ``ZPOPMIN``); see
        :meth:`pop_max`.

        >>> board = SortedSet.load(mdss.open_store("memory://"), "b", {"ann": 3, "bob": 2, "cid": 1})
        >>> board.pop_min(2), len(board)
        ([Entry(member='cid', score=1, rank=3), Entry(member='bob', score=2, rank=2)], 1)
        """
        return self._pop(n, lowest=True)

    def pop_max(self, n: int = 1) -> list[Entry]:
        """Remove and return up to ``n`` entries with the highest scores, highest first (Redis' ``ZPOPMAX``).

        The entries are read from a fresh snapshot and removed only if each still holds the score read (resolved in
        the commit): concurrent pops never return one entry twice, and an entry popped is returned to exactly one
        caller. A pop that finds them changed reads again, within the set's retry budget. Which of tied entries leave
        first follows the set's order from that end (a descending set ends with the greatest member of its lowest
        score). Unsharded, a pop is one commit; sharded, one per shard, and each entry returned was
        removed. Each entry's ``rank`` is its rank in the snapshot it was popped from.
        """
        return self._pop(n, lowest=False)

    def _pop(self, n: int, lowest: bool) -> list[Entry]:
        check_count(n, "n")
        from_end = lowest == (self._order.name == "desc")  # the lowest scores end a descending set

        def ends(x: Any, done: int) -> list[Entry]:
            want, size = n - done, self._count(x)
            if from_end:
                return self._entries(x, max(size - want, 0), size)[::-1]
            return self._entries(x, 0, want)

        popped = self._take_found(ends, n, pop=True)
        return sorted(popped, key=lambda e: e.score, reverse=not lowest)  # stable: ties as they left

    @contextmanager
    def batch(self) -> Iterator[Batch]:
        """Collect this thread's writes to the set and commit them at the end, atomically (per shard on a sharded set).

        Inside, writes return ``None``; the yielded :class:`Batch` gets their ``results``; an exception discards it.

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
        batch.results = self._submit(batch.ops, want_score=batch.want_scores) if batch.ops else []

    def _submit(
        self, ops: list[tuple[str, str, Any]], want_score: bool | str | list[bool | str] = False
    ) -> list[Any] | None:
        """Commit ``ops`` (:meth:`_commit_ops`), or add them to this thread's open batch (then ``None``)."""
        wants = want_score if isinstance(want_score, list) else [want_score] * len(ops)
        batch = getattr(self._local, "batch", None)
        if batch is not None:
            batch.ops.extend(ops)
            batch.want_scores.extend(wants)
            return None
        return self._commit_ops(ops, wants) if ops else []

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
        memory_bytes: int = 256 << 20,
        spill_dir: str | None = None,
        **options: Any,
    ) -> Any:
        """Build a whole set bottom-up in one commit (one per shard): O(n log n), a million entries in seconds.

        ``pairs`` may repeat a member (the last score wins). A non-empty set is refused unless ``replace=True`` (which
        replaces a damaged one too). ``progress(done, total)`` is called as nodes are written, ``batch`` per round trip.
        Pairs past what ``memory_bytes`` holds (about a million per 256 MiB) are spilled to a temporary SQLite
        database in ``spill_dir`` (the system's temporary directory by default) and sorted there, so that a load of
        any size stays near that budget; ``total`` is then an estimate until the last call.

        >>> board = SortedSet.load(mdss.open_store("memory://"), "b", {"a": 1, "b": 2}, chunk_size=4)
        >>> [e.member for e in board]
        ['b', 'a']
        """
        sset = cls(store, name, order=order, chunk_size=chunk_size, **options)  # type: ignore[call-arg]
        sset.load_from(
            pairs, replace=replace, progress=progress, batch=batch, memory_bytes=memory_bytes, spill_dir=spill_dir
        )
        return sset

    # -- expiry ------------------------------------------------------------

    def expire(self, seconds: float) -> bool:
        """Expire the set ``seconds`` from now (Redis' EXPIRE): from that moment it reads as dropped, and the next write
        drops it and starts a fresh set. True if the set existed (False, and nothing changed, if it is absent, expired
        already or without members, as Redis finds no key a set's last member left). A moment already passed expires
        it at once. The moment is in the head, by the reading process's clock; ``persist()`` clears it. One read of the
        head and one head write (a compare-and-set, retried on lost races).

        >>> s = SortedSet(mdss.open_store("memory://"), "s")
        >>> s.add("a", 1), s.expire(60), round(s.ttl())
        (True, True, 60)
        """
        return self._set_moment(_expiry.after(seconds))

    def expire_at(self, when: Any) -> bool:
        """Expire the set at ``when``, an aware ``datetime`` or seconds since the Unix epoch (Redis' EXPIREAT); naive
        datetimes are refused. As :meth:`expire` otherwise."""
        return self._set_moment(_expiry.at(when))

    def persist(self) -> bool:
        """Clear the set's expiry (Redis' PERSIST); True if it had one. An expired set is gone: False."""
        return self._persist()

    def ttl(self) -> float | None:
        """The seconds left before the set expires (by this process's clock), ``None`` when it has no expiry or does
        not exist. One round trip (the head; every shard's head for a sharded set)."""
        return _expiry.left(self._moment())

    def _check(self) -> None:
        """Assert :meth:`check` finds nothing; print the head and nodes when it does (for tests)."""
        problems = self.check()
        if problems:
            raise AssertionError(f"{self!r} is broken:\n  " + "\n  ".join(problems) + "\n  " + self._describe())

    @staticmethod
    def _checked_gc(min_age: Any, sweep: Any) -> float:
        if type(sweep) is not bool:
            raise InvalidArgumentError(f"sweep must be True or False, got {shown(sweep)}")
        return check_seconds(min_age, "min_age")
