"""Leaderboards: one row per owner, several sorted columns with composite keys, time windows, five views.

Each window instance (``all``, ``day:2026-11-23``, ``week:2026-W48``, ``raid:2026-11-27T17:00Z``...) is one record
window: a :class:`SortedSet` whose member index holds each owner's row and whose score tree holds its keys in each
column (``mdss._board_rows``). A post to a window is one commit of one op that merges the posted values into the row
the commit finds, so it reads nothing first and a snapshot never shows a row and its keys disagreeing. See
docs/leaderboard.md.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from . import _board_settings, _estimate, _expiry, _load, _ops, _percentiles, _snapshot, _windows
from . import _board_views as views
from ._board_format import MAX_FIELD_NAME as MAX_FIELD_NAME
from ._board_format import MAX_FIELDS as MAX_FIELDS
from ._board_format import MAX_ROW_BYTES as MAX_ROW_BYTES
from ._board_format import Row, _Column, _post_member
from ._board_format import window_tiebreak as legacy_tiebreak
from ._board_load import combined_rows, legacy_source, window_source
from ._board_ops import RESOLVERS, Posted
from ._board_post import check_post, expired, new_row
from ._board_rows import check_fits, expired_ids, owner_member, reached, row_value, window_problems, window_tiebreak
from ._board_settings import _LEGACY_EPOCH, RECORDS_LAYOUT, record_part
from ._board_settings import ROWS_LAYOUT as ROWS_LAYOUT
from ._board_views import Page, RankedRow
from ._codec import unpack
from ._facade import check_page, staleness
from ._keys import Keyspace, board_keyspace
from ._order import (
    MAX_OWNER_BYTES,
    Order,
    check_choice,
    check_count,
    check_flag,
    check_member,
    check_seconds,
    exact,
    iterate,
)
from ._schedules import Calendar
from ._sortedset import SortedSet
from ._tree import CHILD_BYTES
from .exceptions import (
    ConflictError,
    InvalidArgumentError,
    InvalidMemberError,
    MdssError,
    MissingNodeError,
    SettingsMismatchError,
    StoreError,
    failed_after,
    shown,
)
from .stores.base import Record, Store

#: How long a post id is remembered by default (seconds): a retry within it counts nothing twice.
POST_ID_TTL = 86400
#: Ranks a leaderboard can return.
TIES = ("ordinal", "competition", "dense")
#: The most bytes a node of a window's set weighs (rows are large; DynamoDB's limit is 400 KB); a row a quarter at most.
NODE_BYTES = 65536


class _Retired(Exception):
    """A post would make a window again that ``retention`` no longer keeps (another process dropped it)."""


class Leaderboard:
    """A leaderboard: rows of values per owner, ranked by several columns, in time windows.

    ``columns`` maps each column name to a direction (``"desc"``: highest first; the field is the column's name) or to a
    list of ``(field, direction)`` parts, compared in turn, ties finally broken by owner, or, in the columns
    ``tiebreak`` maps to ``"first"`` (``tiebreak="first"``: every column), by who reached the key first (the window's
    commit order: a post that leaves the key keeps the row's place). ``accumulate`` fields add up
    over posts; ``keep_best`` fields keep the ``"min"`` or ``"max"``; every other field takes the posted value.
    ``windows`` are the kinds a post goes to (``all``, ``hour``, ``day``, ``week``, ``month``, ``year``, or a name in
    ``schedules``, which maps names to cron lines: ``{"raid": "0 18 * * FRI"}``), cut in ``tz`` (UTC by default, or a
    zoneinfo name); weeks start on ``week_start`` (``"monday"``: ISO weeks); ``retention={"day": 30}`` keeps the 30
    newest day windows. ``now`` is a clock for tests. ``node_bytes`` bounds the nodes of new windows' sets;
    ``post_id_ttl`` is how long (seconds) a ``post_id`` is remembered. Other options (``chunk_size``, ``gc_grace``...)
    go to every window's :class:`SortedSet`. See docs/leaderboard.md for how windows cut time across daylight saving.

    >>> board = Leaderboard(mdss.open_store("memory://"), "game", columns={"xp": "desc"}, accumulate=["kills"])
    >>> board.post("ann", {"xp": 600, "kills": 2}, post_id="p1")
    {'all': True}
    >>> board.post("ann", {"xp": 600, "kills": 2}, post_id="p1")  # a retry: nothing changes
    {'all': False}
    >>> board.post("bob", {"xp": 900, "kills": 1}); board.row("ann").values
    {'all': True}
    {'xp': 600, 'kills': 2}
    >>> [(r.rank, r.owner) for r in board.top("xp", 10)], board.positions("ann")
    ([(1, 'bob'), (2, 'ann')], {'xp': 2})
    """

    def __init__(
        self,
        store: Store,
        name: str,
        *,
        columns: Mapping[str, Any],
        tiebreak: Any = None,
        accumulate: Iterable[str] = (),
        keep_best: Mapping[str, str] | None = None,
        windows: Iterable[str] = ("all",),
        tz: Any = None,
        week_start: str = "monday",
        schedules: Mapping[str, str] | None = None,
        retention: Mapping[str, int] | None = None,
        now: Callable[[], Any] | None = None,
        node_bytes: int = NODE_BYTES,
        post_id_ttl: float = POST_ID_TTL,
        **options: Any,
    ) -> None:
        if not isinstance(store, Store):
            raise InvalidArgumentError(f"store must be an mdss Store (see mdss.open_store), got {shown(store)}")
        if not isinstance(name, str) or not name or "#" in name:
            # refused since boards named their parts "game#week:2026-W48", "game#rows#all" (see board_keyspace)
            raise InvalidArgumentError(f"a leaderboard name must be a non-empty str without '#', got {shown(name)}")
        self.store, self.name = store, exact(name)
        self.columns = _board_settings.check_tiebreak(tiebreak, _board_settings.check_columns(columns))
        #: How the board cuts time into window instances: its zone, weeks and schedules.
        self.calendar = Calendar(tz, week_start, schedules)
        self.tz = self.calendar.tz
        self.accumulate, self.keep_best, self.windows_kinds, self.retention = _board_settings.check_rules(
            accumulate, keep_best, windows, retention, self.calendar
        )
        self._now, self.node_bytes, self.post_id_ttl, self._options = _board_settings.check_storage(
            now, node_bytes, post_id_ttl, options
        )
        self._now = self._now or time.time
        #: How old a snapshot a view may answer from, by default (``mdss._recent``); posts always read fresh.
        self.max_staleness = check_seconds(self._options.pop("max_staleness", 0.0), "max_staleness")
        self._sets: dict[str, SortedSet] = {}
        self._lock = threading.Lock()
        self._registered: set[str] = set()
        self._last = threading.local()  # the Recent of the window this thread's last view read (read_age)
        found, self._legacy = _board_settings.stored_settings(store, name)
        self._check_key_room()
        self._registry = self._part_set("windows")
        self._post_ids: SortedSet | None = None
        #: How a window's keys derive from its rows (its sets' order: one per board).
        self._order = Order("asc", window_tiebreak(self.columns))
        self._adopt_settings(found)

    @classmethod
    def open(cls, store: Store, name: str, **options: Any) -> Leaderboard:
        """The board ``name`` with the columns, ``accumulate`` and ``keep_best`` it was stored with; ``options`` as for
        the constructor (windows, tz...).

        >>> store = mdss.open_store("memory://")
        >>> _ = Leaderboard(store, "g", columns={"race": [("laps", "desc"), ("ms", "asc")]}, accumulate=["k"])
        >>> Leaderboard.open(store, "g", windows=["day"])
        Leaderboard('g', columns=['race'], windows=['day'])
        """
        if not isinstance(store, Store):
            raise InvalidArgumentError(f"store must be an mdss Store (see mdss.open_store), got {shown(store)}")
        if not isinstance(name, str) or not name:
            raise InvalidArgumentError(f"a leaderboard name must be a non-empty str, got {shown(name)}")
        name = exact(name)
        stored = _board_settings.stored_rules(store, name)
        given = sorted(set(stored) & set(options))
        if given:
            raise InvalidArgumentError(
                f"Leaderboard.open() takes {', '.join(given)} as stored; to give them, call Leaderboard(...) instead"
            )
        return cls(store, name, **stored, **options)

    # -- its sets: SortedSets at internal keys, whose engines commit the board's ops --------------------------------

    def _part_set(
        self, part: str, on_start: Callable[[], None] = lambda: None, tiebreak: str | None = None
    ) -> SortedSet:
        """The set of one of the board's parts (the registry ``windows``, ``posts``, a window instance: ``tiebreak``
        names its columns that go by first)."""
        return SortedSet.at_keys(
            self._space(part),
            self.store,
            f"{self.name}#{part}",
            node_bytes=self.node_bytes,
            resolvers=RESOLVERS,
            order="asc",
            on_start=on_start,
            tiebreak=tiebreak,
            **self._options,
        )

    @staticmethod
    def _held_snapshot(sset: SortedSet) -> Any:
        """A snapshot of the head this process last saw (no read when its nodes are cached); None without one."""
        held = sset.engine.writer.held
        return None if held is None else _snapshot.snapshot(sset.engine, False, (held[0],))

    # -- settings ------------------------------------------------------------------------------------------------

    def _check_key_room(self) -> None:
        """Refuse a name whose windows' keys could pass the store's longest key (a window's set refuses its own when it
        is made, but a post's first windows would have taken it by then): each kind's instance at a moment of this
        era (not this board's clock, which its calls check), as long as any in years of four digits."""
        sample = dt.datetime(2000, 12, 31, 23, tzinfo=_windows.UTC)
        for kind in self.windows_kinds:
            try:
                instance = self.calendar.instance(kind, sample)
            except Exception:  # a time zone that fails: the calls that need it say so
                continue
            self._space(instance).check_fits(self.store, self.name)

    def _space(self, part: str) -> Keyspace:
        return board_keyspace(self.store, self.name, part, self._legacy)

    def _adopt_settings(self, record: Record | None) -> None:
        """Store the settings on first use (``record``: those stored), refuse others, migrate old boards."""
        key = self._space("board").head
        rules = (self.columns, self.accumulate, self.keep_best)
        data = _board_settings.settings(*rules, RECORDS_LAYOUT)
        if record is None:
            try:
                self.store.cas(key, data, None)
                return
            except ConflictError:
                record = self.store.get(key)
        if record is not None and record.value != data:
            layout = next((n for n in (None, ROWS_LAYOUT) if record.value == _board_settings.settings(*rules, n)), 0)
            if layout != 0:
                if layout is None:
                    self._migrate()
                self._move_to_records()
                with contextlib.suppress(ConflictError):  # another process moved it first
                    self.store.cas(key, data, record.version)
                self._drop_entry_windows()
                return
            unpack(key, record.value, "leaderboard settings")  # damaged bytes: CorruptDataError, not a mismatch
            raise SettingsMismatchError(
                f"leaderboard {self.name!r} is stored with other columns, tiebreak, accumulate or keep_best settings"
            )

    def _entry_window(self, instance: str) -> SortedSet:
        """Window ``instance`` as layouts 1 and 2 kept it: a set of entries (rows spelled as members), read to move."""
        return self._part_set(instance, tiebreak=legacy_tiebreak(self.columns))

    def _move_to_records(self) -> None:
        """Write every window of a board stored before record windows (layout 2) as a record window: its rows and its
        post ids (still counted), each window by one load that replaces whatever an interrupted move left. Once by the
        first process to open the board (when processes of earlier versions have stopped posting); the settings then
        say layout 3, and the old windows are dropped.

        Two processes may move at once. Each load replaces the record window only as it was before the old window was
        read, and only while the settings still say the move is not done (read after the old window): a process whose
        move finished first has dropped the old windows only after saying so, and posts to the record windows only
        after that, so a late move never writes stale or empty rows over them."""
        for instance in self.windows():
            old = self._entry_window(instance)
            target = self._set(instance)
            for _ in target.engine.policy.attempts():
                before = _snapshot.snapshot(target.engine)
                snap = _snapshot.snapshot(old.engine)
                if self._moved():
                    return
                try:
                    now = _windows.moment(self._now).timestamp()
                    with legacy_source(snap, self.columns, now, self.node_bytes, _load.MEMORY_BYTES, None) as (
                        values,
                        held_ids,
                    ):
                        _load.fill(target.engine, values, True, None, 256, _load.as_read(before))
                    if held_ids:  # ids rows kept, now first tried: recorded as such, for post_id_ttl
                        self._posts().add_many(dict.fromkeys(held_ids, now), only="new")
                except MissingNodeError:
                    _snapshot.collected_meanwhile(old.engine, snap)
                    continue
                except ConflictError:  # the record window changed meanwhile: another process moved it, or moves it
                    continue
                break

    def _moved(self) -> bool:
        """Whether the stored settings say the board's windows are record windows (another process moved them)."""
        record = self.store.get(self._space("board").head)
        rules = (self.columns, self.accumulate, self.keep_best)
        return record is not None and record.value == _board_settings.settings(*rules, RECORDS_LAYOUT)

    def _drop_entry_windows(self) -> None:
        """Drop the windows of layouts 1 and 2 once the settings say layout 3 (what a move left behind)."""
        for instance in self.windows():
            self._entry_window(instance).drop()

    def _migrate(self) -> None:
        """Move every window of a board that kept rows in records into its set of entries (layout 2), once, by the first
        process to open it (when processes of earlier versions have stopped posting)."""
        for instance in self.windows():
            sset = self._entry_window(instance)
            records = self._space(f"rows#{instance}")
            for _ in sset.engine.policy.attempts():
                try:
                    for ops in _board_settings.migration(self.store, records, sset):
                        sset.engine.group.submit(ops)
                    epoch = sset.score(_LEGACY_EPOCH)
                    if epoch is not None:
                        sset.engine.group.submit([("expect", _LEGACY_EPOCH, epoch), ("remove", _LEGACY_EPOCH, None)])
                    break
                except _ops.Stale:  # another process migrates too: take what is left
                    continue
            self.store.delete_many(list(self.store.keys(records.nodes)))

    # -- windows ---------------------------------------------------------------------------------------------------

    def _instance(self, window: Any) -> str:
        if window is None:
            window = "all" if "all" in self.windows_kinds else self.windows_kinds[0]
        try:
            kind = self.calendar.kind_of(window)
        except InvalidArgumentError:
            if self._combined_window(window):
                return str(window)
            raise
        if window == kind:
            return self.calendar.instance(kind, _windows.moment(self._now))
        return str(window)

    def _combined_window(self, name: Any) -> bool:
        """Whether ``name`` is a window :meth:`combine` made (listed in the registry: one read, then remembered)."""
        if not self.calendar.combined(name):
            return False
        if name in self._registered:
            return True
        if self._registry.score(name) is None:
            return False
        self._registered.add(name)
        return True

    def _set(self, instance: str) -> SortedSet:
        with self._lock:
            found = self._sets.get(instance)
            if found is None:
                found = self._sets[instance] = self._part_set(
                    record_part(instance), functools.partial(self._started, instance), window_tiebreak(self.columns)
                )
            return found

    def _started(self, instance: str) -> None:
        """A write made the window's head afresh (its first post, or the first after the board expired or the window
        was dropped while this process remembered it listed): list it, with the board's expiry. A window that
        ``retention`` no longer keeps (another process dropped it) is not made again: :class:`_Retired` stops the
        write, and the post skips that window."""
        kind = instance.partition(":")[0]
        keep = self.retention.get(kind)
        if keep is not None and _board_settings.retired(instance, self.windows(kind), keep, self.calendar) is None:
            self._registered.discard(instance)
            raise _Retired(instance)
        self._registry.add(instance, self.calendar.start(instance) or 0, only="new")
        self._registered.add(instance)
        self._follow_expiry(instance)

    def _follow_expiry(self, instance: str) -> None:
        """Give a window just listed the board's expiry (the registry's moment), until the registry's moment read after
        it is the one given: an ``expire()`` or ``persist()`` of the board that lists the windows after that read
        finds this one."""
        head = self._registry.engine.head  # as the registry's commit just left it
        moment = None if head is None or head.expired() else head.expires
        if moment is None:  # a board without expiry, the usual case: its windows carry none
            return
        engine = self._set(instance).engine
        for _ in engine.policy.attempts():
            if moment is None:
                _expiry.persist(engine)
            else:  # not made here if it has no head: its first write makes it, and comes back here (_started)
                _expiry.expire(engine, moment)
            now = _expiry.moment(self._registry.engine)
            if now == moment:
                return
            moment = now
        raise ConflictError(f"board {self.name!r}: window {instance!r} could not follow the board's expiry")

    def _posts(self) -> SortedSet:
        """The board's record of post ids: member as in a window, score the moment of the first try."""
        with self._lock:
            if self._post_ids is None:
                self._post_ids = self._part_set("posts")
            return self._post_ids

    def windows(self, kind: str | None = None) -> list[str]:
        """The window instances that hold posts, oldest first; only those of ``kind`` if given.

        >>> board = Leaderboard(mdss.open_store("memory://"), "g", columns={"xp": "desc"}, windows=["day"],
        ...                     now=lambda: 1_790_000_000)
        >>> board.post("ann", {"xp": 1}); board.windows("day")
        {'day:2026-09-21': True}
        ['day:2026-09-21']
        """
        if kind is not None:
            self.calendar.kind(kind)
        names = [e.member for e in self._registry]
        return [n for n in names if kind is None or n.partition(":")[0] == kind]

    def window_bounds(self, window: str) -> tuple[dt.datetime, dt.datetime]:
        """When ``window`` (a kind: its current instance; or an instance) starts and ends, as aware datetimes in the
        board's ``tz``; the end is the next instance's start. Not for ``all``, which has neither.

        >>> board = Leaderboard(mdss.open_store("memory://"), "g", columns={"xp": "desc"}, tz="Europe/Paris",
        ...                     schedules={"raid": "0 18 * * FRI"}, now=lambda: 1_795_453_200)
        >>> [t.isoformat() for t in board.window_bounds("raid")]
        ['2026-11-20T18:00:00+01:00', '2026-11-27T18:00:00+01:00']
        >>> [t.isoformat() for t in board.window_bounds("day:2026-03-29")]  # clocks go forward: 23 hours
        ['2026-03-29T00:00:00+01:00', '2026-03-30T00:00:00+02:00']
        """
        begins, ends = self.calendar.bounds(self._instance(window))
        return _windows.local(begins, self.tz), _windows.local(ends, self.tz)

    def next_reset(self, kind: str) -> dt.datetime:
        """When the current instance of window kind ``kind`` ends and the next starts, in the board's ``tz``.

        >>> board = Leaderboard(mdss.open_store("memory://"), "g", columns={"xp": "desc"}, now=lambda: 1_795_453_200)
        >>> board.next_reset("hour").isoformat(), board.next_reset("week").isoformat()
        ('2026-11-23T18:00:00+00:00', '2026-11-30T00:00:00+00:00')
        """
        return self.window_bounds(self.calendar.kind(kind))[1]

    def _register(self, instance: str) -> bool:
        """List ``instance`` among the windows, dropping those ``retention`` no longer keeps; False if it is one of
        those (a retry of a post whose window was dropped since: it must not come back)."""
        if instance in self._registered:
            return True
        kind = instance.partition(":")[0]
        keep = self.retention.get(kind)
        doomed = [] if keep is None else _board_settings.retired(instance, self.windows(kind), keep, self.calendar)
        if doomed is None:
            return False
        self._registry.add(instance, self.calendar.start(instance) or 0, only="new")
        self._registered.add(instance)
        self._follow_expiry(instance)
        for window in doomed:
            self._drop_instance(window)
        return True

    def drop_window(self, window: str) -> bool:
        """Remove one window instance: its set (rows included), and its name from :meth:`windows`. A name listed there
        is taken as it is, even one this board would not cut (listed by a board with another ``tz``, ``week_start`` or
        schedules). Whether there was such an instance."""
        return self._drop_instance(
            window if isinstance(window, str) and window in self.windows() else self._instance(window)
        )

    def _drop_instance(self, instance: str) -> bool:
        existed = self._set(instance).drop()
        listed = self._registry.remove(instance)
        self._registered.discard(instance)
        with self._lock:
            self._sets.pop(instance, None)
        return existed or bool(listed)

    def drop(self) -> bool:
        """Remove the whole board: every window, the registry, the record of post ids, the settings. Whether there was
        a board."""
        existed = [self._drop_instance(i) for i in _expiry.stored_members(self._registry.engine)]  # expired ones too
        existed += [self._posts().drop(), self._registry.drop(), self.store.get(self._space("board").head) is not None]
        self.store.delete(self._space("board").head)
        return any(existed)

    # -- expiry ----------------------------------------------------------------------------------------------------

    def expire(self, seconds: float) -> bool:
        """Expire the whole board ``seconds`` from now (the agoragames library's ``expire_leaderboard``, Redis'
        EXPIRE): every window, its registry and its record of post ids carry the moment (``SortedSet.expire``); after
        it the board reads as empty, and the next post starts afresh. True if the board held anything. The moment is
        kept in the registry's head, and given to every window listed later until it passes or ``persist()``.

        >>> board = Leaderboard(mdss.open_store("memory://"), "g", columns={"xp": "desc"})
        >>> board.post("ann", {"xp": 1}); board.expire(3600), round(board.ttl())
        {'all': True}
        (True, 3600)
        """
        return self._set_moment(_expiry.after(seconds))

    def expire_at(self, when: Any) -> bool:
        """Expire the whole board at ``when``: an aware datetime or seconds since the Unix epoch (as :meth:`expire`)."""
        return self._set_moment(_expiry.at(when))

    def _set_moment(self, moment: int) -> bool:
        """The registry first (windows listed later follow it: :meth:`_follow_expiry`), then the post ids (made empty
        if absent: posts with ids make it without following the registry) and every window it lists (read after it; a
        window listed without a head yet takes the moment when its first write makes it: :meth:`_started`)."""
        if not _expiry.expire(self._registry.engine, moment):
            return False
        _expiry.expire(self._posts().engine, moment, create=True)
        for instance in _expiry.stored_members(self._registry.engine):  # a moment passed already: listed all the same
            _expiry.expire(self._set(instance).engine, moment)  # one without a head yet follows it when made
        return True

    def persist(self) -> bool:
        """Clear the board's expiry (every part's); True if it had one. An expired board is gone: False."""
        if not _expiry.persist(self._registry.engine):
            return False
        _expiry.persist(self._posts().engine)
        for instance in self.windows():
            _expiry.persist(self._set(instance).engine)
        return True

    def ttl(self) -> float | None:
        """The seconds left before the board expires (this process's clock); ``None``: no expiry, or no board."""
        return _expiry.left(_expiry.moment(self._registry.engine))

    # -- posts -----------------------------------------------------------------------------------------------------

    def _owner(self, owner: Any) -> str:
        owner = check_member(owner)
        if len(owner.encode("utf-8")) > MAX_OWNER_BYTES:
            raise InvalidMemberError(f"an owner is at most {MAX_OWNER_BYTES} bytes in UTF-8, got {owner[:40]!r}...")
        return owner

    def _column(self, column: Any) -> _Column:
        found = self.columns.get(column) if isinstance(column, str) else None
        if found is None:
            raise InvalidArgumentError(
                f"column must be one of {', '.join(map(repr, self.columns))}, got {shown(column)}"
            )
        return found

    def post(
        self,
        owner: str,
        values: Mapping[str, Any],
        *,
        post_id: str | None = None,
        only: str | None = None,
        ops: Mapping[str, str] | None = None,
    ) -> dict[str, bool]:
        """Post values for ``owner`` to every window; returns, per window instance, whether it changed.

        Fields merge into the owner's row: ``accumulate`` fields add up, ``keep_best`` fields keep the min or max,
        others take the value; ``ops`` overrides that per field (``"set"``, ``"incr"``, ``"best"``, ``"gt"``, ``"lt"``,
        as in Redis' ``ZADD``). ``only="new"`` / ``"existing"`` posts only where the owner has no row / a row.

        A ``post_id`` (per owner) retried within ``post_id_ttl`` seconds goes to the windows of its first try, even if
        the day has turned since, and counts nothing twice. Everything is validated before anything is written, but
        what depends on a window's row as it stands (a summed value's overflow, a merged row past the size limits),
        which each window checks as it commits: the ``all`` window goes first, whose rows are the largest (a post it
        refuses changes nothing: a window is listed, and ``retention`` applied, just before its commit), and a later
        window that refuses names the windows that took the post before it. One commit per window; with a ``post_id``,
        one more before them to the board's record of post ids (and a read if the post is a retry).
        """
        owner = self._owner(owner)
        numeric = (*self.accumulate, *self.keep_best)
        checked, ops = check_post(values, ops, only, post_id, self.columns, numeric, self.keep_best)
        fresh = new_row(None, checked, ops, self.accumulate, self.keep_best, self.columns)  # refuses one too big
        check_fits([(owner_member(owner), row_value(fresh, 0.0, reached(self.columns, None, fresh)))], self.node_bytes)
        when = _windows.moment(self._now)
        stamp = moment = when.timestamp()
        member = None
        if post_id is not None:
            member = _post_member(owner, exact(post_id))
            if 4 * (len(member.encode("utf-8")) + CHILD_BYTES + 24) > self.node_bytes:
                raise InvalidArgumentError(f"a post id entry of this post_id does not fit nodes of {self.node_bytes} B")
            moment = self._first_tried(member, stamp)
            stamp, when = moment, dt.datetime.fromtimestamp(moment, _windows.UTC)
        instances = [self.calendar.instance(kind, when) for kind in self.windows_kinds]
        done: dict[str, bool] = {}
        rules = (self.accumulate, self.keep_best, self.columns)
        posted = Posted(checked, ops, only, stamp, *rules, member, moment, self.node_bytes)
        cutoff = stamp - self.post_id_ttl
        took: list[str] = []
        for instance in sorted(instances, key=lambda i: i != "all"):  # the largest rows refuse first
            try:
                if not self._register(instance):  # listed just before its commit: a post all refuses lists none
                    done[instance] = False
                    continue
                sset = self._set(instance)
                commit: list[tuple[str, str, Any]] = [("post", owner_member(owner), posted)]
                if member is not None:
                    commit.append(("look", member, None))
                    commit += [("expire", m, cutoff) for m in self._expired_ids(sset, cutoff) if m != member]
                done[instance] = bool(sset.engine.group.submit(commit)[0])
            except _Retired:  # dropped by another process's retention: the empty head made just now goes too
                self._drop_instance(instance)
                done[instance] = False
            except StoreError as exc:
                failed_after(
                    exc, f"in window {instance!r}, after {', '.join(map(repr, took))} took the post" if took else ""
                )
            except InvalidArgumentError as exc:
                if not took:
                    raise
                names = ", ".join(map(repr, took))
                raise type(exc)(f"{exc} (in window {instance!r}, after {names} took the post)") from exc
            else:
                took.append(instance)
        return {i: done[i] for i in instances}

    def remove(self, owner: str, *, window: str | None = None) -> dict[str, bool]:
        """Remove the owner's row from ``window`` (an instance, or a kind's current one), or from every window the board
        holds when ``window`` is ``None`` (a cheater, a deleted account); returns, per window instance, whether a row
        was there. Ranks, counts, pages and percentiles agree at once: one commit per window. The owner's post ids stay
        recorded until ``post_id_ttl``: a retry of a post counted before the removal counts nothing.

        >>> board = Leaderboard(mdss.open_store("memory://"), "g", columns={"xp": "desc"})
        >>> _ = board.post("ann", {"xp": 5}), board.post("bob", {"xp": 3})
        >>> board.remove("ann"), board.positions("bob"), board.count("xp")
        ({'all': True}, {'xp': 1}, 1)
        """
        owner = self._owner(owner)
        instances = self.windows() if window is None else [self._instance(window)]
        member, done = owner_member(owner), {}
        for instance in instances:
            engine = self._set(instance).engine
            # Read first: a removal from a window that does not hold the owner writes nothing (nor makes the window).
            held = _snapshot.read(engine, lambda snap: snap.index.get(member)) is not None
            try:
                done[instance] = held and bool(engine.group.submit([("remove", member, None)])[0])
            except StoreError as exc:
                took = [i for i, removed in done.items() if removed]
                failed_after(exc, f"in window {instance!r}, after {took} removed the row" if took else "")
        return done

    def load(
        self,
        rows: Mapping[str, Mapping[str, Any]] | Iterable[tuple[str, Mapping[str, Any]]],
        *,
        window: str | None = None,
        replace: bool = False,
        progress: Callable[[str, int, int], None] | None = None,
        memory_bytes: int = _load.MEMORY_BYTES,
        spill_dir: str | None = None,
    ) -> int:
        """Load ``rows`` (``(owner, values)`` pairs or a mapping) into empty windows, each built bottom-up in one commit
        as :meth:`SortedSet.load` builds a set: the current instance of every kind a post goes to, or ``window``.

        Values are checked as a post's; an owner given twice merges as two posts would. A window that holds rows is
        refused unless ``replace=True`` (its rows are then replaced). ``progress(window, nodes_done, nodes)`` reports
        each window's writes. Rows past what ``memory_bytes`` holds (about 125,000 per 256 MiB) are sorted in temporary
        SQLite databases in ``spill_dir``, as :meth:`SortedSet.load` sorts pairs. Returns how many rows it loaded.

        >>> board = Leaderboard(mdss.open_store("memory://"), "g", columns={"xp": "desc"}, accumulate=["kills"])
        >>> board.load([("ann", {"xp": 5, "kills": 1}), ("bob", {"xp": 9}), ("ann", {"kills": 2})])
        2
        >>> [(r.owner, r.values) for r in board.top("xp")]
        [('bob', {'xp': 9}), ('ann', {'xp': 5, 'kills': 3})]
        """
        if type(replace) is not bool:
            raise InvalidArgumentError(f"replace must be True or False, got {shown(replace)}")
        if progress is not None and not callable(progress):
            raise InvalidArgumentError(f"progress must be callable, got {shown(progress)}")
        _load.checked(rows, replace, progress, 256, memory_bytes)
        when = _windows.moment(self._now)
        if window is None:
            instances = [self.calendar.instance(kind, when) for kind in self.windows_kinds]
        else:
            instances = [self._instance(window)]
        settings = (self.accumulate, self.keep_best, self.columns)
        stamp, bound = when.timestamp(), self.node_bytes
        with window_source(rows, self._owner, settings, stamp, bound, memory_bytes, spill_dir) as (count, entries):
            if not count and not replace:
                return 0
            for instance in instances:
                if not replace and self._holds_rows(instance):
                    raise InvalidArgumentError(
                        f"window {instance!r} of board {self.name!r} has rows; replace them with replace=True"
                    )
            for n, instance in enumerate(instances):
                if not self._register(instance):
                    raise InvalidArgumentError(f"window {instance!r} is past the board's retention")
                report = None if progress is None else functools.partial(progress, instance)
                try:
                    _load.fill(self._set(instance).engine, entries, replace, report, 256)
                except StoreError as exc:
                    failed_after(exc, f"in window {instance!r}, after {instances[:n]} loaded" if n else "")
        return count

    def combine(
        self,
        windows: Iterable[str],
        *,
        into: str,
        replace: bool = False,
        memory_bytes: int = _load.MEMORY_BYTES,
        spill_dir: str | None = None,
    ) -> int:
        """Make window ``into`` from the rows of ``windows`` by the board's rules: an owner's ``accumulate`` fields add
        up, its ``keep_best`` fields keep the best, the others take the value of its most recently updated row (a
        season from its weeks: ``board.combine(board.windows("week"), into="season:2026")``). Returns its rows.

        ``into`` is a time window's instance (``month:2026-11``, days into their month) or a name of your own, a
        label and an id (``season:2026``, ``team:red``); views read it with ``window=into``, :meth:`windows` lists it
        and ``drop_window`` drops it; posts never go to a name of your own. It is written as :meth:`load` writes (one
        commit, visible at once, spilled past ``memory_bytes``); rows are updated at the moment of the combine and
        carry no post ids. A window with rows is refused unless ``replace=True``; ``into`` may be one of ``windows``
        (replaced only if unchanged meanwhile, else read again). Each window is read from one snapshot.

        >>> board = Leaderboard(mdss.open_store("memory://"), "g", columns={"xp": "desc"}, accumulate=["kills"],
        ...                     windows=["week"], now=lambda: 1_790_000_000)
        >>> board.post("ann", {"xp": 5, "kills": 1}); board.post("bob", {"xp": 7, "kills": 2})
        {'week:2026-W39': True}
        {'week:2026-W39': True}
        >>> board.load([("ann", {"xp": 6, "kills": 4})], window="week:2026-W40")
        1
        >>> board.combine(["week:2026-W39", "week:2026-W40"], into="season:2026")
        2
        >>> [(r.owner, r.values) for r in board.top("xp", window="season:2026")]
        [('bob', {'xp': 7, 'kills': 2}), ('ann', {'xp': 6, 'kills': 5})]
        """
        if isinstance(windows, (str, bytes)) or not isinstance(windows, (list, tuple)) or not windows:
            raise InvalidArgumentError(f"windows must be a non-empty list of window names, got {shown(windows)}")
        instances = [self._instance(window) for window in windows]
        twice = sorted({i for i in instances if instances.count(i) > 1})
        if twice:  # its rows would count twice
            raise InvalidArgumentError(f"windows names {', '.join(map(repr, twice))} more than once")
        if self.calendar.combined(into):
            target = check_member(into)
        else:
            try:
                self.calendar.kind_of(into)  # a kind (its current instance) or a time window's instance
            except InvalidArgumentError:
                raise InvalidArgumentError(
                    f"into must name a window: an instance such as 'month:2026-11' or a label and an id such as "
                    f"'season:2026', got {shown(into)}"
                ) from None
            target = self._instance(into)
        _load.checked((), replace, None, 256, memory_bytes)
        settings, stamp = (self.accumulate, self.keep_best, self.columns), _windows.moment(self._now).timestamp()
        engine = self._set(target).engine
        for _ in engine.policy.attempts():
            snaps = [_snapshot.snapshot(self._set(instance).engine) for instance in instances]
            expect = _load.as_read(snaps[instances.index(target)]) if target in instances else None
            rows = combined_rows(snaps)
            try:
                with window_source(rows, self._owner, settings, stamp, self.node_bytes, memory_bytes, spill_dir) as (
                    count,
                    entries,
                ):
                    if not replace and self._holds_rows(target):
                        raise InvalidArgumentError(
                            f"window {target!r} of board {self.name!r} has rows; replace them with replace=True"
                        )
                    if not self._register(target):
                        raise InvalidArgumentError(f"window {target!r} is past the board's retention")
                    _load.fill(engine, entries, replace, None, 256, expect)
            except ConflictError:  # ``into`` changed while it was read (a source) or written: read again
                continue
            except MissingNodeError:  # a node of a window's snapshot collected meanwhile: read again; else damaged
                if not _snapshot.any_moved((self._set(i).engine, snap) for i, snap in zip(instances, snaps)):
                    raise
                continue
            return count
        raise ConflictError(f"window {target!r} of board {self.name!r} kept changing while it was combined")

    def _first_tried(self, member: str, stamp: float) -> float:
        """When the post of post id entry ``member`` was first tried: ``stamp`` (recorded now) or the moment recorded,
        unless past ``post_id_ttl``; the commit forgets a few expired ids."""
        posts = self._posts()
        cutoff = stamp - self.post_id_ttl
        held = posts.engine.writer.held is not None
        ops: list[tuple[str, str, Any]] = [("forget", m, s) for m, s in self._expired(posts, cutoff) if m != member]
        for _ in range(3):  # a record forgotten by another process between the two steps: record this try
            ops.append(("set:new", member, stamp))
            added = posts.engine.group.submit(ops)
            if added and added[-1]:
                break
            first = _snapshot.read(posts.engine, lambda snap: snap.index.get(member))
            if first is not None and first >= cutoff:
                stamp = float(first)
                break
            ops = [] if first is None else [("forget", member, first)]
        if not held:
            forget = [("forget", m, s) for m, s in self._expired(posts, cutoff) if m != member]
            if forget:
                posts.engine.group.submit(forget)
        return stamp

    def _expired(self, posts: SortedSet, cutoff: float) -> list[tuple[str, Any]]:
        """The oldest expired post ids in the head of ``posts`` this process holds; none without one."""
        try:
            snap = self._held_snapshot(posts)
            return [] if snap is None else expired(snap.ranking, cutoff)
        except MdssError:
            return []

    def _holds_rows(self, instance: str) -> bool:
        """Whether window ``instance`` holds a row or a post id (one read of the head, and of an entry set at most)."""
        return _snapshot.read(self._set(instance).engine, lambda snap: next(snap.by_member(), None) is not None)

    def _expired_ids(self, sset: SortedSet, cutoff: float) -> list[str]:
        """The oldest post ids of a window first tried before ``cutoff``, in the head this process holds (no read; none
        without one): a post forgets them in its commit."""
        try:
            snap = self._held_snapshot(sset)
            return [] if snap is None else expired_ids(snap.ranking, cutoff)
        except MdssError:
            return []

    # -- reads -----------------------------------------------------------------------------------------------------

    def _read(
        self, window: Any, fn: Callable[[Any], Any], max_staleness: Any = None, owners: Iterable[str] = ()
    ) -> Any:
        """``fn`` on a snapshot of ``window``: the one read last if at most ``max_staleness`` seconds old (``None``:
        the board's ``max_staleness``), else a fresh one, read with the entry sets of ``owners``' rows where the store
        can (``mdss._snapshot.read``). Posts read fresh whatever the board's bound."""
        bound = self.max_staleness if max_staleness is None else staleness(max_staleness)
        engine = self._set(self._instance(window)).engine
        self._last.recent = engine.recent
        return _snapshot.read(engine, fn, bound, [owner_member(o) for o in owners], guess=True)

    @property
    def read_age(self) -> float:
        """How old, in seconds, the snapshot that this thread's last view used was (0.0: it read the head; as
        :attr:`SortedSet.read_age`)."""
        recent = getattr(self._last, "recent", None)
        return 0.0 if recent is None else recent.age()

    @staticmethod
    def _ties(ties: Any) -> str:
        return check_choice(ties, TIES, "ties")

    def row(self, owner: str, window: str | None = None, *, max_staleness: float | None = None) -> Row | None:
        """View 2: the owner's row in a window (the current instance of a kind, or a named instance)."""
        owner = self._owner(owner)
        return self._read(window, lambda snap: views.rows_of(snap, [owner])[0], max_staleness, [owner])

    def positions(
        self,
        owner: str,
        window: str | None = None,
        *,
        ties: str = "ordinal",
        estimate: bool = False,
        max_error: int | None = None,
        max_staleness: float | None = None,
    ) -> dict[str, Any]:
        """View 1: the owner's rank in every column its row has (``{}`` without a row). One snapshot.

        With ``estimate=True``, each rank is an :class:`~mdss.Estimate` read from the manifests only (as
        :meth:`SortedSet.estimate_rank`): ``high - low`` is under twice the chunk size; wider than ``max_error``, exact.
        Estimates count entries, not distinct ties: with ``ties="dense"`` each is exact (``low == high``).
        """
        owner, ties = self._owner(owner), self._ties(ties)
        if type(estimate) is not bool:
            raise InvalidArgumentError(f"estimate must be True or False, got {shown(estimate)}")
        if max_error is not None:
            check_count(max_error, "max_error")

        def below(snap: Any, key: Any) -> Any:  # a rank is two counts apart, each within half its max_error
            return _estimate.in_snapshot(snap, key, None if max_error is None else max_error // 2)

        return self._read(
            window,
            lambda snap: views.positions(snap, self._order, self.columns, owner, ties, below if estimate else None),
            max_staleness,
            [owner],
        )

    def around(
        self,
        owner: str,
        column: str,
        *,
        before: int = 5,
        after: int = 5,
        window: str | None = None,
        ties: str = "ordinal",
        fill: bool = False,
        max_staleness: float | None = None,
    ) -> list[RankedRow]:
        """View 3: up to ``before`` better ranked rows of ``column``, the owner's, up to ``after`` worse (``[]`` if the
        owner has no row or lacks the column's fields). ``fill=True`` slides them away from either end of the column
        so that they are ``before + after + 1`` rows where it has that many (as :meth:`SortedSet.around`): 12 and 12
        around the leader are the leader and the 24 after it, as in the agoragames library's around-me."""
        owner, col, ties = self._owner(owner), self._column(column), self._ties(ties)
        check_count(before, "before")
        check_count(after, "after")
        check_flag(fill, "fill")
        return self._read(
            window,
            lambda snap: views.around(snap, self._order, col, owner, before, after, ties, fill),
            max_staleness,
            [owner],
        )

    def rows(
        self,
        owners: Iterable[str],
        column: str,
        *,
        window: str | None = None,
        ties: str = "ordinal",
        max_staleness: float | None = None,
    ) -> list[RankedRow]:
        """View 4: the rows of ``owners`` (friends) with their ranks in ``column``, best first; owners without a row are
        left out, rows lacking the column's fields come last with rank ``None``."""
        if isinstance(owners, str) or not isinstance(owners, Iterable):
            raise InvalidArgumentError(f"owners must be an iterable of owners, got {shown(owners)}")
        wanted = list(dict.fromkeys(self._owner(o) for o in iterate(owners, "an iterable of owners")))
        col, ties = self._column(column), self._ties(ties)
        return self._read(
            window, lambda snap: views.ranked_rows(snap, self._order, col, wanted, ties), max_staleness, wanted
        )

    def page(
        self,
        column: str,
        *,
        limit: int = 100,
        cursor: str | None = None,
        offset: int = 0,
        around: str | None = None,
        window: str | None = None,
        ties: str = "ordinal",
        max_staleness: float | None = None,
    ) -> Page:
        """View 5: ``limit`` ranked rows of ``column``, with the cursors of the page after them (``next``) and before
        them (``previous``), each ``None`` at that end of the column.

        ``cursor`` takes either: the page after a ``next`` cursor's page, or the ``limit`` rows just before a
        ``previous`` cursor's. ``offset`` skips that many rows first (going back, that many before the cursor's page):
        ``page(column, offset=(p - 1) * 25, limit=25)`` is page ``p`` by rank (the peer libraries' ``leaders(page)``),
        in the round trips of the first page. ``around=owner`` is the page with the owner's row at index
        ``limit // 2``, slid to stay full at either end of the column (as :meth:`around` with ``fill=True``), empty
        if the owner has no key in the column. Each page is exact in the snapshot it reads; the next continues after
        the last row returned (the previous ends before the first), on the newest state (a row unchanged meanwhile is
        never skipped nor repeated). A cursor is bound to this board, column, window and direction.

        >>> board = Leaderboard(mdss.open_store("memory://"), "g", columns={"xp": "desc"})
        >>> for i in range(6):
        ...     _ = board.post(f"p{i}", {"xp": i})
        >>> [r.owner for r in board.page("xp", offset=2, limit=3).rows]
        ['p3', 'p2', 'p1']
        >>> mine = board.page("xp", limit=3, around="p5")
        >>> [r.owner for r in mine.rows], mine.previous, [r.owner for r in board.page("xp", cursor=mine.next).rows]
        (['p5', 'p4', 'p3'], None, ['p2', 'p1', 'p0'])
        """
        col, ties = self._column(column), self._ties(ties)
        check_page(limit, cursor, around)
        check_count(offset, "offset")
        if around is not None and offset:
            raise InvalidArgumentError("give an offset or around, not both")
        instance = self._instance(window)
        tag = f"{self._space(instance).prefix}{col.name}"
        what = f"board {self.name!r}, window {instance!r}, column {col.name!r}"
        if around is not None:
            owner = self._owner(around)
            found, last, first = self._read(
                instance, lambda snap: views.page_of(snap, self._order, col, owner, limit, ties), max_staleness
            )
        else:
            at = None if cursor is None else views.decode_cursor(tag, cursor, col, what)
            found, last, first = self._read(
                instance, lambda snap: views.page(snap, self._order, col, at, limit, ties, offset), max_staleness
            )
        return Page(found, views.encode_cursor(tag, last), views.encode_cursor(tag, first, back=True))

    def top(
        self,
        column: str,
        n: int = 10,
        *,
        window: str | None = None,
        ties: str = "ordinal",
        max_staleness: float | None = None,
    ) -> list[RankedRow]:
        """The best ``n`` ranked rows of ``column``."""
        check_count(n, "n")
        if n == 0:
            return []
        return self.page(column, limit=n, window=window, ties=ties, max_staleness=max_staleness).rows

    def count(self, column: str, *, window: str | None = None, max_staleness: float | None = None) -> int:
        """How many rows ``column`` ranks (rows that have all its fields)."""
        col = self._column(column)
        return self._read(window, lambda snap: views.column_size(snap, col), max_staleness)

    def percentile(
        self,
        owner: str,
        column: str,
        *,
        window: str | None = None,
        method: str = "better",
        max_staleness: float | None = None,
    ) -> float | int | None:
        """The share of the column's rows ranked strictly better than the owner's (as :meth:`SortedSet.percentile`,
        whose ``method="agoragames"`` a column of one field takes too); ``None`` if the row is absent or lacks the
        column.

        >>> board = Leaderboard(mdss.open_store("memory://"), "b", columns={"xp": "desc"})
        >>> for i in range(10):
        ...     _ = board.post(f"p{i}", {"xp": i})
        >>> board.percentile("p9", "xp"), board.percentile("p0", "xp"), board.at_percentile("xp", 0.5).owner
        (0.0, 0.9, 'p4')
        >>> board.percentile("p9", "xp", method="agoragames"), board.score_for_percentile("xp", 50)
        (90, 4.5)
        """
        owner, col = self._owner(owner), self._column(column)
        check_choice(method, _percentiles.METHODS, "method")
        if method != "better":
            self._single(col, "method=" + repr(method))
        return self._read(
            window, lambda snap: views.percentile(snap, self._order, col, owner, method), max_staleness, [owner]
        )

    def score_for_percentile(
        self, column: str, percent: float, *, window: str | None = None, max_staleness: float | None = None
    ) -> Any:
        """The agoragames ``leaderboard`` library's ``score_for_percentile`` of a column of one field (as
        :meth:`SortedSet.score_for_percentile`: ``percent`` from 0, the worst value, to 100, the best, interpolated);
        ``None`` for an empty column."""
        col = self._column(column)
        percent = _percentiles.check_percent(percent)
        self._single(col, "score_for_percentile")
        return self._read(
            window, lambda snap: views.score_for_percentile(snap, self._order, col, percent), max_staleness
        )

    @staticmethod
    def _single(column: _Column, what: str) -> None:
        """Refuse ``what`` on a column of several fields: its keys are tuples, with no score to interpolate."""
        if len(column.parts) != 1:
            raise InvalidArgumentError(f"{what} needs a column of one field; {column.name!r} ranks {len(column.parts)}")

    def at_percentile(
        self,
        column: str,
        p: float,
        *,
        window: str | None = None,
        ties: str = "ordinal",
        max_staleness: float | None = None,
    ) -> RankedRow | None:
        """The ranked row at position ``floor(p * rows)`` of the column (as :meth:`SortedSet.at_percentile`)."""
        col, ties = self._column(column), self._ties(ties)
        if not isinstance(p, (int, float)) or isinstance(p, bool) or not 0 <= p <= 1:
            raise InvalidArgumentError(f"p must be a number from 0 to 1, got {shown(p)}")
        return self._read(window, lambda snap: views.at_percentile(snap, self._order, col, p, ties), max_staleness)

    # -- maintenance -----------------------------------------------------------------------------------------------

    def gc(self, window: str | None = None, *, wait: bool = True, sweep: bool = False) -> int:
        """Delete what no head can name again (as :meth:`SortedSet.gc`) in ``window``, or in every window, the registry
        and the record of post ids; returns how many keys it deleted. ``sweep=True`` over the whole board drops it if
        it has expired (:meth:`expire`), settings included, as :meth:`drop` does."""
        if type(wait) is not bool or type(sweep) is not bool:
            raise InvalidArgumentError(
                f"wait and sweep must be True or False, got {shown(wait, 40)}, {shown(sweep, 40)}"
            )
        if sweep and window is None and _expiry.expired(self._registry.engine):
            self.drop()  # expired: every part of it goes, as drop() removes them
            return 0
        instances = self.windows() if window is None else [self._instance(window)]
        deleted = sum(self._set(instance).gc(wait=wait, sweep=sweep) for instance in instances)
        if window is None:
            deleted += self._registry.gc(wait=wait, sweep=sweep) + self._posts().gc(wait=wait, sweep=sweep)
        return deleted

    def warm(self, window: str | None = None) -> int:
        """Read one window's nodes into this process's cache (``cache_bytes``) until it is full, as
        :meth:`SortedSet.warm`: how many entry sets it read."""
        return self._set(self._instance(window)).warm()

    def check(self, window: str | None = None) -> list[str]:
        """The problems of one window: its set's (``SortedSet.check``), then its rows' (``window_problems``). O(n)."""
        sset = self._set(self._instance(window))
        return sset.check() or _snapshot.read(sset.engine, lambda snap: window_problems(snap, self.columns))

    def _check(self, window: str | None = None) -> None:
        problems = self.check(window)
        if problems:
            raise AssertionError(f"leaderboard {self.name!r} window {window!r} is broken:\n  " + "\n  ".join(problems))

    def __repr__(self) -> str:
        return f"Leaderboard({self.name!r}, columns={list(self.columns)}, windows={list(self.windows_kinds)})"
