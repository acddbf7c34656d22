"""Riak KV over its HTTP API, through urllib3's connection pool.

Three bucket types, chosen by what a key holds (:func:`mdss._keys.kind`):

- immutable tree nodes go to ``nodes_type``, a plain type (``allow_mult`` false), written once under a fresh id and
  read with ``r=1&notfound_ok=false``: any replica's copy is the copy (its checksum verified), and a replica that has
  not received it yet must not decide that it is missing;
- top-N objects go to ``sibling_type`` (``allow_mult`` true): concurrent writers become siblings a read merges;
- heads go to ``heads_type``, which must be strongly consistent (``consistent: true``, checked at open): there
  ``If-None-Match: *`` and a write with the vclock read are true compare-and-sets, answered 412 on conflict. Heads are
  read with the configured quorum.

Every request carries Riak's ``timeout=`` (milliseconds), the socket waiting a second longer: never Riak's 60 s default.

``get_many`` sends its GETs concurrently over the pool (Riak has no multi-get). A tombstone (a 404 with
``X-Riak-Deleted``) reads as absent at once; a plain 404 of a node is re-read ``notfound_retries`` times first. A head's
404 is final (its ensemble leader answered; a deleted head answers a plain 404 too), so a ``get_many`` of many shards'
heads, some never written, costs one GET each.

``keys(prefix)`` pages through the ``$key`` secondary index by key range, in each bucket type the prefix can hold, so
listing one set reads its keys only; a type without secondary indexes (bitcask) falls back, with a warning, to a full
listing. **Listings include tombstones** (until reaped, 3 s by default): callers verify listed keys with ``get_many``
before they report or delete them.

Outcomes of a compare-and-set, a 412 after a lost reply included: :meth:`RiakStore.put_if`.
"""

from __future__ import annotations

import contextlib
import heapq
import json
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode, urlsplit

import attrs
import urllib3

from .._keys import HEAD, NODE, TOPN, kind
from .._parse import DIGITS, integer, number
from .._retry import COMMITS, STORE_CALLS, Backoff
from ..exceptions import (
    ConflictError,
    InvalidArgumentError,
    OutcomeUnknownError,
    StoreError,
    StoreRefusedError,
    StoreUnavailableError,
)
from .base import Record, Store

_CREATE = "riak-admin bucket-type create {name} '{props}' && riak-admin bucket-type activate {name}"
_WANTED = {
    "heads": ("consistent", True, '{"props":{"consistent":true}}'),
    "sibling": ("allow_mult", True, '{"props":{"allow_mult":true}}'),
}
_RETRY_STATUS = (500, 502, 503, 504)
#: What Riak answers (a 500) to a secondary-index query on a backend without indexes (bitcask).
_NO_INDEXES = b"indexes_not_supported"
#: The highest code point: ``prefix + _TOP`` is the end of the key range of ``prefix``.
_TOP = "\U0010ffff"
_ROLE = {HEAD: "heads", NODE: "nodes", TOPN: "sibling"}
_QUORUMS = ("r", "pr", "w", "dw", "pw", "rw")
_NAMED_QUORUMS = ("one", "quorum", "all", "default")


def _flag(text: str) -> bool:
    if text.lower() not in ("1", "true", "yes", "0", "false", "no"):
        raise ValueError(text)
    return text.lower() in ("1", "true", "yes")


#: URL options and how their text becomes a value (``__init__`` then checks ranges).
_URL_OPTIONS: dict[str, Callable[[str], Any]] = {
    **dict.fromkeys(("namespace", "bucket", "heads_type", "nodes_type", "sibling_type"), str),
    **dict.fromkeys(("timeout", "retry_budget", "backoff"), number),
    **dict.fromkeys(("retries", "notfound_retries", "concurrency", "page_size"), integer),
    "check_types": _flag,
}


def _quorum(name: str, value: str) -> str:
    if value in _NAMED_QUORUMS or (DIGITS.fullmatch(value) and int(value) > 0):
        return value
    raise InvalidArgumentError(f"Riak option {name} must be a positive integer or one of {_NAMED_QUORUMS}: {value!r}")


