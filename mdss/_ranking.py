"""Reads with the update log applied: the member index (:class:`Index`) and the score tree (:class:`Ranking`) as if the
log were merged, and dense ranks over the log (see ``mdss._overlay``)."""

from __future__ import annotations

import functools
import heapq
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Sequence
from typing import Any

from ._order import TOP, Order
from ._overlay import MISSING, Chain, Groups, Overlay, View
from ._tree import Tree
from .exceptions import CorruptDataError


class Index:
    """The member index with the log applied: member -> score.

    A member the log does not name is looked up in the tree's cached nodes, then in the trees this process held before
    the last merges (``chain``, :meth:`mdss._overlay.Overlays.earlier`), whose entry sets are cached: another process's
    merge then costs no reads of the new member index while the cache holds the old one.
    """

    __slots__ = ("tree", "view", "chain", "find_chain")

    def __init__(self, tree: Tree, view: View, find_chain: Callable[[], Chain] | None = None) -> None:
        self.tree, self.view = tree, view
        # The earlier trees, found on the first member the log does not name (most reads look up none).
        self.chain: Chain | None = None if find_chain is not None else ()
        self.find_chain = find_chain

    def get(self, member: str) -> Any:
        """:meth:`find` of one member, without the lists (a rank's or a score's hot path)."""
        score = self.view.get(member)
        if score is MISSING and self.chain != ():
            score = _cached(self.tree.source.cache, self.tree.root, member, self.tree.height)
            if score is MISSING:
                score = self._earlier(member)
        return self.tree.get(member) if score is MISSING else score

    def find(self, members: Sequence[str]) -> list[Any]:
        found = self.view.lookup(members)
        if MISSING in found and self.chain != ():
            # The tree itself where its nodes are cached (a warm process: no earlier tree to search), else earlier.
            cache, root = self.tree.source.cache, self.tree.root
            height = self.tree.height
            found = [_cached(cache, root, m, height) if score is MISSING else score for m, score in zip(members, found)]
            found = [self._earlier(m) if score is MISSING else score for m, score in zip(members, found)]
        rest = [m for m, score in zip(members, found) if score is MISSING]
        if rest:
            scores = iter(self.tree.find(rest) if len(rest) > 1 else (self.tree.get(rest[0]),))
            found = [next(scores) if score is MISSING else score for score in found]
        return found

    def _earlier(self, member: str) -> Any:
        """``member``'s score from an earlier overlay and its cached tree, or ``MISSING``."""
        if self.chain is None:
            assert self.find_chain is not None
            self.chain = self.find_chain()
        cache = self.tree.source.cache
        for overlay, cut in self.chain:
            with overlay.lock:
                hist = overlay.hist.get(member)
                if hist is not None:
                    i = bisect_left(hist, cut)
                    return overlay.entries[hist[i - 1] - overlay.base][2] if i else overlay.tree[member]
            score = _cached(cache, overlay.state[2], member)
            if score is not MISSING:
                return score
        return MISSING


def _cached(cache: Any, root: Any, member: str, height: int | None = None) -> Any:
    """``member``'s score in the member index ``root`` (of ``height``, if known) from cached nodes alone (``None``: not
    there), or ``MISSING`` when a node on its path is not cached, or not where it belongs (a damaged store: the
    tree's own descent, which checks each node, says so)."""
    if root is None:
        return None
    node = cache.get(root)
    if node is not None and height is not None and node.height != height:
        return MISSING
    while node is not None and node.height:
        firsts = node.firsts
        if firsts and type(firsts[0]) is not str:  # the score tree's: keys are tuples there
            return MISSING
        child = cache.get(node.ids[node.child(member)])
        if child is not None and child.height != node.height - 1:
            return MISSING
        node = child
    if node is None:
        return MISSING
    keys = node.keys
    if keys and type(keys[0]) is not str:
        return MISSING
    i = bisect_left(keys, member)
    return node.value_at(i) if i < len(keys) and keys[i] == member else None


