"""Reads across the shards of a sharded set: one snapshot of every head, exact counts, exact pages.

A read takes all ``S`` heads in one ``get_many`` and sees each shard as a
:class:`Part`: its head, its log's view and its merged count, kept per head
value so that a shard whose head did not change costs nothing to see again
(and, read often, answers its log's shifts from plain lists). Every later
step batches the fetches of all shards into one ``get_many``, and the nodes
a read has seen stay pinned for it (:class:`Gather`), so round trips do not
grow with ``S``.

- A shard read more than once at the same head is seen through its
  :class:`Layout`: its entry sets' key ranges (*regions*) with the merged
  count before each, and each region's keys with the log applied, merged once
  and kept with the cached entry set (while the log's keys in it stay the
  same), as unsharded pages keep theirs (``mdss._log.View.region``).
- A count below a key is the sum of each shard's exact count: two bisections
  in its layout, else descents from cached nodes first, one ``get_many`` per
  level that is not cached.
- A page at global offset ``k`` is an exact selection across shards. With the
  entry sets cached (:func:`_guess_page`): a pivot key from the shards'
  proportional positions, its exact global count, a better pivot while that
  count is far off, then a window of each shard's merged keys around the
  pivot, wide enough for the page by the binomial spread of members over
  shards, sorted together, and topped up where they stop short of the page's
  last key; the windows' first keys prove the page exact, else they widen.
  Otherwise (:func:`_candidates`): the manifests' counts and first keys
  narrow every shard to the entry sets that can hold the page, read in one
  round trip, and the guess runs over those, or a selection over their keys
  (:func:`_select_page`) finds the page.

See docs/architecture.md ("Sharded sets").
"""

from __future__ import annotations

import contextlib
import functools
import weakref
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable
from math import isqrt
from operator import itemgetter
from typing import Any

from ._cache import NodeCache
from ._head import Head, Snapshot
from ._order import member_key, same_keys
from ._overlay import View
from ._ranking import Index
from ._tree import Leaf, Source, Tree, decode
from .exceptions import CorruptDataError, MissingNodeError
from .stores.base import Store

_EMPTY_LEAF = Leaf((), (), ())
_MEMBER, _SCORE = itemgetter(1), itemgetter(0)


class Part:
    """One shard as reads see it at one head value: the head, the log's view (``None``: empty log), the
    merged count, and where the score tree starts. None of it changes while the head's bytes stay the
    same, so the part is kept per shard until then, with what reads learn of it (the score tree's root
    node, the log's keys as lists); the trees a read needs are made per read (:meth:`Gather.score_tree`)."""

    __slots__ = ("engine", "data", "head", "view", "count", "root", "height", "size", "top", "reads", "layout", "_log")

    def __init__(self, engine: Any, data: bytes | None, head: Head, view: View | None) -> None:
        self.engine, self.data, self.head, self.view = engine, data, head, view
        scores = head.scores
        self.root, self.height, self.size = scores.root, scores.height, scores.count
        self.count = scores.count + (0 if view is None else view.size())
        self.top: Any = None  # the score tree's root node, once a read has it (it never changes)
        self.reads = 0  # reads that saw this part
        self.layout: Layout | None = None  # the score tree's regions, once a read needed them
        self._log: tuple[list[Any], list[Any]] | None = None  # the log's added and removed keys, once copied

    def seen(self) -> Part:
        """Count one more read of this part; a part read often enough keeps its log's keys as two plain
        sorted lists (the view as of its head never changes), so that shifts and ranges of the log are
        bisections of lists rather than calls into the shared overlay. Copying costs about as much as a
        few hundred view calls of a big log, so a part copies after ``1 + entries // 256`` reads: never on
        a head that writers replace at every read."""
        self.reads += 1
        if self._log is None and self.view is not None and self.reads > 1 + len(self.head.log) // 256:
            self._log = self.view.between(None, None)
        return self

    @classmethod
    def of(cls, engine: Any, snap: Snapshot) -> Part:
        """From a snapshot the shard took itself (a head that vanished, a log segment collected)."""
        return cls(engine, None, snap.head, snap.view)

    def shift(self, key: Any) -> int:
        """What the log does to the tree's count below ``key``."""
        if self._log is not None:
            added, removed = self._log
            return bisect_left(added, key) - bisect_left(removed, key) if key is not None else 0
        return 0 if self.view is None or key is None else self.view.shift(key)

    def between(self, low: Any, high: Any) -> tuple[list[Any], list[Any]]:
        """The log's added and removed keys from ``low`` (inclusive) to ``high`` (exclusive); ``None``:
        unbounded."""
        if self._log is not None:
            added, removed = self._log
            a = 0 if low is None else bisect_left(added, low)
            b = len(added) if high is None else bisect_left(added, high)
            c = 0 if low is None else bisect_left(removed, low)
            d = len(removed) if high is None else bisect_left(removed, high)
            return added[a:b], removed[c:d]
        if self.view is None:
            return [], []
        added, removed = self.view.between(low, high)
        if high is not None:
            if added and added[-1] >= high:
                added = added[: bisect_left(added, high)]
            if removed and removed[-1] >= high:
                removed = removed[: bisect_left(removed, high)]
        return added, removed


