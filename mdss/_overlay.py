"""The update log applied in memory: a reader's overlays of one set (see ``mdss._log``).

Each process keeps an :class:`Overlay` per tree state: the logged members' tree scores and current scores, and two
sorted lists of keys, the tree entries the log replaces (``removed``) and the entries it makes (``added``). A rank is
the tree's count below a key, minus the removed keys below it, plus the added keys below it. A :class:`View` is the
overlay as of one sequence number, so that a read stays one snapshot while other threads extend the overlay.
:class:`Groups` counts tie groups for dense ranks. :class:`Overlays` is the reader state of one engine: its current
overlay and the superseded ones.
"""

from __future__ import annotations

import threading
from bisect import bisect_left
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from sortedcontainers import SortedList

from ._order import same_keys

if TYPE_CHECKING:
    from ._head import Head, Log, LogEntry
    from ._tree import Leaf

#: What :meth:`View.lookup` answers for a member the log does not name.
MISSING = object()
#: Superseded overlays kept per engine, so that a cursor made on one stays exact after a merge (while its
#: tree's nodes are kept, ``gc_grace``).
PAST_OVERLAYS = 2
#: Earlier overlays, each with the log number its entries count up to (:meth:`Overlays.earlier`).
Chain = tuple[tuple["Overlay", int], ...]


class Overlay:
    """The log of one tree state, applied in memory: entries ``base`` to ``seq - 1``.

    ``tree[m]`` is a logged member's score in the trees, ``now[m]`` its score after the entries applied (``None``:
    absent); ``hist[m]`` the sequence numbers of its entries. Extended in place under ``lock``; a merge makes a new
    overlay (a new tree state), never changes an old one. The sorted keys (``added``, ``removed``) follow the entries
    lazily, on the first read of ranks or ranges (:meth:`sorted`): a process that only writes never sorts them.
    """

    def __init__(self, state: tuple[Any, ...], base: int, keys: Any, lineage: str | None = None) -> None:
        # keys(member, value): the score tree keys of a member's value (one, or one per column of a record window's row)
        self.state, self.base, self.seq, self.keys = state, base, base, keys
        self.lineage = lineage  # the head's (mdss._head.Head.lineage): which later trees this one's entries lead to
        self.entries: list[LogEntry] = []
        self.tree: dict[str, Any] = {}
        self.now: dict[str, Any] = {}
        self.hist: dict[str, list[int]] = {}
        self._removed = SortedList()
        self._added = SortedList()
        self._keyed: dict[str, Any] = {}  # member -> its keys in _added
        self._sorted = base  # the entries before this sequence number are in _added and _removed
        self.shifts: dict[Any, tuple[int, int]] = {}  # manifest first key -> (seq, shift), see View.first_shift
        self.lock = threading.Lock()
        self.groups: Groups | None = None  # tie groups for dense ranks, made by the first dense read

    def extend(self, start: int, entries: Sequence[LogEntry]) -> None:
        """Apply ``entries`` that begin at sequence number ``start`` (those applied already are skipped). A ``"first"``
        set's new value ``(score, data, None)`` reached its score at its entry: it takes the entry's number."""
        with self.lock:
            tree, now, hist = self.tree, self.now, self.hist
            for seq in range(max(self.seq, start), start + len(entries)):
                entry = entries[seq - start]
                new = entry[2]
                if type(new) is tuple and len(new) == 3 and new[2] is None:  # "reached here": this entry's number
                    entry = (entry[0], entry[1], (new[0], new[1], seq), entry[3])
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
            keys, keyed, added, removed, start = self.keys, self._keyed, self._added, self._removed, self._sorted
            gone: list[Any] = []
            new: list[Any] = []
            dropped: list[Any] = []
            for member in {entry[0] for entry in self.entries[start - self.base :]}:
                if member in keyed:
                    gone += keyed.pop(member)
                if self.hist[member][0] >= start and self.tree[member] is not None:  # logged first since
                    dropped += keys(member, self.tree[member])
                if self.now[member] is not None:
                    keyed[member] = keys(member, self.now[member])
                    new += keyed[member]
            for k in gone:
                added.remove(k)
            added.update(new)
            removed.update(dropped)
            self._sorted = self.seq
        return self._added, self._removed

    def view(self, end: int) -> View:
        return View(self, end)


