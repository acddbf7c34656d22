"""The counted, copy-on-write B+tree of entry sets and manifests.

An *entry set* (leaf) holds at most ``chunk`` entries in key order. A
*manifest* holds at most ``chunk`` children and, for each, its id, its entry
count and its first entry (member and score, from which the tree derives the
child's first key). A manifest of manifests is the seed's master manifest;
the tree grows a level when the root splits and loses one when the root is
left with a single child.

The same structure serves two trees: the *score tree*, keyed by the set
order's sort key ``(s, member)``, and the *member index*, keyed by member.

Nodes are immutable. :class:`Writer` applies a sorted batch of operations by
rewriting only the paths it touches under fresh ids, merging any node left
under half full with a neighbour and splitting any node over ``chunk`` into
even parts; nothing is written to the store until the caller flushes it and
compare-and-sets the head.

Reads go level by level, batching every node a level needs into one
``get_many``, so a read costs one round trip per level that is not cached,
whatever the number of keys or positions it asks for.
"""

from __future__ import annotations

import secrets
import time
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable, Sequence
from itertools import accumulate
from typing import Any

from ._cache import NodeCache
from ._codec import LEAF, decode_node, encode_leaf, encode_manifest
from ._keys import Keyspace
from .exceptions import CorruptDataError, MissingNodeError
from .stores.base import Store

KeyFn = Callable[[str, Any], Any]

#: A child summary: (node id, entry count, first member, first score).
Summary = tuple[str, int, str, Any]


def new_id() -> str:
    """A fresh node id: milliseconds since the epoch (for garbage collection) and 64 random bits."""
    return f"{time.time_ns() // 1_000_000:011x}{secrets.token_hex(8)}"


def id_millis(node_id: str) -> int:
    """When the node with this id was created (ms since the epoch); 0 if the id is not ours."""
    try:
        return int(node_id[:11], 16)
    except ValueError:
        return 0


class Leaf:
    """An entry set: parallel tuples, ``keys`` derived from members and scores."""

    __slots__ = ("keys", "members", "scores")
    height = 0

    def __init__(self, keys: Sequence[Any], members: Sequence[str], scores: Sequence[Any]) -> None:
        self.keys, self.members, self.scores = keys, members, scores

    def __len__(self) -> int:
        return len(self.keys)

    def encode(self) -> bytes:
        return encode_leaf(self.members, self.scores)


class Manifest:
    """A manifest: its children's ids, counts and first keys (tuples); ``starts`` are prefix sums of counts."""

    __slots__ = ("height", "ids", "counts", "members", "scores", "firsts", "starts")

    def __init__(
        self,
        height: int,
        ids: Sequence[str],
        counts: Sequence[int],
        members: Sequence[str],
        scores: Sequence[Any],
        firsts: Sequence[Any],
    ) -> None:
        self.height, self.ids, self.counts, self.members, self.scores = height, ids, counts, members, scores
        self.firsts = firsts
        self.starts = (0, *accumulate(counts))

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def total(self) -> int:
        return self.starts[-1]

    def summaries(self) -> list[Summary]:
        return list(zip(self.ids, self.counts, self.members, self.scores))

    def encode(self) -> bytes:
        return encode_manifest(self.height, self.ids, self.counts, self.members, self.scores)


Node = Leaf | Manifest


