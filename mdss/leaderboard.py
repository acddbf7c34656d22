"""Leaderboards: one row per owner, several sorted columns with composite keys, time windows, five views.

Seed 000's leaderboard service on mdss' trees (see docs/leaderboard.md).
Each *window instance* (``all``, ``day:2026-11-23``, ``week:2026-W48``,
``month:2026-11``) is one ordinary ascending :class:`SortedSet`, so it has
one head, one update log and one compare-and-set, and holds:

- for every column and every row that has the column's fields, one entry
  whose score is the column's *slot* and whose member spells the key
  (``mdss._order.column_member``: slot, each part encoded so that code point
  order is the part's order, then the owner). A column is therefore one
  contiguous run of the set, ordered by its composite key, ties broken by
  owner; a rank is a count of entries below a key, as in any set;
- for every owner, a *row entry*: score ``_ROW_SLOT`` (above every column),
  member ``w:``, the owner's length, the owner, then the row itself (values,
  last update, and an empty list where boards stored before post id entries
  kept the last 8 post ids; msgpack, base64). Nothing but the owner's
  row starts with its prefix, so the entry set that holds it is found from
  the manifests, and one read returns the row; the window's nodes are bounded in bytes
  (``node_bytes``, 64 KB) as well as in entries, since rows are large;
- for every owner, a *marker* ``r:<owner>``, so that two first posts of one
  owner never both land (the second expects none);
- for every ``post_id`` the window counted in the last ``post_id_ttl``
  seconds (a day by default), a *post id entry* ``p:``, the owner's length,
  the owner, the post id; score ``_POST_SLOT`` (above every row and marker)
  plus the moment the post was first tried, so the oldest come first.

A post for one window is one commit of that set: it expects the row entry
it read (or no marker, for a new owner), moves every column entry whose key
changed and replaces the row entry. So every reader, which reads one
snapshot of the set, sees each row together with exactly the column entries
of that row: a row and a column never disagree. Posting to several windows
commits window by window.

A ``post_id`` makes a retried post count nothing twice for ``post_id_ttl``
seconds, whatever the owner posts meanwhile. Before any window, the post
records ``post id -> the moment it was first tried`` in the board's record
of post ids (its internal part ``posts``, "only if new"); a retry finds that
moment there and takes it as its own, so it goes to the window instances of
the first try even across midnight or a week's or month's end. In each
window, the post id entry is read in the snapshot that reads the row and
added in the commit that changes it, so a crash between windows lets a
retry finish the others and never counts one twice. Each post with a
``post_id`` forgets a few entries older than ``post_id_ttl`` in every
commit it makes (the oldest, found from the same snapshot), so neither the
record nor a window grows without bound; a post retried later than that
may count again. Reads never see post id entries: every count is within a
column's slot.
"""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import functools
import math
import threading
import time
from bisect import bisect_left
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, NamedTuple

import msgpack

from . import _cursor, _head, _ops, _tail, _windows
from ._codec import FORMAT, seal, unpack
from ._estimate import Estimate
from ._keys import Keyspace
from ._order import (
    INT_MAX,
    INT_MIN,
    MAX_OWNER_BYTES,
    MAX_PARTS,
    TOP,
    check_choice,
    check_count,
    check_member,
    column_member,
    column_owner,
    column_tag,
    column_tie,
)
from ._parse import HEX
from ._sortedset import SortedSet
from ._tree import CHILD_BYTES
from .exceptions import (
    ConflictError,
    CorruptDataError,
    InvalidArgumentError,
    InvalidMemberError,
    InvalidScoreError,
    MdssError,
    SettingsMismatchError,
)
from .stores.base import Record, Store

#: The most fields of a row, and its most bytes (msgpack of the values).
MAX_FIELDS = 64
MAX_ROW_BYTES = 4096
MAX_FIELD_NAME = 64
#: How long a post id is remembered by default (seconds): a retry within it counts nothing twice.
POST_ID_TTL = 86400
#: Ranks a leaderboard can return.
TIES = ("ordinal", "competition", "dense")
#: A column's tie groups (for dense ranks) live at its slot plus this.
_GROUPS = MAX_FIELDS
#: The member of a tie group's size entry (score: minus the rows in the group) starts with this.
_SIZE = "n:"
#: Row entries: score ``_ROW_SLOT`` (above every column and tie group), member ``_ROWS``, the owner's length
#: (2 hex digits), the owner, the row (msgpack, base64). The base64 alphabet lies below ``_PAST_ROW``.
_ROW_SLOT = 2 * _GROUPS
_ROWS = "w:"
_PAST_ROW = "\x7f"
#: Owner markers: member ``_ROW`` + owner, score ``_MARK_SLOT``. A first post expects none.
_ROW = "r:"
_MARK_SLOT = _ROW_SLOT + 1
#: Post id entries: member ``_POST`` + the owner's length (2 hex digits), the owner, the post id; score
#: ``_POST_SLOT`` + the moment the post was first tried (above every row and marker: the oldest come first).
_POST = "p:"
_POST_SLOT = _MARK_SLOT + 1
#: The most expired post ids a post forgets, in each window it commits to and in the board's record of them.
_PRUNE = 4
#: How rows are stored, in the board's settings: 2, as entries (boards stored without it kept them in records).
ROWS_LAYOUT = 2
#: The gc epoch entry of each window in boards that kept rows in records (see ``Leaderboard._migrate``).
_LEGACY_EPOCH = "e:"
#: The most bytes a node of a window's set weighs (``mdss._tree.weights``): rows are large, and a node must
#: fit every store's value limit (DynamoDB's is 400 KB). A quarter of it bounds a row entry (see ``post``).
NODE_BYTES = 65536


class Row(NamedTuple):
    """An owner's row in one window: its values and when it was last updated (seconds since the epoch)."""

    owner: str
    values: dict[str, Any]
    updated: float


class RankedRow(NamedTuple):
    """A row with its rank in a column (``None``: the row lacks a field of the column)."""

    rank: int | None
    owner: str
    values: dict[str, Any]
    updated: float


class Page(NamedTuple):
    """A page of ranked rows and the cursor that continues after it (``None`` after the last)."""

    rows: list[RankedRow]
    cursor: str | None


class _Plan(NamedTuple):
    """One window's part of a post: the ops of its commit."""

    instance: str
    ops: list[tuple[str, str, Any]]


class _Post(NamedTuple):
    """A post with a ``post_id``, as each window's commit sees it."""

    post_id: str
    member: str  # of its entry in a window (and in the board's record of post ids)
    score: float  # of its entry in a window: ``_POST_SLOT`` + the moment it was first tried
    cutoff: float  # entries scored below this are older than ``post_id_ttl``: a post forgets a few


class _Column(NamedTuple):
    name: str
    slot: int
    parts: tuple[tuple[str, str], ...]  # (field, "asc" | "desc")


def _check_field(name: Any, what: str = "field") -> str:
    if not isinstance(name, str) or not name or len(name) > MAX_FIELD_NAME:
        raise InvalidArgumentError(
            f"a {what} name must be a non-empty str of at most {MAX_FIELD_NAME} characters, got {name!r:.80}"
        )
    return name


def _check_value(field: str, value: Any) -> Any:
    kind = type(value)
    if kind is bool or kind is str:
        return value
    if kind is int:
        if not INT_MIN <= value <= INT_MAX:
            raise InvalidScoreError(f"field {field!r}: integer {value} does not fit in 64 bits")
        return value
    if kind is float:
        if math.isnan(value):
            raise InvalidScoreError(f"field {field!r}: NaN is not a value")
        return value + 0.0
    raise InvalidArgumentError(
        f"field {field!r}: a value must be an int, float, str or bool, got {kind.__name__}: {value!r:.80}"
    )


