"""Redis and Redis Cluster stores, through redis-py.

Values are plain Redis strings; a read's version is the value's SHA-1. A compare-and-set is one Lua script
(mdss.stores._redis_scripts) comparing it with ``redis.sha1hex`` of the current value, atomic on the key's node (heads
carry a generation and commit ids: equal bytes are the same state, no ABA). A batch is one MGET / MSET / DEL on a single
server; on a cluster it is split by hash slot and pipelined per node (reads send one MGET per slot to every master
before reading any reply; writes, and anything unusual such as a moved slot, go through redis-py): a set's nodes spread
over every slot (no hash tags) and a batch still costs one round trip.

**The server must not evict keys.** A ``maxmemory-policy`` of ``allkeys-*`` may drop a set's head. At open the store
reads the policy (``CONFIG GET``, on every primary of a cluster) and refuses it with :class:`StoreError`
(``volatile-*`` is fine: under it, or where the policy is not read, mdss gives no key a TTL, so an expired set's nodes
go with its next write or ``gc(sweep=True)`` rather than by themselves); where ``CONFIG`` is not allowed it warns;
``check_policy=false`` skips it.

**Retries.** Connection errors, timeouts and refusals of a command that did not run (MOVED, ASK, TRYAGAIN, redis-py's
"TTL exhausted.", CLUSTERDOWN, MASTERDOWN, READONLY during a failover, LOADING) are retried under one
:class:`mdss._retry.Backoff`: URL options ``retry_budget`` (seconds, default 5), ``backoff`` (the first ceiling),
``retries`` (an optional cap); then :class:`StoreUnavailableError`. redis-py's own retries are off, on a client passed
in too: it would resend a compare-and-set blindly. Other query parameters go to redis-py, checked at open.

**A compare-and-set whose reply was lost** (a timeout, a cut connection) may have run, or may still run (from the
server's input buffer), so the store never reports :class:`ConflictError` after one; it reads the key back: our value is
success (no ABA); the version read means the script is resent (both compare against it, so at most one writes);
anything else, a failed read-back or a budget spent on lost replies, is :class:`OutcomeUnknownError`.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import redis
from redis.backoff import NoBackoff
from redis.cluster import ClusterNode, RedisCluster
from redis.crc import key_slot
from redis.retry import Retry

from .. import _tail
from .._parse import DIGITS, integer, number
from .._retry import STORE_CALLS, Backoff
from ..exceptions import (
    ConflictError,
    InvalidArgumentError,
    OutcomeUnknownError,
    StoreError,
    StoreRefusedError,
    StoreUnavailableError,
)
from ._redis_scripts import CAS, DELETE_IF, EXPIRE_IF, TAIL
from .base import Record, Store, parse_flag

T = TypeVar("T")


#: Query parameters mdss reads from a Redis URL, with their parsers; every other one goes to redis-py.
_OPTIONS: dict[str, Callable[[str], Any]] = {
    "namespace": str,
    "retries": integer,
    "backoff": number,
    "retry_budget": number,
    "check_policy": parse_flag,
}
#: Refusals of a command that did not run, so safe to resend (even a compare-and-set): a slot moving (MOVED, ASK,
#: TRYAGAIN; redis-py's ``ClusterError("TTL exhausted.")`` after 16), a cluster or primary down, a slot no node serves
#: yet, a replica answering a write in a failover (READONLY), a server LOADING.
_REFUSED = (
    redis.exceptions.ClusterError,
    redis.exceptions.TryAgainError,
    redis.exceptions.AskError,
    redis.exceptions.SlotNotCoveredError,
    redis.exceptions.ReadOnlyError,
    redis.exceptions.BusyLoadingError,
)
#: A reply lost (a timeout, a cut connection): the command may have run, or may still run.
_LOST = (redis.ConnectionError, redis.TimeoutError)
#: How redis-py's connection errors begin when the connection could not be made, so nothing was sent ("Error 111
#: connecting to host:port. Connection refused.", "Timeout connecting to server"): a server down is a refusal.
_UNSENT = ("Error ", "Timeout connecting to")
_TRANSIENT = _REFUSED + _LOST
#: What redis-py raises that is not a RedisError ("no way to dispatch this command to Redis Cluster"...).
_CLIENT_FAILED = redis.exceptions.RedisClusterException
#: redis-py's failures to (re)load the cluster's slot map: no node reachable, nodes that disagree, slots not all
#: covered. Transient; they may replace a sent command's connection error, so they count as a lost reply.
_MAP_FAILED = ("cannot be connected", "could not agree on a valid slots cache", "slots are not covered")


def _mapped(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``fn(...)``, with redis-py's failures to load the cluster's slot map raised as a ConnectionError."""
    try:
        return fn(*args, **kwargs)
    except _CLIENT_FAILED as exc:
        if isinstance(exc, _REFUSED) or not any(text in str(exc) for text in _MAP_FAILED):
            raise
        raise redis.ConnectionError(f"the cluster's slot map could not be loaded: {exc}") from exc


