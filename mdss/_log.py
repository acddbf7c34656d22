"""The update log: writes append resolved entries to the head; reads see them through an in-memory overlay.

A write does not rewrite tree nodes. It appends one entry per changed member,
``(member, old score, new score, nonce)``, to the log the head carries, in
one compare-and-set of the head (``mdss._commit``). The old score is
resolved by the writer (from the log, else the member index), so that a
reader never looks a logged member up: the log alone says what each logged
member was in the trees and what it is now. A merge (``mdss._merge``) folds
the log into both trees, rewriting each touched node once for many updates.

The newest entries live in the head itself, up to :data:`INLINE_BYTES`;
then they are sealed into an immutable segment, named by the head (up to
:data:`SEGS_INLINE` of them) and then, compacted into one, by an immutable
log manifest of at most :data:`PAGE_SEGS` segments: a log whose manifest
fills merges, so that no value grows with the history.

Reads answer as if the log were merged. Each process keeps an
:class:`Overlay` per tree state: the logged members' tree scores and
current scores, and two sorted lists of keys, the tree entries the log
replaces (``removed``) and the entries it makes (``added``). A rank is the
tree's count below a key, minus the removed keys below it, plus the added
keys below it. A :class:`View` is the overlay as of one sequence number, so
that a read stays one snapshot while other threads extend the overlay.
A dense rank counts tie groups instead: :class:`Groups` and
:func:`dense_below`.
"""

from __future__ import annotations

import heapq
import math
import threading
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import attrs
from sortedcontainers import SortedList

from ._codec import _packb, check_entry, decode_log_page, decode_segment, encode_log_page, encode_segment
from ._order import TOP, same_keys
from ._tree import Leaf, Tree
from ._writer import new_id
from .exceptions import CorruptDataError, MissingNodeError

if TYPE_CHECKING:
    from ._head import Head
    from ._sortedset import SortedSet

#: The most bytes of entries the head holds inline before they are sealed into a segment.
INLINE_BYTES = 1024
#: The most bytes of entries in one segment: a batch appended at once is sealed into several (DynamoDB takes
#: values up to 400 KB).
SEGMENT_BYTES = 256 << 10
#: The most sealed segments the head names before they move to a new log manifest.
SEGS_INLINE = 8
#: The most bytes of entries one commit appends to the log; a larger batch goes straight into the trees
#: (a direct commit): so that one commit's segments are always far fewer than a log manifest holds.
BATCH_BYTES = SEGS_INLINE * SEGMENT_BYTES
#: The most segments a log manifest lists: about 56 KB with the longest ids (46 bytes and a sequence number
#: each), a seventh of DynamoDB's 400 KB item. The head's segments move to it compacted into one (about
#: 8 KB of entries), so it indexes about 8 MB of log. A log whose manifest lists half of it merges (as one
#: at ``log_limit``); an append whose move would pass it merges first (:class:`Full`, as at twice the limit),
#: so no manifest is ever written longer, whatever the history (docs/architecture.md, "The log's bounds").
PAGE_SEGS = 1024
#: Bytes of merge written per update that the default ``log_limit`` aims at: with the head write (up to
#: 1.5 KB) and the segments' share, an update writes about 2.5-3 KB in all, under the 4 KB target.
MERGE_BYTES = 1024
#: Bounds of the default ``log_limit``: small sets still batch; huge ones keep the overlay and a cold
#: reader's catch-up bounded (100,000 entries: a few MB).
LOG_MIN, LOG_MAX = 16, 100_000
#: Stored bytes per member over both trees before any is measured (the benchmark's members: about 41).
ENTRY_BYTES_GUESS = 40.0
#: How long a merge claim holds off other mergers (a crashed merger's claim expires).
CLAIM_MS = 10_000

_MISSING = object()

#: A log entry: (member, old score, new score, nonce of the commit it ends, else None); ``None`` scores: absent.
LogEntry = tuple[str, Any, Any, Any]


