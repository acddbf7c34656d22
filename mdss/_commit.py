"""Commits: resolve callers' ops on a snapshot, append them to the update log (or fold them into the trees), publish
the head; rebase on a lost race (see ``mdss._publish`` for what makes an outcome sure).

The core knows the ops of ``mdss._ops`` and ``remove``; any other op is resolved by the resolver its caller registered
on the engine (:attr:`mdss._engine.Engine.resolvers`: a leaderboard's row versions, tie groups and post ids).
"""

from __future__ import annotations

import contextlib
import itertools
import random
import secrets
import time
from collections.abc import Callable
from typing import Any

from . import _append, _expiry, _log, _merge, _ops, _publish, _snapshot, _tail
from ._codec import pack
from ._deletions import MIN_GRACE
from ._engine import Engine
from ._group import Pending
from ._head import Head, Log
from ._log import log_limit
from ._order import data_of, is_row, same_value, score_of, valued
from ._snapshot import Snapshot
from ._writer import Writer
from .exceptions import (
    ConflictError,
    InvalidArgumentError,
    InvalidScoreError,
    MdssError,
    MissingNodeError,
    shown,
)
from .stores.base import Record


def apply_ops(engine: Engine, pending: Pending, new: dict[str, Any]) -> list[Any]:
    """Apply one caller's ops to ``new`` (member -> value: a score or ``(score, data)``; ``None``: absent); each op's
    result. Leaves ``new`` untouched if an op is refused (an ``incr`` overflowing)."""
    trial = {member: new[member] for _, member, _ in pending.ops}
    results: list[Any] = []
    better, resolvers = engine.ordering.better, engine.resolvers
    wants = pending.want_score
    for n, (op, member, value) in enumerate(pending.ops):
        current = trial[member]
        if op == "remove":
            results.append(current is not None)
            trial[member] = None
            continue
        if op == "take":  # a pop: remove the member only if it still holds the score the pop read
            if current is None or not same_value(score_of(current), value):
                raise _ops.Stale(f"{member!r} no longer holds {value!r}: popped or changed meanwhile")
            results.append(True)
            trial[member] = None
            continue
        if op == _ops.DATA:  # the data of a present member; its score stays
            results.append(current is not None)
            if current is not None:
                trial[member] = valued(score_of(current), value)
            continue
        resolve = resolvers.get(op)
        if resolve is not None:
            results.append(resolve(trial, member, value))
            continue
        data = None
        if type(value) is tuple:  # (score, data): the data goes with the score when the op takes it
            value, data = value
        current, kept = score_of(current), data_of(current)
        now, applied = _ops.resolve(op, current, value, better)
        trial[member] = valued(now, data if applied and data is not None else kept)
        want = wants[n] if isinstance(wants, list) else wants
        if want == "changed":  # Redis' ZADD CH: added, or its score now differs (numerically: 3 and 3.0 do not)
            results.append(now is not None and (current is None or now != current))
        elif want:  # the new score; None where a condition kept the op from applying (Redis' nil)
            results.append(now if applied else None)
        else:  # whether the member was added
            results.append(current is None and now is not None)
    if engine.ordering.records:  # a record window's members hold rows: refused here, before anything is logged
        for member, value in trial.items():
            if value is not None and not is_row(value):
                raise InvalidArgumentError(
                    f"member {shown(member)} of a record window holds rows, not {shown(value, 40)}"
                )
    new.update(trial)
    return results


