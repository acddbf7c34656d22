"""SortedSet: the public face of a score tree and its member index under one head.

Every read takes one snapshot: it reads the head once and descends immutable
nodes, so whatever it returns is one committed state. Every write is one
commit: read the head, apply the batch copy-on-write in memory, write the new
nodes, compare-and-set the head; if another writer moved the head, apply the
batch again on the new head (rebase). See docs/architecture.md.
"""

from __future__ import annotations

import base64
import random
import secrets
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from operator import itemgetter
from typing import Any, NamedTuple, TypeVar

import msgpack

from ._cache import NodeCache
from ._codec import decode_head, encode_head
from ._group import GroupCommit, Pending
from ._keys import Keyspace
from ._order import Entry, Order, Score, add_scores, check_member, check_pairs, check_score
from ._tree import Manifest, MissingNodeError, Source, Tree, Writer, id_millis
from .exceptions import (
    ConflictError,
    CorruptDataError,
    InvalidArgumentError,
    InvalidScoreError,
    SettingsMismatchError,
    StoreUnavailableError,
)
from .stores.base import Record, Stats, Store

T = TypeVar("T")

DEFAULT_CHUNK = 1000
MAX_CHUNK = 100_000
OPS = ("set", "incr", "best")
TIES = ("ordinal", "competition")
#: How many commit ids a head remembers, to tell whether a commit whose reply was lost landed.
RECENT_COMMITS = 8
READ_ATTEMPTS = 8
#: gc() only deletes unreferenced nodes older than this (seconds): commits in flight are younger.
GC_MIN_AGE = 3600.0


_entry = Entry.__new__.__get__(Entry)  # Entry(member, score, rank) without NamedTuple's keyword handling


def _member_key(member: str, score: Any) -> str:
    return member


def _check_choice(value: Any, allowed: tuple[str, ...], what: str) -> str:
    if value not in allowed:
        raise InvalidArgumentError(f"{what} must be one of {', '.join(map(repr, allowed))}, got {value!r}")
    return value


def _check_count(value: Any, what: str) -> int:
    if type(value) is not int or value < 0:
        raise InvalidArgumentError(f"{what} must be a non-negative int, got {value!r}")
    return value


class Page(NamedTuple):
    """A page of entries and the cursor that continues after it (``None`` at the end)."""

    entries: list[Entry]
    cursor: str | None


def _encode_cursor(state: list[Any]) -> str:
    return base64.urlsafe_b64encode(msgpack.packb(state)).decode("ascii").rstrip("=")


