"""A capacity model of a key-value store: any store, with DynamoDB's per-key throughput limits on top.

DynamoDB serves one partition key at most about 1,000 write units and 3,000 read units a second. A write costs one
unit per started KB of the item, a strongly consistent read one per started 4 KB (at least one, item found or not);
a request past the key's capacity is refused with a throttling error, which the client retries with backoff. A head of
1-3 KB therefore takes at most a few hundred commits a second, whatever the clients: the limit sharded sets exist to
pass (seed 002). :class:`CapacityStore` puts those rules over any store, for tests and benchmarks:

- each key has a bucket of read units and one of write units, refilled at ``read_units`` and ``write_units`` a second
  and holding ``burst`` seconds of them;
- a request is admitted while its key's bucket is not empty, and charged what it costs (a bucket may go below zero:
  a large item passes, and the key waits longer after it); a batch is admitted key by key, as ``BatchGetItem`` and
  ``BatchWriteItem`` return the throttled keys unprocessed;
- a refused request has no effect; it is retried after a jittered exponential backoff (:class:`mdss._retry.Backoff`)
  for up to ``retry_budget`` seconds, then raises :class:`StoreUnavailableError`, as the DynamoDB store does.

Buckets live in this process, or with ``shared=PATH`` in an SQLite file that every process opening the same path
shares (one transaction per request), so that 32 writer processes meet one key's limit together. Round trips and
bytes are counted by the inner store's :attr:`stats`, which this store shares; units consumed (in all, and on the keys
``watch(key)`` picks) and requests refused are in :attr:`usage`.
"""

from __future__ import annotations

import math
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

import attrs

from .._order import check_positive, check_seconds
from .._retry import Backoff
from ..exceptions import InvalidArgumentError, StoreRefusedError, shown
from .base import Record, Store

T = TypeVar("T")

#: Bytes per write unit, and per (strongly consistent) read unit.
WRITE_UNIT = 1024
READ_UNIT = 4096


def write_units(size: int, unit: int = WRITE_UNIT) -> int:
    """The write units of an item of ``size`` bytes: one per started ``unit`` (a KB), at least one."""
    return max(1, math.ceil(size / unit))


def read_units(size: int, unit: int = READ_UNIT) -> int:
    """The read units of reading an item of ``size`` bytes (0: absent): one per started ``unit`` (4 KB), at least
    one."""
    return max(1, math.ceil(size / unit))


@attrs.define
class Usage:
    """What the model counted: units consumed, those written to the watched keys and the writes that took them, requests
    refused (each retried later), seconds spent waiting."""

    read_units: int = 0
    write_units: int = 0
    watched_units: int = 0
    watched_writes: int = 0
    throttled: int = 0
    waited: float = 0.0
    _lock: threading.Lock = attrs.field(factory=threading.Lock, repr=False, eq=False)

    def add(self, **counts: float) -> None:
        with self._lock:
            for name, n in counts.items():
                setattr(self, name, getattr(self, name) + n)


class LocalBuckets:
    """Token buckets in this process: ``(key, kind)`` -> (tokens, when last refilled)."""

    def __init__(self) -> None:
        self._buckets: dict[tuple[str, str], tuple[float, float]] = {}
        self._lock = threading.Lock()

    def take(self, kind: str, costs: Mapping[str, float], rate: float, depth: float) -> list[str]:
        """Charge each key of ``costs`` whose ``kind`` bucket is not empty; the keys refused (charged nothing)."""
        now = time.monotonic()
        refused = []
        with self._lock:
            buckets = self._buckets
            for key, cost in costs.items():
                tokens, then = buckets.get((key, kind), (depth, now))
                tokens = min(depth, tokens + (now - then) * rate)
                if tokens > 0:
                    tokens -= cost
                else:
                    refused.append(key)
                buckets[key, kind] = (tokens, now)
        return refused

    def charge(self, kind: str, key: str, cost: float) -> None:
        """Charge ``cost`` more to an admitted request's key (a read, once its size is known)."""
        with self._lock:
            tokens, then = self._buckets[key, kind]
            self._buckets[key, kind] = (tokens - cost, then)

    def close(self) -> None:
        pass


