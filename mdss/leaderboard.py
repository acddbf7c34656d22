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
- for every owner, a *row pointer*: member ``r:<owner>``, score the version
  of the owner's row. The row itself (values, last update, last post ids)
  is an immutable record stored under that version; a new version is a new
  record.

A post for one window is one commit of that set: it checks that the row
pointer still holds the version it read (``expect``), moves every column
entry whose key changed, and points the owner at the new row record
(written just before). So every reader, which reads one snapshot of the
set, sees each row together with exactly the column entries of that row:
a row and a column never disagree. Posting to several windows commits
window by window; ``post_id`` makes a retried post a no-op in every window
whose row already has it (a row keeps its last 8 post ids).
"""

from __future__ import annotations

import base64
import binascii
import math
import secrets
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, NamedTuple

import msgpack

from . import _head, _ops, _windows
from ._cache import NodeCache
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
from ._sortedset import SortedSet
from .exceptions import (
    ConflictError,
    CorruptDataError,
    InvalidArgumentError,
    InvalidMemberError,
    InvalidScoreError,
    MdssError,
    MissingNodeError,
    SettingsMismatchError,
    StoreUnavailableError,
)
from .stores.base import Store

#: The most fields of a row, and its most bytes (msgpack of the values).
MAX_FIELDS = 64
MAX_ROW_BYTES = 4096
MAX_FIELD_NAME = 64
#: The post ids a row keeps to recognise a retried post.
KEEP_POSTS = 8
#: Ranks a leaderboard can return.
TIES = ("ordinal", "competition", "dense")
#: A column's tie groups (for dense ranks) live at its slot plus this.
_GROUPS = MAX_FIELDS
#: The member of a tie group's size entry (score: minus the rows in the group) starts with this.
_SIZE = "n:"
#: Row pointer scores (row versions) lie above every column slot.
_FIRST_VERSION = 1 << 40
_ROW = "r:"
#: The board's gc epoch in each window's set (see :meth:`Leaderboard.gc`): member, and the score of epoch 0.
_EPOCH = "e:"
_EPOCH_BASE = 1 << 32
_POST_ATTEMPTS = 64
#: Pointers read per snapshot by the sweep of row records.
_SWEEP_PAGE = 10_000


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
    """One window's part of a post: the ops of its commit, and the row record it names."""

    instance: str
    ops: list[tuple[str, str, Any]]
    key: str
    record: bytes
    decoded: tuple[Row, list[str]]  # the record's row and post ids, cached once the commit lands
    replaced: str | None  # the row record it replaces


class _Window(NamedTuple):
    """Where a read of one window instance finds its row records: their keys, and the cache of decoded ones
    (the window's set's node cache: records are immutable, like nodes)."""

    rows: Keyspace
    cache: NodeCache


class _Column(NamedTuple):
    name: str
    slot: int
    parts: tuple[tuple[str, str], ...]  # (field, "asc" | "desc")


