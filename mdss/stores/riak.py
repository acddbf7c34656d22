"""Riak KV over its HTTP API, through urllib3's connection pool.

Three bucket types, chosen by what a key holds:

- immutable tree nodes (``...:n:<id>``) go to ``nodes_type``, a plain type
  (``allow_mult`` false): written once, never changed;
- top-N objects (``...:t``) go to ``sibling_type`` (``allow_mult`` true):
  concurrent writers become siblings that a read merges (see ``mdss.topn``);
- everything else — heads above all — goes to ``heads_type``, which must be
  strongly consistent (``consistent: true``): there ``If-None-Match: *`` and
  a write with the vclock read are true compare-and-sets, answered 412 on
  conflict. Opening refuses a heads type that is not.

Riak has no multi-get: ``get_many`` issues its GETs concurrently over the
pool (one round trip of latency, N requests). A node that a committed head
names may be briefly invisible on an eventually consistent cluster, so
``get_many`` retries a not-found a few times before reporting it missing.
Keys are fully percent-encoded (``/`` included); values are
``application/octet-stream``; tombstones (``X-Riak-Deleted``) read as absent.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

import urllib3

from ..exceptions import ConflictError, StoreError, StoreUnavailableError
from .base import Record, Store, url_options

_CREATE = "riak-admin bucket-type create {name} '{props}' && riak-admin bucket-type activate {name}"
_WANTED = {
    "heads": ("consistent", True, '{"props":{"consistent":true}}'),
    "sibling": ("allow_mult", True, '{"props":{"allow_mult":true}}'),
}
_RETRY_STATUS = (500, 502, 503, 504)


class Response:
    """What the HTTP layer needs of a reply: status, headers (lower-case names), body."""

    def __init__(self, status: int, headers: Mapping[str, str], body: bytes) -> None:
        self.status, self.body = status, body
        self.headers = {k.lower(): v for k, v in headers.items()}


def parse_multipart(content_type: str, body: bytes) -> list[bytes]:
    """The values of a ``multipart/mixed`` sibling listing, byte for byte, tombstones left out.

    Parts carry no length: a part ends where ``CRLF--boundary`` begins, so
    values may themselves hold CRLF, ``--`` or any byte.
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
    """A Riak KV cluster through one node's HTTP interface."""

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
        retries: int = 3,
        backoff: float = 0.05,
        notfound_retries: int = 2,
        concurrency: int = 16,
        check_types: bool = True,
        scheme: str = "http",
    ) -> None:
        super().__init__(namespace=namespace)
        self.where = f"Riak at {scheme}://{host}:{port}"
        self.bucket, self.types = bucket, {"heads": heads_type, "nodes": nodes_type, "sibling": sibling_type}
        self.quorum = dict(quorum or {})
        self.timeout, self.retries, self.backoff, self.notfound_retries = timeout, retries, backoff, notfound_retries
        self.pool = urllib3.connection_from_url(
            f"{scheme}://{host}:{port}",
            maxsize=concurrency,
            block=True,
            timeout=urllib3.Timeout(connect=timeout, read=timeout),
            retries=False,
        )
        self._executor = ThreadPoolExecutor(concurrency, thread_name_prefix="mdss-riak")
        if check_types:
            self.check_types()

    @classmethod
    def from_url(cls, url: str, **options: Any) -> RiakStore:
        """``riak://host:8098?heads_type=T1&nodes_type=T2&sibling_type=T3&r=quorum&w=quorum&timeout=5``."""
        parts = urlsplit(url)
        params: dict[str, Any] = url_options(url)
        quorum: dict[str, str] = {q: params.pop(q) for q in ("r", "pr", "w", "dw", "pw", "rw") if q in params}
        for name, kind in (
            ("timeout", float),
            ("backoff", float),
            ("retries", int),
            ("notfound_retries", int),
            ("concurrency", int),
        ):
            if name in params:
                params[name] = kind(params[name])
        if "check_types" in params:
            params["check_types"] = params["check_types"].lower() not in ("0", "false", "no")
        return cls(parts.hostname or "127.0.0.1", parts.port or 8098, quorum=quorum, **{**params, **options})

    # -- the HTTP layer ---------------------------------------------------------

    def request(
        self,
        method: str,
        path: str,
        *,
        headers: Mapping[str, str] | None = None,
        body: bytes | None = None,
        query: Mapping[str, Any] | None = None,
    ) -> Response:
        """One request; connection failures and 5xx answers retried with jittered backoff."""
        url = path + ("?" + urlencode(query) if query else "")
        for attempt in range(self.retries + 1):
            try:
                reply = self.pool.request(method, url, headers=dict(headers or {}), body=body, redirect=False)
                response = Response(reply.status, reply.headers, reply.data)
            except urllib3.exceptions.HTTPError as exc:
                failure = f"{exc}"
            else:
                if response.status not in _RETRY_STATUS:
                    return response
                failure = f"status {response.status}: {response.body[:300]!r}"
            if attempt == self.retries:
                raise StoreUnavailableError(f"{self.where}: {method} {path} failed ({failure})")
            time.sleep(random.uniform(0, self.backoff * 2**attempt))
        raise AssertionError("unreachable")

    def _path(self, btype: str, key: str | None = None) -> str:
        base = f"/types/{quote(btype, safe='')}/buckets/{quote(self.bucket, safe='')}"
        return base + ("/props" if key is None else f"/keys/{quote(key, safe='')}")

    def _fail(self, response: Response, what: str) -> StoreError:
        text = response.body[:300].decode("utf-8", "replace").strip()
        return StoreError(f"{self.where}: {what} answered {response.status}: {text}")

    def fetch(self, btype: str, key: str) -> Record | None:
        """GET a key: ``None`` if absent or a tombstone; every sibling on 300."""
        query = {k: v for k, v in self.quorum.items() if k in ("r", "pr")}
        response = self.request(
            "GET", self._path(btype, key), headers={"Accept": "multipart/mixed, */*;q=0.5"}, query=query
        )
        vclock = response.headers.get("x-riak-vclock")
        if response.status == 404:
            if response.body.startswith(b"Unknown bucket type"):
                raise self._fail(response, f"GET {key!r}")
            return None
        if response.status == 200:
            return Record((response.body,), vclock)
        if response.status == 300:
            content_type = response.headers.get("content-type", "")
            if not content_type.startswith("multipart/mixed"):
                raise self._fail(response, f"GET {key!r} (siblings without multipart/mixed)")
            values = parse_multipart(content_type, response.body)
            return Record(tuple(values), vclock) if values else None
        raise self._fail(response, f"GET {key!r}")

    def store(
        self, btype: str, key: str, value: bytes, *, vclock: str | None = None, if_none_match: bool = False
    ) -> None:
        """PUT a value; 412 (a lost conditional write) raises ConflictError."""
        headers = {"Content-Type": "application/octet-stream"}
        if vclock:
            headers["X-Riak-Vclock"] = vclock
        if if_none_match:
            headers["If-None-Match"] = "*"
        query = {k: v for k, v in self.quorum.items() if k in ("w", "dw", "pw")}
        response = self.request("PUT", self._path(btype, key), headers=headers, body=value, query=query)
        if response.status == 412:
            raise ConflictError(f"key {key!r} changed since it was read ({self.where} answered 412)")
        if response.status not in (200, 204):
            raise self._fail(response, f"PUT {key!r}")

    def remove(self, btype: str, key: str, *, vclock: str | None = None) -> None:
        """DELETE a key; absent is fine; 412 (stale vclock on a consistent type) raises ConflictError."""
        headers = {"X-Riak-Vclock": vclock} if vclock else {}
        response = self.request("DELETE", self._path(btype, key), headers=headers)
        if response.status == 412:
            raise ConflictError(f"key {key!r} changed since it was read ({self.where} answered 412)")
        if response.status not in (204, 404) or response.body.startswith(b"Unknown bucket type"):
            raise self._fail(response, f"DELETE {key!r}")

    def list_keys(self, btype: str) -> list[str]:
        """Every key of the bucket in a type: a full key listing, expensive on a large cluster."""
        response = self.request("GET", self._path(btype, "")[:-1], query={"keys": "true"})
        if response.status != 200:
            raise self._fail(response, "key listing")
        return list(json.loads(response.body)["keys"])

    def check_types(self) -> None:
        """Refuse bucket types that cannot give mdss' guarantees, saying how to create right ones."""
        for role, (prop, wanted, props) in _WANTED.items():
            name = self.types[role]
            response = self.request("GET", self._path(name))
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
        if ":n:" in key:
            return self.types["nodes"]
        if key.endswith(":t"):
            return self.types["sibling"]
        return self.types["heads"]

    def _get(self, key: str) -> Record | None:
        return self.fetch(self._type(key), key)

    def _get_many(self, keys: Sequence[str]) -> list[bytes | None]:
        def one(key: str) -> bytes | None:
            for attempt in range(self.notfound_retries + 1):
                record = self.fetch(self._type(key), key)
                if record is not None:
                    return record.value
                if attempt < self.notfound_retries:
                    time.sleep(self.backoff * 2**attempt)
            return None

        return list(self._executor.map(one, keys))

    def _put(self, key: str, value: bytes, context: Any) -> None:
        btype = self._type(key)
        if btype != self.types["heads"] or context is not None:
            self.store(btype, key, value, vclock=context)
            return
        for _ in range(self.retries + 1):  # a blind write on a consistent type needs the current vclock
            record = self.fetch(btype, key)
            try:
                self.store(
                    btype, key, value, vclock=None if record is None else record.version, if_none_match=record is None
                )
                return
            except ConflictError:
                continue
        raise ConflictError(f"key {key!r} kept changing while it was overwritten")

    def _put_many(self, items: Mapping[str, bytes]) -> None:
        list(self._executor.map(lambda kv: self._put(kv[0], kv[1], None), items.items()))

    def _cas(self, key: str, value: bytes, version: Any) -> None:
        self.store(self._type(key), key, value, vclock=version, if_none_match=version is None)

    def _delete(self, key: str) -> None:
        btype = self._type(key)
        record = self.fetch(btype, key) if btype == self.types["heads"] else None
        self.remove(btype, key, vclock=None if record is None else record.version)

    def _delete_many(self, keys: Sequence[str]) -> None:
        list(self._executor.map(self._delete, keys))

    def _keys(self, prefix: str) -> Iterator[str]:
        found = {key for btype in dict.fromkeys(self.types.values()) for key in self.list_keys(btype)}
        return iter(sorted(key for key in found if key.startswith(prefix)))

    def _close(self) -> None:
        self._executor.shutdown(wait=False)
        self.pool.close()