@attrs.frozen
class Log:
    """The update log as the head names it (see ``mdss._log``).

    Entries ``base`` to ``seq - 1`` are not in the trees yet: the oldest in
    sealed segments that the log manifest ``pages`` lists, newer ones in the
    segments ``segs`` (``(id, first sequence number)``, oldest first), the
    newest ``inline``, ending at ``seq - 1``. A segment may begin before
    ``base`` (a merge folded its start): readers skip what is older.
    ``claim`` is the merge in progress: ``(nonce, lease end in ms)``.
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
            tuple(tuple(e) for e in inline),
            None if claim is None else tuple(claim),
        )
        log._check()
        return log

    def _check(self) -> None:
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


def log_limit(sset: SortedSet, head: Head) -> int:
    """How long the log grows before a merge: the set's ``log_limit``, else derived from the byte target.

    A merge of ``L`` random updates rewrites about every entry set of both
    trees once ``L`` is past the number of entry sets, so an update costs
    about ``tree bytes / L`` of merge, plus one head write (at most
    :data:`INLINE_BYTES` of entries and ~512 bytes of the rest), plus its
    share of segments. With ``tree bytes = n * entry bytes`` (both trees,
    measured by this process at loads and merges),
    ``L = tree bytes / MERGE_BYTES``.
    """
    if sset.log_limit is not None:
        return sset.log_limit
    wanted = math.ceil(head.scores.count * entry_bytes(sset) / MERGE_BYTES)
    return min(max(wanted, LOG_MIN), LOG_MAX)


def measure(sset: SortedSet, entries: int, stored: int) -> None:
    """Record the stored bytes per member (both trees) seen in a load or a merge, for :func:`log_limit`."""
    if entries >= 1000:
        sset._entry_bytes = stored / entries


def entry_bytes(sset: SortedSet) -> float:
    """Stored bytes per member, both trees: as this process's last load or merge measured them, else from
    the entry sets it has read (an entry is in both trees), else a guess. So that processes that never
    merged derive about the same limit as those that did."""
    if sset._entry_bytes is not None:
        return sset._entry_bytes
    cache = sset._cache
    if cache.leaf_entries >= 1000:
        return 2 * cache.leaf_bytes / cache.leaf_entries
    return ENTRY_BYTES_GUESS


# -- appending ----------------------------------------------------------------


def sealing(log: Log, entries: Sequence[LogEntry]) -> bool:
    """Whether appending ``entries`` to ``log`` seals its inline entries into a segment (:func:`appended`):
    a commit that seals writes nodes first, and decides how before it builds them."""
    return len(_packb((*log.inline, *entries))) > INLINE_BYTES


def appended(
    sset: SortedSet, head: Head, entries: Sequence[LogEntry], *, seal: bool = False
) -> tuple[Log, dict[str, bytes], list[str]]:
    """The head's log with ``entries`` appended, the segments and log manifest to store first, and the ids
    of what they replace.

    When the inline entries pass :data:`INLINE_BYTES` (or ``seal``) they are
    sealed into a segment; when the head would name more than
    :data:`SEGS_INLINE` segments, its segments move to a new log manifest
    (the old one is replaced), rewritten as one segment (:func:`_compacted`):
    so the manifest grows by one entry per :data:`SEGS_INLINE` seals, and
    never past :data:`PAGE_SEGS`: a move that would pass it raises
    :class:`Full` instead, before anything is written.
    """
    log = head.log
    inline = (*log.inline, *entries)
    seq = log.seq + len(entries)
    if not seal and len(_packb(inline)) <= INLINE_BYTES:
        return attrs.evolve(log, seq=seq, inline=inline), {}, []
    keys = sset._keys
    first = seq - len(inline)
    stored, sealed = {}, []
    for start, part in _pieces(inline):
        segment = new_id(head.epoch)
        stored[keys.node(segment)] = encode_segment(first + start, part)
        sealed.append((segment, first + start))
    segs, pages, replaced = (*log.segs, *sealed), log.pages, []
    if len(segs) > SEGS_INLINE:
        older = read_log_page(sset, log.pages) if log.pages is not None else ()
        moved, written = _compacted(sset, head) if log.segs else ([], {})
        segs = tuple(sealed)
        if len(segs) > SEGS_INLINE:  # one batch sealed into more pieces than the head names: they move too
            moved, segs = [*moved, *segs], ()
        listed = (*older, *moved)
        if len(listed) > PAGE_SEGS:
            raise Full(f"the update log manifest of set {sset.name!r} would list {len(listed)} segments")
        stored.update(written)
        pages = new_id(head.epoch)
        stored[keys.node(pages)] = encode_log_page(listed)
        _cache_page(sset, pages, listed)  # this writer's next move starts from it: no read, no decoding
        replaced = [seg for seg, _ in log.segs]
        if log.pages is not None:
            replaced.append(log.pages)
    return attrs.evolve(log, seq=seq, inline=(), segs=segs, pages=pages), stored, replaced


def _compacted(sset: SortedSet, head: Head) -> tuple[list[tuple[str, int]], dict[str, bytes]]:
    """The head's sealed segments rewritten as one (several if past :data:`SEGMENT_BYTES`), from the log's
    base on: ``(id, first sequence number)`` of each, and what to store.

    The entries come from this process's overlay, which a commit's snapshot
    has just extended to the head (no read), else from the segments.
    Without it the log manifest would gain an entry per seal: a seal per
    commit with members of 250 bytes, 34 bytes each.
    """
    log = head.log
    start, end = max(log.segs[0][1], log.base), log.seq - len(log.inline)
    found = logged(sset, head.incarnation, start, end)
    if found is None:
        found = entries(sset, log, start)[: end - start]
    out, stored = [], {}
    for offset, part in _pieces(found):
        segment = new_id(head.epoch)
        stored[sset._keys.node(segment)] = encode_segment(start + offset, part)
        out.append((segment, start + offset))
    return out, stored


def listed(sset: SortedSet, log: Log) -> int:
    """How many segments the log manifest lists (it is read unless cached; none without a manifest)."""
    return 0 if log.pages is None else len(read_log_page(sset, log.pages))


def crowded(sset: SortedSet, log: Log) -> bool:
    """Whether the log manifest lists half of :data:`PAGE_SEGS` or more, as far as this process knows
    without a read (its cache of manifests: the writer that moved segments to it has it): then the log
    merges, as at ``log_limit`` entries. A writer that never moves segments never reads a manifest to
    count them; the hard bound (:class:`Full`) holds without it."""
    found = None if log.pages is None else sset._log_pages.get(log.pages)
    return found is not None and len(found) >= PAGE_SEGS // 2


class Full(Exception):
    """An append would move segments to a log manifest past :data:`PAGE_SEGS`: nothing was written, the
    commit merges the log first (``mdss._commit``), as a log at twice ``log_limit`` does."""


def _cache_page(sset: SortedSet, page: str, segs: tuple[tuple[str, int], ...]) -> None:
    if len(sset._log_pages) > 8:
        sset._log_pages.clear()
    sset._log_pages[page] = segs


def _pieces(entries: Sequence[LogEntry]) -> list[tuple[int, Sequence[LogEntry]]]:
    """``entries`` cut into runs of at most about :data:`SEGMENT_BYTES` (one run, mostly): ``(offset, run)``."""
    if len(_packb(entries)) <= SEGMENT_BYTES:
        return [(0, entries)]
    pieces, start, size = [], 0, 0
    for i, entry in enumerate(entries):
        weight = len(_packb(entry))
        if size + weight > SEGMENT_BYTES and i > start:
            pieces.append((start, entries[start:i]))
            start, size = i, 0
        size += weight
    pieces.append((start, entries[start:]))
    return pieces


def read_log_page(sset: SortedSet, page: str) -> tuple[tuple[str, int], ...]:
    """The segments a log manifest lists (cached: manifests are immutable)."""
    cached = sset._log_pages.get(page)
    if cached is None:
        key = sset._keys.node(page)
        data = sset.store.get_many([key])[0]
        if data is None:
            raise MissingNodeError("a log manifest the head names is missing", key)
        cached = decode_log_page(key, data)
        _cache_page(sset, page, cached)
    return cached


def segments(sset: SortedSet, log: Log) -> list[tuple[str, int]]:
    """Every sealed segment the head's log leads to, oldest first (reads the log manifest if there is one)."""
    older = read_log_page(sset, log.pages) if log.pages is not None else ()
    return [*older, *log.segs]


