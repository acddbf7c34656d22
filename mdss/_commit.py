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
import secrets
import time
from operator import itemgetter
from typing import TYPE_CHECKING, Any

import attrs

from . import _head
from ._codec import encode_note, encode_page
from ._group import Pending
from ._head import LANDED, LOST, NOTES_INLINE, PENDING, Head, TreeRef, collected_meanwhile, remember
from ._order import add_scores, check_count, check_pairs
from ._retry import STORE_CALLS
from ._writer import Writer, new_id
from .exceptions import (
    ConflictError,
    CorruptDataError,
    InvalidArgumentError,
    InvalidScoreError,
    MissingNodeError,
    OutcomeUnknownError,
    StoreUnavailableError,
)

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
        if op == "set":
            trial[member] = value
        elif op == "incr":
            trial[member] = add_scores(0 if current is None else current, value)
        else:  # best
            trial[member] = value if current is None else better(current, value)
        want = wants[n] if isinstance(wants, list) else wants
        results.append(trial[member] if want else current is None)
    new.update(trial)
    return results


def commit(sset: SortedSet, pendings: list[Pending]) -> None:
    """Commit several callers' ops atomically, rebasing on concurrent commits.

    Sets each pending's ``result``, or its ``error`` if its own ops were
    refused (the others still commit).
    """
    members = list(dict.fromkeys(member for p in pendings for _, member, _ in p.ops))
    sset._rival_head = None  # what an earlier lost race (a load's) returned is stale by now
    started = [time.monotonic()]  # when the latest attempt began: backoff scales with what an attempt takes
    for _ in sset._policy.attempts(latency=lambda: time.monotonic() - started[0]):
        started[0] = time.monotonic()
        # After a lost race, rebase at once on the winner's head (returned by the compare-and-set where the
        # store can, else read): the loser's best chance is right after a commit landed. A second loss in a
        # row backs off.
        rival = None
        for _ in range(2):
            snap = _head.snapshot(sset, True, rival)
            try:
                outcome = _attempt(sset, snap, pendings, members)
            except MissingNodeError:
                collected_meanwhile(sset, snap)  # raises if the head did not move: the set is damaged
                break
            if outcome:
                return
            sset.retries += 1
            rival, sset._rival_head = sset._rival_head, None
    raise ConflictError(
        f"commit to set {sset.name!r} lost to concurrent writers for its whole retry budget "
        f"({sset._policy.budget:g} s); nothing was applied"
    )


def _attempt(sset: SortedSet, snap: Snapshot, pendings: list[Pending], members: list[str]) -> bool:
    """Apply every pending's ops on ``snap`` and publish: True if committed (or nothing to change)."""
    key = sset._order.key
    old = dict(zip(members, snap.member_index.find(members)))
    new = dict(old)
    for pending in pendings:
        pending.result, pending.error = None, None
        try:
            pending.result = apply_ops(sset, pending, new)
        except InvalidScoreError as exc:
            pending.error = exc
    score_ops, member_ops = [], []
    for member in members:
        was, now = old[member], new[member]
        if type(was) is type(now) and was == now:
            continue
        if was is not None:
            score_ops.append((key(member, was), member, None))
        if now is not None:
            score_ops.append((key(member, now), member, now))
        member_ops.append((member, member, now))
    if not member_ops:
        return True
    score_ops.sort(key=itemgetter(0))
    member_ops.sort(key=itemgetter(0))
    writer = Writer(sset.chunk_size, snap.head.epoch)
    scores = TreeRef(*writer.apply(snap.score_tree, score_ops))
    index = TreeRef(*writer.apply(snap.member_index, member_ops))
    if not publish(sset, snap, snap.head.next(secrets.token_hex(8), scores=scores, members=index), writer):
        return False
    sset.commits += 1
    return True


def publish(sset: SortedSet, snap: Snapshot, head: Head, writer: Writer, nodes: dict[str, bytes] | None = None) -> bool:
    """Write the new nodes (unless given: already written) and the commit's garbage note, then
    compare-and-set the head.

    True once the head is published; False if another commit won (then the
    new nodes are deleted again, as nothing can ever name them).
    """
    head, notes, note = _noted(sset, head, writer)
    data = head.encode()
    if nodes is None:
        nodes = writer.encoded(sset._keys)
        sset.store.put_many({**nodes, **notes})
    else:
        sset.store.put_many(notes)
    written = [*nodes, *notes]
    try:
        landed = _cas_head(sset, snap, head, data)
    except _Dropped:
        _delete_unnamed(sset, written)
        raise
    if not landed:
        _delete_unnamed(sset, written)
        return False
    remember(sset, head, data)
    cache = sset._cache
    for node_id in writer.replaced:  # only readers of older heads could want them: they reload
        cache.discard(node_id)
    for node_id, node in writer.new.items():
        cache.put(node_id, node, len(nodes[sset._keys.node(node_id)]))
    # The note goes with the nodes it names (a page that lists it finds it gone, as gc() expects).
    sset._garbage.defer([sset._keys.node(i) for i in writer.replaced] + ([note] if note else []))
    return True