def commit(engine: Engine, pendings: list[Pending]) -> None:
    """Commit several callers' ops atomically, rebasing on concurrent commits.

    Sets each pending's ``result``, or its ``error`` if its own ops were refused (the others still commit). Starts from
    the head this process last saw (an uncontended append is one compare-and-set), unless :func:`_read_first`; a lost
    race returns (or reads) the winner's head, and the next try starts from it.
    """
    members = list(dict.fromkeys(member for p in pendings for _, member, _ in p.ops))
    started = time.monotonic()  # when the latest attempt began: the wait for a pause scales with what one takes
    learn = engine.writer.held is not None  # the first attempt tells whether the held head had moved (see _learn)
    known: tuple[Record | None] | None = None  # the head a lost race returned: the next attempt starts there
    read = False  # the next attempt reads the head first
    policy = engine.policy
    deadline = time.monotonic() + policy.budget
    # Ops that would change no absent set (removals, data of absent members, Redis' ZADD XX) make none; only ops that
    # can do nothing to an absent member are tried on one (an add or a post needs no trial: it makes the set).
    idle = all(op in _PRESENT_ONLY or op.endswith(":existing") for p in pendings for op, _, _ in p.ops) and all(
        value is None for value in _applied(engine, pendings, dict.fromkeys(members)).values()
    )
    for rounds in itertools.count():
        if rounds:  # after lost races in a row (or a head gone under a read): wait for the others to pause
            if policy.max_attempts is not None and rounds >= policy.max_attempts:
                break
            known = _quiet(engine, deadline, time.monotonic() - started)
            if known is None:
                break
            read = False
        # After a lost race, rebase at once on the winner's head: the best chance is right after a commit landed.
        losses = 0
        while losses < QUICK_RETRIES:
            started = time.monotonic()
            held = engine.writer.held
            if known is None and not read and held is not None and not _read_first(engine):
                known = (held[0],)
            reads = known is None
            snap = _snapshot.snapshot(engine, not idle, known)
            if snap.data is None and known is not None:  # the head held or returned was expired: read the store's
                snap = _snapshot.snapshot(engine, False)
            if snap.data is None:  # no set (never made, dropped or expired), and these ops make none
                _applied(engine, pendings, dict.fromkeys(members))  # their results on it
                return
            if snap.head.expired():  # dropped at its moment: drop it in the store, then write into a fresh set
                snap, known = _expiry.writable(engine, snap), None
            if learn and reads:
                learn = engine.writer.learn(held is not None and snap.version != held[0].version)
            fresh = held is None or known is None or known[0] is not held[0]
            known, read = None, False
            limit = log_limit(engine, snap.head)
            if len(snap.head.log) >= max(2 * limit, 1):  # far past its limit: help merge (or wait for the merger)
                _merge.merge(engine, wait=True)
                read = True  # then at once: the wait was for the merger, not a lost race
                continue
            try:
                outcome = _attempt(engine, snap, pendings, members, limit, fresh)
            except _log.Full:  # its manifest is too long for another move: the same, before anything is written
                _merge.merge(engine, wait=True)
                read = True
                continue
            except MissingNodeError:
                engine.writer.release()
                _snapshot.collected_meanwhile(engine, snap)  # raises if the head did not move: the set is damaged
                break
            if outcome is _REREAD:
                read = True
                continue
            if outcome is None:
                return
            if learn:
                learn = engine.writer.learn(not outcome)
            if outcome:
                landed = engine.head
                # The writes landed already: a merge that fails is for later, never the write's failure (whatever
                # it raises: a refusal now would have a caller retry a write that landed).
                with contextlib.suppress(MdssError):
                    if landed is not None and _merge_due(engine, landed, limit):
                        _merge.merge(engine)
                return
            engine.retries += 1
            losses += 1
            known = engine.writer.take_rival()  # the winner's head, where the store returned it
            read = known is None
    raise ConflictError(
        f"commit to set {engine.name!r} lost to concurrent writers for its whole retry budget "
        f"({policy.budget:g} s{'' if policy.max_attempts is None else f', {policy.max_attempts} rounds'}); "
        "nothing was applied"
    )


def _quiet(engine: Engine, deadline: float, latency: float) -> tuple[Record | None] | None:
    """After :data:`QUICK_RETRIES` lost races in a row: wait for a pause in the other writers' commits, and return the
    head as it stands then (the next attempt starts from it), or ``None`` at ``deadline``.

    Reads the head every ``interval`` (jittered; the policy's ceiling from one attempt's ``latency``, doubling to four
    times that) until two reads in a row find the same record (or core: appends never make a commit lose), or
    :data:`QUIET_POLLS` reads found it moving (then it tries anyway). The writer that committed last mostly commits
    next: an attempt while it runs only loses again and takes the store's write lock from it, whereas a plain backoff
    slept on while that writer paused (docs/performance.md, "Waiting for a pause").
    """
    key, attempt = engine.keys.head, 1
    pause = random.uniform(0.5, 1.0) * engine.policy.ceiling(attempt, latency)
    if time.monotonic() + pause > deadline:
        return None  # no time left: not even a read
    last = engine.store.get(key)
    for _ in range(QUIET_POLLS):
        time.sleep(pause)
        now = engine.store.get(key)
        if _unmoved(engine, last, now):
            return (now,)
        last, attempt = now, min(attempt + 1, QUIET_DOUBLINGS + 1)
        pause = random.uniform(0.5, 1.0) * engine.policy.ceiling(attempt, latency)
        if time.monotonic() + pause > deadline:
            return None
    return (last,)


