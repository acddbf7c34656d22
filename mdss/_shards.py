"""Sharded sets: one logical sorted set kept as ``S`` independent trees, each under its own head and log.

A member lives in shard ``crc32(utf-8 member) % S`` (zlib's CRC-32: stable
across processes, machines and Python versions). Each shard is an ordinary
set of its own (a :class:`_Shard`, a ``SortedSet`` whose keys are named by
the shard) with its own head, trees, update log and group commit, so writers
of different shards never race for one compare-and-set. The number of
shards and the shards' key names are fixed when the set is created and kept
in a settings record beside the set's keys (``{ns}:{set}:s``).

Reads answer exactly what the unsharded set would, from one snapshot: all
``S`` heads are read in one ``get_many``. Every later step of a read (the
member index entry set of a rank, the score entry sets of every shard)
batches all shards' fetches into one ``get_many``, so round trips do not grow
with ``S``:

- a count below a key (a rank, ``count``, ``rank_of_score``) is the sum of
  the shards' counts, each exact over its log (``mdss._log.Ranking``);
- a page at global offset ``k`` is an exact selection across shards. Each
  shard is seen as a list of *intervals* of its tree, from the root down:
  an interval knows the keys it spans and the exact count of the shard's
  entries below its first key. Summing, over shards, the counts below a key
  at the granularity reached so far bounds that key's global rank from
  below and above; an interval that cannot hold a global rank of the page
  is never read. The candidates are read, a level per round trip (the
  manifests are usually cached: one round trip), until every candidate is
  an entry set; then every key of the page lies in all shards' candidate
  key ranges, the exact count below the first candidate of each shard is
  known, and a selection over the candidate entries (a binary search that
  halves the widest shard's window) finds the page. See
  docs/architecture.md ("Sharded sets").

Writes route each operation to its member's shard. A batch that spans shards
commits shard by shard: it is atomic within each shard, not across shards.
"""

from __future__ import annotations

import base64
import binascii
import functools
import heapq
import re
import threading
import zlib
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import attrs
import msgpack

from . import _estimate, _log
from ._cache import NodeCache
from ._codec import FORMAT, _packb, seal, unpack
from ._head import Head, Snapshot, decode_for
from ._keys import Keyspace, _part
from ._log import overlay_view
from ._order import (
    Entry,
    Order,
    Score,
    add_scores,
    check_choice,
    check_count,
    check_member,
    check_pairs,
    check_score,
)
from ._sortedset import TIES, Page, SortedSet
from ._tree import Leaf, Source, Tree, decode
from .exceptions import (
    ConflictError,
    CorruptDataError,
    InvalidArgumentError,
    InvalidScoreError,
    MissingNodeError,
    SettingsMismatchError,
)
from .stores.base import Record, Stats, Store

T = TypeVar("T")

#: Most shards a set may have.
MAX_SHARDS = 1024
#: Redis Cluster's hash slots: a shard's head key is placed in slot range ``i * SLOTS // S ..``.
SLOTS = 16384
_PART = re.compile(r"[^:/{}|]+\|[0-9]+\.[0-9a-f]+")
_EMPTY_LEAF = Leaf((), (), ())


def shard_of(member: str, shards: int) -> int:
    """The shard of ``member``: the CRC-32 of its UTF-8 bytes modulo ``shards``.

    >>> shard_of("alice", 4), shard_of("bob", 4)
    (3, 0)
    """
    return zlib.crc32(member.encode("utf-8")) % shards


def slot(key: str) -> int:
    """The Redis Cluster hash slot of a key without a hash tag (CRC-16/XMODEM modulo 16384)."""
    return binascii.crc_hqx(key.encode("utf-8"), 0) % SLOTS


def shard_parts(namespace: str, name: str, shards: int, store: Any = None) -> list[str]:
    """The key names of a new set's shards: ``{set}|{i}.{salt}``.

    ``|`` never appears in a percent-encoded set name, so shard keys never
    collide with another set's. The salt places the shards' heads: hash tags
    would choose slots, not masters, so on a Redis Cluster (a store whose
    client knows the slot owners) the salt is the first that puts shard
    ``i``'s head on master ``i mod M``, as the cluster is when the set is
    created: the heads are as evenly spread as ``S`` allows. Elsewhere it is
    the first that puts the head in the ``i``-th of ``S`` equal ranges of the
    hash slots, which spreads them over any cluster of equal slot ranges.
    """
    base, prefix = _part(name, "set name"), _part(namespace, "namespace")
    client: Any = getattr(store, "client", None)
    owner: Any = getattr(client, "get_node_from_key", None)
    masters = sorted(node.name for node in client.get_primaries()) if owner is not None else []
    parts = []
    for i in range(shards):
        low, high, salt = i * SLOTS // shards, (i + 1) * SLOTS // shards, 0
        while True:
            head = f"{prefix}:{base}|{i}.{salt:x}:h"
            if (owner(head).name == masters[i % len(masters)]) if masters else low <= slot(head) < high:
                break
            salt += 1
        parts.append(f"{base}|{i}.{salt:x}")
    return parts


def shard_keyspace(namespace: str, part: str) -> Keyspace:
    """The keys of one shard: those of a set whose encoded name is ``part``."""
    keys = Keyspace.__new__(Keyspace)
    keys.prefix = prefix = f"{_part(namespace, 'namespace')}:{part}:"
    keys.head, keys.nodes, keys.notes, keys.topn = prefix + "h", prefix + "n:", prefix + "g:", prefix + "t"
    return keys


def settings_key(keys: Keyspace) -> str:
    return keys.prefix + "s"


@attrs.frozen
class Settings:
    """What a sharded set fixes when it is created: shard count, order, chunk size, the shards' key names."""

    shards: int
    order: str
    chunk: int
    parts: tuple[str, ...]

    def encode(self) -> bytes:
        return seal(
            _packb({"v": FORMAT, "shards": self.shards, "order": self.order, "chunk": self.chunk, "parts": self.parts})
        )

    @classmethod
    def decode(cls, key: str, data: bytes) -> Settings:
        _, found = unpack(key, data, "shard settings")
        try:
            settings = cls(found["shards"], found["order"], found["chunk"], tuple(found["parts"]))
            ok = (
                type(settings.shards) is int
                and 2 <= settings.shards <= MAX_SHARDS
                and settings.order in ("asc", "desc")
                and type(settings.chunk) is int
                and len(settings.parts) == settings.shards
                and all(type(p) is str and _PART.fullmatch(p) for p in settings.parts)
            )
        except (KeyError, TypeError) as exc:
            raise CorruptDataError(f"stored shard settings are malformed ({exc})", key) from None
        if not ok:
            raise CorruptDataError("stored shard settings are malformed", key)
        return settings


