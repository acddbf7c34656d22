"""Rank estimates with guaranteed bounds, from the manifests alone.

A manifest knows, for each entry set under it, how many entries precede it (``starts``), how many it holds (``counts``)
and its first key (``firsts``); the manifest above names the first key of whatever follows. Descending manifests to the
entry set a probe falls in therefore bounds the keys below the probe without reading that entry set:

- every entry before the set is below the probe, and none after it is (the probe is below the next set's first
  key, or the routing would have gone there), so the count lies in ``before .. before + count``;
- the set's first key is below a probe greater than it: ``before + 1``; a probe equal to it, or below it (only in
  the first set), has exactly ``before`` keys below it.

The width is at most ``count - 1 < chunk_size``. The point estimate, kept within the bounds, interpolates linearly on
the sort score between the set's first key and the next set's, as the Datastore article's buckets do, with integer
scores as unit slots; in the last entry set, which has no next key, at the density of the set before it.

:func:`estimate_in_tree`, a pure function of one tree and one probe, counts keys strictly below the probe, so that a
caller who knows an exact shift (entries not yet in the tree) adds it to all three numbers.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from typing import TYPE_CHECKING, Any, NamedTuple

from ._tree import Tree

if TYPE_CHECKING:
    from ._snapshot import Snapshot


class Estimate(NamedTuple):
    """An estimated 1-based ``rank`` and bounds that hold: ``low <= exact rank <= high``."""

    rank: int
    low: int
    high: int


class Percentile(NamedTuple):
    """An estimated share of members ranked strictly better (0.0 for the best), and bounds that hold."""

    value: float
    low: float
    high: float


#: Keys strictly below a probe: (estimate, least possible, most possible).
Below = tuple[int, int, int]


def estimate_in_tree(tree: Tree, probe: Any) -> Below:
    """How many keys of the score tree ``tree`` are strictly below ``probe``: an estimate and sure bounds.

    Reads manifests only (cached, they cost no round trip). A tree of one entry set has no manifest: its root is read
    and the answer is exact (one node, as a manifest would have cost). An empty tree reads nothing.

    >>> from mdss._tree import Manifest
    >>> class Cached:  # a source holding one manifest over entry sets of 3, 2 and 4 entries
    ...     root = Manifest(1, ("a", "b", "c"), (3, 2, 4), ("x", "y", "z"), (10, 20, 30),
    ...                     ((10, "x"), (20, "y"), (30, "z")))
    ...     def load_one(self, node_id, keyfn, height):
    ...         return self.root
    >>> tree = Tree(Cached(), None, "root", 1, 9)
    >>> estimate_in_tree(tree, (20, "y")), estimate_in_tree(tree, (25,)), estimate_in_tree(tree, (5,))
    ((3, 3, 3), (4, 4, 5), (0, 0, 0))
    """
    node_id, before, load, keyfn = tree.root, 0, tree.source.load_one, tree.keyfn
    if node_id is None:
        return 0, 0, 0
    if tree.height == 0:
        leaf = load(node_id, keyfn, 0)
        exact = bisect_left(leaf.keys, probe)
        return exact, exact, exact
    following = None  # the first key after the current subtree, if any
    for height in range(tree.height, 1, -1):
        node = load(node_id, keyfn, height)
        i = node.child(probe)
        if i + 1 < len(node.firsts):
            following = node.firsts[i + 1]
        before += node.starts[i]
        node_id = node.ids[i]
    node = load(node_id, keyfn, 1)  # the manifest of entry sets: the last one this reads
    i = node.child(probe)
    before += node.starts[i]
    first, count = node.firsts[i], node.counts[i]
    if i + 1 < len(node.firsts):
        following = node.firsts[i + 1]
    if probe <= first:
        return before, before, before
    low, high = before + 1, before + count
    inside = _interpolate(probe[0], first[0], None if following is None else following[0], count)
    if inside is None and i > 0:  # the last entry set: extrapolate the density of the one before it
        previous = node.firsts[i - 1][0]
        span = _span(previous, first[0])
        if span:
            inside = _span(first[0], probe[0]) / span * node.counts[i - 1]
    if inside is None:
        return (low + high) // 2, low, high
    rank = before + round(min(max(inside, 0.0), float(count)))  # clamped first: a tiny span can overflow to inf
    return min(max(rank, low), high), low, high


def _span(a: Any, b: Any) -> float:
    """``b - a`` as a finite float, or 0.0 when it is not finite (infinite scores) or not a number (a record window's
    ties, which interpolate nothing: the estimate is then the middle of its bounds)."""
    if type(a) not in (int, float) or type(b) not in (int, float):
        return 0.0
    span = float(b) - float(a)
    return span if math.isfinite(span) else 0.0


def _interpolate(s: Any, start: Any, end: Any, count: int) -> float | None:
    """How many of ``count`` entries spread evenly over sort scores ``start .. end`` lie below ``s``. Integer scores are
    slots of width one, ``end``'s included: an entry set often ends with ties of the next set's first score (points),
    which linear interpolation alone would count all below a probe of that score."""
    if end is None:
        return None
    if type(start) is int and type(end) is int and type(s) is int:
        end += 1
    span = _span(start, end)
    if span <= 0:
        return None
    return _span(start, s) / span * count


def bounded(tree: Tree, probe: Any, max_error: int | float | None) -> Below:
    """:func:`estimate_in_tree`, or the exact count (reading one entry set) if its bounds span over ``max_error``."""
    below = estimate_in_tree(tree, probe)
    if max_error is not None and below[2] - below[1] > max_error:
        exact = tree.rank_of(probe)
        return exact, exact, exact
    return below


def as_rank(below: Below, shift: int = 0) -> Estimate:
    """The 1-based rank estimate from keys below the probe, after adding an exactly known ``shift``."""
    rank, low, high = below
    return Estimate(rank + shift + 1, low + shift + 1, high + shift + 1)


def as_percentile(below: Below, total: int) -> Percentile:
    """The share of ``total`` members strictly better, from the keys below a score's first key."""
    if total <= 0:
        return Percentile(0.0, 0.0, 0.0)
    rank, low, high = below
    return Percentile(rank / total, low / total, high / total)


def in_snapshot(snap: Snapshot, probe: Any, max_error: int | float | None) -> Below:
    """Keys below ``probe`` in one snapshot: the score tree's :func:`bounded` estimate, shifted exactly by its log."""
    shift = 0 if snap.view is None else snap.view.shift(probe)
    rank, low, high = bounded(snap.score_tree, probe, max_error)
    return rank + shift, low + shift, high + shift