def _unmoved(engine: Engine, before: Record | None, after: Record | None) -> bool:
    """Whether two reads of a head found the same record (or none); on a store that applies appends, the same core
    head under whatever was appended since."""
    if before is None or after is None:
        return before is after
    if engine.store.appends and len(before.values) == len(after.values) == 1:
        return _tail.core(before.value) == _tail.core(after.value)
    return before.version == after.version and before.values == after.values


def _keep_reached(old: dict[str, Any], new: dict[str, Any], reaches: Callable[[str], bool]) -> None:
    """Make each value the ops gave a member that ``reaches`` (all of a ``"first"`` set's; a board window's column
    entries that go by first) ``(score, data, seq)``: the sequence number it held while its score is unchanged (a post
    that does not change the score keeps its place), else ``None``: reached at its entry (numbered by its place in the
    log when read, or by the commit that folds it: :func:`_attempt`)."""
    for member, value in new.items():
        if value is None or (type(value) is tuple and len(value) == 3) or not reaches(member):
            continue
        was = old[member]
        seq = was[2] if type(was) is tuple and len(was) == 3 and was[0] == score_of(value) else None
        new[member] = (score_of(value), data_of(value), seq)


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
#: How much longer the log grows before a writer merges again within the grace of its last merge (see _merge_due).
PACE = 1.5


def _read_first(engine: Engine) -> bool:
    """Whether a commit should read the head before its compare-and-set, rather than start from the head this process
    holds: when that head had mostly moved by the next commit lately (more than :data:`STALE` of the time), as for
    writers spread over many shards or taking turns on one set (a stale head costs a lost race: a read, a wasted
    attempt and a conflict). A shard also reads first until its own held head was current at its last ``trust_after``
    commits: the shared average dips after a few commits in a row to one shard (docs/performance.md).
    """
    if engine.store.appends:  # the store applies appends to whatever head it holds: no race to lose
        return False
    return engine.writer.stale[0] > STALE or engine.writer.current < engine.writer.trust_after


def _merge_at(engine: Engine, head: Head, limit: int) -> int:
    """The log length at which this writer merges: ``limit`` if it made the trees ``head`` names (its cache holds every
    node they have), else :data:`COLD_MERGE` times that: the writer that merged last merges again without reading a
    node, while any other would first read both trees; the others still merge if that one stops writing."""
    return limit if engine.writer.built == (head.scores.root, head.members.root) else int(limit * COLD_MERGE)


def _merge_due(engine: Engine, head: Head, limit: int) -> bool:
    """Whether a writer whose commit landed ``head`` merges now: its log reached the length at which this writer merges
    (:func:`_merge_at`), or its manifest half its bound (``mdss._log.crowded``: the log is long in bytes, if not in
    entries; known without a read to the writer that moved segments there), and no other merger's claim holds.

    A writer whose last merge landed less than :data:`mdss._deletions.MIN_GRACE` ago (or the set's ``gc_grace``, if
    shorter) lets the log grow to :data:`PACE` times that length first: what a merge replaces (about every entry set of
    both trees, and the log it folds) waits that long before it is deleted, so merges closer together would keep
    several merges' garbage at once (a board of 100,000 rows posting 4,000 times a second merged every 2 s: up to 2.8
    times its live bytes stored; paced, 2.1)."""
    log = head.log
    if _merge.claimed_by_another(log) or not len(log):
        return False
    if _log.crowded(engine, log):
        return True
    at = max(_merge_at(engine, head, limit), 1)
    if time.monotonic() - engine.merged_at < min(MIN_GRACE, engine.gc_grace):
        at = max(int(at * PACE), at + 1)
    return len(log) >= at


#: Ops that can do nothing to an absent member: a removal, a pop's, the data of a present member.
_PRESENT_ONLY = ("remove", "take", _ops.DATA)