class Ranking:
    """The score tree with the log applied: counts below keys, and slices by position."""

    __slots__ = ("tree", "view", "_count", "order")

    def __init__(self, tree: Tree, view: View, order: Order) -> None:
        self.tree, self.view, self.order = tree, view, order
        self._count: int | None = None

    @property
    def count(self) -> int:
        """The entries with the log applied (on first use: a commit that only appends never asks)."""
        if self._count is None:
            self._count = self.tree.count + self.view.size()
        return self._count

    def rank_of(self, probe: Any) -> int:
        return self.tree.rank_of(probe) + self.view.shift(probe)

    def count_below(self, probes: Sequence[Any]) -> list[int]:
        return [n + self.view.shift(p) for n, p in zip(self.tree.count_below(probes), probes)]

    def _seek(self, start: int) -> tuple[list[tuple[Any, int]], int, Any, Any]:
        """The entry set where merged position ``start`` falls: ``(path, merged position of its region, the region's
        first key, the next region's first key)``.

        A region is the key range of one entry set, from its first key (``None`` for the leftmost) to the next entry
        set's; the log's keys in it belong to it. ``path`` holds the manifests descended and the child taken in each,
        for :meth:`_next`. A child's merged start is its tree start plus the log's shift below its first key.
        """
        tree, shift = self.tree, self.view.first_shift
        node_id: Any = tree.root
        before, merged, low, high = 0, 0, None, None
        load, keyfn = tree.source.load_one, tree.keyfn
        path: list[tuple[Any, int]] = []
        for height in range(tree.height, 0, -1):
            node = load(node_id, keyfn, height)
            region = merged - before  # the shift at the node's first key
            lo, at = _child(node, start - before, region, shift)
            if lo or low is not None:
                low = node.firsts[lo]
            if lo + 1 < len(node):
                high = node.firsts[lo + 1]
            merged = before + at
            before, node_id = before + node.starts[lo], node.ids[lo]
            path.append((node, lo))
        return path, merged, low, high

    def _next(self, path: list[tuple[Any, int]]) -> Any:
        """Step ``path`` to the next entry set in key order; the next region's first key after it (``None`` for the
        rightmost)."""
        level = len(path) - 1
        while path[level][1] + 1 == len(path[level][0]):
            level -= 1
        node, lo = path[level][0], path[level][1] + 1
        path[level] = (node, lo)
        load, keyfn, height = self.tree.source.load_one, self.tree.keyfn, len(path) - level
        for depth in range(level + 1, len(path)):
            height -= 1
            node = load(node.ids[lo], keyfn, height)
            lo = 0
            path[depth] = (node, 0)
        for node, lo in reversed(path):
            if lo + 1 < len(node):
                return node.firsts[lo + 1]
        return None

    def slice(self, start: int, stop: int) -> tuple[list[str], list[Any]]:
        """Members and scores at merged positions ``start`` to ``stop - 1``, in key order.

        Region by region (:meth:`_seek`): each region the page spans is merged once and kept with its decoded entry set
        while its logged keys stay the same (:meth:`View.keep`). The entry sets not cached are read in one round trip.
        """
        start, stop = max(start, 0), min(stop, self.count)
        if start >= stop:
            return [], []
        tree, view, order = self.tree, self.view, self.order
        if tree.root is None:  # every entry is in the log
            keys = view.between(None, None, closed=False)[0][start:stop]
            score_of = order.score_of
            return order.members_of(keys), [score_of(k) for k in keys]
        regions, want, need = self._regions(start, stop)
        wanted = [leaf_id for leaf_id, leaf, _, _ in regions if leaf is None]
        loaded = tree.source.load_many(wanted, tree.keyfn, 0) if wanted else {}  # one round trip at most
        out_members: list[str] = []
        out_scores: list[Any] = []
        for leaf_id, leaf, known, logged in regions:
            if known is None:
                leaf = leaf or loaded[leaf_id]
                known = _with_log(leaf, logged[0], logged[1], order)
                view.keep(leaf, logged, known)
            members, scores = known
            out_members += members[want : want + need]
            out_scores += scores[want : want + need]
            need, want = need - max(min(len(members) - want, need), 0), 0
        return out_members, out_scores

    def _regions(self, start: int, stop: int) -> tuple[list[Any], int, int]:
        """The regions merged positions ``start`` to ``stop - 1`` span (``start < stop``, within the count, a tree with
        a root): ``(entry set id, the entry set if cached, its merged entries if known, the log's keys)`` each, from
        the manifests alone; where ``start`` falls in the first, and the entries wanted."""
        tree, view = self.tree, self.view
        assert tree.root is not None  # callers answer an empty tree themselves
        path, merged, low, high = self._seek(start)
        want, need = start - merged, stop - start  # where the page starts in the first region; entries wanted
        regions = []
        covered, peek = -want, functools.partial(tree.source.peek, keyfn=tree.keyfn)
        while True:  # the regions the page spans: their sizes are known before their entry sets are read
            node, lo = path[-1] if path else (None, 0)
            leaf_id, count = (tree.root, tree.count) if node is None else (node.ids[lo], node.counts[lo])
            leaf = peek(leaf_id)
            known, logged = view.region(leaf, low, high)
            regions.append((leaf_id, leaf, known, logged))
            covered += count - len(logged[1]) + len(logged[0]) if known is None else len(known[0])
            if covered >= need or high is None:
                break
            low, high = high, self._next(path)
        return regions, want, need

    def stored_member_at(self, position: int) -> str:
        """The score tree's member at merged ``position`` (within the count) as it is stored (a ``"first"`` set's
        spells its number among its ties): from the region's entry set, cached by a slice that reached it."""
        tree, view = self.tree, self.view
        if tree.root is None:
            return str(view.between(None, None, closed=False)[0][position][1])
        path, merged, low, high = self._seek(position)
        node, lo = path[-1] if path else (None, 0)
        leaf_id = tree.root if node is None else node.ids[lo]
        leaf = tree.source.load_many([leaf_id], tree.keyfn, 0)[leaf_id]
        added, removed = view.between(low, high, closed=False)
        dropped = set(removed)
        return str(list(heapq.merge([k for k in leaf.keys if k not in dropped], added))[position - merged][1])

    def first_at(self, start: int) -> Any:
        """The first key of the region where merged position ``start`` falls (within the count), from the manifests
        alone; ``None`` for the leftmost region or an empty tree."""
        return None if self.tree.root is None else self._seek(start)[2]

    def leaf_ids(self, start: int, stop: int) -> list[str]:
        """The ids of the entry sets whose regions hold merged positions ``start`` to ``stop - 1``, reading manifests
        only (what :meth:`slice` would read, for a read to fetch with others in one round trip)."""
        start, stop = max(start, 0), min(stop, self.count)
        if start >= stop or self.tree.root is None:
            return []
        return [leaf_id for leaf_id, _, _, _ in self._regions(start, stop)[0]]


