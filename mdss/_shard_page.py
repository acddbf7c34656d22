"""Exact pages across the shards of a sharded set: the entries at global offsets ``start`` to ``stop``.

A guess around a pivot key from cached entry sets (:func:`_guess_page`); else the manifests narrow every shard to the
entry sets that can hold the page (:func:`_candidates`), read in one round trip, for the guess or an exact selection.
"""

from __future__ import annotations

import contextlib
import functools
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable
from math import isqrt
from operator import itemgetter
from typing import Any

from ._gather import EMPTY_LEAF, Gather, Layout, Part, Uncached, layout
from ._tree import Tree

_MEMBER, _SCORE = itemgetter(1), itemgetter(0)


def page(g: Gather, start: int, stop: int) -> list[Any]:
    """The keys at global positions ``start`` to ``stop - 1`` (within the set), as the module's docstring says."""
    merged = g.all_keys()
    if merged is not None:
        return merged[start:stop]
    try:
        found = _guess_page(g, start, stop)
        uncached = False
    except Uncached:
        found, uncached = None, True
    if found is not None:
        return found
    reaches, runs = _candidates(g, start, stop)
    if uncached:
        with contextlib.suppress(Uncached):
            found = _guess_page(g, start, stop)
    return _select_page(reaches, runs, start, stop) if found is None else found


def _sort_keys(keys: list[Any]) -> list[Any]:
    """Score tree keys ``(score, member)`` sorted by member, then stably by score: each pass compares one kind of value,
    which CPython does without the generic tuple comparison (about 2.5x faster on a page's windows)."""
    keys.sort(key=_MEMBER)
    keys.sort(key=_SCORE)
    return keys


def _median(keys: list[Any]) -> Any:
    keys.sort()
    return keys[len(keys) // 2]


def _spread(mean: float, sigmas: int = 3) -> int:
    """A shard's share of ``mean`` keys with a margin of ``sigmas`` standard deviations and two more: members fall in
    shards as by a fair die, so a shard's count over a stretch of the global order is binomial."""
    return int(mean + sigmas * isqrt(int(mean) + 1)) + 2


#: How many guesses of the page's position, and widenings of the windows, before the manifests take over.
_GUESSES = 4
#: Standard deviations of a window's margin past the page (the windows are topped up where they stop short).
_AHEAD = 1


def _guess_page(g: Gather, start: int, stop: int) -> list[Any] | None:
    """The page from cached nodes (each shard through its :class:`Layout`), or ``None`` when the guesses do not settle
    (:class:`Uncached` when a node is not cached).

    1. Pivot: the median of each shard's key at its proportional position; while its exact global count is far from the
       page, the median of each shard's key that far on (by its share) is the next pivot.
    2. Windows: each shard's merged keys around its pivot position, its binomial share of the page plus the distance to
       it, as ``[f, e)`` key ranges (``None``: unbounded) with the exact count below ``f``.
    3. All windows sorted together: the page is the run at ``start`` minus the counts below the windows, once topped up
       (:func:`_top_up`); exact when its first key is at least every window's ``f``, else the windows widen.
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
    """The first ``end`` keys of the windows' union once every window reaches ``merged[end - 1]``: a window that stops
    short of that key (its next key ``e`` is below it) takes the shard's keys up to it (most need none)."""
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
    """Each shard narrowed, by the manifests' counts and first keys, to the entry sets that can hold global positions
    ``start`` to ``stop - 1``: all shards' candidates of a level read in one ``get_many``."""
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
    """The page from the candidate entry sets: a key range holding it (:func:`_narrow`), then an exact selection."""
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

    Interval ``j`` spans keys from ``firsts[j]`` (``None``: the start) to ``firsts[j + 1]``, after ``starts[j]`` tree
    entries: a node to read (``ids[j]``, ``heights[j]``), an entry set read (``leaves[j]``), or opaque (``ids[j] is
    None``: children never needed). ``below(j)`` is the exact count of the shard's entries below ``firsts[j]``.
    """

    __slots__ = ("part", "tree", "total", "firsts", "starts", "ids", "heights", "leaves", "_below")

    def __init__(self, part: Part, tree: Tree) -> None:
        self.part, self.tree, self.total = part, tree, part.count
        self.firsts: list[Any] = [None]
        self.starts = [0]
        self.ids: list[str | None] = [tree.root]
        self.heights = [tree.height]
        self.leaves: list[Any] = [EMPTY_LEAF if tree.root is None else None]
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
        """Least and most entries of the shard that can lie below ``key`` (``None``: the start), as read so far."""
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
        """Put interval ``j``'s node in its place: an entry set's keys, or the manifest's children ``keep(boundaries,
        starts)`` selects (runs of the others become opaque intervals)."""
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
    """Expand the intervals ``wanted``, last first so that indices hold: those whose node is cached first; when none
    is, read all of their nodes in one ``get_many``."""
    cached = [(r, j) for r, j in wanted if g.peek(r.part, r.ids[j], r.heights[j]) is not None]  # type: ignore[arg-type]
    if cached:
        wanted = cached
    nodes = g.load([(r.part, r.ids[j], r.heights[j], g.keyfn) for r, j in wanted])  # type: ignore[misc]
    for (reach, j), node in sorted(zip(wanted, nodes), key=lambda item: -item[0][1]):
        reach.expand(j, node, keep(reach, j))


def select(lists: list[list[Any]], k: int) -> list[int]:
    """Split positions ``c`` with ``sum(c) == k`` such that ``lists[i][:c[i]]`` are together the ``k`` smallest items
    of the sorted ``lists`` (distinct across lists): each step halves the widest window, O(S log n) steps.

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
    """Keys ``low`` and ``high`` (``None``: unbounded) with every key of positions ``start`` to ``stop - 1`` in ``[low,
    high)`` and few others: a binary search over every 16th key of the candidate entry sets."""
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
    """Bounds on the global count below any key from every shard's intervals at one moment: their boundaries in key
    order with running sums of the least (``lows``) and most (``highs``) entries below, so that a bound costs one
    bisection however many shards there are. Entry sets read count as intervals: coarser bounds only keep more."""

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
        """The run of intervals of ``reach`` that can hold a global position from ``first`` to ``last``."""
        n = len(reach.firsts)
        a = 0
        while a < n and self.high(reach.firsts[a + 1] if a + 1 < n else None) < first + 1:
            a += 1
        b = a
        while b < n and self.low(reach.firsts[b]) <= last:
            b += 1
        return range(a, b)

    def keep(self, reach: _Reach, j: int, first: int, last: int) -> Callable[[list[Any], list[int]], Iterable[int]]:
        """Which children of interval ``j``'s manifest can hold a position from ``first`` to ``last`` (the other
        shards' bounds from the sweep, this shard's exact counts at the children's first keys)."""
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