def _number(value: Any) -> bool:
    return type(value) in (int, float)


class Leaderboard:
    """A leaderboard: rows of values per owner, ranked by several columns, in time windows.

    ``columns`` maps each column name to a direction (``"desc"``: highest
    first; the field is the column's name) or to a list of ``(field,
    direction)`` parts, compared in turn, ties finally broken by owner.
    ``accumulate`` fields add up over posts; ``keep_best`` fields keep the
    ``"min"`` or ``"max"``; every other field takes the posted value.
    ``windows`` are the kinds a post goes to (``all``, ``day``, ``week``
    (ISO), ``month``), cut in ``tz`` (UTC by default, or a zoneinfo name);
    ``retention={"day": 30}`` keeps the 30 newest day windows. ``now``
    (epoch seconds or an aware datetime) can be injected for tests.
    ``node_bytes`` bounds the nodes of the windows' sets, which hold the
    rows, in bytes (given to a window's set when it is created).
    ``post_id_ttl`` is how long, in seconds, a ``post_id`` is remembered (a
    day by default): a post retried within it counts nothing twice. Other
    keyword arguments (``chunk_size``, ``log_limit``, ``gc_grace``...) go to
    every window's :class:`SortedSet`.

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
        accumulate: Iterable[str] = (),
        keep_best: Mapping[str, str] | None = None,
        windows: Iterable[str] = ("all",),
        tz: Any = None,
        retention: Mapping[str, int] | None = None,
        now: Callable[[], Any] | None = None,
        node_bytes: int = NODE_BYTES,
        post_id_ttl: float = POST_ID_TTL,
        **options: Any,
    ) -> None:
        if not isinstance(store, Store):
            raise InvalidArgumentError(f"store must be an mdss Store (see mdss.open_store), got {store!r:.80}")
        if not isinstance(name, str) or not name or "#" in name:
            # refused since boards named their parts "game#week:2026-W48", "game#rows#all" (see _space)
            raise InvalidArgumentError(f"a leaderboard name must be a non-empty str without '#', got {name!r:.80}")
        self.store, self.name = store, name
        self.columns = self._check_columns(columns)
        self.accumulate = tuple(dict.fromkeys(_check_field(f) for f in _strings(accumulate, "accumulate")))
        best = dict(keep_best or {})
        for field, how in best.items():
            _check_field(field)
            check_choice(how, ("min", "max"), f"keep_best[{field!r}]")
        both = set(best) & set(self.accumulate)
        if both:
            raise InvalidArgumentError(f"fields both accumulated and kept best: {sorted(both)}")
        self.keep_best = best
        self.windows_kinds = tuple(dict.fromkeys(_windows.kind_of(k) for k in _strings(windows, "windows")))
        if not self.windows_kinds or any(k not in _windows.KINDS for k in self.windows_kinds):
            raise InvalidArgumentError(f"windows must be kinds among {_windows.KINDS}, got {windows!r:.80}")
        self.tz = _windows.check_tz(tz)
        self.retention = dict(retention or {})
        for kind, keep in self.retention.items():
            if kind not in self.windows_kinds or kind == "all":
                raise InvalidArgumentError(f"retention names {kind!r}, which is not a dated window of this board")
            check_count(keep, f"retention[{kind!r}]", least=1)
        if now is not None and not callable(now):
            raise InvalidArgumentError(f"now must be callable, got {now!r:.80}")
        self._now = now or time.time
        if type(node_bytes) is not int or not 256 <= node_bytes <= 1 << 30:
            raise InvalidArgumentError(f"node_bytes must be an int from 256 to 2**30, got {node_bytes!r:.80}")
        self.node_bytes = node_bytes
        if type(post_id_ttl) not in (int, float) or not 0 < post_id_ttl < math.inf:
            raise InvalidArgumentError(f"post_id_ttl must be a positive number of seconds, got {post_id_ttl!r:.80}")
        self.post_id_ttl = post_id_ttl
        shards = options.pop("shards", None)
        if shards is not None and not (type(shards) is int and shards == 1):
            raise InvalidArgumentError(f"a leaderboard's windows are unsharded: shards must be 1, got {shards!r:.80}")
        self._options = {**options, "shards": 1}  # a sharded set of the board's name is refused, not misread
        self._sets: dict[str, SortedSet] = {}
        self._lock = threading.Lock()
        self._registered: set[str] = set()
        found, self._legacy = self._stored_settings(store, name)
        self._registry = self._part_set("windows")
        self._post_ids: SortedSet | None = None
        self._adopt_settings(found)

    @classmethod
    def open(cls, store: Store, name: str, **options: Any) -> Leaderboard:
        """The board ``name`` with the columns, ``accumulate`` and ``keep_best`` it was stored with (by the
        first :class:`Leaderboard` that used it); ``options`` as for the constructor (windows, tz...).

        >>> store = mdss.open_store("memory://")
        >>> _ = Leaderboard(store, "g", columns={"race": [("laps", "desc"), ("ms", "asc")]}, accumulate=["k"])
        >>> Leaderboard.open(store, "g", windows=["day"])
        Leaderboard('g', columns=['race'], windows=['day'])
        """
        if not isinstance(store, Store):
            raise InvalidArgumentError(f"store must be an mdss Store (see mdss.open_store), got {store!r:.80}")
        if not isinstance(name, str) or not name:
            raise InvalidArgumentError(f"a leaderboard name must be a non-empty str, got {name!r:.80}")
        record, legacy = cls._stored_settings(store, name)
        if record is None:
            raise InvalidArgumentError(f"there is no leaderboard {name!r} in this store (create it with its columns)")
        key = _space(store, name, "board", legacy).head
        _, found = unpack(key, record.value, "leaderboard settings")
        try:
            columns = {column: [(field, how) for field, how in parts] for column, parts in found[1]}
            accumulate, keep_best = list(found[2]), {field: how for field, how in found[3]}
        except (TypeError, ValueError, IndexError):
            raise CorruptDataError("stored leaderboard settings have the wrong shape", key) from None
        return cls(store, name, columns=columns, accumulate=accumulate, keep_best=keep_best, **options)

    # -- settings ------------------------------------------------------------------------------------------------

    @staticmethod
    def _check_columns(columns: Any) -> dict[str, _Column]:
        if not isinstance(columns, Mapping) or not columns:
            raise InvalidArgumentError(f"columns must be a non-empty mapping of name -> direction, got {columns!r:.80}")
        if len(columns) > MAX_FIELDS:
            raise InvalidArgumentError(f"a leaderboard has at most {MAX_FIELDS} columns, got {len(columns)}")
        found: dict[str, _Column] = {}
        for slot, (column, spec) in enumerate(columns.items()):
            _check_field(column, "column")
            if isinstance(spec, str):
                parts: Any = [(column, spec)]
            elif isinstance(spec, (list, tuple)) and spec:
                parts = list(spec)
            else:
                raise InvalidArgumentError(
                    f"column {column!r} must be a direction or a list of (field, direction), got {spec!r:.80}"
                )
            if len(parts) > MAX_PARTS:
                raise InvalidArgumentError(f"column {column!r} has {len(parts)} parts; the limit is {MAX_PARTS}")
            checked = []
            for part in parts:
                if not isinstance(part, (list, tuple)) or len(part) != 2:
                    raise InvalidArgumentError(
                        f"column {column!r}: a part must be (field, direction), got {part!r:.80}"
                    )
                field, direction = part
                checked.append((_check_field(field), check_choice(direction, ("desc", "asc"), f"{column!r} direction")))
            if len({f for f, _ in checked}) != len(checked):
                raise InvalidArgumentError(f"column {column!r} names a field twice")
            found[column] = _Column(column, slot, tuple(checked))
        return found

    def _settings(self, layout: int | None = ROWS_LAYOUT) -> bytes:
        """The stored settings: columns, field rules and how rows are stored (``None``: in records of their
        own, as boards stored before rows were entries, which have no such field)."""
        found = [
            FORMAT,
            [[c.name, [list(p) for p in c.parts]] for c in self.columns.values()],
            list(self.accumulate),
            sorted(self.keep_best.items()),
        ]
        return seal(msgpack.packb(found if layout is None else [*found, layout], use_bin_type=True))

    @staticmethod
    def _stored_settings(store: Store, name: str) -> tuple[Record | None, bool]:
        """The board's stored settings record (``None``: no board), and whether the board is stored at the
        names of its parts before they were internal (``<board>#all`` as a set name, see :func:`_space`).

        The settings at the internal key first; then at the old key, a set
        name's, where a user's set ``<board>#board`` may be stored instead: a
        head (a map) is that, board settings are an array.
        """
        record = store.get(_space(store, name, "board", False).head)
        if record is not None:
            return record, False
        key = _space(store, name, "board", True).head
        old = store.get(key)
        if old is None or _tail.marked(old.value):
            return None, False
        return (old, True) if type(unpack(key, old.value, "leaderboard settings")[1]) is list else (None, False)

    def _space(self, part: str) -> Keyspace:
        return _space(self.store, self.name, part, self._legacy)

    def _part_set(self, part: str) -> SortedSet:
        """The set of one of the board's parts (the registry ``windows``, a window instance)."""
        sset = SortedSet._internal(self._space(part), self.store, f"{self.name}#{part}", order="asc", **self._options)
        sset._node_bytes = self.node_bytes
        return sset

    def _adopt_settings(self, record: Record | None) -> None:
        """Store this board's columns and field rules on first use (``record``: those stored); refuse a board
        opened differently; move a board stored with its rows in records of their own to rows as entries
        (:meth:`_migrate`)."""
        key = self._space("board").head
        data = self._settings()
        if record is None:
            try:
                self.store.cas(key, data, None)
                return
            except ConflictError:
                record = self.store.get(key)
        if record is not None and record.value != data:
            if record.value == self._settings(None):
                self._migrate()
                with contextlib.suppress(ConflictError):  # another process moved it first
                    self.store.cas(key, data, record.version)
                return
            unpack(key, record.value, "leaderboard settings")  # damaged bytes: CorruptDataError, not a mismatch
            raise SettingsMismatchError(
                f"leaderboard {self.name!r} is stored with other columns, accumulate or keep_best settings"
            )

    def _migrate(self) -> None:
        """Move every window of a board stored before rows were entries of its sets.

        There each owner had a pointer ``r:<owner>`` whose score named an
        immutable row record (``<board>#rows#<instance>:n:<version hex>``) and
        each window a gc epoch entry ``e:``. Each batch of owners becomes one
        commit that expects their pointers unchanged, makes them markers and
        adds their row entries; the last removes the epoch; then the records
        are deleted. Run once, by the first process that opens the board;
        processes of earlier versions must have stopped posting.
        """
        for instance in self.windows():
            sset = self._set(instance)
            records = self._space(f"rows#{instance}")
            for _ in sset._policy.attempts():
                pointers = [(e.member, e.score) for e in sset if e.member.startswith(_ROW) and e.score != _MARK_SLOT]
                try:
                    for first in range(0, len(pointers), 1000):
                        batch = pointers[first : first + 1000]
                        keys = [records.node(f"{version:x}") for _, version in batch]
                        ops: list[tuple[str, str, Any]] = []
                        for (pointer, version), key, data in zip(batch, keys, self.store.get_many(keys)):
                            if data is None:
                                raise CorruptDataError("a row record its pointer names is missing", key)
                            _, found = unpack(key, data, "leaderboard row")
                            if type(found) is not list or len(found) != 5 or found[1] != pointer[len(_ROW) :]:
                                raise CorruptDataError("stored leaderboard row has the wrong shape", key)
                            ops += [("expect", pointer, version), ("set", pointer, _MARK_SLOT)]
                            ops.append(("set", _row_member(found[1], found[2], found[3], found[4]), _ROW_SLOT))
                        sset._submit(ops)
                    epoch = sset.score(_LEGACY_EPOCH)
                    if epoch is not None:
                        sset._submit([("expect", _LEGACY_EPOCH, epoch), ("remove", _LEGACY_EPOCH, None)])
                    break
                except _ops.Stale:  # another process migrates too: take what is left
                    continue
            self.store.delete_many(list(self.store.keys(records.nodes)))

    # -- windows ---------------------------------------------------------------------------------------------------

    def _instance(self, window: Any) -> str:
        if window is None:
            window = "all" if "all" in self.windows_kinds else self.windows_kinds[0]
        kind = _windows.kind_of(window)
        if window == kind:
            return _windows.instance(kind, _windows.moment(self._now), self.tz)
        return str(window)

    def _set(self, instance: str) -> SortedSet:
        with self._lock:
            found = self._sets.get(instance)
            if found is None:
                found = self._sets[instance] = self._part_set(instance)
            return found

    def _posts(self) -> SortedSet:
        """The board's record of post ids: member as a window's post id entry, score the moment the post was
        first tried (made on the first post with a ``post_id``)."""
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
            check_choice(kind, _windows.KINDS, "kind")
        names = [e.member for e in self._registry]
        return [n for n in names if kind is None or n.partition(":")[0] == kind]

    def _register(self, instance: str) -> bool:
        """List ``instance`` among the windows, dropping those ``retention`` no longer keeps; False if it is
        one of those itself (a retry of a post whose window was dropped since: it must not come back)."""
        if instance in self._registered:
            return True
        begins = _windows.start(instance, self.tz) or 0
        kind = instance.partition(":")[0]
        keep = self.retention.get(kind)
        names = [] if keep is None else self.windows(kind)
        if keep is not None and sum(1 for n in names if (_windows.start(n, self.tz) or 0) > begins) >= keep:
            return False
        self._registry.add(instance, begins, only="new")
        self._registered.add(instance)
        if keep is None:
            return True
        older = [n for n in names if (_windows.start(n, self.tz) or 0) < begins]
        for doomed in older[: max(0, len(older) - (keep - 1))]:
            self.drop_window(doomed)
        return True

    def drop_window(self, window: str) -> None:
        """Remove one window instance: its set (rows included), and its name from :meth:`windows`."""
        instance = self._instance(window)
        self._set(instance).drop()
        self._registry.remove(instance)
        self._registered.discard(instance)
        with self._lock:
            self._sets.pop(instance, None)

    def drop(self) -> None:
        """Remove the whole board: every window, the registry, the record of post ids, the settings."""
        for instance in self.windows():
            self.drop_window(instance)
        self._posts().drop()
        self._registry.drop()
        self.store.delete(self._space("board").head)

    # -- rows ------------------------------------------------------------------------------------------------------

    def _owner(self, owner: Any) -> str:
        owner = check_member(owner)
        if len(owner.encode("utf-8")) > MAX_OWNER_BYTES:
            raise InvalidMemberError(f"an owner is at most {MAX_OWNER_BYTES} bytes in UTF-8, got {owner[:40]!r}...")
        return owner

    def _members(self, owner: str, values: Mapping[str, Any]) -> dict[str, str]:
        """Column name -> the member that spells the row's key there (columns whose fields it all has)."""
        found = {}
        for column in self.columns.values():
            member = _member(column, owner, values)
            if member is not None:
                found[column.name] = member
        return found

    def _column(self, column: Any) -> _Column:
        found = self.columns.get(column) if isinstance(column, str) else None
        if found is None:
            raise InvalidArgumentError(
                f"column must be one of {', '.join(map(repr, self.columns))}, got {column!r:.80}"
            )
        return found

    def _merged(self, row: Row | None, values: Mapping[str, Any], ops: Mapping[str, str]) -> dict[str, Any]:
        merged = dict(row.values) if row is not None else {}
        for field, value in values.items():
            op = ops.get(field)
            if op is None:
                op = (
                    "incr"
                    if field in self.accumulate
                    else ({"min": "lt", "max": "gt"}[self.keep_best[field]] if field in self.keep_best else "set")
                )
            elif op == "best":
                op = self._best(field)
            current = merged.get(field)
            if op == "set" or current is None and op != "incr":
                merged[field] = value
                continue
            if not _number(value) or current is not None and not _number(current):
                raise InvalidScoreError(f"field {field!r}: op {op!r} needs numbers, got {current!r} and {value!r}")
            merged[field] = _ops.resolve(op, current, value, max)[0]
        if len(merged) > MAX_FIELDS:
            raise InvalidArgumentError(f"a row has at most {MAX_FIELDS} fields, this one would have {len(merged)}")
        size = len(msgpack.packb(merged, use_bin_type=True))
        if size > MAX_ROW_BYTES:
            raise InvalidArgumentError(f"a row is at most {MAX_ROW_BYTES} bytes (msgpack), this one would be {size}")
        return merged

    def _best(self, field: str) -> str:
        if field in self.keep_best:
            return "lt" if self.keep_best[field] == "min" else "gt"
        for column in self.columns.values():
            for part, direction in column.parts:
                if part == field:
                    return "gt" if direction == "desc" else "lt"
        raise InvalidArgumentError(f'op "best" for field {field!r} needs keep_best or a column to say what is best')

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

        Fields merge into the owner's row: ``accumulate`` fields add up,
        ``keep_best`` fields keep the min or max, others take the value;
        ``ops`` overrides that per field (``"set"``, ``"incr"``, ``"best"``,
        ``"gt"``, ``"lt"``, with Redis' ``ZADD`` meanings). ``only="new"`` /
        ``"existing"`` posts only where the owner has no row / a row.

        A ``post_id`` (per owner) is remembered for ``post_id_ttl`` seconds
        (a day by default), whatever else the owner posts meanwhile: a post
        retried within that time, after a crash or a timeout, goes to the
        window instances of its first try (even if the day, week or month
        has turned since) and finishes the windows it had not reached,
        counting nothing twice. Retried later, it may count again.

        Everything is validated before anything is written (but for an
        overflow of a merged value, found against each window's row, which
        leaves every row unchanged and the post id recorded). One commit (an
        update-log append) per window; with a ``post_id``, one more before
        them, to the board's record of post ids (and a read if the post is
        a retry).
        """
        owner = self._owner(owner)
        if not isinstance(values, Mapping):
            raise InvalidArgumentError(f"values must be a mapping of field -> value, got {values!r:.80}")
        checked = {_check_field(f): _check_value(f, v) for f, v in values.items()}
        if len(checked) > MAX_FIELDS:
            raise InvalidArgumentError(f"a row has at most {MAX_FIELDS} fields, got {len(checked)}")
        for column in self.columns.values():
            for field, _ in column.parts:
                if field in checked and not _number(checked[field]):
                    raise InvalidScoreError(
                        f"field {field!r} ranks column {column.name!r}: it must be an int or a "
                        f"float, got {checked[field]!r:.80}"
                    )
        for field in (*self.accumulate, *self.keep_best):
            if field in checked and not _number(checked[field]):
                raise InvalidScoreError(f"field {field!r} must be an int or a float, got {checked[field]!r:.80}")
        ops = dict(ops or {})
        for field, op in ops.items():
            check_choice(op, _ops.OPS, f"ops[{field!r}]")
            if op == "best":
                self._best(field)
        if only is not None:
            check_choice(only, _ops.ONLY, "only")
        if post_id is not None and (not isinstance(post_id, str) or not post_id or len(post_id) > 128):
            raise InvalidArgumentError(
                f"post_id must be a non-empty str of at most 128 characters, got {post_id!r:.80}"
            )
        self._merged(None, checked, ops)  # size and field-count limits, before anything is written
        when = _windows.moment(self._now)
        stamp = when.timestamp()
        post = None
        if post_id is not None:
            member = _post_member(owner, post_id)
            if 4 * (len(member.encode("utf-8")) + CHILD_BYTES) > self.node_bytes:
                raise InvalidArgumentError(f"a post id entry of this post_id does not fit nodes of {self.node_bytes} B")
            first = self._first_tried(member, stamp)
            post = _Post(post_id, member, _POST_SLOT + max(first, 0.0), _POST_SLOT + stamp - self.post_id_ttl)
            stamp, when = first, dt.datetime.fromtimestamp(first, _windows.UTC)
        instances = [_windows.instance(kind, when, self.tz) for kind in self.windows_kinds]
        done: dict[str, bool] = {i: False for i in instances if not self._register(i)}
        fresh = False
        policy = self._set(instances[0])._policy

        def plan(fresh: bool) -> list[_Plan] | None:
            pending = [i for i in instances if i not in done]
            return self._plan(pending, owner, checked, ops, post, only, stamp, fresh, done)

        for _ in policy.attempts():  # the sets' commit budget, with their backoff: rivals spread out
            plans = plan(fresh)
            if plans is None:  # a no-op decided on the head this process last saw: confirm it
                fresh = True
                plans = plan(fresh)
            fresh = not self._commit(plans or [], done)
            if len(done) == len(instances):
                return {i: done[i] for i in instances}
        raise ConflictError(
            f"posts for owner {owner!r} kept colliding for the retry budget ({policy.budget:g} s); windows done: {done}"
        )

    def _first_tried(self, member: str, stamp: float) -> float:
        """When the post of post id entry ``member`` was first tried: ``stamp`` (now) for a first try, which
        records it in the board's record of post ids, else the moment recorded there, so that a retry goes
        to the window instances of the first try. A moment past ``post_id_ttl`` is forgotten and this try
        recorded instead (the post counts again). The first commit forgets a few other ids past it (a
        process that holds no head of the record yet forgets them in a commit of their own after it)."""
        posts = self._posts()
        cutoff = stamp - self.post_id_ttl
        held = posts._held is not None
        ops: list[tuple[str, str, Any]] = [("forget", m, s) for m, s in _expired(posts, cutoff) if m != member]
        for _ in range(3):  # a record forgotten by another process between the two steps: record this try
            ops.append(("set:new", member, stamp))
            added = posts._submit(ops)
            if added and added[-1]:
                break
            first = posts._read(lambda snap: snap.index.get(member))
            if first is not None and first >= cutoff:
                stamp = float(first)
                break
            ops = [] if first is None else [("forget", member, first)]
        if not held:
            forget = [("forget", m, s) for m, s in _expired(posts, cutoff) if m != member]
            if forget:
                posts._submit(forget)
        return stamp

    def _row_entry(
        self, sset: SortedSet, owner: str, fresh: bool, post: _Post | None
    ) -> tuple[str | None, bool, list[tuple[str, Any]]]:
        """The owner's row entry in one window, whether the window counted ``post`` and the post ids it may
        forget (``_look``): from the head this process last saw (no read when its nodes are cached) unless
        ``fresh``. A stale answer costs nothing but a retry: the commit expects the row."""
        held = sset._held
        if not fresh and held is not None:
            try:
                return _look(_head.snapshot(sset, False, (held[0],)), owner, post)
            except MdssError:
                pass
        found: tuple[str | None, bool, list[tuple[str, Any]]] = sset._read(lambda snap: _look(snap, owner, post))
        return found

    def _plan(
        self,
        pending: list[str],
        owner: str,
        values: dict[str, Any],
        ops: dict[str, str],
        post: _Post | None,
        only: str | None,
        stamp: float,
        fresh: bool,
        done: dict[str, bool],
    ) -> list[_Plan] | None:
        """Read the owner's rows in the ``pending`` windows and merge the post into each (refusing bad values
        before anything is written): each window's commit.

        Windows where the post does nothing (its post id entry is there, or its ``post_id`` in the row of a
        board stored before those entries; ``only`` excludes the row) go to ``done`` as ``False``. ``None``
        when such a no-op was decided on the head this process last saw (it may be old: a fresh read
        decides). A post with a ``post_id`` adds its entry in the commit that changes the row, and forgets
        a few expired ones.
        """
        marker = _ROW + owner
        plans: list[_Plan] = []
        for instance in pending:
            entry, seen, expired = self._row_entry(self._set(instance), owner, fresh, post)
            row, posts = (None, ()) if entry is None else _decode_row(entry)
            counted = post is not None and (seen or post.post_id in posts)
            if counted or only is not None and (row is None) != (only == "new"):
                if not fresh:  # the head this process last saw may be old: only the current one may say no
                    return None
                done[instance] = False
                continue
            merged = self._merged(row, values, ops)
            # Rows stored before post ids had entries keep the ids they hold (8 at most), still honoured.
            fresh_entry = _row_member(owner, merged, stamp, list(posts))
            old = self._members(owner, row.values) if row is not None else {}
            new = self._members(owner, merged)
            largest = (fresh_entry, *new.values(), *([post.member] if post else []))
            heaviest = max(len(m.encode("utf-8")) for m in largest) + CHILD_BYTES
            if 4 * heaviest > self.node_bytes:
                raise InvalidArgumentError(
                    f"a row entry of {heaviest} bytes does not fit nodes of node_bytes={self.node_bytes} (a node "
                    "holds at least four items)"
                )
            # The commit applies only if the row is still the one read (a new owner: still none).
            if entry is None:
                commit: list[tuple[str, str, Any]] = [("expect", marker, None), ("set", marker, _MARK_SLOT)]
            else:
                commit = [("expect", entry, _ROW_SLOT)]
            for column, member in old.items():
                if new.get(column) != member:
                    commit.append(("remove", member, None))
                    commit += self._group_ops(self.columns[column], member, leaving=True)
            for column, member in new.items():
                if old.get(column) != member:
                    commit.append(("set", member, self.columns[column].slot))
                    commit += self._group_ops(self.columns[column], member, leaving=False)
            if fresh_entry != entry:
                if entry is not None:
                    commit.append(("remove", entry, None))
                commit.append(("set", fresh_entry, _ROW_SLOT))
            if post is not None:
                commit += [("forget", m, s) for m, s in expired if m != post.member]
                commit.append(("set", post.member, post.score))
            plans.append(_Plan(instance, commit))
        return plans

    @staticmethod
    def _group_ops(column: _Column, member: str, leaving: bool) -> list[tuple[str, str, Any]]:
        """The ops that keep the tie group of ``member`` counted as a row joins or leaves it.

        A column's tie groups are entries of their own (slot + ``_GROUPS``,
        member: the group's key without an owner), so that a dense rank is a
        count of groups below a key. Each group has a size entry (member
        ``n:<tie>``, score minus its rows, below every column). Both are
        resolved in the commit (``incr`` and the ``group`` op of
        ``mdss._commit.apply_ops``), so posts of different owners to one
        group never conflict.
        """
        tie = column_tie(member, len(column.parts))
        size = _SIZE + tie
        return [("incr", size, 1 if leaving else -1), ("group", _group(column, tie), (size, column.slot + _GROUPS))]

    def _commit(self, plans: list[_Plan], done: dict[str, bool]) -> bool:
        """Commit each window's plan in turn (one append each); False if one lost to another post of the
        owner (that window is tried again from a fresh read)."""
        clean = True
        for plan in plans:
            try:
                self._set(plan.instance)._submit(plan.ops)
            except _ops.Stale:  # another post of this owner landed first
                clean = False
                continue
            done[plan.instance] = True
        return clean

    # -- reads -----------------------------------------------------------------------------------------------------

    def _read(self, window: Any, fn: Callable[[Any], Any]) -> Any:
        return self._set(self._instance(window))._read(fn)

    @staticmethod
    def _rows_of(snap: Any, owners: Sequence[str], also: Sequence[Any] = ()) -> list[Row | None]:
        """The rows of ``owners`` in one snapshot (``None``: no row): one read of entry sets at most, which
        also reads the entry sets of keys ``also`` (those a count that follows needs)."""
        found: list[Row | None] = []
        for entry in _row_entries(snap, owners, also):
            row = None if entry is None else _decode_row(entry)[0]
            found.append(None if row is None else Row(row.owner, dict(row.values), row.updated))  # a copy
        return found

    @staticmethod
    def _ties(ties: Any) -> str:
        return check_choice(ties, TIES, "ties")

    @staticmethod
    def _probes(column: _Column, members: Sequence[str], ties: str) -> list[Any]:
        """The keys whose counts below rank ``members`` in ``column``: the column's start first, then each
        member's (its tie group's for competition and dense ranks)."""
        parts = len(column.parts)
        if ties == "dense":  # 1 + the tie groups before the member's
            groups = column.slot + _GROUPS
            return [(groups,)] + [(groups, _group(column, column_tie(m, parts))) for m in members]
        return [(column.slot,)] + [(column.slot, m if ties == "ordinal" else column_tie(m, parts)) for m in members]

    def _ranks(self, snap: Any, column: _Column, members: Sequence[str], ties: str) -> list[int]:
        """1-based ranks in ``column`` of entries spelled by ``members``, in one batched count."""
        counts = snap.ranking.count_below(self._probes(column, members, ties))
        return [n - counts[0] + 1 for n in counts[1:]]

    def row(self, owner: str, window: str | None = None) -> Row | None:
        """View 2: the owner's row in a window (the current instance of a kind, or a named instance)."""
        owner = self._owner(owner)
        return self._read(window, lambda snap: self._rows_of(snap, [owner])[0])

    def positions(
        self,
        owner: str,
        window: str | None = None,
        *,
        ties: str = "ordinal",
        estimate: bool = False,
        max_error: int | None = None,
    ) -> dict[str, Any]:
        """View 1: the owner's rank in every column its row has (``{}`` without a row). One snapshot.

        With ``estimate=True``, each rank is an :class:`~mdss.Estimate` whose
        bounds always hold, read from the score tree's manifests only (as
        :meth:`SortedSet.estimate_rank`): the column's start and the owner's
        entry each fall in an entry set the manifests cannot see into, so
        ``high - low`` is under twice the chunk size. Bounds wider than
        ``max_error`` read those entry sets and are exact.
        """
        owner, ties = self._owner(owner), self._ties(ties)
        if type(estimate) is not bool:
            raise InvalidArgumentError(f"estimate must be True or False, got {estimate!r:.80}")
        if max_error is not None:
            check_count(max_error, "max_error")

        def run(snap: Any) -> dict[str, Any]:
            row = self._rows_of(snap, [owner])[0]
            if row is None:
                return {}
            members = self._members(owner, row.values)
            if not estimate:  # every column's two counts in one batched descent (one read per uncached level)
                probes = [p for name, m in members.items() for p in self._probes(self.columns[name], [m], ties)]
                counts = snap.ranking.count_below(probes) if probes else []
                return {name: counts[2 * i + 1] - counts[2 * i] + 1 for i, name in enumerate(members)}
            found: dict[str, Any] = {}
            for name, member in members.items():
                column = self.columns[name]
                start, at = (
                    SortedSet._estimate_below(snap, p, max_error) for p in self._probes(column, [member], ties)
                )
                rank = max(at[0] - start[0] + 1, 1)
                found[name] = Estimate(rank, max(at[1] - start[2] + 1, 1), at[2] - start[1] + 1)
            return found

        return self._read(window, run)

    def _listing(
        self, snap: Any, column: _Column, start: int, stop: int, ties: str
    ) -> tuple[list[RankedRow], str | None]:
        """Ranked rows at positions ``start`` to ``stop - 1`` of ``column`` (positions within the column),
        and the member of the last one."""
        low, high = snap.ranking.count_below([(column.slot,), (column.slot, TOP)])
        members, _ = snap.ranking.slice(low + max(start, 0), min(low + stop, high))
        if not members:
            return [], None
        parts = len(column.parts)
        owners = [column_owner(m, parts) for m in members]
        # A competition or dense rank of the first row counts below its tie group, which may start in an
        # entry set the listing did not read: routed with the rows, it costs no round trip of its own.
        found = self._rows_of(snap, owners, self._probes(column, members[:1], ties) if ties != "ordinal" else ())
        ranks = list(range(start + 1, start + 1 + len(members)))
        if ties != "ordinal":
            ranks[0] = self._ranks(snap, column, members[:1], ties)[0]
            for i in range(1, len(members)):
                if column_tie(members[i], parts) == column_tie(members[i - 1], parts):
                    ranks[i] = ranks[i - 1]
                elif ties == "dense":
                    ranks[i] = ranks[i - 1] + 1
        result = []
        for rank, owner, row in zip(ranks, owners, found):
            if row is None:
                raise CorruptDataError(f"column {column.name!r} names owner {owner!r}, who has no row")
            result.append(RankedRow(rank, owner, row.values, row.updated))
        return result, members[-1]

    def _size(self, snap: Any, column: _Column) -> int:
        low, high = snap.ranking.count_below([(column.slot,), (column.slot, TOP)])
        return high - low

    def around(
        self,
        owner: str,
        column: str,
        *,
        before: int = 5,
        after: int = 5,
        window: str | None = None,
        ties: str = "ordinal",
    ) -> list[RankedRow]:
        """View 3: the ranked rows around the owner's in ``column``: up to ``before`` better, the owner's, up
        to ``after`` worse (``[]`` if the owner has no row or lacks the column's fields)."""
        owner, col, ties = self._owner(owner), self._column(column), self._ties(ties)
        check_count(before, "before")
        check_count(after, "after")

        def run(snap: Any) -> list[RankedRow]:
            row = self._rows_of(snap, [owner])[0]
            member = None if row is None else _member(col, owner, row.values)
            if member is None:
                return []
            _prefetch(snap, [((col.slot, member), before, after + 1), ((col.slot,), 0, 0), ((col.slot, TOP), 0, 0)])
            at = self._ranks(snap, col, [member], "ordinal")[0] - 1
            return self._listing(snap, col, max(at - before, 0), at + after + 1, ties)[0]

        return self._read(window, run)

    def rows(
        self, owners: Iterable[str], column: str, *, window: str | None = None, ties: str = "ordinal"
    ) -> list[RankedRow]:
        """View 4: the rows of ``owners`` (friends) with their ranks in ``column``, best first; owners
        without a row are left out, rows lacking the column's fields come last with rank ``None``."""
        if isinstance(owners, str) or not isinstance(owners, Iterable):
            raise InvalidArgumentError(f"owners must be an iterable of owners, got {owners!r:.80}")
        wanted = list(dict.fromkeys(self._owner(o) for o in owners))
        col, ties = self._column(column), self._ties(ties)

        def run(snap: Any) -> list[RankedRow]:
            found = [(o, r) for o, r in zip(wanted, self._rows_of(snap, wanted)) if r is not None]
            members = [_member(col, o, r.values) for o, r in found]
            ranked = [m for m in members if m is not None]
            ranks = iter(self._ranks(snap, col, ranked, ties) if ranked else [])
            result = [
                (m is None, m or o, RankedRow(None if m is None else next(ranks), o, r.values, r.updated))
                for (o, r), m in zip(found, members)
            ]
            return [entry for _, _, entry in sorted(result, key=lambda t: t[:2])]  # a member's order is its rank's

        return self._read(window, run)

    def page(
        self,
        column: str,
        *,
        limit: int = 100,
        cursor: str | None = None,
        window: str | None = None,
        ties: str = "ordinal",
    ) -> Page:
        """View 5: ``limit`` ranked rows of ``column`` and the cursor of the next page (``None`` after the last).

        Each page is exact (ranks included) in the snapshot it reads, at any
        depth; the next page continues just after the last row returned, on
        the newest state (a row unchanged meanwhile is never skipped nor
        repeated). The cursor is bound to this board, column and window.
        """
        col, ties = self._column(column), self._ties(ties)
        check_count(limit, "limit", least=1)
        instance = self._instance(window)
        after = None if cursor is None else self._decode_cursor(cursor, instance, col.name)

        def run(snap: Any) -> tuple[list[RankedRow], str | None]:
            begin = (col.slot,) if after is None else (col.slot, after + "\0")
            _prefetch(snap, [(begin, 0, limit), ((col.slot,), 0, 0), ((col.slot, TOP), 0, 0)])
            low, high = snap.ranking.count_below([(col.slot,), (col.slot, TOP)])
            start = 0 if after is None else snap.ranking.count_below([(col.slot, after + "\0")])[0] - low
            found, last = self._listing(snap, col, start, start + limit, ties)
            return found, last if start + len(found) < high - low else None

        found, last = self._read(instance, run)
        return Page(found, None if last is None else self._encode_cursor(instance, col.name, last))

    def top(self, column: str, n: int = 10, *, window: str | None = None, ties: str = "ordinal") -> list[RankedRow]:
        """The best ``n`` ranked rows of ``column``."""
        check_count(n, "n")
        if n == 0:
            return []
        return self.page(column, limit=n, window=window, ties=ties).rows

    def count(self, column: str, *, window: str | None = None) -> int:
        """How many rows ``column`` ranks (rows that have all its fields)."""
        col = self._column(column)
        return self._read(window, lambda snap: self._size(snap, col))

    def percentile(self, owner: str, column: str, *, window: str | None = None) -> float | None:
        """The share of the column's rows ranked strictly better than the owner's: ``(competition rank - 1)
        / rows``, 0.0 for the best (ties share it); ``None`` if the row is absent or lacks the column.

        >>> board = Leaderboard(mdss.open_store("memory://"), "b", columns={"xp": "desc"})
        >>> for i in range(10):
        ...     _ = board.post(f"p{i}", {"xp": i})
        >>> board.percentile("p9", "xp"), board.percentile("p0", "xp"), board.at_percentile("xp", 0.5).owner
        (0.0, 0.9, 'p4')
        """
        owner, col = self._owner(owner), self._column(column)

        def run(snap: Any) -> float | None:
            row = self._rows_of(snap, [owner])[0]
            member = None if row is None else _member(col, owner, row.values)
            if member is None:
                return None
            probes = [*self._probes(col, [member], "competition"), (col.slot, TOP)]
            start, better, end = snap.ranking.count_below(probes)  # one batched count
            return (better - start) / (end - start)

        return self._read(window, run)

    def at_percentile(
        self, column: str, p: float, *, window: str | None = None, ties: str = "ordinal"
    ) -> RankedRow | None:
        """The ranked row at share ``p`` (0 to 1) of the column: position ``floor(p * rows)`` (the last row
        for 1.0), so that ``percentile`` of its owner is at most ``p``; ``None`` for an empty column."""
        col, ties = self._column(column), self._ties(ties)
        if not isinstance(p, (int, float)) or isinstance(p, bool) or not 0 <= p <= 1:
            raise InvalidArgumentError(f"p must be a number from 0 to 1, got {p!r:.80}")

        def run(snap: Any) -> RankedRow | None:
            _prefetch_at(snap, col, p)
            size = self._size(snap, col)
            if not size:
                return None
            at = min(int(p * size), size - 1)
            found, _ = self._listing(snap, col, at, at + 1, ties)
            return found[0] if found else None

        return self._read(window, run)

    # -- cursors ---------------------------------------------------------------------------------------------------

    def _cursor_tag(self, instance: str, column: str) -> str:
        return f"{self._space(instance).prefix}{column}"

    def _encode_cursor(self, instance: str, column: str, member: str) -> str:
        return _cursor.pack(self._cursor_tag(instance, column), [member])

    def _decode_cursor(self, cursor: Any, instance: str, column: str) -> str:
        what = f"board {self.name!r}, window {instance!r}, column {column!r}"
        found = _cursor.unpack(self._cursor_tag(instance, column), cursor, what)
        member = found[0] if len(found) == 1 else None
        if type(member) is not str or not member.startswith(column_tag(self.columns[column].slot)):
            raise InvalidArgumentError(f"not a page cursor of {what}: {cursor!r:.80}")
        return member

    # -- maintenance -----------------------------------------------------------------------------------------------

    def gc(self, window: str | None = None, *, wait: bool = True, sweep: bool = False) -> int:
        """Delete what no head can name again, in one window (``window``) or in every window, the registry
        and the record of post ids, as :meth:`SortedSet.gc` does (rows are entries of the windows' sets: their
        nodes are collected with the rest); returns how many keys it deleted."""
        if type(wait) is not bool or type(sweep) is not bool:
            raise InvalidArgumentError(f"wait and sweep must be True or False, got {wait!r:.40}, {sweep!r:.40}")
        instances = self.windows() if window is None else [self._instance(window)]
        deleted = sum(self._set(instance).gc(wait=wait, sweep=sweep) for instance in instances)
        if window is None:
            deleted += self._registry.gc(wait=wait, sweep=sweep) + self._posts().gc(wait=wait, sweep=sweep)
        return deleted

    def check(self, window: str | None = None) -> list[str]:
        """Every invariant of one window: its set's (``SortedSet.check``), that each owner has one row entry
        and one marker, that each post id entry names an owner with a row, and that each row's column
        entries are exactly those its values spell, with nothing else in the columns. Reads everything: O(n)."""
        instance = self._instance(window)
        sset = self._set(instance)
        problems = sset.check()
        if problems:
            return problems
        entries = list(sset)
        markers = {e.member[len(_ROW) :] for e in entries if e.member.startswith(_ROW)}
        if any(e.score != _MARK_SLOT for e in entries if e.member.startswith(_ROW)):
            problems.append("an owner's marker has the wrong score")
        rows: dict[str, Row] = {}
        for e in (e for e in entries if e.member.startswith(_ROWS)):
            try:
                row = _decode_row(e.member)[0]
            except CorruptDataError as exc:
                problems.append(str(exc))
                continue
            if e.score != _ROW_SLOT or row.owner in rows:
                problems.append(f"row entry of {row.owner!r}: score {e.score!r}, or a second one")
            rows[row.owner] = row
        if set(rows) != markers:
            problems.append(f"owners with a marker but no row, or the reverse: {sorted(set(rows) ^ markers)[:5]}")
        for e in (e for e in entries if e.member.startswith(_POST)):
            if _post_owner(e.member) not in rows or type(e.score) is not float or not e.score >= _POST_SLOT:
                problems.append(f"post id entry {e.member[:60]!r} (score {e.score!r}) names no row, or is damaged")
        column_entries = {e.member: e.score for e in entries if not e.member.startswith((_ROW, _ROWS, _POST))}
        expected: dict[str, int] = {}
        for owner, row in rows.items():
            for name, member in self._members(owner, row.values).items():
                column = self.columns[name]
                expected[member] = column.slot
                tie = column_tie(member, len(column.parts))
                expected[_group(column, tie)] = column.slot + _GROUPS
                expected[_SIZE + tie] = expected.get(_SIZE + tie, 0) - 1
        if column_entries != expected:
            extra = sorted(set(column_entries) - set(expected))[:5]
            missing = sorted(set(expected) - set(column_entries))[:5]
            wrong = sorted(m for m in set(expected) & set(column_entries) if expected[m] != column_entries[m])[:5]
            problems.append(
                f"column entries disagree with the rows: extra {extra}, missing {missing}, wrong counts {wrong}"
            )
        return problems

    def _check(self, window: str | None = None) -> None:
        problems = self.check(window)
        if problems:
            raise AssertionError(f"leaderboard {self.name!r} window {window!r} is broken:\n  " + "\n  ".join(problems))

    def __repr__(self) -> str:
        return f"Leaderboard({self.name!r}, columns={list(self.columns)}, windows={list(self.windows_kinds)})"