def node_ids(sset: SortedSet, log: Log) -> set[str]:
    """The ids of the log's stored objects: its manifest and its segments."""
    found = {seg for seg, _ in segments(sset, log)}
    if log.pages is not None:
        found.add(log.pages)
    return found


def entries(sset: SortedSet, log: Log, since: int) -> list[LogEntry]:
    """The log's entries from sequence number ``since`` (at least ``log.base``) to ``log.seq - 1``.

    Reads only the segments that hold entries from ``since`` on: none when
    the inline entries reach back far enough, the head's newer segments (one
    round trip), or also the log manifest (one more).
    """
    inline_first = log.seq - len(log.inline)
    if since >= inline_first:
        return list(log.inline[since - inline_first :])
    segs = list(log.segs)
    if not segs or segs[0][1] > since:
        segs = segments(sset, log)
    ends = [s[1] for s in segs[1:]] + [inline_first]
    wanted = [(seg, first) for (seg, first), end in zip(segs, ends) if end > since]
    keys = [sset._keys.node(seg) for seg, _ in wanted]
    start = wanted[0][1] if wanted else inline_first
    found: list[LogEntry] = []
    for key, data, (_, listed) in zip(keys, sset.store.get_many(keys), wanted):
        if data is None:
            raise MissingNodeError("a log segment the head names is missing", key)
        first, stored = decode_segment(key, data)
        if first != listed or first != start + len(found):
            raise CorruptDataError(f"log segment starts at {first}, not {start + len(found)}", key)
        found.extend(stored)
    if start + len(found) != inline_first or start > since:
        raise CorruptDataError("the log's segments do not reach its inline entries", sset._keys.head)
    return [*found[since - start :], *log.inline]


# -- the overlay ----------------------------------------------------------------


class Overlay:
    """The log of one tree state, applied in memory: entries ``base`` to ``seq - 1``.

    ``tree[m]`` is a logged member's score in the trees, ``now[m]`` its
    score after the entries applied (``None``: absent); ``hist[m]`` the
    sequence numbers of its entries. Extended in place under ``lock``; a
    merge makes a new overlay (a new tree state), never changes an old one.

    The sorted keys (``added``, ``removed``: what ranks and ranges need) follow
    the entries lazily, on the first read that needs them (:meth:`sorted`): a
    writer follows every other writer's entries, but only its reads of ranks
    use them, and a process that only writes never sorts them at all.
    """

    def __init__(self, state: tuple[Any, ...], base: int, keyfn: Any, lineage: str | None = None) -> None:
        self.state, self.base, self.seq, self.key = state, base, base, keyfn
        self.lineage = lineage  # the head's (mdss._head.Head.lineage): which later trees this one's entries lead to
        self.entries: list[LogEntry] = []
        self.tree: dict[str, Any] = {}
        self.now: dict[str, Any] = {}
        self.hist: dict[str, list[int]] = {}
        self._removed = SortedList()
        self._added = SortedList()
        self._keyed: dict[str, Any] = {}  # member -> its key in _added
        self._sorted = base  # the entries before this sequence number are in _added and _removed
        self.shifts: dict[Any, tuple[int, int]] = {}  # manifest first key -> (seq, shift), see View.first_shift
        self.lock = threading.Lock()
        self.groups: Groups | None = None  # tie groups for dense ranks, made by the first dense read

    def extend(self, start: int, entries: Sequence[LogEntry]) -> None:
        """Apply ``entries`` that begin at sequence number ``start`` (those applied already are skipped)."""
        with self.lock:
            tree, now, hist = self.tree, self.now, self.hist
            for seq in range(max(self.seq, start), start + len(entries)):
                entry = entries[seq - start]
                member = entry[0]
                if member in now:
                    hist[member].append(seq)
                else:
                    tree[member] = entry[1]
                    hist[member] = [seq]
                now[member] = entry[2]
                self.entries.append(entry)
                self.seq = seq + 1

    def sorted(self) -> tuple[SortedList, SortedList]:
        """The keys the entries added and removed, each sorted, up to ``seq`` (call under ``lock``)."""
        if self._sorted < self.seq:
            key, keyed, added, removed, start = self.key, self._keyed, self._added, self._removed, self._sorted
            gone, new, dropped = [], [], []
            for member in {entry[0] for entry in self.entries[start - self.base :]}:
                if member in keyed:
                    gone.append(keyed.pop(member))
                if self.hist[member][0] >= start and self.tree[member] is not None:  # logged first since
                    dropped.append(key(member, self.tree[member]))
                if self.now[member] is not None:
                    keyed[member] = key(member, self.now[member])
                    new.append(keyed[member])
            for k in gone:
                added.remove(k)
            added.update(new)
            removed.update(dropped)
            self._sorted = self.seq
        return self._added, self._removed

    def view(self, end: int) -> View:
        return View(self, end)