class Source:
    """Loads decoded nodes for one operation: pinned ones, then the shared cache, then the store.

    Pins keep every node this operation has seen, so a cache eviction between
    two steps of one operation never costs another round trip.
    """

    __slots__ = ("store", "keyspace", "cache", "pins")

    def __init__(self, store: Store, keyspace: Keyspace, cache: NodeCache) -> None:
        self.store, self.keyspace, self.cache = store, keyspace, cache
        self.pins: dict[str, Node] = {}

    def load_many(self, ids: Iterable[str], keyfn: KeyFn) -> dict[str, Any]:
        """Nodes by id. Typed ``Any``: whether a node is a manifest or an entry set follows from its height."""
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
            found[node_id] = node
        if wanted:
            wanted = list(dict.fromkeys(wanted))
            keys = [self.keyspace.node(i) for i in wanted]
            for node_id, key, data in zip(wanted, keys, self.store.get_many(keys)):
                if data is None:
                    raise MissingNodeError("a node the head names is missing", key)
                node = decode(key, data, keyfn)
                cache.put(node_id, node, len(data))
                pins[node_id] = found[node_id] = node
        return found

    def load_one(self, node_id: str, keyfn: KeyFn) -> Any:
        """One node: the hot path of a single-key read, with no batch bookkeeping."""
        node = self.pins.get(node_id)
        if node is None:
            node = self.cache.get(node_id)
            if node is None:
                return self.load_many((node_id,), keyfn)[node_id]
            self.pins[node_id] = node
        return node

    def load(self, node_id: str, keyfn: KeyFn) -> Any:
        return self.load_many((node_id,), keyfn)[node_id]


def decode(key: str, data: bytes, keyfn: KeyFn) -> Node:
    """Decode stored bytes into a node, deriving keys with ``keyfn(member, score)``."""
    fields = decode_node(key, data)
    try:
        if fields[0] == LEAF:
            members, scores = fields[1], fields[2]
            return Leaf(tuple(map(keyfn, members, scores)), members, scores)
        height, ids, counts, members, scores = fields[1:]
        return Manifest(height, ids, counts, members, scores, tuple(map(keyfn, members, scores)))
    except TypeError as exc:  # e.g. a score that is not a number
        raise CorruptDataError(f"stored node holds a value of the wrong type: {exc}", key) from None


