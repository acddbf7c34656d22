"""Commits: apply a batch copy-on-write, write the new nodes, compare-and-set the head; rebase on a lost race.

The rule that keeps acknowledged data safe: a commit deletes the nodes it
wrote only once it has *proven* that its head can never be published, that
is, the store answered a definite conflict, or the head shows that another
commit took the generation it was built for. After an ambiguous outcome (a
lost reply, a store that stopped answering) it reads the head and decides
from the generation and the recent commit nonces (:meth:`Head.fate`):
landed, lost, still pending (resend the same compare-and-set), or unknown
(raise :class:`OutcomeUnknownError` and delete nothing: ``gc()`` collects
the nodes if the commit did not land).
"""

from __future__ import annotations

import contextlib
import itertools
import random
import secrets
import time
from typing import TYPE_CHECKING, Any

import attrs

from . import _garbage, _head, _log, _merge, _ops, _tail
from ._codec import _packb
from ._group import Pending
from ._head import LANDED, LOST, PENDING, UNKNOWN, Head, TreeRef, collected_meanwhile, remember
from ._log import Log, log_limit
from ._order import check_count, check_pairs
from ._retry import STORE_CALLS
from ._writer import Writer
from .exceptions import (
    ConflictError,
    CorruptDataError,
    InvalidArgumentError,
    InvalidScoreError,
    MissingNodeError,
    OutcomeUnknownError,
    StoreError,
    StoreUnavailableError,
)
from .stores.base import Record

if TYPE_CHECKING:
    from ._head import Snapshot
    from ._sortedset import SortedSet


def apply_ops(sset: SortedSet, pending: Pending, new: dict[str, Any]) -> list[Any]:
    """Apply one caller's ops to ``new`` (member -> score, ``None``: absent); each op's result.

    Leaves ``new`` untouched if an op is refused (an ``incr`` overflowing).
    """
    trial = {member: new[member] for _, member, _ in pending.ops}
    results: list[Any] = []
    better = sset._order.better
    wants = pending.want_score
    for n, (op, member, value) in enumerate(pending.ops):
        current = trial[member]
        if op == "remove":
            results.append(current is not None)
            trial[member] = None
            continue
        if op == "expect":  # a precondition of the whole caller (mdss.Leaderboard's row version)
            if not _same(current, value):
                raise _ops.Stale(f"member {member!r} is {current!r}, not {value!r}")
            results.append(True)
            continue
        if op == "forget":  # mdss.Leaderboard's pruning of an old post id: only while it is the one read
            gone = _same(current, value)
            if gone:
                trial[member] = None
            results.append(gone)
            continue
        if op == "group":  # mdss.Leaderboard's tie group entry: present while its size entry counts rows
            size, slot = value
            alive = trial[size] not in (None, 0)
            if not alive:
                trial[size] = None
            trial[member] = slot if alive else None
            results.append(alive)
            continue
        now, applied = _ops.resolve(op, current, value, better)
        trial[member] = now
        want = wants[n] if isinstance(wants, list) else wants
        if want == "changed":  # Redis' ZADD CH: added, or its score now differs
            results.append(now is not None and not _same(current, now))
        elif want:  # the new score; None where a condition kept the op from applying (Redis' nil)
            results.append(now if applied else None)
        else:  # whether the member was added
            results.append(current is None and now is not None)
    new.update(trial)
    return results


def _same(a: Any, b: Any) -> bool:
    """The same stored score (``1`` and ``1.0`` differ: the type is kept)."""
    return type(a) is type(b) and a == b


