"""Store-applied appends over any store with a compare-and-set: each append a key of its own, written once.

On a store that only compares and sets (DynamoDB, SQLite), every commit writes the whole head: under a per-key
write limit, and charged per started KB of the head, a post costs a write of the head or more (docs/performance.md,
"Posts under a per-key cap"), and writers that race for the head lose and write again. :class:`SlotStore` gives such a
store the appends of ``mdss._tail`` (its :attr:`~Store.appends` is true), so that a post writes one small key of its
own and the head's key is written once every ``every`` commits:

- a head is stored as a **checkpoint** at its key (the head as it stood after slot ``n`` of the head's *series*, a
  random id chosen when the head is made: :data:`CHECKPOINT`), followed by **slots** ``n + 1``, ``n + 2``, ... at keys
  of their own (:func:`slot_key`), each written once, by a put-if-absent, with one commit to the head: an append or a
  seal (replayed by :func:`mdss._tail.apply` and :func:`mdss._tail.swap`, as Redis' script applies them), a
  compare-and-set (the head replaced) or a delete. The head is the checkpoint with every slot after it replayed in
  order, up to the first absent one; a slot holds the digest of the head it made, which a replay checks.
- a writer puts its commit in the slot after the last one it read, if the commit applies there (the same rules as the
  script's); if another writer's commit took that slot, it replays that one and tries the next. A writer that wrote a
  slot ``every`` past the checkpoint writes a new checkpoint (a compare-and-set of the head's key; losing it is fine).
- slots up to a checkpoint are deleted ``grace`` seconds after it was written (by this process, while it runs; slots
  are never listed by :meth:`keys`, so ``gc()`` does not take them for nodes; what ended processes left,
  ``gc(sweep=True)`` deletes by the same rule: :meth:`SlotStore.sweep`). So a slot that a reader or writer could still
  expect is never gone: a read that took longer than half the grace starts over, and a writer whose last read of the
  head is older than that reads it again before it puts a slot (put-if-absent on a deleted slot would succeed).

A post then costs one write of a key of about its record's size (a unit on DynamoDB), plus a replay of each commit
that came first; a read of the head costs one round trip with a recent read of it (the checkpoint and the slots after
it in one batch), two without. This store's :attr:`stats` count the calls mdss makes of it; the inner store's, the
round trips those took. Every process of a set must use it: a checkpoint starts with a byte no head starts with
(``0xC4``), which other readers refuse as corrupt.
"""

from __future__ import annotations

import collections
import hashlib
import re
import secrets
import threading
import time
import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import attrs

from .. import _tail
from .._codec import _sealed, loads, pack, seal
from .._order import check_seconds
from .._retry import Backoff
from ..exceptions import (
    ConflictError,
    CorruptDataError,
    InvalidArgumentError,
    OutcomeUnknownError,
    StoreUnavailableError,
    shown,
)
from .base import Record, Store

#: The first byte of a checkpoint (``mdss._tail.CHECKPOINT``: no head, plain or tailed, starts with it), then the
#: series (8 bytes), the slot it follows (8 bytes, big-endian), the CRC-32 of those 16 bytes and the head's bytes (which
#: carry checks of their own).
CHECKPOINT = _tail.CHECKPOINT
#: Bytes before a checkpoint's head.
CHECKPOINT_HEADER = 21
#: What a slot holds: ``[kind, digest of the head it made (8 bytes; empty for a delete), arguments...]``, sealed.
APPEND, SWAP, REPLACE, DELETE = range(4)
#: How long a writer that lost a slot to another waits before it reads the slots after it and tries again.
LOSERS = Backoff(base=0.005, cap=0.1)
#: The keys this store keeps to itself: a head's key, ``~``, its series in hex, ``.``, the slot's number.
_SLOT = re.compile(r":h~[0-9a-f]{16}\.[0-9]+$")
_SLOT_NAME = re.compile(r"[0-9a-f]{16}\.[0-9]+")


def slot_key(head: str, series: bytes, n: int) -> str:
    return f"{head}~{series.hex()}.{n}"


