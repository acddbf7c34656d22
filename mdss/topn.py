"""Top-N sets: "the top 10 of all time" as one small object, with read repair of concurrent writers.

One object holds the best ``n`` entries. On a store that keeps siblings (Riak with ``allow_mult``) concurrent writes
become siblings that a read merges (:func:`merge`) and writes back (read repair), so every interleaving ends in the top
``n`` of every score posted; on compare-and-set stores, a compare-and-set loop. Stored as ``seal(msgpack([2, n, order,
members, scores]))``, best first; format 1 (no checksum) is still read, and the next write makes it format 2.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import attrs

from ._codec import FORMAT, pack, seal, unpack
from ._keys import Keyspace
from ._order import (
    MAX_MEMBER_BYTES,
    Entry,
    Order,
    Score,
    check_choice,
    check_member,
    check_score,
    check_seconds,
    checked_pairs,
    exact,
)
from ._retry import COMMITS
from .exceptions import ConflictError, CorruptDataError, InvalidArgumentError, SettingsMismatchError, shown
from .stores.base import Record, Store

Pairs = list[tuple[str, Score]]


#: The most entries a top-N set may be asked to keep (its stored settings hold it in 32 bits; its entries are one value
#: in the store, which bounds them far sooner).
MAX_N = 2**32


def merge(order: Order, n: int, *parts: Iterable[tuple[str, Score]]) -> Pairs:
    """The top ``n`` of the union of ``parts``, each member with its best score, best first.

    Commutative, associative and idempotent: any order or grouping, once or many times, gives the same result.

    >>> merge(Order("desc"), 2, [("a", 1), ("b", 5)], [("a", 7), ("c", 3)])
    [('a', 7), ('b', 5)]
    """
    best: dict[str, Score] = {}
    for part in parts:
        for member, score in part:
            old = best.get(member)
            best[member] = score if old is None else order.better(old, score)
    ranked = sorted(best.items(), key=lambda item: order.key(item[0], item[1]))
    return ranked[:n]


class TopN:
    """The best ``n`` entries ever posted to a named object in ``store``.

    A post that loses a compare-and-set race is retried for up to ``retry_budget`` seconds (``max_attempts`` at most).

    >>> podium = TopN(mdss.open_store("memory://"), "podium", n=3)
    >>> podium.post_many({"ann": 7, "bob": 9, "cid": 8, "dee": 1})
    True
    >>> podium.post("dee", 2)  # cannot enter a full top 3: no write
    False
    >>> [(e.member, e.score, e.rank) for e in podium.top()]
    [('bob', 9, 1), ('cid', 8, 2), ('ann', 7, 3)]
    """

    def __init__(
        self,
        store: Store,
        name: str,
        n: int = 10,
        order: str = "desc",
        *,
        retry_budget: float = COMMITS.budget,
        max_attempts: int | None = None,
    ) -> None:
        if type(n) is not int or not 1 <= n <= MAX_N:
            raise InvalidArgumentError(f"n must be an int from 1 to {MAX_N:,}, got {shown(n)}")
        check_seconds(retry_budget, "retry_budget")
        if max_attempts is not None and (type(max_attempts) is not int or max_attempts < 1):
            raise InvalidArgumentError(f"max_attempts must be an int >= 1 or None, got {shown(max_attempts)}")
        self.store, self.name, self.n = store, exact(name), n
        self.order = Order(order)
        self._check_fits(store.max_value_bytes)
        self.key = Keyspace(store.namespace, name).topn
        self._policy = attrs.evolve(COMMITS, budget=float(retry_budget), max_attempts=max_attempts)

    def __repr__(self) -> str:
        return f"TopN({self.name!r}, n={self.n}, order={self.order.name!r})"

    def _largest(self, n: int) -> int:
        """The bytes of a full top of ``n`` entries with the longest members and scores (the msgpack headers of the
        lists grow at 16 and 65,536 entries: measured past both, then each entry adds the same)."""
        entry = ("m" * MAX_MEMBER_BYTES, -(2**63))
        small = min(n, 65_537)
        return len(self._encode([entry] * small)) + (n - small) * (
            len(self._encode([entry] * 2)) - len(self._encode([entry]))
        )

    def _check_fits(self, limit: int | None) -> None:
        """Refuse an ``n`` whose full top might not fit in one value of the store (DynamoDB: 400 KB), saying the largest
        that does: past it, posts of long members were refused once the value filled, the top never full."""
        if limit is None or self._largest(self.n) <= limit:
            return
        fits = self.n * limit // self._largest(self.n)
        while fits > 1 and self._largest(fits) > limit:
            fits -= 1
        raise InvalidArgumentError(
            f"n={self.n} makes a top of up to {self._largest(self.n):,} bytes (with the longest members), and this "
            f"store holds at most {limit:,} bytes per value: use n={fits} or less"
        )

    # -- encoding ---------------------------------------------------------------

    def _encode(self, entries: Pairs) -> bytes:
        return seal(pack([FORMAT, self.n, self.order.name, [m for m, _ in entries], [s for _, s in entries]]))

    def _decode(self, data: bytes) -> Pairs:
        """The entries of one stored value, every field checked; :class:`CorruptDataError` naming the key if not.

        Bytes that fail the checksum are read as format 1, which has none; damaged format-2 bytes fail that too."""
        _, value = unpack(self.key, data, "top-N set")
        if type(value) is not list or len(value) != 5:
            raise self._corrupt("is malformed (not [version, n, order, members, scores])")
        _, n, order, members, scores = value
        if type(n) is not int or n < 1 or type(order) is not str or order not in ("asc", "desc"):
            raise self._corrupt(f"has impossible settings n={shown(n, 40)}, order={shown(order, 40)}")
        if (n, order) != (self.n, self.order.name):
            raise SettingsMismatchError(
                f"top-N set {self.name!r} is stored with n={n}, order={order!r}: open it with those (mdss topn -n {n})"
            )
        if type(members) is not list or type(scores) is not list or not len(members) == len(scores) <= n:
            raise self._corrupt(f"is malformed: not {n} members or fewer, each with a score")
        try:
            entries = [(check_member(m), check_score(s)) for m, s in zip(members, scores)]
        except InvalidArgumentError as exc:
            raise self._corrupt(f"holds a bad entry: {exc}") from None
        keys = [self.order.key(m, s) for m, s in entries]
        if any(a >= b for a, b in zip(keys, keys[1:])) or len(set(members)) < len(members):
            raise self._corrupt("is out of order or repeats a member")
        return entries

    def _corrupt(self, why: str) -> CorruptDataError:
        return CorruptDataError(f"stored top-N set {self.name!r} {why}", self.key)

    def _read(self) -> tuple[Record | None, Pairs]:
        """The stored record and the merge of all its siblings."""
        record = self.store.get(self.key)
        if record is None:
            return None, []
        return record, merge(self.order, self.n, *(self._decode(value) for value in record.values))

    # -- reads and writes ---------------------------------------------------------

    def top(self, *, ties: str = "ordinal") -> list[Entry]:
        """The best ``n`` entries, ranked as :meth:`SortedSet.rank` ranks; one read, and a write to repair siblings.

        >>> podium = TopN(mdss.open_store("memory://"), "p", 4)
        >>> podium.post_many({"ann": 5, "bob": 5, "cid": 9, "dee": 1})
        True
        >>> [e.rank for e in podium.top(ties="competition")], [e.rank for e in podium.top(ties="dense")]
        ([1, 2, 2, 4], [1, 2, 2, 3])
        """
        check_choice(ties, ("ordinal", "competition", "dense"), "ties")
        record, entries = self._read()
        if record is not None and len(record.values) > 1:
            self.store.put(self.key, self._encode(entries), context=record.version)  # read repair
        ranks = list(range(1, len(entries) + 1))
        for i in range(1, len(entries)):
            if ties != "ordinal" and entries[i][1] == entries[i - 1][1]:
                ranks[i] = ranks[i - 1]
            elif ties == "dense":
                ranks[i] = ranks[i - 1] + 1
        return [Entry(m, s, r) for (m, s), r in zip(entries, ranks)]

    def __len__(self) -> int:
        return len(self._read()[1])

    def threshold(self) -> Score | None:
        """The score a new member must beat to enter (ties broken by member), or ``None`` while not full."""
        entries = self._read()[1]
        return entries[-1][1] if len(entries) == self.n else None

    def post(self, member: str, score: Score) -> bool:
        """Record a score; the member keeps its best. Returns whether the top ``n`` changed (if not: no write)."""
        return self.post_many([(member, score)])

    def post_many(self, pairs: Mapping[str, Score] | Iterable[tuple[str, Score]]) -> bool:
        """Record many scores in one write (a member posted more than once keeps its best); returns whether the top
        ``n`` changed."""
        posted = list(checked_pairs(pairs.items() if isinstance(pairs, Mapping) else pairs))
        for _ in self._policy.attempts():
            record, current = self._read()
            merged = merge(self.order, self.n, current, posted)
            if merged == current and (record is None or len(record.values) == 1):
                return False
            data = self._encode(merged)
            if self.store.keeps_siblings:  # no coordination: a concurrent write becomes a sibling
                self.store.put(self.key, data, context=None if record is None else record.version)
                return merged != current
            try:
                self.store.cas(self.key, data, None if record is None else record.version)
                return merged != current
            except ConflictError:
                continue  # another writer moved the object: merge into what it wrote
        raise ConflictError(
            f"top-N set {self.name!r} lost the race for its key on every attempt (retry_budget "
            f"{self._policy.budget:g} s, max_attempts {self._policy.max_attempts}); the post was not applied"
        )


__all__ = ["TopN", "merge"]
