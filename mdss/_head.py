"""The head: the one mutable record of a set, and the snapshot a read or a commit takes of it.

A head names the roots of both trees (the score tree and the member index), the set's settings, a generation that every
commit increments, the gc epoch (see ``mdss._garbage``), and the nonces of the last :data:`RECENT` commits, newest
first, so that a writer whose compare-and-set reply was lost can prove whether its commit landed. Every head write goes
through :meth:`Head.next`, which keeps ``recent[i]`` the nonce of generation ``gen - i``.
"""

from __future__ import annotations

import secrets
import time
from typing import TYPE_CHECKING, Any

import attrs

from . import _tail
from ._codec import FORMAT, MAX_HEIGHT, check_entry, log_entry, pack, seal, unpack
from ._order import ROWS, valid_tiebreak
from ._tail import CHECKPOINT
from .exceptions import CorruptDataError, shown

if TYPE_CHECKING:
    from collections.abc import Sequence


#: How many commit nonces a head keeps (17 bytes each).
RECENT = 16
#: How many garbage notes a head holds before they move to a note page.
NOTES_INLINE = 8
#: Largest chunk size (entries per entry set, children per manifest).
MAX_CHUNK = 100_000

LANDED, LOST, PENDING, UNKNOWN = "landed", "lost", "pending", "unknown"
#: How :attr:`Head.native` begins when nodes may carry the store's own expiry and no process may give one more (then
#: the fence's own random id: a process that cancelled every expiry under one fence knows it is still that one).
FENCED = "-"


#: A log entry: (member, old score, new score, nonce of the commit it ends, else None); ``None`` scores: absent.
LogEntry = tuple[str, Any, Any, Any]


@attrs.frozen
class Log:
    """The update log as the head names it (see ``mdss._log``): entries ``base`` to ``seq - 1``, not in the trees yet.

    The oldest are in sealed segments that the log manifest ``pages`` lists, newer ones in the segments ``segs`` (``(id,
    first sequence number)``, oldest first), the newest ``inline``. A segment may begin before ``base`` (a merge folded
    its start): readers skip what is older. ``claim`` is the merge in progress: ``(nonce, lease end in ms)``.
    """

    base: int = 0
    seq: int = 0
    pages: str | None = None
    segs: tuple[tuple[str, int], ...] = ()
    inline: tuple[LogEntry, ...] = ()
    claim: tuple[str, int] | None = None

    def __len__(self) -> int:
        return self.seq - self.base

    def extended(self, entries: Sequence[LogEntry]) -> Log:
        """This log with ``entries`` appended inline (no segment sealed)."""
        return attrs.evolve(self, seq=self.seq + len(entries), inline=(*self.inline, *entries))

    def encode(self) -> list[Any] | None:
        if self == EMPTY_LOG:
            return None
        return [self.base, self.seq, self.pages, self.segs, self.inline, self.claim]  # tuples pack as arrays

    @classmethod
    def decode(cls, found: Any) -> Log:
        if found is None:
            return EMPTY_LOG
        base, seq, pages, segs, inline, claim = found
        log = cls(
            base,
            seq,
            pages,
            tuple(tuple(s) for s in segs),
            tuple(map(log_entry, inline)),
            None if claim is None else tuple(claim),
        )
        log.check()
        return log

    def check(self) -> None:
        if type(self.base) is not int or type(self.seq) is not int or not 0 <= self.base <= self.seq:
            raise ValueError(f"impossible log range {self.base!r}..{self.seq!r}")
        if not (self.pages is None or type(self.pages) is str):
            raise TypeError("the log manifest is named by an id string")
        if not all(len(s) == 2 and type(s[0]) is str and type(s[1]) is int for s in self.segs):
            raise TypeError("log segments are (id, first sequence number)")
        firsts = [s[1] for s in self.segs]
        if firsts != sorted(firsts) or (firsts and firsts[-1] > self.seq - len(self.inline)):
            raise ValueError("log segments out of order")
        if len(self.inline) > self.seq or not all(map(check_entry, self.inline)):
            raise ValueError("malformed inline log entries")
        if self.claim is not None and not (
            len(self.claim) == 2 and type(self.claim[0]) is str and type(self.claim[1]) is int
        ):
            raise TypeError("a merge claim is (nonce, lease end)")


EMPTY_LOG = Log()


