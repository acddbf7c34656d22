"""Copy-on-write: a commit's new nodes, made from the nodes it replaces.

:class:`Writer` applies a sorted batch of operations to a tree by rewriting only the paths it touches under fresh ids:
it cuts entries into even parts (:func:`mdss._tree.fill`), merges any node left under the minimum fill with a
neighbour, and grows or shrinks the root a level as needed; :meth:`Writer.build` builds a whole tree bottom-up (bulk
load). Score-tree summaries also record each child's distinct scores and last score (for dense ranks). Nothing touches
the store here.

Node ids carry the gc epoch of the head the commit read (``mdss._garbage``):
``{epoch:x}.{milliseconds:011x}{64 random bits}``. The time is for people; no decision depends on a clock.
"""

from __future__ import annotations

import functools
import math
import secrets
import time
import zlib
from bisect import bisect_left
from collections.abc import Callable, Iterable, Sequence
from itertools import accumulate
from typing import Any

from ._codec import encode_leaf, encode_manifest, weight_of
from ._keys import Keyspace
from ._nodes import JOIN, MAX_DELTAS, delta_weight, parts, stored_id
from ._order import MAX_DATA_BYTES, MAX_MEMBER_BYTES, member_key, same_value, score_of
from ._parse import HEX
from ._tree import Leaf, Manifest, Node, Summary, Tree, fill, full, weight, weights
from .exceptions import InvalidArgumentError

#: Full entry sets a commit with ``flush`` holds before it hands them over (see :class:`Writer`).
FLUSH_LEAVES = 256

#: A manifest's delta weighs at most this fraction's inverse of the manifest (mdss._nodes.delta_weight): a quarter.
DELTA_SHARE = 4
#: The most changes (a share of the chunk) of the one patch an unpatched entry set may take in its turn (Writer._turn).
ONE_PATCH_SHARE = 4

#: The wall clock that stamps node ids (injectable: tests skew it to show that nothing depends on it).
clock = time.time


def patch_most(chunk: int) -> int:
    """The most entries a patch changes in an entry set of a set of ``chunk`` (see :class:`Writer`)."""
    return max(2, math.isqrt(2 * chunk))


def new_id(epoch: int) -> str:
    """A fresh node id minted in gc epoch ``epoch``."""
    return f"{epoch:x}.{int(clock() * 1000):011x}{secrets.token_hex(8)}"


def id_millis(node_id: str) -> int:
    """When the node with this id was minted, by its writer's clock (ms since the epoch); 0 if not ours."""
    millis = node_id.rpartition(".")[2][:11]
    return int(millis, 16) if HEX.fullmatch(millis) else 0


def id_epoch(node_id: str) -> int:
    """The gc epoch a node id was minted in; 0 for ids of format 1 (before epochs) and ids not ours."""
    epoch, dot, _ = node_id.partition(".")
    return int(epoch, 16) if dot and len(epoch) <= 16 and HEX.fullmatch(epoch) else 0