class SharedBuckets:
    """Token buckets in an SQLite file, shared by every process that opens it (wall-clock time, one immediate
    transaction per request)."""

    def __init__(self, path: str) -> None:
        self._db = sqlite3.connect(path, timeout=60, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=OFF")
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS buckets (k TEXT, kind TEXT, tokens REAL, at REAL, PRIMARY KEY (k, kind))"
        )
        self._lock = threading.Lock()

    def take(self, kind: str, costs: Mapping[str, float], rate: float, depth: float) -> list[str]:
        refused = []
        with self._lock:
            db = self._db
            db.execute("BEGIN IMMEDIATE")
            try:
                now = time.time()
                for key, cost in costs.items():
                    row = db.execute("SELECT tokens, at FROM buckets WHERE k = ? AND kind = ?", (key, kind)).fetchone()
                    tokens = depth if row is None else min(depth, row[0] + (now - row[1]) * rate)
                    if tokens > 0:
                        tokens -= cost
                    else:
                        refused.append(key)
                    db.execute("INSERT OR REPLACE INTO buckets VALUES (?, ?, ?, ?)", (key, kind, tokens, now))
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
        return refused

    def charge(self, kind: str, key: str, cost: float) -> None:
        with self._lock:
            self._db.execute("UPDATE buckets SET tokens = tokens - ? WHERE k = ? AND kind = ?", (cost, key, kind))

    def close(self) -> None:
        with self._lock:
            self._db.close()