#: Policies that evict keys without a TTL: every mdss key.
_EVICTING = ("allkeys-lru", "allkeys-lfu", "allkeys-random")


def _no_retries() -> Retry:
    return Retry(NoBackoff(), 0)


class _InFlight:
    """A thread's client while a read it sent travels (``RedisStore._during``): every command is refused."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):  # what introspection asks (doctest, copy): not a command
            raise AttributeError(name)
        raise StoreError("a command sent while this thread's read was in flight (refused: it would take that reply)")


_IN_FLIGHT = _InFlight()


class _Version:
    """A value's version: the hex SHA-1 the scripts compare (``str()``), computed only when one is sent. Most versions
    are only compared, or never used at all (an append's reply, a reader's head), and hashing a head of up to 13 KB
    cost about 2 us of each. Equal versions are equal values."""

    __slots__ = ("_value", "_hex")

    def __init__(self, value: bytes) -> None:
        self._value, self._hex = value, ""

    def __str__(self) -> str:
        if not self._hex:
            self._hex = hashlib.sha1(self._value).hexdigest()
        return self._hex

    def __eq__(self, other: object) -> bool:
        if isinstance(other, _Version):
            return self._value == other._value
        return isinstance(other, str) and str(self) == other

    def __hash__(self) -> int:
        return hash(str(self))  # as the string it equals

    def __repr__(self) -> str:
        return f"<version {str(self)[:12]}>"


def _sent(version: Any) -> str:
    """A version as a script's argument: a read's (:class:`_Version`), or a string given back."""
    return "" if version is None else str(version)


def _glob_escape(text: str) -> str:
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)


def _split_url(url: str, options: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """The URL without mdss' own query parameters, and those parameters (typed) merged with ``options``."""
    unknown = sorted(set(options) - set(_OPTIONS))
    if unknown:
        raise InvalidArgumentError(f"unknown Redis store option {', '.join(unknown)}: expected {', '.join(_OPTIONS)}")
    parts = urlsplit(url)
    ours, theirs = {}, []
    for name, value in parse_qsl(parts.query):
        if name not in _OPTIONS:
            theirs.append((name, value))
            continue
        try:
            ours[name] = _OPTIONS[name](value)
        except ValueError:
            raise InvalidArgumentError(f"bad value {value!r} for the Redis URL option {name!r}") from None
    return urlunsplit(parts._replace(query=urlencode(theirs))), {**ours, **options}


def _retry_policy(retries: int | None, backoff: float | None, retry_budget: float | None) -> Backoff:
    """The store calls' :class:`Backoff` from the store options, checked (``None``: the default)."""
    if retries is not None and (not isinstance(retries, int) or isinstance(retries, bool) or retries < 0):
        raise InvalidArgumentError(f"retries must be a non-negative integer, got {retries!r}")
    for name, seconds in (("backoff", backoff), ("retry_budget", retry_budget)):
        if seconds is not None and (not isinstance(seconds, (int, float)) or not seconds >= 0):
            raise InvalidArgumentError(f"{name} must be a non-negative number of seconds, got {seconds!r}")
    base = STORE_CALLS.base if backoff is None else backoff
    return Backoff(
        budget=STORE_CALLS.budget if retry_budget is None else retry_budget,
        base=base,
        cap=max(STORE_CALLS.cap, base),
        max_attempts=None if retries is None else retries + 1,
    )