def is_head(key: str) -> bool:
    """Whether ``key`` is a head's (``mdss._keys``: a set's, a board's): the keys whose values this store stores as a
    checkpoint and slots."""
    return key.endswith(":h")


def _digest(value: bytes | None) -> bytes:
    return b"" if value is None else hashlib.blake2b(value, digest_size=8).digest()


@attrs.frozen
class State:
    """A head as a read found it: its series (``None``: no checkpoint), the checkpoint's slot, the last slot replayed
    and the head after it (``None``: absent), when the read began (the slot after ``n`` was absent then), and whether
    the last slot deleted the head (``closed``: no slot follows it; the next head starts a series)."""

    series: bytes | None
    base: int
    n: int
    value: bytes | None
    at: float
    closed: bool = False

    def record(self) -> Record | None:
        return None if self.value is None else Record((self.value,), (self.series, self.n))


def _stored(key: str, data: bytes | None, at: float) -> State:
    """The state a head's key holds: a checkpoint, or a head written by a store without slots (a series named after
    its bytes, slot 0), or nothing."""
    if data is None:
        return State(None, 0, 0, None, at)
    if data[:1] != CHECKPOINT:
        return State(_digest(data), 0, 0, data, at)
    if len(data) < CHECKPOINT_HEADER or zlib.crc32(data[1:17]).to_bytes(4, "big") != data[17:21]:
        raise CorruptDataError("stored head checkpoint's header is damaged", key)
    n = int.from_bytes(data[9:17], "big")
    return State(data[1:9], n, n, data[CHECKPOINT_HEADER:], at)


def _encoded(state: State) -> bytes:
    assert state.series is not None and state.value is not None  # a deleted head's key is deleted
    header = state.series + state.n.to_bytes(8, "big")
    return CHECKPOINT + header + zlib.crc32(header).to_bytes(4, "big") + state.value


def replay(key: str, value: bytes | None, data: bytes) -> tuple[bytes | None, bool]:
    """The head after the commit a slot holds, made on ``value`` (the head before it), checked against the digest the
    slot holds; whether it was a delete."""
    payload = _sealed(data)
    try:
        kind, digest, *args = loads(payload) if payload is not None else (None, None)
        if kind == APPEND:
            new = _tail.apply(value, *args)
        elif kind == SWAP:
            new = _tail.swap(value, *args)
        elif kind == REPLACE:
            [new] = args
        elif kind == DELETE:
            new = None
        else:
            raise ValueError(f"kind {kind!r}")
    except ConflictError:
        raise CorruptDataError("a stored slot's commit does not apply to the head before it", key) from None
    except Exception as exc:  # msgpack, and a malformed slot's arguments
        raise CorruptDataError(f"stored slot is malformed ({type(exc).__name__})", key) from None
    if _digest(new) != digest:
        raise CorruptDataError("a stored slot's commit made another head than it did when written", key)
    return new, kind == DELETE


def _replayed(key: str, state: State, slots: Sequence[bytes | None]) -> tuple[State, bool]:
    """``state`` with the slots read after it replayed up to the first absent one; whether all were there (then the
    slots after them are read too)."""
    for data in slots:
        if data is None or state.closed:
            return state, False
        value, closed = replay(key, state.value, data)
        state = attrs.evolve(state, n=state.n + 1, value=value, closed=closed)
    return state, not state.closed