class Layout:
    """A shard's score tree at one head as *regions*, from its cached manifests: region ``j`` is the key range
    of the tree's ``j``-th entry set, from ``firsts[j]`` (``None``: the start) to ``firsts[j + 1]`` (or the
    end), with the log's keys in that range; :meth:`start` is the count of the shard's merged entries before
    it (``trees[j]`` tree entries and the log's shift there). A region's merged keys are made once per
    layout (:meth:`region`) and kept with its entry set while the log's keys in it stay the same, so that a
    read of an unchanged shard finds a key at a merged position, or counts below a key, with two
    bisections and no log in between. The starts are found as needed (a binary search over the regions,
    a shift each), and all at once for a part read again: a head that writers replace at every read
    costs only the few a read needs."""

    __slots__ = ("firsts", "ids", "trees", "starts", "complete", "alone", "refs")

    def __init__(self, firsts: list[Any], ids: list[Any], trees: list[int], count: int) -> None:
        self.firsts, self.ids, self.trees = firsts, ids, trees
        self.starts: list[Any] = [0] + [None] * (len(ids) - 1) + [count]
        self.complete = len(ids) == 1
        self.alone: Any = None  # an empty tree's keys: the log's
        # Weak references to the regions' entry sets once merged for this layout: a read of an unchanged
        # shard finds a region's keys without the cache's lock (Gather.touched keeps the cache's order).
        # Weak, so the node cache alone still decides which entry sets (and merged keys) stay in memory.
        self.refs: list[Any] = [None] * len(ids)

    def start(self, part: Part, j: int) -> int:
        """The shard's merged entries before region ``j``."""
        found = self.starts[j]
        if found is None:
            found = self.starts[j] = self.trees[j] + part.shift(self.firsts[j])
        return found

    def fill(self, part: Part) -> None:
        """Every region's start, so that finding a merged position is one bisection."""
        if not self.complete:
            shift, firsts, trees = part.shift, self.firsts, self.trees
            self.starts[1:-1] = [trees[j] + shift(firsts[j]) for j in range(1, len(trees))]
            self.complete = True

    def find(self, part: Part, p: int) -> int:
        """The region holding merged position ``p`` (``0 <= p < part.count``)."""
        if self.complete:
            return bisect_right(self.starts, p) - 1
        lo, hi = 0, len(self.ids)  # start(lo) <= p < start(hi)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if self.start(part, mid) <= p:
                lo = mid
            else:
                hi = mid
        return lo

    def region(self, g: Gather, part: Part, j: int) -> Any:
        """Region ``j``'s merged keys, sorted (raises :class:`_Uncached` when its entry set is not cached).
        They stay with the entry set, so the node cache bounds them: ``(added, removed, keys, layout)``,
        valid for this layout at once and for another while the log's keys in the region are the same."""
        ref = self.refs[j]
        if ref is not None:
            leaf = ref()
            if leaf is not None:
                kept = leaf.gathered
                if kept[3] is self:
                    g.touched.add(self.ids[j])
                    return kept[2]
        return self._region(g, part, j)

    def _region(self, g: Gather, part: Part, j: int) -> Any:
        leaf_id = self.ids[j]
        if leaf_id is None:  # an empty tree: the log alone
            if self.alone is None:
                self.alone = part.between(None, None)[0]
            return self.alone
        leaf = g.pins.get(leaf_id)
        if leaf is None:
            at_root = leaf_id is part.root  # the root stays with the part (Gather.peek)
            leaf = g.peek(part, leaf_id, 0) if at_root else g.cache.get(leaf_id)
            if leaf is None:
                raise _Uncached
            if leaf.height:
                raise _misplaced(leaf, 0, part.engine.keys.node(leaf_id))
            g.pins[leaf_id] = leaf
        kept = leaf.gathered
        if self.refs[j] is None or self.refs[j]() is not leaf:
            self.refs[j] = weakref.ref(leaf)
        if kept is not None and kept[3] is self:
            return kept[2]
        added, removed = part.between(self.firsts[j], self.firsts[j + 1] if j + 1 < len(self.ids) else None)
        if not (added or removed):
            keys = leaf.keys
        elif kept is not None and same_keys(kept[0], added) and same_keys(kept[1], removed):
            keys = kept[2]
        else:
            keys = _merge_keys(leaf.keys, added, removed)
        leaf.gathered = (added, removed, keys, self)
        return keys

    def key_at(self, g: Gather, part: Part, p: int) -> Any:
        """The shard's key at merged position ``p`` (``0 <= p < part.count``)."""
        if self.complete:
            j = bisect_right(self.starts, p) - 1
            return self.region(g, part, j)[p - self.starts[j]]
        j = self.find(part, p)
        return self.region(g, part, j)[p - self.start(part, j)]

    def below(self, g: Gather, part: Part, key: Any) -> int:
        """The shard's merged entries below ``key``."""
        j = bisect_right(self.firsts, key, 1) - 1
        start = self.starts[j]
        return (self.start(part, j) if start is None else start) + bisect_left(self.region(g, part, j), key)

    def run(self, g: Gather, part: Part, lo: int, hi: int) -> tuple[Any, Any]:
        """The shard's keys at merged positions ``lo`` to ``hi - 1``, and its key at ``hi`` (``None`` past the
        end): one region's slice when the run lies in it, as it mostly does."""
        if self.complete and lo < hi:
            j = bisect_right(self.starts, lo) - 1
            a = self.starts[j]
            if hi < self.starts[j + 1]:
                keys = self.region(g, part, j)
                return keys[lo - a : hi - a], keys[hi - a]
        return self.window(g, part, lo, hi), None if hi >= part.count else self.key_at(g, part, hi)

    def window(self, g: Gather, part: Part, lo: int, hi: int) -> list[Any]:
        """The shard's keys at merged positions ``lo`` to ``hi - 1``."""
        out: list[Any] = []
        while lo < hi:
            j = self.find(part, lo)
            a, end = self.start(part, j), min(hi, self.start(part, j + 1))
            out += self.region(g, part, j)[lo - a : end - a]
            lo = end
        return out