class _Retired:
    """Row records this process's posts replaced, deleted in batches once their grace period is over.

    Readers of older snapshots may still want a replaced record for
    ``gc_grace`` seconds. Deleting each one as it falls due would cost a round
    trip per post and window; so what is due is deleted at most once a second
    (every ``gc_grace`` if shorter), one call for the whole board. What a
    process that ends leaves is :meth:`Leaderboard.gc`'s (``sweep=True``).
    """

    def __init__(self, store: Store, grace: float) -> None:
        self.store, self.grace, self.every = store, grace, min(1.0, grace)
        self._due: deque[tuple[float, str]] = deque()  # (monotonic deadline, key), deadlines in order
        self._last = time.monotonic()
        self._lock = threading.Lock()

    def add(self, keys: list[str]) -> None:
        now = time.monotonic()
        due: list[str] = []
        with self._lock:
            self._due.extend((now + self.grace, key) for key in keys)
            if now - self._last < self.every:
                return
            self._last = now
            while self._due and self._due[0][0] <= now:
                due.append(self._due.popleft()[1])
        for start in range(0, len(due), 1000):  # a failure leaves them to gc(sweep=True)
            try:
                self.store.delete_many(due[start : start + 1000])
            except StoreUnavailableError:
                return


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
    (epoch seconds or an aware datetime) can be injected for tests. Other
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
        **options: Any,
    ) -> None:
        if not isinstance(store, Store):
            raise InvalidArgumentError(f"store must be an mdss Store (see mdss.open_store), got {store!r:.80}")
        if not isinstance(name, str) or not name or "#" in name:
            # '#' separates a board's name from its parts' ("game#week:2026-W48", "game#rows#all")
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
        self._options = options
        self._sets: dict[str, SortedSet] = {}
        self._lock = threading.Lock()
        self._registered: set[str] = set()
        self._registry = SortedSet(store, f"{name}#windows", order="asc", **options)
        self._retired = _Retired(store, self._registry.gc_grace)
        self._keyspaces: dict[str, Keyspace] = {}
        self._adopt_settings()

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
        key = Keyspace(store.namespace, f"{name}#board").head
        record = store.get(key)
        if record is None:
            raise InvalidArgumentError(f"there is no leaderboard {name!r} in this store (create it with its columns)")
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

    def _settings(self) -> bytes:
        return msgpack.packb(
            [
                FORMAT,
                [[c.name, [list(p) for p in c.parts]] for c in self.columns.values()],
                list(self.accumulate),
                sorted(self.keep_best.items()),
            ],
            use_bin_type=True,
        )

    def _adopt_settings(self) -> None:
        """Store this board's columns and field rules on first use; refuse a board opened differently."""
        key = Keyspace(self.store.namespace, f"{self.name}#board").head
        data = seal(self._settings())
        try:
            self.store.cas(key, data, None)
            return
        except ConflictError:
            pass
        record = self.store.get(key)
        if record is not None and record.value != data:
            unpack(key, record.value, "leaderboard settings")  # damaged bytes: CorruptDataError, not a mismatch
            raise SettingsMismatchError(
                f"leaderboard {self.name!r} is stored with other columns, accumulate or keep_best settings"
            )

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
                found = self._sets[instance] = SortedSet(
                    self.store, f"{self.name}#{instance}", order="asc", **self._options
                )
            return found

    def _rows_keys(self, instance: str) -> Keyspace:
        found = self._keyspaces.get(instance)
        if found is None:
            found = self._keyspaces[instance] = Keyspace(self.store.namespace, f"{self.name}#rows#{instance}")
        return found

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

    def _register(self, instance: str) -> None:
        if instance in self._registered:
            return
        begins = _windows.start(instance, self.tz)
        self._registry.add(instance, begins or 0, only="new")
        self._registered.add(instance)
        kind = instance.partition(":")[0]
        keep = self.retention.get(kind)
        if keep is None:
            return
        older = [n for n in self.windows(kind) if (_windows.start(n, self.tz) or 0) < (begins or 0)]
        for doomed in older[: max(0, len(older) - (keep - 1))]:
            self.drop_window(doomed)

    def drop_window(self, window: str) -> None:
        """Remove one window instance: its set, its rows, and its name from :meth:`windows`."""
        instance = self._instance(window)
        self._set(instance).drop()
        rows = self._rows_keys(instance)
        self.store.delete_many(list(self.store.keys(rows.nodes)))
        self._registry.remove(instance)
        self._registered.discard(instance)
        with self._lock:
            self._sets.pop(instance, None)

    def drop(self) -> None:
        """Remove the whole board: every window, the registry, the settings."""
        for instance in self.windows():
            self.drop_window(instance)
        self._registry.drop()
        self.store.delete(Keyspace(self.store.namespace, f"{self.name}#board").head)

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

    @staticmethod
    def _encode_row(owner: str, values: dict[str, Any], updated: float, posts: list[str]) -> bytes:
        return seal(msgpack.packb([FORMAT, owner, values, updated, posts], use_bin_type=True))

    @staticmethod
    def _decode_row(key: str, data: bytes) -> tuple[Row, list[str]]:
        _, found = unpack(key, data, "leaderboard row")
        if (
            type(found) is not list
            or len(found) != 5
            or type(found[1]) is not str
            or type(found[2]) is not dict
            or type(found[3]) not in (int, float)
            or type(found[4]) is not list
        ):
            raise CorruptDataError("stored leaderboard row has the wrong shape", key)
        return Row(found[1], found[2], found[3]), found[4]

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
        ``"existing"`` posts only where the owner has no row / a row. A
        ``post_id`` a window's row already has makes the post a no-op there,
        so a post retried after a crash or a timeout finishes the windows it
        had not reached and counts nothing twice. Everything is validated
        before anything is written. One commit (an update-log append) per
        window, plus one row record.
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
        instances = [_windows.instance(kind, when, self.tz) for kind in self.windows_kinds]
        for instance in instances:
            self._register(instance)
        done: dict[str, bool] = {}
        fresh = False
        for _ in range(_POST_ATTEMPTS):
            pending = [i for i in instances if i not in done]
            if not pending:
                return {i: done[i] for i in instances}
            plans = self._plan(pending, owner, checked, ops, post_id, only, when.timestamp(), fresh, done)
            if plans is None:  # a row record collected since its pointer was read, or a no-op to confirm
                fresh = True
                continue
            fresh = not self._commit(plans, done)
        raise ConflictError(f"posts for owner {owner!r} kept colliding; windows done: {done}")

    def _pointer(self, sset: SortedSet, pointer: str, fresh: bool) -> tuple[Any, Any]:
        """The row version ``pointer`` holds and the window's gc epoch, from one snapshot: the head this
        process last saw (no read) unless ``fresh``. A stale answer costs nothing but a retry: the commit
        expects both values it read."""
        held = sset._held
        if not fresh and held is not None:
            try:
                version, epoch = _head.snapshot(sset, False, (held[0],)).index.find([pointer, _EPOCH])
                return version, epoch
            except MdssError:
                pass
        version, epoch = sset.scores([pointer, _EPOCH])
        return version, epoch

    def _plan(
        self,
        pending: list[str],
        owner: str,
        values: dict[str, Any],
        ops: dict[str, str],
        post_id: str | None,
        only: str | None,
        stamp: float,
        fresh: bool,
        done: dict[str, bool],
    ) -> list[_Plan] | None:
        """Read the owner's rows in the ``pending`` windows (one ``get_many``), merge the post into each
        (refusing bad values before anything is written) and write the new row records (one ``put_many``).

        Windows where the post does nothing (its ``post_id`` is there, ``only`` excludes the row) go to
        ``done`` as ``False``. ``None`` when a row record has gone since its pointer was read, or when a
        no-op was decided on the head this process last saw (it may be old: a fresh read decides).
        """
        pointer = _ROW + owner
        seen = {i: self._pointer(self._set(i), pointer, fresh) for i in pending}
        keys = {i: self._rows_keys(i).node(f"{v:x}") for i, (v, _) in seen.items() if v is not None}
        records = dict(zip(keys, self._records([(self._set(i)._cache, k) for i, k in keys.items()])))
        plans: list[_Plan] = []
        for instance in pending:
            row: Row | None = None
            posts: list[str] = []
            if instance in keys:
                record = records[instance]
                if record is None:
                    return None
                row, posts = record
            if post_id is not None and post_id in posts or only is not None and (row is None) != (only == "new"):
                if not fresh:  # the head this process last saw may be old: only the current one may say no
                    return None  # (nothing is written yet)
                done[instance] = False
                continue
            merged = self._merged(row, values, ops)
            old = self._members(owner, row.values) if row is not None else {}
            new = self._members(owner, merged)
            fresh_version = _FIRST_VERSION + secrets.randbits(62)
            # The record is named only if the row and the window's gc epoch are still what was read: a gc that
            # lists the record before this commit lands advances the epoch first, and then refuses it.
            commit: list[tuple[str, str, Any]] = [("expect", pointer, seen[instance][0])]
            commit.append(("expect", _EPOCH, seen[instance][1]))
            for column, member in old.items():
                if new.get(column) != member:
                    commit.append(("remove", member, None))
                    commit += self._group_ops(self.columns[column], member, leaving=True)
            for column, member in new.items():
                if old.get(column) != member:
                    commit.append(("set", member, self.columns[column].slot))
                    commit += self._group_ops(self.columns[column], member, leaving=False)
            commit.append(("set", pointer, fresh_version))
            kept = ([*posts, post_id] if post_id else posts)[-KEEP_POSTS:]
            plans.append(
                _Plan(
                    instance,
                    commit,
                    self._rows_keys(instance).node(f"{fresh_version:x}"),
                    self._encode_row(owner, merged, stamp, kept),
                    (Row(owner, merged, stamp), kept),
                    keys.get(instance),
                )
            )
        if plans:
            self.store.put_many({plan.key: plan.record for plan in plans})
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
        owner (that window is tried again from a fresh read). Records never named are deleted."""
        clean = True
        for n, plan in enumerate(plans):
            try:
                self._set(plan.instance)._submit(plan.ops)
            except _ops.Stale:
                self.store.delete(plan.key)  # never named: another post of this owner, or a gc, landed first
                clean = False
                continue
            except StoreUnavailableError:  # may have landed: its record stays (a leak at worst)
                self.store.delete_many([p.key for p in plans[n + 1 :]])
                raise
            except BaseException:
                self.store.delete_many([p.key for p in plans[n:]])
                raise
            done[plan.instance] = True
            self._set(plan.instance)._cache.put(plan.key, plan.decoded, len(plan.record))
            if plan.replaced is not None:  # readers of older snapshots may still want it
                self._retired.add([plan.replaced])
        return clean

    # -- reads -----------------------------------------------------------------------------------------------------

    def _read(self, window: Any, fn: Callable[[Any, _Window], Any]) -> Any:
        instance = self._instance(window)
        sset = self._set(instance)
        win = _Window(self._rows_keys(instance), sset._cache)
        return sset._read(lambda snap: fn(snap, win))

    def _records(self, wanted: Sequence[tuple[NodeCache, str]]) -> list[tuple[Row, list[str]] | None]:
        """The row records at the keys ``wanted`` (with the cache of each one's window), decoded: from the
        caches, else in one ``get_many``; ``None`` where none is stored."""
        found: list[tuple[Row, list[str]] | None] = [cache.get(key) for cache, key in wanted]
        missing = [i for i, record in enumerate(found) if record is None]
        if missing:
            for i, data in zip(missing, self.store.get_many([wanted[i][1] for i in missing])):
                if data is not None:
                    cache, key = wanted[i]
                    found[i] = self._decode_row(key, data)
                    cache.put(key, found[i], len(data))
        return found

    def _rows_of(self, snap: Any, win: _Window, owners: Sequence[str]) -> list[Row | None]:
        """The rows of ``owners`` in one snapshot (``None``: no row); a collected row record retries the read."""
        versions = snap.index.find([_ROW + o for o in owners])
        keys = [win.rows.node(f"{v:x}") for v in versions if v is not None]
        found = iter(self._records([(win.cache, key) for key in keys]))
        result: list[Row | None] = []
        for version in versions:
            if version is None:
                result.append(None)
                continue
            record = next(found)
            if record is None:
                raise MissingNodeError("a row record the snapshot names is gone", win.rows.node(f"{version:x}"))
            row = record[0]
            result.append(Row(row.owner, dict(row.values), row.updated))  # the cached one stays as stored
        return result

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
        return self._read(window, lambda snap, win: self._rows_of(snap, win, [owner])[0])

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

        def run(snap: Any, win: _Window) -> dict[str, Any]:
            row = self._rows_of(snap, win, [owner])[0]
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
        self, snap: Any, win: _Window, column: _Column, start: int, stop: int, ties: str
    ) -> tuple[list[RankedRow], str | None]:
        """Ranked rows at positions ``start`` to ``stop - 1`` of ``column`` (positions within the column),
        and the member of the last one."""
        low, high = snap.ranking.count_below([(column.slot,), (column.slot, TOP)])
        members, _ = snap.ranking.slice(low + max(start, 0), min(low + stop, high))
        if not members:
            return [], None
        parts = len(column.parts)
        owners = [column_owner(m, parts) for m in members]
        found = self._rows_of(snap, win, owners)
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

        def run(snap: Any, win: _Window) -> list[RankedRow]:
            row = self._rows_of(snap, win, [owner])[0]
            member = None if row is None else _member(col, owner, row.values)
            if member is None:
                return []
            at = self._ranks(snap, col, [member], "ordinal")[0] - 1
            return self._listing(snap, win, col, max(at - before, 0), at + after + 1, ties)[0]

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

        def run(snap: Any, win: _Window) -> list[RankedRow]:
            found = [(o, r) for o, r in zip(wanted, self._rows_of(snap, win, wanted)) if r is not None]
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

        def run(snap: Any, win: _Window) -> tuple[list[RankedRow], str | None]:
            low, high = snap.ranking.count_below([(col.slot,), (col.slot, TOP)])
            start = 0 if after is None else snap.ranking.count_below([(col.slot, after + "\0")])[0] - low
            found, last = self._listing(snap, win, col, start, start + limit, ties)
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
        return self._read(window, lambda snap, win: self._size(snap, col))

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

        def run(snap: Any, win: _Window) -> float | None:
            row = self._rows_of(snap, win, [owner])[0]
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

        def run(snap: Any, win: _Window) -> RankedRow | None:
            size = self._size(snap, col)
            if not size:
                return None
            at = min(int(p * size), size - 1)
            found, _ = self._listing(snap, win, col, at, at + 1, ties)
            return found[0] if found else None

        return self._read(window, run)

    # -- cursors ---------------------------------------------------------------------------------------------------

    def _encode_cursor(self, instance: str, column: str, member: str) -> str:
        data = seal(msgpack.packb([FORMAT, self.name, instance, column, member], use_bin_type=True))
        return base64.urlsafe_b64encode(data).decode("ascii").rstrip("=")

    def _decode_cursor(self, cursor: Any, instance: str, column: str) -> str:
        try:
            if not isinstance(cursor, str):
                raise ValueError("not a str")
            data = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
            _, found = unpack("cursor", data, "cursor")
        except (ValueError, binascii.Error, CorruptDataError):
            raise InvalidArgumentError(f"not a leaderboard cursor: {cursor!r:.80}") from None
        if type(found) is not list or len(found) != 5 or found[1:4] != [self.name, instance, column]:
            raise InvalidArgumentError("this cursor belongs to another board, window or column")
        if type(found[4]) is not str or not found[4].startswith(column_tag(self.columns[column].slot)):
            raise InvalidArgumentError(f"not a leaderboard cursor: {cursor!r:.80}")
        return found[4]

    # -- maintenance -----------------------------------------------------------------------------------------------

    def gc(self, window: str | None = None, *, wait: bool = True, sweep: bool = False) -> int:
        """Delete what no head can name again, in one window (``window``) or in every window and the
        registry; returns how many keys it deleted.

        Each window's set collects its garbage as :meth:`SortedSet.gc` does.
        ``sweep=True`` also lists the set's nodes and the window's **row
        records**, and deletes the records no row pointer can ever name: those
        of posts that crashed or timed out before their commit, and the
        replaced ones a process ended too soon to delete. That is safe
        whatever writers do, for the reason node sweeps are (gc epochs,
        docs/architecture.md "Garbage"): every post expects the window's board
        epoch it read, and the sweep lists the records first, then advances
        that epoch by a commit; so a listed record that a later head does not
        name can never be named again (a post still in flight with it is
        refused, and posts again with a fresh record). Unless ``wait=False``,
        it waits ``gc_grace`` seconds before deleting, so that readers of older
        snapshots finish.
        """
        if type(wait) is not bool or type(sweep) is not bool:
            raise InvalidArgumentError(f"wait and sweep must be True or False, got {wait!r:.40}, {sweep!r:.40}")
        instances = self.windows() if window is None else [self._instance(window)]
        deleted = 0
        for instance in instances:
            started = time.monotonic()
            doomed = self._unnamed_rows(instance) if sweep else []
            deleted += self._set(instance).gc(wait=wait, sweep=sweep)
            if doomed and wait:
                time.sleep(max(0.0, self._retired.grace - (time.monotonic() - started)))
            for first in range(0, len(doomed), 1000):
                self.store.delete_many(doomed[first : first + 1000])
            deleted += len(doomed)
        if window is None:
            deleted += self._registry.gc(wait=wait, sweep=sweep)
        return deleted

    def _unnamed_rows(self, instance: str) -> list[str]:
        """The row records of ``instance`` that no head can ever name again (see :meth:`gc`)."""
        rows, sset = self._rows_keys(instance), self._set(instance)
        listed = list(self.store.keys(rows.nodes))
        if not listed:
            return []
        # Every listed record was written by a post that read an epoch <= the one this advances from: from now
        # on no commit can name it unless the state this reads names it already.
        self._advance_epoch(sset)
        named = self._versions(sset)
        unnamed = []
        for key in listed:
            try:
                version = int(key[len(rows.nodes) :], 16)
            except ValueError:
                continue  # not a row record
            if version not in named:
                unnamed.append(key)
        return self.store.existing(unnamed)

    @staticmethod
    def _advance_epoch(sset: SortedSet) -> None:
        """Move the window's board epoch on by one commit (posts that read an older one can no longer land)."""
        for _ in sset._policy.attempts():
            epoch = sset.score(_EPOCH)
            try:
                sset._submit([("expect", _EPOCH, epoch), ("set", _EPOCH, (epoch or _EPOCH_BASE) + 1)])
                return
            except _ops.Stale:
                continue  # another gc advanced it meanwhile: advance again, after this listing
        raise ConflictError(f"gc of {sset.name!r} lost its epoch to other gc calls for its whole retry budget")

    @staticmethod
    def _versions(sset: SortedSet) -> set[int]:
        """The row versions the set's pointers name, paged by key (a snapshot per page).

        A pointer present through the whole walk is never skipped (each page
        resumes just after the last key seen); a record named in the
        advanced state but replaced meanwhile is garbage anyway.
        """
        named: set[int] = set()
        after: tuple[Any, ...] = (_FIRST_VERSION,)
        while True:

            def page(snap: Any, after: tuple[Any, ...] = after) -> tuple[list[str], list[Any]]:
                start = snap.ranking.count_below([after])[0]
                members, scores = snap.ranking.slice(start, start + _SWEEP_PAGE)
                return members, scores

            members, scores = sset._read(page)
            named.update(s for m, s in zip(members, scores) if m.startswith(_ROW))
            if len(members) < _SWEEP_PAGE:
                return named
            after = (scores[-1], members[-1] + "\0")

    def check(self, window: str | None = None) -> list[str]:
        """Every invariant of one window: its set's (``SortedSet.check``), and that each row's column entries
        are exactly those its values spell, with nothing else in the columns. Reads everything: O(n)."""
        instance = self._instance(window)
        sset = self._set(instance)
        problems = sset.check()
        if problems:
            return problems
        rows = self._rows_keys(instance)
        entries = list(sset)
        pointers = {e.member[len(_ROW) :]: e.score for e in entries if e.member.startswith(_ROW)}
        column_entries = {e.member: e.score for e in entries if not e.member.startswith((_ROW, _EPOCH))}
        epoch = [e.score for e in entries if e.member == _EPOCH]
        if epoch and not (type(epoch[0]) is int and _EPOCH_BASE < epoch[0] < _FIRST_VERSION):
            problems.append(f"the board's gc epoch entry holds {epoch[0]!r}")
        expected: dict[str, int] = {}
        owners = sorted(pointers)
        datas = self.store.get_many([rows.node(f"{pointers[o]:x}") for o in owners]) if owners else []
        for owner, data in zip(owners, datas):
            key = rows.node(f"{pointers[owner]:x}")
            if data is None:
                problems.append(f"row record of {owner!r} is missing ({key})")
                continue
            row, _ = self._decode_row(key, data)
            if row.owner != owner:
                problems.append(f"row record {key} belongs to {row.owner!r}, not {owner!r}")
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