def _delete_unnamed(sset: SortedSet, keys: list[str]) -> None:
    """Delete what a commit wrote that no head can ever name; if the store fails, ``gc(sweep=True)`` will."""
    with contextlib.suppress(StoreUnavailableError):
        sset.store.delete_many(keys)


def _noted(sset: SortedSet, head: Head, writer: Writer) -> tuple[Head, dict[str, bytes], str | None]:
    """The head with a garbage note of the nodes this commit replaces, what to store (the note, and a page
    when the head's notes are full), and the note's key.

    The note makes the deferred deletion durable: if this process ends before
    the grace period does, ``gc()`` finds the replaced nodes from the head's
    notes, with no listing. Notes past :data:`NOTES_INLINE` move to a page.
    """
    if not writer.replaced:
        return head, {}, None
    note = new_id(head.epoch)
    key = sset._keys.note(note)
    stored = {key: encode_note(writer.replaced)}
    notes = (note, *head.notes)
    if len(notes) <= NOTES_INLINE:
        return attrs.evolve(head, notes=notes), stored, key
    page = new_id(head.epoch)
    stored[sset._keys.note(page)] = encode_page(notes, head.note_page)
    return attrs.evolve(head, notes=(), note_page=page), stored, key


class _Dropped(OutcomeUnknownError):
    """The set was dropped while a commit's outcome was in doubt: its nodes can go, its outcome cannot be told."""


def _cas_head(sset: SortedSet, snap: Snapshot, head: Head, data: bytes) -> bool:
    """Compare-and-set the head: True if it landed, False if it provably never will.

    Raises :class:`OutcomeUnknownError` when neither can be proven within the
    store-call budget.
    """
    key, version = sset._keys.head, snap.version
    nonce, ambiguous = head.recent[0], None
    for _ in STORE_CALLS.attempts():
        try:
            sset.store.cas(key, data, version)
            return True
        except ConflictError as exc:
            if ambiguous is None:  # a definite lost race: nothing of ours was written
                if exc.current_known:
                    sset._rival_head = (exc.current,)  # the rebase starts from it without reading it again
                return False
        except StoreUnavailableError as exc:
            ambiguous = exc
        try:
            record = sset.store.get(key)
        except StoreUnavailableError:
            continue
        if record is not None and record.value == data:
            return True
        now = None if record is None else Head.decode(key, record.value)
        if now is None or now.incarnation != snap.head.incarnation:
            # The set was dropped (and maybe started again) since: our version is gone for good, so our nodes
            # can go, but whether the commit landed before the drop cannot be told.
            raise _Dropped(
                f"set {sset.name!r} was dropped while commit {nonce} awaited its reply ({ambiguous}): it may have "
                "been applied before the drop, or not at all"
            ) from ambiguous
        fate = now.fate(nonce, snap.head.gen)
        if fate == LANDED:
            return True
        if fate == LOST:
            return False
        if fate != PENDING:
            break
    raise OutcomeUnknownError(
        f"the store did not confirm commit {nonce} to set {sset.name!r}, and it cannot be proven applied or not "
        f"({ambiguous}); it is applied entirely or not at all: read the set before retrying"
    ) from ambiguous


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
    if snap.head.scores.count and not replace:
        raise InvalidArgumentError(f"set {sset.name!r} already has entries; pass replace=True to replace them")
    writer = Writer(sset.chunk_size, snap.head.epoch)
    members = sorted(pairs)
    scores = [pairs[m] for m in members]
    index = TreeRef(*writer.build(snap.member_index, members, scores))
    ranked = sset._order.ranked(members, scores)
    by_score = TreeRef(*writer.build(snap.score_tree, [members[i] for i in ranked], [scores[i] for i in ranked]))
    if replace:
        writer.replaced = _replaced(snap)
    nodes = writer.encoded(sset._keys)
    names = list(nodes)
    for done in range(0, len(names), batch):
        sset.store.put_many({k: nodes[k] for k in names[done : done + batch]})
        if progress is not None:
            progress(min(done + batch, len(names)), len(names))
    writer.new = {}  # a load does not fill the cache with the whole set
    head = snap.head.next(secrets.token_hex(8), scores=by_score, members=index)
    if not publish(sset, snap, head, writer, nodes):
        raise ConflictError(f"set {sset.name!r} changed while it was being loaded; nothing was applied")


def _replaced(snap: Snapshot) -> list[str]:
    """The nodes a replacing load makes unreachable; those of a damaged tree are left to ``gc()``."""
    try:
        return [*snap.score_tree.node_ids(), *snap.member_index.node_ids()]
    except CorruptDataError:
        return []