def _merge_keys(keys: Any, added: list[Any], removed: list[Any]) -> tuple[Any, ...]:
    """An entry set's keys without ``removed`` (some of them), with ``added``, sorted: the removed found by
    bisection (a few), the added sorted in as one run. A tuple: CPython's collector stops tracking it."""
    merged = list(keys)
    for key in reversed(removed):
        i = bisect_left(merged, key)
        if i < len(merged) and merged[i] == key:
            del merged[i]
    if added:
        merged += added
        merged.sort()
    return tuple(merged)


def layout(g: Gather, part: Part) -> Layout:
    """The part's :class:`Layout`, made once from its cached manifests (raises :class:`_Uncached` when one is
    not cached)."""
    found = part.layout
    if found is not None:
        if part.reads and not found.complete:  # a head read again: likely read more
            found.fill(part)
        return found
    level: list[tuple[Any, Any, int]] = [(part.root, None, 0)]  # (node id, region's first key, tree start)
    for height in range(part.height, 0, -1):
        below: list[tuple[Any, Any, int]] = []
        for node_id, first, at in level:
            node = g.peek(part, node_id, height)
            if node is None:
                raise _Uncached
            firsts, starts, ids = node.firsts, node.starts, node.ids
            below.append((ids[0], first, at + starts[0]))
            below.extend((ids[i], firsts[i], at + starts[i]) for i in range(1, len(ids)))
        level = below
    found = part.layout = Layout(
        [first for _, first, _ in level], [node_id for node_id, _, _ in level], [at for _, _, at in level], part.count
    )
    if part.reads:
        found.fill(part)
    return found


