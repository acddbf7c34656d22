"""Redis and Redis Cluster stores, through redis-py.

Values are plain Redis strings. The version of a read is the SHA-1 of the
value; a compare-and-set is one Lua script that compares it with
``redis.sha1hex`` of the current value and sets the key, atomically on the
key's node (heads carry a generation number and commit ids, so equal bytes
mean the same state: no ABA). Batches are one MGET / MSET / DEL on a single
server; on a cluster redis-py splits them by hash slot and pipelines them per
node, so a set's nodes spread over every slot of the cluster (mdss' keys have
no hash tags) and a batch still costs one round trip per node.

Connection errors and timeouts are retried with jittered exponential backoff
a bounded number of times, then raise :class:`StoreUnavailableError`. A
compare-and-set whose reply was lost is never blindly resent: the store reads
the key back, reports success if it holds exactly what was written, resends
only if it still holds the version read, and reports a conflict otherwise.
"""

from __future__ import annotations

import hashlib
import random
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import redis
from redis.cluster import ClusterNode, RedisCluster

from ..exceptions import ConflictError, InvalidArgumentError, StoreError, StoreUnavailableError
from .base import Record, Store

T = TypeVar("T")

# KEYS[1]: the key; ARGV[1]: the new value; ARGV[2]: SHA-1 of the value read, or "" for "only if absent".
_CAS = """
local current = redis.call('GET', KEYS[1])
if ARGV[2] == '' then
    if current then return 0 end
elseif (not current) or redis.sha1hex(current) ~= ARGV[2] then
    return 0
end
redis.call('SET', KEYS[1], ARGV[1])
return 1
"""

#: Query parameters mdss reads from a Redis URL; every other one goes to redis-py.
_OPTIONS = {"namespace": str, "retries": int, "backoff": float}
_TRANSIENT = (
    redis.ConnectionError,
    redis.TimeoutError,
    redis.exceptions.ClusterDownError,
    redis.exceptions.TryAgainError,
)


def _version(value: bytes) -> str:
    return hashlib.sha1(value).hexdigest()


def _glob_escape(text: str) -> str:
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)


def _split_url(url: str) -> tuple[str, dict[str, Any]]:
    """The URL without mdss' own query parameters, and those parameters (typed)."""
    parts = urlsplit(url)
    ours, theirs = {}, []
    for name, value in parse_qsl(parts.query):
        if name in _OPTIONS:
            ours[name] = _OPTIONS[name](value)
        else:
            theirs.append((name, value))
    return urlunsplit(parts._replace(query=urlencode(theirs))), ours