def _decode_cursor(cursor: str) -> list[Any]:
    try:
        state = msgpack.unpackb(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        root, height, count, position, member, _score = state
        if not (root is None or type(root) is str) or not all(type(n) is int for n in (height, count, position)):
            raise ValueError(state)
        if member is not None:
            check_member(member)
    except Exception:
        raise InvalidArgumentError(f"not a page cursor of this set: {cursor!r:.80}") from None
    return state


class Batch:
    """The operations of one :meth:`SortedSet.batch` block, and their results once committed."""

    __slots__ = ("ops", "want_scores", "results")

    def __init__(self) -> None:
        self.ops: list[tuple[str, str, Any]] = []
        self.want_scores: list[bool] = []
        self.results: list[Any] | None = None


class _Snapshot:
    """One committed state: the head as read, and both trees as it names them."""

    __slots__ = ("record", "head", "scores", "members", "source")

    def __init__(self, sset: SortedSet, record: Record | None, head: dict[str, Any], source: Source) -> None:
        self.record, self.head, self.source = record, head, source
        self.scores = Tree(source, sset._order.key, *head["score"])
        self.members = Tree(source, _member_key, *head["member"])


class SortedSet:
    """A sorted set of ``(member, score)`` kept in a key-value store.

    ``order`` is ``"desc"`` (highest score first, the usual leaderboard) or
    ``"asc"``; ties are broken by member. ``chunk_size`` is the most entries
    an entry set and the most children a manifest hold. Both default to the
    stored settings of an existing set, else ``"desc"`` and 1000; opening an
    existing set with different ones raises :class:`SettingsMismatchError`.
    ``cache_bytes`` bounds the cache of decoded nodes. Replaced nodes are
    deleted ``gc_grace`` seconds after the commit that replaced them, so that
    readers on an older head can finish. Writes from concurrent threads are
    grouped into one commit of up to ``max_batch`` operations; a commit waits
    up to ``max_wait`` seconds for more to join (0: only what queued while
    the previous commit ran).

    >>> board = SortedSet(mdss.open_store("memory://"), "board", chunk_size=4)
    >>> board.add_many({"ann": 5, "bob": 7, "cid": 5, "dee": 1})
    4
    >>> board.rank("cid"), board.rank("cid", ties="competition")
    (3, 2)
    """

    def __init__(
        self,
        store: Store,
        name: str,
        *,
        order: str | None = None,
        chunk_size: int | None = None,
        cache_bytes: int = 64 << 20,
        gc_grace: float = 30.0,
        max_attempts: int = 32,
        max_batch: int = 1000,
        max_wait: float = 0.0,
    ) -> None:
        if not isinstance(store, Store):
            raise InvalidArgumentError(f"store must be an mdss Store (see mdss.open_store), got {store!r}")
        if order is not None:
            _check_choice(order, ("desc", "asc"), "order")
        if chunk_size is not None and (type(chunk_size) is not int or not 2 <= chunk_size <= MAX_CHUNK):
            raise InvalidArgumentError(f"chunk_size must be an int from 2 to {MAX_CHUNK}, got {chunk_size!r}")
        self.store = store
        self.name = name
        self._keys = Keyspace(store.namespace, name)
        self._cache = NodeCache(cache_bytes)
        self.gc_grace = gc_grace
        self.max_attempts = max_attempts
        self._garbage: list[tuple[float, list[str]]] = []
        self._lock = threading.Lock()
        self._local = threading.local()
        self._group = GroupCommit(self._commit, max_batch, max_wait)
        self.commits = 0  # commits this object published, and re-applications after losing a race
        self.retries = 0
        self._head_bytes: bytes | None = None
        self._head: dict[str, Any] | None = None
        record = store.get(self._keys.head)
        if record is not None:
            stored = decode_head(self._keys.head, record.value)
            for what, wanted, have in (("order", order, stored["order"]), ("chunk_size", chunk_size, stored["chunk"])):
                if wanted is not None and wanted != have:
                    raise SettingsMismatchError(f"set {name!r} is stored with {what}={have!r}, not {wanted!r}")
            order, chunk_size = stored["order"], stored["chunk"]
        self.order: str = order or "desc"
        self.chunk_size: int = chunk_size or DEFAULT_CHUNK
        self._order = Order(self.order)

    def __repr__(self) -> str:
        return f"SortedSet({self.name!r}, order={self.order!r}, chunk_size={self.chunk_size})"

    @property
    def stats(self) -> Stats:
        """The store's counters of round trips and bytes (shared by every set on that store)."""
        return self.store.stats

    # -- heads and snapshots ---------------------------------------------

    def _empty_head(self) -> dict[str, Any]:
        return {
            "order": self.order,
            "chunk": self.chunk_size,
            "gen": 0,
            "recent": [],
            "score": [None, 0, 0],
            "member": [None, 0, 0],
        }

    def _decode_head(self, data: bytes) -> dict[str, Any]:
        if data == self._head_bytes:
            return self._head  # type: ignore[return-value]
        head = decode_head(self._keys.head, data)
        if (head["order"], head["chunk"]) != (self.order, self.chunk_size):
            raise SettingsMismatchError(
                f"set {self.name!r} was recreated with order={head['order']!r}, chunk_size={head['chunk']}"
            )
        self._head_bytes, self._head = data, head
        return head

    def _snapshot(self) -> _Snapshot:
        record = self.store.get(self._keys.head)
        head = self._empty_head() if record is None else self._decode_head(record.value)
        return _Snapshot(self, record, head, Source(self.store, self._keys, self._cache))

    def _read(self, fn: Callable[[_Snapshot], T]) -> T:
        """Run ``fn`` on a fresh snapshot; if a node it needs was collected meanwhile, on a newer one."""
        for attempt in range(READ_ATTEMPTS):
            try:
                return fn(self._snapshot())
            except MissingNodeError:
                if attempt == READ_ATTEMPTS - 1:
                    raise
                time.sleep(0.001 * 2**attempt)
        raise AssertionError("unreachable")

    # -- reads -------------------------------------------------------------

    def __len__(self) -> int:
        """Number of members. One round trip (the head)."""
        return self._read(lambda snap: snap.head["score"][2])

    def info(self) -> dict[str, Any]:
        """The head's facts: members, settings, generation, each tree's height. One round trip.

        >>> SortedSet(mdss.open_store("memory://"), "b").info()["members"]
        0
        """
        head = self._read(lambda snap: snap.head)
        return {
            "members": head["score"][2],
            "order": self.order,
            "chunk_size": self.chunk_size,
            "generation": head["gen"],
            "score_tree_height": head["score"][1] + (head["score"][0] is not None),
            "member_index_height": head["member"][1] + (head["member"][0] is not None),
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
        return self._read(lambda snap: snap.members.get(member))

    def scores(self, members: Iterable[str]) -> list[Score | None]:
        """The scores of many members (``None`` where absent), in one batched descent."""
        wanted = [check_member(m) for m in members]
        return self._read(lambda snap: snap.members.find(wanted))

    def rank(self, member: str, *, ties: str = "ordinal") -> int | None:
        """The member's 1-based rank, or ``None`` if absent. O(log n).

        ``ties="ordinal"``: ties broken by member, every rank distinct.
        ``ties="competition"``: 1 + the number of members with a strictly
        better score ("1224" ranking). With manifests cached: three round
        trips (head, member index entry set, score entry set).
        """
        member = check_member(member)
        _check_choice(ties, TIES, "ties")

        def run(snap: _Snapshot) -> int | None:
            score = snap.members.get(member)
            if score is None:
                return None
            probe = self._order.key(member, score) if ties == "ordinal" else self._order.first_key(score)
            return snap.scores.rank_of(probe) + 1

        return self._read(run)

    def rank_of_score(self, score: Score) -> int:
        """The competition rank a member with ``score`` would have (1 + members strictly better).

        Needs no member: the Datastore ranking tree's FindRank. Two round trips
        with manifests cached (head, one entry set).
        """
        probe = self._order.first_key(check_score(score))
        return self._read(lambda snap: snap.scores.rank_of(probe) + 1)

    def _entries(self, snap: _Snapshot, start: int, stop: int) -> list[Entry]:
        members, scores = snap.scores.slice(start, stop)
        return list(map(_entry, members, scores, range(start + 1, start + 1 + len(members))))

    def range(self, offset: int = 0, limit: int = 10) -> list[Entry]:
        """Up to ``limit`` entries from position ``offset`` (0 is rank 1), in set order.

        O(log n + limit); with manifests cached, two round trips (head and the
        entry sets the page spans, fetched together).
        """
        _check_count(offset, "offset")
        _check_count(limit, "limit")
        return self._read(lambda snap: self._entries(snap, offset, offset + limit))

    def at(self, rank: int) -> Entry | None:
        """The entry at a 1-based rank, or ``None`` past the end (FindScore)."""
        if type(rank) is not int or rank < 1:
            raise InvalidArgumentError(f"rank must be an int >= 1, got {rank!r}")
        found = self.range(rank - 1, 1)
        return found[0] if found else None

    def _score_bounds(self, snap: _Snapshot, best: Score, worst: Score) -> tuple[int, int]:
        low, high = self._order.first_key(best), self._order.last_key(worst)
        if high < low:
            return 0, 0
        start, stop = snap.scores.count_below([low, high])
        return start, stop

    def range_by_score(self, best: Score, worst: Score, *, offset: int = 0, limit: int | None = None) -> list[Entry]:
        """Entries whose score lies between ``best`` and ``worst`` inclusive, best first.

        For a ``desc`` set ``best`` is the higher bound. ``offset`` and
        ``limit`` page within the range.
        """
        best, worst = check_score(best), check_score(worst)
        _check_count(offset, "offset")
        if limit is not None:
            _check_count(limit, "limit")

        def run(snap: _Snapshot) -> list[Entry]:
            start, stop = self._score_bounds(snap, best, worst)
            start += offset
            if limit is not None:
                stop = min(stop, start + limit)
            return self._entries(snap, start, stop)

        return self._read(run)

    def count(self, best: Score, worst: Score) -> int:
        """How many members have a score between ``best`` and ``worst`` inclusive. O(log n)."""
        best, worst = check_score(best), check_score(worst)

        def run(snap: _Snapshot) -> int:
            start, stop = self._score_bounds(snap, best, worst)
            return stop - start

        return self._read(run)

    def around(self, member: str, before: int = 5, after: int = 5) -> list[Entry]:
        """The entries around ``member`` (it included), or ``[]`` if it is absent."""
        member = check_member(member)
        _check_count(before, "before")
        _check_count(after, "after")

        def run(snap: _Snapshot) -> list[Entry]:
            score = snap.members.get(member)
            if score is None:
                return []
            position = snap.scores.rank_of(self._order.key(member, score))
            return self._entries(snap, max(position - before, 0), position + after + 1)

        return self._read(run)

    def page(self, limit: int = 100, cursor: str | None = None) -> Page:
        """A page of ``limit`` entries and the cursor of the next page (``None`` after the last).

        Pages read the snapshot of the first page (no head read), so paging
        never yields a member twice and never skips one, however the set
        changes meanwhile, for as long as that snapshot's nodes are kept
        (``gc_grace`` after they are replaced). After that, the next page
        continues on the newest state just after the last entry returned: a
        member unchanged throughout is still never skipped nor repeated. The
        cursor is a URL-safe string.

        >>> board = SortedSet.load(mdss.open_store("memory://"), "b", {"a": 3, "b": 2, "c": 1})
        >>> first = board.page(2)
        >>> first.entries[-1], board.page(2, first.cursor)
        (Entry(member='b', score=2, rank=2), Page(entries=[Entry(member='c', score=1, rank=3)], cursor=None))
        """
        if type(limit) is not int or limit < 1:
            raise InvalidArgumentError(f"limit must be an int >= 1, got {limit!r}")
        if cursor is None:
            snap = self._snapshot()
            state: list[Any] = [*snap.head["score"], 0, None, None]
        else:
            state = _decode_cursor(cursor)
        root, height, count, position, last_member, last_score = state
        for attempt in range(READ_ATTEMPTS):
            source = Source(self.store, self._keys, self._cache)
            tree = Tree(source, self._order.key, root, height, count)
            try:
                members, scores = tree.slice(position, position + limit)
                break
            except MissingNodeError:  # the snapshot was collected: go on from the newest head
                if attempt == READ_ATTEMPTS - 1:
                    raise
                snap = self._snapshot()
                root, height, count = snap.head["score"]
                position = 0
                if last_member is not None:
                    last = self._order.key(last_member, last_score)
                    position = snap.scores.count_below([(last[0], last[1] + "\0")])[0]
        entries = [Entry(m, s, position + i + 1) for i, (m, s) in enumerate(zip(members, scores))]
        position += len(entries)
        if position >= count or not entries:
            return Page(entries, None)
        return Page(entries, _encode_cursor([root, height, count, position, members[-1], scores[-1]]))

    def __iter__(self) -> Iterator[Entry]:
        """Every entry in order, one entry set at a time, from one snapshot (see :meth:`page`)."""
        cursor = None
        while True:
            entries, cursor = self.page(self.chunk_size, cursor)
            yield from entries
            if cursor is None:
                return

    # -- writes --------------------------------------------------------------

    def add(self, member: str, score: Score, *, op: str = "set") -> bool | None:
        """Set (``op="set"``), add to (``"incr"``) or improve (``"best"``) a member's score.

        Returns whether the member is new (``None`` inside :meth:`batch`). One commit: O(log n).
        """
        added = self.add_many([(member, score)], op=op)
        return None if added is None else added == 1

    def add_many(self, pairs: Mapping[str, Score] | Iterable[tuple[str, Score]], *, op: str = "set") -> int | None:
        """Apply ``op`` to many ``(member, score)`` pairs in one commit; returns how many members are new."""
        _check_choice(op, OPS, "op")
        items = pairs.items() if isinstance(pairs, Mapping) else pairs
        results = self._submit([(op, check_member(m), check_score(s)) for m, s in items])
        return None if results is None else sum(1 for new in results if new)

    def incr(self, member: str, delta: Score) -> Score | None:
        """Add ``delta`` to the member's score (absent members start from 0); returns the new score."""
        results = self._submit([("incr", check_member(member), check_score(delta))], want_score=True)
        return None if results is None else results[0]

    def remove(self, member: str) -> bool | None:
        """Remove a member; returns whether it was there."""
        results = self._submit([("remove", check_member(member), None)])
        return None if results is None else results[0]

    def remove_many(self, members: Iterable[str]) -> int | None:
        """Remove many members in one commit; returns how many were there."""
        results = self._submit([("remove", check_member(m), None) for m in members])
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

    def _submit(self, ops: list[tuple[str, str, Any]], want_score: bool | list[bool] = False) -> list[Any] | None:
        """Commit ``ops`` (through group commit), or add them to this thread's open batch."""
        batch = getattr(self._local, "batch", None)
        if batch is not None:
            batch.ops.extend(ops)
            batch.want_scores.extend([bool(want_score)] * len(ops))
            return None
        if not ops:
            return []
        return self._group.submit(ops, want_score)  # type: ignore[arg-type]

    def _apply_ops(self, pending: Pending, new: dict[str, Any]) -> list[Any]:
        """Apply one caller's ops to ``new`` (member -> score, ``None``: absent); each op's result.

        Leaves ``new`` untouched if an op is refused (an ``incr`` overflowing).
        """
        trial = {member: new[member] for _, member, _ in pending.ops}
        results: list[Any] = []
        better = self._order.better
        wants = pending.want_score
        for n, (op, member, value) in enumerate(pending.ops):
            current = trial[member]
            if op == "remove":
                results.append(current is not None)
                trial[member] = None
                continue
            if op == "set":
                trial[member] = value
            elif op == "incr":
                trial[member] = add_scores(0 if current is None else current, value)
            else:  # best
                trial[member] = value if current is None else better(current, value)
            want = wants[n] if isinstance(wants, list) else wants
            results.append(trial[member] if want else current is None)
        new.update(trial)
        return results

    def _commit(self, pendings: list[Pending]) -> None:
        """Commit several callers' ops atomically, rebasing on concurrent commits.

        Sets each pending's ``result``, or its ``error`` if its own ops were
        refused (the others still commit).
        """
        members = list(dict.fromkeys(member for p in pendings for _, member, _ in p.ops))
        key = self._order.key
        for attempt in range(self.max_attempts):
            try:
                snap = self._snapshot()
                old = dict(zip(members, snap.members.find(members)))
                new = dict(old)
                for pending in pendings:
                    pending.result, pending.error = None, None
                    try:
                        pending.result = self._apply_ops(pending, new)
                    except InvalidScoreError as exc:
                        pending.error = exc
                score_ops, member_ops = [], []
                for member in members:
                    was, now = old[member], new[member]
                    if type(was) is type(now) and was == now:
                        continue
                    if was is not None:
                        score_ops.append((key(member, was), member, None))
                    if now is not None:
                        score_ops.append((key(member, now), member, now))
                    member_ops.append((member, member, now))
                if not member_ops:
                    return
                score_ops.sort(key=itemgetter(0))
                member_ops.sort(key=itemgetter(0))
                writer = Writer(self.chunk_size)
                head = dict(snap.head)
                head["score"] = list(writer.apply(snap.scores, score_ops))
                head["member"] = list(writer.apply(snap.members, member_ops))
            except MissingNodeError:
                if attempt == self.max_attempts - 1:
                    raise
                continue  # a node was collected under the head we read: read a newer one
            if self._publish(snap, head, writer):
                self.commits += 1
                return
            self.retries += 1
            time.sleep(random.uniform(0, min(0.002 * 2**attempt, 0.2)))
        raise ConflictError(
            f"commit to set {self.name!r} lost to concurrent writers {self.max_attempts} times; nothing was applied"
        )

    def _publish(
        self, snap: _Snapshot, head: dict[str, Any], writer: Writer, nodes: dict[str, bytes] | None = None
    ) -> bool:
        """Write the new nodes (unless given: already written), then compare-and-set the head.

        False if another commit won; then the new nodes are deleted again.
        """
        if writer.new and time.time() * 1000 - id_millis(next(iter(writer.new))) > GC_MIN_AGE * 500:
            return False  # so slow that gc() may have taken its nodes for garbage: do it again
        nonce = secrets.token_hex(8)
        head["gen"] = snap.head["gen"] + 1
        head["recent"] = [nonce, *snap.head.get("recent", [])][:RECENT_COMMITS]
        if nodes is None:
            nodes = writer.encoded(self._keys)
            self.store.put_many(nodes)
        version = None if snap.record is None else snap.record.version
        try:
            self.store.cas(self._keys.head, encode_head(head), version)
        except ConflictError:
            self.store.delete_many(nodes)  # never referenced by any head
            return False
        except StoreUnavailableError:
            if not self._landed(nonce):
                raise
        for node_id in writer.replaced:  # only readers of older heads could want them: they reload
            self._cache.discard(node_id)
        for node_id, node in writer.new.items():
            self._cache.put(node_id, node, len(nodes[self._keys.node(node_id)]))
        self._discard(writer.replaced)
        return True

    def _landed(self, nonce: str) -> bool:
        """After a compare-and-set whose reply was lost: did it land? (Raises if still unreachable.)"""
        record = self.store.get(self._keys.head)
        return record is not None and nonce in self._decode_head(record.value).get("recent", [])

    def _discard(self, node_ids: list[str]) -> None:
        """Schedule replaced nodes for deletion after the grace period; delete those that are due."""
        now = time.monotonic()
        with self._lock:
            if node_ids:
                self._garbage.append((now + self.gc_grace, [self._keys.node(i) for i in node_ids]))
            due = [keys for deadline, keys in self._garbage if deadline <= now]
            self._garbage = [item for item in self._garbage if item[0] > now]
        if due:
            self.store.delete_many([key for keys in due for key in keys])

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
        non-empty set is refused unless ``replace=True``. ``progress(done,
        total)`` is called as nodes are written, ``batch`` nodes per round trip.

        >>> board = SortedSet.load(mdss.open_store("memory://"), "b", {"a": 1, "b": 2}, chunk_size=4)
        >>> [e.member for e in board]
        ['b', 'a']
        """
        sset = cls(store, name, order=order, chunk_size=chunk_size, **options)
        data = check_pairs(pairs.items() if isinstance(pairs, Mapping) else pairs)
        snap = sset._snapshot()
        if snap.head["score"][2] and not replace:
            raise InvalidArgumentError(f"set {name!r} already has entries; pass replace=True to replace them")
        writer = Writer(sset.chunk_size)
        members = sorted(data)
        scores = [data[m] for m in members]
        head = dict(snap.head)
        head["member"] = list(writer.build(snap.members, members, scores))
        # A stable sort by score alone keeps ties in member order: the set's tie-break, in either order.
        ranked = sorted(range(len(members)), key=scores.__getitem__, reverse=sset.order == "desc")
        head["score"] = list(writer.build(snap.scores, [members[i] for i in ranked], [scores[i] for i in ranked]))
        if replace:
            writer.replaced = [node_id for tree in (snap.scores, snap.members) for _, _, node_id in _node_ids(tree)]
        nodes = writer.encoded(sset._keys)
        names = list(nodes)
        for done in range(0, len(names), batch):
            sset.store.put_many({k: nodes[k] for k in names[done : done + batch]})
            if progress is not None:
                progress(min(done + batch, len(names)), len(names))
        writer.new = {}  # a load does not fill the cache with the whole set
        if not sset._publish(snap, head, writer, nodes):
            raise ConflictError(f"set {name!r} changed while it was being loaded; nothing was applied")
        return sset

    def gc(self, *, min_age: float = GC_MIN_AGE, wait: bool = True) -> int:
        """Delete stored nodes that no head references: those of interrupted commits and of processes
        that ended before their replaced nodes' grace period did. Returns how many it deleted.

        Only nodes created more than ``min_age`` seconds ago are candidates
        (commits in flight are younger: a commit older than ``min_age / 2``
        is never published). Unless ``wait=False``, it then waits
        ``gc_grace`` seconds before deleting, so that readers holding an
        older head finish. Lists every node key of the set: a maintenance
        call, O(nodes).
        """
        garbage = self.unreferenced(min_age)
        if garbage and wait:
            time.sleep(self.gc_grace)
        for start in range(0, len(garbage), 1000):
            self.store.delete_many(garbage[start : start + 1000])
        return len(garbage)

    def unreferenced(self, min_age: float = 0.0) -> list[str]:
        """Keys of stored nodes the current head does not reference, created over ``min_age`` seconds ago.

        That is garbage waiting for its grace period, nodes of commits in
        flight or interrupted, and (older than :data:`GC_MIN_AGE`) leaks.
        """
        snap = self._snapshot()
        live = snap.scores.node_ids() | snap.members.node_ids()
        cutoff, nodes = (time.time() - min_age) * 1000, self._keys.nodes
        return [
            key
            for key in self.store.keys(nodes)
            if key[len(nodes) :] not in live and id_millis(key[len(nodes) :]) <= cutoff
        ]

    def node_keys(self) -> list[str]:
        """The store keys of every node the current head references (both trees). Reads manifests only."""
        snap = self._snapshot()
        return [self._keys.node(i) for i in snap.scores.node_ids() | snap.members.node_ids()]

    def drop(self) -> None:
        """Remove the whole set: its head, then every node it referenced."""
        snap = self._snapshot()
        ids = [node_id for tree in (snap.scores, snap.members) for _, _, node_id in _node_ids(tree)]
        self.store.delete(self._keys.head)
        self._head_bytes = self._head = None
        self.store.delete_many([self._keys.node(i) for i in ids])

    def check(self) -> list[str]:
        """Verify every invariant of the stored tree; the problems found (empty when sound).

        Reads every node: O(n). Checks sortedness and node sizes, minimum fill
        of non-root nodes, manifest summaries against their children, equal
        leaf depth, the member index against the score tree, the head's
        counts against the trees; and reports nodes that nothing has referenced
        for longer than a commit can take (see :meth:`unreferenced` for all).
        """
        problems: list[str] = []
        try:
            snap = self._snapshot()
            pairs = []
            for tree, what in ((snap.scores, "score tree"), (snap.members, "member index")):
                found = _check_tree(tree, self.chunk_size, what, problems)
                pairs.append(found)
            if pairs[0] != pairs[1]:
                only_s = sorted(pairs[0] - pairs[1])[:5]
                only_m = sorted(pairs[1] - pairs[0])[:5]
                problems.append(f"member index and score tree differ: only in scores {only_s}, only in index {only_m}")
            with self._lock:
                scheduled = {key for _, keys in self._garbage for key in keys}
            leaked = [key for key in self.unreferenced(GC_MIN_AGE) if key not in scheduled]
            if leaked:
                problems.append(
                    f"{len(leaked)} stored nodes created over {GC_MIN_AGE:.0f} s ago are referenced by "
                    f"nothing (left by interrupted commits or ended processes); gc() deletes them"
                )
        except (CorruptDataError, StoreUnavailableError) as exc:
            problems.append(str(exc))
        return problems

    def _check(self) -> None:
        """Assert :meth:`check` finds nothing; print the trees when it does (for tests)."""
        problems = self.check()
        if problems:
            raise AssertionError(f"{self!r} is broken:\n  " + "\n  ".join(problems))


def _node_ids(tree: Tree) -> Iterator[tuple[int, list[str], str]]:
    for height, path, _node in tree.walk():
        yield height, path, path[-1]


def _check_tree(tree: Tree, chunk: int, what: str, problems: list[str]) -> set[tuple[str, Any]]:
    """Check one tree's invariants, appending problems; returns its (member, score) pairs."""
    minimum = max(chunk // 2, 1)
    pairs: set[tuple[str, Any]] = set()
    expected: dict[str, tuple[int, Any]] = {}  # node id -> (count, first key) its parent records
    previous_last = None
    total = 0
    for height, path, node in tree.walk():
        node_id, where = path[-1], f"{what} node {path[-1]} (height {height})"
        is_root = len(path) == 1
        if len(node) > chunk:
            problems.append(f"{where} holds {len(node)} items, more than {chunk}")
        if not is_root and len(node) < minimum:
            problems.append(f"{where} holds {len(node)} items, under the minimum fill {minimum}")
        if is_root and height and len(node) < 2:
            problems.append(f"{where} is a root manifest with a single child")
        if isinstance(node, Manifest):
            if node.height != height:
                problems.append(f"{where} says it is at height {node.height}: entry sets at unequal depths")
            keys = node.firsts
            for child, count, first in zip(node.ids, node.counts, node.firsts):
                expected[child] = (count, first)
            count = node.total
        elif height:
            problems.append(f"{where} is an entry set above the leaves: entry sets at unequal depths")
            continue
        else:
            keys = node.keys
            count = len(node)
            pairs.update(zip(node.members, node.scores))
            if previous_last is not None and node.keys and not previous_last < node.keys[0]:
                problems.append(f"{where} starts at {node.keys[0]!r}, not after the previous entry set's last key")
            if node.keys:
                previous_last = node.keys[-1]
            total += count
        if any(not a < b for a, b in zip(keys, keys[1:])):
            problems.append(f"{where} is not strictly sorted")
        if node_id in expected:
            want_count, want_first = expected[node_id]
            first = keys[0] if keys else None
            if (want_count, want_first) != (count, first):
                problems.append(
                    f"{where}: its manifest records count {want_count} and first key {want_first!r}, "
                    f"it holds {count} from {first!r}"
                )
    if total != tree.count:
        problems.append(f"head says the {what} holds {tree.count} entries, it holds {total}")
    if tree.root is None and tree.count:
        problems.append(f"head gives the {what} no root but {tree.count} entries")
    return pairs