class Tree:
    """One tree as a given head names it: a root id, a height and an entry count."""

    __slots__ = ("source", "keyfn", "root", "height", "count")

    def __init__(self, source: Source, keyfn: KeyFn, root: str | None, height: int, count: int) -> None:
        self.source, self.keyfn, self.root, self.height, self.count = source, keyfn, root, height, count

    def _load_many(self, ids: Iterable[str]) -> dict[str, Any]:
        return self.source.load_many(ids, self.keyfn)

    def _route(self, probes: Sequence[Any]) -> tuple[list[tuple[str, int, int, int]], dict[str, Any]]:
        """Route sorted probe keys to entry sets: runs ``(entry set id, entries before it, lo, hi)`` saying
        that ``probes[lo:hi]`` fall in that set, and the entry sets by id.

        A node routes each run of probes with two bisections, so the work
        grows with the nodes touched rather than the probes. One batched read
        per uncached level.
        """
        assert self.root is not None  # callers answer an empty tree themselves
        runs = [(self.root, 0, 0, len(probes))]
        for _ in range(self.height):
            nodes = self._load_many(run[0] for run in runs)
            nxt = []
            for node_id, before, lo, hi in runs:
                node = nodes[node_id]
                firsts, last = node.firsts, len(node) - 1
                while lo < hi:
                    i = bisect_right(firsts, probes[lo]) - 1
                    if i < 0:
                        i = 0
                    end = bisect_left(probes, firsts[i + 1], lo, hi) if i < last else hi
                    nxt.append((node.ids[i], before + node.starts[i], lo, end))
                    lo = end
            runs = nxt
        return runs, self._load_many(run[0] for run in runs)

    def descend(self, probes: Sequence[Any]) -> list[tuple[Leaf, int]]:
        """For each probe key (in any order), the entry set it falls in and how many entries precede that set."""
        if self.root is None:
            return [(Leaf((), (), ()), 0)] * len(probes)
        order = None
        if any(a > b for a, b in zip(probes, probes[1:])):
            order = sorted(range(len(probes)), key=probes.__getitem__)
            probes = [probes[i] for i in order]
        runs, leaves = self._route(probes)
        found: list[tuple[Leaf, int]] = []
        for node_id, before, lo, hi in runs:
            found.extend([(leaves[node_id], before)] * (hi - lo))
        if order is None:
            return found
        out: list[Any] = [None] * len(found)
        for i, item in zip(order, found):
            out[i] = item
        return out

    def prefetch(self, probes: Sequence[Any]) -> None:
        """Load every node on the paths to sorted ``probes``, a level per round trip, for a write to find pinned."""
        if self.root is not None:
            self._route(probes)

    def locate(self, probe: Any) -> tuple[Leaf, int]:
        """:meth:`descend` for one probe key, without the batching: the entry set and entries before it."""
        node_id, before, load, keyfn = self.root, 0, self.source.load_one, self.keyfn
        if node_id is None:
            return Leaf((), (), ()), 0
        for _ in range(self.height):
            node = load(node_id, keyfn)
            i = bisect_right(node.firsts, probe) - 1
            if i < 0:
                i = 0
            before += node.starts[i]
            node_id = node.ids[i]
        return load(node_id, keyfn), before

    def rank_of(self, probe: Any) -> int:
        """How many keys are strictly below one probe key."""
        leaf, before = self.locate(probe)
        return before + bisect_left(leaf.keys, probe)

    def get(self, key: Any) -> Any:
        """The score stored with one key, or ``None``."""
        leaf = self.locate(key)[0]
        keys = leaf.keys
        i = bisect_left(keys, key)
        return leaf.scores[i] if i < len(keys) and keys[i] == key else None

    def count_below(self, probes: Sequence[Any]) -> list[int]:
        """For each probe key, how many keys are strictly below it."""
        return [before + bisect_left(leaf.keys, probe) for (leaf, before), probe in zip(self.descend(probes), probes)]

    def find(self, keys: Sequence[Any]) -> list[Any]:
        """For each key, the score stored with it, or ``None``."""
        out = []
        for (leaf, _), key in zip(self.descend(keys), keys):
            i = bisect_left(leaf.keys, key)
            out.append(leaf.scores[i] if i < len(leaf.keys) and leaf.keys[i] == key else None)
        return out

    def slice(self, start: int, stop: int) -> tuple[list[str], list[Any]]:
        """Members and scores at positions ``start`` to ``stop - 1`` (0-based), in key order.

        One batched read per uncached level: a page spanning several entry
        sets still costs one round trip with the manifests cached.
        """
        start, stop = max(start, 0), min(stop, self.count)
        members: list[str] = []
        scores: list[Any] = []
        if self.root is None or start >= stop:
            return members, scores
        frontier = [(self.root, 0)]  # (node id, position of its first entry)
        for _ in range(self.height):
            nodes = self._load_many(node_id for node_id, _ in frontier)
            nxt: list[tuple[str, int]] = []
            for node_id, base in frontier:
                node = nodes[node_id]
                lo = max(bisect_right(node.starts, start - base) - 1, 0)
                hi = bisect_left(node.starts, stop - base)
                nxt.extend((node.ids[i], base + node.starts[i]) for i in range(lo, min(hi, len(node))))
            frontier = nxt
        leaves = self._load_many(node_id for node_id, _ in frontier)
        for node_id, base in frontier:
            leaf = leaves[node_id]
            a, b = max(start - base, 0), min(stop - base, len(leaf))
            members.extend(leaf.members[a:b])
            scores.extend(leaf.scores[a:b])
        return members, scores

    def node_ids(self) -> set[str]:
        """The ids of every node of the tree, reading manifests only (entry set ids are in their parents)."""
        if self.root is None:
            return set()
        found, level = {self.root}, [self.root]
        for _ in range(self.height):
            nodes = self._load_many(level)
            level = [child for node_id in level for child in nodes[node_id].ids]
            found.update(level)
        return found

    def walk(self) -> Iterable[tuple[int, list[str], Node]]:
        """Every node, level by level from the root: (height, path of ids, node). For ``check``."""
        if self.root is None:
            return
        level = [(self.root, [self.root])]
        for height in range(self.height, -1, -1):
            nodes = self._load_many(node_id for node_id, _ in level)
            nxt: list[tuple[str, list[str]]] = []
            for node_id, path in level:
                node = nodes[node_id]
                yield height, path, node
                if height and isinstance(node, Manifest):
                    nxt.extend((child, [*path, child]) for child in node.ids)
            level = nxt