class View:
    """An overlay as of sequence number ``end``: what a snapshot of the head with ``log.seq == end`` sees.

    When other threads extended the overlay since, the entries after ``end``
    are undone on the fly: small sorted corrections, cached per overlay length.
    """

    __slots__ = ("overlay", "end", "_at", "_fix")

    def __init__(self, overlay: Overlay, end: int) -> None:
        self.overlay, self.end = overlay, end
        self._at = end
        self._fix: Any = None  # corrections for entries after ``end``, see _fixes

    def _fixes(self) -> Any:
        """Corrections for entries after ``end`` (call under the lock): ``None`` when there are none."""
        ov = self.overlay
        if ov.seq == self.end:
            return None
        if self._at == ov.seq and self._fix is not None:
            return self._fix
        key, at_end = ov.key, {}
        add_minus, add_plus, rem_minus = [], [], []
        for member in {e[0] for e in ov.entries[self.end - ov.base :]}:
            now = ov.now[member]
            if now is not None:
                add_minus.append(key(member, now))
            seqs = ov.hist[member]
            i = bisect_left(seqs, self.end)
            if i == 0:
                at_end[member] = _MISSING
                if ov.tree[member] is not None:
                    rem_minus.append(key(member, ov.tree[member]))
            else:
                then = ov.entries[seqs[i - 1] - ov.base][2]
                at_end[member] = then
                if then is not None:
                    add_plus.append(key(member, then))
        self._fix = (at_end, sorted(add_minus), sorted(add_plus), sorted(rem_minus))
        self._at = ov.seq
        return self._fix

    def lookup(self, members: Sequence[str]) -> list[Any]:
        """Each member's score as the log says (``None``: removed), or ``_MISSING`` if not logged."""
        ov = self.overlay
        with ov.lock:
            fix = self._fixes()
            out = [ov.now.get(m, _MISSING) for m in members]
            if fix is not None:
                at_end = fix[0]
                out = [at_end.get(m, found) for m, found in zip(members, out)]
        return out

    def shift(self, probe: Any) -> int:
        """Added minus removed keys strictly below ``probe``: what the log does to a tree count below it."""
        ov = self.overlay
        with ov.lock:
            added, removed = ov.sorted()
            shift = added.bisect_left(probe) - removed.bisect_left(probe)
            fix = self._fixes()
            if fix is not None:
                _, add_minus, add_plus, rem_minus = fix
                shift += bisect_left(add_plus, probe) - bisect_left(add_minus, probe) + bisect_left(rem_minus, probe)
        return shift

    def size(self) -> int:
        """Added minus removed entries: what the log does to the count."""
        ov = self.overlay
        with ov.lock:
            added, removed = ov.sorted()
            size = len(added) - len(removed)
            fix = self._fixes()
            if fix is not None:
                size += len(fix[2]) - len(fix[1]) + len(fix[3])
        return size

    def between(self, low: Any, high: Any, *, closed: bool = True) -> tuple[list[Any], list[Any]]:
        """The added and the removed keys from ``low`` to ``high`` (``None``: unbounded), each sorted;
        ``high`` included unless ``closed=False``."""
        ov = self.overlay
        with ov.lock:
            added, removed = ov.sorted()
            added, removed = _within(added, low, high, closed), _within(removed, low, high, closed)
            fix = self._fixes()
        if fix is not None:
            _, add_minus, add_plus, rem_minus = fix
            gone, unremoved = set(add_minus), set(rem_minus)
            added = [k for k in added if k not in gone]
            added.extend(
                k
                for k in add_plus
                if (low is None or k >= low) and (high is None or k < high or (closed and k == high))
            )
            added.sort()
            removed = [k for k in removed if k not in unremoved]
        return added, removed

    def first_shift(self, probe: Any) -> int:
        """:meth:`shift` at a manifest's first key: remembered per overlay state while no entry is added."""
        ov = self.overlay
        if self.end == ov.seq:
            found = ov.shifts.get(probe)
            if found is not None and found[0] == self.end:
                return found[1]
        shift = self.shift(probe)
        if self.end == ov.seq:
            ov.shifts[probe] = (self.end, shift)
        return shift

    def region(self, leaf: Leaf | None, low: Any, high: Any) -> tuple[Any, Any]:
        """The merged entries ``(members, scores)`` of entry set ``leaf``'s region (keys from ``low`` to
        ``high`` excluded) if the leaf holds them for this view (see :meth:`keep`), else ``None``; and the
        log's ``(added, removed)`` keys in the region, ``None`` when the merged entries were known by
        sequence number alone. ``leaf`` is ``None`` when it is not cached (nor are its merged entries).
        """
        state = self.overlay.state
        found = None if leaf is None else leaf.merged
        if found is not None and found[0] == state and found[1] == self.end:
            return found[3], None
        added, removed = self.between(low, high, closed=False)
        logged = (tuple(added), tuple(removed))  # tuples, as the merged entries: kept, the collector skips them
        if found is not None and found[0] == state and all(map(same_keys, found[2], logged)):
            if self.end > found[1]:
                leaf.merged = (state, self.end, logged, found[3])  # type: ignore[union-attr]
            return found[3], logged
        return None, logged

    def keep(self, leaf: Leaf, logged: Any, merged: Any) -> None:
        """Keep a region's merged entries with its decoded entry set, for as long as the node cache keeps it.

        They depend only on the immutable entry set and the logged keys in
        its range, so they stay valid while those keys do, whatever is
        appended elsewhere; a later view finds them by sequence number, or
        by comparing the region's logged keys.
        """
        leaf.merged = (self.overlay.state, self.end, logged, merged)

    def changes(self) -> dict[str, tuple[Any, Any]]:
        """Every member the log changed as of ``end``: ``member -> (score in the trees, score now)``."""
        ov = self.overlay
        with ov.lock:
            fix = self._fixes()
            out = {m: (ov.tree[m], ov.now[m]) for m in ov.now}
            if fix is not None:
                for member, then in fix[0].items():
                    if then is _MISSING:
                        del out[member]
                    else:
                        out[member] = (ov.tree[member], then)
        return out