class Gather:
    """One read of a sharded set: every shard's :class:`Part` (from one ``get_many`` of the heads) and the
    nodes this read has seen, pinned by id (ids are unique across shards: one cache serves them all)."""

    __slots__ = ("parts", "pins", "cache", "store", "keyfn", "touched", "count", "keeper", "_merged")

    def __init__(self, parts: list[Part], store: Store, cache: NodeCache, keyfn: Any) -> None:
        self.parts, self.store, self.cache, self.keyfn = parts, store, cache, keyfn
        self.pins: dict[str, Any] = {}
        self.touched: set[str] = set()  # entry sets found through a layout's references (Layout.refs)
        self.count = sum(part.count for part in parts)  # the set's entries in this snapshot
        self.keeper: Any = None  # the set's mdss._merged.Merged, when this read may use its keys
        self._merged: Any = None

    def merged(self) -> Any:
        """Every shard's keys in one ``SortedList`` when this process keeps them (``mdss._merged``), brought up
        to this snapshot on first use; else ``None``. Reads that count or page ask; others never pay."""
        keeper = self.keeper
        if keeper is not None:
            self.keeper = None
            self._merged = keeper.of(self)
        return self._merged

    def done(self) -> None:
        """Mark the entry sets this read found through layouts as used in the cache, in one go."""
        if self.touched:
            self.cache.touch(self.touched)
            self.touched = set()

    def _source(self, part: Part) -> Source:
        source = Source(self.store, part.engine.keys, self.cache)
        source.pins = self.pins
        return source

    def score_tree(self, part: Part) -> Tree:
        return Tree(self._source(part), self.keyfn, part.root, part.height, part.size)

    def member_index(self, part: Part) -> Tree:
        members = part.head.members
        return Tree(self._source(part), member_key, members.root, members.height, members.count)

    def index(self, part: Part) -> Tree | Index:
        """The shard's member index with its log applied."""
        tree = self.member_index(part)
        return tree if part.view is None else Index(tree, part.view)

    # -- nodes: pinned, cached, or one get_many per step for every shard ----------------

    def peek(self, part: Part, node_id: str, height: int) -> Any:
        """A node this read has pinned or the cache holds (pinned now), else ``None``: no round trip. The
        score tree's root stays with the part, for every read of that head."""
        if node_id is part.root:
            node = part.top
            if node is None:
                node = part.top = self._peek(part, node_id, height)
            return node
        return self._peek(part, node_id, height)

    def _peek(self, part: Part, node_id: str, height: int) -> Any:
        node = self.pins.get(node_id)
        if node is None:
            node = self.cache.get(node_id)
            if node is None:
                return None
            self.pins[node_id] = node
        if node.height != height:
            raise _misplaced(node, height, part.engine.keys.node(node_id))
        return node

    def fetch(self, wanted: Iterable[tuple[Part, str, int, Any]]) -> None:
        """Read the nodes ``(part, node id, height, keyfn)`` not pinned or cached, all in one ``get_many``,
        and pin them."""
        missing: dict[str, tuple[Part, str, int, Any]] = {}
        for item in wanted:
            part, node_id, height, _ = item
            if self.peek(part, node_id, height) is None:
                missing.setdefault(part.engine.keys.node(node_id), item)
        if not missing:
            return
        keys = list(missing)
        for key, data in zip(keys, self.store.get_many(keys)):
            if data is None:
                raise MissingNodeError("a node the head names is missing", key)
            _, node_id, height, keyfn = missing[key]
            node = decode(key, data, keyfn)
            if node.height != height:
                raise _misplaced(node, height, key)
            self.cache.put(node_id, node, len(data))
            if not height:
                self.cache.seen(len(node), len(data))
            self.pins[node_id] = node

    def load(self, wanted: list[tuple[Part, str, int, Any]]) -> list[Any]:
        """The nodes ``(part, node id, height, keyfn)``, in order: pinned, cached, or all read in one
        ``get_many``."""
        self.fetch(wanted)
        return [self.peek(part, node_id, height) for part, node_id, height, _ in wanted]


def _misplaced(node: Any, height: int, key: str) -> CorruptDataError:
    what = "an entry set" if node.height == 0 else f"a manifest of height {node.height}"
    return CorruptDataError(f"stored node is {what} where a node of height {height} belongs", key)


class _Uncached(Exception):
    """A node the guessing page selection needs is not cached: it gives way to the manifests' selection."""


# -- counts ------------------------------------------------------------------------------