def _number(name: str, value: object, kind: type, minimum: float) -> Any:
    """``value`` if it is a ``kind`` (an int passes for a float) of at least ``minimum``; else a clear error."""
    ok = isinstance(value, (int, float) if kind is float else int) and not isinstance(value, bool)
    if not ok or not value >= minimum:  # type: ignore[operator]
        raise InvalidArgumentError(f"Riak option {name} must be a {kind.__name__} >= {minimum}, got {value!r}")
    return value


def key_range(prefix: str) -> tuple[str, str]:
    """The inclusive ``$key`` range holding exactly the keys that start with ``prefix``.

    >>> key_range("app:board:n:")
    ('app:board:n:', 'app:board:n:\\U0010ffff')
    """
    return prefix or "\x00", prefix + _TOP


class Response:
    """What the HTTP layer needs of a reply: status, headers (lower-case names), body."""

    def __init__(self, status: int, headers: Mapping[str, str], body: bytes) -> None:
        self.status, self.body = status, body
        self.headers = {k.lower(): v for k, v in headers.items()}

    @property
    def transient(self) -> bool:
        """A 5xx worth another attempt (not the definite "this backend has no indexes")."""
        return self.status in _RETRY_STATUS and _NO_INDEXES not in self.body


def parse_multipart(content_type: str, body: bytes) -> list[bytes]:
    """The values of a ``multipart/mixed`` sibling listing, byte for byte, tombstones left out.

    Parts carry no length: a part ends where ``CRLF--boundary`` begins, so values may themselves hold CRLF, ``--``
    or any byte.

    >>> parse_multipart("multipart/mixed; boundary=B", b"\\r\\n--B\\r\\nEtag: 1\\r\\n\\r\\nv\\r\\n--B--\\r\\n")
    [b'v']
    """
    params = dict(p.strip().split("=", 1) for p in content_type.split(";")[1:] if "=" in p)
    boundary = params.get("boundary", "").strip('"').encode()
    if not boundary:
        raise StoreError(f"Riak sent multipart/mixed without a boundary: {content_type!r}")
    values = []
    for part in (b"\r\n" + body).split(b"\r\n--" + boundary)[1:]:
        if part.startswith(b"--"):  # the closing delimiter
            break
        head, _, value = part[2:].partition(b"\r\n\r\n")
        if b"x-riak-deleted: true" not in head.lower():
            values.append(value)
    return values