def commit(sset: SortedSet, pendings: list[Pending]) -> None:
    """Commit several callers' ops atomically, rebasing on concurrent commits.

    Sets each pending's ``result``, or its ``error`` if its own ops were
    refused (the others still commit). Starts from the head this process
    last saw, so that an uncontended append is one compare-and-set, unless
    that head was mostly stale lately (:func:`_learn`): then it reads first.
    A lost race returns (or reads) the winner's head, and the next try
    starts from it.
    """
    members = list(dict.fromkeys(member for p in pendings for _, member, _ in p.ops))
    started = time.monotonic()  # when the latest attempt began: the wait for a pause scales with what one takes
    learn = sset._held is not None  # the first attempt tells whether the held head had moved (see _learn)
    known: tuple[Record | None] | None = None  # the head a lost race returned: the next attempt starts there
    read = False  # the next attempt reads the head first
    policy = sset._policy
    deadline = time.monotonic() + policy.budget
    for rounds in itertools.count():
        if rounds:  # after lost races in a row (or a head gone under a read): wait for the others to pause
            if policy.max_attempts is not None and rounds >= policy.max_attempts:
                break
            known = _quiet(sset, deadline, time.monotonic() - started)
            if known is None:
                break
            read = False
        # After a lost race, rebase at once on the winner's head: the loser's best chance is right after a
        # commit landed. Three losses in a row wait for a pause (_quiet).
        losses = 0
        while losses < QUICK_RETRIES:
            started = time.monotonic()
            held = sset._held
            if known is None and not read and held is not None and not _read_first(sset):
                known = (held[0],)
            reads = known is None
            snap = _head.snapshot(sset, True, known)
            if learn and reads:
                learn = _learn(sset, held is not None and snap.version != held[0].version)
            fresh = held is None or known is None or known[0] is not held[0]
            known, read = None, False
            limit = log_limit(sset, snap.head)
            if len(snap.head.log) >= max(2 * limit, 1):  # far past its limit: help merge (or wait for the merger)
                _merge.merge(sset, wait=True)
                read = True  # then at once: the wait was for the merger, not a lost race
                continue
            try:
                outcome = _attempt(sset, snap, pendings, members, limit, fresh)
            except _log.Full:  # its manifest is too long for another move: the same, before anything is written
                _merge.merge(sset, wait=True)
                read = True
                continue
            except MissingNodeError:
                sset._held = None
                collected_meanwhile(sset, snap)  # raises if the head did not move: the set is damaged
                break
            if outcome is _REREAD:
                read = True
                continue
            if outcome is None:
                return
            if learn:
                learn = _learn(sset, not outcome)
            if outcome:
                landed = sset._head
                # The writes landed already: a merge that fails (or that the store refuses) is for later,
                # never reported as the write's failure.
                with contextlib.suppress(StoreError, MissingNodeError):
                    if landed is not None and _merge_due(sset, landed, limit):
                        _merge.merge(sset)
                return
            sset.retries += 1
            losses += 1
            known, sset._rival_head = sset._rival_head, None  # the winner's head, where the store returned it
            read = known is None
    raise ConflictError(
        f"commit to set {sset.name!r} lost to concurrent writers for its whole retry budget "
        f"({policy.budget:g} s{'' if policy.max_attempts is None else f', {policy.max_attempts} rounds'}); "
        "nothing was applied"
    )


def _quiet(sset: SortedSet, deadline: float, latency: float) -> tuple[Record | None] | None:
    """After :data:`QUICK_RETRIES` lost races in a row: wait for a pause in the other writers' commits, and
    return the head as it stands then (the next attempt starts from it), or ``None`` at ``deadline``.

    Reads the head every ``interval`` (jittered; the commit policy's ceiling from one attempt's
    ``latency``, at least its base, doubling to four times that) until two reads in a row find the same
    record (on a store that applies appends, the same core: appends never make a commit lose), or
    :data:`QUIET_POLLS` reads found it moving (then it tries anyway, so that no writer waits long for a
    pause that does not come). Of several processes posting to one set, the one that committed last holds
    the newest head and mostly commits next: an attempt while it runs only loses again, takes the store's
    write lock from it and costs a conflict. A plain backoff slept on while that writer paused (a merge, an
    SQLite checkpoint), and the set stood still (docs/performance.md, "Waiting for a pause").
    """
    key, attempt = sset._keys.head, 1
    pause = random.uniform(0.5, 1.0) * sset._policy.ceiling(attempt, latency)
    if time.monotonic() + pause > deadline:
        return None  # no time left: not even a read
    last = sset.store.get(key)
    for _ in range(QUIET_POLLS):
        time.sleep(pause)
        now = sset.store.get(key)
        if _unmoved(sset, last, now):
            return (now,)
        last, attempt = now, min(attempt + 1, QUIET_DOUBLINGS + 1)
        pause = random.uniform(0.5, 1.0) * sset._policy.ceiling(attempt, latency)
        if time.monotonic() + pause > deadline:
            return None
    return (last,)


