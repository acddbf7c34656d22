"""An engine: one head's state in this process (one tree pair, its update log and its head).

It owns the store handle, the key space, the node cache, the settings, the head it decoded last, the writer's state
(:class:`WriterState`) and the reader's (:class:`mdss._overlay.Overlays`). Snapshots, commits, merges, gc and check take
an engine; ``SortedSet`` is a facade over one, ``ShardedSet`` over S of them.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from . import _tail
from ._cache import NodeCache
from ._deletions import Deletions
from ._group import GroupCommit, Pending
from ._head import Head
from ._keys import Keyspace
from ._order import ROWS, Order, exact
from ._overlay import Overlays
from ._recent import Recent
from ._retry import COMMITS
from ._writer import check_chunk_size
from .exceptions import SettingsMismatchError
from .stores.base import Record, Store

#: The chunk size of a set created without one.
DEFAULT_CHUNK = 1000

#: An op a caller of a set registers (:attr:`Engine.resolvers`): ``resolve(trial, member, value)`` changes ``trial``
#: (member -> score, ``None``: absent) and returns the op's result, or raises to refuse its caller's ops.
Resolver = Callable[[dict[str, Any], str, Any], Any]


#: Seconds an append may take before its writer counts as lagging: a round trip takes well under a millisecond on a
#: LAN, a throttled key makes writers wait seconds (docs/performance.md, "Posts under a per-key cap"). At 0.05, four
#: writers on one busy 2-core machine lagged now and then (a stalled process) and a fifth of their heads kept bridges.
SLOW = 0.2
#: Seconds a writer's seals keep the bridges after one of its appends took over :data:`SLOW`.
LAGGING = 10.0


class WriterState:
    """What a writer of one head keeps between commits (``mdss._commit``)."""

    def __init__(self, stale: list[float], trust_after: int) -> None:
        self.held: tuple[Record, Head] | None = None  # the newest head record seen: where a commit starts
        self.rival: tuple[Record | None] | None = None  # the head a lost race returned, for the rebase
        #: How often the held head had moved by the next commit (a moving average; shards of a set share it).
        self.stale = stale
        self.current = 0  # commits in a row that found the held head current
        self.trust_after = trust_after  # ... that a commit needs before it starts from the held head
        self.tail_full = False  # the store refused an append as too large: the next attempt seals
        #: When an append of this writer last took over :data:`SLOW` seconds to be applied (a throttled key, a busy
        #: server): writers' views are that old, and this writer's seals keep the bridges (``Store.swap_core``).
        self.lagged_at = -LAGGING
        self.sealer = False  # this writer's commit crossed the inline budget: it seals from the head it reads
        self.built: tuple[str | None, str | None] | None = None  # the roots of the trees it last made
        self.marked = False  # whether it stored the set's marker (mdss._snapshot.mark)
        self.entry_bytes: float | None = None  # stored bytes per member, both trees, measured (sizes the log)

    def hold(self, record: Record, head: Head) -> None:
        """Keep the newest head record seen, so that the next commit can compare-and-set without reading it."""
        held = self.held
        if held is None or held[1].gen <= head.gen or held[1].incarnation != head.incarnation:
            self.held = (record, head)

    def learn(self, moved: bool) -> bool:
        """Follow how often the held head had moved by the next commit, and the commits in a row that found it current;
        returns False (learnt, for this commit)."""
        self.stale[0] = 0.8 * self.stale[0] + 0.2 * moved
        self.current = 0 if moved else self.current + 1
        return False

    def lost_to(self, rival: Record | None, *, full: bool = False) -> None:
        """A lost race returned ``rival``, the winner's head: the rebase starts from it."""
        self.rival, self.tail_full = (rival,), full

    def took(self, seconds: float) -> None:
        """An append (or seal) of this writer took ``seconds`` to be applied or refused."""
        if seconds > SLOW:
            self.lagged_at = time.monotonic()

    def lagging(self) -> bool:
        """Whether this writer lagged within the last :data:`LAGGING` seconds."""
        return time.monotonic() - self.lagged_at < LAGGING

    def take_rival(self) -> tuple[Record | None] | None:
        rival, self.rival = self.rival, None
        return rival

    def release(self) -> None:
        """Forget the held head (it may be stale or unknown): the next commit reads the head first."""
        self.held = None

    def made(self, scores: str | None, members: str | None) -> None:
        """This writer made the trees with these roots, and caches them: it merges next (``mdss._commit``)."""
        self.built = (scores, members)

    def mark(self) -> None:
        self.marked = True

    def take_full(self) -> bool:
        """Whether the last append found the tail full (this attempt seals), and the flag cleared."""
        full, self.tail_full = self.tail_full, False
        return full

    def take_sealer(self, next_seals: bool = False) -> bool:
        """Whether this writer's last commit crossed the inline budget (it seals now); ``next_seals`` for the next."""
        sealer, self.sealer = self.sealer, next_seals
        return sealer