def _within(keys: SortedList, low: Any, high: Any, closed: bool) -> list[Any]:
    """The keys from ``low`` to ``high`` (``None``: unbounded; ``high`` included if ``closed``), from the
    SortedList's own sorted sublists: two bisections, about half the time of ``irange`` for the few keys a
    page's region holds."""
    maxes, lists = keys._maxes, keys._lists
    p = 0 if low is None else bisect_left(maxes, low)
    end = bisect_right if closed else bisect_left
    out: list[Any] = []
    for sub in lists[p:]:
        i = 0 if low is None else bisect_left(sub, low)
        j = len(sub) if high is None else end(sub, high)
        out += sub[i:j]
        if j < len(sub):
            break
        low = None
    return out


def overlay_view(sset: SortedSet, head: Head) -> View | None:
    """The view of ``head``'s log in this process's overlay, extended (or rebuilt) to reach it; ``None``
    when the log is empty."""
    log = head.log
    if not len(log):
        return None
    state = (head.incarnation, head.scores.root, head.members.root, log.base)
    with sset._overlay_lock:
        overlay = sset._overlay
        if overlay is None or overlay.state != state:
            fresh = Overlay(state, log.base, sset._order.key, head.lineage)
            # Entries are facts of the incarnation: a merge moves the base, never changes an entry.
            if overlay is not None and overlay.state[0] == state[0] and overlay.base <= log.base <= overlay.seq:
                fresh.extend(log.base, overlay.entries[log.base - overlay.base :])
            _supersede(sset, fresh)
            overlay = fresh
    if overlay.seq < log.seq:
        overlay.extend(overlay.seq, entries(sset, log, overlay.seq))
    return overlay.view(log.seq)


#: Superseded overlays kept per set object, so that a cursor made on one stays exact after a merge (while its
#: tree's nodes are kept, ``gc_grace``).
PAST_OVERLAYS = 2


def _supersede(sset: SortedSet, overlay: Overlay) -> None:
    """Make ``overlay`` the set's current one (under its overlay lock), keeping the one it replaces."""
    old = sset._overlay
    if old is not None:
        past = sset._past_overlays
        past[old.state] = old
        while len(past) > PAST_OVERLAYS:
            del past[next(iter(past))]
    sset._overlay = overlay


#: Earlier overlays, each with the log number its entries count up to (:func:`earlier`).
Chain = tuple[tuple["Overlay", int], ...]


def earlier(sset: SortedSet, head: Head) -> Chain:
    """The superseded overlays that lead to ``head``'s member index, newest first, each with the log number
    its entries count up to (the next one's base): within one lineage the trees at base ``m`` are the trees
    of an overlay whose entries reach ``m``, plus its entries before ``m``. A member that the log does not
    name then has the score that overlay says, or that its tree (cached) holds: no read of the new member
    index, which another process's merge made cold (see :class:`Index`)."""
    if head.lineage is None:
        return ()
    chain: list[tuple[Overlay, int]] = []
    cut, current = head.log.base, sset._overlay
    with sset._overlay_lock:
        past = [o for o in reversed(sset._past_overlays.values()) if o is not current]
    for overlay in past:
        same = overlay.state[0] == head.incarnation and overlay.lineage == head.lineage
        if same and overlay.base <= cut <= overlay.seq:
            chain.append((overlay, cut))
            cut = overlay.base
    return tuple(chain)


def overlay_of(sset: SortedSet, root: Any, base: int, end: int) -> Overlay | None:
    """The overlay of the tree state with score root ``root`` and log base ``base``, if this process still
    holds it up to ``end``."""
    with sset._overlay_lock:
        for overlay in (sset._overlay, *reversed(sset._past_overlays.values())):
            if overlay is not None and overlay.state[1] == root and overlay.state[3] == base and overlay.seq >= end:
                return overlay
    return None


def logged(sset: SortedSet, incarnation: str, start: int, end: int) -> list[LogEntry] | None:
    """The entries ``start`` to ``end - 1`` of ``incarnation`` from this process's overlays (the current and
    the superseded ones), without a round trip; ``None`` when some are not there. Numbers that no entry
    has (a batch folded straight into the trees, a load, a drop) are never there."""
    with sset._overlay_lock:
        overlays = [o for o in (sset._overlay, *sset._past_overlays.values()) if o is not None]
    found: list[LogEntry] = []
    at = start
    while at < end:
        for overlay in overlays:
            with overlay.lock:
                if overlay.state[0] == incarnation and overlay.base <= at < overlay.seq:
                    found += overlay.entries[at - overlay.base : min(end, overlay.seq) - overlay.base]
                    break
        else:
            return None
        at = start + len(found)
    return found


def applied(sset: SortedSet, head: Head, start: int, appended: Sequence[LogEntry]) -> None:
    """After this process appended ``appended`` at ``start``: extend its overlay with them (no read)."""
    log = head.log
    state = (head.incarnation, head.scores.root, head.members.root, log.base)
    with sset._overlay_lock:
        overlay = sset._overlay
        if overlay is None or overlay.state != state:
            if start != log.base:
                return  # the next read catches up from the store
            overlay = Overlay(state, log.base, sset._order.key, head.lineage)
            _supersede(sset, overlay)
    overlay.extend(start, appended)


def fate(sset: SortedSet, log: Log, seq: int, nonce: str) -> str:
    """What became of an append whose last entry would be number ``seq``, as the log tells (its nonce is
    there, or another's): ``landed``, ``lost``, or ``unknown`` when merged already."""
    if seq < log.base:
        return "unknown"
    if seq >= log.seq:  # sequence numbers never go back: it did not land where it was built to
        return "lost"
    return "landed" if entries(sset, log, seq)[0][3] == nonce else "lost"


# -- merged reads ---------------------------------------------------------------