def _with_log(leaf: Any, added: Sequence[Any], removed: Sequence[Any], order: Order) -> tuple[Any, Any]:
    """The members and scores of an entry set's region with the log applied: its entries without ``removed`` (keys of
    it), with ``added`` (the log's keys in the region), all sorted. Tuples: they are kept with the entry set, and
    CPython's collector stops tracking tuples of strings and numbers (lists would make every full collection walk them).
    """
    if len(added) > 64:  # many logged keys (new scores often land together): one merge of the key lists
        keys, dropped = leaf.keys, set(removed)
        kept = [k for k in keys if k not in dropped] if dropped else keys
        if len(kept) != len(keys) - len(dropped):
            raise CorruptDataError("an entry set does not hold the entries the update log says it replaced")
        merged = list(heapq.merge(kept, added))
        score_of = order.score_of
        return tuple(order.members_of(merged)), tuple([score_of(k) for k in merged])
    members, scores = list(order.plain(leaf.members, leaf.scores)), list(leaf.scores)
    gone = [leaf.position(key) for key in removed]  # positions found without spelling out every key (Leaf.position)
    if gone and (gone[-1] >= len(scores) or len(set(gone)) < len(gone)):
        raise CorruptDataError("an entry set does not hold the entries the update log says it replaced")
    for i in reversed(gone):
        del members[i], scores[i]
    member_of, score_of = order.member_of, order.score_of
    for j, key in enumerate(added):  # each at its tree position, less the removed before it, plus the added
        i = leaf.position(key)
        i += j - bisect_left(gone, i)
        members.insert(i, member_of(key))
        scores.insert(i, score_of(key))
    return tuple(members), tuple(scores)