def open_set(cls: type, store: Any, name: str, options: dict[str, Any]) -> Any:
    """``SortedSet(store, name, **options)``: a plain ``SortedSet`` or, when the set is (to be) sharded, a
    :class:`ShardedSet`. Reads the set's settings record (one round trip)."""
    given = options.get("shards") is not None
    defaults = SortedSet.__init__.__kwdefaults__ or {}  # the tests set a default shard count there
    shards = options.pop("shards", None) if given else defaults.get("shards")
    options.pop("shards", None)
    if not isinstance(store, Store) or not isinstance(name, str) or not name:
        return object.__new__(cls)  # __init__ says what is wrong
    if shards is not None and (type(shards) is not int or not 1 <= shards <= MAX_SHARDS):
        raise InvalidArgumentError(f"shards must be an int from 1 to {MAX_SHARDS}, got {shards!r:.80}")
    keys = Keyspace(store.namespace, name)
    record = store.get(settings_key(keys))
    if record is None:
        if shards is None or shards == 1:
            return object.__new__(cls)
        if store.get(keys.head) is not None:  # an unsharded set of that name exists
            if given:
                raise SettingsMismatchError(f"set {name!r} is stored with shards=1, not {shards}")
            return object.__new__(cls)
        return ShardedSet(store, name, shards=shards, **options)
    stored = Settings.decode(settings_key(keys), record.value)
    if given and shards != stored.shards:
        raise SettingsMismatchError(f"set {name!r} is stored with shards={stored.shards}, not {shards}")
    return ShardedSet(store, name, shards=stored.shards, **options)


class _Shard(SortedSet):
    """One shard of a sharded set: a ``SortedSet`` whose keys are named by the shard's key name."""

    def __init__(self, part: str, store: Store, name: str, **options: Any) -> None:
        self._part = part
        super().__init__(store, name, **options)

    def _keyspace(self, namespace: str, name: str) -> Keyspace:
        return shard_keyspace(namespace, self._part)


def _snapshot_of(shard: _Shard, data: bytes | None) -> Snapshot:
    """A shard's snapshot from its head's bytes, read with the other shards' heads in one ``get_many``."""
    if data is None:
        if shard._head is None:  # never written: empty, without a second read
            source = Source(shard.store, shard._keys, shard._cache)
            return Snapshot(None, Head(shard.order, shard.chunk_size), source, shard._order, None)
        return shard._snapshot()  # a head seen before vanished: the shard's own rules (HeadMissingError)
    head = decode_for(shard, data)
    try:
        view = overlay_view(shard, head)
    except MissingNodeError:  # a log segment collected since: the shard reads its newer head itself
        return shard._snapshot()
    source = Source(shard.store, shard._keys, shard._cache)
    return Snapshot(Record((data,), None), head, source, shard._order, view)


# -- fetching across shards: one get_many per step ------------------------------


def _load_all(wanted: list[tuple[Tree, str, int]]) -> list[Any]:
    """The nodes ``(tree, node id, height)`` from pins, cache, or one ``get_many`` for all of them; they stay
    pinned in each tree's source, so the tree's own reads find them without a round trip."""
    found: list[Any] = [None] * len(wanted)
    missing: dict[str, list[int]] = {}
    for n, (tree, node_id, _) in enumerate(wanted):
        source = tree.source
        node = source.pins.get(node_id)
        if node is None:
            node = source.cache.get(node_id)
            if node is not None:
                source.pins[node_id] = node
        if node is None:
            missing.setdefault(source.keyspace.node(node_id), []).append(n)
        else:
            found[n] = node
    if missing:
        keys = list(missing)
        store = wanted[missing[keys[0]][0]][0].source.store
        for key, data in zip(keys, store.get_many(keys)):
            if data is None:
                raise MissingNodeError("a node the head names is missing", key)
            first = wanted[missing[key][0]]
            node = decode(key, data, first[0].keyfn)
            first[0].source.cache.put(first[1], node, len(data))
            for n in missing[key]:
                wanted[n][0].source.pins[wanted[n][1]] = node
                found[n] = node
    for n, (tree, node_id, height) in enumerate(wanted):
        if found[n].height != height:
            raise CorruptDataError(
                f"stored node is at height {found[n].height} where one of height {height} belongs",
                tree.source.keyspace.node(node_id),
            )
    return found