class Index:
    """The member index with the log applied: member -> score.

    A member the log does not name is looked up in the trees this process
    held before the last merges first (``chain``, :func:`earlier`): their
    entry sets are cached, and with the entries folded since they give the
    same score. Another process's merge then costs this one no reads of the
    new member index until its cache no longer holds the old one.
    """

    __slots__ = ("tree", "view", "chain", "find_chain")

    def __init__(self, tree: Tree, view: View, find_chain: Callable[[], Chain] | None = None) -> None:
        self.tree, self.view = tree, view
        # The earlier trees, found on the first member the log does not name (most reads look up none).
        self.chain: Chain | None = None if find_chain is not None else ()
        self.find_chain = find_chain

    def get(self, member: str) -> Any:
        return self.find((member,))[0]

    def find(self, members: Sequence[str]) -> list[Any]:
        found = self.view.lookup(members)
        if _MISSING in found and self.chain != ():
            found = [self._earlier(m) if score is _MISSING else score for m, score in zip(members, found)]
        rest = [m for m, score in zip(members, found) if score is _MISSING]
        if rest:
            scores = iter(self.tree.find(rest) if len(rest) > 1 else (self.tree.get(rest[0]),))
            found = [next(scores) if score is _MISSING else score for score in found]
        return found

    def _earlier(self, member: str) -> Any:
        """``member``'s score from an earlier overlay and its cached tree, or ``_MISSING``."""
        if self.chain is None:
            assert self.find_chain is not None
            self.chain = self.find_chain()
        cache = self.tree.source.cache
        for overlay, cut in self.chain:
            with overlay.lock:
                hist = overlay.hist.get(member)
                if hist is not None:
                    i = bisect_left(hist, cut)
                    return overlay.entries[hist[i - 1] - overlay.base][2] if i else overlay.tree[member]
            score = _cached(cache, overlay.state[2], member)
            if score is not _MISSING:
                return score
        return _MISSING


def _cached(cache: Any, root: Any, member: str) -> Any:
    """``member``'s score in the member index ``root`` from cached nodes alone (``None``: not there), or
    ``_MISSING`` when a node on its path is not cached."""
    if root is None:
        return None
    node = cache.get(root)
    while node is not None and node.height:
        node = cache.get(node.ids[node.child(member)])
    if node is None:
        return _MISSING
    keys = node.keys
    i = bisect_left(keys, member)
    return node.scores[i] if i < len(keys) and keys[i] == member else None


class Ranking:
    """The score tree with the log applied: counts below keys, and slices by position."""

    __slots__ = ("tree", "view", "_count", "score_of")

    def __init__(self, tree: Tree, view: View, score_of: Any) -> None:
        self.tree, self.view, self.score_of = tree, view, score_of
        self._count: int | None = None

    @property
    def count(self) -> int:
        """The entries with the log applied (on first use: a commit that only appends never asks)."""
        if self._count is None:
            self._count = self.tree.count + self.view.size()
        return self._count

    def rank_of(self, probe: Any) -> int:
        return self.tree.rank_of(probe) + self.view.shift(probe)

    def count_below(self, probes: Sequence[Any]) -> list[int]:
        return [n + self.view.shift(p) for n, p in zip(self.tree.count_below(probes), probes)]

    def _seek(self, start: int) -> tuple[list[tuple[Any, int]], int, Any, Any]:
        """The entry set where merged position ``start`` falls: ``(path, merged position of its region, the
        region's first key, the next region's first key)``.

        A region is the key range of one entry set, from its first key (``None`` for the leftmost) to the
        next entry set's (``None`` for the rightmost); the log's keys in it belong to it. ``path`` holds the
        manifests descended and the child taken in each, for :meth:`_next`. The manifests are descended by
        merged position: a child's merged start is its tree start plus the log's shift below its first
        key, which only grows along a manifest.
        """
        tree, shift = self.tree, self.view.first_shift
        node_id: Any = tree.root
        before, merged, low, high = 0, 0, None, None
        load, keyfn = tree.source.load_one, tree.keyfn
        path: list[tuple[Any, int]] = []
        for height in range(tree.height, 0, -1):
            node = load(node_id, keyfn, height)
            region = merged - before  # the shift at the node's first key
            lo, at = _child(node, start - before, region, shift)
            if lo or low is not None:
                low = node.firsts[lo]
            if lo + 1 < len(node):
                high = node.firsts[lo + 1]
            merged = before + at
            before, node_id = before + node.starts[lo], node.ids[lo]
            path.append((node, lo))
        return path, merged, low, high

    def _next(self, path: list[tuple[Any, int]]) -> Any:
        """Step ``path`` to the next entry set in key order; the next region's first key after it (``None``
        for the rightmost)."""
        level = len(path) - 1
        while path[level][1] + 1 == len(path[level][0]):
            level -= 1
        node, lo = path[level][0], path[level][1] + 1
        path[level] = (node, lo)
        load, keyfn, height = self.tree.source.load_one, self.tree.keyfn, len(path) - level
        for depth in range(level + 1, len(path)):
            height -= 1
            node = load(node.ids[lo], keyfn, height)
            lo = 0
            path[depth] = (node, 0)
        for node, lo in reversed(path):
            if lo + 1 < len(node):
                return node.firsts[lo + 1]
        return None

    def slice(self, start: int, stop: int) -> tuple[list[str], list[Any]]:
        """Members and scores at merged positions ``start`` to ``stop - 1``, in key order.

        Region by region (an entry set's key range, with the log's keys in
        it): the manifests are descended by merged position to the region
        where ``start`` falls, and each region the page spans is merged once
        (its entries copied, the logged keys deleted and inserted in place)
        and kept with its decoded entry set while its logged keys stay the
        same. The entry sets not cached are read in one round trip, as a
        tree's own slice reads its entry sets.
        """
        start, stop = max(start, 0), min(stop, self.count)
        if start >= stop:
            return [], []
        tree, view, score_of = self.tree, self.view, self.score_of
        if tree.root is None:  # every entry is in the log
            keys = view.between(None, None, closed=False)[0][start:stop]
            return [k[-1] for k in keys], [score_of(k) for k in keys]
        regions, want, need = self._regions(start, stop)
        wanted = [leaf_id for leaf_id, leaf, _, _ in regions if leaf is None]
        loaded = tree.source.load_many(wanted, tree.keyfn, 0) if wanted else {}  # one round trip at most
        out_members: list[str] = []
        out_scores: list[Any] = []
        for leaf_id, leaf, known, logged in regions:
            if known is None:
                leaf = leaf or loaded[leaf_id]
                known = _merged(leaf, logged[0], logged[1], score_of)
                view.keep(leaf, logged, known)
            members, scores = known
            out_members += members[want : want + need]
            out_scores += scores[want : want + need]
            need, want = need - max(min(len(members) - want, need), 0), 0
        return out_members, out_scores

    def _regions(self, start: int, stop: int) -> tuple[list[Any], int, int]:
        """The regions merged positions ``start`` to ``stop - 1`` span (``start < stop``, within the count, a
        tree with a root): ``(entry set id, the entry set if cached, its merged entries if known, the log's
        keys)`` each, from the manifests alone; where ``start`` falls in the first, and the entries wanted."""
        tree, view = self.tree, self.view
        assert tree.root is not None  # callers answer an empty tree themselves
        path, merged, low, high = self._seek(start)
        want, need = start - merged, stop - start  # where the page starts in the first region; entries wanted
        regions = []
        covered, peek = -want, tree.source.peek
        while True:  # the regions the page spans: their sizes are known before their entry sets are read
            node, lo = path[-1] if path else (None, 0)
            leaf_id, count = (tree.root, tree.count) if node is None else (node.ids[lo], node.counts[lo])
            leaf = peek(leaf_id)
            known, logged = view.region(leaf, low, high)
            regions.append((leaf_id, leaf, known, logged))
            covered += count - len(logged[1]) + len(logged[0]) if known is None else len(known[0])
            if covered >= need or high is None:
                break
            low, high = high, self._next(path)
        return regions, want, need

    def first_at(self, start: int) -> Any:
        """The first key of the region where merged position ``start`` falls (within the count), from the
        manifests alone; ``None`` for the leftmost region or an empty tree."""
        return None if self.tree.root is None else self._seek(start)[2]

    def leaf_ids(self, start: int, stop: int) -> list[str]:
        """The ids of the entry sets whose regions hold merged positions ``start`` to ``stop - 1``, reading
        manifests only (what :meth:`slice` would read, for a read to fetch with others in one round trip)."""
        start, stop = max(start, 0), min(stop, self.count)
        if start >= stop or self.tree.root is None:
            return []
        return [leaf_id for leaf_id, _, _, _ in self._regions(start, stop)[0]]