class _RedisBase(Store):
    """What the single-server and the cluster store share: everything but batching and listing."""

    def __init__(
        self, client: Any, *, namespace: str = "mdss", retries: int = 4, backoff: float = 0.05, where: str = "redis"
    ) -> None:
        super().__init__(namespace=namespace)
        if retries < 0 or backoff < 0:
            raise InvalidArgumentError("retries and backoff must not be negative")
        self.client, self.retries, self.backoff, self.where = client, retries, backoff, where
        self._script = client.register_script(_CAS)

    def _call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run one idempotent command, retrying transient failures with jittered backoff."""
        for attempt in range(self.retries + 1):
            try:
                return fn(*args, **kwargs)
            except _TRANSIENT as exc:
                if attempt == self.retries:
                    raise StoreUnavailableError(
                        f"{self.where} unreachable after {self.retries + 1} attempts: {exc}"
                    ) from exc
                time.sleep(random.uniform(0, self.backoff * 2**attempt))
            except redis.RedisError as exc:
                raise StoreError(f"{self.where} refused the command: {exc}") from exc
        raise AssertionError("unreachable")

    def _get(self, key: str) -> Record | None:
        value = self._call(self.client.get, key)
        return None if value is None else Record((value,), _version(value))

    def _put(self, key: str, value: bytes, context: Any) -> None:
        self._call(self.client.set, key, value)

    def _delete(self, key: str) -> None:
        self._call(self.client.delete, key)

    def _cas(self, key: str, value: bytes, version: Any) -> None:
        for attempt in range(self.retries + 1):
            try:
                won = self._script(keys=[key], args=[value, version or ""])
            except _TRANSIENT as exc:
                # The reply is lost: the script may or may not have run. Look before acting again.
                current = self._call(self.client.get, key)
                if current == value:
                    return
                unchanged = current is None if version is None else current is not None and _version(current) == version
                if not unchanged:
                    raise ConflictError(f"key {key!r} changed since it was read") from exc
                if attempt == self.retries:
                    raise StoreUnavailableError(f"{self.where}: compare-and-set of {key!r} failed: {exc}") from exc
                time.sleep(random.uniform(0, self.backoff * 2**attempt))
                continue
            except redis.RedisError as exc:
                raise StoreError(f"{self.where} refused the compare-and-set: {exc}") from exc
            if not won:
                raise ConflictError(f"key {key!r} changed since it was read")
            return

    def _close(self) -> None:
        self.client.close()


class RedisStore(_RedisBase):
    """One Redis server. ``RedisStore(client=redis.Redis(...))`` or ``open_store("redis://host:6379/0")``."""

    def __init__(self, client: redis.Redis | None = None, *, url: str | None = None, **options: Any) -> None:
        if client is None:
            client = redis.Redis.from_url(url or "redis://127.0.0.1:6379/0", socket_timeout=5, socket_connect_timeout=5)
        kwargs = client.connection_pool.connection_kwargs
        where = f"Redis at {kwargs.get('host', kwargs.get('path', '?'))}:{kwargs.get('port', '')}"
        super().__init__(client, where=where, **options)

    @classmethod
    def from_url(cls, url: str, **options: Any) -> RedisStore:
        """``redis://[user:password@]host:port/db`` or ``rediss://...``; plus ``namespace``, ``retries``, ``backoff``.

        The other query parameters go to redis-py.
        """
        plain, ours = _split_url(url)
        return cls(url=plain, **{**ours, **options})

    def _get_many(self, keys: Sequence[str]) -> list[bytes | None]:
        return self._call(self.client.mget, keys)

    def _put_many(self, items: Mapping[str, bytes]) -> None:
        self._call(self.client.mset, items)

    def _delete_many(self, keys: Sequence[str]) -> None:
        self._call(self.client.delete, *keys)

    def _keys(self, prefix: str) -> Iterator[str]:
        found = self._call(lambda: list(self.client.scan_iter(match=_glob_escape(prefix) + "*", count=1000)))
        return (key.decode() if isinstance(key, bytes) else key for key in found)


class RedisClusterStore(_RedisBase):
    """A Redis Cluster. ``open_store("redis+cluster://host:7000,host2:7001")`` (any reachable seeds)."""

    def __init__(
        self, client: RedisCluster | None = None, *, nodes: Sequence[tuple[str, int]] = (), **options: Any
    ) -> None:
        if client is None:
            if not nodes:
                raise InvalidArgumentError("a Redis Cluster store needs a client or seed nodes")
            client = RedisCluster(
                startup_nodes=[ClusterNode(h, p) for h, p in nodes], socket_timeout=5, socket_connect_timeout=5
            )
        seeds = ",".join(f"{n.host}:{n.port}" for n in client.get_primaries())
        super().__init__(client, where=f"Redis Cluster at {seeds}", **options)

    @classmethod
    def from_url(cls, url: str, **options: Any) -> RedisClusterStore:
        """``redis+cluster://host:port[,host:port...]``, plus ``namespace``, ``retries``, ``backoff``."""
        plain, ours = _split_url(url)
        netloc = urlsplit(plain).netloc.rsplit("@", 1)[-1]
        nodes = []
        for seed in filter(None, netloc.split(",")):
            host, _, port = seed.rpartition(":")
            if not host or not port.isdigit():
                raise InvalidArgumentError(f"bad Redis Cluster seed {seed!r} in {url!r}: expected host:port")
            nodes.append((host.strip("[]"), int(port)))
        try:
            return cls(nodes=nodes, **{**ours, **options})
        except _TRANSIENT + (redis.exceptions.RedisClusterException,) as exc:
            raise StoreUnavailableError(f"no Redis Cluster reachable at {netloc}: {exc}") from exc

    def _get_many(self, keys: Sequence[str]) -> list[bytes | None]:
        return self._call(self.client.mget_nonatomic, keys)

    def _put_many(self, items: Mapping[str, bytes]) -> None:
        self._call(self.client.mset_nonatomic, items)

    def _delete_many(self, keys: Sequence[str]) -> None:
        self._call(self.client.delete, *keys)

    def _keys(self, prefix: str) -> Iterator[str]:
        match = _glob_escape(prefix) + "*"
        found: list[Any] = []
        for node in self.client.get_primaries():
            found.extend(
                self._call(lambda n=node: list(self.client.scan_iter(match=match, count=1000, target_nodes=n)))
            )
        return (key.decode() if isinstance(key, bytes) else key for key in found)