def _check_connection_options(connection_class: Any, options: Mapping[str, Any]) -> None:
    """Refuse what redis-py would refuse only at the first command: an option its connections do not take."""
    try:
        connection_class(**options)  # builds the object only; connecting is lazy
    except (TypeError, ValueError) as exc:
        raise InvalidArgumentError(f"redis-py refused a Redis URL option: {exc}") from None


class _RedisBase(Store):
    """What the single-server and the cluster store share: everything but batching and listing."""

    appends = True
    refuses_unsent = False  # a connection error is a refusal only where it proves nothing was sent (one server)

    def __init__(
        self,
        client: Any,
        *,
        namespace: str = "mdss",
        retries: int | None = None,
        backoff: float | None = None,
        retry_budget: float | None = None,
        check_policy: bool = True,
        where: str = "redis",
    ) -> None:
        try:
            super().__init__(namespace=namespace)
            self.retry = _retry_policy(retries, backoff, retry_budget)
            self.shared, self.where = client, where
            self._looked = threading.local()  # when this thread last looked at its connection before a write
            client.set_retry(_no_retries())  # mdss retries itself, and never resends a compare-and-set blindly
            self._script = client.register_script(CAS)
            self._delete_script = client.register_script(DELETE_IF)
            self._tail_script = client.register_script(TAIL)
            self._expire_script = client.register_script(EXPIRE_IF)
            # Keys with a TTL are the ones a volatile-* policy evicts: a set's nodes get one only where the policy
            # was read as noeviction (else an expired set is dropped by its next write or gc(sweep=True)).
            noeviction = check_policy and self._check_policy()
            self.expires_keys = self.expires_keys and noeviction
        except BaseException:
            client.close()  # its connections, whether we made it or were given it: the store owns it
            raise

    @property
    def client(self) -> Any:
        """The redis-py client a command goes through (:class:`RedisStore`: this thread's own)."""
        return self.shared

    def _call(self, fn: Callable[..., T], *args: Any) -> T:
        """Run one idempotent command, ``fn(*args)``, retrying transient failures under the store's retry policy. ``fn``
        reaches the client when it is called (``lambda: self.client.get(key)``): a thread's first command connects
        within the retries."""
        start, attempts, error = time.monotonic(), 0, None
        for _ in self.retry.attempts():
            attempts += 1
            try:
                return _mapped(fn, *args)
            except redis.AuthenticationError as exc:  # a ConnectionError to redis-py, but no retry will help
                raise StoreError(f"{self.where} refused the credentials: {exc}") from exc
            except _TRANSIENT as exc:
                error = exc
            except (redis.RedisError, _CLIENT_FAILED) as exc:
                raise StoreError(f"{self.where} refused the command: {exc}") from exc
        what = "unavailable (a slot moving or a node down)" if isinstance(error, _REFUSED) else "unreachable"
        raise StoreUnavailableError(
            f"{self.where} {what} after {attempts} attempts in {time.monotonic() - start:.1f} s: {error}"
        ) from error

    def _unsent(self, exc: Exception) -> bool:
        """Whether ``exc`` is one server's refusal of a connection, so that nothing was sent. Not on a cluster, whose
        client may raise a connection error of its own after a sent command lost its reply (reloading the slot map)."""
        text = str(exc)
        return self.refuses_unsent and text.startswith(_UNSENT) and "connecting to" in text

    def _writing(self) -> Any:
        """The client a write goes through, its connection dropped first if the server closed it (a restart, an idle
        timeout): a write sent on it would lose its reply though nothing ran, and leave its outcome in doubt. Looked
        at once a second at most (a look polls the socket: system calls a busy writer need not pay on every write)."""
        client = self.client
        connection: Any = getattr(client, "connection", None)  # a single server's: one held for the thread
        now = time.monotonic()
        if (
            connection is not None
            and getattr(connection, "is_connected", True)  # else the write connects anew: nothing to look at
            and now - getattr(self._looked, "at", -1.0) >= 1.0
        ):
            self._looked.at = now
            try:
                stale = connection.can_read(timeout=0)  # a closed connection reads its end at once; a live one, nothing
            except (redis.ConnectionError, redis.TimeoutError, OSError):
                stale = True
            if stale:
                connection.disconnect()
        return client

    def _get(self, key: str) -> Record | None:
        value = self._call(lambda: self.client.get(key))
        return None if value is None else Record((value,), _Version(value))

    def _put(self, key: str, value: bytes, context: Any) -> None:
        self._call(lambda: self.client.set(key, value))

    def _delete(self, key: str) -> None:
        self._call(lambda: self.client.delete(key))

    def _delete_if(self, key: str, version: Any) -> None:
        # Resending after a lost reply is harmless: the key is gone already, or holds another version either way.
        if not self._call(lambda: self._delete_script(keys=[key], args=[_sent(version)], client=self.client)):
            raise ConflictError(f"key {key!r} changed since it was read")

    def _append(self, key: str, held: bytes, sha: bytes, seen: int, record: bytes, cap: int) -> Record:
        return self._tail(key, held, [sha, seen, record, cap], "append")

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
        args = [sha, seen, record, cap, "1" if lagging else "0", core, *nodes.values()]
        return self._tail(key, held, args, "seal", list(nodes))

    def _tail(self, key: str, held: bytes, args: list[Any], what: str, nodes: Sequence[str] = ()) -> Record:
        """Run the tail script (an append, or a seal with a core and the keys of nodes it writes) on ``key``: the value
        it left there."""
        # Resending after a lost reply is safe (the script finds an appended record's nonce; a seal that landed changed
        # the core, so its resend is refused), but a refusal then may hide one that landed: OutcomeUnknown.
        lost: Exception | None = None
        refusal: Exception | None = None
        for _ in self.retry.attempts():
            try:
                got = _mapped(self._tail_script, keys=[key, *nodes], args=args, client=self._writing())
            except redis.AuthenticationError as exc:
                raise self._credentials(exc, lost, f"{what} to {key!r}") from exc
            except _REFUSED as exc:  # did not run: resend
                refusal = exc
                continue
            except _LOST as exc:
                if self._unsent(exc):  # no connection, nothing sent
                    refusal = exc
                else:
                    lost = lost or exc
                continue
            except (redis.RedisError, _CLIENT_FAILED) as exc:
                if lost is not None:
                    raise OutcomeUnknownError(
                        f"{self.where}: {what} to {key!r} lost its reply ({lost}), then: {exc}"
                    ) from exc
                raise StoreError(f"{self.where} refused the {what}: {exc}") from exc
            if got[0] in (1, 3):
                value = got[1] if got[0] == 3 else (held if _tail.marked(held) else _tail.tailed(held)) + got[1]
                return Record((value,), _Version(value))
            refused = _tail.Refused(f"key {key!r} changed since it was read", full=got[0] == 2)
            refused.current = Record((got[1],), _Version(got[1])) if len(got) > 1 else None
            if lost is not None:
                raise OutcomeUnknownError(
                    f"{self.where}: {what} to {key!r} lost its reply ({lost}), and the head moved on since"
                ) from refused
            raise refused
        if lost is None:
            raise StoreRefusedError(
                f"{self.where} unavailable within its retry budget: {what} to {key!r} refused: {refusal}"
            ) from refusal
        raise OutcomeUnknownError(
            f"{self.where} unreachable within its retry budget: {what} to {key!r} got no reply: {lost}"
        ) from lost

    def _cas(self, key: str, value: bytes, version: Any) -> Any:
        lost: Exception | None = None  # the first lost reply: from then on, never a ConflictError
        refusal: Exception | None = None
        for _ in self.retry.attempts():
            try:
                won = _mapped(self._script, keys=[key], args=[value, _sent(version)], client=self._writing())
            except redis.AuthenticationError as exc:
                raise self._credentials(exc, lost, f"compare-and-set of {key!r}") from exc
            except _REFUSED as exc:  # did not run: resend (after a lost reply, the outcome still decides)
                refusal = exc
                continue
            except _LOST as exc:
                if self._unsent(exc):  # no connection, nothing sent
                    refusal = exc
                    continue
                lost = lost or exc
            except (redis.RedisError, _CLIENT_FAILED) as exc:
                if lost is not None:
                    raise OutcomeUnknownError(
                        f"{self.where}: compare-and-set of {key!r} lost its reply ({lost}), then: {exc}"
                    ) from exc
                raise StoreError(f"{self.where} refused the compare-and-set: {exc}") from exc
            else:
                if won == 1:
                    return _Version(value)
                if lost is None:
                    current = won[1] if isinstance(won, list) and len(won) > 1 else None
                    raise ConflictError(
                        f"key {key!r} changed since it was read",
                        current=None if current is None else Record((current,), _Version(current)),
                        current_known=True,
                    )
                if self._read_back(key, lost) == value:  # the lost request ran before the resend
                    return _Version(value)
                raise OutcomeUnknownError(
                    f"{self.where}: compare-and-set of {key!r} lost its reply ({lost}) and the key changed since"
                ) from lost
            current = self._read_back(key, lost)
            if current == value:
                return _Version(value)
            unchanged = current is None if version is None else current is not None and _Version(current) == version
            if not unchanged:
                raise OutcomeUnknownError(
                    f"{self.where}: compare-and-set of {key!r} lost its reply ({lost}) and the key changed since:"
                    " it may hold this write with another on top, or another write instead"
                ) from lost
            # Still the version read: the request has not run (it may yet), so resending is safe.
        if lost is None:
            raise StoreRefusedError(
                f"{self.where} unavailable within its retry budget: compare-and-set of {key!r} refused: {refusal}"
            ) from refusal
        raise OutcomeUnknownError(
            f"{self.where}: compare-and-set of {key!r} got no reply within its retry budget: {lost}"
        ) from lost

    def _credentials(self, exc: Exception, lost: Exception | None, what: str) -> StoreError:
        """The error for credentials refused mid-write: after a lost reply, the lost request may have run."""
        if lost is None:
            return StoreError(f"{self.where} refused the credentials: {exc}")
        return OutcomeUnknownError(
            f"{self.where}: {what} lost its reply ({lost}), then the server refused the credentials: {exc}"
        )

    def _read_back(self, key: str, lost: Exception) -> bytes | None:
        """The key's value after a lost reply; OutcomeUnknownError when it cannot be read either."""
        try:
            return self._call(lambda: self.client.get(key))
        except StoreError as exc:
            raise OutcomeUnknownError(
                f"{self.where}: compare-and-set of {key!r} lost its reply ({lost}) and the key cannot be read: {exc}"
            ) from exc

    def _check_policy(self) -> bool:
        """Refuse a server that evicts keys; warn when it will not say (CONFIG refused). Whether every policy read is
        ``noeviction`` (a ``volatile-*`` one evicts keys with a TTL: no node may have one)."""
        refused, evicting, found = [], [], []
        for where, target in self._policy_targets():
            policy = self._call(lambda target: _read_policy(self.client, target), target)
            if isinstance(policy, Exception):
                refused.append(f"{where}: {policy}")
            elif policy in _EVICTING:
                evicting.append(f"{where} has maxmemory-policy {policy}")
            found.append(policy)
        if evicting:
            raise StoreError(
                f"{'; '.join(evicting)}: it evicts keys under memory pressure, and a set whose head or nodes are"
                " evicted is lost. Set maxmemory-policy to noeviction (CONFIG SET and redis.conf), or a volatile-*"
                " policy (mdss then gives no key a TTL). check_policy=false skips this check."
            )
        if refused:
            warnings.warn(
                f"could not read maxmemory-policy ({'; '.join(refused)}): mdss needs a Redis that never evicts"
                " its keys; make sure the policy is noeviction",
                stacklevel=4,  # the caller of RedisStore(...)
            )
        return all(policy == "noeviction" for policy in found)

    def _policy_targets(self) -> list[tuple[str, dict[str, Any]]]:
        """Where to read the eviction policy: (name, keyword arguments of ``config_get``)."""
        return [(self.where, {})]

    def _close(self) -> None:
        self.shared.close()