class _Reach:
    """One shard's tree seen down to where a read needed it: intervals of keys, in order.

    Interval ``j`` spans keys from ``firsts[j]`` (``None``: from the start) to
    ``firsts[j + 1]`` (or the end); ``starts[j]`` tree entries precede it. It is
    a node still to read (``ids[j]``, ``heights[j]``), an entry set read
    (``leaves[j]``), or opaque (``ids[j] is None``: children a read found it
    never needs, kept as one interval). ``below(j)`` is the exact count of the
    shard's entries (the log applied) below ``firsts[j]``, so any key's count
    lies between the counts below its interval's first key and the next one's.
    """

    __slots__ = ("tree", "view", "total", "firsts", "starts", "ids", "heights", "leaves", "_below")

    def __init__(self, tree: Tree, view: Any, total: int) -> None:
        self.tree, self.view, self.total = tree, view, total
        self.firsts: list[Any] = [None]
        self.starts = [0]
        self.ids: list[str | None] = [tree.root]
        self.heights = [tree.height]
        self.leaves: list[Any] = [_EMPTY_LEAF if tree.root is None else None]
        self._below: list[int | None] = [0]

    def shift(self, key: Any) -> int:
        return 0 if self.view is None or key is None else self.view.shift(key)

    def below(self, j: int) -> int:
        """Entries of the shard below interval ``j``'s first key (all of them for ``j`` past the end)."""
        if j >= len(self.firsts):
            return self.total
        found = self._below[j]
        if found is None:
            found = self._below[j] = self.starts[j] + self.shift(self.firsts[j])
        return found

    def find(self, key: Any) -> int:
        return bisect_right(self.firsts, key, 1) - 1

    def bounds(self, key: Any) -> tuple[int, int]:
        """Least and most entries of the shard that can lie below ``key`` (``None``: the start), as far as
        the intervals read tell."""
        if key is None:
            return 0, 0
        j = self.find(key)
        leaf = self.leaves[j]
        if leaf is not None:
            exact = self.starts[j] + bisect_left(leaf.keys, key) + self.shift(key)
            return exact, exact
        return self.below(j), self.below(j + 1)

    def pending(self, j: int) -> bool:
        return self.ids[j] is not None and self.leaves[j] is None

    def expand(self, j: int, node: Any, keep: Callable[[list[Any], list[int]], Iterable[int]]) -> None:
        """Put what interval ``j``'s node holds in its place: an entry set's keys, or a manifest's children
        that ``keep(boundaries, starts)`` selects (runs of the others become opaque intervals)."""
        if node.height == 0:
            self.leaves[j] = node
            return
        start = self.starts[j]
        bounds = [self.firsts[j], *node.firsts[1:], self.firsts[j + 1] if j + 1 < len(self.firsts) else None]
        starts = [start + s for s in node.starts]
        kept = sorted(set(keep(bounds, starts)))
        firsts: list[Any] = []
        begins: list[int] = []
        ids: list[str | None] = []
        heights: list[int] = []
        leaves: list[Any] = []
        c, n = 0, len(node)
        for k in [*kept, n]:
            if c < k:  # an opaque run of children
                firsts.append(bounds[c])
                begins.append(starts[c])
                ids.append(None)
                heights.append(-1)
                leaves.append(None)
            if k < n:
                firsts.append(bounds[k])
                begins.append(starts[k])
                ids.append(node.ids[k])
                heights.append(node.height - 1)
                leaves.append(None)
            c = k + 1
        below = self._below[j]
        self.firsts[j : j + 1] = firsts
        self.starts[j : j + 1] = begins
        self.ids[j : j + 1] = ids
        self.heights[j : j + 1] = heights
        self.leaves[j : j + 1] = leaves
        self._below[j : j + 1] = [below] + [None] * (len(firsts) - 1)


def _fetch_and_expand(wanted: list[tuple[_Reach, int]], keep: Callable[[_Reach, int], Any]) -> None:
    """Expand the intervals ``wanted``: those whose node is cached first, without a round trip (shards of
    different heights descend their cached manifests before anything is read); when none is, read all of
    their nodes in one ``get_many``. Expands the last first, so that indices hold."""
    cached = [(r, j) for r, j in wanted if r.ids[j] in r.tree.source.pins or r.tree.source.cache.get(r.ids[j] or "")]
    if cached:
        wanted = cached
    nodes = _load_all([(r.tree, r.ids[j], r.heights[j]) for r, j in wanted])  # type: ignore[misc]
    for (reach, j), node in sorted(zip(wanted, nodes), key=lambda item: -item[0][1]):
        reach.expand(j, node, keep(reach, j))


def route(items: list[tuple[Tree, list[Any]]], leaves: bool = True) -> None:
    """Read, across shards, the nodes on the paths to each tree's probe keys, leaving them pinned for the
    trees' own reads: one ``get_many`` per level that is not cached, for all trees at once (trees whose
    next nodes are cached descend first, so trees of different heights share a round trip). Each node
    routes its run of sorted probes with two bisections per child (``Manifest.runs``). ``leaves=False``
    stops above the entry sets (estimates)."""
    paths: list[list[Any]] = []  # [tree, height, runs (node id, lo, hi) over probes, sorted probes]
    for tree, probes in items:
        if tree.root is not None and probes and (leaves or tree.height > 0):
            paths.append([tree, tree.height, [(tree.root, 0, len(probes))], sorted(probes)])

    def cached(tree: Tree, node_id: str) -> bool:
        return node_id in tree.source.pins or tree.source.cache.get(node_id) is not None

    while paths:
        step = [p for p in paths if all(cached(p[0], run[0]) for run in p[2])] or paths
        nodes = iter(_load_all([(p[0], run[0], p[1]) for p in step for run in p[2]]))
        for path in step:
            tree, height, runs, probes = path
            following: list[tuple[str, int, int]] = []
            for _, lo, hi in runs:
                node = next(nodes)
                if height:
                    following.extend((node.ids[i], a, b) for i, a, b in node.runs(probes, lo, hi))
            path[1], path[2] = height - 1, following
        paths = [p for p in paths if p[1] >= (0 if leaves else 1)]


def select(lists: list[list[Any]], k: int) -> list[int]:
    """Split positions ``c`` with ``sum(c) == k`` such that ``lists[i][:c[i]]`` are together the ``k``
    smallest items of the sorted ``lists`` (items distinct across lists).

    Each step takes the middle item of the widest window, counts the items below it in every list,
    and halves that window: O(S log n) steps of S bisections.

    >>> select([[1, 4, 9], [2, 3, 10], [5]], 4)
    [2, 2, 0]
    """
    low = [0] * len(lists)
    high = [len(items) for items in lists]
    while True:
        widest = max(range(len(lists)), key=lambda i: high[i] - low[i], default=None)
        if widest is None or high[widest] == low[widest]:
            break
        mid = (low[widest] + high[widest]) // 2
        pivot = lists[widest][mid]
        counts = [bisect_left(items, pivot) for items in lists]
        below = sum(counts)
        if below == k:
            return counts
        if below < k:  # the pivot is among the k smallest
            low = [max(a, c) for a, c in zip(low, counts)]
            low[widest] = mid + 1
        else:
            high = [min(b, c) for b, c in zip(high, counts)]
    if sum(low) != k:
        raise AssertionError(f"selection of {k} from lists of {[len(x) for x in lists]} found {low}")
    return low


