"""Sharded sets: one logical sorted set kept as ``S`` independent trees, each under its own head and log.

A member lives in shard ``crc32(utf-8 member) % S`` (stable across processes, machines and Python versions). Each shard
is an engine of its own (head, trees, update log, group commit), so writers of different shards never race for one
compare-and-set. The shards and their key names are fixed at creation, in a settings record (``{ns}:{set}:s``).

Reads answer exactly what the unsharded set would, from one snapshot of all ``S`` heads, each step's fetches batched
across shards in one ``get_many`` (``mdss._gather``, ``mdss._shard_page``; docs/architecture.md, "Sharded sets").
Writes go to each member's shard: a batch is atomic within each shard only.
"""

from __future__ import annotations

import threading
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from . import (
    _check,
    _commit,
    _cursor,
    _estimate,
    _expiry,
    _garbage,
    _gather,
    _load,
    _log,
    _merge,
    _ops,
    _shard_page,
    _snapshot,
)
from ._allkeys import AllKeys
from ._cache import NodeCache
from ._codec import MAX_SHARDS, Settings
from ._engine import Engine
from ._facade import TIES, Page, SetMethods, check_options, check_page, new_entry, page_around, staleness
from ._gather import Gather, Part
from ._head import Head
from ._keys import SHARD, Keyspace, shard_keyspace, shard_parts
from ._order import (
    Entry,
    Order,
    Score,
    check_choice,
    check_flag,
    check_member,
    check_score,
    check_seconds,
    exact,
    score_of,
    spelled_number,
)
from ._recent import Recent
from ._tree import Tree
from ._writer import check_chunk_size
from .exceptions import (
    ConflictError,
    CorruptDataError,
    InvalidArgumentError,
    MissingNodeError,
    OutcomeUnknownError,
    SettingsMismatchError,
    StoreError,
    failed_after,
    shown,
)
from .stores.base import Store

T = TypeVar("T")

#: Commits in a row that found a shard's held head current before the next trusts it unread (``_commit._read_first``).
TRUST_AFTER = 2


def shard_of(member: str, shards: int) -> int:
    """The shard of ``member``: the CRC-32 of its UTF-8 bytes modulo ``shards``.

    >>> shard_of("alice", 4), shard_of("bob", 4)
    (3, 0)
    """
    return zlib.crc32(member.encode("utf-8")) % shards


def store_settings(store: Store, key: str, settings: Settings) -> None:
    """Store a sharded set's settings unless there (compare-and-set "only if absent"): another creator's must match. A
    reply lost is settled by the record as it stands: these settings there, from this write or another, are success."""
    try:
        store.cas(key, settings.encode(), None)
    except (ConflictError, OutcomeUnknownError) as exc:
        record = exc.current if isinstance(exc, ConflictError) and exc.current_known else store.get(key)
        if record is None and isinstance(exc, OutcomeUnknownError):
            raise
        if record is not None and Settings.decode(key, record.value) != settings:
            raise SettingsMismatchError(
                f"set stored under {key!r} was made afresh with other settings meanwhile: "
                f"{Settings.decode(key, record.value)}, not {settings}"
            ) from None


def open_sharded(store: Any, name: Any, shards: Any, options: dict[str, Any]) -> ShardedSet | None:
    """The set ``name`` if sharded (``shards`` > 1 given, or its settings record says so: one round trip), else None."""
    if not isinstance(store, Store) or not isinstance(name, str) or not name:
        return None  # SortedSet says what is wrong
    if shards is not None and (type(shards) is not int or not 1 <= shards <= MAX_SHARDS):
        raise InvalidArgumentError(f"shards must be an int from 1 to {MAX_SHARDS}, got {shown(shards)}")
    keys = Keyspace(store.namespace, name)
    record = store.get(keys.settings)
    if record is None:
        if shards is None or shards == 1:
            return None
        if store.get(keys.head) is not None:  # an unsharded set of that name exists
            raise SettingsMismatchError(f"set {name!r} is stored with shards=1, not {shards}")
        return ShardedSet(store, name, shards=shards, **options)
    stored = Settings.decode(keys.settings, record.value)
    if shards is not None and shards != stored.shards:
        raise SettingsMismatchError(f"set {name!r} is stored with shards={stored.shards}, not {shards}")
    return ShardedSet(store, name, shards=stored.shards, **options)