def _child(node: Any, target: int, region: int, shift: Any) -> tuple[int, int]:
    """The last child of manifest ``node`` whose merged start (relative to the node's tree start) is at most ``target``,
    and that start; ``region`` is the log's shift at the node's first key. The guess from ``region`` is almost always
    right: about two probes of ``shift``, galloping and then bisecting where the log is lopsided."""
    firsts, starts, last = node.firsts, node.starts, len(node) - 1

    seen = {0: region}

    def at(i: int) -> int:
        if i not in seen:
            seen[i] = starts[i] + shift(firsts[i])
        return seen[i]

    lo = hi = min(max(bisect_right(starts, target - region) - 1, 0), last)
    step = 1
    if at(lo) > target:  # gallop down to a child starting at or before ``target``
        while True:
            hi, lo = lo - 1, max(lo - step, 0)
            if at(lo) <= target:
                break
            step *= 2
    else:  # gallop up past the children that do
        while hi < last:
            probe = min(hi + step, last)
            if at(probe) > target:
                hi = probe - 1
                break
            lo = hi = probe
            step *= 2
    while lo < hi:  # at(lo) <= target, and every child after hi starts past it
        mid = (lo + hi + 1) // 2
        if at(mid) <= target:
            lo = mid
        else:
            hi = mid - 1
    return lo, at(lo)


def _groups(overlay: Overlay) -> Groups:
    """The overlay's tie groups, made on first use."""
    with overlay.lock:
        if overlay.groups is None:
            overlay.groups = Groups(overlay)
        return overlay.groups


def dense_keys(ranking: Tree | Ranking) -> list[Any]:
    """The tree keys whose entry sets :func:`dense_below` reads besides its probes': both ends of each score logged
    since this overlay state's last dense read (none over a tree), for a read to fetch them with others."""
    if isinstance(ranking, Tree):
        return []
    return [key for s in _groups(ranking.view.overlay).unresolved() for key in ((s,), (s, TOP))]


def dense_below(ranking: Tree | Ranking, probes: Sequence[Any]) -> list[int]:
    """For each probe, the first key of a score: the distinct scores strictly below it, the log applied (the dense rank
    of that score, less one).

    The tree's distinct scores below the probe (:meth:`Tree.below`) plus the tie groups the log makes, less those it
    empties (:class:`Groups`). The scores logged since this overlay state's last dense read are resolved in the same
    batched descent as the probes (two probes each), so the round trips are those of a count.
    """
    if isinstance(ranking, Tree):
        return [distinct for _, distinct in ranking.below(probes)]
    view = ranking.view
    groups = _groups(view.overlay)
    pending = groups.unresolved()
    edges = [key for s in pending for key in ((s,), (s, TOP))]
    found = ranking.tree.below([*probes, *edges])
    n = len(probes)
    if pending:
        groups.resolve({s: found[n + 2 * i + 1][0] - found[n + 2 * i][0] for i, s in enumerate(pending)})
    shifts = groups.shift(view.end, [probe[0] for probe in probes])
    return [found[i][1] + shift for i, shift in enumerate(shifts)]