def _space(store: Store, name: str, part: str, legacy: bool) -> Keyspace:
    """The keys of part ``part`` of board ``name`` (``board``: its settings, ``windows``: its registry, a
    window instance): internal keys (``g#all``, which no set name reaches), or for a board stored before
    those (``legacy``), the keys of the set named ``g#all`` (``g%23all``), where it stays until dropped."""
    if legacy:
        return Keyspace(store.namespace, f"{name}#{part}")
    return Keyspace.internal(store.namespace, name, part)


def _strings(items: Any, what: str) -> list[Any]:
    if isinstance(items, (str, bytes)) or not isinstance(items, Iterable):
        raise InvalidArgumentError(f"{what} must be a list of names, got {items!r:.80}")
    return list(items)


def _group(column: _Column, tie: str) -> str:
    """The member of a tie group's entry: the tie's parts under the column's group slot."""
    return column_tag(column.slot + _GROUPS) + tie[3:]


def _member(column: _Column, owner: str, values: Mapping[str, Any]) -> str | None:
    """The member that spells the row's key in ``column``; ``None`` if the row lacks one of its fields."""
    parts: list[tuple[Any, str]] = [(values.get(field), direction) for field, direction in column.parts]
    if all(_number(v) for v, _ in parts):
        return column_member(column.slot, parts, owner)
    return None