class View:
    """An overlay as of sequence number ``end``: what a snapshot of the head with ``log.seq == end`` sees. Entries that
    other threads added since are undone on the fly: small sorted corrections, cached per overlay length."""

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
        keys, at_end = ov.keys, {}
        add_minus: list[Any] = []
        add_plus: list[Any] = []
        rem_minus: list[Any] = []
        for member in {e[0] for e in ov.entries[self.end - ov.base :]}:
            now = ov.now[member]
            if now is not None:
                add_minus += keys(member, now)
            seqs = ov.hist[member]
            i = bisect_left(seqs, self.end)
            if i == 0:
                at_end[member] = MISSING
                if ov.tree[member] is not None:
                    rem_minus += keys(member, ov.tree[member])
            else:
                then = ov.entries[seqs[i - 1] - ov.base][2]
                at_end[member] = then
                if then is not None:
                    add_plus += keys(member, then)
        self._fix = (at_end, sorted(add_minus), sorted(add_plus), sorted(rem_minus))
        self._at = ov.seq
        return self._fix

    def lookup(self, members: Sequence[str]) -> list[Any]:
        """Each member's score as the log says (``None``: removed), or ``MISSING`` if not logged."""
        ov = self.overlay
        with ov.lock:
            fix = self._fixes()
            out = [ov.now.get(m, MISSING) for m in members]
            if fix is not None:
                at_end = fix[0]
                out = [at_end.get(m, found) for m, found in zip(members, out)]
        return out

    def get(self, member: str) -> Any:
        """:meth:`lookup` of one member."""
        ov = self.overlay
        with ov.lock:
            fix = self._fixes()
            found = ov.now.get(member, MISSING)
            return found if fix is None else fix[0].get(member, found)

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
        """The added and the removed keys from ``low`` to ``high`` (``None``: unbounded), each sorted; ``high``
        included unless ``closed=False``."""
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
        """The merged entries ``(members, scores)`` of entry set ``leaf``'s region (keys from ``low`` to ``high``
        excluded) if the leaf holds them for this view (see :meth:`keep`), else ``None``; and the log's ``(added,
        removed)`` keys in the region, ``None`` when the merged entries were known by sequence number alone. ``leaf``
        is ``None`` when it is not cached."""
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
        """Keep a region's merged entries with its decoded entry set, for as long as the node cache keeps it: they stay
        valid while the logged keys in its range do, whatever is appended elsewhere (:meth:`region`)."""
        leaf.merged = (self.overlay.state, self.end, logged, merged)

    def changes(self) -> dict[str, tuple[Any, Any]]:
        """Every member the log changed as of ``end``: ``member -> (score in the trees, score now)``."""
        ov = self.overlay
        with ov.lock:
            fix = self._fixes()
            out = {m: (ov.tree[m], ov.now[m]) for m in ov.now}
            if fix is not None:
                for member, then in fix[0].items():
                    if then is MISSING:
                        del out[member]
                    else:
                        out[member] = (ov.tree[member], then)
        return out


def _within(keys: SortedList, low: Any, high: Any, closed: bool) -> list[Any]:
    """The keys from ``low`` to ``high`` (``None``: unbounded; ``high`` included if ``closed``)."""
    i = 0 if low is None else keys.bisect_left(low)
    j = len(keys) if high is None else keys.bisect_right(high) if closed else keys.bisect_left(high)
    return keys[i:j] if i < j else []