class SlotStore(Store):
    """``inner`` (any store with a compare-and-set that keeps no siblings) with store-applied appends: see the module's
    docstring. ``every``: the slots after which a writer writes a checkpoint; ``grace``: seconds before the slots a
    checkpoint covers are deleted (a read that takes half of it starts over, and a writer whose last read of the head's
    key is that old reads it again before it writes). A put that lands half the grace or more after that read (a
    stopped process, a store call's long retries) is checked against the head's key: if a checkpoint covers its slot
    by then, the slot may have been deleted and put again behind it, and the commit's outcome is unknown
    (:class:`~mdss.exceptions.OutcomeUnknownError`: mdss sends an append again, which finds itself or lands anew)."""

    appends = True

    def __init__(
        self, inner: Store, *, every: int = 8, grace: float = 30.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if not isinstance(inner, Store):
            raise InvalidArgumentError(f"inner must be an mdss Store, got {shown(inner)}")
        if inner.keeps_siblings or inner.appends:
            raise InvalidArgumentError(f"{type(inner).__name__} keeps siblings or applies appends itself")
        if type(every) is not int or every < 1:
            raise InvalidArgumentError(f"every must be a positive int, got {shown(every)}")
        check_seconds(grace, "grace")
        if grace < 1:
            raise InvalidArgumentError(f"grace must be at least 1 s (well above any pause of a writer), got {grace!r}")
        super().__init__(namespace=inner.namespace)
        self.inner, self.every, self.grace, self.clock = inner, every, float(grace), clock
        self.evicts, self.max_value_bytes, self.max_key_bytes = inner.evicts, inner.max_value_bytes, inner.max_key_bytes
        self._states: dict[str, State] = {}  # the last state read or written of each head
        self._probes: dict[str, int] = {}  # how many slots the next read of each head reads with its key
        self._doomed: collections.deque[tuple[float, list[str]]] = collections.deque()  # (when, slot keys)
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"SlotStore({self.inner!r}, every={self.every})"

    # -- reads -----------------------------------------------------------------------------------------------------

    def _fold(self, keys: Sequence[str]) -> list[State]:
        """Each head's state: its checkpoint with the slots after it replayed. The first batch reads each head's key
        and the slots after the last state this process read of it (which the checkpoint has not passed: as many as
        that read found new, and one more, doubled); later ones the slots after those, until one is absent."""
        for _ in range(8):
            began = self.clock()
            with self._lock:
                hints = [self._states.get(key) for key in keys]
                probes = [
                    self._probes.get(key, 2) if hint is not None and hint.series is not None else 0
                    for key, hint in zip(keys, hints)
                ]
            batch: list[str] = []
            for key, hint, probe in zip(keys, hints, probes):
                batch.append(key)
                if probe:
                    batch += [slot_key(key, hint.series, hint.n + j) for j in range(1, probe + 1)]  # type: ignore[union-attr,arg-type]
            values, at = self.inner.get_many(batch), 0
            states: list[State] = []
            starts: list[int] = []
            pending: dict[int, int] = {}
            for i, (key, hint, count) in enumerate(zip(keys, hints, probes)):
                state, slots = _stored(key, values[at], began), values[at + 1 : at + 1 + count]
                at += 1 + count
                if (
                    hint is not None
                    and state.series is not None
                    and state.series == hint.series
                    and state.base <= hint.n
                ):
                    state = attrs.evolve(hint, base=state.base, at=began)
                else:
                    slots = []  # they follow an older state than the checkpoint's
                starts.append(state.n)
                state, complete = _replayed(key, state, slots)
                states.append(state)
                if complete and state.series is not None:
                    pending[i] = max(2 * len(slots), 1 + self.every // 2)
            self._follow(keys, states, pending)
            if self.clock() - began < self.grace / 2:
                for key, state, start in zip(keys, states, starts):
                    self._keep(key, state)
                    self._probes[key] = min(2 * (state.n - start) + 2, self.every + 2)
                return states
        raise StoreUnavailableError(
            f"reads of {keys[0]!r} took over half the slots' grace ({self.grace:g} s) eight times in a row"
        )

    def _follow(self, keys: Sequence[str], states: list[State], pending: dict[int, int]) -> None:
        """Replay into ``states[i]`` the slots after it, for each ``i`` of ``pending`` (reading that many at first,
        twice as many each batch after), until one is absent."""
        while pending:
            batch = [
                slot_key(keys[i], states[i].series or b"", states[i].n + j)
                for i, c in pending.items()
                for j in range(1, c + 1)
            ]
            values, at, more = self.inner.get_many(batch), 0, {}
            for i, count in pending.items():
                states[i], complete = _replayed(keys[i], states[i], values[at : at + count])
                at += count
                if complete:
                    more[i] = 2 * count
            pending = more

    def _get(self, key: str) -> Record | None:
        self._reap()
        if not is_head(key):
            return self.inner.get(key)
        return self._fold([key])[0].record()

    def _get_many(self, keys: Sequence[str]) -> list[bytes | None]:
        self._reap()
        heads = [i for i, key in enumerate(keys) if is_head(key)]
        if not heads:
            return self.inner.get_many(keys)
        values: list[bytes | None] = [None] * len(keys)
        others = [i for i, key in enumerate(keys) if not is_head(key)]
        if others:
            for i, value in zip(others, self.inner.get_many([keys[i] for i in others])):
                values[i] = value
        for i, state in zip(heads, self._fold([keys[i] for i in heads])):
            values[i] = state.value
        return values

    # -- writes of a head --------------------------------------------------------------------------------------------

    def _current(self, key: str) -> tuple[State, bool]:
        """The head's state to write after, and whether it was read now: the last one this process read or wrote if
        that is recent (the slot after it cannot have been deleted since), else as read now."""
        with self._lock:
            state = self._states.get(key)
        if state is not None and self.clock() - state.at < self.grace / 2:
            return state, False
        return self._fold([key])[0], True

    def _commit(
        self,
        key: str,
        change: Callable[[State], bytes | None],
        args: Callable[[bytes | None], list[Any]],
        resends: bool = False,
    ) -> State:
        """Put the commit ``change`` makes of the head in the slot after the last one read, replaying whatever
        another writer put there first; the head's state after it. ``change`` raises :class:`ConflictError` (with
        ``current`` filled in here) where the commit does not apply; ``args(new head)`` is what the slot holds;
        ``resends``: a head ``change`` gives back unchanged is a resend found there (an append's), not a write.

        Every put is sent within half the grace of the last read of the head's key that the state rests on (its
        ``at``): only then is an absent slot one never written, and not one replayed, covered and deleted since. A put
        that lands later than that is checked against the head's key (:meth:`_uncovered`): covered by then, its outcome
        is unknown (:class:`OutcomeUnknownError`, which mdss answers by sending the commit again)."""
        self._reap()
        state, read = self._current(key)
        lost = 0
        while True:
            if self.clock() - state.at >= self.grace / 2:
                state, read = self._fold([key])[0], True  # an old read (a long wait, a slow store): read again
            try:
                new = change(state)
            except ConflictError as exc:
                if not read:  # refused by a state that may be behind: only the head as read now refuses
                    state, read = self._fold([key])[0], True
                    continue
                exc.current = state.record()
                raise
            if (resends and new is state.value) or (new is None and state.value is None):
                if not read:  # nothing to write (a resend, there already; absent already): as the head stands now
                    state, read = self._fold([key])[0], True
                    continue
                return state
            if state.series is None or state.closed:  # no head, or deleted: a checkpoint of a new series
                assert new is not None  # a delete of no head returned above
                made = self._begin(key, state, new)
                if made is None:
                    state, read = self._fold([key])[0], True
                    continue
                return made
            slot = slot_key(key, state.series, state.n + 1)
            try:
                self.inner.cas(slot, seal(pack(args(new))), None)
            except ConflictError as exc:
                current = exc.current if exc.current_known else self.inner.get(slot)
                if current is None:
                    state, read = self._fold([key])[0], True  # deleted since: read the head again
                    continue
                state, lost = _replayed(key, state, [current.value])[0], lost + 1
                # The writers that lost this slot would all race for the next: each waits a while (jittered, longer
                # each time it loses), then reads the slots that landed meanwhile (not the head's key: its state's
                # ``at`` stays that of the last read of it), and tries the one after them.
                time.sleep(LOSERS.delay(lost))
                states = [state]
                self._follow([key], states, {0: 1 + self.every // 2})
                state, read = states[0], False
                continue
            if self.clock() - state.at >= self.grace / 2 and not self._uncovered(key, state):
                raise OutcomeUnknownError(
                    f"slot {slot!r} landed over half the slots' grace after its head was read, and a checkpoint has "
                    "covered it since: the slot may have been replayed, or deleted and put again (then never read)"
                )
            state = attrs.evolve(state, n=state.n + 1, value=new, closed=new is None)
            self._keep(key, state)
            if state.n % self.every == 0 or new is None:  # one writer in every: the one that wrote that slot
                self._settle(key, state)
            return state

    def _uncovered(self, key: str, state: State) -> bool:
        """Whether no checkpoint covers the slot after ``state`` yet: a put-if-absent that landed there put the slot
        (only covered slots are ever deleted), however late it landed. The slot landed: a read that fails here leaves
        its outcome unknown, never a refusal."""
        try:
            record = self.inner.get(key)
        except StoreUnavailableError as exc:
            raise OutcomeUnknownError(f"a slot of {key!r} landed late and its cover could not be read: {exc}") from exc
        stored = _stored(key, None if record is None else record.value, state.at)
        return stored.series == state.series and stored.base <= state.n

    def _begin(self, key: str, state: State, value: bytes) -> State | None:
        """Make the head ``value`` as the checkpoint of a new series, where ``state`` found none or a deleted one (whose
        slots it dooms): its state, or ``None`` if another writer changed the head's key first."""
        made = State(secrets.token_bytes(8), 0, 0, value, state.at)
        record = None if state.series is None else self.inner.get(key)
        stored = _stored(key, None if record is None else record.value, state.at)
        if record is not None and stored.series != state.series:
            return None
        try:
            self.inner.cas(key, _encoded(made), None if record is None else record.version)
        except ConflictError:
            return None
        if state.series is not None:  # the deleted series' slots: none follows its delete
            self._doom(key, state.series, stored.base, state.n)
        self._keep(key, made)
        return made

    def _keep(self, key: str, state: State) -> None:
        """Hold ``state`` as the head's last, unless another thread holds a later one of the same series."""
        with self._lock:
            kept = self._states.get(key)
            if kept is None or kept.series != state.series or kept.n <= state.n:
                self._states[key] = state

    def _settle(self, key: str, state: State) -> None:
        """Write the head's state as its checkpoint (delete its key, if the head is gone) and doom the slots it covers;
        losing to another checkpoint, or to an unavailable store, is fine: the commit's slot landed, and the next
        checkpoint catches up. A delete tries again while its series is the key's (a delete whose writer stops first
        leaves the key, which reads as absent, to the head's next write)."""
        for _ in range(8):
            try:
                record = self.inner.get(key)
                stored = _stored(key, None if record is None else record.value, state.at)
                if record is None or stored.series != state.series or stored.base >= state.n:
                    return
                if state.value is None:
                    self.inner.delete_if(key, record.version)
                else:
                    self.inner.cas(key, _encoded(attrs.evolve(state, base=state.n)), record.version)
            except ConflictError:
                if state.value is None:
                    continue
                return
            except StoreUnavailableError:  # the commit landed (its slot); the next checkpoint catches up
                return
            assert state.series is not None
            self._doom(key, state.series, stored.base, state.n)
            with self._lock:
                kept = self._states.get(key)
                if kept is not None and kept.series == state.series and kept.n >= state.n:
                    self._states[key] = attrs.evolve(kept, base=state.n)
            return

    def _doom(self, key: str, series: bytes, after: int, last: int) -> None:
        """Delete slots ``after + 1`` to ``last`` of ``series`` once the grace has passed."""
        self._condemn([slot_key(key, series, n) for n in range(after + 1, last + 1)])

    def _condemn(self, slots: list[str]) -> None:
        """Delete ``slots``, covered or ended by now, once the grace has passed."""
        if slots:
            with self._lock:
                self._doomed.append((self.clock() + self.grace, slots))

    def sweep(self, head: str) -> float:
        """Doom the slots of ``head`` that processes which ended within the grace left: listed, then judged by the
        head's key as read after the listing: a slot its checkpoint covers, or of a series that is no longer the key's
        (none is taken up again), goes a grace after that read, as a writer's own would. The slots after the
        checkpoint (the head's latest commits; a delete not yet settled) stay."""
        self._reap()
        self.stats.add(calls=1)
        prefix = head + "~"
        listed = [key for key in self.inner.keys(prefix) if _SLOT_NAME.fullmatch(key, len(prefix))]
        if not listed:
            return 0.0
        state = self._fold([head])[0]
        doomed = []
        for key in listed:
            series, _, n = key[len(prefix) :].partition(".")
            if state.series is None or bytes.fromhex(series) != state.series or int(n) <= state.base:
                doomed.append(key)
        self._condemn(doomed)
        return self.grace if doomed else 0.0

    def _reap(self) -> None:
        """Delete the slots whose grace has passed."""
        now, due = self.clock(), []
        with self._lock:
            while self._doomed and self._doomed[0][0] <= now:
                due += self._doomed.popleft()[1]
        if due:
            try:
                self.inner.delete_many(due)
            except StoreUnavailableError:  # the call it runs in goes on; the slots wait for the next one
                with self._lock:
                    self._doomed.appendleft((now, due))

    def _append(self, key: str, held: bytes, sha: bytes, seen: int, record: bytes, cap: int) -> Record:
        state = self._commit(
            key,
            lambda state: _tail.apply(state.value, sha, seen, record, cap),
            lambda new: [APPEND, _digest(new), sha, seen, record, cap],
            resends=True,
        )
        return state.record()  # type: ignore[return-value]

    def _swap(
        self,
        key: str,
        held: bytes,
        sha: bytes,
        seen: int,
        core: bytes,
        record: bytes,
        cap: int,
        nodes: Mapping[str, bytes],
        lagging: bool = False,
    ) -> Record:
        state = self._commit(
            key,
            lambda state: _tail.swap(state.value, sha, seen, core, record, cap, lagging),
            lambda new: [SWAP, _digest(new), sha, seen, core, record, cap, lagging],
            resends=True,
        )
        return state.record()  # type: ignore[return-value]

    def _cas(self, key: str, value: bytes, version: Any) -> Any:
        if not is_head(key):
            return self.inner.cas(key, value, version)

        def replaced(state: State) -> bytes:
            record = state.record()
            if (record is None and version is not None) or (record is not None and record.version != version):
                raise ConflictError(f"key {key!r} changed since it was read", current_known=True)
            return value

        state = self._commit(key, replaced, lambda new: [REPLACE, _digest(new), new])
        return (state.series, state.n)

    def _delete_if(self, key: str, version: Any) -> None:
        if not is_head(key):
            self.inner.delete_if(key, version)
            return

        def deleted(state: State) -> None:
            record = state.record()
            if record is not None and record.version != version:
                raise ConflictError(f"key {key!r} changed since it was read", current_known=True)
            return None

        self._commit(key, deleted, lambda new: [DELETE, b""])

    # -- everything else: the inner store's ------------------------------------------------------------------------

    def _put(self, key: str, value: bytes, context: Any) -> None:
        if is_head(key):  # a head written whatever it holds: a compare-and-set of the head as it is, in a slot
            self._commit(key, lambda state: value, lambda new: [REPLACE, _digest(new), new])
            return
        self.inner.put(key, value, context=context)

    def _put_many(self, items: Mapping[str, bytes]) -> None:
        for key in [k for k in items if is_head(k)]:
            self._put(key, items[key], None)
        self.inner.put_many({k: v for k, v in items.items() if not is_head(k)})

    def _delete(self, key: str) -> None:
        if is_head(key):  # a head deleted whatever it holds: a delete in a slot, which ends its series
            self._commit(key, lambda state: None, lambda new: [DELETE, b""])
            return
        self.inner.delete(key)

    def _delete_many(self, keys: Sequence[str]) -> None:
        for key in [k for k in keys if is_head(k)]:
            self._delete(key)
        self.inner.delete_many([k for k in keys if not is_head(k)])

    def _keys(self, prefix: str) -> Iterator[str]:
        """The inner store's keys but the slots, which ``gc()`` must not take for garbage."""
        return (key for key in self.inner.keys(prefix) if not _SLOT.search(key))

    def _close(self) -> None:
        self._reap()
        self.inner.close()