def _row_prefix(owner: str) -> str:
    """What every row entry of ``owner`` starts with, and no other entry: the length makes it unambiguous."""
    return f"{_ROWS}{len(owner):02x}{owner}"


def _row_member(owner: str, values: dict[str, Any], updated: float, posts: list[str]) -> str:
    """The member of a row entry: the owner's prefix, then the row (msgpack, base64: sorts below ``_PAST_ROW``)."""
    data = msgpack.packb([values, updated, posts], use_bin_type=True)
    return _row_prefix(owner) + base64.b64encode(data).decode("ascii")


@functools.lru_cache(maxsize=16384)
def _decode_row(member: str) -> tuple[Row, tuple[str, ...]]:
    """The row and the post ids a row entry holds (decoded once per entry while it stays in this cache; the
    row's values are shared: callers copy them)."""
    try:
        if not HEX.fullmatch(member[2:4]):
            raise ValueError("length")
        size = int(member[2:4], 16)
        owner = member[4 : 4 + size]
        found = msgpack.unpackb(base64.b64decode(member[4 + size :], validate=True), raw=False)
    except Exception:  # msgpack raises several unrelated types on garbage
        found, owner, size = None, "", -1
    if (
        len(owner) != size
        or type(found) is not list
        or len(found) != 3
        or type(found[0]) is not dict
        or type(found[1]) not in (int, float)
        or type(found[2]) is not list
        or not all(type(p) is str for p in found[2])
    ):
        raise CorruptDataError(f"leaderboard row entry {member[:60]!r} is damaged")
    return Row(owner, found[0], found[1]), tuple(found[2])