def _narrow(reaches: list[_Reach], runs: list[range], start: int, stop: int) -> tuple[Any, Any]:
    """Keys ``low`` (``None``: the start) and ``high`` (``None``: the end) with every key of positions
    ``start`` to ``stop - 1`` in ``[low, high)`` and few others: a binary search over a sample of the
    candidate entry sets' keys (every 16th), counting exactly where every shard's candidates reach."""
    floor: Any = None  # the key range where every shard's count is exact: [floor, ceiling)
    ceiling: Any = None
    for reach, run in zip(reaches, runs):
        first = reach.firsts[run[0]]
        after = run[-1] + 1
        end = reach.firsts[after] if after < len(reach.firsts) else None
        if first is not None and (floor is None or first > floor):
            floor = first
        if end is not None and (ceiling is None or end < ceiling):
            ceiling = end
    sample = sorted(
        key
        for reach, run in zip(reaches, runs)
        for j in run
        for key in reach.leaves[j].keys[::16]
        if (floor is None or not key < floor) and (ceiling is None or key < ceiling)
    )

    def below(key: Any) -> int:
        return sum(reach.bounds(key)[0] for reach in reaches)

    lo, hi = 0, len(sample)  # the first sample with more than ``start`` entries below it
    while lo < hi:
        mid = (lo + hi) // 2
        if below(sample[mid]) > start:
            hi = mid
        else:
            lo = mid + 1
    low = sample[lo - 1] if lo else floor
    hi = len(sample)  # the first sample with at least ``stop`` entries below it
    while lo < hi:
        mid = (lo + hi) // 2
        if below(sample[mid]) >= stop:
            hi = mid
        else:
            lo = mid + 1
    high = sample[lo] if lo < len(sample) else ceiling
    return low, high


class _Sweep:
    """Bounds on the global count below any key, from every shard's intervals at one moment: the shards'
    interval boundaries in key order with running sums of the least (``lows``) and most (``highs``)
    entries below, so that a bound costs one bisection however many shards there are.

    A shard's count below a key in its interval ``j`` lies between its counts below ``firsts[j]`` and
    ``firsts[j + 1]``; at its own boundary it is exact. Entry sets read count as intervals here: coarser
    bounds only keep more candidates, never fewer.
    """

    __slots__ = ("keys", "lows", "highs", "widths", "low0", "high0", "total")

    def __init__(self, reaches: list[_Reach]) -> None:
        events = []
        low0 = high0 = 0
        for reach in reaches:
            n = len(reach.firsts)
            high0 += reach.below(1)
            for j in range(1, n):
                events.append(
                    (reach.firsts[j], reach.below(j) - reach.below(j - 1), reach.below(j + 1) - reach.below(j))
                )
        events.sort(key=lambda event: event[0])
        self.keys = [e[0] for e in events]
        self.lows, self.highs, self.widths = [], [], []
        low, high = low0, high0
        for _, step, width in events:
            low += step  # the shard moves from interval j - 1 to j: its least count grows to below(j)
            high += width  # and its most to below(j + 1)
            self.lows.append(low)
            self.highs.append(high)
            self.widths.append(width)
        self.low0, self.high0 = low0, high0
        self.total = sum(r.total for r in reaches)

    def low(self, key: Any) -> int:
        if key is None:
            return 0
        i = bisect_right(self.keys, key) - 1
        return self.low0 if i < 0 else self.lows[i]

    def high(self, key: Any) -> int:
        """The most entries below ``key``: exact for the shard whose boundary ``key`` is."""
        if key is None:
            return self.total
        i = bisect_right(self.keys, key) - 1
        if i < 0:
            return self.high0
        return self.highs[i] - (self.widths[i] if self.keys[i] == key else 0)

    def candidates(self, reach: _Reach, first: int, last: int) -> range:
        """The intervals of ``reach`` that can hold a global position from ``first`` to ``last``: a run, as
        both bounds grow with the key."""
        n = len(reach.firsts)
        a = 0
        while a < n and self.high(reach.firsts[a + 1] if a + 1 < n else None) < first + 1:
            a += 1
        b = a
        while b < n and self.low(reach.firsts[b]) <= last:
            b += 1
        return range(a, b)

    def keep(self, reach: _Reach, j: int, first: int, last: int) -> Callable[[list[Any], list[int]], Iterable[int]]:
        """Which children of interval ``j``'s manifest can hold a position from ``first`` to ``last``: the
        other shards' bounds from the sweep, this shard's exact counts at the children's first keys."""
        own_low, own_high = reach.below(j), reach.below(j + 1)

        def chosen(bounds: list[Any], starts: list[int]) -> Iterable[int]:
            n = len(starts) - 1

            def low(c: int) -> int:  # least entries below child c's first key
                if c == 0:
                    return self.low(bounds[0])
                return starts[c] + reach.shift(bounds[c]) + self.low(bounds[c]) - own_low

            def high(c: int) -> int:  # most entries below child c's first key (c == n: the next interval's)
                if c == n or c == 0:
                    return self.high(bounds[c])
                return starts[c] + reach.shift(bounds[c]) + self.high(bounds[c]) - own_high

            lo, hi = 0, n
            while lo < hi:  # the first child whose end can reach ``first``
                mid = (lo + hi) // 2
                if high(mid + 1) >= first + 1:
                    hi = mid
                else:
                    lo = mid + 1
            a, hi = lo, n
            while lo < hi:  # the first child that starts past ``last``
                mid = (lo + hi) // 2
                if low(mid) > last:
                    hi = mid
                else:
                    lo = mid + 1
            return range(a, lo)

        return chosen


