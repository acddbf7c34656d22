"""Reads across the shards of a sharded set: one snapshot of every head, exact counts, exact pages.

All ``S`` heads in one ``get_many``, each shard a :class:`Part` kept per head value; every later step batches all
shards' fetches into one ``get_many``, and a read's nodes stay pinned for it (:class:`Gather`). A count below a key sums
each shard's exact count: two bisections in its :class:`Layout`, else descents from cached nodes. See
docs/architecture.md ("Sharded sets").
"""

from __future__ import annotations

import contextlib
import weakref
from bisect import bisect_left, bisect_right
from collections.abc import Iterable
from operator import itemgetter
from typing import Any

from ._cache import NodeCache
from ._head import Head
from ._order import member_key, same_keys
from ._overlay import View
from ._ranking import Index
from ._snapshot import Snapshot
from ._tree import Leaf, Source, Tree, assemble, misplaced, other_tree, parts
from .stores.base import Store

EMPTY_LEAF = Leaf((), (), ())
_MEMBER, _SCORE = itemgetter(1), itemgetter(0)


class Part:
    """One shard as reads see it at one head value: the head, the log's view (``None``: empty log), the merged count
    and the score tree's root; kept while the head's bytes stay the same, with what reads learn of it."""

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
        """Count one more read; after ``1 + entries // 256`` reads (copying costs about a few hundred view calls), keep
        the log's keys as two sorted lists, whose bisections are cheaper than calls into the shared overlay."""
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
        """The log's added and removed keys from ``low`` (inclusive) to ``high`` (exclusive); ``None``: unbounded."""
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
    """A shard's score tree at one head as *regions*, from its cached manifests: region ``j`` is the key range of its
    ``j``-th entry set (from ``firsts[j]``, ``None`` for the start), log included, after :meth:`start` merged entries.
    Merged keys are made once per region (:meth:`region`): a position or a count is then two bisections."""

    __slots__ = ("firsts", "ids", "trees", "starts", "complete", "alone", "refs")

    def __init__(self, firsts: list[Any], ids: list[Any], trees: list[int], count: int) -> None:
        self.firsts, self.ids, self.trees = firsts, ids, trees
        self.starts: list[Any] = [0] + [None] * (len(ids) - 1) + [count]
        self.complete = len(ids) == 1
        self.alone: Any = None  # an empty tree's keys: the log's
        # Weak references to the regions' merged entry sets: found without the cache's lock, still bounded by it.
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
        """Region ``j``'s merged keys, sorted (:class:`Uncached` if its entry set is not): kept with the entry set as
        ``(added, removed, keys, layout)``, valid for another layout while the region's log keys are the same."""
        ref = self.refs[j]
        if ref is not None:
            leaf = ref()
            if leaf is not None:
                kept = leaf.gathered  # None while another thread, which set the reference, has not merged it yet
                if kept is not None and kept[3] is self:
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
                raise Uncached
            if leaf.height or other_tree(leaf, g.keyfn):  # a damaged manifest's child, cached for another place
                raise misplaced(part.engine.keys.node(leaf_id), leaf, 0)
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
            keys = _keys_with_log(leaf.keys, added, removed)
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
        """The shard's keys at merged positions ``lo`` to ``hi - 1``, and its key at ``hi`` (``None`` past the end)."""
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


def _keys_with_log(keys: Any, added: list[Any], removed: list[Any]) -> tuple[Any, ...]:
    """An entry set's keys without ``removed``, with ``added``, sorted (a tuple: the collector stops tracking it)."""
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
    """The part's :class:`Layout`, made once from its cached manifests (:class:`Uncached` when one is not)."""
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
                raise Uncached
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
    """One read of a sharded set: every shard's :class:`Part` and the nodes it has seen, pinned by id (unique)."""

    __slots__ = ("parts", "pins", "cache", "store", "keyfn", "touched", "count", "keeper", "_all_keys")

    def __init__(self, parts: list[Part], store: Store, cache: NodeCache, keyfn: Any) -> None:
        self.parts, self.store, self.cache, self.keyfn = parts, store, cache, keyfn
        self.pins: dict[str, Any] = {}
        self.touched: set[str] = set()  # entry sets found through a layout's references (Layout.refs)
        self.count = sum(part.count for part in parts)  # the set's entries in this snapshot
        self.keeper: Any = None  # the set's mdss._allkeys.AllKeys, when this read may use its keys
        self._all_keys: Any = None

    def all_keys(self) -> Any:
        """Every shard's keys in one ``SortedList`` if this process keeps them (``mdss._allkeys``), else ``None``."""
        keeper = self.keeper
        if keeper is not None:
            self.keeper = None
            self._all_keys = keeper.of(self)
        return self._all_keys

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
        """A node this read has pinned or the cache holds (pinned now), else ``None``; the root stays with the part."""
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
            raise misplaced(part.engine.keys.node(node_id), node, height)
        return node

    def fetch(self, wanted: Iterable[tuple[Part, str, int, Any]]) -> None:
        """Read the nodes ``(part, node id, height, keyfn)`` not pinned or cached in one ``get_many``; pin them."""
        missing: dict[str, tuple[Part, str, int, Any]] = {}
        for item in wanted:
            part, node_id, height, keyfn = item
            node = self.peek(part, node_id, height)
            if node is None:
                missing.setdefault(part.engine.keys.node(node_id), item)
            elif other_tree(node, keyfn):  # cached for the other tree: named there by a damaged manifest
                raise misplaced(part.engine.keys.node(node_id), node, height)
        if not missing:
            return
        keys = [[part.engine.keys.node(p) for p in parts(node_id)] for part, node_id, _, _ in missing.values()]
        datas = iter(self.store.get_many([key for some in keys for key in some]))
        for stored, (_, node_id, height, keyfn) in zip(keys, missing.values()):
            node, weight = assemble(node_id, stored, [next(datas) for _ in stored], keyfn)
            if node.height != height:
                raise misplaced(stored[0], node, height)
            self.cache.put(node_id, node, weight)
            if not height:
                self.cache.seen(len(node), weight)
            self.pins[node_id] = node

    def load(self, wanted: list[tuple[Part, str, int, Any]]) -> list[Any]:
        """The nodes ``(part, node id, height, keyfn)``, in order: pinned, cached, or all read in one ``get_many``."""
        self.fetch(wanted)
        found = [self.peek(part, node_id, height) for part, node_id, height, _ in wanted]
        for node, (part, node_id, _, keyfn) in zip(found, wanted):
            if other_tree(node, keyfn):  # cached for the other tree: named there by a damaged manifest
                raise misplaced(part.engine.keys.node(node_id), node, node.height)
        return found


class Uncached(Exception):
    """A node the guessing page selection needs is not cached: it gives way to the manifests' selection."""


# -- counts ------------------------------------------------------------------------------


def counts(g: Gather, probes: list[Any]) -> list[int]:
    """For each probe key, the set's entries below it: cached nodes first, then one ``get_many`` per level missing."""
    merged = g.all_keys()
    if merged is not None:
        return [merged.bisect_left(probe) for probe in probes]
    totals = [0] * len(probes)
    todo = []
    touched = g.touched
    for part in g.parts:
        lay = part.layout
        if lay is None and part.reads and part.count:  # a head read before: worth its layout
            with contextlib.suppress(Uncached):
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
                except Uncached:
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
    """Pin, across shards, the nodes on the paths to each tree's probe keys: one ``get_many`` per level not cached, for
    all trees at once (those whose next nodes are cached descend first, so trees of different heights share a round
    trip). ``leaves=False`` stops above the entry sets (estimates)."""
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