def _post_member(owner: str, post_id: str) -> str:
    """The member of a post id entry: the owner's length makes it unambiguous, as in a row entry's."""
    return f"{_POST}{len(owner):02x}{owner}{post_id}"


def _post_owner(member: str) -> str | None:
    """The owner a post id entry names; ``None`` if it is damaged."""
    try:
        size = int(member[2:4], 16)
    except ValueError:
        return None
    owner = member[4 : 4 + size]
    return owner if len(owner) == size and len(member) > 4 + size else None


def _look(snap: Any, owner: str, post: _Post | None) -> tuple[str | None, bool, list[tuple[str, Any]]]:
    """In one snapshot of a window: the owner's row entry; whether the window counted ``post`` (its entry is
    there); the oldest post id entries scored below its cutoff (``_PRUNE`` at most), with their scores.

    The entry sets the three need are read with the row's, in one round trip; the counts are exact (the
    update log's shift included)."""
    if post is None:
        return _row_entries(snap, [owner])[0], False, []
    key, past = (post.score, post.member), (post.cutoff,)
    entry = _row_entries(snap, [owner], [key, (_POST_SLOT,), past])[0]
    first, at, after, old = snap.ranking.count_below([(_POST_SLOT,), key, (post.score, post.member + "\0"), past])
    expired: list[tuple[str, Any]] = []
    if old > first:
        members, scores = snap.ranking.slice(first, min(old, first + _PRUNE))
        expired = list(zip(members, scores))
    return entry, after > at, expired