def _unmoved(sset: SortedSet, before: Record | None, after: Record | None) -> bool:
    """Whether two reads of a head found the same record (or none); on a store that applies appends, the same
    core head under whatever was appended since."""
    if before is None or after is None:
        return before is after
    if sset.store.appends and len(before.values) == len(after.values) == 1:
        return _tail.core(before.value) == _tail.core(after.value)
    return before.version == after.version and before.values == after.values


#: What an attempt on the head this process last saw answers when only the current head may decide.
_REREAD = object()
#: Lost races in a row that rebase at once, before the commit waits for a pause (:func:`_quiet`).
QUICK_RETRIES = 3
#: How often :func:`_quiet`'s interval doubles while the head keeps moving, and how many reads it makes.
QUIET_DOUBLINGS = 2
QUIET_POLLS = 16
#: Above this share of stale held heads (a moving average), a commit reads the head first.
STALE = 0.5
#: How much longer the log grows before a writer merges that did not make the current trees (see _merge_at).
COLD_MERGE = 1.25


def _learn(sset: SortedSet, moved: bool) -> bool:
    """Follow how often the head this process held had moved by its next commit (``sset._stale[0]``, a
    moving average; see :func:`_read_first`). The shards of a sharded set share one: the other writers of
    a set spread over its shards alike, and a process writing S shards sees each of them S times less
    often. Also counts this set's (this shard's) commits in a row that found the held head current
    (``sset._current``). Returns False: learnt, for this commit."""
    stale = sset._stale
    stale[0] = 0.8 * stale[0] + 0.2 * moved
    sset._current = 0 if moved else sset._current + 1
    return False


def _read_first(sset: SortedSet) -> bool:
    """Whether a commit should read the head before its compare-and-set, rather than start from the head
    this process holds: when that head had mostly moved by the next commit lately (more than
    :data:`STALE` of the time), as it has for writers spread over many shards, or several writers of one
    set taking turns. From a stale head the compare-and-set loses; the lost race returns (or reads) the
    winner's head, so it costs about the round trips of a read first, plus a wasted attempt and a conflict.

    A shard of a sharded set also reads first until its own held head was current at its last
    ``_trust_after`` (2) commits: the shared average dips under :data:`STALE` after a few commits in a row
    to one shard, each of which finds its head current, and a held head trusted then mostly lost (62% of
    them, four writers over 16 shards: docs/performance.md).
    """
    if sset.store.appends:  # the store applies appends to whatever head it holds: no race to lose
        return False
    return sset._stale[0] > STALE or sset._current < sset._trust_after


def _merge_at(sset: SortedSet, head: Head, limit: int) -> int:
    """The log length at which this writer merges: ``limit`` if it made the trees ``head`` names (its last
    merge, direct commit or load: its cache holds every node they have), else :data:`COLD_MERGE` times that.

    With several processes appending, the one that merged last merges again without reading a node; any
    other would first read and decode both trees (its cache holds only the entry sets its lookups
    needed). The others still merge if that one stops writing.
    """
    return limit if sset._built == (head.scores.root, head.members.root) else int(limit * COLD_MERGE)


def _merge_due(sset: SortedSet, head: Head, limit: int) -> bool:
    """Whether a writer whose commit landed ``head`` merges now: its log reached the length at which this
    writer merges (:func:`_merge_at`), or its manifest half its bound (``mdss._log.crowded``: the log is
    long in bytes, if not in entries; known without a read to the writer that moved segments there), and no
    other merger's claim holds."""
    log = head.log
    if _merge.claimed_by_another(log) or not len(log):
        return False
    return len(log) >= max(_merge_at(sset, head, limit), 1) or _log.crowded(sset, log)