def _read_policy(client: Any, target: Mapping[str, Any]) -> str | Exception:
    """One server's ``maxmemory-policy``, or the error with which it refused ``CONFIG GET``."""
    try:
        reply = client.config_get("maxmemory-policy", **target)
    except redis.ResponseError as exc:  # CONFIG renamed away, or not allowed by an ACL
        return exc
    policy = next(iter(reply.values()), None) if isinstance(reply, dict) else None
    if policy is None:
        return StoreError(f"CONFIG GET maxmemory-policy answered {reply!r}")
    return policy.decode() if isinstance(policy, bytes) else str(policy)


class RedisStore(_RedisBase):
    """One Redis server. ``RedisStore(client=redis.Redis(...))`` or ``open_store("redis://host:6379/0")``. The store
    owns the client: it switches off the client's own retries and closes it."""

    seals_nodes = True  # one server: the tail script writes a seal's nodes (a cluster holds them in other slots)
    refuses_unsent = True  # a connection refused: nothing sent (:meth:`_unsent`)
    reads_along = True  # one MGET: every key on the one server
    overlaps_reads = True  # a thread's own connection: its GET sent, work done, its reply read

    def __init__(self, client: redis.Redis | None = None, *, url: str | None = None, **options: Any) -> None:
        if client is None:
            try:
                client = redis.Redis.from_url(
                    url or "redis://127.0.0.1:6379/0", socket_timeout=5, socket_connect_timeout=5, retry=_no_retries()
                )
            except ValueError as exc:  # a badly typed option: "Invalid value for 'socket_timeout' ..."
                raise InvalidArgumentError(f"bad Redis URL: {exc}") from None
            pool = client.connection_pool
            _check_connection_options(pool.connection_class, pool.connection_kwargs)
        kwargs = client.connection_pool.connection_kwargs
        where = f"Redis at {kwargs.get('host', kwargs.get('path', '?'))}:{kwargs.get('port', '')}"
        self._threads = threading.local()  # each thread's own client: (process id, client)
        super().__init__(client, where=where, **options)

    @property
    def client(self) -> Any:
        """This thread's own client, made on its first command in this process: a connection of the shared pool held
        for the thread (redis-py's ``single_connection_client``), so that a command skips taking a connection from the
        pool and giving it back, about 12 µs a command here (docs/performance.md). A thread's client goes back to the
        pool when the thread ends; after a fork, the child's threads take connections of their own."""
        held = getattr(self._threads, "client", None)
        pid = os.getpid()
        if held is None or held[0] != pid:
            held = (pid, redis.Redis(connection_pool=self.shared.connection_pool, single_connection_client=True))
            self._threads.client = held
        return held[1]

    @classmethod
    def from_url(cls, url: str, **options: Any) -> RedisStore:
        """``redis://[user:password@]host:port/db`` or ``rediss://...``. mdss' own options: ``namespace``,
        ``retry_budget``, ``backoff``, ``retries``, ``check_policy``. The other query parameters go to redis-py."""
        plain, ours = _split_url(url, options)
        return cls(url=plain, **ours)

    def _get_many(self, keys: Sequence[str]) -> list[bytes | None]:
        return self._call(lambda: self.client.mget(keys))

    def _get_along(self, key: str, keys: Sequence[str]) -> tuple[Record | None, list[bytes | None]]:
        # One MGET: a Redis version is its value's hash, so the head's record comes with it (Redis Cluster: the keys
        # of one set may sit on several nodes, so it reads them apart).
        value, *values = self._call(lambda: self.client.mget([key, *keys]))
        return (None if value is None else Record((value,), _Version(value))), values

    def _get_during(self, key: str, work: Callable[[], T]) -> tuple[Record | None, bool, T | None] | None:
        found = self._during(("GET", key), work, lambda: self._get(key))  # the reply's bytes, or again()'s record
        if found is None:
            return None
        value, ran, result = found
        record = value if value is None or isinstance(value, Record) else Record((value,), _Version(value))
        return record, ran, result

    def _get_many_during(
        self, keys: Sequence[str], work: Callable[[], T]
    ) -> tuple[list[bytes | None], bool, T | None] | None:
        return self._during(("MGET", *keys), work, lambda: self._get_many(keys))

    def _during(self, command: tuple[str, ...], work: Callable[[], T], again: Callable[[], Any]) -> Any:
        """``command`` (a read) sent on this thread's connection, ``work`` run, then the reply read: ``(reply, whether
        work ran, what it returned)``, or ``None`` with no connection of the thread's own. Meanwhile the thread's client
        is a stand-in that refuses every command: one sent now would take this reply. Anything failing on the
        connection closes it (no reply left half read) and ``again()`` reads through the retries (a read: safe)."""
        held = self.client
        conn = held.connection
        if conn is None:
            return None
        ran, result = False, None
        try:
            conn.send_command(*command)
        except Exception:
            conn.disconnect()
            return again(), False, None
        self._threads.client = (os.getpid(), _IN_FLIGHT)
        try:
            result, ran = work(), True
        except Exception:  # a guess that failed: the caller answers without it
            pass
        except BaseException:
            conn.disconnect()
            raise
        finally:
            self._threads.client = (os.getpid(), held)
        try:
            value = held.parse_response(conn, command[0])
        except Exception:  # the connection failed (or its reply is unusable): the read again, through the retries
            conn.disconnect()
            return again(), ran, result
        except BaseException:
            conn.disconnect()
            raise
        return value, ran, result

    def _put_many(self, items: Mapping[str, bytes]) -> None:
        self._call(lambda: self.client.mset(items))

    def _delete_many(self, keys: Sequence[str]) -> None:
        self._call(lambda: self.client.delete(*keys))

    def _keys(self, prefix: str) -> Iterator[str]:
        found = self._call(lambda: list(self.client.scan_iter(match=_glob_escape(prefix) + "*", count=1000)))
        return (key.decode() if isinstance(key, bytes) else key for key in found)

    # One server runs a script over any of its keys, so a set's nodes can expire on condition of its head (on a cluster
    # they spread over every slot: no script reaches them all, and RedisClusterStore keeps the base's no-op). Only
    # under a noeviction policy: see __init__.
    expires_keys = True

    def expire_keys(self, keys: Sequence[str], at_ms: int, head: str, version: Any, *, gen: int) -> bool:
        # Idempotent (the same expiry again), so resent after a lost reply like a read. ``gen`` is not needed: the
        # script checks the head's version itself.
        done = self._call(
            lambda: self._expire_script(keys=[head, *keys], args=[_sent(version), at_ms], client=self.client)
        )
        self.stats.add(calls=1)
        return bool(done)

    def persist_keys(self, keys: Sequence[str], *, gen: int) -> None:
        def persist() -> None:
            pipe = self.client.pipeline(transaction=False)
            for key in keys:
                pipe.persist(key)
            pipe.execute()

        self._call(persist)
        self.stats.add(calls=1)