class Engine:
    """The state of one head in this process; see the module's docstring."""

    def __init__(
        self,
        store: Store,
        name: str,
        keys: Keyspace,
        commit: Callable[[Engine, list[Pending]], None],
        *,
        order: str | None = None,
        chunk_size: int | None = None,
        tiebreak: str | None = None,
        cache_bytes: int = 64 << 20,
        gc_grace: float = 30.0,
        retry_budget: float = COMMITS.budget,
        max_attempts: int | None = None,
        max_batch: int = 1000,
        max_wait: float = 0.0,
        log_limit: int | None = None,
        node_bytes: int | None = None,
        on_start: Callable[[], None] = lambda: None,
        resolvers: Mapping[str, Resolver] | None = None,
        max_staleness: float = 0.0,
        cache: NodeCache | None = None,
        stale: list[float] | None = None,
        outer: Recent | None = None,
        trust_after: int = 0,
        moments: list[int] | None = None,
    ) -> None:
        """A set's options as ``SortedSet`` documents them; ``commit`` makes the group commit's commits. A shard's
        engine shares ``cache`` and ``stale`` with the other shards, makes its writes forget what the sharded set's
        reads kept (``outer``), and trusts its held head after ``trust_after``; in a ``"first"`` set it numbers entries
        by the clock, through ``moments`` (shared by the shards: :meth:`reached`)."""
        self.store, self.name, self.keys = store, exact(name), keys
        keys.check_fits(store, name)
        self.cache = NodeCache(cache_bytes) if cache is None else cache
        self.policy = attrs.evolve(COMMITS, budget=float(retry_budget), max_attempts=max_attempts)
        self.log_limit = log_limit
        self.node_bytes = node_bytes  # given to the head this engine creates (None: unbounded); the head's value rules
        self.deletions = Deletions(store, gc_grace)
        self.writer = WriterState([0.0] if stale is None else stale, trust_after)
        self.reader = Overlays()
        self.recent = Recent(max_staleness, outer)  # the head that reads within the bound reuse
        self.group = GroupCommit(lambda pendings: self._commit(commit, pendings), max_batch, max_wait)
        self.resolvers = dict(resolvers or {})
        self.moments = moments  # [the last moment this process gave an entry], for a sharded "first" set
        self.on_start = on_start  # a write made the head afresh (a shard's stores its set's settings again)
        self.commits = self.retries = self.merges = 0  # commits published, re-applied after a lost race; merges
        self.merged_at = -math.inf  # when (time.monotonic()) this object's last merge landed
        self.head: Head | None = None  # the head decoded last, and its bytes
        self.head_bytes: bytes | None = None
        self._made: tuple[Head, Any, Any] | None = None  # the last snapshot a read made: (head, version, snapshot)
        self._again = False  # whether the last read found that snapshot's head unchanged
        #: Which settings were given (order, chunk size, tiebreak): a stored head that differs in one of them is
        #: another set; the others are defaults that the head of a set made by another object overrules.
        self.given = (order is not None, chunk_size is not None, tiebreak is not None)
        #: Whether the settings are known (stored or seen), not defaults that the set's head may overrule.
        self.explicit = False
        records = isinstance(tiebreak, str) and tiebreak.startswith(ROWS)  # a record window's set is ascending
        self.settle(order or ("asc" if records else "desc"), chunk_size or DEFAULT_CHUNK, tiebreak or "member")

    def _commit(self, commit: Callable[[Engine, list[Pending]], None], pendings: list[Pending]) -> None:
        """Commit ``pendings``; then reads within a staleness bound forget the head they kept, whatever the outcome (a
        lost reply may have landed): this object's writes are never invisible to its later reads."""
        try:
            commit(self, pendings)
        finally:
            self.recent.forget()

    def reached(self, seq: int, entries: int) -> int:
        """The number of the first of ``entries`` a ``"first"`` commit writes at log sequence number ``seq``: ``seq``
        itself (the set's own commit order), or for a shard of a sharded set the clock in microseconds, past the last
        number this process gave (its shards have no common log: their order is the writers' clocks)."""
        if self.moments is None:
            return seq
        first = max(time.time_ns() // 1000, self.moments[0] + 1)
        self.moments[0] = first + entries - 1
        return first

    @property
    def gc_grace(self) -> float:
        return self.deletions.grace

    def settle(self, order: str, chunk_size: int, tiebreak: str) -> None:
        """Take settings (given, or the stored set's); refuses a chunk size whose nodes the store cannot hold."""
        check_chunk_size(chunk_size, self.store.max_value_bytes, type(self.store).__name__)  # DynamoDB: 400 KB
        self.order, self.chunk_size, self.tiebreak = order, chunk_size, tiebreak
        self.ordering = Order(order, tiebreak)

    def adopt(self, stored: Head, order: str | None, chunk_size: int | None, tiebreak: str | None) -> None:
        """At open: take the stored set's settings, or refuse different ones given."""
        for what, wanted, have in (
            ("order", order, stored.order),
            ("chunk_size", chunk_size, stored.chunk),
            ("tiebreak", tiebreak, stored.tiebreak),
        ):
            if wanted is not None and wanted != have:
                raise SettingsMismatchError(f"set {self.name!r} is stored with {what}={have!r}, not {wanted!r}")
        self.settle(stored.order, stored.chunk, stored.tiebreak)
        self.explicit = True

    def decode(self, data: bytes) -> Head:
        """The head from stored bytes (decoded once per distinct value, only new appends when it extends the last),
        checked against the settings: an engine opened without settings before its set existed adopts those of whoever
        created it; otherwise different settings mean another set. An expired head is neither checked nor kept."""
        if data == self.head_bytes:
            return self.head  # type: ignore[return-value]
        head = self._extended(data) or Head.decode(self.keys.head, data)
        if head.expired():  # a set dropped at its moment (mdss._expiry): its settings bind nobody
            return head
        stored, mine = (head.order, head.chunk, head.tiebreak), (self.order, self.chunk_size, self.tiebreak)
        if stored != mine:
            if self.explicit or self.head is not None or any(g and s != m for g, s, m in zip(self.given, stored, mine)):
                raise SettingsMismatchError(
                    f"set {self.name!r} is stored with order={head.order!r}, chunk_size={head.chunk}, "
                    f"tiebreak={head.tiebreak!r}, not order={self.order!r}, chunk_size={self.chunk_size}, "
                    f"tiebreak={self.tiebreak!r} (was it dropped and recreated?)"
                )
            self.settle(head.order, head.chunk, head.tiebreak)
        self.explicit = True
        self.head_bytes, self.head = data, head
        return head

    def _extended(self, data: bytes) -> Head | None:
        """The head of ``data`` when it is the head decoded last plus store-applied appends (``mdss._tail``)."""
        known, head = self.head_bytes, self.head
        if known is None or head is None or not _tail.marked(data):
            return None
        if _tail.marked(known):
            if not data.startswith(known):
                return None
            rest = data[len(known) :]
        elif data.startswith(_tail.tailed(known)):  # its header too: the SHA-1 a full decode checks
            rest = data[_tail.HEADER + len(known) :]
        else:
            return None
        return head.appended(_tail.records(self.keys.head, rest))

    def remember(self, head: Head, data: bytes, version: Any) -> None:
        """The head (its bytes, the version written) a commit just published: the next read of them needs no decoding,
        and the next commit starts from it without reading (when the version is known)."""
        self.head_bytes, self.head = data, head
        self.writer.held = None if version is None else (Record((data,), version), head)
        self.explicit = True
        self.recent.forget()

    def made(self, head: Head, version: Any) -> Any:
        """The snapshot a read made last of ``head`` (the object :meth:`decode` returned) as stored at ``version``, or
        ``None``: a read that finds the head unchanged reuses it, with its view of the log and what it found since
        (``mdss._snapshot``; a snapshot is one committed state, its nodes immutable). Whether it was found is what
        :meth:`settled` then tells the next read."""
        made = self._made
        self._again = made is not None and made[0] is head and made[1] == version
        return made[2] if self._again else None  # type: ignore[index]

    def make(self, head: Head, version: Any, snapshot: Any) -> None:
        """Keep ``snapshot``, of ``head`` at ``version``, for the reads of it that follow (:meth:`made`)."""
        self._made, self._again = (head, version, snapshot), False

    def settled(self) -> Any:
        """The snapshot the last read reused (it found the head unchanged), or ``None``: a read of a head that does
        not change often may answer from it while the head's read travels (``mdss._snapshot.read``)."""
        made = self._made
        return made[2] if self._again and made is not None else None

    def forget(self) -> None:
        """The head is gone (dropped): nothing decoded or held is current."""
        self.head_bytes = self.head = self.writer.held = self._made = None
        self._again = False
        self.recent.forget()

    def merged(self) -> None:
        """A merge of this object landed."""
        self.merges += 1
        self.merged_at = time.monotonic()

    def measure(self, entries: int, stored: int) -> None:
        """Record the stored bytes per member (both trees) seen in a load or a merge (``mdss._log.log_limit``)."""
        if entries >= 1000:
            self.writer.entry_bytes = stored / entries