class CapacityStore(Store):
    """``inner`` with per-key read and write units a second (see the module's docstring)."""

    def __init__(
        self,
        inner: Store,
        *,
        read_units: float = 3000.0,
        write_units: float = 1000.0,
        burst: float = 1.0,
        shared: str | None = None,
        retry_budget: float = 30.0,
        backoff: float = 0.005,
        watch: Callable[[str], bool] | None = None,
        unit_bytes: tuple[int, int] = (WRITE_UNIT, READ_UNIT),
        appends: bool | None = None,
    ) -> None:
        if not isinstance(inner, Store):
            raise InvalidArgumentError(f"inner must be an mdss Store, got {shown(inner)}")
        for what, value in (("read_units", read_units), ("write_units", write_units), ("burst", burst)):
            check_positive(value, what)
        for what, value in (("retry_budget", retry_budget), ("backoff", backoff)):
            check_seconds(value, what)
        super().__init__(namespace=inner.namespace)
        self.inner = inner
        self.stats = inner.stats  # round trips and bytes, counted once, by the inner store
        if appends not in (None, False, True):
            raise InvalidArgumentError(f"appends must be None, False or True, got {shown(appends)}")
        if appends and not inner.appends:
            raise InvalidArgumentError(f"{type(inner).__name__} does not apply appends to a head")
        self.keeps_siblings, self.evicts = inner.keeps_siblings, inner.evicts
        #: False: heads are compare-and-set, as on DynamoDB (which applies no appends), whatever the inner store does.
        self.appends = inner.appends if appends is None else appends
        self.max_value_bytes, self.max_key_bytes = inner.max_value_bytes, inner.max_key_bytes
        self.rates = {"read": float(read_units), "write": float(write_units)}
        self.burst = float(burst)
        if not (
            isinstance(unit_bytes, tuple) and len(unit_bytes) == 2 and all(type(u) is int and u > 0 for u in unit_bytes)
        ):
            raise InvalidArgumentError(
                f"unit_bytes must be (write bytes, read bytes) per unit, got {shown(unit_bytes)}"
            )
        self.unit_bytes = unit_bytes  # (1 << 62, 1 << 62): a unit per request, whatever its size
        self.usage = Usage()
        self._watch = watch  # the keys whose writes usage.watched_units and watched_writes count (a benchmark's heads)
        self._buckets: LocalBuckets | SharedBuckets = LocalBuckets() if shared is None else SharedBuckets(shared)
        self._policy = Backoff(budget=float(retry_budget), base=float(backoff), cap=0.5)

    def __repr__(self) -> str:
        rates = self.rates
        return f"CapacityStore({self.inner!r}, read_units={rates['read']:g}, write_units={rates['write']:g})"

    # -- admission -------------------------------------------------------------------------------------------------

    def _admit(self, kind: str, costs: dict[str, float]) -> None:
        """Charge every key of ``costs`` in its ``kind`` bucket, waiting out refusals (backoff) within the budget."""
        rate = self.rates[kind]
        depth = rate * self.burst
        waited = time.monotonic()
        for attempt in self._policy.attempts():
            refused = self._buckets.take(kind, costs, rate, depth)
            admitted = [key for key in costs if key not in refused]
            self.usage.add(**{f"{kind}_units": sum(costs[key] for key in admitted)})
            if kind == "write" and self._watch is not None:
                watched = [costs[key] for key in admitted if self._watch(key)]
                self.usage.add(watched_units=sum(watched), watched_writes=len(watched))
            if not refused:
                if attempt:
                    self.usage.add(waited=time.monotonic() - waited)
                return
            self.usage.add(throttled=1)
            costs = {key: costs[key] for key in refused}
        raise StoreRefusedError(  # as DynamoDB's throttling: refused before anything was applied
            f"{len(costs)} key(s) throttled past the retry budget of {self._policy.budget:g} s, such as "
            f"{next(iter(costs))!r}"
        )

    def _write(self, key: str, size: int, call: Callable[[], T]) -> T:
        self._admit("write", {key: write_units(size, self.unit_bytes[0])})
        return call()

    # -- the store interface, over the inner store's public calls ------------------------------------------------

    def get(self, key: str) -> Record | None:
        self._admit("read", {key: 1})
        record = self.inner.get(key)
        size = 0 if record is None else sum(map(len, record.values))
        self._charge_read(key, size)
        return record

    def get_many(self, keys: Sequence[str]) -> list[bytes | None]:
        if not keys:
            return []
        self._admit("read", dict.fromkeys(keys, 1))
        values = self.inner.get_many(keys)
        for key, value in zip(keys, values):
            self._charge_read(key, 0 if value is None else len(value))
        return values

    def _charge_read(self, key: str, size: int) -> None:
        extra = read_units(size, self.unit_bytes[1]) - 1  # admitted at one unit; the item's size decides the rest
        if extra:
            self._buckets.charge("read", key, extra)
            self.usage.add(read_units=extra)

    def put(self, key: str, value: bytes, *, context: Any = None) -> None:
        self._write(key, len(value), lambda: self.inner.put(key, value, context=context))

    def put_many(self, items: Mapping[str, bytes]) -> None:
        if not items:
            return
        unit = self.unit_bytes[0]
        self._admit("write", {key: write_units(len(value), unit) for key, value in items.items()})
        self.inner.put_many(items)

    def cas(self, key: str, value: bytes, version: Any) -> Any:
        """A compare-and-set, charged whether it lands or loses (DynamoDB charges a failed condition too)."""
        return self._write(key, len(value), lambda: self.inner.cas(key, value, version))

    def append_log(self, key: str, held: bytes, record: bytes, cap: int) -> Record:
        """An append, charged as an update of the whole item (the head with the record)."""
        return self._write(key, len(held) + len(record), lambda: self.inner.append_log(key, held, record, cap))

    def swap_core(
        self,
        key: str,
        held: bytes,
        core: bytes,
        record: bytes,
        cap: int,
        nodes: Mapping[str, bytes] | None = None,
        *,
        lagging: bool = False,
    ) -> Record:
        if nodes:  # seals_nodes is false here: each key's write is charged apart
            raise NotImplementedError("a CapacityStore cannot write nodes with a seal")
        return self._write(
            key,
            max(len(held), len(core)) + len(record),
            lambda: self.inner.swap_core(key, held, core, record, cap, lagging=lagging),
        )

    def delete(self, key: str) -> None:
        self._write(key, 0, lambda: self.inner.delete(key))

    def delete_if(self, key: str, version: Any) -> None:
        self._write(key, 0, lambda: self.inner.delete_if(key, version))

    def delete_many(self, keys: Iterable[str]) -> None:
        keys = list(keys)
        if not keys:
            return
        self._admit("write", dict.fromkeys(keys, 1))
        self.inner.delete_many(keys)

    def keys(self, prefix: str) -> Iterator[str]:
        """A listing: a maintenance scan, not charged to any key."""
        return self.inner.keys(prefix)

    def close(self) -> None:
        self._buckets.close()
        self.inner.close()