class ShardedSet(SetMethods):
    """A sorted set split into ``shards`` trees, answering as :class:`SortedSet` does (``SortedSet(..., shards=S)``
    makes it). Writes are atomic per shard (an ``incr`` that would overflow is refused before any shard commits).

    >>> board = SortedSet(mdss.open_store("memory://"), "board", shards=3, chunk_size=4)
    >>> board.add_many({"ann": 5, "bob": 7, "cid": 5, "dee": 1})
    4
    >>> board.rank("cid"), board.range(1, 2)
    (3, [Entry(member='ann', score=5, rank=2), Entry(member='cid', score=5, rank=3)])
    """

    def __init__(
        self,
        store: Store,
        name: str,
        *,
        shards: int,
        order: str | None = None,
        chunk_size: int | None = None,
        tiebreak: str | None = None,
        cache_bytes: int = 64 << 20,
        max_staleness: float = 0.0,
        **options: Any,
    ) -> None:
        check_options(
            store,
            order=order,
            chunk_size=chunk_size,
            tiebreak=tiebreak,
            cache_bytes=cache_bytes,
            max_staleness=max_staleness,
            **options,
        )
        self.store, self.name = store, exact(name)
        #: Where the set lives in the store: its settings record (its shards' keys are the engines').
        self.keys = Keyspace(store.namespace, name)
        Keyspace.internal(store.namespace, name, "9999.fffff", SHARD).check_fits(store, name)  # its longest shard's
        self._settings_key = self.keys.settings
        settings = self._settings(shards, order, chunk_size, tiebreak)
        self.shards = settings.shards
        self._order = Order(settings.order, settings.tiebreak)
        self.order, self.chunk_size, self.tiebreak = settings.order, settings.chunk, settings.tiebreak
        self._cache = NodeCache(cache_bytes)  # node ids are unique (epoch, clock, 64 random bits): one cache serves all
        self._all_keys = AllKeys(self._cache)
        self._stored = settings
        # True while the settings record may be missing (after drop(), or a failed _restore): the next write stores it.
        self._resettle = False
        stale = [0.0]  # how often held heads had moved: alike on every shard (mdss._engine.WriterState.learn)
        moments = [0] if settings.tiebreak == "first" else None  # one log per shard: ties by first go by the clock
        self._recent = Recent(max_staleness)  # every shard's head bytes, kept for reads within the bound
        #: The engines this set is a facade over, one per shard.
        self.engines = [
            Engine(
                store,
                f"{name}[{i}]",
                shard_keyspace(store.namespace, name, part),
                _commit.commit,
                order=settings.order,
                chunk_size=settings.chunk,
                tiebreak=settings.tiebreak,
                cache=self._cache,
                stale=stale,
                outer=self._recent,
                trust_after=TRUST_AFTER,
                on_start=self._restore,
                moments=moments,
                **options,
            )
            for i, part in enumerate(settings.parts)
        ]
        self._seen: list[Part | None] = [None] * self.shards  # each shard as the last read saw it
        #: The head bytes of the last fresh read whose shards all came from their heads' bytes, and its parts: a read
        #: that finds the same bytes takes these parts as they are, without looking at each shard.
        self._last: tuple[list[bytes | None], list[Part]] | None = None
        self._settled = False  # the last fresh read found ``_last``'s bytes again: the next one guesses (_guessed)
        self._head_keys = [engine.keys.head for engine in self.engines]
        first = self.engines[0]
        self.gc_grace, self.log_limit, self._policy = first.gc_grace, first.log_limit, first.policy
        self._local = threading.local()

    def _settings(self, shards: int, order: str | None, chunk_size: int | None, tiebreak: str | None) -> Settings:
        """The stored settings, or new ones stored now (compare-and-set "only if absent": one creator wins)."""
        key = self._settings_key
        record = self.store.get(key)
        if record is None:
            chunk = chunk_size or 1000
            check_chunk_size(chunk, self.store.max_value_bytes, type(self.store).__name__)
            parts = tuple(shard_parts(self.store.namespace, self.name, shards, self.store))
            fresh = Settings(shards, order or "desc", chunk, parts, tiebreak or "member")
            try:
                self.store.cas(key, fresh.encode(), None)
                return fresh
            except ConflictError:
                record = self.store.get(key)
                if record is None:
                    raise
        stored = Settings.decode(key, record.value)
        for what, wanted, have in (
            ("shards", shards, stored.shards),
            ("order", order, stored.order),
            ("chunk_size", chunk_size, stored.chunk),
            ("tiebreak", tiebreak, stored.tiebreak),
        ):
            if wanted is not None and wanted != have:
                raise SettingsMismatchError(f"set {self.name!r} is stored with {what}={have!r}, not {wanted!r}")
        return stored

    def _ensure_settings(self) -> None:
        """Store the settings again before writing, if ``drop()`` removed them (or :meth:`_restore` could not)."""
        if self._resettle:
            store_settings(self.store, self._settings_key, self._stored)
            self._resettle = False

    def _restore(self) -> None:
        """A write made a shard's head afresh: store the settings again, after the head so that a concurrent ``drop()``
        finds it (without settings, readers would not find the shard's members). Until done, the next write stores
        them: a retry of this write finds the head made and would not come here."""
        self._resettle = True
        store_settings(self.store, self._settings_key, self._stored)
        self._resettle = False

    def __repr__(self) -> str:
        return f"SortedSet({self.name!r}, order={self.order!r}, chunk_size={self.chunk_size}, shards={self.shards})"

    @property
    def commits(self) -> int:
        return sum(e.commits for e in self.engines)

    @property
    def retries(self) -> int:
        return sum(e.retries for e in self.engines)

    @property
    def merges(self) -> int:
        return sum(e.merges for e in self.engines)

    def shard_of(self, member: str) -> int:
        """The shard ``member`` lives in (:func:`shard_of`)."""
        return shard_of(check_member(member), self.shards)

    # -- snapshots: the hooks of mdss._facade -----------------------------------------

    def _gather(
        self, max_staleness: float | None = None, guess: Callable[[Gather], T] | None = None
    ) -> tuple[list[bytes | None], Gather, tuple[T] | None]:
        """One snapshot of every shard: their heads in one ``get_many``, or those read last if at most ``max_staleness``
        seconds old (``None``: the set's bound; ``mdss._recent``). With ``guess`` (a read's function), also what it
        answered on the last snapshot while the heads travelled, if they came back unchanged (:meth:`_guessed`)."""
        recent = self._local.recent = self._recent  # read_age
        kept = recent.within(max_staleness)
        if kept is not None:
            datas, parts = kept
            return datas, Gather([part.seen() for part in parts], self.store, self._cache, self._order.tree_key), None
        began = recent.begin(max_staleness)
        last, guessed = self._last, None
        if guess is not None and last is not None and self._settled and self.store.overlaps_reads:
            datas, guessed = self._guessed(last, guess)
        else:
            datas = self.store.get_many(self._head_keys)
        parts = self._parts(datas)
        if began is not None:
            recent.keep((datas, parts), began, tuple(datas))
        return datas, Gather(parts, self.store, self._cache, self._order.tree_key), guessed

    def _guessed(
        self, last: tuple[list[bytes | None], list[Part]], fn: Callable[[Gather], T]
    ) -> tuple[list[bytes | None], tuple[T] | None]:
        """The heads, read while ``fn`` runs on the snapshot the last read found unchanged, with the nodes this process
        has cached alone (``Store.get_many_during``; a node not cached ends the guess), as an unsharded set's reads do
        (``mdss._snapshot._guessed``): ``(the heads' bytes, (what fn answered,))`` when they came back unchanged,
        else ``(the heads' bytes, None)``. What the answer holds on to reads from the store from then on."""
        store = _snapshot.Switch(_snapshot.OFFLINE)
        # The parts as they are: the read that keeps the guess counts itself (``_parts``), one that drops it does not.
        g = Gather(list(last[1]), store, self._cache, self._order.tree_key)  # type: ignore[arg-type]

        def work() -> T:
            merged = self._all_keys
            keep = merged.lock.acquire(blocking=False)
            try:
                if keep:
                    g.keeper = merged
                return fn(g)
            finally:
                if keep:
                    merged.lock.release()

        datas, ran, answer = self.store.get_many_during(self._head_keys, work)
        if not ran or datas != last[0] or any(part.head.expired() for part in last[1]):
            return datas, None  # moved, or (the same bytes) past its moment since: read as the heads say
        store.target = self.store
        g.done()
        return datas, (answer,)  # type: ignore[return-value]

    def _parts(self, datas: list[bytes | None]) -> list[Part]:
        """Every shard as the heads' bytes ``datas`` show it (a shard never seen without a head: its marker read)."""
        last = self._last
        if last is not None and datas == last[0] and not any(p.head.expired() for p in last[1]):
            self._settled = True
            return [part.seen() for part in last[1]]  # no shard moved (nor expired): the usual read of a quiet set
        self._settled = False
        engines = self.engines
        unseen = [i for i, data in enumerate(datas) if data is None and engines[i].head is None]
        marked: set[int] = set()
        if unseen:  # shards never seen without a head: the marked ones were made (one more get_many)
            markers = self.store.get_many([engines[i].keys.marker for i in unseen])
            marked = {i for i, marker in zip(unseen, markers) if marker is not None}
        parts = [
            Part.of(e, _snapshot.snapshot(e)) if i in marked else self._part(i, d)
            for i, (e, d) in enumerate(zip(engines, datas))
        ]
        if all(part.data is not None for part in parts):
            self._last = (datas, parts)
        return parts

    def _part(self, i: int, data: bytes | None) -> Part:
        """Shard ``i`` as a read sees it from its head's bytes: the part seen last while they are the same."""
        engine, seen = self.engines[i], self._seen[i]
        if data is not None and seen is not None and seen.data == data and not seen.head.expired():
            return seen.seen()
        if data is None:
            if engine.head is None:  # never written: empty, without a second read
                return Part(engine, None, Head(engine.order, engine.chunk_size, tiebreak=engine.tiebreak), None)
            return Part.of(engine, _snapshot.snapshot(engine))  # a head seen before vanished: the shard's own rules
        head = engine.decode(data)
        if head.expired():  # dropped at its moment (mdss._expiry): empty, as a shard without a head
            return Part(engine, None, Head(engine.order, engine.chunk_size, tiebreak=engine.tiebreak), None)
        try:
            view = _snapshot.view(engine, head)
        except MissingNodeError:  # a log segment collected since: the shard reads its newer head itself
            return Part.of(engine, _snapshot.snapshot(engine))
        part = self._seen[i] = Part(engine, data, head, view)
        return part

    def _read(self, fn: Callable[[Gather], T], max_staleness: float | None = None, members: Sequence[str] = ()) -> T:
        """Run ``fn`` on one snapshot of every shard (at most ``max_staleness`` seconds old: :meth:`_gather`); if a node
        it needs was collected meanwhile, on newer heads. ``members`` is not used: the heads come in one batch."""
        datas, g, guessed = self._gather(max_staleness, fn)
        if guessed is not None:
            return guessed[0]
        merged = self._all_keys
        keep = merged.lock.acquire(blocking=False)  # another thread holds the merged keys: read without them
        try:
            for _ in self._policy.attempts():
                if keep:
                    g.keeper = merged
                try:
                    result = fn(g)
                    g.done()
                    return result
                except MissingNodeError:
                    self._recent.forget()  # the heads kept may be the ones whose nodes were collected
                    now, g, _ = self._gather()
                    if now == datas:
                        raise MissingNodeError(
                            f"set {self.name!r}: a node the current head names is missing from the store (damaged)"
                        ) from None
                    datas = now
        finally:
            if keep:
                merged.lock.release()
        raise ConflictError(
            f"reads of set {self.name!r} kept losing their snapshot to garbage collection for "
            f"{self._policy.budget:g} s: raise gc_grace above the time a read takes"
        )

    @staticmethod
    def _count(g: Gather) -> int:
        return g.count

    @staticmethod
    def _rank_of(g: Gather, probe: Any) -> int:
        return _gather.counts(g, [probe])[0]

    @staticmethod
    def _count_below(g: Gather, probes: list[Any]) -> list[int]:
        """For each probe key, the entries of the whole set below it: every shard's entry sets in one step."""
        return _gather.counts(g, probes)

    def _find(self, g: Gather, members: list[str]) -> list[Score | None]:
        """The scores of ``members``: each shard's member index entry sets, all in one step."""
        return list(map(score_of, self._values(g, members)))

    def _values(self, g: Gather, members: list[str]) -> list[Any]:
        """The values of ``members`` (a score, or ``(score, data)``), as :meth:`_find` reads them."""
        by_shard: dict[int, list[str]] = {}
        for member in members:
            by_shard.setdefault(shard_of(member, self.shards), []).append(member)
        indexes = {i: g.index(g.parts[i]) for i in by_shard}
        trees = {i: index if isinstance(index, Tree) else index.tree for i, index in indexes.items()}
        _gather.route(g, [(g.parts[i], trees[i], group) for i, group in by_shard.items()])
        found: dict[str, Score | None] = {}
        for i, group in by_shard.items():
            found.update(zip(group, indexes[i].find(group)))
        return [found[m] for m in members]

    def _score(self, g: Gather, member: str) -> Score | None:
        """The member's score in this read's snapshot (its shard's member index)."""
        return score_of(self._value(g, member))

    def _value(self, g: Gather, member: str) -> Any:
        """The member's value in this read's snapshot (its shard's member index)."""
        return g.index(g.parts[shard_of(member, self.shards)]).get(member)

    @staticmethod
    def _keys_at(g: Gather, start: int, stop: int) -> list[Any]:
        """The score tree keys at global positions ``start`` to ``stop - 1`` (an exact selection across shards)."""
        start, stop = max(start, 0), min(stop, g.count)
        return [] if start >= stop else _shard_page.page(g, start, stop)

    def _entries(
        self, g: Gather, start: int, stop: int, ties: str = "ordinal", keys: list[Any] | None = None
    ) -> list[Entry]:
        """The entries at global positions ``start`` to ``stop - 1`` (their keys, if read already), ranked."""
        found = self._keys_at(g, start, stop) if keys is None else keys
        if not found:
            return []
        start = max(start, 0)
        scores = self._order.scores_of(found)
        ranks = list(range(start + 1, start + len(found) + 1))
        if ties == "competition" and found:
            ranks[0] = self._count_below(g, [self._order.first_key(scores[0])])[0] + 1
            for i in range(1, len(ranks)):
                if scores[i] == scores[i - 1]:
                    ranks[i] = ranks[i - 1]
        return list(map(new_entry, self._order.members_of(found), scores, ranks))

    @staticmethod
    def _dense_below(g: Gather, score: Score) -> int:
        raise AssertionError("refused by _check_ties")  # pragma: no cover

    def _estimate_below(self, g: Gather, probe: Any, max_error: Any) -> _estimate.Below:
        """Entries below the probe, summed over shards: estimates and bounds from manifests, or exact."""
        trees = [(part, g.score_tree(part)) for part in g.parts]
        _gather.route(g, [(part, tree, [probe]) for part, tree in trees], leaves=False)
        rank = low = high = 0
        for part, tree in trees:
            shift = part.shift(probe)
            r, lo, hi = _estimate.estimate_in_tree(tree, probe)
            rank, low, high = rank + r + shift, low + lo + shift, high + hi + shift
        if max_error is not None and high - low > max_error:
            exact = self._count_below(g, [probe])[0]
            return exact, exact, exact
        return rank, low, high

    @staticmethod
    def _prefetch_around(g: Gather, key: Any, ties: str) -> None:
        """Nothing: a shard's count reads its entry sets in the same step."""

    @staticmethod
    def _prefetch_positions(g: Gather, positions: list[int]) -> None:
        """Nothing: a position is found across the shards by counts, which read its entry sets."""

    def _check_ties(self, ties: Any) -> None:
        check_choice(ties, TIES, "ties")
        if ties == "dense":
            raise InvalidArgumentError(
                "dense ranks count distinct scores, and a tie group spans shards: a sharded set has no exact "
                "dense rank short of reading every shard's scores; use ties='competition' or an unsharded set"
            )

    def _commit_ops(self, ops: list[tuple[str, str, Any]], wants: list[Any]) -> list[Any]:
        """Commit each operation in its member's shard, shard by shard; results in the order of ``ops``."""
        groups: dict[int, list[int]] = {}
        for n, (_, member, _) in enumerate(ops):
            groups.setdefault(shard_of(member, self.shards), []).append(n)
        if len(groups) > 1 and any(op.startswith("incr") for op, _, _ in ops):
            self._refuse_overflow(ops)
        self._ensure_settings()
        results: list[Any] = [None] * len(ops)
        took: list[int] = []
        for i, indices in sorted(groups.items()):
            # From the head last seen, or read first when that was mostly stale lately (as with writes over S shards).
            try:
                got = self.engines[i].group.submit([ops[n] for n in indices], [wants[n] for n in indices])
            except StoreError as exc:
                failed_after(exc, f"in shard {i}, after shards {took} took their part" if took else "")
            took.append(i)
            for n, result in zip(indices, got or ()):
                results[n] = result
        return results

    def _take(self, entries: list[Entry]) -> list[Entry]:
        """Remove ``entries`` if each still holds its score (a pop), in one commit per shard; those removed."""
        groups: dict[int, list[Entry]] = {}
        for entry in entries:
            groups.setdefault(shard_of(entry.member, self.shards), []).append(entry)
        self._ensure_settings()
        taken: list[Entry] = []
        for i, mine in sorted(groups.items()):
            try:
                self.engines[i].group.submit([("take", e.member, e.score) for e in mine])
            except _ops.Stale:
                continue
            except StoreError as exc:
                failed_after(exc, f"in shard {i}, after {len(taken)} entries were taken" if taken else "")
            taken.extend(mine)
        return taken

    def _refuse_overflow(self, ops: list[tuple[str, str, Any]]) -> None:
        """Refuse a batch spanning shards whose ``incr`` would fail (64-bit overflow, inf - inf) on the scores read
        now, before any shard commits (a concurrent writer may still make one shard refuse it after others did)."""
        members = sorted({member for _, member, _ in ops})
        now: dict[str, Any] = dict(zip(members, self.scores(members)))
        for op, member, value in ops:
            if op == _ops.DATA:  # the score stays
                continue
            if op in ("remove", "take"):
                now[member] = None
                continue
            # As the commit resolves it, conditions (only=, when=) included: an op they skip changes nothing.
            now[member] = _ops.resolve(op, now[member], score_of(value), self._order.better)[0]

    # -- reads -----------------------------------------------------------------------

    def score(self, member: str, *, max_staleness: float | None = None) -> Score | None:
        """The member's score, or ``None``: its shard alone (head, member index entry set)."""
        member = check_member(member)
        i, bound = shard_of(member, self.shards), staleness(max_staleness)
        if (self._recent.bound if bound is None else bound) > 0:  # every shard's heads, as kept for such reads
            return self._read(lambda g: score_of(g.index(g.parts[i]).get(member)), bound)
        self._local.recent = self.engines[i].recent  # read_age
        return _snapshot.read(self.engines[i], lambda snap: score_of(snap.index.get(member)))

    def info(self) -> dict[str, Any]:
        """The heads' facts: members, settings, and each shard's size, generation and tree heights."""

        def run(g: Gather) -> dict[str, Any]:
            shards: list[dict[str, Any]] = []
            for engine, part in zip(self.engines, g.parts):
                head = part.head
                shards.append(
                    {
                        "members": part.count,
                        "generation": head.gen,
                        "score_tree_height": head.scores.height + (head.scores.root is not None),
                        "member_index_height": head.members.height + (head.members.root is not None),
                        "log_entries": len(head.log),
                        "log_limit": _log.log_limit(engine, head),
                        "head_key": engine.keys.head,
                    }
                )
            return {
                "members": g.count,
                "order": self.order,
                "tiebreak": self.tiebreak,
                "chunk_size": self.chunk_size,
                "shards": self.shards,
                "generation": sum(s["generation"] for s in shards),
                "score_tree_height": max(s["score_tree_height"] for s in shards),
                "member_index_height": max(s["member_index_height"] for s in shards),
                "log_entries": sum(s["log_entries"] for s in shards),
                "log_limit": sum(s["log_limit"] for s in shards),
                "per_shard": shards,
            }

        return self._read(run)

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
        each ``None`` at that end; ``around=member`` and ``with_data`` as :meth:`SortedSet.page` (data from the page's
        snapshot).

        A page continues after the last entry of the page it came from (or ends before the first, going back), on the
        newest state: a member unchanged meanwhile is never skipped nor repeated. Two round trips with manifests
        cached, three after the first page.
        """
        check_page(limit, cursor, around)
        self._check_ties(ties)
        check_flag(with_data, "with_data")
        member = None if around is None else check_member(around)
        entry: tuple[str, Score, int | None] | None = None
        back = False
        if cursor is not None:
            entry, back = self._decode_cursor(cursor)

        def run(g: Gather) -> tuple[list[Entry], int, int, list[list[Any]]]:
            if member is not None:
                start, stop = self._around(g, member, *page_around(limit), True, ties) or (0, 0)
            else:
                at = 0 if entry is None else self._count_below(g, [self._next_to(g, *entry, back)])[0]
                start, stop = (max(at - limit, 0), at) if back else (at, at + limit)
            keys = self._keys_at(g, start, stop)
            found = self._with_data(g, self._entries(g, start, stop, ties, keys), with_data)
            ends = [self._cursor_fields(e, k) for e, k in zip(found[:1] + found[-1:], keys[:1] + keys[-1:])]
            return found, start, g.count, ends

        entries, start, total, ends = self._read(run, staleness(max_staleness))
        if not entries:
            return Page(entries, None, None)
        tag = self._cursor_tag
        return Page(
            entries,
            _cursor.pack(tag, ends[-1]) if start + len(entries) < total else None,
            _cursor.pack(tag, ends[0], back=True) if start else None,
        )

    def _cursor_fields(self, entry: Entry, key: Any) -> list[Any]:
        """What a cursor next to ``entry`` (score tree key ``key``) carries: its member and score, and in a set whose
        ties go by ``"first"`` its number among its ties (spelled in its key), which lets a page go on after it once
        it has moved."""
        if self.tiebreak != "first":
            return [entry.member, entry.score]
        return [entry.member, entry.score, spelled_number(key[1])]

    def _next_to(self, g: Gather, member: str, score: Score, tie: int | None, back: bool) -> Any:
        """The probe a cursor next to ``(member, score)`` continues from: its key (a ``"first"`` set's needs the
        entry's number among its ties: the cursor's, else its value's now, while its score is unchanged), and just
        after it going forward."""
        value: Any = score
        if self._order.first and tie is not None:
            value = (score, None, tie)
        elif self._order.first:
            found = self._value(g, member)
            value = found if found is not None and score_of(found) == score else score
        key = self._order.key(member, value)
        return key if back else (*key, 0)

    @property
    def _cursor_tag(self) -> str:
        return f"{self.keys.prefix}shards"

    def _decode_cursor(self, cursor: Any) -> tuple[tuple[str, Score, int | None], bool]:
        """The entry a cursor of this set is next to (member, score, number among its ties), and whether it goes
        back."""
        fields, back = _cursor.unpack(self._cursor_tag, cursor, f"set {self.name!r}")
        try:
            member, score, tie = fields if len(fields) == 3 else (*fields, None)
            if tie is not None and not (type(tie) is int and -(1 << 63) <= tie < 1 << 63):
                raise ValueError("tie")
            return (check_member(member), check_score(score), tie), back
        except Exception:
            raise InvalidArgumentError(f"not a page cursor of set {self.name!r}: {shown(cursor)}") from None

    # -- whole-set operations -------------------------------------------------------

    def load_from(
        self,
        pairs: Mapping[str, Score] | Iterable[tuple[str, Score]],
        *,
        replace: bool = False,
        progress: Any = None,
        batch: int = 256,
        memory_bytes: int = _load.MEMORY_BYTES,
        spill_dir: str | None = None,
    ) -> None:
        """Load each shard's members into it (``SortedSet.load``): one commit per shard."""
        _load.checked(pairs, replace, progress, batch, memory_bytes)
        if not replace and len(self):
            raise InvalidArgumentError(f"set {self.name!r} already has entries; pass replace=True to replace them")
        with _load.sources(
            pairs, self.shards, lambda m: shard_of(m, self.shards), memory_bytes, spill_dir, lambda: None
        ) as parts:
            self._load_parts(parts, replace, progress, batch)

    def _load_parts(self, parts: list[Any], replace: bool, progress: Any, batch: int) -> None:
        """Load each shard from its part (``mdss._load.sources``), one commit each, ``progress`` counted across them."""
        self._ensure_settings()
        done = 0
        took: list[int] = []  # the shards loaded
        for i, (engine, part) in enumerate(zip(self.engines, parts)):

            def report(d: int, t: int, offset: int = done) -> None:
                if progress is not None:
                    progress(offset + d, offset + t)

            last: list[int] = [0]

            def counted(d: int, t: int, report: Any = report, last: list[int] = last) -> None:
                last[0] = t
                report(d, t)

            try:
                _load.fill(engine, part, replace, counted, batch)
            except StoreError as exc:
                failed_after(exc, f"in shard {i}, after shards {took} loaded" if took else "")
            took.append(i)
            done += last[0]

    def gc(self, *, min_age: float = 0.0, wait: bool = True, sweep: bool = False) -> int:
        """Collect every shard (see :meth:`SortedSet.gc`); their grace periods run side by side."""
        min_age = self._checked_gc(min_age, sweep)
        with ThreadPoolExecutor(max_workers=min(self.shards, 16)) as pool:
            return sum(
                pool.map(
                    lambda e: 0 if sweep and _expiry.sweep(e) else _garbage.gc(e, min_age, wait, sweep), self.engines
                )
            )

    def merge(self) -> bool:
        """Merge every shard's update log now; True if any was merged."""
        return any([_merge.merge(e) for e in self.engines])

    def unreferenced(self, min_age: float = 0.0) -> list[str]:
        min_age = check_seconds(min_age, "min_age")
        return [key for e in self.engines for key in _garbage.unreferenced(e, min_age)]

    def node_keys(self) -> list[str]:
        return sorted(key for e in self.engines for key in _garbage.node_keys(e))

    def warm(self) -> int:
        """Every shard's nodes into the shared cache, as :meth:`SortedSet.warm`, until it is full."""
        read = 0
        for engine in self.engines:
            evicted = self._cache.dropped
            read += _snapshot.warm(engine)
            if self._cache.dropped != evicted:
                break
        return read

    def _set_moment(self, moment: int) -> bool:
        """Every shard's head carries the moment, shard by shard (one made empty where a shard has none yet, so that no
        shard a later write starts outlives it); nothing if no shard holds a member (Redis' EXPIRE finds no key a
        set's last member left). Interrupted, it raises and some shards carry it: calling it again completes it
        (docs/architecture.md, "Expiry")."""
        if not any(_expiry.has_members(e) for e in self.engines):
            return False
        if not any([_expiry.expire(e, moment) for e in self.engines]):
            return False
        if _expiry.passed(moment):  # passed: every shard reads as absent now, and a write starts afresh
            return True
        for engine in self.engines:
            _expiry.expire(engine, moment, create=True)
        return True

    def _persist(self) -> bool:
        return any([_expiry.persist(e) for e in self.engines])

    def _moment(self) -> int | None:
        """The earliest moment a shard carries: what the set's ``ttl()`` tells."""
        moments = [m for m in map(_expiry.moment, self.engines) if m is not None]
        return min(moments, default=None)

    def drop(self) -> bool:
        """Remove the whole set: every shard, then the settings record. Whether it held a member or a shard is damaged
        (as :meth:`SortedSet.drop`)."""
        try:
            held = len(self) > 0
        except CorruptDataError:
            held = True
        with self._all_keys.lock:
            self._all_keys.drop()
        existed = [_garbage.drop(engine) for engine in self.engines]
        self.store.delete(self._settings_key)
        self._resettle = True
        if any(data is not None for data in self.store.get_many(self._head_keys)):
            self._ensure_settings()  # a writer started a shard again meanwhile: its members stay findable
        return any(existed) and held

    def check(self) -> list[str]:
        """Every shard's invariants, every member in the shard its hash names, and the settings record."""
        problems = []
        try:
            record = self.store.get(self._settings_key)
            if record is None and any(self.store.get(e.keys.head) is not None for e in self.engines):
                problems.append(f"the settings record {self._settings_key} is missing")
            elif record is not None:
                Settings.decode(self._settings_key, record.value)
        except CorruptDataError as exc:
            problems.append(str(exc))
        for i, engine in enumerate(self.engines):
            found = _check.check(engine)
            problems.extend(f"shard {i}: {p}" for p in found)
            if not found:
                strays = [m for m in _check.members(engine) if shard_of(m, self.shards) != i]
                if strays:
                    problems.append(f"shard {i} holds members of other shards: {strays[:5]!r}")
        return problems

    def _describe(self) -> str:
        return "\n  ".join(f"shard {i}: {_check.describe(e)}" for i, e in enumerate(self.engines))


__all__ = ["MAX_SHARDS", "ShardedSet", "shard_of"]
