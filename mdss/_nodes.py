"""The nodes of a tree: entry sets (:class:`Leaf`) and manifests, their fill rules, and their decoding.

An *entry set* (leaf) holds at most ``chunk`` entries in key order. A *manifest* holds 2 to ``max(chunk, 3)``
children (:func:`fill`) and, for each, its id, its entry count and its first entry (member and score, from which
the child's first key derives); in the score tree also the child's number of distinct scores and its last score,
for dense ranks. Nodes are immutable; ``mdss._writer`` makes new ones copy-on-write.

A merge that changes a few entries of a stored entry set may write only a *patch* (the entries it removed and added)
and name the child ``base+patch`` (:data:`JOIN`): a reader fetches both in the same ``get_many`` and reads the entry set
the two make (:func:`assemble`), so the patch costs bytes, never a round trip. A merge that changes a few children of
a stored manifest below the root may write only a *delta* (the children it took out and put in) and name the child
``base+delta``; the next such merge adds another, ``base+delta+delta``, up to :data:`MAX_DELTAS` (:func:`chained`).
"""

from __future__ import annotations

import threading
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Sequence
from itertools import accumulate, compress
from operator import itemgetter, ne
from typing import Any

from ._codec import (
    LEAF,
    checked_value,
    checked_values,
    decode_delta,
    decode_node,
    decode_patch,
    encode_delta,
    encode_leaf,
    encode_manifest,
    encode_patch,
    values_later,
    weight_of,
)
from ._order import NODE_KEYS, KeyFn, member_key, same_value, tie_key
from .exceptions import CorruptDataError, MissingNodeError

#: A child summary: (node id, entry count, first member, first score, distinct scores, last score); the last two
#: ``None`` in the member index, and where unknown (a child summarized before format 3).
Summary = tuple[str, int, str, Any, Any, Any]

_LEARN = threading.Lock()

#: What joins a patched child's two ids, ``base+patch`` (node ids never hold it).
JOIN = "+"

#: A patch: the base entry set's id, then the entries removed from it and those added, each ``(members, scores)`` in
#: key order.
Patch = tuple[str, tuple[tuple[str, ...], tuple[Any, ...]], tuple[tuple[str, ...], tuple[Any, ...]]]

#: The most deltas a manifest takes on its base before it is written whole (a cold read fetches them all, in the same
#: ``get_many`` as the base).
MAX_DELTAS = 8

#: A manifest's deltas: the weight of its base (:func:`weight`) and of its deltas together (:func:`delta_weight`), and
#: its own last delta, the children it took out (first members, first scores) and the summaries it put in (as columns,
#: in key order).
Delta = tuple[int, int, tuple[tuple[str, ...], tuple[Any, ...]], tuple[Any, ...]]


def parts(node_id: str) -> list[str]:
    """The stored nodes behind a child id: itself, or a patched entry set's base and patch."""
    return node_id.split(JOIN)


def stored_id(node_id: str) -> str:
    """The id of the one stored node a commit writes for this child id: itself, or a patched entry set's patch."""
    return node_id.rpartition(JOIN)[2]