@attrs.frozen
class TreeRef:
    """Where a tree starts: its root node id (``None`` when empty), its height and its entry count."""

    root: str | None = None
    height: int = 0
    count: int = 0

    def check(self) -> None:
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
    epoch_gen: int = 0
    recent: tuple[str, ...] = ()
    scores: TreeRef = EMPTY
    members: TreeRef = EMPTY
    #: Garbage notes of recent commits, newest first; older ones are in pages, newest ``note_page`` first, each naming
    #: the page before it, down to ``notes_done`` (collected already).
    notes: tuple[str, ...] = ()
    note_page: str | None = None
    notes_done: str | None = None
    #: Random, chosen when the set is created: a set dropped and started again is another incarnation, and a commit
    #: built on the old one can tell that its version is gone (generations start again at 1).
    incarnation: str = ""
    log: Log = EMPTY_LOG
    #: The bytes a node may weigh (``mdss._tree.weights``), for sets whose members can be large (leaderboard rows);
    #: ``None``: nodes are bounded in items only. Chosen when the set is created.
    node_bytes: int | None = None
    #: Random, and new whenever a write changes the set other than by the log's entries (a load, a drop), or when an
    #: older mdss wrote the head (``None``): within one lineage the set at log sequence number ``b`` is the set at ``a``
    #: plus entries ``a`` to ``b - 1``, so that a reader can follow it by the entries alone (``mdss._allkeys``).
    lineage: str | None = None
    #: How ties are broken (``mdss._order.TIEBREAKS``, or a board window's columns that go by first); chosen when the
    #: set is created. Stored only when not the default, so heads of sets that break ties by member are what earlier
    #: versions wrote.
    tiebreak: str = "member"
    #: When the set expires (``mdss._expiry``): milliseconds since the Unix epoch, by the reading process's clock;
    #: ``None``: never. Stored only when set, so heads without one are what earlier versions wrote.
    expires: int | None = None
    #: Whether nodes of the set may carry the store's own expiry (``mdss._expiry``, on a store whose ``expires_keys``
    #: is true), each at ``expires`` plus the grace or later: ``None``, none does; :data:`FENCED` and an id, some may
    #: and none will be given one; else the token of the process that may give them one, fenced by this head's value.
    native: str | None = None
    #: How many merges (and commits that wrote the trees) made this head's trees: their parity tells which entry sets
    #: take their turn to be patched (``mdss._writer.Writer``). Stored only when not 0.
    merges: int = 0

    def expired(self) -> bool:
        """Whether this head's moment has passed by this process's clock (:func:`clock`): the set reads as dropped."""
        return self.expires is not None and self.expires <= clock() * 1000

    def next(self, nonce: str, **changes: Any) -> Head:
        """The head a commit with ``nonce`` makes from this one: one generation on, its nonce first. A new ``epoch``
        records the generation it starts at (``epoch_gen``); a head without a lineage gets one."""
        if "epoch" in changes:
            changes["epoch_gen"] = self.gen + 1
        if self.lineage is None and "lineage" not in changes:
            changes["lineage"] = new_lineage()
        return attrs.evolve(self, gen=self.gen + 1, recent=(nonce, *self.recent)[:RECENT], **changes)

    def appended(self, records: Sequence[tuple[str, Sequence[LogEntry]]]) -> Head:
        """The head after ``records``, commits that each appended entries to the log (``mdss._tail``): what as many
        :meth:`next` calls make, in one step (a writer follows every other writer's appends)."""
        if not records:
            return self
        entries = [entry for _, appended in records for entry in appended]
        nonces = tuple(nonce for nonce, _ in reversed(records))
        return attrs.evolve(
            self,
            gen=self.gen + len(records),
            recent=(*nonces, *self.recent)[:RECENT],
            log=self.log.extended(entries),
            lineage=new_lineage() if self.lineage is None else self.lineage,
        )

    def fate(self, nonce: str, base_gen: int) -> str:
        """What became of a commit with ``nonce`` built on generation ``base_gen``, as this head tells: :data:`LANDED`,
        :data:`LOST` (another commit took its generation), :data:`PENDING` (the head has not moved: it may still land)
        or :data:`UNKNOWN` (its generation scrolled out of ``recent``)."""
        if self.gen <= base_gen:
            return PENDING
        index = self.gen - base_gen - 1
        if index >= len(self.recent):
            return UNKNOWN
        return LANDED if self.recent[index] == nonce else LOST

    def encode(self) -> bytes:
        return seal(
            pack(
                {
                    "v": FORMAT,
                    "order": self.order,
                    "chunk": self.chunk,
                    "gen": self.gen,
                    "epoch": self.epoch,
                    "epoch_gen": self.epoch_gen,
                    "recent": self.recent,  # tuples pack as msgpack arrays, as lists do
                    "score": (self.scores.root, self.scores.height, self.scores.count),
                    "member": (self.members.root, self.members.height, self.members.count),
                    "notes": self.notes,
                    "note_page": self.note_page,
                    "notes_done": self.notes_done,
                    "inc": self.incarnation,
                    **({} if self.log == EMPTY_LOG else {"log": self.log.encode()}),
                    **({} if self.node_bytes is None else {"nb": self.node_bytes}),
                    **({} if self.lineage is None else {"lin": self.lineage}),
                    **({} if self.tiebreak == "member" else {"tb": self.tiebreak}),
                    **({} if self.expires is None else {"exp": self.expires}),
                    **({} if self.native is None else {"nx": self.native}),
                    **({} if not self.merges else {"mg": self.merges}),
                }
            )
        )

    @classmethod
    def decode(cls, key: str, data: bytes) -> Head:
        """A head from stored bytes (format 2, or format 1 which had no epoch); validates every value's range. A head
        with a tail (``mdss._tail``) is its core head plus the appends the store applied after it, each one commit."""
        if _tail.marked(data):
            core, records = _tail.split(key, data)
            if _tail.marked(core):
                raise CorruptDataError("stored head's core has a tail of its own", key)
            return cls.decode(key, core).appended(records)
        if data[:1] == CHECKPOINT:
            raise CorruptDataError(
                "stored head is the checkpoint of a store opened with slots=N (mdss.stores.slots): open the store with "
                "that option to read it",
                key,
            )
        _, found = unpack(key, data, "head")
        if type(found) is not dict:
            raise CorruptDataError("stored head is malformed (not a map)", key)
        try:
            head = cls(
                order=found["order"],
                chunk=found["chunk"],
                gen=found["gen"],
                epoch=found.get("epoch", 0),
                epoch_gen=found.get("epoch_gen", 0),
                recent=tuple(found.get("recent", ())),
                scores=TreeRef(*found["score"]),
                members=TreeRef(*found["member"]),
                notes=tuple(found.get("notes", ())),
                note_page=found.get("note_page"),
                notes_done=found.get("notes_done"),
                incarnation=found.get("inc", ""),
                log=Log.decode(found.get("log")),
                node_bytes=found.get("nb"),
                lineage=found.get("lin"),
                tiebreak=found.get("tb", "member"),
                expires=found.get("exp"),
                native=found.get("nx"),
                merges=found.get("mg", 0),
            )
            head.check()
        except (KeyError, TypeError, ValueError) as exc:
            raise CorruptDataError(f"stored head is malformed ({type(exc).__name__}: {exc})", key) from None
        return head

    def check(self) -> None:
        if self.order not in ("asc", "desc"):
            raise ValueError(f"order {self.order!r}")
        if not valid_tiebreak(self.tiebreak):
            raise ValueError(f"tiebreak {shown(self.tiebreak, 40)}")
        for name in ("chunk", "gen", "epoch", "epoch_gen", "merges"):
            if type(getattr(self, name)) is not int:
                raise TypeError(f"{name} must be an int")
        if not 2 <= self.chunk <= MAX_CHUNK:
            raise ValueError(f"chunk {self.chunk} outside 2..{MAX_CHUNK}")
        if self.node_bytes is not None and (type(self.node_bytes) is not int or not 256 <= self.node_bytes <= 1 << 30):
            raise ValueError(f"node_bytes {self.node_bytes!r} outside 256..2**30")
        if self.merges < 0:
            raise ValueError(f"impossible merge count {self.merges}")
        if self.gen < 0 or self.epoch < 0 or not 0 <= self.epoch_gen <= self.gen:
            raise ValueError(f"impossible generation {self.gen}, epoch {self.epoch} from generation {self.epoch_gen}")
        if len(self.recent) > min(self.gen, RECENT) or not all(type(n) is str for n in self.recent):
            raise ValueError("recent commit nonces do not match the generation")
        if not all(type(n) is str for n in self.notes) or len(self.notes) > NOTES_INLINE:
            raise ValueError(f"garbage notes must be at most {NOTES_INLINE} ids")
        if type(self.incarnation) is not str:
            raise TypeError("the incarnation is a string")
        if self.lineage is not None and (type(self.lineage) is not str or len(self.lineage) > 64):
            raise TypeError("the lineage is a string of at most 64 characters")
        if self.expires is not None and (type(self.expires) is not int or not 0 <= self.expires < 1 << 53):
            raise ValueError(f"expiry {shown(self.expires, 40)} is not milliseconds since the epoch")
        if self.native is not None and (type(self.native) is not str or len(self.native) > 32):
            raise TypeError("the native expiry state is a string of at most 32 characters")
        if not all(p is None or type(p) is str for p in (self.note_page, self.notes_done)):
            raise TypeError("note pages are named by id strings")
        self.scores.check()
        self.members.check()
        # A set has a key per member; a record window a key per column of each row (and none for a row without them).
        if self.scores.count != self.members.count and not self.tiebreak.startswith(ROWS):
            raise ValueError(f"{self.scores.count} scores but {self.members.count} members")


def clock() -> float:
    """Seconds since the Unix epoch, by which heads expire (:meth:`Head.expired`); the tests replace it."""
    return time.time()


def new_lineage() -> str:
    """A new :attr:`Head.lineage`: 48 random bits."""
    return secrets.token_hex(6)