class Writer:
    """Applies sorted batches of operations to trees, copy-on-write.

    ``new`` holds the nodes written by this commit (id -> node), ``built``
    the entry sets of a bulk load, already encoded (id -> bytes), and
    ``replaced`` the ids of stored nodes the commit makes unreachable.
    Nothing touches the store here.
    """

    def __init__(self, chunk: int) -> None:
        self.chunk = chunk
        self.min_fill = max(chunk // 2, 1)
        self.new: dict[str, Node] = {}
        self.built: dict[str, bytes] = {}
        self.replaced: list[str] = []
        self.tree: Tree

    # -- node bookkeeping -------------------------------------------------

    def _take(self, node_id: str) -> Any:
        """Load a node that this commit rewrites, marking it replaced."""
        node = self.new.pop(node_id, None)
        if node is None:
            node = self.tree.source.load(node_id, self.tree.keyfn)
            self.replaced.append(node_id)
        return node

    def _parts(self, n: int) -> list[int]:
        """Split points that cut ``n`` items into the fewest parts of at most ``chunk``, evenly.

        Every part of a split holds more than ``chunk / 2`` items, so a split
        never leaves a node under the minimum fill.
        """
        k = -(-n // self.chunk) if n else 0
        base, extra = divmod(n, k) if k else (0, 0)
        return [0, *accumulate(base + (i < extra) for i in range(k))]

    def _emit_leaves(self, keys: Sequence[Any] | None, members: Sequence[str], scores: Sequence[Any]) -> list[Summary]:
        """Cut entries in key order into entry sets; without ``keys`` (a bulk load) they are only encoded."""
        out: list[Summary] = []
        cuts = self._parts(len(members))
        if keys is not None:
            keys, members, scores = tuple(keys), tuple(members), tuple(scores)
        for a, b in zip(cuts, cuts[1:]):
            node_id = new_id()
            if keys is None:
                self.built[node_id] = encode_leaf(members[a:b], scores[a:b])
            else:
                self.new[node_id] = Leaf(keys[a:b], members[a:b], scores[a:b])
            out.append((node_id, b - a, members[a], scores[a]))
        return out

    def _emit_manifests(self, children: list[Summary], height: int) -> list[Summary]:
        out: list[Summary] = []
        cuts = self._parts(len(children))
        keyfn = self.tree.keyfn
        for a, b in zip(cuts, cuts[1:]):
            part = children[a:b]
            ids, counts, members, scores = tuple(zip(*part))
            node_id = new_id()
            self.new[node_id] = Manifest(height, ids, counts, members, scores, tuple(map(keyfn, members, scores)))
            out.append((node_id, sum(counts), members[0], scores[0]))
        return out

    def _emit(self, items: Any, height: int) -> list[Summary]:
        if height == 0:
            return self._emit_leaves(*items)
        return self._emit_manifests(items, height)

    # -- the batch algorithm ---------------------------------------------

    def apply(self, tree: Tree, ops: list[tuple[Any, str, Any]]) -> tuple[str | None, int, int]:
        """Apply ``ops`` — ``(key, member, score)`` sorted by key, score ``None`` to delete — to ``tree``.

        Returns the new (root id, height, count). Deletes of absent keys and
        inserts of present keys (an upsert) are both allowed.
        """
        self.tree = tree
        if not ops:
            return tree.root, tree.height, tree.count
        tree.prefetch([op[0] for op in ops])  # batch-load every path first: one round trip per level
        if tree.root is None:
            kept = [op for op in ops if op[2] is not None]
            summaries = self._emit_leaves([o[0] for o in kept], [o[1] for o in kept], [o[2] for o in kept])
            height = 0
        else:
            summaries = self._apply(tree.root, tree.height, ops)
            height = tree.height
        while len(summaries) > 1:
            height += 1
            summaries = self._emit_manifests(summaries, height)
        if not summaries:
            return None, 0, 0
        root = summaries[0]
        while height > 0:  # a root with one child gives way to that child
            node: Any = self.new.get(root[0])
            if node is None:
                node = tree.source.load(root[0], tree.keyfn)
            if len(node) > 1:
                break
            self._take(root[0])
            root = node.summaries()[0]
            height -= 1
        return root[0], height, root[1]

    def _apply(self, node_id: str, height: int, ops: list[tuple[Any, str, Any]]) -> list[Summary]:
        node = self._take(node_id)
        if height == 0:
            keys, members, scores = list(node.keys), list(node.members), list(node.scores)
            for key, member, score in ops:
                i = bisect_left(keys, key)
                found = i < len(keys) and keys[i] == key
                if score is None:
                    if found:
                        del keys[i], members[i], scores[i]
                elif found:
                    members[i], scores[i] = member, score
                else:
                    keys.insert(i, key)
                    members.insert(i, member)
                    scores.insert(i, score)
            return self._emit_leaves(keys, members, scores)
        assert isinstance(node, Manifest)
        children = node.summaries()
        firsts, opkeys = node.firsts, [op[0] for op in ops]
        out: list[Summary] = []
        done = n = 0
        while n < len(ops):  # route each run of ops to the child whose key range holds it
            i = max(bisect_right(firsts, opkeys[n]) - 1, 0)
            end = bisect_left(opkeys, firsts[i + 1], n) if i + 1 < len(firsts) else len(ops)
            out.extend(children[done:i])
            out.extend(self._apply(node.ids[i], height - 1, ops[n:end]))
            done, n = i + 1, end
        out.extend(children[done:])
        self._fix_underfull(out, height - 1)
        return self._emit_manifests(out, height)

    def _fix_underfull(self, children: list[Summary], height: int) -> None:
        """Merge every child under the minimum fill with a neighbour (then split evenly if too big).

        Only nodes this commit wrote can be under-filled (untouched ones
        satisfied the invariant before and still do), so only children in
        ``new`` are looked at. A node left with a single child cannot fix
        that child itself; once its parent merges it with a neighbour, the
        merged children are fixed one level down in turn.
        """
        new, min_fill = self.new, self.min_fill
        while len(children) > 1:
            i = next((k for k, c in enumerate(children) if c[0] in new and len(new[c[0]]) < min_fill), None)
            if i is None:
                return
            a = i if i + 1 < len(children) else i - 1
            left, right = self._take(children[a][0]), self._take(children[a + 1][0])
            if height == 0:
                items: Any = (left.keys + right.keys, left.members + right.members, left.scores + right.scores)
            else:
                items = left.summaries() + right.summaries()
                self._fix_underfull(items, height - 1)
            children[a : a + 2] = self._emit(items, height)

    def build(self, tree: Tree, members: Sequence[str], scores: Sequence[Any]) -> tuple[str | None, int, int]:
        """Build a whole tree bottom-up from entries already in key order (bulk load).

        Its entry sets are only to be stored: they go to ``built`` as bytes,
        never held decoded (a million decoded entries would only feed the
        garbage collector).
        """
        self.tree = tree
        summaries = self._emit_leaves(None, members, scores)
        height = 0
        while len(summaries) > 1:
            height += 1
            summaries = self._emit_manifests(summaries, height)
        if not summaries:
            return None, 0, 0
        return summaries[0][0], height, summaries[0][1]

    def encoded(self, keyspace: Keyspace) -> dict[str, bytes]:
        """The new nodes as store key -> bytes."""
        nodes = {keyspace.node(node_id): node.encode() for node_id, node in self.new.items()}
        nodes.update((keyspace.node(node_id), data) for node_id, data in self.built.items())
        return nodes