def fill(chunk: int, height: int) -> tuple[int, int]:
    """The fewest and most items a node at ``height`` holds (a root: from 1, or 2 for a manifest).

    Entry sets hold ``chunk // 2 .. chunk`` entries (at least 1). Manifests hold ``max(chunk, 3) // 2 ..
    max(chunk, 3)`` children, and never fewer than 2: a manifest with one child adds a level without halving what
    is below it, and chunk sizes 2 and 3 (halved: 1) would let a tree fed in key order grow one level per merge,
    hundreds deep. A fan-out of 2 to 3 is the smallest for which even splits keep every part at 2 or more.
    """
    if height == 0:
        return max(chunk // 2, 1), chunk
    most = max(chunk, 3)
    return max(most // 2, 2), most


#: A node's weight, when a set bounds its bytes (``node_bytes``): per entry, its member's UTF-8 bytes plus a score and
#: msgpack headers; per manifest child, its first member plus an id, a count, a score and the dense summary. Upper
#: bounds of the encoded sizes: a node of weight ``w`` stores in at most ``w`` bytes and a few more for its frame.
ENTRY_BYTES = 12
CHILD_BYTES = 64
#: The characters of a child's id that :data:`CHILD_BYTES` holds: a node id of one node (``mdss._writer.new_id``). A
#: patched entry set's (``base+patch``) is longer: a manifest's weight counts such ids again, whole.
ID_CHARS = 31


def _data_bytes(value: Any) -> int:
    """The bytes a value carries beyond a number: a member index value's data (a record window's row, a member's
    data), a record window's tie (a str score); 0 for a number."""
    if type(value) is str:
        return len(value) if value.isascii() else len(value.encode("utf-8"))
    if type(value) is not tuple or value[1] is None:
        return 0
    data = value[1]
    return len(data) if type(data) is bytes or data.isascii() else len(data.encode("utf-8"))


def _carry(values: Sequence[Any]) -> bool:
    """Whether some of ``values`` carry bytes beyond a number (:func:`_data_bytes`)."""
    return bool(values) and not set(map(type, values)) <= {int, float}


def weights(height: int, members: Sequence[str], ids: Sequence[str] = (), values: Sequence[Any] = ()) -> list[int]:
    """The weight (:data:`ENTRY_BYTES`) of each item of a node at ``height`` with (first) members ``members``; a
    manifest's children's ``ids``, if given, add the characters of those longer than :data:`ID_CHARS`; an entry set's
    ``values``, if given, the bytes of their data (rows) or ties."""
    extra = CHILD_BYTES if height else ENTRY_BYTES
    found = [(len(m) if m.isascii() else len(m.encode("utf-8"))) + extra for m in members]
    for i, node_id in enumerate(ids):
        if len(node_id) > ID_CHARS:
            found[i] += len(node_id)
    if _carry(values):
        found = [w + _data_bytes(v) for w, v in zip(found, values)]
    return found


def weight(height: int, members: Sequence[str], ids: Sequence[str] = (), values: Sequence[Any] = ()) -> int:
    """``sum(weights(height, members, ids, values))``, at C speed: one join, and an encoding only if it is not ASCII;
    the values' data only when some carry it."""
    joined = "".join(members)
    size = len(joined) if joined.isascii() else len(joined.encode("utf-8"))
    if _carry(values):
        size += sum(map(_data_bytes, values))
    return (
        size + (CHILD_BYTES if height else ENTRY_BYTES) * len(members) + sum(len(i) for i in ids if len(i) > ID_CHARS)
    )


def full(count: int, weight: int, least: int, node_bytes: int | None) -> bool:
    """Whether a node of ``count`` items and ``weight`` bytes may stand as a non-root node: ``least`` items or more or,
    when nodes are bounded in bytes, over a quarter of ``node_bytes``: what even splits can promise when no item weighs
    over a quarter of the bound (``mdss._writer.Writer._cuts``); a byte-full manifest then has two children or more."""
    return count >= least or node_bytes is not None and 4 * weight > node_bytes


def group_starts(scores: Sequence[Any]) -> tuple[int, ...]:
    """Where each tie group (a run of equal scores) of ``scores`` starts: 0, then every index whose score
    differs from the one before (``1 == 1.0``: one group)."""
    if not scores:
        return ()
    return (0, *compress(range(1, len(scores)), map(ne, scores[1:], scores[:-1])))


class Leaf:
    """An entry set: parallel tuples, ``keys`` derived from members and scores. With the update log applied, as a read
    last merged them: ``merged``, its entries (``mdss._overlay.View.keep``); ``gathered``, its keys for a sharded set
    (``mdss._gather.Layout.region``).

    An entry set of a record window's score tree, decoded, makes its keys ``(tie, member)`` only when something asks
    for them (:meth:`from_ties`): :meth:`position` finds a probe among its ties, then its members, so a cold rank, which
    decodes such an entry set to count below one key, does not build a thousand tuples for that."""

    __slots__ = ("_keys", "members", "_scores", "_unchecked", "patch", "merged", "gathered", "_groups", "__weakref__")
    height = 0

    def __init__(
        self,
        keys: Sequence[Any] | None,
        members: Sequence[str],
        scores: Sequence[Any],
        patch: Patch | None = None,
        unchecked: str | None = None,
    ) -> None:
        self._keys, self.members, self._scores, self.patch = keys, members, scores, patch
        self._unchecked = unchecked  # the stored key of values with data not checked yet (mdss._codec.values_later)
        self.merged: Any = None
        self.gathered: Any = None
        self._groups: tuple[int, ...] | None = None

    @property
    def scores(self) -> Sequence[Any]:
        """The values (scores, or values with data), checked all at once on first use if the decode left them."""
        if self._unchecked is not None:
            checked_values(self._unchecked, self._scores)  # type: ignore[arg-type]
            self._unchecked = None
        return self._scores

    def value_at(self, i: int) -> Any:
        """The ``i``-th value, checked alone if the decode left the values unchecked (a lookup of one member)."""
        value = self._scores[i]
        return value if self._unchecked is None else checked_value(self._unchecked, value)

    @classmethod
    def from_ties(cls, members: Sequence[str], ties: Sequence[str]) -> Leaf:
        """An entry set keyed ``(tie, member)`` (``mdss._order.tie_key``), its keys made when first asked for."""
        return cls(None, members, ties)

    @property
    def keys(self) -> Sequence[Any]:
        keys = self._keys
        if keys is None:  # keyed by ties: (tie, member), in the order of the ties, then the members
            keys = self._keys = tuple(zip(self.scores, self.members))
        return keys

    def position(self, probe: Any) -> int:
        """How many keys are below ``probe`` (``bisect_left`` of the keys). Keyed by ties and not yet spelled out, a
        probe ``(tie,)`` or ``(tie, member)`` is found among the ties, then among the members of its tie."""
        keys = self._keys
        if keys is not None or type(probe) is not tuple or not 0 < len(probe) <= 2 or type(probe[0]) is not str:
            return bisect_left(self.keys, probe)
        ties, tie = self.scores, probe[0]
        low = bisect_left(ties, tie)
        if len(probe) == 1 or type(probe[1]) is not str:
            return low if len(probe) == 1 else bisect_left(self.keys, probe)
        return bisect_left(self.members, probe[1], low, bisect_right(ties, tie, low))

    def keyed_by_member(self) -> bool | None:
        """Whether the keys are members (the member index's), tuples (the score tree's), ``None`` when empty; without
        spelling out the keys of an entry set keyed by ties."""
        if not self.members:
            return None
        return False if self._keys is None else type(self._keys[0]) is str

    def __len__(self) -> int:
        return len(self.members)

    def groups(self) -> tuple[int, ...]:
        """:func:`group_starts` of the scores, computed once (the node is immutable)."""
        found = self._groups
        if found is None:
            found = self._groups = group_starts(self.scores)
        return found

    def dense(self) -> tuple[int, Any]:
        """(distinct scores, last score): what a score tree manifest records of this entry set."""
        return len(self.groups()), self.scores[-1]

    def encode(self) -> bytes:
        """What a commit stores for it: the entry set, or for a patched one only its patch."""
        if self.patch is not None:
            return encode_patch(self.patch[1], self.patch[2])
        return encode_leaf(self.members, self.scores)


def cached_weight(node: Node, data: bytes) -> int:
    """What a node counts for in the node cache, whether read or just written: its stored bytes ``data``
    (``weight_of``), or for a patched entry set or a manifest with deltas (``data`` its last patch or delta), the
    whole node's weight (:func:`weight`) and those bytes."""
    if node.patch is None:
        return weight_of(data)
    return weight(node.height, node.members) + len(data)


def patched(base: Leaf, base_id: str, key: str, data: bytes, keyfn: KeyFn) -> Leaf:
    """The entry set a stored entry set and its patch (stored at ``key``) make. A patch that removes an entry the base
    lacks, or adds one it holds, is damage: :class:`CorruptDataError`."""
    gone_members, gone_scores, new_members, new_scores = decode_patch(key, data)
    _scores_fit(gone_scores + new_scores, keyfn, key)
    keys, members, scores = list(base.keys), list(base.members), list(base.scores)
    try:
        for member, score in zip(gone_members, gone_scores):
            k = keyfn(member, score)
            i = bisect_left(keys, k)
            if i == len(keys) or keys[i] != k or members[i] != member or not same_value(scores[i], score):
                raise CorruptDataError(f"stored patch removes {member!r}, which its entry set does not hold", key)
            del keys[i], members[i], scores[i]
        for member, score in zip(new_members, new_scores):
            k = keyfn(member, score)
            i = bisect_left(keys, k)
            if i < len(keys) and keys[i] == k:
                raise CorruptDataError(f"stored patch adds {member!r}, which its entry set holds already", key)
            keys.insert(i, k)
            members.insert(i, member)
            scores.insert(i, score)
    except TypeError as exc:
        raise CorruptDataError(f"stored patch holds a value of the wrong type: {exc}", key) from None
    if not keys:
        raise CorruptDataError("stored patch leaves its entry set empty", key)
    patch = (base_id, (gone_members, gone_scores), (new_members, new_scores))
    return Leaf(tuple(keys), tuple(members), tuple(scores), patch)


def delta_weight(height: int, gone: Sequence[str], new: Sequence[str]) -> int:
    """The weight (:func:`weight`) of a delta that takes out the children with first members ``gone`` and puts in those
    with ``new``: what a writer weighs against its base (``mdss._writer.Writer``)."""
    return weight(0, gone) + weight(height, new)


def chained(base: Manifest, deltas: Sequence[tuple[str, bytes]], keyfn: KeyFn) -> Manifest:
    """The manifest a stored manifest and its ``deltas`` (``(key, stored bytes)``, in order) make. A delta for another
    height, or that takes out a child the manifest lacks or puts in one it holds, is damage: :class:`CorruptDataError`.
    The deltas' changes are gathered by key first and merged with the base's children once: a chain of eight costs
    about one pass over the manifest, not one per change."""
    n = len(base.ids)
    at = dict(zip(base.firsts, range(n)))  # a base child's index by key, while it is still in
    added: dict[Any, tuple[Any, ...]] = {}  # the children the deltas put in (and did not take out again), by key
    dense, chain, patch = base.distincts is not None, 0, None
    base_weight = weight(base.height, base.members)
    for key, data in deltas:
        height, gone_members, gone_scores, *new = decode_delta(key, data)
        if height != base.height:
            raise CorruptDataError(f"stored manifest delta is for height {height}, its base is {base.height}", key)
        dense = dense or new[4] is not None
        try:
            for member, score in zip(gone_members, gone_scores):
                k = keyfn(member, score)
                row = added.pop(k, None)
                if row is not None:
                    held = row[2], row[3]
                else:
                    i = at.pop(k, None)
                    held = (None, None) if i is None else (base.members[i], base.scores[i])
                if held[0] != member or not same_value(held[1], score):
                    raise CorruptDataError(f"stored manifest delta takes out {member!r}, which it does not hold", key)
            nothing = (None,) * len(new[0])
            for row in zip(*new[:4], new[4] or nothing, new[5] or nothing):
                k = keyfn(row[2], row[3])
                if k in added or k in at:
                    raise CorruptDataError(f"stored manifest delta puts in {row[2]!r}, which it holds already", key)
                added[k] = row
        except TypeError as exc:
            raise CorruptDataError(f"stored manifest delta holds a value of the wrong type: {exc}", key) from None
        if len(at) + len(added) < 2:
            raise CorruptDataError("stored manifest delta leaves its manifest under two children", key)
        chain += delta_weight(height, gone_members, new[2])
        patch = (base_weight, chain, (gone_members, gone_scores), tuple(new))
    nothing = (None,) * n
    columns = base.firsts, base.ids, base.counts, base.members, base.scores, base.distincts, base.lasts
    rows = list(zip(*columns[:5], columns[5] or nothing, columns[6] or nothing))
    merged = [rows[i] for i in sorted(at.values())] + [(k, *row) for k, row in added.items()]
    try:
        merged.sort(key=itemgetter(0))  # two sorted runs, if the added keys are in order: one merge
    except TypeError as exc:
        raise CorruptDataError(f"stored manifest delta holds a value of the wrong type: {exc}", deltas[-1][0]) from None
    keys, ids, counts, members, scores, distincts, lasts = zip(*merged)
    if not dense:
        distincts = lasts = None  # type: ignore[assignment]
    return Manifest(base.height, ids, counts, members, scores, keys, distincts, lasts, patch)


def assemble(node_id: str, keys: Sequence[str], datas: Sequence[bytes | None], keyfn: KeyFn) -> tuple[Node, int]:
    """The node a child id names, from its stored values (``keys``, ``datas``: one node, an entry set and its patch, or
    a manifest and its deltas in order), and its weight in the node cache (:func:`cached_weight`)."""
    for key, data in zip(keys, datas):
        if data is None:
            raise MissingNodeError("a node the head names is missing", key)
    node = decode(keys[0], datas[0], keyfn)  # type: ignore[arg-type]
    if len(keys) == 1:
        return node, weight_of(datas[0])  # type: ignore[arg-type]
    if isinstance(node, Manifest):
        if len(keys) > MAX_DELTAS + 1:
            raise CorruptDataError(f"a manifest names {node_id!r}, which has over {MAX_DELTAS} deltas", keys[0])
        node = chained(node, list(zip(keys[1:], datas[1:])), keyfn)  # type: ignore[arg-type]
        return node, cached_weight(node, datas[-1])  # type: ignore[arg-type]
    if len(keys) != 2:
        raise CorruptDataError(f"a manifest names {node_id!r}, an entry set with more than one patch", keys[0])
    leaf = patched(node, parts(node_id)[0], keys[1], datas[1], keyfn)  # type: ignore[arg-type]
    return leaf, cached_weight(leaf, datas[1])  # type: ignore[arg-type]


class Manifest:
    """A manifest: its children's ids, counts and first keys (tuples); ``starts`` are prefix sums of counts. In the
    score tree also each child's distinct scores and last score (``distincts``, ``lasts``; ``None`` for a child
    summarized before format 3, and both ``None`` in the member index and in manifests of format 1 or 2).
    :meth:`dense_starts` are the distinct scores before each child. ``patch``: for a manifest with deltas, their
    :data:`Delta`."""

    __slots__ = (
        "height",
        "ids",
        "counts",
        "members",
        "scores",
        "firsts",
        "starts",
        "distincts",
        "lasts",
        "patch",
        "_dense",
    )

    def __init__(
        self,
        height: int,
        ids: Sequence[str],
        counts: Sequence[int],
        members: Sequence[str],
        scores: Sequence[Any],
        firsts: Sequence[Any],
        distincts: Sequence[int | None] | None = None,
        lasts: Sequence[Any] | None = None,
        patch: Delta | None = None,
    ) -> None:
        self.height, self.ids, self.counts, self.members, self.scores = height, ids, counts, members, scores
        self.firsts, self.patch = firsts, patch
        self.starts = (0, *accumulate(counts))
        self.distincts, self.lasts = distincts, lasts
        self._dense: Any = None

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def total(self) -> int:
        return self.starts[-1]

    def summaries(self) -> list[Summary]:
        if self.distincts is None:
            nothing = (None,) * len(self.ids)
            return list(zip(self.ids, self.counts, self.members, self.scores, nothing, nothing))
        return list(zip(self.ids, self.counts, self.members, self.scores, self.distincts, self.lasts))  # type: ignore[arg-type]

    def dense_starts(self) -> tuple[int, ...]:
        """``starts[i]``: the distinct scores of children ``0..i-1`` together, for ``i`` up to the first child whose
        count is unknown; a tie group crossing from child ``k-1`` into child ``k`` counts once."""
        distincts, cached = self.distincts, self._dense
        if cached is not None and cached[0] is distincts:
            return cached[1]
        starts = [0]
        if distincts is not None:
            lasts, scores = self.lasts, self.scores
            for k, d in enumerate(distincts):
                if d is None:
                    break
                starts.append(starts[-1] + d - (k > 0 and lasts[k - 1] == scores[k]))  # type: ignore[index]
        found = tuple(starts)
        self._dense = (distincts, found)
        return found

    def dense(self) -> tuple[int | None, Any]:
        """(distinct scores, last score) of the whole manifest, ``(None, None)`` where a child's is unknown."""
        starts = self.dense_starts()
        if len(starts) <= len(self.ids):
            return None, None
        return starts[-1], self.lasts[-1]  # type: ignore[index]

    def dense_before(self, i: int, distinct: int, last: Any) -> tuple[int, Any]:
        """The distinct scores and the last score of everything before child ``i``, given those before this
        manifest (``last`` ``None`` when nothing is). Children ``0..i-1`` must be known (:meth:`Tree.complete`)."""
        if not i:
            return distinct, last
        join = last is not None and last == self.scores[0]
        return distinct + self.dense_starts()[i] - join, self.lasts[i - 1]  # type: ignore[index]

    def learn(self, found: dict[int, tuple[int, Any]]) -> None:
        """Record the distinct scores and last scores of children, computed from them (for a format-2 node)."""
        n = len(self.ids)
        with _LEARN:  # values only go from unknown to known: concurrent learners never undo each other
            distincts = list(self.distincts or (None,) * n)
            lasts = list(self.lasts or (None,) * n)
            for i, (distinct, last) in found.items():
                distincts[i], lasts[i] = distinct, last
            self.lasts, self.distincts = tuple(lasts), tuple(distincts)  # facts of immutable children: shareable

    def child(self, key: Any) -> int:
        """The index of the child whose key range holds ``key`` (the first child for keys before all)."""
        i = bisect_right(self.firsts, key) - 1
        return i if i > 0 else 0

    def runs(self, keys: Sequence[Any], lo: int, hi: int) -> Iterable[tuple[int, int, int]]:
        """Route sorted ``keys[lo:hi]``: ``(child index, start, end)`` saying ``keys[start:end]`` fall in it. Two
        bisections per child touched, however many keys it receives."""
        firsts, last = self.firsts, len(self.firsts) - 1
        while lo < hi:
            i = self.child(keys[lo])
            end = bisect_left(keys, firsts[i + 1], lo, hi) if i < last else hi
            yield i, lo, end
            lo = end

    def encode(self) -> bytes:
        """What a commit stores for it: the manifest, or for one with deltas only its last delta."""
        if self.patch is not None:
            return encode_delta(self.height, self.patch[2], self.patch[3])
        fields = self.height, self.ids, self.counts, self.members, self.scores
        return encode_manifest(*fields, self.distincts, self.lasts)


Node = Leaf | Manifest


def _scores_fit(scores: Sequence[Any], keyfn: KeyFn, key: str) -> None:
    """Refuse scores of the other kind than the tree's (all of one kind: ``mdss._codec``): ties (strings) in a record
    window's score tree, numbers (or values) in every other tree."""
    if scores and (type(scores[0]) is str) is not (keyfn is tie_key):
        raise CorruptDataError("stored node holds scores of the wrong kind for its tree", key)


def decode(key: str, data: bytes, keyfn: KeyFn) -> Node:
    """Decode stored bytes into a node, deriving keys with ``keyfn(member, score)``."""
    fields = decode_node(key, data, values_checked=keyfn is not member_key)
    many = NODE_KEYS.get(keyfn)  # the keys of a whole node at once (the member index's: its members, a tuple already)
    try:
        if fields[0] == LEAF:
            members, scores = fields[1], fields[2]
            _scores_fit(scores, keyfn, key)
            if keyfn is tie_key:
                return Leaf.from_ties(members, scores)
            keys = many(members, scores) if many else tuple(map(keyfn, members, scores))
            unchecked = key if keyfn is member_key and values_later(scores) else None
            return Leaf(keys, members, scores, unchecked=unchecked)
        height, ids, counts, members, scores, distincts, lasts = fields[1:]
        _scores_fit(scores, keyfn, key)
        keys = many(members, scores) if many else tuple(map(keyfn, members, scores))
        return Manifest(height, ids, counts, members, scores, keys, distincts, lasts)
    except TypeError as exc:  # e.g. a score that is not a number
        raise CorruptDataError(f"stored node holds a value of the wrong type: {exc}", key) from None
