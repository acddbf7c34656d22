"""Group commit: many threads' writes to one set become one commit.

The Datastore article's *job aggregation* without a dedicated thread: the first writer to find no commit in progress
leads, lingers up to ``max_wait`` seconds for more writes, and commits everything queued (up to ``max_ops`` operations)
at once; the others block until the commit carrying their operations is done. Under load, writes pile up while a
commit is in flight, so batches grow exactly when they help; alone, a writer commits at once.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any


class Pending:
    """One caller's operations, and what became of them."""

    __slots__ = ("ops", "want_score", "result", "error", "done")

    def __init__(self, ops: list[tuple[str, str, Any]], want_score: bool | str | list[Any]) -> None:
        self.ops, self.want_score = ops, want_score
        self.result: list[Any] | None = None
        self.error: BaseException | None = None
        self.done = False


class GroupCommit:
    """Aggregates concurrent callers' operations into commits made by ``commit(pendings)``. ``commit`` must set
    ``result`` or ``error`` on every pending it is given."""

    def __init__(self, commit: Callable[[list[Pending]], None], max_ops: int, max_wait: float) -> None:
        self._commit, self.max_ops, self.max_wait = commit, max_ops, max_wait
        self._queue: list[Pending] = []
        self._leading = False
        self._cond = threading.Condition()
        self.commits = 0  # how many commits carried how many callers: the aggregation achieved
        self.callers = 0

    def submit(self, ops: list[tuple[str, str, Any]], want_score: bool | str | list[Any] = False) -> list[Any]:
        mine = Pending(ops, want_score)
        with self._cond:
            self._queue.append(mine)
            self._cond.notify_all()
        while True:
            with self._cond:
                while self._leading and not mine.done:
                    self._cond.wait()
                if mine.done:
                    break
                self._leading = True
            self._lead()  # our operations may not fit this commit: then we lead the next one
        if mine.error is not None:
            raise mine.error
        return mine.result  # type: ignore[return-value]

    def _lead(self) -> None:
        """Commit the oldest queued operations, up to ``max_ops``; then hand leadership on."""
        taken: list[Pending] = []
        try:
            with self._cond:
                deadline = time.monotonic() + self.max_wait
                while self.max_wait and sum(len(p.ops) for p in self._queue) < self.max_ops:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    self._cond.wait(left)
                size = 0
                for pending in self._queue:
                    if taken and size + len(pending.ops) > self.max_ops:
                        break
                    taken.append(pending)
                    size += len(pending.ops)
                del self._queue[: len(taken)]
            try:
                self._commit(taken)
            except BaseException as exc:  # nothing of this commit landed: every caller in it learns why
                for pending in taken:
                    pending.result, pending.error = None, exc
            self.commits += 1
            self.callers += len(taken)
        finally:
            with self._cond:
                for pending in taken:
                    pending.done = True
                self._leading = False
                self._cond.notify_all()
