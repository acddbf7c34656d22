"""The head: the one mutable record of a set, and the snapshot a read takes of it.

A head names the roots of both trees (the score tree and the member index),
the set's settings, a generation that every commit increments, the gc epoch
(see ``mdss._garbage``), and the nonces of the last :data:`RECENT` commits,
newest first, so that a writer whose compare-and-set reply was lost can prove
whether its commit landed. Every head write goes through :meth:`Head.next`,
which keeps ``recent[i]`` the nonce of generation ``gen - i``.
"""

from __future__ import annotations

from typing import Any

import attrs

from ._codec import FORMAT, MAX_HEIGHT, _packb, seal, unpack
from ._order import KeyFn, member_key
from ._tree import Source, Tree
from .exceptions import CorruptDataError
from .stores.base import Record

#: How many commit nonces a head keeps (17 bytes each).
RECENT = 16
#: Largest chunk size (entries per entry set, children per manifest).
MAX_CHUNK = 100_000

LANDED, LOST, PENDING, UNKNOWN = "landed", "lost", "pending", "unknown"


@attrs.frozen
class TreeRef:
    """Where a tree starts: its root node id (``None`` when empty), its height and its entry count."""

    root: str | None = None
    height: int = 0
    count: int = 0

    def _check(self) -> None:
        if type(self.height) is not int or type(self.count) is not int:
            raise TypeError("height and count must be ints")
        if self.root is None:
            if self.height or self.count:
                raise ValueError("an empty tree has height 0 and count 0")
        elif type(self.root) is not str or not 0 <= self.height <= MAX_HEIGHT or self.count < 1:
            raise ValueError(f"impossible tree {self.root!r}, height {self.height}, count {self.count}")


EMPTY = TreeRef()


@attrs.frozen
class Head:
    """One committed state of a set (immutable: a commit makes a new one)."""

    order: str
    chunk: int
    gen: int = 0
    epoch: int = 0
    recent: tuple[str, ...] = ()
    scores: TreeRef = EMPTY
    members: TreeRef = EMPTY

    def next(self, nonce: str, **changes: Any) -> Head:
        """The head a commit with ``nonce`` makes from this one: one generation on, its nonce first."""
        return attrs.evolve(self, gen=self.gen + 1, recent=(nonce, *self.recent)[:RECENT], **changes)

    def fate(self, nonce: str, base_gen: int) -> str:
        """What became of a commit with ``nonce`` built on generation ``base_gen``, as this head tells.

        :data:`LANDED`, :data:`LOST` (another commit took its generation: it
        can never land), :data:`PENDING` (the head has not moved: it may
        still land) or :data:`UNKNOWN` (so many commits followed that its
        generation scrolled out of ``recent``).
        """
        if self.gen <= base_gen:
            return PENDING
        index = self.gen - base_gen - 1
        if index >= len(self.recent):
            return UNKNOWN
        return LANDED if self.recent[index] == nonce else LOST

    def encode(self) -> bytes:
        return seal(
            _packb(
                {
                    "v": FORMAT,
                    "order": self.order,
                    "chunk": self.chunk,
                    "gen": self.gen,
                    "epoch": self.epoch,
                    "recent": list(self.recent),
                    "score": list(attrs.astuple(self.scores)),
                    "member": list(attrs.astuple(self.members)),
                }
            )
        )

    @classmethod
    def decode(cls, key: str, data: bytes) -> Head:
        """A head from stored bytes (format 2, or format 1 which had no epoch); validates every value's range."""
        _, found = unpack(key, data, "head")
        if type(found) is not dict:
            raise CorruptDataError("stored head is malformed (not a map)", key)
        try:
            head = cls(
                order=found["order"],
                chunk=found["chunk"],
                gen=found["gen"],
                epoch=found.get("epoch", 0),
                recent=tuple(found.get("recent", ())),
                scores=TreeRef(*found["score"]),
                members=TreeRef(*found["member"]),
            )
            head._check()
        except (KeyError, TypeError, ValueError) as exc:
            raise CorruptDataError(f"stored head is malformed ({type(exc).__name__}: {exc})", key) from None
        return head

    def _check(self) -> None:
        if self.order not in ("asc", "desc"):
            raise ValueError(f"order {self.order!r}")
        for name in ("chunk", "gen", "epoch"):
            if type(getattr(self, name)) is not int:
                raise TypeError(f"{name} must be an int")
        if not 2 <= self.chunk <= MAX_CHUNK:
            raise ValueError(f"chunk {self.chunk} outside 2..{MAX_CHUNK}")
        if self.gen < 0 or self.epoch < 0:
            raise ValueError(f"negative generation {self.gen} or epoch {self.epoch}")
        if len(self.recent) > min(self.gen, RECENT) or not all(type(n) is str for n in self.recent):
            raise ValueError("recent commit nonces do not match the generation")
        self.scores._check()
        self.members._check()
        if self.scores.count != self.members.count:
            raise ValueError(f"{self.scores.count} scores but {self.members.count} members")


class Snapshot:
    """One committed state: the head as read (with its record's version) and both trees as it names them."""

    __slots__ = ("version", "head", "scores", "members")

    def __init__(self, record: Record | None, head: Head, source: Source, key: KeyFn) -> None:
        self.version = None if record is None else record.version
        self.head = head
        self.scores = Tree(source, key, *attrs.astuple(head.scores))
        self.members = Tree(source, member_key, *attrs.astuple(head.members))