class RedisClusterStore(_RedisBase):
    """A Redis Cluster. ``open_store("redis+cluster://host:7000,host2:7001")`` (any reachable seeds). The store owns the
    client: it switches off the client's own retries and closes it."""

    def __init__(
        self,
        client: RedisCluster | None = None,
        *,
        nodes: Sequence[tuple[str, int]] = (),
        connection: Mapping[str, Any] | None = None,
        **options: Any,
    ) -> None:
        if client is None:
            if not nodes:
                raise InvalidArgumentError("a Redis Cluster store needs a client or seed nodes")
            connection = {"socket_timeout": 5, "socket_connect_timeout": 5, **(connection or {})}
            _check_connection_options(redis.Connection, connection)
            client = RedisCluster(
                startup_nodes=[ClusterNode(h, p) for h, p in nodes], retry=_no_retries(), **connection
            )
        seeds = ",".join(f"{n.host}:{n.port}" for n in client.get_primaries())
        super().__init__(client, where=f"Redis Cluster at {seeds}", **options)

    @classmethod
    def from_url(cls, url: str, **options: Any) -> RedisClusterStore:
        """``redis+cluster://[user:password@]host:port[,host:port...]``, and the options of :class:`RedisStore`."""
        plain, ours = _split_url(url, options)
        parts = urlsplit(plain)
        userinfo, _, netloc = parts.netloc.rpartition("@")
        nodes = []
        for seed in filter(None, netloc.split(",")):
            host, _, port = seed.rpartition(":")
            if not host or not DIGITS.fullmatch(port):
                raise InvalidArgumentError(f"bad Redis Cluster seed {seed!r} in {netloc!r}: expected host:port")
            nodes.append((host.strip("[]"), int(port)))
        try:  # redis-py types the query parameters and the credentials as for one server
            connection = redis.connection.parse_url(f"redis://{userinfo}{'@' if userinfo else ''}x/?{parts.query}")
        except ValueError as exc:
            raise InvalidArgumentError(f"bad Redis Cluster URL: {exc}") from None
        connection.pop("host", None)
        if connection.pop("db", 0) != 0:
            raise InvalidArgumentError("a Redis Cluster has only database 0")
        try:
            return cls(nodes=nodes, connection=connection, **ours)
        except _TRANSIENT + (_CLIENT_FAILED,) as exc:
            raise StoreUnavailableError(f"no Redis Cluster reachable at {netloc}: {exc}") from exc

    def _get_many(self, keys: Sequence[str]) -> list[bytes | None]:
        try:
            return self._mget_by_node(keys)
        except (redis.RedisError, redis.exceptions.RedisClusterException, OSError):  # a moved slot, a failover,
            # a lost connection: redis-py's own way (its retries, redirections and refreshed slot map)
            return self._call(lambda: self.client.mget_nonatomic(keys))

    def _mget_by_node(self, keys: Sequence[str]) -> list[bytes | None]:
        """One MGET per slot, each master's slots pipelined on one of its connections, sent to every master before any
        reply is read: one round trip, as ``mget_nonatomic``, at about half its CPU (a sharded set reads its S heads for
        every read). Raises on anything unusual (a MOVED reply, a node without a client): the caller then goes
        redis-py's way, which follows redirections."""
        groups: dict[str, tuple[Any, dict[int, list[int]]]] = {}
        node_of = self.client.get_node_from_key
        for n, key in enumerate(keys):
            node = node_of(key)
            group = groups.get(node.name)
            if group is None:
                group = groups[node.name] = (node, {})
            group[1].setdefault(key_slot(key.encode("utf-8")), []).append(n)
        found: list[bytes | None] = [None] * len(keys)
        sent: list[tuple[Any, Any, dict[int, list[int]]]] = []
        done = False
        try:
            for node, slots in groups.values():
                if node.redis_connection is None:
                    raise redis.ConnectionError(f"no connection to cluster node {node.name}")
                pool = node.redis_connection.connection_pool
                connection = pool.get_connection()
                sent.append((pool, connection, slots))
                commands = [("MGET", *[keys[n] for n in indices]) for indices in slots.values()]
                connection.send_packed_command(connection.pack_commands(commands))
            for _, connection, slots in sent:
                for indices in slots.values():
                    for n, value in zip(indices, connection.read_response()):
                        found[n] = value
            done = True
        finally:
            for pool, connection, _ in sent:
                if not done:  # replies may be left unread: the connection's stream is out of step
                    connection.disconnect()
                pool.release(connection)
        return found

    def _put_many(self, items: Mapping[str, bytes]) -> None:
        self._call(lambda: self.client.mset_nonatomic(items))

    def _delete_many(self, keys: Sequence[str]) -> None:
        self._call(lambda: self.client.delete(*keys))

    def _keys(self, prefix: str) -> Iterator[str]:
        match = _glob_escape(prefix) + "*"
        found: list[Any] = []
        for node in self.client.get_primaries():
            found.extend(
                self._call(lambda n: list(self.client.scan_iter(match=match, count=1000, target_nodes=n)), node)
            )
        return (key.decode() if isinstance(key, bytes) else key for key in found)

    def _policy_targets(self) -> list[tuple[str, dict[str, Any]]]:
        return [(f"Redis Cluster node {node.name}", {"target_nodes": node}) for node in self.client.get_primaries()]
