"""The store contract: the few key-value primitives mdss needs from a backend.

A backend subclasses :class:`Store` and implements the underscored primitives. The public methods around them
validate, count round trips and bytes in :attr:`Store.stats`, and are what the rest of mdss calls. Batch
primitives have default implementations that loop over the single ones; a backend overrides them when it can do
the batch in one round trip (every built-in backend does, so one public call is one round trip).

Values are ``bytes``. Keys are ``str`` chosen by mdss (see ``mdss._keys``); user-supplied text (member names)
never appears in a key.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, TypeVar
from urllib.parse import parse_qsl, urlsplit

import attrs

from .. import _tail
from .._parse import integer, number
from ..exceptions import ConflictError, InvalidArgumentError, SiblingsError

T = TypeVar("T")


@attrs.frozen
class Record:
    """A stored value with the version a conditional put compares against. ``values`` holds one value, or several
    concurrent siblings on a store that keeps them (Riak with ``allow_mult``). ``version`` is opaque: pass it back to
    :meth:`Store.cas` or to :meth:`Store.put` as ``context``."""

    values: tuple[bytes, ...]
    version: Any

    @property
    def value(self) -> bytes:
        """The one value; :class:`SiblingsError` when there are siblings."""
        if len(self.values) != 1:
            raise SiblingsError(f"expected one value, the store holds {len(self.values)} siblings")
        return self.values[0]


@attrs.define
class Stats:
    """Counters of what a store was asked, the real cost on a networked store: ``calls`` counts round trips (one per
    public store call), ``reads`` and ``writes`` count keys, ``bytes_read`` and ``bytes_written`` value bytes,
    ``conflicts`` conditional puts that lost. A backend may add counters in a subclass (DynamoDB's capacity units)."""

    calls: int = 0
    reads: int = 0
    bytes_read: int = 0
    writes: int = 0
    bytes_written: int = 0
    deletes: int = 0
    conflicts: int = 0
    _lock: threading.Lock = attrs.field(factory=threading.Lock, repr=False, eq=False)

    def add(self, **counts: int) -> None:
        with self._lock:
            for name, n in counts.items():
                setattr(self, name, getattr(self, name) + n)

    def read(self, keys: int, size: int) -> None:
        """One round trip that read ``keys`` keys and ``size`` bytes (the hot path of every read)."""
        with self._lock:
            self.calls += 1
            self.reads += keys
            self.bytes_read += size

    def snapshot(self) -> dict[str, int]:
        """The counters as a plain dict (for subtraction, printing, JSON)."""
        with self._lock:
            return {f.name: getattr(self, f.name) for f in attrs.fields(type(self)) if f.name != "_lock"}

    def since(self, before: Mapping[str, int]) -> dict[str, int]:
        """The counters' growth since an earlier :meth:`snapshot`."""
        now = self.snapshot()
        return {name: now[name] - before.get(name, 0) for name in now}

    def reset(self) -> None:
        with self._lock:
            for f in attrs.fields(type(self)):
                if f.name != "_lock":
                    setattr(self, f.name, 0)


def url_options(url: str) -> dict[str, str]:
    """A URL's query parameters as a dict (the last of a repeated name wins; ``?name=`` is ``""``, not absent)."""
    return dict(parse_qsl(urlsplit(url).query, keep_blank_values=True))


def parse_flag(text: str) -> bool:
    """A yes/no URL option: ``true``/``false``, ``yes``/``no``, ``on``/``off``, ``1``/``0``."""
    spelled = text.lower()
    if spelled in ("1", "true", "yes", "on"):
        return True
    if spelled in ("0", "false", "no", "off"):
        return False
    raise ValueError("expected true or false")


def parse_number(text: str) -> float:
    """A numeric URL option (seconds, ...)."""
    try:
        return number(text)
    except ValueError:
        raise ValueError("expected a number (ASCII digits)") from None


def parse_integer(text: str) -> int:
    """An integer URL option (a count)."""
    return integer(text)


def store_options(url: str, options: Mapping[str, Any], parsers: Mapping[str, Callable[[str], Any]]) -> dict[str, Any]:
    """A backend's constructor arguments: the URL's query parameters, each parsed from text by ``parsers[name]``, then
    the keyword ``options`` as given (they win). A name not in ``parsers`` (a misspelt option) or text a parser refuses
    raises :class:`InvalidArgumentError` naming it; the constructor validates the values, wherever they came from."""
    scheme = urlsplit(url).scheme
    query = url_options(url)
    for name in (*query, *options):
        if name not in parsers:
            known = ", ".join(sorted(parsers))
            raise InvalidArgumentError(f"unknown option {name!r} for a {scheme}:// store (it takes {known})")
    parsed = {}
    for name, text in query.items():
        try:
            parsed[name] = parsers[name](text)
        except ValueError as exc:
            raise InvalidArgumentError(f"bad option {name}={text!r} for a {scheme}:// store: {exc}") from None
    return {**parsed, **options}


class Store:
    """Base class of every backend, which implements :data:`REQUIRED`, :meth:`_close` and, for speed, the batch
    primitives. ``namespace`` prefixes every key mdss makes, so that several applications share one store safely."""

    #: True for stores that keep concurrent writes as siblings (Riak allow_mult).
    keeps_siblings = False
    #: Whether a key may vanish without a delete (Redis evicting): then a new set's first write lists the set's keys, to
    #: tell a lost head from a new set (``mdss._snapshot.snapshot``).
    evicts = True
    #: The largest value one key holds, for stores with a limit that nodes can reach (DynamoDB: 400 KB items).
    max_value_bytes: int | None = None
    #: The longest key, in UTF-8 bytes, for stores with a limit that a long set name can reach (DynamoDB: 2048): a set
    #: whose keys could pass it is refused when it is opened (``mdss._engine.Engine``), not after writes landed.
    max_key_bytes: int | None = None
    #: Whether the store applies appends to a head itself (:meth:`append_log`, :meth:`_append`).
    appends = False
    #: Whether :meth:`get_along` reads a head and other keys in one round trip (one Redis server); on the others a read
    #: does not route the members it looks up to the entry sets it would read along (``mdss._snapshot._along``).
    reads_along = False
    #: Whether :meth:`get_during` and :meth:`get_many_during` run work while a read travels (one Redis server); on the
    #: others a read makes no guess (``mdss._snapshot._guessed``, ``ShardedSet._guessed``), which would cost CPU for
    #: nothing.
    overlaps_reads = False
    #: Whether :meth:`swap_core` can write a seal's nodes in the same atomic step as its core (one Redis server, the
    #: memory store): then a seal costs one round trip, and writes no node unless its core is put in place.
    seals_nodes = False
    #: Whether the store deletes keys by itself at a time (:meth:`expire_keys`): one Redis server, DynamoDB (its TTL).
    expires_keys = False
    #: Whether :meth:`expire_keys` checks the head's version in the same atomic step as the expiries (one Redis
    #: server's script); else it fences by generation alone (DynamoDB: one conditional update per key), and
    #: ``mdss._expiry`` gives expiries only to keys the head it read leads to.
    expiry_checks_head = True

    @classmethod
    def from_url(cls, url: str, **options: Any) -> Store:
        """Build the store from its URL; backends override this to parse hosts."""
        return cls(**{**url_options(url), **options})

    def __init__(self, *, namespace: str = "mdss") -> None:
        if not isinstance(namespace, str) or not namespace:
            raise InvalidArgumentError(f"namespace must be a non-empty string, got {namespace!r}")
        self.namespace = namespace
        self.stats = Stats()

    # -- public API: counted ---------------------------------------------

    def get(self, key: str) -> Record | None:
        """The record at ``key`` with its version, or ``None`` when absent."""
        record = self._get(key)
        self.stats.read(1, sum(map(len, record.values)) if record is not None else 0)
        return record

    def get_along(self, key: str, keys: Sequence[str]) -> tuple[Record | None, list[bytes | None]] | None:
        """The record at ``key`` with its version and the values at ``keys`` (immutable: nodes) in one round trip, on a
        store that can (a head and the nodes a read will likely need); ``None`` on one that cannot: read them apart."""
        found = self._get_along(key, keys)
        if found is not None:
            record, values = found
            size = sum(len(v) for v in values if v is not None)
            self.stats.read(1 + len(keys), size + (sum(map(len, record.values)) if record else 0))
        return found

    def get_during(self, key: str, work: Callable[[], T]) -> tuple[Record | None, bool, T | None]:
        """The record at ``key``, and ``work()`` run while the read travels, on a store that can overlap them (Redis:
        the command sent, ``work`` run, then the reply read): ``(record, True, what work returned)``. A store that
        cannot, or ``work`` raising an :class:`Exception` (dropped: the caller does without), gives ``(record,
        False, None)``. ``work`` must not use the store: on Redis a command it sends fails, as ``work`` raising."""
        found = self._get_during(key, work)
        if found is None:
            return self.get(key), False, None
        record = found[0]
        self.stats.read(1, sum(map(len, record.values)) if record is not None else 0)
        return found

    def get_many_during(self, keys: Sequence[str], work: Callable[[], T]) -> tuple[list[bytes | None], bool, T | None]:
        """:meth:`get_many` of ``keys`` (a sharded set's heads), with ``work`` run while the read travels, as
        :meth:`get_during`."""
        found = self._get_many_during(keys, work)
        if found is None:
            return self.get_many(keys), False, None
        self.stats.read(len(keys), sum(len(v) for v in found[0] if v is not None))
        return found

    def get_many(self, keys: Sequence[str]) -> list[bytes | None]:
        """The values at ``keys`` (``None`` where absent) in one round trip, for immutable keys (nodes): no siblings."""
        if not keys:
            return []
        values = self._get_many(keys)
        self.stats.read(len(keys), sum(len(v) for v in values if v is not None))
        return values

    def put(self, key: str, value: bytes, *, context: Any = None) -> None:
        """Write ``value`` at ``key`` unconditionally. On a store that keeps siblings, ``context`` (a read's
        :attr:`Record.version`) says which values this write supersedes (without it, it may become a sibling)."""
        self._put(key, value, context)
        self.stats.add(calls=1, writes=1, bytes_written=len(value))

    def put_many(self, items: Mapping[str, bytes]) -> None:
        """Write every ``key: value`` unconditionally, in one round trip."""
        if not items:
            return
        self._put_many(items)
        self.stats.add(calls=1, writes=len(items), bytes_written=sum(map(len, items.values())))

    def cas(self, key: str, value: bytes, version: Any) -> Any:
        """Compare-and-set: write only if ``key`` is unchanged since it was read; the version written.

        ``version`` is the :attr:`Record.version` of that read, or ``None`` for "only if absent". Returns the version of
        what it wrote (``None`` when the store cannot tell without a read), so that a writer can compare-and-set again
        without reading. Raises :class:`~mdss.exceptions.ConflictError` when the key changed (or exists, for ``None``):
        then nothing is written, and its ``current`` is the record the key holds if the store read it in the same round
        trip. Any :class:`~mdss.exceptions.StoreUnavailableError` means the write may or may not have landed, but for
        :class:`~mdss.exceptions.StoreRefusedError`: it did not, in any attempt.
        """
        return self._counted(lambda: self._cas(key, value, version), writes=1, bytes_written=len(value))

    def append_log(self, key: str, held: bytes, record: bytes, cap: int) -> Record:
        """Append a commit's ``record`` to the head at ``key``, without a compare-and-set (``mdss._tail``, on stores
        whose :attr:`appends` is true): the record now there.

        ``held`` is the head's value as the writer holds it. Raises :class:`~mdss.exceptions.ConflictError` (with
        ``current``, and ``full`` when only the ``cap`` on the tail's bytes refused it) where :func:`mdss._tail.apply`
        refuses. Resending after a lost reply is safe: a record already there is not added again.
        """
        sha, seen = _tail.view(held)
        return self._counted(
            lambda: self._append(key, held, sha, seen, record, cap), writes=1, bytes_written=len(record)
        )

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
        """Seal: put ``core`` in place of the core of the head at ``key``, under the records appended since the writer's
        view (``held``), and append ``record``, without a compare-and-set (``mdss._tail``, on stores whose
        :attr:`appends` is true): the head now there. If another seal came first, only ``record`` is appended, across it
        (as by :meth:`append_log`). Raises :class:`~mdss.exceptions.ConflictError` (with ``current`` and ``full``) where
        :func:`mdss._tail.swap` refuses, for good. Resending after a lost reply is safe. ``nodes`` (only where
        :attr:`seals_nodes`) are written in the same step, if and only if ``core`` is put in place. ``lagging``: one of
        this writer's appends lately took long (a throttled key: the other writers hold old views too), so the new head
        keeps the cores this one bridges from (:func:`mdss._tail.swap`)."""
        sha, seen = _tail.view(held)
        nodes = nodes or {}
        if nodes and not self.seals_nodes:
            raise NotImplementedError(f"{type(self).__name__} cannot write nodes with a seal")
        written = len(core) + len(record) + sum(map(len, nodes.values()))
        return self._counted(
            lambda: self._swap(key, held, sha, seen, core, record, cap, nodes, lagging),
            writes=1 + len(nodes),
            bytes_written=written,
        )

    def delete(self, key: str) -> None:
        """Remove ``key``; removing an absent key is not an error."""
        self._delete(key)
        self.stats.add(calls=1, deletes=1)

    def delete_if(self, key: str, version: Any) -> None:
        """Remove ``key`` only if it still holds the version read (:attr:`Record.version`); an absent key is
        fine. Raises :class:`~mdss.exceptions.ConflictError` when it holds another version: nothing deleted."""
        self._counted(lambda: self._delete_if(key, version), deletes=1)

    def delete_many(self, keys: Iterable[str]) -> None:
        """Remove every key, in one round trip."""
        keys = list(keys)
        if not keys:
            return
        self._delete_many(keys)
        self.stats.add(calls=1, deletes=len(keys))

    def existing(self, keys: Sequence[str], batch: int = 1000) -> list[str]:
        """The ``keys`` that read as present, ``batch`` per round trip: a listing may name keys deleted moments
        ago (Riak lists tombstones until they are reaped), so what is reported or deleted is checked first."""
        found: list[str] = []
        for start in range(0, len(keys), batch):
            chunk = keys[start : start + batch]
            found.extend(key for key, value in zip(chunk, self.get_many(chunk)) if value is not None)
        return found

    def expire_keys(self, keys: Sequence[str], at_ms: int, head: str, version: Any, *, gen: int) -> bool:
        """Have the store delete ``keys`` by itself at ``at_ms`` (milliseconds since the epoch, by its clock, or later),
        only if ``head`` still holds ``version`` (checked atomically with it: ``mdss._expiry``); whether it did. A
        store that cannot check the head so (:attr:`expiry_checks_head` false) fences by ``gen``, the generation of the
        head read, instead: it gives no key an expiry after a :meth:`persist_keys` of a later generation reached it, nor
        to an absent key; False if it refused any. A store without its own expiry (``expires_keys`` false) does
        nothing: False."""
        return False

    def persist_keys(self, keys: Sequence[str], *, gen: int) -> None:
        """Cancel what :meth:`expire_keys` scheduled for ``keys`` (absent keys are fine), and fence off expiries of
        generations up to ``gen`` (the head's, fenced: see :meth:`expire_keys`); nothing on other stores."""

    def sweep(self, head: str) -> float:
        """Doom what this store keeps beside the head ``head`` that no read or write can need any more, left by
        processes that ended before they deleted it: a maintenance call (``gc(sweep=True)``) that may scan. What it
        dooms is deleted by this store's calls once the seconds returned have passed (by the next ``sweep`` if nothing
        else: 0 when it doomed nothing, as a store that keeps nothing beside its heads does)."""
        return 0.0

    def keys(self, prefix: str) -> Iterator[str]:
        """Every stored key that starts with ``prefix``, in no order: a maintenance call (gc, check) that may scan."""
        self.stats.add(calls=1)
        return self._keys(prefix)

    def close(self) -> None:
        """Release connections and files. Closing twice is harmless."""
        self._close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _counted(self, call: Callable[[], T], **counts: int) -> T:
        """``call()``, counted as one round trip that lost (a conflict) or did ``counts``."""
        try:
            done = call()
        except ConflictError:
            self.stats.add(calls=1, conflicts=1)
            raise
        self.stats.add(calls=1, **counts)
        return done

    # -- primitives: backends implement these ----------------------------

    def _get(self, key: str) -> Record | None:
        raise NotImplementedError

    def _get_along(self, key: str, keys: Sequence[str]) -> tuple[Record | None, list[bytes | None]] | None:
        return None

    def _get_during(self, key: str, work: Callable[[], T]) -> tuple[Record | None, bool, T | None] | None:
        return None

    def _get_many_during(
        self, keys: Sequence[str], work: Callable[[], T]
    ) -> tuple[list[bytes | None], bool, T | None] | None:
        return None

    def _get_many(self, keys: Sequence[str]) -> list[bytes | None]:
        result = []
        for key in keys:
            record = self._get(key)
            result.append(None if record is None else record.value)
        return result

    def _put(self, key: str, value: bytes, context: Any) -> None:
        raise NotImplementedError

    def _put_many(self, items: Mapping[str, bytes]) -> None:
        for key, value in items.items():
            self._put(key, value, None)

    def _cas(self, key: str, value: bytes, version: Any) -> Any:
        raise NotImplementedError

    def _append(self, key: str, held: bytes, sha: bytes, seen: int, record: bytes, cap: int) -> Record:
        """:func:`mdss._tail.apply` on the value at ``key``, atomically; the new record."""
        raise NotImplementedError

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
        """:func:`mdss._tail.swap` on the value at ``key``, atomically, and ``nodes`` written if its core was put in
        place; the new record."""
        raise NotImplementedError

    def _delete(self, key: str) -> None:
        raise NotImplementedError

    def _delete_if(self, key: str, version: Any) -> None:
        raise NotImplementedError

    def _delete_many(self, keys: Sequence[str]) -> None:
        for key in keys:
            self._delete(key)

    def _keys(self, prefix: str) -> Iterator[str]:
        raise NotImplementedError

    def _close(self) -> None:
        pass

    #: The primitives every backend must implement itself.
    REQUIRED = ("_get", "_put", "_cas", "_delete", "_delete_if", "_keys")
