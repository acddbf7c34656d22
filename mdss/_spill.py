"""A load's pairs on disk: a temporary SQLite database that sorts them in bounded memory.

A load larger than its memory budget cannot hold its pairs, let alone two sorted copies of them. It writes them to a
table here as they come, and reads them back twice through SQLite's external merge sort: in member order for the
member index (where a repeated member's last pair wins and the others are deleted), then in key order for the score
tree. SQLite compares text as UTF-8 bytes, which is code point order, and integers with reals exactly, as Python does
(``tests/test_spill.py`` checks both); the scores of every block read back in key order are still checked before a
tree is built from them.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import tempfile
from collections.abc import Iterable, Iterator
from itertools import compress
from operator import itemgetter
from typing import Any

from .exceptions import InvalidArgumentError, StoreError

#: The most pairs per block read back (a block of 50,000 takes about 20 MB while it is turned into nodes).
BLOCK = 50_000

_FIRST, _SECOND, _THIRD = itemgetter(0), itemgetter(1), itemgetter(2)


def _columns(block: list[Any]) -> tuple[list[str], list[Any]]:
    """A block's members and scores (``map(itemgetter)``: about three times faster than ``zip(*block)``)."""
    return list(map(_FIRST, block)), list(map(_SECOND, block))


class Spill:
    """Pairs in a temporary SQLite database in ``directory`` (the system's temporary directory if ``None``), deleted
    on :meth:`close`, read back ``block`` at a time; SQLite's page cache and sorter use about ``memory_bytes``."""

    def __init__(self, directory: str | None, memory_bytes: int, block: int) -> None:
        self.block = block
        self._made = (directory, memory_bytes)
        try:
            self._dir = tempfile.TemporaryDirectory(prefix="mdss-load-", dir=directory)
        except OSError as exc:
            where = directory or tempfile.gettempdir()
            raise InvalidArgumentError(f"cannot make a spill directory in {where}: {exc}") from exc
        self._db = sqlite3.connect(os.path.join(self._dir.name, "pairs.db"), isolation_level=None)
        for pragma in ("journal_mode=OFF", "synchronous=OFF", "temp_store=FILE", "threads=0"):
            self._db.execute(f"PRAGMA {pragma}")
        # KiB, at most 8 MiB: the sorter's runs fit this cache, and runs that fit the CPU's caches sorted faster than
        # larger ones (docs/architecture.md, "Loads past their memory sort in SQLite").
        self._db.execute(f"PRAGMA cache_size={-min(max(memory_bytes // 4096, 1024), 8192)}")
        self._db.execute("CREATE TABLE pairs (member TEXT NOT NULL, score NOT NULL)")
        self._db.execute("CREATE TABLE superseded (id INTEGER NOT NULL)")
        self._db.execute("BEGIN")
        self.count = 0  # pairs added; after by_member, the distinct members

    def sibling(self) -> Spill:
        """Another spill beside this one, with its budget (a record window's score tree entries)."""
        return Spill(*self._made, self.block)

    def add(self, pairs: Iterable[tuple[str, Any]]) -> None:
        """Keep ``pairs`` (checked) after those already added."""
        before = self._db.total_changes
        with self._failing():
            self._db.executemany("INSERT INTO pairs VALUES (?, ?)", pairs)
        self.count += self._db.total_changes - before

    def by_member(self) -> Iterator[tuple[list[str], list[Any]]]:
        """Blocks of the pairs in member order, a repeated member's last pair only; the earlier ones are deleted, so
        that :meth:`by_key` sees each member once."""
        with self._failing():
            yield from self._by_member()

    def by_key(self, descending: bool, members_descending: bool = False) -> Iterator[tuple[list[str], list[Any]]]:
        """Blocks of the pairs in key order: score descending (or ascending), then member (or member descending)."""
        with self._failing():
            yield from self._by_key(descending, members_descending)

    def in_order(self) -> Iterator[tuple[str, Any]]:
        """Every pair in member order, a member's pairs in the order they were added (a board's rows, to merge)."""
        with self._failing():
            rows = self._db.execute("SELECT member, score FROM pairs ORDER BY member, rowid")
            while block := rows.fetchmany(self.block):
                yield from block

    def counts(self) -> Iterator[tuple[str, int, Any]]:
        """Each member in member order, how many pairs it has, and its least score (counted in SQLite: a member with
        millions of pairs, a tie of that many owners, costs no memory here)."""
        with self._failing():
            rows = self._db.execute("SELECT member, count(*), min(score) FROM pairs GROUP BY member ORDER BY member")
            while block := rows.fetchmany(self.block):
                yield from block

    @contextlib.contextmanager
    def _failing(self) -> Iterator[None]:
        """SQLite's errors (a full disk) as :class:`StoreError`."""
        try:
            yield
        except sqlite3.Error as exc:
            raise StoreError(f"a load's spill in {self._dir.name} failed: {exc}") from exc

    def _by_member(self) -> Iterator[tuple[list[str], list[Any]]]:
        rows = self._db.execute("SELECT member, score, rowid FROM pairs ORDER BY member, rowid")
        last: tuple[str, Any, int] | None = None
        superseded: list[tuple[int]] = []
        while block := rows.fetchmany(self.block):
            if last is not None:
                block.insert(0, last)
            last = block.pop()  # it waits: the next block may repeat its member
            members, scores = _columns(block)
            if len(set(members)) < len(members) or (members and members[-1] == last[0]):
                # Sorted by member then rowid: a pair is superseded when the next one has its member.
                keep = [a != b for a, b in zip(members, [*members[1:], last[0]])]
                superseded += [(rowid,) for rowid, kept in zip(map(_THIRD, block), keep) if not kept]
                members, scores = list(compress(members, keep)), list(compress(scores, keep))
            if members:
                yield members, scores
            if len(superseded) >= self.block:
                self._db.executemany("INSERT INTO superseded VALUES (?)", superseded)
                superseded.clear()
        if last is not None:
            yield [last[0]], [last[1]]
        self._db.executemany("INSERT INTO superseded VALUES (?)", superseded)
        self.count -= self._db.execute("DELETE FROM pairs WHERE rowid IN (SELECT id FROM superseded)").rowcount

    def _by_key(self, descending: bool, members_descending: bool) -> Iterator[tuple[list[str], list[Any]]]:
        # SQLite compares TEXT with memcmp of UTF-8: code point order, the members' order in keys.
        rows = self._db.execute(
            f"SELECT member, score FROM pairs ORDER BY score {'DESC' if descending else ''}, "
            f"member {'DESC' if members_descending else ''}"
        )
        last: list[Any] = []
        while block := rows.fetchmany(self.block):
            members, scores = _columns(block)
            if sorted(last + scores, reverse=descending) != last + scores:  # ints against floats: see the docstring
                raise StoreError("a spilled load read its pairs back out of score order; nothing was applied")
            last = scores[-1:]
            yield members, scores

    def close(self) -> None:
        self._db.close()
        self._dir.cleanup()

    def __enter__(self) -> Spill:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