def _applied(engine: Engine, pendings: list[Pending], old: dict[str, Any]) -> dict[str, Any]:
    """Every pending's ops applied in turn to ``old`` (member -> value, ``None``: absent), each pending's result or
    refusal set: the values they leave."""
    new = dict(old)
    for pending in pendings:
        pending.result, pending.error = None, None
        try:
            pending.result = apply_ops(engine, pending, new)
        except (InvalidScoreError, _ops.Stale) as exc:
            pending.error = exc
    return new


def _attempt(
    engine: Engine, snap: Snapshot, pendings: list[Pending], members: list[str], limit: int, fresh: bool
) -> Any:
    """Apply every pending's ops on ``snap`` and publish: True if committed, False if it lost the race, ``None`` if
    nothing changes.

    Appends to the update log; a batch as long as the log limit, or of more than ``mdss._log.BATCH_BYTES`` of entries,
    goes straight into the trees, with the log. On a head not read just now (``fresh``), only a plain append is tried:
    "nothing to change" and writing nodes first wait for the current head (:data:`_REREAD`).
    """
    old = dict(zip(members, snap.index.find(members)))
    new = _applied(engine, pendings, old)
    reaching = engine.ordering.reaching
    if reaching:
        _keep_reached(old, new, engine.ordering.reaches)
    changed: list[tuple[str, Any, Any, str | None]] = [
        (m, old[m], new[m], None) for m in members if not same_value(old[m], new[m])
    ]
    if not changed:
        return None if fresh else _REREAD
    nonce = secrets.token_hex(8)
    head, log = snap.head, snap.head.log
    direct = not (len(changed) < limit and len(pack(changed)) <= _log.BATCH_BYTES)
    if reaching and (direct or engine.moments is not None):
        # A new score is reached at its entry's place in the log: a logged entry says so with no number (it takes
        # its place's when read, so it may be appended blindly), one folded into the trees now gets it; a shard of a
        # sharded set takes the clock's moment.
        start = engine.reached(log.seq, len(changed))
        changed = [
            (m, was, (*now[:2], start + i) if type(now) is tuple and len(now) == 3 and now[2] is None else now, None)
            for i, (m, was, now, _) in enumerate(changed)
        ]
    if not direct:
        changed[-1] = (*changed[-1][:3], nonce)
        # Whether it seals decides how it commits; segments are built only by the way that writes them.
        sealing = _log.sealing(log, changed)
        record = None  # the commit as a record (mdss._tail), on a store that applies appends
        if engine.store.appends and snap.data is not None:
            record = _tail.record(nonce, changed, members)
            if record is not None and len(record) > _tail.TAIL_BYTES:  # the tail could never take it
                record = None
        sealer = engine.writer.take_sealer()
        if sealing and record is not None and not (sealer or _append.seals(engine, log)):
            return _append.append(engine, snap, record, nonce, changed)  # another writer's commit seals
        if sealing and not fresh and not engine.store.seals_nodes:  # its segment goes first: from a head just read
            engine.writer.take_sealer(record is not None)  # it seals that one, though others appended meanwhile
            return _REREAD
        if sealing and record is not None and log.inline:
            return _append.seal(engine, snap, record, nonce, changed)
        if not sealing and _append.usable(engine, snap) and record is not None:
            return _append.append(engine, snap, record, nonce, changed)
        appended, stored, replaced = _log.appended(engine, head, changed)
        writer = Writer(engine.chunk_size, head.epoch)
        writer.replaced = replaced
        if not _publish.publish(engine, snap, head.next(nonce, log=appended), writer, stored):
            return False
        assert engine.head is not None  # _publish.publish() remembered the head it landed
        engine.reader.applied(engine.head, log.seq, changed, engine.ordering.keys)
    elif not fresh:
        return _REREAD
    else:
        changes = snap.view.changes() if snap.view is not None else {}
        for member, was, now, _ in changed:
            changes[member] = (changes[member][0] if member in changes else was, now)
        writer, scores, index = _merge.fold(engine, snap, changes)
        writer.replaced.extend(_log.node_ids(engine, log))
        end = log.seq + len(changed)
        head = head.next(nonce, scores=scores, members=index, log=Log(end, end), merges=head.merges + 1)
        if not _publish.publish(engine, snap, head, writer):
            return False
        engine.writer.made(scores.root, index.root)
    engine.commits += 1
    return True