def counts(g: Gather, probes: list[Any]) -> list[int]:
    """For each probe key, the entries of the whole set below it: every shard descends its cached nodes,
    then what is missing at a level is read for all shards in one ``get_many``."""
    merged = g.merged()
    if merged is not None:
        return [merged.bisect_left(probe) for probe in probes]
    totals = [0] * len(probes)
    todo = []
    touched = g.touched
    for part in g.parts:
        lay = part.layout
        if lay is None and part.reads and part.count:  # a head read before: worth its layout
            with contextlib.suppress(_Uncached):
                lay = layout(g, part)
        for p, probe in enumerate(probes):
            if lay is not None:
                # Layout.below, inlined for a region already merged for this layout (the common case)
                j = bisect_right(lay.firsts, probe, 1) - 1
                ref, start = lay.refs[j], lay.starts[j]
                kept = None if ref is None else getattr(ref(), "gathered", None)  # read once: threads share it
                if kept is not None and start is not None and kept[3] is lay:
                    totals[p] += start + bisect_left(kept[2], probe)
                    touched.add(lay.ids[j])
                    continue
                try:
                    totals[p] += lay.below(g, part, probe)
                    continue
                except _Uncached:
                    pass
            todo.append([part, p, probe, part.root, part.height, 0])
    peek = g.peek
    while True:
        missing = []
        for item in todo:
            part, p, probe, node_id, height, before = item
            if node_id is None:  # an empty tree: the log alone
                totals[p] += part.shift(probe)
                continue
            while True:
                node = peek(part, node_id, height)
                if node is None:
                    item[3:] = node_id, height, before
                    missing.append(item)
                    break
                if not height:
                    totals[p] += before + bisect_left(node.keys, probe) + part.shift(probe)
                    break
                i = bisect_right(node.firsts, probe) - 1
                i = i if i > 0 else 0
                before += node.starts[i]
                node_id, height = node.ids[i], height - 1
        if not missing:
            return totals
        g.fetch((item[0], item[3], item[4], g.keyfn) for item in missing)
        todo = missing


def route(g: Gather, items: list[tuple[Part, Tree, list[Any]]], leaves: bool = True) -> None:
    """Read, across shards, the nodes on the paths to each tree's probe keys, leaving them pinned for the
    trees' own reads: one ``get_many`` per level that is not cached, for all trees at once (trees whose
    next nodes are cached descend first, so trees of different heights share a round trip). Each node
    routes its run of sorted probes with two bisections per child (``Manifest.runs``). ``leaves=False``
    stops above the entry sets (estimates)."""
    paths: list[list[Any]] = []  # [part, tree, height, runs (node id, lo, hi) over probes, sorted probes]
    for part, tree, probes in items:
        if tree.root is not None and probes and (leaves or tree.height > 0):
            paths.append([part, tree, tree.height, [(tree.root, 0, len(probes))], sorted(probes)])
    while paths:
        step = [p for p in paths if all(g.peek(p[0], run[0], p[2]) is not None for run in p[3])] or paths
        nodes = iter(g.load([(p[0], run[0], p[2], p[1].keyfn) for p in step for run in p[3]]))
        for path in step:
            _, _, height, runs, probes = path
            following: list[tuple[str, int, int]] = []
            for _, lo, hi in runs:
                node = next(nodes)
                if height:
                    following.extend((node.ids[i], a, b) for i, a, b in node.runs(probes, lo, hi))
            path[2], path[3] = height - 1, following
        paths = [p for p in paths if p[2] >= (0 if leaves else 1)]


# -- pages -------------------------------------------------------------------------------


def page(g: Gather, start: int, stop: int) -> list[Any]:
    """The keys at global positions ``start`` to ``stop - 1`` (within the set): an exact selection across
    shards, from cached entry sets when it can (:func:`_guess_page`); else the manifests narrow every
    shard to the entry sets that can hold the page, read in one round trip, and the guess is tried again
    over them before the slower exact selection (:func:`_select_page`)."""
    merged = g.merged()
    if merged is not None:
        return merged[start:stop]
    try:
        found = _guess_page(g, start, stop)
        uncached = False
    except _Uncached:
        found, uncached = None, True
    if found is not None:
        return found
    reaches, runs = _candidates(g, start, stop)
    if uncached:
        with contextlib.suppress(_Uncached):
            found = _guess_page(g, start, stop)
    return _select_page(reaches, runs, start, stop) if found is None else found