def _expired(sset: SortedSet, cutoff: float) -> list[tuple[str, Any]]:
    """The oldest entries of the board's record of post ids scored below ``cutoff`` (``_PRUNE`` at most),
    from the head this process holds (no read when its nodes are cached); none without one."""
    held = sset._held
    if held is None:
        return []
    try:
        ranking = _head.snapshot(sset, False, (held[0],)).ranking
        old = ranking.count_below([(cutoff,)])[0]
        members, scores = ranking.slice(0, min(old, _PRUNE)) if old > 0 else ([], [])
    except MdssError:
        return []
    return list(zip(members, scores))


def _row_entries(snap: Any, owners: Sequence[str], also: Sequence[Any] = ()) -> list[str | None]:
    """The row entry of each owner in one snapshot (``None``: no row).

    An owner's row is the one entry from ``(_ROW_SLOT, prefix)`` to ``(_ROW_SLOT, prefix + _PAST_ROW)``.
    The log says it for a logged owner; for the others it is in the entry set the manifests route the
    end of that range to (no other first key falls inside it), so all of them cost one batched read of
    entry sets at most. The entry sets of keys ``also`` are read in that batch too (they stay pinned for
    this read's counts).
    """
    prefixes = [_row_prefix(o) for o in owners]
    found: list[str | None] = [None] * len(owners)
    view = snap.view
    todo = list(range(len(owners)))
    if view is not None:
        todo = []
        # Many owners: the log's row keys once, then bisections per owner.
        logged = view.between((_ROW_SLOT,), (_ROW_SLOT + 1,), closed=False) if len(owners) > 4 else None
        for i, prefix in enumerate(prefixes):
            low, high = (_ROW_SLOT, prefix), (_ROW_SLOT, prefix + _PAST_ROW)
            keys = logged if logged is not None else view.between(low, high, closed=False)
            added, removed = _within(keys[0], low, high), _within(keys[1], low, high)
            if added is not None:
                found[i] = added[1]
            elif removed is None:  # not logged: the tree's
                todo.append(i)
    if (todo or also) and snap.score_tree.root is not None:
        ends = [(_ROW_SLOT, prefixes[i] + _PAST_ROW) for i in todo]
        for i, end, (leaf, _) in zip(todo, ends, snap.score_tree.descend([*ends, *also])):
            keys = leaf.keys
            at = bisect_left(keys, end) - 1
            if at >= 0 and keys[at][0] == _ROW_SLOT and keys[at][1].startswith(prefixes[i]):
                found[i] = keys[at][1]
    return found