def _attempt(
    sset: SortedSet, snap: Snapshot, pendings: list[Pending], members: list[str], limit: int, fresh: bool
) -> Any:
    """Apply every pending's ops on ``snap`` and publish: True if committed, False if it lost the race,
    ``None`` if nothing changes.

    Appends to the update log; a batch as long as the log limit (or every
    batch, with ``log_limit=0``), or of more than ``mdss._log.BATCH_BYTES`` of
    entries, goes straight into the trees, with the log.
    On a head that was not read just now (``fresh``), only a plain append is
    tried: "nothing to change" and writing nodes before the compare-and-set
    (that a dropped set would leave behind) wait for the current head
    (:data:`_REREAD`).
    """
    old = dict(zip(members, snap.index.find(members)))
    new = dict(old)
    for pending in pendings:
        pending.result, pending.error = None, None
        try:
            pending.result = apply_ops(sset, pending, new)
        except (InvalidScoreError, _ops.Stale) as exc:
            pending.error = exc
    changed: list[tuple[str, Any, Any, str | None]] = [
        (m, old[m], new[m], None) for m in members if not (type(old[m]) is type(new[m]) and old[m] == new[m])
    ]
    if not changed:
        return None if fresh else _REREAD
    nonce = secrets.token_hex(8)
    head, log = snap.head, snap.head.log
    if len(changed) < limit and len(_packb(changed)) <= _log.BATCH_BYTES:
        changed[-1] = (*changed[-1][:3], nonce)
        # Whether it seals decides how it commits; the segments (and a log manifest) are built only for the
        # way that writes them, never for an attempt that reads the head first.
        sealing = _log.sealing(log, changed)
        record = None  # the commit as a record (mdss._tail), on a store that applies appends
        if sset.store.appends and snap.data is not None:
            record = _tail.record(nonce, changed, members)
            if record is not None and len(record) > _tail.TAIL_BYTES:  # the tail could never take it
                record = None
        sealer, sset._sealer = sset._sealer, False
        if sealing and record is not None and not (sealer or _seals(sset, log)):
            return _tail_append(sset, snap, record, nonce, changed)  # another writer's commit seals
        if sealing and not fresh:  # a seal writes its segment first: only from the head read just now
            sset._sealer = record is not None  # it seals that one, though others appended meanwhile
            return _REREAD
        if sealing and record is not None and log.inline:
            return _tail_seal(sset, snap, record, nonce, changed)
        if not sealing and _tail_usable(sset, snap) and record is not None:
            return _tail_append(sset, snap, record, nonce, changed)
        appended, stored, replaced = _log.appended(sset, head, changed)
        writer = Writer(sset.chunk_size, head.epoch)
        writer.replaced = replaced
        if not publish(sset, snap, head.next(nonce, log=appended), writer, stored):
            return False
        assert sset._head is not None  # publish() remembered the head it landed
        _log.applied(sset, sset._head, log.seq, changed)
    elif not fresh:
        return _REREAD
    else:
        changes = snap.view.changes() if snap.view is not None else {}
        for member, was, now, _ in changed:
            changes[member] = (changes[member][0] if member in changes else was, now)
        writer, scores, index = _merge.fold(sset, snap, changes)
        writer.replaced.extend(_log.node_ids(sset, log))
        end = log.seq + len(changed)
        if not publish(sset, snap, head.next(nonce, scores=scores, members=index, log=Log(end, end)), writer):
            return False
        sset._built = (scores.root, index.root)
    sset.commits += 1
    return True


def _tail_usable(sset: SortedSet, snap: Snapshot) -> bool:
    """Whether the commit goes to the store as an append (``mdss._tail``): on a store that applies them,
    unless the last one found the head full (then this one seals the tail into a segment)."""
    if not sset.store.appends or snap.data is None:
        return False
    if sset._tail_full:
        sset._tail_full = False
        return False
    return True