class Writer:
    """Applies sorted batches of operations to trees, copy-on-write.

    ``new`` holds the nodes written by this commit (id -> node), ``built`` the entry sets of a bulk load, already
    encoded (id -> bytes), and ``replaced`` the ids of the stored nodes the commit rewrites (:meth:`garbage`: those it
    makes unreachable).

    With ``patches`` (merges, where the store holds the largest manifest they make: :func:`patches_fit`), an entry
    set that keeps its fill and changes in at most ``patch_most`` entries since it was stored whole (about
    the square root of twice the chunk: 44 of 1,000) is written as a patch on that stored one (``mdss._nodes``): a
    merge of a log much shorter than the tree's entry sets, which changes one or two entries in each it touches, then
    writes those entries instead of the whole set, until the set has taken ``patch_most`` of them. Rewriting a patch
    that grows by ``r`` entries a merge costs ``patch_most / r`` patch writes of half of ``patch_most`` entries on
    average, against one entry set per ``patch_most`` entries: the two balance near that square root. An entry set
    that one merge changes in more entries takes a single patch of up to a quarter of the chunk, in its turn
    (:meth:`_turn`), and is rewritten by the next merge that changes it.

    With ``deltas`` as well (the most a store holds: :func:`deltas_fit`), a stored manifest below the root that keeps
    its fill is written as a delta on it, the children it lost and gained, while this delta weighs at most a quarter
    (:data:`DELTA_SHARE`) of the manifest and all its deltas together no more than the manifest
    (``mdss._nodes.chained``): where a merge changes a tenth of a manifest's children (a log much shorter than the
    tree's entry sets, past 10^8 members), a manifest is then written whole about once in six merges, not in every
    one. Where a merge changes most children, as up to 10^8, nothing changes.

    With ``flush``, an :meth:`apply` whose ops fall in more than ``4 * FLUSH_LEAVES`` entry sets reads them a manifest
    at a time and hands full new ones to it (id -> bytes) once ``FLUSH_LEAVES`` of them wait, so that a merge touching
    every entry set of a huge tree holds a few hundred of them, not all (4 GB at 10^7 members):
    an entry set is final once full (only an under-filled one is merged with a neighbour later; one flushed is read
    back from the store then, and replaced). ``flushed`` counts their entries and weight (``mdss._codec.weight_of``).
    """

    def __init__(
        self,
        chunk: int,
        epoch: int,
        flush: Callable[[dict[str, bytes]], None] | None = None,
        patches: bool = False,
        deltas: int = 0,
        merges: int = 0,
    ) -> None:
        self.chunk, self.epoch, self.flush, self.patches, self.deltas = chunk, epoch, flush, patches, deltas
        self.phase = merges % 2  # the parity of the merges that made the trees (mdss._head.Head.merges): see _turn
        self.id_sample = new_id(epoch)  # as long as the ids this writer mints
        self.flushed = [0, 0]
        self.bounded = False  # whether this apply reads and flushes entry sets a manifest at a time
        self.leaf_fill, self.manifest_fill = fill(chunk, 0), fill(chunk, 1)
        self.patch_most = patch_most(chunk)
        self.one_patch = max(self.patch_most, chunk // ONE_PATCH_SHARE)  # see _patchable
        self.patching = False  # whether this apply may patch entry sets
        self.new: dict[str, Node] = {}
        self.built: dict[str, bytes] = {}
        self.replaced: list[str] = []
        self._flushed_bases: set[str] = set()  # bases of the patches handed to flush
        self.tree: Tree
        self.dense = False  # whether the tree's summaries keep distinct scores (the score tree's do)
        self.node_bytes: int | None = None  # the bytes a node may weigh (mdss._tree.weights), if bounded

    def _start(self, tree: Tree) -> None:
        self.tree, self.dense, self.node_bytes = tree, tree.keyfn is not member_key, tree.node_bytes
        # Not a root entry set (the head names it). In sets bounded in bytes, a manifest counts its patched children's
        # longer ids (mdss._nodes.ID_CHARS).
        self.patching = self.patches and tree.height > 0

    def garbage(self) -> list[str]:
        """The stored nodes this commit makes unreachable: every part of what it replaced (an entry set and its patch,
        a manifest and its deltas), but for the parts its new patches and deltas still build on."""
        live = {p for i in self.new if JOIN in i for p in parts(i)[:-1]} | self._flushed_bases
        return [p for p in dict.fromkeys(p for i in self.replaced for p in parts(i)) if p not in live]

    # -- node bookkeeping -------------------------------------------------

    def _take(self, node_id: str, height: int) -> Any:
        """Load a node that this commit rewrites, marking it replaced."""
        node = self.new.pop(node_id, None)
        if node is None:
            node = self.tree.source.load_one(node_id, self.tree.keyfn, height)
            self.replaced.append(node_id)
            self._flushed_bases.discard(parts(node_id)[0])  # a patch this commit flushed, replaced after all
        return node

    @staticmethod
    def _split_points(n: int, most: int) -> list[int]:
        """Split points that cut ``n`` items into the fewest parts of at most ``most``, evenly: each holds at least
        ``most // 2`` items (2 or more when ``most`` is 3), so a split never leaves a node under the minimum fill."""
        k = -(-n // most) if n else 0
        base, extra = divmod(n, k) if k else (0, 0)
        return [0, *accumulate(base + (i < extra) for i in range(k))]

    def _cuts(
        self, members: Sequence[str], height: int, ids: Sequence[str] = (), values: Sequence[Any] = ()
    ) -> list[int]:
        """Where to cut the items of a node at ``height`` (their members, or first members; an entry set's ``values``
        weigh with them) into nodes.

        Bounded in items only: :meth:`_split_points`. Bounded in bytes as well, items heavier than the bound together
        are cut greedily within both bounds; a last node left under the minimum fill is evened out with the one before
        it: halved by items if that one was cut for its items, else at the middle of their bytes (the second part
        halved again if it holds too many items). When no item weighs more than a quarter of the bound, every part is
        then :func:`mdss._tree.full`.
        """
        least, most = fill(self.chunk, height)
        bound = self.node_bytes
        if bound is None or weight(height, members, ids, values) <= bound:
            return self._split_points(len(members), most)
        sizes = weights(height, members, ids, values)
        cuts, count, part = [0], 0, 0
        for i, size in enumerate(sizes):
            if count and (count == most or part + size > bound):
                cuts.append(i)
                count = part = 0
            count, part = count + 1, part + size
        cuts.append(len(sizes))
        if len(cuts) < 3:  # one item heavier than the bound: it stands alone
            return cuts
        a, b, c = cuts[-3], cuts[-2], cuts[-1]
        if full(c - b, part, least, bound):
            return cuts
        both = sum(sizes[a:c])
        if both <= bound:  # the one before was cut for its items: halve the two by items
            return [*cuts[:-2], a + (c - a) // 2, c]
        m, left = a, 0
        while m < c - 1 and 2 * (left + sizes[m]) <= both:
            left += sizes[m]
            m += 1
        m = max(m, a + 1)
        if c - m <= most:
            return [*cuts[:-2], m, c]
        return [*cuts[:-2], m, m + (c - m) // 2, c]

    def _underfull(self, node: Node) -> bool:
        least = (self.manifest_fill if node.height else self.leaf_fill)[0]
        if len(node) >= least or self.node_bytes is None:
            return len(node) < least
        ids, values = (node.ids, ()) if isinstance(node, Manifest) else ((), node.scores)
        return not full(len(node), weight(node.height, node.members, ids, values), least, self.node_bytes)

    def _emit_leaves(
        self, keys: Sequence[Any] | None, members: Sequence[str], scores: Sequence[Any], cuts: list[int] | None = None
    ) -> list[Summary]:
        """Cut entries in key order into entry sets (at ``cuts``, else as :meth:`_cuts` says); without ``keys`` (a bulk
        load) they are only encoded."""
        out: list[Summary] = []
        if cuts is None:
            cuts = self._cuts(members, 0, (), scores)
        if keys is not None:
            keys, members, scores = tuple(keys), tuple(members), tuple(scores)
        dense = self.dense
        for a, b in zip(cuts, cuts[1:]):
            node_id = new_id(self.epoch)
            if keys is None:
                self.built[node_id] = encode_leaf(members[a:b], scores[a:b])
            else:
                self.new[node_id] = Leaf(keys[a:b], members[a:b], scores[a:b])
            if dense:  # equal scores are adjacent, and a set counts 1 and 1.0 once: its size is the groups'
                out.append((node_id, b - a, members[a], scores[a], len(set(scores[a:b])), scores[b - 1]))
            else:
                out.append((node_id, b - a, members[a], score_of(scores[a]), None, None))
        return out

    def _emit_manifests(self, children: list[Summary], height: int) -> list[Summary]:
        out: list[Summary] = []
        cuts = self._cuts([child[2] for child in children], height, [child[0] for child in children])
        keyfn = self.tree.keyfn
        for a, b in zip(cuts, cuts[1:]):
            ids, counts, members, scores, distincts, lasts = tuple(zip(*children[a:b]))
            node_id = new_id(self.epoch)
            if not self.dense:
                distincts = lasts = None  # type: ignore[assignment]
            node = Manifest(height, ids, counts, members, scores, tuple(map(keyfn, members, scores)), distincts, lasts)
            self.new[node_id] = node
            out.append((node_id, node.total, members[0], scores[0], *node.dense()))
        return out

    def _emit(self, items: Any, height: int) -> list[Summary]:
        if height == 0:
            return self._emit_leaves(*items)
        return self._emit_manifests(items, height)

    # -- the batch algorithm ---------------------------------------------

    def apply(self, tree: Tree, ops: list[tuple[Any, str, Any]]) -> tuple[str | None, int, int]:
        """Apply ``ops`` — ``(key, member, score)`` sorted by key, score ``None`` to delete (if present) — to ``tree``
        (an upsert); the new (root id, height, count)."""
        self._start(tree)
        if not ops:
            return tree.root, tree.height, tree.count
        # Batch-load every path first: one round trip per level; with flush, when the ops fall in more than
        # 4 * FLUSH_LEAVES entry sets, those a manifest at a time instead (bounded, in _apply).
        most = None if self.flush is None else 4 * FLUSH_LEAVES
        touched = tree.prefetch([op[0] for op in ops], most)
        self.bounded = most is not None and touched > most
        if tree.root is None:
            kept = [op for op in ops if op[2] is not None]
            summaries = self._emit_leaves([o[0] for o in kept], [o[1] for o in kept], [o[2] for o in kept])
            height = 0
        else:
            summaries = self._apply(tree.root, tree.height, ops)
            height = tree.height
        root, height = self._grow(summaries, height)
        if root is None:
            return None, 0, 0
        while height > 0:  # a root with one child gives way to that child
            node: Any = self.new.get(root[0])
            if node is None:
                node = tree.source.load_one(root[0], tree.keyfn, height)
            if len(node) > 1:
                break
            self._take(root[0], height)
            root = node.summaries()[0]
            height -= 1
        if JOIN in root[0]:  # the head names a root: whole, never patched nor with deltas
            node = self._take(root[0], height)
            if height == 0:
                root = self._emit_leaves(node.keys, node.members, node.scores)[0]
            else:
                root = self._emit_manifests(node.summaries(), height)[0]
        return root[0], height, root[1]

    def _grow(self, summaries: list[Summary], height: int) -> tuple[Summary | None, int]:
        """Put manifests over ``summaries`` (nodes at ``height``) until one root remains: (root, its height)."""
        while len(summaries) > 1:
            height += 1
            summaries = self._emit_manifests(summaries, height)
        return (summaries[0] if summaries else None), height

    def _apply(self, node_id: str, height: int, ops: list[tuple[Any, str, Any]]) -> list[Summary]:
        fresh = node_id in self.new
        node = self._take(node_id, height)
        if height == 0:
            return self._rewrite(node_id, node, fresh, ops)
        assert isinstance(node, Manifest)
        children = node.summaries()
        out: list[Summary] = []
        done = 0
        runs = node.runs([op[0] for op in ops], 0, len(ops))
        bounded = height == 1 and self.bounded
        if bounded:  # this manifest's entry sets in one read; let go of them below
            runs = list(runs)
            self.tree.source.load_many([node.ids[i] for i, _, _ in runs], self.tree.keyfn, 0)
        for i, start, end in runs:
            out.extend(children[done:i])
            out.extend(self._apply(node.ids[i], height - 1, ops[start:end]))
            done = i + 1
        out.extend(children[done:])
        self._merge_underfull(out, height - 1)
        if bounded:
            self._flush_full()
            self.tree.source.unpin_leaves()
        if self.deltas and not fresh and height < self.tree.height and self.node_bytes is None:
            chained = self._emit_delta(node_id, node, out)
            if chained is not None:
                return [chained]
        return self._emit_manifests(out, height)

    def _emit_delta(self, node_id: str, node: Manifest, children: list[Summary]) -> Summary | None:
        """The stored manifest ``node_id`` with ``children`` instead, as a delta on it, if it keeps its fill and the
        delta is small enough (see the class); else ``None``."""
        least, most = self.manifest_fill
        if not least <= len(children) <= most or len(parts(node_id)) > min(self.deltas, MAX_DELTAS):
            return None
        kept = {child[0] for child in children}
        had = set(node.ids)
        gone = [child for child in node.summaries() if child[0] not in kept]
        new = [child for child in children if child[0] not in had]
        if not gone and not new:
            return None
        size = delta_weight(node.height, [c[2] for c in gone], [c[2] for c in new])
        base_weight, chain = node.patch[:2] if node.patch is not None else (weight(node.height, node.members), 0)
        if DELTA_SHARE * size > base_weight or chain + size > base_weight:
            return None
        columns = tuple(zip(*new)) if new else ((),) * 6
        added = columns if self.dense else (*columns[:4], None, None)
        removed = (tuple(c[2] for c in gone), tuple(c[3] for c in gone))
        ids, counts, members, scores, distincts, lasts = tuple(zip(*children))
        if not self.dense:
            distincts = lasts = None  # type: ignore[assignment]
        keys = tuple(map(self.tree.keyfn, members, scores))
        delta = (base_weight, chain + size, removed, added)
        chained = Manifest(node.height, ids, counts, members, scores, keys, distincts, lasts, delta)
        chained_id = f"{node_id}{JOIN}{new_id(self.epoch)}"
        self.new[chained_id] = chained
        return (chained_id, chained.total, members[0], scores[0], *chained.dense())

    def _rewrite(self, node_id: str, node: Leaf, fresh: bool, ops: list[tuple[Any, str, Any]]) -> list[Summary]:
        """Apply ops to one entry set: a patch on the stored entry set it builds on when it may (see the class), else
        new entry sets. ``fresh``: made by this commit (then only a patch it made can be patched again)."""
        keys, members, scores = list(node.keys), list(node.members), list(node.scores)
        patch = node.patch
        base = None if not self.patching or (fresh and patch is None) else node_id if patch is None else patch[0]
        removed: dict[Any, tuple[str, Any]] = {}
        added: dict[Any, tuple[str, Any]] = {}
        if patch is not None and base is not None:
            keyfn = self.tree.keyfn
            removed.update((keyfn(m, s), (m, s)) for m, s in zip(*patch[1]))
            added.update((keyfn(m, s), (m, s)) for m, s in zip(*patch[2]))
        for key, member, score in ops:
            i = bisect_left(keys, key)
            found = i < len(keys) and keys[i] == key
            if base is not None:
                _note(removed, added, key, (members[i], scores[i]) if found else None, member, score)
            if score is None:
                if found:
                    del keys[i], members[i], scores[i]
            elif found:
                members[i], scores[i] = member, score
            else:
                keys.insert(i, key)
                members.insert(i, member)
                scores.insert(i, score)
        whole = node if patch is None else None
        if base is not None and self._patchable(len(removed) + len(added), members, scores, whole, base):
            return [self._emit_patched(base, removed, added, keys, members, scores)]
        return self._emit_leaves(keys, members, scores)

    def _patchable(
        self, changes: int, members: Sequence[str], values: Sequence[Any], whole: Leaf | None, base: str
    ) -> bool:
        """Whether an entry set of ``members`` that differs from its stored ``base`` in ``changes`` entries is written
        as a patch: a fill that needs no split nor merge (in a set bounded in bytes, also a child's weight in its
        manifest, with the patch's longer id, within a quarter of the bound), and few changes, or else (``whole``: the
        base is the stored entry set, unpatched) one patch of up to a quarter of the chunk, in the set's turn
        (:meth:`_turn`)."""
        least, most = self.leaf_fill
        size, bound = len(members), self.node_bytes
        if size > most or not members:
            return False
        if bound is not None:
            weighs = weight(0, members, (), values)
            if weighs > bound or not full(size, weighs, least, bound):
                return False
            if 4 * weight(1, members[:1], [f"{base}{JOIN}{self.id_sample}"]) > bound:
                return False
        elif size < least:
            return False
        if changes <= self.patch_most:
            return True
        return whole is not None and changes <= self.one_patch and self._turn(whole)

    def _turn(self, whole: Leaf) -> bool:
        """Whether a merge of this parity (:attr:`mdss._head.Head.merges`) may patch ``whole`` past ``patch_most``.

        Where each merge changes more than ``patch_most`` entries of an entry set (a board's merges change some 70 of a
        thousand), patches do not add up: an entry set takes one and is rewritten by the next merge. Every entry set
        would then do the same in step, every other merge rewriting the whole tree, and for the grace after it both
        trees would be stored. Instead an entry set takes its one patch only in merges of the parity of its first
        member's CRC-32, else it is rewritten now: each merge rewrites half the tree and patches the other half, and
        writes about half the bytes a merge that rewrites everything would.
        """
        first = whole.members[0] if whole.members else ""
        return zlib.crc32(first.encode("utf-8", "surrogatepass")) % 2 == self.phase

    def _emit_patched(
        self,
        base: str,
        removed: dict[Any, tuple[str, Any]],
        added: dict[Any, tuple[str, Any]],
        keys: list[Any],
        members: list[str],
        scores: list[Any],
    ) -> Summary:
        """A patched entry set: the entry set ``members`` and ``scores`` make, stored as its changes on ``base``."""
        node_id = f"{base}{JOIN}{new_id(self.epoch)}"
        gone = [removed[k] for k in sorted(removed)]
        new = [added[k] for k in sorted(added)]
        patch = (base, _columns(gone), _columns(new))
        self.new[node_id] = Leaf(tuple(keys), tuple(members), tuple(scores), patch)
        if self.dense:
            return (node_id, len(keys), members[0], scores[0], len(set(scores)), scores[-1])
        return (node_id, len(keys), members[0], score_of(scores[0]), None, None)

    def _flush_full(self) -> None:
        """Hand the full entry sets this commit made to ``flush``, once ``FLUSH_LEAVES`` of them wait."""
        full_leaves = [i for i, node in self.new.items() if node.height == 0 and not self._underfull(node)]
        if len(full_leaves) < FLUSH_LEAVES:
            return
        assert self.flush is not None
        encoded = {}
        for node_id in full_leaves:
            node = self.new.pop(node_id)
            assert isinstance(node, Leaf)
            data = encoded[stored_id(node_id)] = node.encode()
            if node.patch is None:
                self.flushed[0] += len(node)
                self.flushed[1] += weight_of(data)
            else:
                self._flushed_bases.add(node.patch[0])
        self.flush(encoded)

    def _merge_underfull(self, children: list[Summary], height: int) -> None:
        """Merge every child under the minimum fill (:func:`mdss._tree.full`) with a neighbour (then split evenly if too
        big). Only nodes this commit wrote can be under-filled (the invariant depends on the node alone), so only
        children in ``new`` are looked at; a merge's children are fixed one level down in turn.
        """
        new, underfull = self.new, self._underfull
        while len(children) > 1:
            i = next((k for k, c in enumerate(children) if c[0] in new and underfull(new[c[0]])), None)
            if i is None:
                return
            a = i if i + 1 < len(children) else i - 1
            left, right = self._take(children[a][0], height), self._take(children[a + 1][0], height)
            if height == 0:
                items: Any = (left.keys + right.keys, left.members + right.members, left.scores + right.scores)
            else:
                items = left.summaries() + right.summaries()
                self._merge_underfull(items, height - 1)
            children[a : a + 2] = self._emit(items, height)

    def build(self, tree: Tree, members: Sequence[str], scores: Sequence[Any]) -> tuple[str | None, int, int]:
        """Build a whole tree bottom-up from entries already in key order (bulk load). Its entry sets go to ``built`` as
        bytes, never held decoded (a million decoded entries would only feed the garbage collector)."""
        self._start(tree)
        root, height = self._grow(self._emit_leaves(None, members, scores), 0)
        return (None, 0, 0) if root is None else (root[0], height, root[1])

    def stream(
        self,
        tree: Tree,
        blocks: Iterable[tuple[Sequence[str], Sequence[Any]]],
        flush: Callable[[dict[str, bytes]], None],
    ) -> tuple[str | None, int, int]:
        """:meth:`build` from blocks of entries in key order, handing each block's entry sets to ``flush`` (as
        ``built``: id -> bytes) as they are made, so that a load holds one block at a time, not the whole set. A
        block's last node waits for the next block (it might be under-filled), and is cut anew with it."""
        self._start(tree)
        summaries: list[Summary] = []
        members: list[str] = []
        scores: list[Any] = []
        for more_members, more_scores in blocks:
            members += more_members
            scores += more_scores
            cuts = self._cuts(members, 0, (), scores)
            if len(cuts) > 2:
                summaries += self._emit_leaves(None, members, scores, cuts[:-1])
                del members[: cuts[-2]], scores[: cuts[-2]]
                flush(self.built)
                self.built = {}
        summaries += self._emit_leaves(None, members, scores)
        flush(self.built)
        self.built = {}
        root, height = self._grow(summaries, 0)
        return (None, 0, 0) if root is None else (root[0], height, root[1])

    def encoded(self, keyspace: Keyspace) -> dict[str, bytes]:
        """The new nodes as store key -> bytes (a patched entry set's: its patch)."""
        nodes = {keyspace.node(stored_id(node_id)): node.encode() for node_id, node in self.new.items()}
        nodes.update((keyspace.node(node_id), data) for node_id, data in self.built.items())
        return nodes


def _columns(entries: list[tuple[str, Any]]) -> tuple[tuple[str, ...], tuple[Any, ...]]:
    return tuple(m for m, _ in entries), tuple(s for _, s in entries)


def _note(
    removed: dict[Any, tuple[str, Any]],
    added: dict[Any, tuple[str, Any]],
    key: Any,
    held: tuple[str, Any] | None,
    member: str,
    score: Any,
) -> None:
    """Record one op (``score`` ``None``: delete) in a patch's ``removed`` and ``added`` entries (of its base, and not
    in it), given the entry ``held`` at ``key`` before the op (``None``: none)."""
    if score is None:
        if held is not None:
            if key in added:
                del added[key]
            else:
                removed[key] = held
    elif held is not None:
        if key in added:
            added[key] = (member, score)
        elif held[0] != member or not same_value(held[1], score):
            removed[key] = held
            added[key] = (member, score)
    else:
        was = removed.get(key)
        if was is not None and was[0] == member and same_value(was[1], score):
            del removed[key]
        else:
            added[key] = (member, score)


def patches_fit(chunk_size: int, limit: int | None) -> bool:
    """Whether a store of values of up to ``limit`` bytes holds manifests of patched entry sets (two ids per child):
    else merges write entry sets whole, as before patches, whatever chunk size the set was made with."""
    return limit is None or largest_node_bytes(chunk_size, ids=2) <= limit


@functools.lru_cache(maxsize=16)
def deltas_fit(chunk_size: int, limit: int | None) -> int:
    """The most deltas a manifest may take in a store of values of up to ``limit`` bytes: its parent names it with one
    id more per delta (none where patched entry sets do not fit either)."""
    if not patches_fit(chunk_size, limit):
        return 0
    most = MAX_DELTAS
    while limit is not None and most and largest_node_bytes(chunk_size, ids=most + 1) > limit:
        most -= 1
    return most


@functools.lru_cache(maxsize=16)
def largest_node_bytes(chunk_size: int, ids: int = 1) -> int:
    """The size of the largest node a set of ``chunk_size`` can store: an entry set or a score tree's manifest full of
    the longest members, scores, counts and node ids (``ids`` per child: two for a patched entry set, one more per
    delta of a manifest), encoded as mdss encodes them."""
    member, number, node_id = "m" * MAX_MEMBER_BYTES, -(2**63), new_id(2**64 - 1)
    members, numbers = [member] * chunk_size, [number] * chunk_size
    leaf = encode_leaf(members, numbers, compress=False)  # the largest: what does not compress is stored as it is
    child = JOIN.join([node_id] * ids)
    manifest = encode_manifest(64, [child] * chunk_size, numbers, members, numbers, [2**63 - 1] * chunk_size, numbers)
    return max(len(leaf), len(manifest))


def check_chunk_size(chunk_size: int, limit: int | None, store_name: str) -> None:
    """Refuse a chunk size whose largest possible node would not fit in one value of ``limit`` bytes (a store's
    ``max_value_bytes``; ``None``: no check), saying the largest that fits. A set calls it when it opens, so that a
    commit never fails halfway through a load on a node too large."""
    if limit is None or largest_node_bytes(chunk_size) <= limit:
        return
    fits = chunk_size * limit // largest_node_bytes(chunk_size)
    while fits > 2 and largest_node_bytes(fits) > limit:
        fits -= 1
    raise InvalidArgumentError(
        f"chunk_size={chunk_size} makes nodes of up to {largest_node_bytes(chunk_size):,} bytes (entries with "
        f"the longest members), and {store_name} holds at most {limit:,} bytes per value: "
        f"use chunk_size={fits} or less"
    )


def data_room(chunk_size: int, limit: int | None) -> int:
    """The most bytes of data a member may carry in a set of ``chunk_size`` on a store holding at most ``limit`` bytes
    per value: :data:`MAX_DATA_BYTES`, less where a member index entry set full of the longest members and data would
    not fit (DynamoDB at large chunk sizes; a smaller ``chunk_size`` leaves more). Data costs its bytes and a header of
    up to 5 (msgpack: the value's array and the data's length)."""
    if limit is None:
        return MAX_DATA_BYTES
    spare = (limit - largest_node_bytes(chunk_size)) // chunk_size - 5
    return max(min(spare, MAX_DATA_BYTES), 0)