class ShardedSet:
    """A sorted set split into ``shards`` independent trees; see :class:`SortedSet`, whose reads and writes
    it answers identically. Made by ``SortedSet(store, name, shards=S)``; ``S`` is fixed at creation.

    Writes are atomic per shard: a batch that spans shards commits shard by
    shard (an ``incr`` that would overflow is refused before any shard commits).

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
        cache_bytes: int = 64 << 20,
        **options: Any,
    ) -> None:
        check_count(cache_bytes, "cache_bytes")
        if order is not None:
            check_choice(order, ("desc", "asc"), "order")
        self.store, self.name = store, name
        self._keys = Keyspace(store.namespace, name)
        self._settings_key = settings_key(self._keys)
        settings = self._settings(shards, order, chunk_size)
        self.shards = settings.shards
        self._order = Order(settings.order)
        self.order, self.chunk_size = settings.order, settings.chunk
        self._cache = NodeCache(cache_bytes)
        self._engines = [
            _Shard(
                part, store, f"{name}[{i}]", order=settings.order, chunk_size=settings.chunk, cache_bytes=0, **options
            )
            for i, part in enumerate(settings.parts)
        ]
        for engine in self._engines:
            engine._cache = self._cache  # node ids are unique (epoch, clock, 64 random bits): one cache serves all
        first = self._engines[0]
        self.gc_grace, self.log_limit, self._policy = first.gc_grace, first.log_limit, first._policy
        self._local = threading.local()
        self._settled = True
        self._stale = [0.0] * self.shards  # how often each shard's held head had moved (see _commit_to)

    def _settings(self, shards: int, order: str | None, chunk_size: int | None) -> Settings:
        """The stored settings, or new ones stored now (compare-and-set "only if absent": one creator wins)."""
        key = self._settings_key
        record = self.store.get(key)
        if record is None:
            if chunk_size is not None and (type(chunk_size) is not int or not 2 <= chunk_size <= 100_000):
                raise InvalidArgumentError(f"chunk_size must be an int from 2 to 100000, got {chunk_size!r:.80}")
            chunk = chunk_size or 1000
            self.store.check_chunk_size(chunk)
            fresh = Settings(
                shards, order or "desc", chunk, tuple(shard_parts(self.store.namespace, self.name, shards, self.store))
            )
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
        ):
            if wanted is not None and wanted != have:
                raise SettingsMismatchError(f"set {self.name!r} is stored with {what}={have!r}, not {wanted!r}")
        return stored

    def _ensure_settings(self) -> None:
        """Store the settings again before writing, if ``drop()`` removed them."""
        if not self._settled:
            fresh = Settings(self.shards, self.order, self.chunk_size, tuple(e._part for e in self._engines))
            try:
                self.store.cas(self._settings_key, fresh.encode(), None)
            except ConflictError:
                self._settings(self.shards, self.order, self.chunk_size)
            self._settled = True

    def __repr__(self) -> str:
        return f"SortedSet({self.name!r}, order={self.order!r}, chunk_size={self.chunk_size}, shards={self.shards})"

    @property
    def stats(self) -> Stats:
        """The store's counters of round trips and bytes (shared by every set on that store)."""
        return self.store.stats

    @property
    def commits(self) -> int:
        return sum(e.commits for e in self._engines)

    @property
    def retries(self) -> int:
        return sum(e.retries for e in self._engines)

    @property
    def merges(self) -> int:
        return sum(e.merges for e in self._engines)

    def shard_of(self, member: str) -> int:
        """The shard ``member`` lives in (:func:`shard_of`)."""
        return shard_of(check_member(member), self.shards)

    # -- snapshots ---------------------------------------------------------------

    def _snapshots(self) -> tuple[list[bytes | None], list[Snapshot]]:
        datas = self.store.get_many([e._keys.head for e in self._engines])
        return datas, [_snapshot_of(e, d) for e, d in zip(self._engines, datas)]

    def _read(self, fn: Callable[[list[Snapshot]], T]) -> T:
        """Run ``fn`` on one snapshot of every shard (their heads in one ``get_many``); if a node it needs
        was collected meanwhile, on newer heads."""
        datas, snaps = self._snapshots()
        for _ in self._policy.attempts():
            try:
                return fn(snaps)
            except MissingNodeError:
                now, snaps = self._snapshots()
                if now == datas:
                    raise MissingNodeError(
                        f"set {self.name!r}: a node the current head names is missing from the store (damaged)"
                    ) from None
                datas = now
        raise ConflictError(
            f"reads of set {self.name!r} kept losing their snapshot to garbage collection for "
            f"{self._policy.budget:g} s: raise gc_grace above the time a read takes"
        )

    @staticmethod
    def _count(snaps: list[Snapshot]) -> int:
        return sum(snap.ranking.count for snap in snaps)

    def _count_below(self, snaps: list[Snapshot], probes: list[Any]) -> list[int]:
        """For each probe key, the entries of the whole set below it: every shard's entry sets in one step."""
        route([(s.score_tree, probes) for s in snaps])
        totals = [0] * len(probes)
        for snap in snaps:
            for n, below in enumerate(snap.ranking.count_below(probes)):
                totals[n] += below
        return totals

    def _find(self, snaps: list[Snapshot], members: list[str]) -> list[Score | None]:
        """The scores of ``members``: each shard's member index entry sets, all in one step."""
        by_shard: dict[int, list[str]] = {}
        for member in members:
            by_shard.setdefault(shard_of(member, self.shards), []).append(member)
        route([(snaps[i].member_index, group) for i, group in by_shard.items()])
        found: dict[str, Score | None] = {}
        for i, group in by_shard.items():
            found.update(zip(group, snaps[i].index.find(group)))
        return [found[m] for m in members]

    def _entries(self, snaps: list[Snapshot], start: int, stop: int, ties: str = "ordinal") -> list[Entry]:
        """The entries at global positions ``start`` to ``stop - 1``: an exact selection across shards;
        ranks by ``ties`` (a competition rank: the entries better than the first one's score, summed)."""
        total = self._count(snaps)
        start, stop = max(start, 0), min(stop, total)
        if start >= stop:
            return []
        reaches = [_Reach(s.score_tree, s.view, s.ranking.count) for s in snaps]
        while True:
            sweep = _Sweep(reaches)
            runs = [sweep.candidates(reach, start, stop - 1) for reach in reaches]
            wanted = [(reach, j) for reach, run in zip(reaches, runs) for j in run if reach.pending(j)]
            if not wanted:
                break
            _fetch_and_expand(wanted, functools.partial(_Sweep.keep, sweep, first=start, last=stop - 1))
        for reach, run in zip(reaches, runs):
            if not run or any(reach.leaves[j] is None for j in run):
                raise AssertionError(f"shard intervals {run} cannot hold positions {start}..{stop}")
        low, high = _narrow(reaches, runs, start, stop)
        lists, base = [], 0
        for reach, run in zip(reaches, runs):
            keys: list[Any] = []
            for j in run:
                leaf_keys = reach.leaves[j].keys
                a = 0 if low is None else bisect_left(leaf_keys, low)
                b = len(leaf_keys) if high is None else bisect_left(leaf_keys, high)
                keys.extend(leaf_keys[a:b])
            view = reach.view
            if view is not None:
                if keys:
                    removed = set(view.between(keys[0], keys[-1])[1])
                    if removed:
                        keys = [k for k in keys if k not in removed]
                added = view.between(low if low is not None else reach.firsts[run[0]], high)[0]
                added = [k for k in added if high is None or k < high]  # the log's keys in [low, high)
                if added:
                    keys = sorted(keys + added)
            lists.append(keys)
            base += reach.bounds(low)[0]
        splits = select(lists, start - base)
        merged = heapq.merge(*(keys[c : c + stop - start] for keys, c in zip(lists, splits)))
        found = [next(merged) for _ in range(stop - start)]
        score_of = self._order.score_of
        scores = [score_of(key) for key in found]
        ranks = list(range(start + 1, stop + 1))
        if ties == "competition" and found:
            ranks[0] = self._count_below(snaps, [self._order.first_key(scores[0])])[0] + 1
            for i in range(1, len(ranks)):
                if scores[i] == scores[i - 1]:
                    ranks[i] = ranks[i - 1]
        return [Entry(key[1], score, rank) for key, score, rank in zip(found, scores, ranks)]

    # -- reads -----------------------------------------------------------------------

    def __len__(self) -> int:
        """Number of members: the shards' counts, from their heads (one round trip)."""
        return self._read(self._count)

    def info(self) -> dict[str, Any]:
        """The heads' facts: members, settings, and each shard's size, generation and tree heights."""

        def run(snaps: list[Snapshot]) -> dict[str, Any]:
            shards: list[dict[str, Any]] = []
            for engine, snap in zip(self._engines, snaps):
                head = snap.head
                shards.append(
                    {
                        "members": snap.ranking.count,
                        "generation": head.gen,
                        "score_tree_height": head.scores.height + (head.scores.root is not None),
                        "member_index_height": head.members.height + (head.members.root is not None),
                        "log_entries": len(head.log),
                        "log_limit": _log.log_limit(engine, head),
                        "head_key": engine._keys.head,
                    }
                )
            return {
                "members": self._count(snaps),
                "order": self.order,
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

    __contains__ = SortedSet.__contains__

    def score(self, member: str) -> Score | None:
        """The member's score, or ``None``: its shard alone (head, member index entry set)."""
        member = check_member(member)
        return self._engines[shard_of(member, self.shards)].score(member)

    def scores(self, members: Iterable[str]) -> list[Score | None]:
        """The scores of many members (``None`` where absent): every shard's entry sets in one step."""
        wanted = [check_member(m) for m in members]
        return self._read(lambda snaps: self._find(snaps, wanted))

    def rank(self, member: str, *, ties: str = "ordinal") -> int | None:
        """The member's 1-based rank: the sum over shards of the entries before its key. Three round trips
        with manifests cached (heads, the member's index entry set, every shard's score entry set)."""
        member = check_member(member)
        self._check_ties(ties)

        def run(snaps: list[Snapshot]) -> int | None:
            score = snaps[shard_of(member, self.shards)].index.get(member)
            if score is None:
                return None
            probe = self._order.key(member, score) if ties == "ordinal" else self._order.first_key(score)
            return self._count_below(snaps, [probe])[0] + 1

        return self._read(run)

    def _check_ties(self, ties: Any) -> None:
        check_choice(ties, TIES, "ties")
        if ties == "dense":
            raise InvalidArgumentError(
                "dense ranks count distinct scores, and a tie group spans shards: a sharded set has no exact "
                "dense rank short of reading every shard's scores; use ties='competition' or an unsharded set"
            )

    def percentile(self, member: str) -> float | None:
        """The share of members with a strictly better score than ``member``'s (see
        :meth:`SortedSet.percentile`): the shards' counts below its score, summed, over their sizes.

        >>> board = SortedSet.load(mdss.open_store("memory://"), "b", {f"p{i}": i for i in range(10)}, shards=3)
        >>> board.percentile("p9"), board.percentile("p0"), board.at_percentile(0.5, ties="competition")
        (0.0, 0.9, Entry(member='p4', score=4, rank=6))
        """
        member = check_member(member)

        def run(snaps: list[Snapshot]) -> float | None:
            score = snaps[shard_of(member, self.shards)].index.get(member)
            if score is None:
                return None
            return self._count_below(snaps, [self._order.first_key(score)])[0] / self._count(snaps)

        return self._read(run)

    at_percentile = SortedSet.at_percentile

    def _size(self, snaps: list[Snapshot]) -> int:
        return self._count(snaps)

    def rank_of_score(self, score: Score) -> int:
        """The competition rank a member with ``score`` would have. Two round trips with manifests cached."""
        probe = self._order.first_key(check_score(score))
        return self._read(lambda snaps: self._count_below(snaps, [probe])[0] + 1)

    at = SortedSet.at

    def _score_bounds(self, snaps: list[Snapshot], best: Score, worst: Score) -> tuple[int, int]:
        low, high = self._order.first_key(best), self._order.last_key(worst)
        if high < low:
            return 0, 0
        start, stop = self._count_below(snaps, [low, high])
        return start, stop

    # SortedSet's range, range_by_score and count, over this class's _score_bounds and _entries (a snapshot
    # is a list of shards' snapshots here): two round trips with manifests cached (three with score bounds).
    range = SortedSet.range
    range_by_score = SortedSet.range_by_score
    count = SortedSet.count

    def around(self, member: str, before: int = 5, after: int = 5, *, ties: str = "ordinal") -> list[Entry]:
        """The entries around ``member`` (it included), or ``[]`` if it is absent; ranks follow ``ties``."""
        member = check_member(member)
        check_count(before, "before")
        check_count(after, "after")
        self._check_ties(ties)

        def run(snaps: list[Snapshot]) -> list[Entry]:
            score = snaps[shard_of(member, self.shards)].index.get(member)
            if score is None:
                return []
            position = self._count_below(snaps, [self._order.key(member, score)])[0]
            return self._entries(snaps, max(position - before, 0), position + after + 1, ties)

        return self._read(run)

    def _cursor_tag(self) -> int:
        return zlib.crc32(f"{self._keys.prefix}shards".encode())

    def page(self, limit: int = 100, cursor: str | None = None, *, ties: str = "ordinal") -> Page:
        """A page of ``limit`` entries and the cursor of the next page (``None`` after the last).

        The cursor holds the last entry returned; the next page continues
        just after it on the newest state (by key), so a member unchanged
        throughout is never skipped nor repeated, however other writers
        change the set; ranks are those of the newest state. The first page
        costs two round trips with manifests cached, the next ones three.
        """
        if type(limit) is not int or limit < 1:
            raise InvalidArgumentError(f"limit must be an int >= 1, got {limit!r:.80}")
        self._check_ties(ties)
        if cursor is None:
            after = None
        else:
            member, score = self._decode_cursor(cursor)
            after = self._order.key_after(member, score)

        def run(snaps: list[Snapshot]) -> tuple[list[Entry], int, int]:
            position = 0 if after is None else self._count_below(snaps, [after])[0]
            entries = self._entries(snaps, position, position + limit, ties)
            return entries, position + len(entries), self._count(snaps)

        entries, end, total = self._read(run)
        if not entries or end >= total:
            return Page(entries, None)
        last = entries[-1]
        payload = msgpack.packb([self._cursor_tag(), last.member, last.score])
        text = base64.urlsafe_b64encode(payload + zlib.crc32(payload).to_bytes(4, "big")).decode("ascii")
        return Page(entries, text.rstrip("="))

    def _decode_cursor(self, cursor: Any) -> tuple[str, Score]:
        try:
            data = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
            payload = data[:-4]
            if zlib.crc32(payload).to_bytes(4, "big") != data[-4:]:
                raise ValueError("checksum")
            tag, member, score = msgpack.unpackb(payload)
            if tag != self._cursor_tag():
                raise ValueError("another set's cursor")
            return check_member(member), check_score(score)
        except Exception:
            raise InvalidArgumentError(f"not a page cursor of set {self.name!r}: {cursor!r:.80}") from None

    __iter__ = SortedSet.__iter__

    # -- estimates ------------------------------------------------------------------

    def _estimate_below(self, snaps: list[Snapshot], member: str | None, score: Any, ties: str, max_error: Any) -> Any:
        """Entries below the probe, summed over shards: estimates and bounds from manifests, or exact."""
        if member is not None:
            found = snaps[shard_of(member, self.shards)].index.get(member)
            if found is None:
                return None
            probe = self._order.key(member, found) if ties == "ordinal" else self._order.first_key(found)
        else:
            probe = self._order.first_key(score)
        route([(s.score_tree, [probe]) for s in snaps], leaves=False)
        rank = low = high = 0
        for snap in snaps:
            shift = 0 if snap.view is None else snap.view.shift(probe)
            r, lo, hi = _estimate.estimate_in_tree(snap.score_tree, probe)
            rank, low, high = rank + r + shift, low + lo + shift, high + hi + shift
        if max_error is not None and high - low > max_error:
            exact = self._count_below(snaps, [probe])[0]
            return exact, exact, exact
        return rank, low, high

    def estimate_rank(
        self,
        member: str | None = None,
        *,
        score: Score | None = None,
        ties: str | None = None,
        max_error: int | None = None,
    ) -> _estimate.Estimate | None:
        """An estimated 1-based rank whose bounds always hold (see :meth:`SortedSet.estimate_rank`): the
        shards' estimates and bounds add up, so ``high - low < shards * chunk_size``."""
        member, score, ties = SortedSet._estimate_rank_args(member, score, ties, max_error)

        def run(snaps: list[Snapshot]) -> _estimate.Estimate | None:
            below = self._estimate_below(snaps, member, score, ties or "competition", max_error)
            return None if below is None else _estimate.as_rank(below)

        return self._read(run)

    def estimate_percentile(
        self, member: str | None = None, *, score: Score | None = None, max_error: float | None = None
    ) -> _estimate.Percentile | None:
        """The estimated share of members with a strictly better score (see :meth:`SortedSet.estimate_percentile`)."""
        member, score = SortedSet._estimate_args(member, score)
        if max_error is not None and (
            not isinstance(max_error, (int, float)) or isinstance(max_error, bool) or not max_error >= 0
        ):
            raise InvalidArgumentError(f"max_error must be a fraction >= 0, got {max_error!r:.80}")

        def run(snaps: list[Snapshot]) -> _estimate.Percentile | None:
            total = self._count(snaps)
            keys = None if max_error is None else max_error * total
            below = self._estimate_below(snaps, member, score, "competition", keys)
            return None if below is None else _estimate.as_percentile(below, total)

        return self._read(run)

    # -- writes -----------------------------------------------------------------------

    add = SortedSet.add
    add_many = SortedSet.add_many
    incr = SortedSet.incr
    remove = SortedSet.remove
    remove_many = SortedSet.remove_many

    batch = SortedSet.batch  # atomic within each shard: _submit commits shard by shard

    def _submit(
        self, ops: list[tuple[str, str, Any]], want_score: bool | str | list[bool | str] = False
    ) -> list[Any] | None:
        """Route each operation to its member's shard and commit shard by shard (each through its own
        group commit); results in the order of ``ops``."""
        batch = getattr(self._local, "batch", None)
        if batch is not None:
            batch.ops.extend(ops)
            batch.want_scores.extend(want_score if isinstance(want_score, list) else [want_score] * len(ops))
            return None
        if not ops:
            return []
        wants = want_score if isinstance(want_score, list) else [want_score] * len(ops)
        groups: dict[int, list[int]] = {}
        for n, (_, member, _) in enumerate(ops):
            groups.setdefault(shard_of(member, self.shards), []).append(n)
        if len(groups) > 1 and any(op.startswith("incr") for op, _, _ in ops):
            self._refuse_overflow(ops)
        self._ensure_settings()
        results: list[Any] = [None] * len(ops)
        for i, indices in sorted(groups.items()):
            got = self._commit_to(i, [ops[n] for n in indices], [wants[n] for n in indices])
            for n, result in zip(indices, got or ()):
                results[n] = result
        return results

    def _commit_to(self, i: int, ops: list[tuple[str, str, Any]], wants: list[bool | str]) -> list[Any] | None:
        """Commit ``ops`` to shard ``i``, starting from its head as last seen, or from a fresh read when the
        heads this process held for that shard were mostly stale lately.

        A process spreads its writes over S shards, so the head it last saw
        of one shard is older, by S times, than an unsharded set's: other
        writers have likely moved it, and a compare-and-set from it would
        lose (a conflict, then a retry from the winner's head). Reading first
        costs the same two round trips without the conflict. ``_stale``
        follows how often the held head had moved (a moving average).
        """
        engine = self._engines[i]
        held = engine._held
        held_gen = None if held is None else held[1].gen
        if held is not None and self._stale[i] > 0.5:
            engine._held = None  # read the head first
        retries = engine.retries
        got = engine._submit(ops, wants)
        now = engine._held
        if held_gen is not None and now is not None and engine.retries == retries:
            moved = now[1].gen - 1 != held_gen  # someone else committed between our two commits
            self._stale[i] = 0.8 * self._stale[i] + 0.2 * moved
        elif engine.retries != retries:
            self._stale[i] = 0.8 * self._stale[i] + 0.2
        return got

    def _refuse_overflow(self, ops: list[tuple[str, str, Any]]) -> None:
        """A batch spanning shards whose ``incr`` would fail (64-bit overflow, inf - inf) is refused before
        any shard commits, as the scores read now tell (a concurrent writer may still make one shard's
        commit refuse it after others committed: atomicity is per shard)."""
        members = sorted({member for _, member, _ in ops})
        now: dict[str, Any] = dict(zip(members, self.scores(members)))
        for op, member, value in ops:
            kind = op.split(":", 1)[0]  # conditions (only=, when=) aside: they can only skip an op
            if kind == "incr":
                now[member] = add_scores(0 if now[member] is None else now[member], value)
            elif kind == "set":
                now[member] = value
            elif kind in ("best", "gt", "lt"):
                better = self._order.better if kind == "best" else (max if kind == "gt" else min)
                now[member] = value if now[member] is None else better(now[member], value)
            else:
                now[member] = None

    # -- whole-set operations -------------------------------------------------------

    @classmethod
    def load(cls, store: Store, name: str, pairs: Any, *, shards: int, **options: Any) -> Any:
        """:meth:`SortedSet.load` with ``shards``."""
        return SortedSet.load(store, name, pairs, shards=shards, **options)

    def _load(
        self, pairs: Mapping[str, Score] | Iterable[tuple[str, Score]], replace: bool, progress: Any, batch: int
    ) -> None:
        """Load each shard's members into it (``SortedSet.load``): one commit per shard."""
        from . import _commit

        if type(replace) is not bool:
            raise InvalidArgumentError(f"replace must be True or False, got {replace!r:.80}")
        check_count(batch, "batch", least=1)
        if progress is not None and not callable(progress):
            raise InvalidArgumentError(f"progress must be callable, got {progress!r:.80}")
        checked = check_pairs(pairs)
        if not replace and len(self):
            raise InvalidArgumentError(f"set {self.name!r} already has entries; pass replace=True to replace them")
        parts: list[dict[str, Score]] = [{} for _ in self._engines]
        for member, score in checked.items():
            parts[shard_of(member, self.shards)][member] = score
        self._ensure_settings()
        done = 0
        for engine, part in zip(self._engines, parts):

            def report(d: int, t: int, offset: int = done) -> None:
                if progress is not None:
                    progress(offset + d, offset + t)

            last: list[int] = [0]

            def counted(d: int, t: int, report: Any = report, last: list[int] = last) -> None:
                last[0] = t
                report(d, t)

            _commit.load(engine, part, replace, counted, batch)
            done += last[0]

    def gc(self, *, min_age: float = 0.0, wait: bool = True, sweep: bool = False) -> int:
        """Collect every shard (see :meth:`SortedSet.gc`); their grace periods run side by side."""
        with ThreadPoolExecutor(max_workers=min(self.shards, 16)) as pool:
            return sum(pool.map(lambda e: e.gc(min_age=min_age, wait=wait, sweep=sweep), self._engines))

    def merge(self) -> bool:
        """Merge every shard's update log now; True if any was merged."""
        return any([e.merge() for e in self._engines])

    def unreferenced(self, min_age: float = 0.0) -> list[str]:
        return [key for e in self._engines for key in e.unreferenced(min_age)]

    def node_keys(self) -> list[str]:
        return sorted(key for e in self._engines for key in e.node_keys())

    def drop(self) -> None:
        """Remove the whole set: every shard, then the settings record."""
        for engine in self._engines:
            engine.drop()
        self.store.delete(self._settings_key)
        self._settled = False

    def check(self) -> list[str]:
        """Every shard's invariants, every member in the shard its hash names, and the settings record."""
        problems = []
        try:
            record = self.store.get(self._settings_key)
            if record is None and any(self.store.get(e._keys.head) is not None for e in self._engines):
                problems.append(f"the settings record {self._settings_key} is missing")
            elif record is not None:
                Settings.decode(self._settings_key, record.value)
        except CorruptDataError as exc:
            problems.append(str(exc))
        for i, engine in enumerate(self._engines):
            found = engine.check()
            problems.extend(f"shard {i}: {p}" for p in found)
            if not found:
                strays = [e.member for e in engine if shard_of(e.member, self.shards) != i]
                if strays:
                    problems.append(f"shard {i} holds members of other shards: {strays[:5]!r}")
        return problems

    def _check(self) -> None:
        problems = self.check()
        if problems:
            from . import _check

            described = "\n  ".join(f"shard {i}: {_check.describe(e)}" for i, e in enumerate(self._engines))
            raise AssertionError(f"{self!r} is broken:\n  " + "\n  ".join(problems) + "\n  " + described)


__all__ = ["MAX_SHARDS", "ShardedSet", "shard_of"]
_ = InvalidScoreError  # raised by add_scores in _refuse_overflow