def _seals(sset: SortedSet, log: Log) -> bool:
    """Whether a commit that takes the log's inline entries past ``INLINE_BYTES`` (in the head this writer
    holds) seals them, on a store that applies appends: when they were not past it before this commit,
    so that of several writers the one whose commit crossed it seals, and the others append (a seal that
    another one beat is a segment written and deleted for nothing); also when the last append found the
    tail full, or they are past twice that (the one that crossed did not seal). The one that crossed
    reads the head first (``sset._sealer``), and seals it although others appended meanwhile."""
    if sset._tail_full:
        return True
    size = len(_packb(log.inline))
    return size <= _log.INLINE_BYTES or size > 2 * _log.INLINE_BYTES


def _tail_seal(sset: SortedSet, snap: Snapshot, record: bytes, nonce: str, changed: list[Any]) -> bool:
    """Seal the inline entries of the head this writer holds into a segment, and have the store put the
    new core under the records appended since, then ``record`` (``mdss._tail.swap``): True if it landed,
    False if refused (then the segment is deleted again). Other writers' appends never make it lose; they
    go on appending across it (a bridged head). If another seal came first, the record is appended
    across that one, and the segment deleted again (the store never takes a core from a view it left)."""
    sealed, stored, replaced = _log.appended(sset, snap.head, (), seal=True)
    head = attrs.evolve(snap.head, log=sealed)  # no commit of its own: the same entries, sealed
    notes = _garbage.notes_of(sset, head, replaced)  # of the log manifest a new one replaces
    head, pages = _garbage.attach_notes(sset, head, list(notes))
    core, written = head.encode(), {**stored, **notes, **pages}
    sset.store.put_many(written)
    if not _tail_append(sset, snap, record, nonce, changed, core):
        _garbage.discard(sset, list(written))
        return False
    sset._tail_full = False
    if sset._held is None:
        return True  # landed after a lost reply, sealed or not: gc() finds what is not named
    if _tail.core(sset._held[0].value) != core:
        _garbage.discard(sset, list(written))  # another seal came first: only the record was appended
    else:
        sset._garbage.defer([sset._keys.node(i) for i in replaced] + list(notes))
    return True


def _tail_append(
    sset: SortedSet, snap: Snapshot, record: bytes, nonce: str, changed: list[Any], core: bytes | None = None
) -> bool:
    """Have the store append ``record`` to the head (``mdss._tail``; with ``core``, seal: put it in place of
    the head's core first): True if it landed, False if refused (then it never will, and the head the
    store returned is where the rebase starts).

    After a lost reply the same request is sent again: the store adds the
    record only once (a seal that landed refuses its resend). If the store
    then refuses it, :func:`_appended` tells from the head whether the first
    one landed before another commit moved the core.
    """
    held = snap.data
    assert held is not None
    key, doubt = sset._keys.head, _Doubt(sset, nonce)
    with doubt:
        for _ in STORE_CALLS.attempts():
            try:
                if core is None:
                    landed = sset.store.append_log(key, held, record, _tail.TAIL_BYTES)
                else:
                    landed = sset.store.swap_core(key, held, core, record, _tail.TAIL_BYTES)
            except ConflictError as exc:
                if doubt.ambiguous is None:
                    sset._rival_head = (exc.current,)
                    sset._tail_full = bool(getattr(exc, "full", False))
                    return False
                try:
                    if not _appended(sset, snap, exc.current, nonce, doubt.ambiguous):
                        sset._rival_head = (exc.current,)
                        return False
                except OutcomeUnknownError:
                    raise
                except (MissingNodeError, StoreUnavailableError):
                    continue  # the log moved on while it was read, or the read failed: ask the store again
                sset._held = None  # landed, under commits this process has not decoded: the next one reads
                sset.commits += 1
                return True
            except StoreUnavailableError as exc:
                doubt.ambiguous = exc
                continue
            _landed(sset, snap, landed, record, changed)
            sset.commits += 1
            return True
        raise OutcomeUnknownError(
            f"the store did not confirm append {nonce} to set {sset.name!r}, and it cannot be proven applied or not "
            f"({doubt.ambiguous}); it is applied entirely or not at all: read the set before retrying"
        ) from doubt.ambiguous