def _prefetch(snap: Any, around: Sequence[tuple[Any, int, int]]) -> None:
    """Read, in one round trip, the entry sets that counts below and a slice near each ``(key, before,
    after)`` will need: the one holding the key and its neighbours holding ``before`` entries before it and
    ``after`` from it (the log's shift included), so that a view that seeks a key and lists from there reads
    its entry sets once (``mdss._tree.Tree.leaves_around``). A guess that falls short costs a round trip,
    never an answer: the counts and the slice that follow read what they miss."""
    tree, view = snap.score_tree, snap.view
    size = None
    if view is not None:

        def size(low: Any, high: Any, count: int) -> int:
            added, removed = view.between(low, high, closed=False)
            return count + len(added) - len(removed)

    tree.fetch([leaf for key, before, after in around for leaf in tree.leaves_around(key, before, after, size)])


def _prefetch_at(snap: Any, column: _Column, p: float) -> None:
    """Read, in one round trip, the entry sets that :meth:`Leaderboard.at_percentile` counts and slices in.

    The manifests (cached) bound the counts below the column's start and end, ``low`` and ``high``, by the
    entry sets those keys fall in (the log's shift at each key is known exactly); the position ``low +
    min(floor(p * (high - low)), high - low - 1)`` grows with both, so it lies between its values at the
    two bounds, a span of one entry set's count at most: those entry sets are fetched with the two.
    """
    tree, view = snap.score_tree, snap.view
    ends = [(column.slot,), (column.slot, TOP)]
    spans = tree.spans(ends)
    if not spans:
        return
    shifts = [0, 0] if view is None else [view.shift(key) for key in ends]
    (_, low, low_count), (_, high, high_count) = spans
    low, high = low + shifts[0], high + shifts[1]

    def at(low: int, high: int) -> int:  # high > low
        return low + min(int(p * (high - low)), high - low - 1)

    first = at(low, max(high, low + 1))
    last = at(low + low_count, max(high + high_count, low + low_count + 1))
    tree.fetch([spans[0][0], spans[1][0], *snap.ranking.leaf_ids(first, last + 1)])


def _within(keys: list[Any], low: Any, high: Any) -> Any:
    """The key of sorted ``keys`` from ``low`` to ``high`` (excluded; an owner's row has one at most), or
    ``None``."""
    i = bisect_left(keys, low)
    return keys[i] if i < len(keys) and keys[i] < high else None