def _sort_keys(keys: list[Any]) -> list[Any]:
    """Score tree keys ``(score, member)`` sorted: by member, then stably by score. Each pass compares one
    kind of value, which CPython's sort does without the generic tuple comparison: about 2.5x faster on a
    page's windows, whose keys share few scores (tuples of equal scores compare members through it)."""
    keys.sort(key=_MEMBER)
    keys.sort(key=_SCORE)
    return keys


def _median(keys: list[Any]) -> Any:
    keys.sort()
    return keys[len(keys) // 2]


def _spread(mean: float, sigmas: int = 3) -> int:
    """A shard's share of ``mean`` keys with a margin: members fall in shards as by a fair die, so a shard's
    count over a stretch of the global order is binomial; ``sigmas`` standard deviations and two more (a
    window that stops short widens, or is topped up)."""
    return int(mean + sigmas * isqrt(int(mean) + 1)) + 2


#: How many guesses of the page's position, and widenings of the windows, before the manifests take over.
_GUESSES = 4
#: Standard deviations of a window's margin past the page (the windows are topped up where they stop short).
_AHEAD = 1


def _guess_page(g: Gather, start: int, stop: int) -> list[Any] | None:
    """The page from cached nodes, or ``None`` when the guesses do not settle (raises :class:`_Uncached`
    when a node is not cached). Each shard is seen through its :class:`Layout`: merged positions and keys.

    1. Pivot: the median of each shard's key at its proportional position. Its exact global count says
       how far the page is; while it is far, the median of each shard's key that far on (by its share)
       is the next pivot.
    2. Windows: each shard's merged keys in a run of positions around its pivot position, its binomial
       share of the page plus the distance to it (three standard deviations before the pivot, one
       past it), as ``[f, e)`` key ranges (``None``: unbounded) with the exact count below ``f`` (the
       run's first position).
    3. All windows sorted together: the page is the run at ``start`` minus the counts below the windows,
       once the windows that stop short of its last key are topped up to it (:func:`_top_up`). It is
       exact when its first key is at least every window's ``f`` (then each shard's count at its first
       key is exact, and every key between its first and last is in a window); else the windows widen.
    """
    shards = [
        (part, part.layout if part.layout is not None and part.layout.complete else layout(g, part))
        for part in g.parts
        if part.count
    ]
    total = sum(part.count for part, _ in shards)
    length = stop - start
    pivot = _median([lay.key_at(g, part, start * part.count // total) for part, lay in shards])
    far = max(8 * len(shards), length)
    for guess in range(_GUESSES + 1):
        at = [lay.below(g, part, pivot) for part, lay in shards]
        off = start - sum(at)  # the page begins ``off`` entries after the pivot
        if abs(off) <= far or guess == _GUESSES:
            break
        pivot = _median(
            [
                lay.key_at(g, part, min(max(a + off * part.count // total, 0), part.count - 1))
                for (part, lay), a in zip(shards, at)
            ]
        )
    share = max(part.count for part, _ in shards) / total  # the largest shard's: shards are about even
    back = [0 if off >= 0 else _spread(-off * share)] * len(shards)
    ahead = [_spread(max(off + length, 0) * share, _AHEAD)] * len(shards)
    windows: list[Any] = [None] * len(shards)
    for _ in range(_GUESSES):
        low, base = None, 0
        for n, ((part, lay), a) in enumerate(zip(shards, at)):
            lo, hi = max(a - back[n], 0), min(a + ahead[n], part.count)
            if windows[n] is None:
                keys, e = lay.run(g, part, lo, hi)
                f = None if lo == 0 else (pivot if lo == a else keys[0])
                windows[n] = keys, f, e, hi
            f = windows[n][1]
            base += lo
            if f is not None and (low is None or f > low):
                low = f
        merged = _sort_keys([key for keys, _, _, _ in windows for key in keys])
        k = start - base
        found = _top_up(g, shards, windows, merged, k + length)[k:] if k >= 0 and k + length <= len(merged) else []
        if found and (low is None or found[0] >= low):
            return found
        for n, (_, f, e, _) in enumerate(windows):  # widen the windows that stopped short of the page
            if f is not None and (k < 0 or (found and f > found[0])):
                back[n], windows[n] = 2 * back[n] + 8, None
            if e is not None and not found:
                ahead[n], windows[n] = 2 * ahead[n] + 8, None
    return None


def _top_up(g: Gather, shards: list[tuple[Part, Layout]], windows: list[Any], merged: list[Any], end: int) -> list[Any]:
    """The first ``end`` keys of the windows' union once every window reaches ``merged[end - 1]``: a window
    that stops short of that key (its next key ``e`` is below it) takes the shard's keys up to it, so that
    every shard's keys from its window's start to that key are there. Windows sized by a shard's mean
    share of the page and one standard deviation: most need nothing, a few take a few keys."""
    last = merged[end - 1]
    extra: list[Any] = []
    for (part, lay), (_, _, e, hi) in zip(shards, windows):
        if e is not None and e < last:
            extra += lay.window(g, part, hi, lay.below(g, part, last))
    if not extra:
        return merged[:end]
    merged = merged[:end] + extra
    merged.sort()  # a long sorted run and a few keys: the generic tuple sort merges them in about one pass
    return merged[:end]


def _candidates(g: Gather, start: int, stop: int) -> tuple[list[_Reach], list[range]]:
    """Each shard narrowed, by the manifests' counts and first keys, to the entry sets that can hold global
    positions ``start`` to ``stop - 1``: all shards' candidates of a level read in one ``get_many``
    (with the manifests cached, one round trip for the candidate entry sets)."""
    reaches = [_Reach(part, g.score_tree(part)) for part in g.parts]
    while True:
        sweep = _Sweep(reaches)
        runs = [sweep.candidates(reach, start, stop - 1) for reach in reaches]
        wanted = [(reach, j) for reach, run in zip(reaches, runs) for j in run if reach.pending(j)]
        if not wanted:
            break
        _fetch_and_expand(g, wanted, functools.partial(_Sweep.keep, sweep, first=start, last=stop - 1))
    for reach, run in zip(reaches, runs):
        if not run or any(reach.leaves[j] is None for j in run):
            raise AssertionError(f"shard intervals {run} cannot hold positions {start}..{stop}")
    return reaches, runs


def _select_page(reaches: list[_Reach], runs: list[range], start: int, stop: int) -> list[Any]:
    """The page from every shard's candidate entry sets: a key range that holds it and few others
    (:func:`_narrow`), then an exact selection over the shards' keys in that range."""
    low, high = _narrow(reaches, runs, start, stop)
    lists, base = [], 0
    for reach, run in zip(reaches, runs):
        keys: list[Any] = []
        for j in run:
            leaf_keys = reach.leaves[j].keys
            a = 0 if low is None else bisect_left(leaf_keys, low)
            b = len(leaf_keys) if high is None else bisect_left(leaf_keys, high)
            keys.extend(leaf_keys[a:b])
        part = reach.part
        if part.view is not None:
            added, removed = part.between(low if low is not None else reach.firsts[run[0]], high)  # [low, high)
            if removed:
                gone = set(removed)
                keys = [k for k in keys if k not in gone]
            if added:
                keys = sorted(keys + added)
        lists.append(keys)
        base += reach.bounds(low)[0]
    splits = select(lists, start - base)
    return sorted([key for keys, c in zip(lists, splits) for key in keys[c : c + stop - start]])[: stop - start]


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

    __slots__ = ("part", "tree", "total", "firsts", "starts", "ids", "heights", "leaves", "_below")

    def __init__(self, part: Part, tree: Tree) -> None:
        self.part, self.tree, self.total = part, tree, part.count
        self.firsts: list[Any] = [None]
        self.starts = [0]
        self.ids: list[str | None] = [tree.root]
        self.heights = [tree.height]
        self.leaves: list[Any] = [_EMPTY_LEAF if tree.root is None else None]
        self._below: list[int | None] = [0]

    def shift(self, key: Any) -> int:
        return self.part.shift(key)

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


def _fetch_and_expand(g: Gather, wanted: list[tuple[_Reach, int]], keep: Callable[[_Reach, int], Any]) -> None:
    """Expand the intervals ``wanted``: those whose node is cached first, without a round trip (shards of
    different heights descend their cached manifests before anything is read); when none is, read all of
    their nodes in one ``get_many``. Expands the last first, so that indices hold."""
    cached = [(r, j) for r, j in wanted if g.peek(r.part, r.ids[j], r.heights[j]) is not None]  # type: ignore[arg-type]
    if cached:
        wanted = cached
    nodes = g.load([(r.part, r.ids[j], r.heights[j], g.keyfn) for r, j in wanted])  # type: ignore[misc]
    for (reach, j), node in sorted(zip(wanted, nodes), key=lambda item: -item[0][1]):
        reach.expand(j, node, keep(reach, j))


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