class _Doubt:
    """A commit's store calls, and whether its outcome is in doubt (``ambiguous``: the first call whose
    reply was lost). A refusal from the store after that (its credentials, a command) tells nothing of the
    lost call, which may have landed: it leaves as :class:`OutcomeUnknownError`, never as a refusal."""

    def __init__(self, sset: SortedSet, nonce: str) -> None:
        self.sset, self.nonce = sset, nonce
        self.ambiguous: StoreUnavailableError | None = None

    def __enter__(self) -> _Doubt:
        return self

    def __exit__(self, kind: object, exc: BaseException | None, tb: object) -> None:
        if self.ambiguous is None or not isinstance(exc, StoreError):
            return
        if isinstance(exc, (ConflictError, StoreUnavailableError)):
            return
        raise OutcomeUnknownError(
            f"commit {self.nonce} to set {self.sset.name!r} lost its reply ({self.ambiguous}), then the store "
            f"refused: {exc}; it is applied entirely or not at all: read the set before retrying"
        ) from exc


def _landed(sset: SortedSet, snap: Snapshot, landed: Record, record: bytes, changed: list[Any]) -> None:
    """Hold the head an append landed in: the head it was sent from, plus the records others appended
    meanwhile (decoded), plus its own (unless a resend found it there already: then among those). When
    its core replaced the writer's (a seal, or across a merge: a bridged head, ``mdss._tail``), the new
    core, plus those records."""
    assert snap.data is not None
    value, head = landed.value, snap.head
    suffix = _tail.after(value, snap.data)
    mine = suffix.endswith(record)
    records = _tail.records(sset._keys.head, suffix[: -len(record)] if mine else suffix)
    if mine:
        records.append((changed[-1][3], changed))
    head = head.appended(records)
    entries = [entry for _, appended in records for entry in appended]
    if _tail.core(value) != _tail.core(snap.data):
        sealed = Head.decode(sset._keys.head, value)
        if sealed.log.seq != head.log.seq or sealed.incarnation != head.incarnation:
            raise CorruptDataError("a bridged head does not follow from the head it replaced", sset._keys.head)
        head = sealed
    remember(sset, head, value, landed.version)
    _log.applied(sset, head, snap.head.log.seq, entries)


def _appended(sset: SortedSet, snap: Snapshot, current: Record | None, nonce: str, ambiguous: Exception) -> bool:
    """Whether an append whose reply was lost landed, from the head the store holds now (which refused
    the same append sent again). Raises :class:`OutcomeUnknownError` when that cannot be told."""
    key = sset._keys.head
    now = None if current is None else Head.decode(key, current.value)
    if now is None or now.incarnation != snap.head.incarnation:
        raise OutcomeUnknownError(
            f"set {sset.name!r} was dropped while append {nonce} awaited its reply ({ambiguous}): it may have "
            "been applied before the drop, or not at all"
        ) from ambiguous
    if nonce in now.recent:
        return True
    if now.gen - snap.head.gen <= len(now.recent):
        return False  # every commit since the writer's view is among the recent ones, and it is not: it never lands
    assert current is not None and snap.data is not None
    if _tail.core(current.value) == _tail.core(snap.data):
        return False  # the same core: the store would have found the record, and it never will take it
    seq = snap.head.log.seq  # the append's first entry came at or after it
    if seq < now.log.base:
        raise OutcomeUnknownError(
            f"append {nonce} to set {sset.name!r} lost its reply ({ambiguous}), and a merge folded the log "
            "since: it is applied entirely or not at all; read the set before retrying"
        ) from ambiguous
    # The core moved on (a seal, a merge): the append landed before it, or it never will.
    return any(entry[3] == nonce for entry in _log.entries(sset, now.log, seq))