class RiakStore(Store):
    """A Riak KV cluster through one node's HTTP interface. ``timeout`` (seconds) goes to Riak with every request;
    connection failures and 5xx answers are retried for ``retry_budget`` seconds (first backoff ceiling ``backoff``; at
    most ``retries`` times, if given). ``pool``: any object with urllib3's ``request(method, url, headers=, body=,
    redirect=)``."""

    keeps_siblings = True

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 8098,
        *,
        namespace: str = "mdss",
        bucket: str = "mdss",
        heads_type: str = "mdss_strong",
        nodes_type: str = "mdss_nodes",
        sibling_type: str = "mdss_sibs",
        quorum: Mapping[str, str] | None = None,
        timeout: float = 10.0,
        retry_budget: float = STORE_CALLS.budget,
        retries: int | None = None,
        backoff: float = STORE_CALLS.base,
        notfound_retries: int = 2,
        concurrency: int = 16,
        page_size: int = 1000,
        check_types: bool = True,
        scheme: str = "http",
        pool: Any = None,
    ) -> None:
        super().__init__(namespace=namespace)
        names = {"bucket": bucket, "heads_type": heads_type, "nodes_type": nodes_type, "sibling_type": sibling_type}
        for name, text in names.items():
            if not isinstance(text, str) or not text:
                raise InvalidArgumentError(f"Riak option {name} must be a non-empty string, got {text!r}")
        self.where = f"Riak at {scheme}://{host}:{port}"
        self.bucket, self.types = bucket, {"heads": heads_type, "nodes": nodes_type, "sibling": sibling_type}
        self.quorum = {name: _quorum(name, str(value)) for name, value in (quorum or {}).items()}
        self.timeout = _number("timeout", timeout, float, 0.001)
        self.retry = Backoff(
            budget=_number("retry_budget", retry_budget, float, 0),
            base=_number("backoff", backoff, float, 0),
            cap=STORE_CALLS.cap,
            max_attempts=None if retries is None else _number("retries", retries, int, 0) + 1,
        )
        #: Re-reads of a node that answered a plain 404 (not a tombstone).
        self.notfound = attrs.evolve(self.retry, max_attempts=_number("notfound_retries", notfound_retries, int, 0) + 1)
        self.page_size = _number("page_size", page_size, int, 1)
        concurrency = _number("concurrency", concurrency, int, 1)
        self.pool = pool or urllib3.connection_from_url(
            f"{scheme}://{host}:{port}",
            maxsize=concurrency,
            block=True,
            timeout=urllib3.Timeout(connect=self.timeout, read=self.timeout + 1.0),
            retries=False,
        )
        self._executor = ThreadPoolExecutor(concurrency, thread_name_prefix="mdss-riak")
        self._unindexed: set[str] = set()  # bucket types found without a $key index
        if check_types:
            self.check_types()

    @classmethod
    def from_url(cls, url: str, **options: Any) -> RiakStore:
        """``riak://host:8098?heads_type=T1&nodes_type=T2&sibling_type=T3&r=quorum&w=quorum&timeout=5``. An unknown or
        badly typed option raises :class:`InvalidArgumentError` naming it."""
        parts = urlsplit(url)
        try:
            port = parts.port or 8098
        except ValueError as exc:
            raise InvalidArgumentError(f"bad port in Riak URL {url!r}") from exc
        given = dict(parse_qsl(parts.query, keep_blank_values=True))  # "?bucket=" is an error, not a default
        for name in [*given, *options]:
            if name not in _URL_OPTIONS and name not in _QUORUMS and name != "pool":
                known = ", ".join(sorted([*_URL_OPTIONS, *_QUORUMS]))
                raise InvalidArgumentError(f"unknown Riak store option {name!r} (known: {known})")
        params: dict[str, Any] = {}
        for name, text in given.items():
            try:
                params[name] = text if name in _QUORUMS else _URL_OPTIONS[name](text)
            except ValueError as exc:
                raise InvalidArgumentError(f"Riak option {name} has a bad value: {text!r}") from exc
        params.update(options)
        quorum = {name: params.pop(name) for name in _QUORUMS if name in params}
        return cls(parts.hostname or "127.0.0.1", port, quorum=quorum, **params)

    # -- the HTTP layer ---------------------------------------------------------

    def _send(
        self, method: str, path: str, headers: Mapping[str, str] | None, body: bytes | None, query: Any
    ) -> Response:
        """One attempt, with Riak's ``timeout`` appended to the query; urllib3 errors propagate."""
        url = path + "?" + urlencode([*dict(query or {}).items(), ("timeout", round(self.timeout * 1000))])
        reply = self.pool.request(method, url, headers=dict(headers or {}), body=body, redirect=False)
        return Response(reply.status, reply.headers, reply.data)

    def request(
        self,
        method: str,
        path: str,
        *,
        headers: Mapping[str, str] | None = None,
        body: bytes | None = None,
        query: Mapping[str, Any] | None = None,
    ) -> Response:
        """An idempotent request: connection failures and 5xx answers retried within the retry budget."""
        failure = ""
        for _ in self.retry.attempts():
            try:
                response = self._send(method, path, headers, body, query)
            except urllib3.exceptions.HTTPError as exc:
                failure = f"{exc}"
                continue
            if not response.transient:
                return response
            failure = f"status {response.status}: {response.body[:300]!r}"
        raise StoreUnavailableError(f"{self.where}: {method} {path} failed ({failure})")

    def _path(self, btype: str, tail: str = "") -> str:
        """``/types/T/buckets/B`` followed by ``tail`` (already encoded)."""
        return f"/types/{quote(btype, safe='')}/buckets/{quote(self.bucket, safe='')}{tail}"

    def _key_path(self, btype: str, key: str) -> str:
        return self._path(btype, f"/keys/{quote(key, safe='')}")

    def _fail(self, response: Response, what: str) -> StoreError:
        text = response.body[:300].decode("utf-8", "replace").strip()
        return StoreError(f"{self.where}: {what} answered {response.status}: {text}")

    def read(self, btype: str, key: str) -> tuple[Record | None, bool]:
        """GET a key: its record (every sibling on 300) or ``None``, and whether it is a tombstone. Nodes
        (``nodes_type``) are read with ``r=1&notfound_ok=false``, the rest with the configured ``r``/``pr``."""
        if btype == self.types["nodes"]:
            query = {"r": "1", "notfound_ok": "false"}
        else:
            query = {k: v for k, v in self.quorum.items() if k in ("r", "pr")}
        response = self.request(
            "GET", self._key_path(btype, key), headers={"Accept": "multipart/mixed, */*;q=0.5"}, query=query
        )
        vclock = response.headers.get("x-riak-vclock")
        if response.status == 404:
            if response.body.startswith(b"Unknown bucket type"):
                raise self._fail(response, f"GET {key!r}")
            return None, response.headers.get("x-riak-deleted") == "true"
        if response.status == 200:
            return Record((response.body,), vclock), False
        if response.status == 300:
            content_type = response.headers.get("content-type", "")
            if not content_type.startswith("multipart/mixed"):
                raise self._fail(response, f"GET {key!r} (siblings without multipart/mixed)")
            values = parse_multipart(content_type, response.body)
            return (Record(tuple(values), vclock), False) if values else (None, True)
        raise self._fail(response, f"GET {key!r}")

    def fetch(self, btype: str, key: str) -> Record | None:
        """GET a key: ``None`` if absent or a tombstone."""
        return self.read(btype, key)[0]

    def store(self, btype: str, key: str, value: bytes, *, vclock: str | None = None) -> None:
        """PUT a value unconditionally (nodes, top-N objects): safe to resend, so retried like a read."""
        headers = {"Content-Type": "application/octet-stream", **({"X-Riak-Vclock": vclock} if vclock else {})}
        query = {k: v for k, v in self.quorum.items() if k in ("w", "dw", "pw")}
        response = self.request("PUT", self._key_path(btype, key), headers=headers, body=value, query=query)
        if response.status not in (200, 204):
            raise self._fail(response, f"PUT {key!r}")

    def put_if(self, btype: str, key: str, value: bytes, vclock: str | None) -> str | None:
        """Conditional PUT: only if ``key`` still has ``vclock`` (``None``: only if absent); the vclock written.

        ``returnbody=true`` makes Riak answer the new vclock (the one a later GET gives), so a writer holding the
        head it wrote compare-and-sets again without reading it (``None`` if an answer lacks it). :class:`ConflictError`
        only for a 412 to the first attempt that reached Riak (nothing written: a lost race, or the spurious 412 after
        an ensemble leader change, which the caller likewise rebases on). After an attempt that may have been applied
        (reply lost, 5xx), a 412 is settled by reading the key back: exactly ``value`` is success (heads carry commit
        ids, so equal bytes are this write), else :class:`OutcomeUnknownError`, as when retries run out.
        """
        headers = {"Content-Type": "application/octet-stream"}
        headers.update({"X-Riak-Vclock": vclock} if vclock else {"If-None-Match": "*"})
        query = {**{k: v for k, v in self.quorum.items() if k in ("w", "dw", "pw")}, "returnbody": "true"}
        path = self._key_path(btype, key)
        failure, maybe = "", ""  # maybe: why an earlier attempt may have been applied
        for _ in self.retry.attempts():
            try:
                response = self._send("PUT", path, headers, value, query)
            except urllib3.exceptions.ConnectTimeoutError as exc:  # never connected: nothing was sent
                failure = f"{exc}"
                continue
            except urllib3.exceptions.HTTPError as exc:
                failure = maybe = f"{exc}"
                continue
            if response.status in (200, 204):
                return response.headers.get("x-riak-vclock")
            if response.status == 412 and not maybe:
                raise ConflictError(f"key {key!r} changed since it was read ({self.where} answered 412)")
            if response.status == 412:
                record = self.fetch(btype, key)
                if record is not None and record.values == (value,):
                    return record.version
                raise OutcomeUnknownError(
                    f"{self.where}: key {key!r} changed after a write whose outcome was lost ({maybe}); "
                    f"it may hold this write or a later one"
                )
            if not response.transient:
                error = self._fail(response, f"PUT {key!r}")
                if maybe:
                    raise OutcomeUnknownError(f"{error}, after a write whose outcome was lost ({maybe})")
                raise error
            failure = maybe = f"status {response.status}: {response.body[:300]!r}"
        if maybe:
            raise OutcomeUnknownError(f"{self.where}: PUT {key!r} may or may not have been applied ({failure})")
        raise StoreRefusedError(f"{self.where}: PUT {key!r} never reached Riak ({failure})")

    def remove(self, btype: str, key: str, *, vclock: str | None = None) -> None:
        """DELETE a key; absent is fine; 412 (stale vclock on a consistent type) raises ConflictError."""
        headers = {"X-Riak-Vclock": vclock} if vclock else {}
        query = {k: v for k, v in self.quorum.items() if k in _QUORUMS}
        response = self.request("DELETE", self._key_path(btype, key), headers=headers, query=query)
        if response.status == 412:
            raise ConflictError(f"key {key!r} changed since it was read ({self.where} answered 412)")
        if response.status not in (204, 404) or response.body.startswith(b"Unknown bucket type"):
            raise self._fail(response, f"DELETE {key!r}")

    def list_keys(self, btype: str) -> list[str]:
        """Every key of the bucket in a type: a full key listing, expensive on a large cluster."""
        response = self.request("GET", self._path(btype, "/keys"), query={"keys": "true"})
        if response.status != 200:
            raise self._fail(response, "key listing")
        return list(json.loads(response.body)["keys"])

    def index_page(
        self, btype: str, start: str, end: str, continuation: str | None = None
    ) -> tuple[list[str], str | None] | None:
        """One page of the keys from ``start`` to ``end`` (inclusive, sorted) by the ``$key`` index, and the next
        page's continuation; ``None`` when the type's backend has no secondary indexes."""
        path = self._path(btype, f"/index/$key/{quote(start, safe='')}/{quote(end, safe='')}")
        query = {"max_results": self.page_size, **({"continuation": continuation} if continuation else {})}
        response = self.request("GET", path, query=query)
        if response.status == 500 and _NO_INDEXES in response.body and continuation is None:
            return None
        if response.status != 200:
            raise self._fail(response, f"$key range query {start!r}..{end!r}")
        page = json.loads(response.body)
        return list(page["keys"]), page.get("continuation")

    def check_types(self) -> None:
        """Refuse bucket types that cannot give mdss' guarantees, saying how to create right ones."""
        for role, (prop, wanted, props) in _WANTED.items():
            name = self.types[role]
            response = self.request("GET", self._path(name, "/props"))
            create = _CREATE.format(name=name, props=props)
            if response.status == 404:
                raise StoreError(f"{self.where}: bucket type {name!r} ({role}) does not exist; create it: {create}")
            if response.status != 200:
                raise self._fail(response, f"props of bucket type {name!r}")
            found = json.loads(response.body).get("props", {}).get(prop)
            if found is not wanted:
                raise StoreError(
                    f"{self.where}: bucket type {name!r} ({role}) has {prop}={found!r}, "
                    f"mdss needs {prop}={wanted!r}; create such a type: {create}"
                )

    # -- routing and the store primitives -----------------------------------------

    def _type(self, key: str) -> str:
        return self.types[_ROLE[kind(key)]]

    def _get(self, key: str) -> Record | None:
        return self.fetch(self._type(key), key)

    def _get_many(self, keys: Sequence[str]) -> list[bytes | None]:
        def one(key: str) -> bytes | None:
            btype = self._type(key)
            for _ in self.notfound.attempts():
                record, deleted = self.read(btype, key)
                if record is not None:
                    return record.value
                if deleted or kind(key) != NODE:  # a tombstone; a head's 404 comes from its ensemble leader
                    return None
            return None

        return list(self._executor.map(one, keys))

    def _put(self, key: str, value: bytes, context: Any) -> None:
        btype = self._type(key)
        if kind(key) != HEAD:
            self.store(btype, key, value, vclock=context)
            return
        for _ in COMMITS.attempts():  # a blind write on a consistent type is a conditional write on the vclock read
            record = self.fetch(btype, key)
            with contextlib.suppress(ConflictError):
                self.put_if(btype, key, value, None if record is None else record.version)
                return
        raise ConflictError(f"key {key!r} kept changing while it was overwritten, for {COMMITS.budget} s")

    def _put_many(self, items: Mapping[str, bytes]) -> None:
        list(self._executor.map(lambda kv: self._put(kv[0], kv[1], None), items.items()))

    def _cas(self, key: str, value: bytes, version: Any) -> str | None:
        return self.put_if(self._type(key), key, value, version)

    def _delete(self, key: str) -> None:
        btype = self._type(key)
        if kind(key) != HEAD:
            self.remove(btype, key)
            return
        for _ in COMMITS.attempts():  # a delete on a consistent type needs the current vclock
            record = self.fetch(btype, key)
            if record is None:
                return
            with contextlib.suppress(ConflictError):  # changed since read, or already deleted by an earlier attempt
                self.remove(btype, key, vclock=record.version)
                return
        raise ConflictError(f"key {key!r} kept changing while it was deleted, for {COMMITS.budget} s")

    def _delete_if(self, key: str, version: Any) -> None:
        """DELETE with the vclock read: a consistent type answers 412 to a stale one (15j), also when the key
        is gone meanwhile (Riak's conditional delete compares it with the deleted key's), which is no conflict."""
        btype = self._type(key)
        try:
            self.remove(btype, key, vclock=version)
        except ConflictError:
            if self.fetch(btype, key) is not None:
                raise

    def _delete_many(self, keys: Sequence[str]) -> None:
        list(self._executor.map(self._delete, keys))

    def _keys(self, prefix: str) -> Iterator[str]:
        """Sorted keys starting with ``prefix``, tombstones included, from each type that can hold them."""
        roles = ("nodes",) if kind(prefix) == NODE else ("heads", "nodes", "sibling")  # node keys extend node prefixes
        listings = [self._type_keys(btype, prefix) for btype in dict.fromkeys(self.types[r] for r in roles)]
        # Filtered although the range is exact: a multi-backend answered keys outside it (basho/riak_kv#1329).
        return (key for key in heapq.merge(*listings) if key.startswith(prefix))

    def _type_keys(self, btype: str, prefix: str) -> Iterator[str]:
        """The keys of one type that start with ``prefix``, sorted: by ``$key`` pages, else a full listing."""
        start, end = key_range(prefix)
        continuation = None
        while btype not in self._unindexed:
            page = self.index_page(btype, start, end, continuation)
            if page is None:  # on a first page only: a backend has indexes or not
                self._unindexed.add(btype)
                warnings.warn(
                    f"{self.where}: bucket type {btype!r} has no secondary indexes (a bitcask backend?), so "
                    f"mdss lists its keys by full-bucket scans, which read every key of the bucket; "
                    f"use leveldb for it (see docs/riak.md)",
                    stacklevel=2,
                )
                break
            keys, continuation = page
            yield from keys
            if not continuation:
                return
        yield from sorted(key for key in self.list_keys(btype) if key.startswith(prefix))

    def _close(self) -> None:
        self._executor.shutdown(wait=False)
        self.pool.close()