def _merged(leaf: Any, added: Sequence[Any], removed: Sequence[Any], score_of: Any) -> tuple[Any, Any]:
    """The members and scores of an entry set's region with the log applied: its entries without
    ``removed`` (keys of it), with ``added`` (the log's keys in the region), all sorted. Tuples: they are
    kept with the entry set, and CPython's collector stops tracking tuples of strings and numbers (lists
    would make every full collection walk them)."""
    keys = leaf.keys
    if len(added) > 64:  # many logged keys (new scores often land together): one merge of the key lists
        dropped = set(removed)
        merged = list(heapq.merge([k for k in keys if k not in dropped] if dropped else keys, added))
        return tuple([k[-1] for k in merged]), tuple([score_of(k) for k in merged])
    members, scores = list(leaf.members), list(leaf.scores)
    gone = [bisect_left(keys, key) for key in removed]
    for i in reversed(gone):
        del members[i], scores[i]
    for j, key in enumerate(added):  # each at its tree position, less the removed before it, plus the added
        i = bisect_left(keys, key)
        i += j - bisect_left(gone, i)
        members.insert(i, key[-1])
        scores.insert(i, score_of(key))
    return tuple(members), tuple(scores)


def _child(node: Any, target: int, region: int, shift: Any) -> tuple[int, int]:
    """The last child of manifest ``node`` whose merged start (relative to the node's tree start) is at most
    ``target``, and that start; ``region`` is the log's shift at the node's first key.

    The guess from ``region`` is almost always right: about two probes of
    ``shift``, galloping and then bisecting where the log is lopsided.
    """
    firsts, starts, last = node.firsts, node.starts, len(node) - 1

    seen = {0: region}

    def at(i: int) -> int:
        if i not in seen:
            seen[i] = starts[i] + shift(firsts[i])
        return seen[i]

    lo = hi = min(max(bisect_right(starts, target - region) - 1, 0), last)
    step = 1
    if at(lo) > target:  # gallop down to a child starting at or before ``target``
        while True:
            hi, lo = lo - 1, max(lo - step, 0)
            if at(lo) <= target:
                break
            step *= 2
    else:  # gallop up past the children that do
        while hi < last:
            probe = min(hi + step, last)
            if at(probe) > target:
                hi = probe - 1
                break
            lo = hi = probe
            step *= 2
    while lo < hi:  # at(lo) <= target, and every child after hi starts past it
        mid = (lo + hi + 1) // 2
        if at(mid) <= target:
            lo = mid
        else:
            hi = mid - 1
    return lo, at(lo)


# -- dense ranks over the log -------------------------------------------------------