def publish(
    sset: SortedSet,
    snap: Snapshot,
    head: Head,
    writer: Writer,
    nodes: dict[str, bytes] | None = None,
    written: bool = False,
) -> bool:
    """Write the new nodes (``nodes``, else the writer's; unless ``written`` already) and the commit's
    garbage note, then compare-and-set the head.

    True once the head is published; False if another commit won (then the
    new nodes are deleted again, as nothing can ever name them).
    """
    notes = _garbage.notes_of(sset, head, writer.replaced)
    head, stored = _garbage.attach_notes(sset, head, list(notes))
    stored.update(notes)
    data = head.encode()
    if nodes is None:
        nodes = writer.encoded(sset._keys)
    sset.store.put_many(stored if written else {**nodes, **stored})
    keys = [*nodes, *stored]
    try:
        landed = _cas_head(sset, snap, head, data)
    except _Dropped:
        _garbage.discard(sset, keys)
        raise
    if landed is None:
        _garbage.discard(sset, keys)
        return False
    remember(sset, head, data, landed[0])
    settle(sset, writer, nodes)
    # The notes go with the nodes they name (a page that lists them finds them gone, as gc() expects).
    sset._garbage.defer([sset._keys.node(i) for i in writer.replaced] + list(notes))
    return True


def put_head(sset: SortedSet, held: bytes | None, version: Any, head: Head) -> tuple[Record, Head]:
    """Write ``head``, which has no log entries of its own (a merge, a merge claim), over the head read
    as ``held`` (its bytes; ``None`` with siblings) and ``version``: on a store that applies appends as a
    seal (``mdss._tail.swap``: the appends that land meanwhile stay after it, and never make it lose),
    else by compare-and-set. The record written and its head; :class:`ConflictError` (with ``current``)
    when the head, or for a seal its core, changed."""
    key, data = sset._keys.head, head.encode()
    if not sset.store.appends or held is None:
        return Record((data,), sset.store.cas(key, data, version)), head
    landed = sset.store.swap_core(key, held, data, b"", _tail.TAIL_BYTES)
    if _tail.core(landed.value) != data:  # another seal came first: nothing was changed
        sset.store.stats.add(conflicts=1)
        raise ConflictError("the head's core changed", current=landed, current_known=True)
    return landed, Head.decode(key, landed.value) if landed.value != data else head


def settle(sset: SortedSet, writer: Writer, nodes: dict[str, bytes]) -> None:
    """After a commit landed: forget the nodes it replaced, cache the nodes it made."""
    cache = sset._cache
    for node_id in writer.replaced:  # only readers of older heads could want them: they reload
        cache.discard(node_id, replaced=True)
    for node_id, node in writer.new.items():
        cache.put(node_id, node, len(nodes[sset._keys.node(node_id)]))


class _Dropped(OutcomeUnknownError):
    """The set was dropped while a commit's outcome was in doubt: its nodes can go, its outcome cannot be told."""


