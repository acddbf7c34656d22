"""The counted, copy-on-write B+tree of entry sets and manifests (mdss._nodes), and its reads.

A manifest of manifests is the seed's master manifest; the tree grows a level when the root splits and loses one
when the root is left with a single child. The same structure serves two trees: the *score tree*, keyed by the set
order's sort key ``(s, member)``, and the *member index*, keyed by member. Reads go level by level, batching every
node a level needs into one ``get_many``: a read costs one round trip per uncached level, whatever the number of
keys or positions it asks for.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import islice
from typing import Any

from ._cache import NodeCache
from ._keys import Keyspace
from ._nodes import (  # noqa: F401 - re-exported for the modules that read and write trees
    CHILD_BYTES,
    Leaf,
    Manifest,
    Node,
    Summary,
    assemble,
    fill,
    full,
    group_starts,
    parts,
    weight,
    weights,
)
from ._order import KeyFn, member_key
from .exceptions import CorruptDataError
from .stores.base import Store

#: Children of nodes whose distinct counts are unknown, read per round trip when a dense read computes them.
COMPLETE_BATCH = 256
#: Entry sets a scan (:meth:`Tree.leaves`) reads per round trip: about 1 MB of entry sets of 1000 members.
SCAN_BATCH = 64


class Source:
    """Loads decoded nodes for one operation: pinned ones, then the shared cache, then the store. Pins keep every node
    this operation has seen, so a cache eviction between two steps of one operation never costs another round trip."""

    __slots__ = ("store", "keyspace", "cache", "pins")

    def __init__(self, store: Store, keyspace: Keyspace, cache: NodeCache) -> None:
        self.store, self.keyspace, self.cache = store, keyspace, cache
        self.pins: dict[str, Node] = {}

    def load_many(self, ids: Iterable[str], keyfn: KeyFn, height: int) -> dict[str, Any]:
        """Nodes by id, all expected at ``height`` (0: entry sets; typed ``Any``: the height says which kind). A node of
        another height (a forged cursor, a damaged manifest) raises :class:`CorruptDataError`, never read as another."""
        pins, cache, found = self.pins, self.cache, {}
        wanted = []
        for node_id in ids:
            node = pins.get(node_id)
            if node is None:
                node = cache.get(node_id)
                if node is None:
                    wanted.append(node_id)
                    continue
                pins[node_id] = node
            if node.height != height or other_tree(node, keyfn):
                raise misplaced(self.keyspace.node(node_id), node, height)
            found[node_id] = node
        if wanted:
            wanted = list(dict.fromkeys(wanted))
            keys, datas = read_parts(self.store, self.keyspace, wanted)
            for node_id, stored in zip(wanted, keys):
                node = self.keep(node_id, stored, [next(datas) for _ in stored], keyfn)
                if node.height != height:
                    raise misplaced(stored[0], node, height)
                found[node_id] = node
        return found

    def keep(self, node_id: str, stored: Sequence[str], datas: Sequence[bytes | None], keyfn: KeyFn) -> Node:
        """The node ``node_id`` from its stored values (``stored``: their keys), cached and pinned."""
        node, size = assemble(node_id, stored, datas, keyfn)
        self.cache.put(node_id, node, size)
        if node.height == 0:
            self.cache.seen(len(node), size)
        self.pins[node_id] = node
        return node

    def online(self, store: Store) -> None:
        """Read from ``store`` from now on: a guess's source, which read nothing while its read travelled
        (``mdss._snapshot._guessed``), serves what its answer holds on to afterwards (a page's ranking, for its
        cursors and ties)."""
        self.store = store

    def unpin(self) -> None:
        """Let go of every pinned node (the operation that pinned them is over: the cache alone keeps nodes)."""
        self.pins = {}

    def unpin_leaves(self) -> None:
        """Let go of the entry sets pinned so far (a merge done with them; the cache may still hold them)."""
        self.pins = {node_id: node for node_id, node in self.pins.items() if node.height}

    def peek(self, node_id: str, keyfn: KeyFn) -> Leaf | None:
        """The entry set ``node_id`` if pinned or cached (pinned from now on), else ``None``: never a read."""
        node = self.pins.get(node_id)
        if node is None:
            node = self.cache.get(node_id)
            if node is None:
                return None
            self.pins[node_id] = node
        if not isinstance(node, Leaf):
            return None
        if other_tree(node, keyfn):
            raise misplaced(self.keyspace.node(node_id), node, 0)
        return node

    def load_one(self, node_id: str, keyfn: KeyFn, height: int) -> Any:
        """One node: the hot path of a single-key read, with no batch bookkeeping."""
        node = self.pins.get(node_id)
        if node is None:
            node = self.cache.get(node_id)
            if node is None:
                return self.load_many((node_id,), keyfn, height)[node_id]
            self.pins[node_id] = node
        if node.height != height or other_tree(node, keyfn):
            raise misplaced(self.keyspace.node(node_id), node, height)
        return node


def read_parts(store: Store, keyspace: Keyspace, ids: Sequence[str]) -> tuple[list[list[str]], Iterator[bytes | None]]:
    """The store keys behind each child id (a patched entry set has two, a manifest one more per delta), and their
    values, read in one ``get_many``."""
    keys = [[keyspace.node(part) for part in parts(node_id)] for node_id in ids]
    return keys, iter(store.get_many([key for some in keys for key in some]))


def other_tree(node: Node, keyfn: KeyFn) -> bool:
    """Whether ``node`` was decoded for the other tree (keys are strings in the member index, tuples in the score tree;
    the node cache is shared): a damaged manifest that names a node of the other tree, whose keys would otherwise meet
    keys of the other kind in a comparison (a TypeError, not the damage it is)."""
    if isinstance(node, Leaf):
        by_member = node.keyed_by_member()
        return by_member is not None and by_member is not (keyfn is member_key)
    keys = node.firsts
    return bool(keys) and (type(keys[0]) is str) is not (keyfn is member_key)


def misplaced(key: str, node: Any, height: int) -> CorruptDataError:
    """The damage of a node found where it does not belong: at another height, or in the other tree."""
    if node.height == height:
        return CorruptDataError("stored node belongs to the other tree of the set", key)
    what = "an entry set" if node.height == 0 else f"a manifest of height {node.height}"
    return CorruptDataError(f"stored node is {what} where a node of height {height} belongs", key)


def held(node: Any, count: int, node_id: str) -> Any:
    """``node``, if it holds the ``count`` entries its manifest (for a root: the head) records for it; else
    :class:`CorruptDataError`. Checksummed bytes that are another node's or an older commit's, or a count altered and
    sealed again, would answer wrong ranks, counts and pages, and carry into what a write makes of them."""
    found = len(node) if node.height == 0 else node.total
    if found != count:
        raise CorruptDataError(f"stored node {node_id!r} holds {found} entries where {count} are recorded for it")
    return node


class Tree:
    """One tree as a given head names it: a root id, a height, an entry count, and the bytes a node may
    weigh (``None``: nodes are bounded in items only). ``plain`` turns stored members into the members they are (a
    ``"first"`` set's score tree spells each with its sequence number: ``mdss._order.Order.plain``)."""

    __slots__ = ("source", "keyfn", "root", "height", "count", "node_bytes", "plain")

    def __init__(
        self,
        source: Source,
        keyfn: KeyFn,
        root: str | None,
        height: int,
        count: int,
        node_bytes: int | None = None,
        plain: Callable[[Sequence[str], Sequence[Any]], Sequence[str]] | None = None,
    ) -> None:
        self.source, self.keyfn, self.root, self.height, self.count = source, keyfn, root, height, count
        self.node_bytes, self.plain = node_bytes, plain

    def _load_many(self, ids: Iterable[str], height: int) -> dict[str, Any]:
        return self.source.load_many(ids, self.keyfn, height)

    def _runs(self, probes: Sequence[Any]) -> list[tuple[str, int, int, int, int]]:
        """Route sorted probe keys to entry sets, reading manifests only: runs ``(entry set id, entries before it,
        entries in it, lo, hi)`` saying that ``probes[lo:hi]`` fall in that set. Two bisections per run and node: the
        work grows with the nodes touched, not the probes. One batched read per uncached level."""
        assert self.root is not None  # callers answer an empty tree themselves
        runs = [(self.root, 0, self.count, 0, len(probes))]
        for height in range(self.height, 0, -1):
            nodes = self._load_many((run[0] for run in runs), height)
            nxt: list[tuple[str, int, int, int, int]] = []
            for node_id, before, count, lo, hi in runs:
                node = held(nodes[node_id], count, node_id)
                starts, counts, ids = node.starts, node.counts, node.ids
                nxt.extend((ids[i], before + starts[i], counts[i], a, b) for i, a, b in node.runs(probes, lo, hi))
            runs = nxt
        return runs

    def _route(self, probes: Sequence[Any]) -> tuple[list[tuple[str, int, int, int, int]], dict[str, Any]]:
        """:meth:`_runs`, and the entry sets by id (one more batched read if not cached)."""
        runs = self._runs(probes)
        return runs, self._load_many((run[0] for run in runs), 0)

    def spans(self, probes: Sequence[Any]) -> list[tuple[str, int, int]]:
        """For each sorted probe key, from the manifests alone: the entry set it falls in, how many entries
        precede that set and how many it holds (so the count below the key is between the two bounds)."""
        if self.root is None:
            return []
        runs = self._runs(probes)
        return [(node_id, before, count) for node_id, before, count, lo, hi in runs for _ in range(hi - lo)]

    def descend(self, probes: Sequence[Any]) -> list[tuple[Leaf, int]]:
        """For each probe key (in any order), the entry set it falls in and how many entries precede that set."""
        if self.root is None:
            return [(Leaf((), (), ()), 0)] * len(probes)
        if len(probes) == 1:  # the same reads, without the batch's bookkeeping
            return [self.locate(probes[0])]
        order = None
        if any(a > b for a, b in zip(probes, probes[1:])):
            order = sorted(range(len(probes)), key=probes.__getitem__)
            probes = [probes[i] for i in order]
        runs, leaves = self._route(probes)
        found: list[tuple[Leaf, int]] = []
        for node_id, before, count, lo, hi in runs:
            found.extend([(held(leaves[node_id], count, node_id), before)] * (hi - lo))
        if order is None:
            return found
        out: list[Any] = [None] * len(found)
        for i, item in zip(order, found):
            out[i] = item
        return out

    def prefetch(self, probes: Sequence[Any], most: int | None = None) -> int:
        """Load every node on the paths to sorted ``probes``, a level per round trip, for a write to find pinned (the
        entry sets only if at most ``most`` of them, when given): how many entry sets they fall in."""
        if self.root is None:
            return 0
        runs = self._runs(probes)
        if most is None or len(runs) <= most:
            self._load_many((run[0] for run in runs), 0)
        return len(runs)

    def locate(self, probe: Any) -> tuple[Leaf, int]:
        """:meth:`descend` for one probe key, without the batching: the entry set and entries before it."""
        node_id, before, load, keyfn, count = self.root, 0, self.source.load_one, self.keyfn, self.count
        if node_id is None:
            return Leaf((), (), ()), 0
        for height in range(self.height, 0, -1):
            node = held(load(node_id, keyfn, height), count, node_id)
            i = node.child(probe)
            before += node.starts[i]
            node_id, count = node.ids[i], node.counts[i]
        return held(load(node_id, keyfn, 0), count, node_id), before

    def cached_leaf(self, key: Any) -> str | None:
        """The id of the entry set ``key`` falls in, routed by cached manifests alone, if that entry set is not cached
        itself (what a read would fetch); else ``None``. Never a read."""
        node_id, cache = self.root, self.source.cache
        if node_id is None:
            return None
        for height in range(self.height, 0, -1):
            node = cache.get(node_id)
            if node is None or node.height != height or other_tree(node, self.keyfn):
                return None
            node_id = node.ids[node.child(key)]
        return None if cache.get(node_id) is not None else node_id

    def rank_of(self, probe: Any) -> int:
        """How many keys are strictly below one probe key."""
        leaf, before = self.locate(probe)
        return before + leaf.position(probe)

    def get(self, key: Any) -> Any:
        """The score stored with one key, or ``None``."""
        leaf = self.locate(key)[0]
        keys = leaf.keys
        i = bisect_left(keys, key)
        return leaf.value_at(i) if i < len(keys) and keys[i] == key else None

    def count_below(self, probes: Sequence[Any]) -> list[int]:
        """For each probe key, how many keys are strictly below it."""
        return [before + leaf.position(probe) for (leaf, before), probe in zip(self.descend(probes), probes)]

    def below(self, probes: Sequence[Any]) -> list[tuple[int, int]]:
        """For each probe key (in any order): how many keys are strictly below it, and how many distinct
        scores they hold (a dense rank is 1 + the latter, below a score's first key).

        The descent of :meth:`count_below`, carrying the distinct scores and the last score of everything to the
        left: a manifest adds its children's distinct counts before the child it routes to, less one for every tie
        group that crosses from one child into the next (the last score of one equals the first of the next), and
        the entry set adds its tie groups before the probe. The same round trips as a count. Manifests of format 1
        or 2 know no distinct counts: they are computed from their children first (:meth:`complete`).
        """
        if self.root is None:
            return [(0, 0)] * len(probes)
        order = None
        if any(a > b for a, b in zip(probes, probes[1:])):
            order = sorted(range(len(probes)), key=probes.__getitem__)
            probes = [probes[i] for i in order]
        # (node id, entries before it, distinct scores before it, the last score before it, probes lo:hi)
        runs: list[tuple[str, int, int, Any, int, int]] = [(self.root, 0, 0, None, 0, len(probes))]
        for height in range(self.height, 0, -1):
            nodes = self._load_many((run[0] for run in runs), height)
            routed = [(run, nodes[run[0]], list(nodes[run[0]].runs(probes, run[4], run[5]))) for run in runs]
            self.complete([(node, children[-1][0]) for _, node, children in routed], height)
            nxt = []
            for (_, before, distinct, last, _, _), node, children in routed:
                for i, a, b in children:
                    nxt.append((node.ids[i], before + node.starts[i], *node.dense_before(i, distinct, last), a, b))
            runs = nxt
        leaves = self._load_many((run[0] for run in runs), 0)
        found: list[tuple[int, int]] = []
        for node_id, before, distinct, last, lo, hi in runs:
            leaf = leaves[node_id]
            keys, groups = leaf.keys, leaf.groups()
            join = last is not None and bool(keys) and last == leaf.scores[0]
            for probe in probes[lo:hi]:
                at = bisect_left(keys, probe)
                found.append((before + at, distinct + bisect_left(groups, at) - join if at else distinct))
        if order is None:
            return found
        out: list[Any] = [None] * len(found)
        for i, item in zip(order, found):
            out[i] = item
        return out

    def complete(self, needs: Sequence[tuple[Manifest, int]], height: int) -> None:
        """Make known the distinct counts of children ``0..i-1`` of each ``(manifest, i)`` at ``height``, computing
        unknown ones from the children (format 2: whole subtrees are read once, then kept on the decoded manifests).
        Reads :data:`COMPLETE_BATCH` children per round trip and keeps none pinned."""
        todo: dict[str, list[tuple[Manifest, int]]] = {}
        for node, i in needs:
            known = len(node.dense_starts()) - 1
            for j in range(known, i):
                if node.distincts is None or node.distincts[j] is None:
                    todo.setdefault(node.ids[j], []).append((node, j))
        if not todo:
            return
        ids, pins = list(todo), self.source.pins
        learned: dict[int, tuple[Manifest, dict[int, tuple[int, Any]]]] = {}
        for start in range(0, len(ids), COMPLETE_BATCH):
            batch = ids[start : start + COMPLETE_BATCH]
            fresh = [node_id for node_id in batch if node_id not in pins]
            children = self._load_many(batch, height - 1)
            if height > 1:
                self.complete([(child, len(child)) for child in children.values()], height - 1)
            for node_id, child in children.items():
                for node, j in todo[node_id]:
                    learned.setdefault(id(node), (node, {}))[1][j] = child.dense()
            for node_id in fresh:
                pins.pop(node_id, None)
        for node, found in learned.values():
            node.learn(found)

    def find(self, keys: Sequence[Any]) -> list[Any]:
        """For each key, the score stored with it, or ``None``."""
        out = []
        for (leaf, _), key in zip(self.descend(keys), keys):
            i = bisect_left(leaf.keys, key)
            out.append(leaf.value_at(i) if i < len(leaf.keys) and leaf.keys[i] == key else None)
        return out

    def slice(self, start: int, stop: int) -> tuple[list[str], list[Any]]:
        """Members and scores at positions ``start`` to ``stop - 1`` (0-based), in key order. One batched read per
        uncached level: a page spanning several entry sets still costs one round trip with the manifests cached."""
        members: list[str] = []
        scores: list[Any] = []
        for leaf, a, b in self.leaf_runs(start, stop):
            members.extend(leaf.members[a:b])
            scores.extend(leaf.scores[a:b])
        return (members if self.plain is None else list(self.plain(members, scores))), scores

    def leaf_runs(self, start: int, stop: int) -> list[tuple[Leaf, int, int]]:
        """The entry sets holding positions ``start`` to ``stop - 1``, each with the run of it they hold."""
        start, stop = max(start, 0), min(stop, self.count)
        frontier = self._frontier(start, stop)
        leaves = self._load_many((node_id for node_id, _, _ in frontier), 0)
        runs = [(held(leaves[i], count, i), start - base, stop - base) for i, base, count in frontier]
        return [(leaf, max(a, 0), min(b, len(leaf))) for leaf, a, b in runs]

    def stored_member_at(self, position: int) -> str:
        """The member at ``position`` (within the count) as the entry set stores it (a ``"first"`` set's spells its
        number among its ties)."""
        ((leaf, a, _),) = self.leaf_runs(position, position + 1)
        return str(leaf.members[a])

    def leaf_ids(self, start: int, stop: int) -> list[str]:
        """The ids of the entry sets holding positions ``start`` to ``stop - 1``, reading manifests only."""
        return [node_id for node_id, _, _ in self._frontier(max(start, 0), min(stop, self.count))]

    def first_at(self, position: int) -> Any:
        """The first key of the entry set holding ``position`` (within the count), from the manifests alone;
        ``None`` for the first entry set or an empty tree."""
        if self.root is None:
            return None
        node_id, base, first = self.root, 0, None
        for height in range(self.height, 0, -1):
            node = self.source.load_one(node_id, self.keyfn, height)
            i = min(max(bisect_right(node.starts, position - base) - 1, 0), len(node) - 1)
            node_id, base, first = node.ids[i], base + node.starts[i], node.firsts[i]
        return first if base else None

    def _frontier(self, start: int, stop: int) -> list[tuple[str, int, int]]:
        """``(entry set id, position of its first entry, entries recorded for it)`` of the entry sets holding ``start``
        to ``stop - 1``."""
        if self.root is None or start >= stop:
            return []
        frontier = [(self.root, 0, self.count)]  # (node id, position of its first entry, its count)
        for height in range(self.height, 0, -1):
            nodes = self._load_many((node_id for node_id, _, _ in frontier), height)
            nxt: list[tuple[str, int, int]] = []
            for node_id, base, count in frontier:
                node = held(nodes[node_id], count, node_id)
                lo = max(bisect_right(node.starts, start - base) - 1, 0)
                hi = bisect_left(node.starts, stop - base)
                nxt.extend((node.ids[i], base + node.starts[i], node.counts[i]) for i in range(lo, min(hi, len(node))))
            frontier = nxt
        return frontier

    def leaves_around(
        self, probe: Any, before: int, after: int, size: Callable[[Any, Any, int], int] | None = None
    ) -> list[str]:
        """The ids of the entry set that holds ``probe`` and of its neighbours, in key order: to the left until they
        hold ``before`` entries, to the right until they hold ``after``. ``size(low, high, count)`` says how many
        entries the region of an entry set (its first key to the next one's, ``None`` at the ends) holds when not
        ``count`` (the update log's shift). Reads manifests only (:meth:`fetch` then gets the entry sets in one round
        trip)."""
        if self.root is None:
            return []
        load, keyfn = self.source.load_one, self.keyfn
        path: list[tuple[Manifest, int]] = []
        node_id: str = self.root
        for height in range(self.height, 0, -1):
            node = load(node_id, keyfn, height)
            i = node.child(probe)
            path.append((node, i))
            node_id = node.ids[i]
        if not path:
            return [node_id]

        def region(path: list[tuple[Manifest, int]]) -> tuple[str, int]:
            node, i = path[-1]
            count = node.counts[i]
            if size is not None:
                low = node.firsts[i] if i or any(lo for _, lo in path[:-1]) else None
                high = next((n.firsts[lo + 1] for n, lo in reversed(path) if lo + 1 < len(n)), None)
                count = size(low, high, count)
            return node.ids[i], count

        def step(path: list[tuple[Manifest, int]], by: int) -> bool:
            level = len(path) - 1
            while not 0 <= path[level][1] + by < len(path[level][0]):
                level -= 1
                if level < 0:
                    return False
            node, lo = path[level][0], path[level][1] + by
            path[level] = (node, lo)
            for depth in range(level + 1, len(path)):
                node = load(node.ids[lo], keyfn, len(path) - depth)
                lo = 0 if by > 0 else len(node) - 1
                path[depth] = (node, lo)
            return True

        found = [region(path)[0]]
        for by, wanted in ((1, after), (-1, before)):
            walk, covered = list(path), 0
            while covered < wanted and step(walk, by):
                leaf_id, count = region(walk)
                found.append(leaf_id)
                covered += count
        return found

    def leaves(self, start: Any = None, batch: int = SCAN_BATCH) -> Iterator[Leaf]:
        """Every entry set in key order, from the one that holds ``start`` (the first if ``None``), read ``batch`` per
        round trip: a scan of the whole tree in bounded memory (a union's merge). Each batch is let go before the next
        is read (the node cache may keep them); the manifests stay pinned, a small fraction of the tree."""
        ids = self._leaf_ids(self.root, self.height, start)
        while chunk := list(islice(ids, batch)):
            found = self._load_many(chunk, 0)
            yield from (found[node_id] for node_id in chunk)
            self.source.unpin_leaves()

    def _leaf_ids(self, node_id: str | None, height: int, start: Any) -> Iterator[str]:
        """The ids of the entry sets under ``node_id`` in key order, from the one holding ``start`` (manifests only)."""
        if node_id is None:
            return
        if not height:
            yield node_id
            return
        node = self.source.load_one(node_id, self.keyfn, height)
        first = 0 if start is None else node.child(start)
        for i in range(first, len(node)):
            yield from self._leaf_ids(node.ids[i], height - 1, start if i == first else None)

    def fetch(self, ids: Iterable[str]) -> None:
        """Read the entry sets ``ids`` that are not cached, in one round trip, and pin them for this read."""
        self._load_many(ids, 0)

    def node_ids(self) -> set[str]:
        """The ids of every node of the tree, reading manifests only (entry set ids are in their parents)."""
        if self.root is None:
            return set()
        found, level = {self.root}, [self.root]
        for height in range(self.height, 0, -1):
            nodes = self._load_many(level, height)
            level = [child for node_id in level for child in nodes[node_id].ids]
            found.update(part for child in level for part in parts(child))
        return found

    def walk(self) -> Iterable[tuple[int, list[str], Node]]:
        """Every node, level by level from the root: (height, path of ids, node). For ``check``."""
        if self.root is None:
            return
        level = [(self.root, [self.root])]
        for height in range(self.height, -1, -1):
            nodes = self._load_many((node_id for node_id, _ in level), height)
            nxt: list[tuple[str, list[str]]] = []
            for node_id, path in level:
                node = nodes[node_id]
                yield height, path, node
                if height:
                    nxt.extend((child, [*path, child]) for child in node.ids)
            level = nxt