class Groups:
    """What an overlay's log does to the tie groups (distinct scores) of the trees, for dense ranks.

    A logged score makes a tie group where no tree entry has that score, and
    a group vanishes when the log removed every tree entry of it: so the
    change at a score ``s`` (a score key: the first part of a sort key) is
    ``[T - R + A > 0] - [T > 0]``, with ``A`` and ``R`` the log's added and
    removed keys of score ``s`` and ``T`` the tree's entries of score ``s``.
    ``T`` is not in the log (an append reads nothing but the member index):
    the first dense read of an overlay state finds ``T`` for every score
    logged since (``pending``), in the descent it makes anyway
    (:func:`dense_below`), and keeps it (``tree``): the overlay's tree never
    changes. ``gained`` and ``lost`` are the scores whose change is +1 and
    -1 as of ``seq``, sorted, so that the change below a score is two
    bisections. Called under the overlay's lock.
    """

    __slots__ = ("overlay", "seq", "tree", "pending", "added", "removed", "change", "gained", "lost")

    def __init__(self, overlay: Overlay) -> None:
        self.overlay, self.seq = overlay, overlay.base
        self.tree: dict[Any, int] = {}  # score key -> the tree's entries with it (resolved)
        self.pending: set[Any] = set()  # score keys logged whose tree entries are not known yet
        self.added: dict[Any, int] = {}
        self.removed: dict[Any, int] = {}
        self.change: dict[Any, int] = {}  # score key -> +1 / -1 (resolved ones only; absent: 0)
        self.gained = SortedList()
        self.lost = SortedList()

    def _effects(self, seq: int) -> list[tuple[Any, int, int]]:
        """What the entry ``seq`` does to the counts: ``(score key, added, removed)`` changes, as
        :meth:`Overlay.extend` applies it (a member's first entry removes its tree key, a later one replaces
        its logged key)."""
        ov = self.overlay
        member, _, new = ov.entries[seq - ov.base][:3]
        seqs = ov.hist[member]
        k = bisect_left(seqs, seq)
        found = []
        if k == 0:
            if ov.tree[member] is not None:
                found.append((ov.key(member, ov.tree[member])[0], 0, 1))
        else:
            before = ov.entries[seqs[k - 1] - ov.base][2]
            if before is not None:
                found.append((ov.key(member, before)[0], -1, 0))
        if new is not None:
            found.append((ov.key(member, new)[0], 1, 0))
        return found

    def _advance(self) -> None:
        """Catch up with the overlay's entries."""
        touched = set()
        added, removed = self.added, self.removed
        for seq in range(self.seq, self.overlay.seq):
            for s, a, r in self._effects(seq):
                added[s] = added.get(s, 0) + a
                removed[s] = removed.get(s, 0) + r
                touched.add(s)
        self.seq = self.overlay.seq
        for s in touched:
            if s in self.tree:
                self._settle(s)
            else:
                self.pending.add(s)

    def _settle(self, s: Any) -> None:
        t = self.tree[s]
        new = (t - self.removed.get(s, 0) + self.added.get(s, 0) > 0) - (t > 0)
        old = self.change.get(s, 0)
        if new != old:
            if old:
                (self.gained if old > 0 else self.lost).remove(s)
            if new:
                (self.gained if new > 0 else self.lost).add(s)
            self.change[s] = new

    def unresolved(self) -> list[Any]:
        """The score keys logged whose tree entries are not known yet."""
        with self.overlay.lock:
            self._advance()
            return list(self.pending)

    def resolve(self, sizes: dict[Any, int]) -> None:
        """Record the tree's entries of score keys (from :meth:`unresolved`)."""
        with self.overlay.lock:
            self.tree.update(sizes)
            self.pending.difference_update(sizes)
            for s in sizes:
                self._settle(s)
            self._advance()

    def shift(self, end: int, keys: Sequence[Any]) -> list[int]:
        """For each score key, what the log up to ``end`` does to the number of tie groups strictly below it.

        Entries after ``end`` (other threads extended the overlay) are
        undone for the few scores they touch. Every score logged before
        ``end`` is resolved by then (:func:`dense_below`); one logged only
        after it changes nothing as of ``end``.
        """
        with self.overlay.lock:
            self._advance()
            undo: dict[Any, list[int]] = {}
            for seq in range(end, self.seq):
                for s, a, r in self._effects(seq):
                    counts = undo.setdefault(s, [0, 0])
                    counts[0] -= a
                    counts[1] -= r
            fixes = []
            for s, (a, r) in undo.items():
                t = self.tree.get(s)
                if t is not None:
                    then = (t - self.removed.get(s, 0) - r + self.added.get(s, 0) + a > 0) - (t > 0)
                    if then != self.change.get(s, 0):
                        fixes.append((s, then - self.change.get(s, 0)))
            gained, lost = self.gained, self.lost
            return [gained.bisect_left(k) - lost.bisect_left(k) + sum(c for s, c in fixes if s < k) for k in keys]


def _groups(overlay: Overlay) -> Groups:
    """The overlay's tie groups, made on first use."""
    with overlay.lock:
        if overlay.groups is None:
            overlay.groups = Groups(overlay)
        return overlay.groups


def dense_keys(ranking: Tree | Ranking) -> list[Any]:
    """The tree keys whose entry sets :func:`dense_below` reads besides its probes': both ends of each score
    logged since this overlay state's last dense read (none over a tree), for a read to fetch them with
    others in one round trip."""
    if isinstance(ranking, Tree):
        return []
    return [key for s in _groups(ranking.view.overlay).unresolved() for key in ((s,), (s, TOP))]


def dense_below(ranking: Tree | Ranking, probes: Sequence[Any]) -> list[int]:
    """For each probe, the first key of a score: the distinct scores strictly below it, the log applied (the
    dense rank of that score, less one).

    The tree's distinct scores below the probe (:meth:`Tree.below`) plus the
    tie groups the log makes below it, less those it empties (:class:`Groups`).
    The scores logged since this overlay state's last dense read are resolved
    in the same batched descent as the probes (two probes each: the tree's
    entries with that score), so the round trips are those of a count; the
    entry sets read are those of the probes and of the newly logged scores.
    """
    if isinstance(ranking, Tree):
        return [distinct for _, distinct in ranking.below(probes)]
    view = ranking.view
    groups = _groups(view.overlay)
    pending = groups.unresolved()
    edges = [key for s in pending for key in ((s,), (s, TOP))]
    found = ranking.tree.below([*probes, *edges])
    n = len(probes)
    if pending:
        groups.resolve({s: found[n + 2 * i + 1][0] - found[n + 2 * i][0] for i, s in enumerate(pending)})
    shifts = groups.shift(view.end, [probe[0] for probe in probes])
    return [found[i][1] + shift for i, shift in enumerate(shifts)]