def _cas_head(sset: SortedSet, snap: Snapshot, head: Head, data: bytes) -> tuple[Any] | None:
    """Compare-and-set the head: ``(version written,)`` if it landed (``None`` in it when the store cannot
    tell), ``None`` if it provably never will.

    Raises :class:`OutcomeUnknownError` when neither can be proven within the
    store-call budget.
    """
    key, version = sset._keys.head, snap.version
    nonce = head.recent[0]
    doubt = _Doubt(sset, nonce)
    with doubt:
        for _ in STORE_CALLS.attempts():
            try:
                return (sset.store.cas(key, data, version),)
            except ConflictError as exc:
                if doubt.ambiguous is None:  # a definite lost race: nothing of ours was written
                    if exc.current_known:
                        sset._rival_head = (exc.current,)  # the rebase starts from it without reading it again
                    return None
            except StoreUnavailableError as exc:
                doubt.ambiguous = exc
            try:
                record = sset.store.get(key)
            except StoreUnavailableError:
                continue
            if record is not None and record.value == data:
                return (record.version,)
            now = None if record is None else Head.decode(key, record.value)
            if now is None or now.incarnation != snap.head.incarnation:
                # The set was dropped (and maybe started again) since: our version is gone for good, so our nodes
                # can go, but whether the commit landed before the drop cannot be told.
                raise _Dropped(
                    f"set {sset.name!r} was dropped while commit {nonce} awaited its reply ({doubt.ambiguous}): it "
                    "may have been applied before the drop, or not at all"
                ) from doubt.ambiguous
            fate = now.fate(nonce, snap.head.gen)
            if fate == UNKNOWN and len(head.log) and head.log.base == snap.head.log.base:
                try:
                    fate = _log.fate(sset, now.log, head.log.seq - 1, nonce)  # an append: its last entry tells
                except (MissingNodeError, StoreUnavailableError):
                    # The log moved on since that head was read (a merge or a new log manifest, the old segments
                    # collected), or the read failed: read the head again. Never a rebase: it may have landed.
                    continue
            if fate == LANDED:
                return (None,)
            if fate == LOST:
                return None
            if fate != PENDING:
                break
        raise OutcomeUnknownError(
            f"the store did not confirm commit {nonce} to set {sset.name!r}, and it cannot be proven applied or not "
            f"({doubt.ambiguous}); it is applied entirely or not at all: read the set before retrying"
        ) from doubt.ambiguous


def load(sset: SortedSet, pairs: Any, replace: bool, progress: Any, batch: int) -> None:
    """Build both trees bottom-up from ``pairs`` and publish them in one commit (``SortedSet.load``)."""
    if type(replace) is not bool:
        raise InvalidArgumentError(f"replace must be True or False, got {replace!r:.80}")
    check_count(batch, "batch", least=1)
    if progress is not None and not callable(progress):
        raise InvalidArgumentError(f"progress must be callable, got {progress!r:.80}")
    pairs = check_pairs(pairs)
    try:
        snap = sset._snapshot(create=True)
    except CorruptDataError:  # a damaged head, or nodes without one: replace removes what is left first
        if not replace:
            raise
        sset.drop()
        snap = sset._snapshot(create=True)
    if snap.ranking.count and not replace:
        raise InvalidArgumentError(f"set {sset.name!r} already has entries; pass replace=True to replace them")
    writer = Writer(sset.chunk_size, snap.head.epoch)
    members = sorted(pairs)
    scores = [pairs[m] for m in members]
    index = TreeRef(*writer.build(snap.member_index, members, scores))
    ranked = sset._order.ranked(members, scores)
    by_score = TreeRef(*writer.build(snap.score_tree, [members[i] for i in ranked], [scores[i] for i in ranked]))
    if replace:
        writer.replaced = _replaced(sset, snap)
    nodes = writer.encoded(sset._keys)
    _log.measure(sset, len(members), sum(map(len, nodes.values())))
    names = list(nodes)
    for done in range(0, len(names), batch):
        sset.store.put_many({k: nodes[k] for k in names[done : done + batch]})
        if progress is not None:
            progress(min(done + batch, len(names)), len(names))
    writer.new = {}  # a load does not fill the cache with the whole set
    end = snap.head.log.seq
    head = snap.head.next(
        secrets.token_hex(8), scores=by_score, members=index, log=Log(end, end), lineage=_head.new_lineage()
    )
    if not publish(sset, snap, head, writer, nodes, written=True):
        raise ConflictError(f"set {sset.name!r} changed while it was being loaded; nothing was applied")
    sset._built = (by_score.root, index.root)


def _replaced(sset: SortedSet, snap: Snapshot) -> list[str]:
    """The nodes a replacing load makes unreachable; those of a damaged tree are left to ``gc()``."""
    try:
        return [*snap.score_tree.node_ids(), *snap.member_index.node_ids(), *_log.node_ids(sset, snap.head.log)]
    except CorruptDataError:
        return []