class Groups:
    """What an overlay's log does to the tie groups (distinct scores) of the trees, for dense ranks.

    The change at a score key ``s`` is ``[T - R + A > 0] - [T > 0]``, with ``A`` and ``R`` the log's added and removed
    keys of score ``s`` and ``T`` the tree's entries of score ``s``. ``T`` is not in the log: the first dense read of an
    overlay state finds it for every score logged since (``pending``), in the descent it makes anyway
    (:func:`dense_below`), and keeps it (``tree``). ``gained`` and ``lost`` are the scores whose change is +1 and -1 as
    of ``seq``, sorted: the change below a score is two bisections. Called under the overlay's lock.
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
        """What the entry ``seq`` does to the counts: ``(score key, added, removed)`` changes, as :meth:`Overlay.extend`
        applies it (a member's first entry removes its tree key, a later one replaces its logged key)."""
        ov = self.overlay
        member, _, new = ov.entries[seq - ov.base][:3]
        seqs = ov.hist[member]
        k = bisect_left(seqs, seq)
        found = []
        if k == 0:
            if ov.tree[member] is not None:
                found += [(key[0], 0, 1) for key in ov.keys(member, ov.tree[member])]
        else:
            before = ov.entries[seqs[k - 1] - ov.base][2]
            if before is not None:
                found += [(key[0], -1, 0) for key in ov.keys(member, before)]
        if new is not None:
            found += [(key[0], 1, 0) for key in ov.keys(member, new)]
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

        Entries after ``end`` are undone for the few scores they touch. Every score logged before ``end`` is resolved by
        then (:func:`dense_below`); one logged only after it changes nothing as of ``end``.
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


class Overlays:
    """The reader state of one engine: its current overlay, the superseded ones (for cursors and for
    :class:`mdss._ranking.Index`'s earlier trees), and the log manifests it read; changed only here, under one lock."""

    def __init__(self) -> None:
        self.current: Overlay | None = None
        self._past: dict[tuple[Any, ...], Overlay] = {}
        self._lock = threading.Lock()
        self._pages: dict[str, tuple[tuple[str, int], ...]] = {}  # log manifests read (immutable)

    def page(self, page: str) -> tuple[tuple[str, int], ...] | None:
        return self._pages.get(page)

    def keep_page(self, page: str, segs: tuple[tuple[str, int], ...]) -> None:
        if len(self._pages) > 8:
            self._pages.clear()
        self._pages[page] = segs

    def view(self, head: Head, keys: Any, fetch: Callable[[Log, int], Sequence[LogEntry]]) -> View | None:
        """The view of ``head``'s log, the current overlay extended (or rebuilt) to reach it with the entries
        ``fetch(log, since)`` reads; ``None`` when the log is empty."""
        log = head.log
        if not len(log):
            return None
        state = (head.incarnation, head.scores.root, head.members.root, log.base)
        with self._lock:
            overlay = self.current
            if overlay is None or overlay.state != state:
                fresh = Overlay(state, log.base, keys, head.lineage)
                # Entries are facts of the incarnation: a merge moves the base, never changes an entry.
                if overlay is not None and overlay.state[0] == state[0] and overlay.base <= log.base <= overlay.seq:
                    fresh.extend(log.base, overlay.entries[log.base - overlay.base :])
                self._supersede(fresh)
                overlay = fresh
        if overlay.seq < log.seq:
            overlay.extend(overlay.seq, fetch(log, overlay.seq))
        return overlay.view(log.seq)

    def _supersede(self, overlay: Overlay) -> None:
        """Make ``overlay`` the current one (under the lock), keeping the one it replaces."""
        old = self.current
        if old is not None:
            self._past[old.state] = old
            while len(self._past) > PAST_OVERLAYS:
                del self._past[next(iter(self._past))]
        self.current = overlay

    def earlier(self, head: Head) -> Chain:
        """The superseded overlays that lead to ``head``'s member index, newest first, each with the log number its
        entries count up to (the next one's base): within one lineage the trees at base ``m`` are those of an overlay
        whose entries reach ``m``, plus its entries before ``m``. So a member the log does not name needs no read of the
        new member index, which another process's merge made cold."""
        if head.lineage is None:
            return ()
        chain: list[tuple[Overlay, int]] = []
        cut, current = head.log.base, self.current
        with self._lock:
            past = [o for o in reversed(self._past.values()) if o is not current]
        for overlay in past:
            same = overlay.state[0] == head.incarnation and overlay.lineage == head.lineage
            if same and overlay.base <= cut <= overlay.seq:
                chain.append((overlay, cut))
                cut = overlay.base
        return tuple(chain)

    def of(self, root: Any, base: int, end: int) -> Overlay | None:
        """The overlay of the tree state with score root ``root`` and log base ``base``, if still held up to ``end``."""
        with self._lock:
            for overlay in (self.current, *reversed(self._past.values())):
                if overlay is not None and overlay.state[1] == root and overlay.state[3] == base and overlay.seq >= end:
                    return overlay
        return None

    def logged(self, incarnation: str, start: int, end: int) -> list[LogEntry] | None:
        """The entries ``start`` to ``end - 1`` of ``incarnation`` from the overlays held, without a round trip;
        ``None`` when some are not there (numbers a direct commit, a load or a drop used never are)."""
        with self._lock:
            overlays = [o for o in (self.current, *self._past.values()) if o is not None]
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

    def applied(self, head: Head, start: int, appended: Sequence[LogEntry], keys: Any) -> None:
        """After this process appended ``appended`` at ``start``: extend the overlay with them (no read)."""
        log = head.log
        state = (head.incarnation, head.scores.root, head.members.root, log.base)
        with self._lock:
            overlay = self.current
            if overlay is None or overlay.state != state:
                if start != log.base:
                    return  # the next read catches up from the store
                overlay = Overlay(state, log.base, keys, head.lineage)
                self._supersede(overlay)
        overlay.extend(start, appended)
