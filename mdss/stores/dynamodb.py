"""Amazon DynamoDB, through boto3.

One table: the partition key ``k`` (string) is the mdss key, ``v`` (binary) the value, ``r`` (string) a random revision
token written with every put and read as the version: a compare-and-set is one conditional ``PutItem`` (``r = :read``,
or ``attribute_not_exists(k)``), free of ABA. Every read is strongly consistent: a reader that saw a head must find the
nodes it names. Batches are ``BatchGetItem`` (100 keys) and ``BatchWriteItem`` (25 items), ``concurrency`` at a time
(one round trip in ``stats.calls``, each request in ``stats.requests``); what DynamoDB leaves unprocessed (a reply cut
at 16 MB, throttled partitions) is resent, with backoff once a resend processes nothing. ``keys(prefix)`` is a ``Scan``
of the whole table with ``begins_with`` (a maintenance call). docs/dynamodb.md has the costs and the limits.

**Retries.** Throttling (``ProvisionedThroughputExceededException``, ``ThrottlingException``, ``RequestLimitExceeded``),
5xx answers and connection failures are retried under one :class:`mdss._retry.Backoff` (``retry_budget`` seconds, first
ceiling ``backoff``, at most ``retries`` resends if given), then :class:`StoreUnavailableError`. botocore's own retries
are off (a client passed in must have them off too): it would resend a conditional put blindly.

**A lost race** returns the item that won (``ReturnValuesOnConditionCheckFailure=ALL_OLD``) in :class:`ConflictError`
``current``, so a commit rebases without reading the head again; without an item (absent key, or an engine ignoring the
option) ``current_known`` is false.

**A conditional put whose reply was lost** (a read timeout, a closed connection, a 5xx) may have been applied; from
then on the store never reports :class:`ConflictError`: it reads the item back (or takes the item returned); our token
there means the write landed; the revision read means it did not (yet), and the request is resent (at most one can
apply); anything else is :class:`OutcomeUnknownError`.

**Item size.** An item holds at most 400 KB, names included. Keys over 2048 bytes and values over
:attr:`DynamoDBStore.max_value_bytes` are refused with :class:`InvalidArgumentError` before anything is sent; a set
checks at open whether its nodes can fit (``mdss._writer.check_chunk_size``).

**Expiry** (``mdss._expiry``): with ``ttl_attribute`` (default ``ttl``; empty: off), an expiring set's nodes and notes
carry that Number attribute, the epoch second ``gc_grace`` after its moment (rounded up), for DynamoDB's TTL to delete
them; the table's TTL must be enabled on that attribute (mdss enables it on a table it creates; :attr:`ttl_enabled`).
Without transactions the fence is per item: :meth:`persist_keys` sets ``f`` to the head's generation and removes the
attribute, and :meth:`expire_keys` sets it only on an item whose ``f`` is below the armer's generation, one
``UpdateItem`` per key (docs/architecture.md, "Expiry").

URL: ``dynamodb://TABLE?region=eu-west-1&endpoint=http://127.0.0.1:4567`` with the options ``namespace``, ``region``,
``endpoint``, ``create_table`` (create a missing table, on-demand), ``ttl_attribute``, ``timeout`` (seconds per
request), ``retry_budget``, ``backoff``, ``retries`` and ``concurrency``; an unknown or badly typed one is
:class:`InvalidArgumentError`. Credentials come from boto3's usual chain (environment, profile, role).
"""

from __future__ import annotations

import functools
import math
import secrets
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import unquote, urlsplit

import attrs
import botocore.config
import botocore.exceptions as boto_errors
import botocore.loaders
import botocore.session

from .._codec import describe
from .._retry import STORE_CALLS, Backoff
from ..exceptions import (
    ConflictError,
    CorruptDataError,
    InvalidArgumentError,
    OutcomeUnknownError,
    StoreError,
    StoreRefusedError,
    StoreUnavailableError,
    shown,
)
from .base import Record, Stats, Store, parse_flag, parse_integer, parse_number, store_options

#: DynamoDB's limits: bytes per item (names and values), per partition key; keys per BatchGetItem, per BatchWriteItem.
ITEM_BYTES, KEY_BYTES, GET_BATCH, WRITE_BATCH = 400 * 1024, 2048, 100, 25
_TOKEN_BYTES = 8
#: What an item holds besides the key and the value: the attribute names k, v, r and the revision token.
_ITEM_OVERHEAD = len("kvr") + 2 * _TOKEN_BYTES
_WRITES = {"put_item", "delete_item", "batch_write_item", "update_item"}
#: Operations that report the capacity they consume (the table operations do not).
_METERED = {"get_item", "batch_get_item", "scan", *_WRITES}
_THROTTLED = {"ProvisionedThroughputExceededException", "ThrottlingException", "RequestLimitExceeded"}
_SERVER_FAILED = {"InternalServerError", "ServiceUnavailable"}
#: Failures before the request was sent: nothing can have been applied.
_NOT_SENT = (boto_errors.EndpointConnectionError, boto_errors.ConnectTimeoutError)
#: Failures after it may have been: a lost reply (a reply cut short, IncompleteReadError, too).
_LOST = (boto_errors.HTTPClientError, boto_errors.ConnectionError, boto_errors.IncompleteReadError)

#: The attribute a fenced item holds (mdss._expiry): the generation of the head whose fence cancelled its expiry.
_FENCE = "f"
#: The bytes a Number attribute's value takes at most (38 significant digits).
_NUMBER_BYTES = 21
#: The names mdss gives attributes itself: a TTL attribute cannot take one.
_OWN = ("k", "v", "r", _FENCE)

_OPTIONS: dict[str, Callable[[str], Any]] = {
    **dict.fromkeys(("namespace", "region", "endpoint", "ttl_attribute"), str),
    **dict.fromkeys(("timeout", "retry_budget", "backoff"), parse_number),
    **dict.fromkeys(("retries", "concurrency"), parse_integer),
    "create_table": parse_flag,
}


@attrs.define
class CapacityStats(Stats):
    """:class:`Stats` and the capacity units DynamoDB reports consumed: ``read_units`` (RCU, whole: every read is
    strongly consistent), ``write_units`` (WCU); ``requests``: those sent, resends included (a ``get_many`` of 250 keys:
    one round trip in ``calls``, three ``requests`` at once)."""

    read_units: int = 0
    write_units: int = 0
    requests: int = 0


class _Transient(Exception):
    """One attempt failed in a way another attempt may not; ``applied``: it may have been applied anyway."""

    def __init__(self, cause: Exception, applied: bool) -> None:
        super().__init__(str(cause))
        self.cause, self.applied = cause, applied


def _code(exc: BaseException | None) -> str:
    """DynamoDB's error code of a refused request ("" for any other failure)."""
    return str(exc.response.get("Error", {}).get("Code", "")) if isinstance(exc, boto_errors.ClientError) else ""


def _number(name: str, value: object, minimum: float, integer: bool = False) -> Any:
    ok = isinstance(value, int if integer else (int, float)) and not isinstance(value, bool)
    if not ok or not value >= minimum:  # type: ignore[operator]
        kind = "an integer" if integer else "a number"
        raise InvalidArgumentError(f"DynamoDB option {name} must be {kind} >= {minimum:g}, got {value!r}")
    return value


def _ttl_bytes(name: str | None) -> int:
    """What the expiry attributes add to an item at most: the TTL attribute and the fence, names and numbers."""
    return 0 if name is None else len(name.encode()) + len(_FENCE) + 2 * _NUMBER_BYTES


def _chunks(items: Sequence[Any], size: int) -> list[Sequence[Any]]:
    return [items[start : start + size] for start in range(0, len(items), size)]


class DynamoDBStore(Store):
    """One DynamoDB table. ``DynamoDBStore("board", client=boto3.client("dynamodb", ...))`` or
    ``open_store("dynamodb://board?region=eu-west-1")``. The store owns the client and closes it."""

    #: Items vanish only when deleted (DynamoDB's TTL deletes only nodes and notes of expired sets, never a head), and a
    #: listing is a Scan of the whole table: a new set's first write does not look for nodes left without a head
    #: (``Store.evicts``).
    evicts = False
    #: The largest value a put accepts: what is left of an item for the longest key and the expiry attributes (of the
    #: default ``ttl_attribute``; each store's own is on the instance).
    max_value_bytes = ITEM_BYTES - KEY_BYTES - _ITEM_OVERHEAD - _ttl_bytes("ttl")
    max_key_bytes = KEY_BYTES
    #: With a ``ttl_attribute`` (the default), DynamoDB's TTL deletes nodes of expired sets, fenced item by item.
    expires_keys = True
    expiry_checks_head = False

    def __init__(
        self,
        table: str,
        *,
        client: Any = None,
        namespace: str = "mdss",
        region: str | None = None,
        endpoint: str | None = None,
        create_table: bool = False,
        ttl_attribute: str | None = "ttl",
        timeout: float = 10.0,
        retry_budget: float = STORE_CALLS.budget,
        backoff: float = STORE_CALLS.base,
        retries: int | None = None,
        concurrency: int = 8,
    ) -> None:
        super().__init__(namespace=namespace)
        self.stats = CapacityStats()
        if not isinstance(table, str) or not 3 <= len(table) <= 255:
            raise InvalidArgumentError(f"a DynamoDB table name has 3 to 255 characters, got {table!r}")
        self.table, self.where = table, f"DynamoDB table {table!r}" + (f" at {endpoint}" if endpoint else "")
        if ttl_attribute is not None and not isinstance(ttl_attribute, str):
            raise InvalidArgumentError(
                f"DynamoDB option ttl_attribute must be a string, got {shown(ttl_attribute, 40)}"
            )
        if ttl_attribute in _OWN or len((ttl_attribute or "").encode()) > 255:
            raise InvalidArgumentError(
                f"DynamoDB option ttl_attribute must name an attribute of at most 255 bytes other than mdss' own "
                f"({', '.join(_OWN)}), got {shown(ttl_attribute, 40)}"
            )
        #: The Number attribute DynamoDB's TTL reads (``None``: mdss writes none, and expired sets wait for a sweep).
        self.ttl_attribute = ttl_attribute or None
        self.expires_keys = self.ttl_attribute is not None
        self.max_value_bytes = ITEM_BYTES - KEY_BYTES - _ITEM_OVERHEAD - _ttl_bytes(self.ttl_attribute)
        #: Whether this store enabled TTL on the table it created (``False``: the engine refused, as dynalite does;
        #: ``None``: it did not create the table, or writes no TTL attribute).
        self.ttl_enabled: bool | None = None
        self.retry = Backoff(
            budget=_number("retry_budget", retry_budget, 0),
            base=_number("backoff", backoff, 0),
            cap=STORE_CALLS.cap,
            max_attempts=None if retries is None else _number("retries", retries, 0, integer=True) + 1,
        )
        concurrency = _number("concurrency", concurrency, 1, integer=True)
        if client is None:
            client = _client(region, endpoint, _number("timeout", timeout, 0.001), concurrency)
        elif (client.meta.config.retries or {}).get("total_max_attempts") != 1:
            client.close()
            raise InvalidArgumentError(
                "a DynamoDB client given to mdss must not retry by itself (it would resend a conditional put "
                "blindly): create it with botocore.config.Config(retries={'total_max_attempts': 1})"
            )
        self.client = client
        self._executor = ThreadPoolExecutor(concurrency, thread_name_prefix="mdss-dynamodb")
        try:
            self._open_table(create_table)
        except BaseException:
            self._close()
            raise

    @classmethod
    def from_url(cls, url: str, **options: Any) -> DynamoDBStore:
        """``dynamodb://TABLE?region=...&endpoint=...&create_table=true`` (see the module docstring)."""
        table = unquote(urlsplit(url).netloc)
        return cls(table, **store_options(url, options, _OPTIONS))

    # -- calls and their failures ---------------------------------------------------

    def _attempt(self, operation: str, **request: Any) -> dict[str, Any]:
        """One request, its consumed capacity counted; a failure worth another attempt raised as :class:`_Transient`."""
        self.stats.add(requests=1)
        try:
            if operation in _METERED:
                request["ReturnConsumedCapacity"] = "TOTAL"
            reply: dict[str, Any] = getattr(self.client, operation)(**request)
        except boto_errors.ClientError as exc:
            code, status = _code(exc), exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
            if code in _THROTTLED:
                raise _Transient(exc, applied=False) from exc
            if code in _SERVER_FAILED or status >= 500:
                raise _Transient(exc, applied=True) from exc
            raise
        except _NOT_SENT as exc:
            raise _Transient(exc, applied=False) from exc
        except _LOST as exc:
            raise _Transient(exc, applied=True) from exc
        consumed = reply.get("ConsumedCapacity") or []
        units = sum(c.get("CapacityUnits", 0) for c in (consumed if isinstance(consumed, list) else [consumed]))
        if units:
            self.stats.add(**{"write_units" if operation in _WRITES else "read_units": math.ceil(units)})
        return reply

    def _call(self, operation: str, **request: Any) -> dict[str, Any]:
        """An idempotent request, retried under the store's policy; then :class:`StoreUnavailableError`
        (:class:`StoreRefusedError` when no attempt may have been applied)."""
        failure: Exception | None = None
        applied = False
        for _ in self.retry.attempts():
            try:
                return self._attempt(operation, **request)
            except _Transient as exc:
                failure, applied = exc.cause, applied or exc.applied
            except (boto_errors.ClientError, boto_errors.BotoCoreError) as exc:
                raise self._refused(operation, exc) from exc
        error = StoreUnavailableError if applied else StoreRefusedError
        raise error(f"{self.where}: {operation} failed within its retry budget: {failure}") from failure

    def _refused(self, operation: str, exc: Exception) -> StoreError:
        if _code(exc) == "ResourceNotFoundException":
            return StoreError(f"{self.where} does not exist: create it, or open the store with create_table=true")
        return StoreError(f"{self.where} refused {operation}: {exc}")

    def _batch(self, operation: str, request: Any) -> list[dict[str, Any]]:
        """One batch request for the table, and what it leaves unprocessed resent with backoff; the replies. Only a
        round that processed nothing spends the retry policy: a reply cut at 16 MB, or partly throttled, made progress,
        and the rest goes again with the backoff started afresh (each such round leaves fewer, so this ends)."""
        unprocessed = "UnprocessedKeys" if operation == "batch_get_item" else "UnprocessedItems"
        replies: list[dict[str, Any]] = []
        size = len(request["Keys"] if operation == "batch_get_item" else request)
        while True:
            for _ in self.retry.attempts():
                try:
                    reply = self._call(operation, RequestItems={self.table: request})
                except StoreRefusedError as exc:  # refused now, but earlier rounds wrote their part
                    if not replies or operation == "batch_get_item":
                        raise
                    raise StoreUnavailableError(f"{exc} (after earlier rounds of the batch were written)") from exc
                replies.append(reply)
                left = reply.get(unprocessed, {}).get(self.table)
                if not left:
                    return replies
                request, before = left, size
                size = len(left["Keys"] if operation == "batch_get_item" else left)
                if size < before:
                    break  # progress: the rest at once, and a fresh policy for it
            else:
                raise StoreUnavailableError(
                    f"{self.where}: {operation} left {size} requests unprocessed within its budget"
                )

    def _parallel(self, fn: Callable[[Sequence[Any]], Any], chunks: list[Sequence[Any]]) -> list[Any]:
        return [fn(chunks[0])] if len(chunks) == 1 else list(self._executor.map(fn, chunks))

    # -- items -----------------------------------------------------------------------

    def _key(self, key: str) -> dict[str, Any]:
        if len(key.encode()) > KEY_BYTES:
            raise InvalidArgumentError(
                f"key {key[:60]!r}... is {len(key.encode())} bytes; a DynamoDB partition key holds at most "
                f"{KEY_BYTES} (use a shorter set name or namespace)"
            )
        return {"k": {"S": key}}

    def _item(self, key: str, value: bytes, token: str) -> dict[str, Any]:
        if len(value) > self.max_value_bytes:
            what = describe(value)
            # Only a tree node's size follows from the chunk size; any other value mdss bounds itself.
            hint = (
                "use a smaller chunk_size"
                if what.startswith(("an entry set", "a tree manifest"))
                else "mdss bounds it far below that: please report it as a bug"
            )
            raise InvalidArgumentError(
                f"value for key {key!r} ({what}) is {len(value):,} bytes; a DynamoDB item holds at most 400 KB, "
                f"{self.max_value_bytes:,} bytes of value ({hint})"
            )
        return {**self._key(key), "v": {"B": value}, "r": {"S": token}}

    def _record(self, item: Mapping[str, Any]) -> Record:
        key = item.get("k", {}).get("S")
        try:
            return Record((bytes(item["v"]["B"]),), item["r"]["S"])
        except (KeyError, TypeError):
            raise CorruptDataError(f"{self.where} holds an item that mdss did not write (no v or r)", key) from None

    # -- the store primitives ------------------------------------------------------------

    def _get(self, key: str) -> Record | None:
        item = self._call("get_item", TableName=self.table, Key=self._key(key), ConsistentRead=True).get("Item")
        return None if item is None else self._record(item)

    def _get_many(self, keys: Sequence[str]) -> list[bytes | None]:
        unique = list(dict.fromkeys(keys))  # BatchGetItem refuses a repeated key

        def chunk(part: Sequence[str]) -> list[dict[str, Any]]:
            request = {"Keys": [self._key(key) for key in part], "ConsistentRead": True}
            return [item for reply in self._batch("batch_get_item", request) for item in reply["Responses"][self.table]]

        found = {}
        for items in self._parallel(chunk, _chunks(unique, GET_BATCH)):
            for item in items:
                found[item["k"]["S"]] = self._record(item).value
        return [found.get(key) for key in keys]

    def _put(self, key: str, value: bytes, context: Any) -> None:
        self._call("put_item", TableName=self.table, Item=self._item(key, value, secrets.token_hex(_TOKEN_BYTES)))

    def _put_many(self, items: Mapping[str, bytes]) -> None:
        requests = [
            {"PutRequest": {"Item": self._item(key, value, secrets.token_hex(_TOKEN_BYTES))}}
            for key, value in items.items()
        ]
        self._write_batches(requests)

    def _write_batches(self, requests: list[dict[str, Any]]) -> None:
        """``requests`` in batches of :data:`WRITE_BATCH`, sent at once: a refusal of one says nothing of the others."""
        chunks = _chunks(requests, WRITE_BATCH)
        try:
            self._parallel(lambda part: self._batch("batch_write_item", list(part)), chunks)
        except StoreRefusedError as exc:
            if len(chunks) == 1:
                raise
            raise StoreUnavailableError(f"{exc} (other batches of the call may have been written)") from exc

    def _delete(self, key: str) -> None:
        self._call("delete_item", TableName=self.table, Key=self._key(key))

    def _delete_if(self, key: str, version: Any) -> None:
        try:
            self._call(
                "delete_item",
                TableName=self.table,
                Key=self._key(key),
                ConditionExpression="attribute_not_exists(k) OR r = :read",
                ExpressionAttributeValues={":read": {"S": version}},
            )
        except StoreError as exc:  # resending after a lost reply is harmless: see the Redis store
            if exc.__cause__ is None or _code(exc.__cause__) != "ConditionalCheckFailedException":
                raise
            raise ConflictError(f"key {key!r} changed since it was read") from None

    def _delete_many(self, keys: Sequence[str]) -> None:
        self._write_batches([{"DeleteRequest": {"Key": self._key(key)}} for key in dict.fromkeys(keys)])

    def _keys(self, prefix: str) -> Iterator[str]:
        request: dict[str, Any] = {
            "TableName": self.table,
            "ProjectionExpression": "k",
            "FilterExpression": "begins_with(k, :prefix)",
            "ExpressionAttributeValues": {":prefix": {"S": prefix}},
            "ConsistentRead": True,
        }
        found: list[str] = []
        while True:
            reply = self._call("scan", **request)
            found.extend(item["k"]["S"] for item in reply.get("Items", ()))
            if "LastEvaluatedKey" not in reply:
                return iter(found)
            request["ExclusiveStartKey"] = reply["LastEvaluatedKey"]

    def _cas(self, key: str, value: bytes, version: Any) -> Any:
        token = secrets.token_hex(_TOKEN_BYTES)
        request: dict[str, Any] = {"TableName": self.table, "Item": self._item(key, value, token)}
        if version is None:
            request["ConditionExpression"] = "attribute_not_exists(k)"
        else:
            request["ConditionExpression"] = "r = :read"
            request["ExpressionAttributeValues"] = {":read": {"S": version}}
        lost: Exception | None = None  # the first reply lost: from then on, never a ConflictError
        failure: Exception | None = None
        for _ in self.retry.attempts():
            try:
                self._attempt("put_item", ReturnValuesOnConditionCheckFailure="ALL_OLD", **request)
                return token  # the version written: the next compare-and-set needs no read
            except _Transient as exc:
                failure = exc.cause
                if not exc.applied:
                    continue
                lost = lost or exc.cause
                current = self._read_back(key, lost)
            except boto_errors.ClientError as exc:
                if _code(exc) != "ConditionalCheckFailedException":
                    error = self._refused("a conditional put", exc)
                    if lost is not None:
                        raise OutcomeUnknownError(
                            f"{error}, after a conditional put whose reply was lost ({lost})"
                        ) from exc
                    raise error from exc
                old = exc.response.get("Item")  # DynamoDB returns it; engines without the option do not
                if lost is None:
                    # No item: absent on DynamoDB, or an engine that does not return it; mdss does not guess.
                    raise ConflictError(
                        f"key {key!r} changed since it was read",
                        current=None if old is None else self._record(old),
                        current_known=old is not None,
                    ) from None
                current = self._record(old).version if old is not None else self._read_back(key, lost)
                if current == token:
                    return token
                raise OutcomeUnknownError(
                    f"{self.where}: a conditional put of {key!r} lost its reply ({lost}) and the key changed since"
                ) from lost
            except boto_errors.BotoCoreError as exc:
                raise self._refused("a conditional put", exc) from exc
            if current == token:
                return token
            if current != version:
                raise OutcomeUnknownError(
                    f"{self.where}: a conditional put of {key!r} lost its reply ({lost}) and the key changed since: "
                    "it may hold this write with another on top, or another write instead"
                ) from lost
            # Still the revision read: the request has not been applied (it may yet), so resending is safe.
        if lost is not None:
            raise OutcomeUnknownError(
                f"{self.where}: a conditional put of {key!r} got no reply within its retry budget: {lost}"
            ) from lost
        raise StoreRefusedError(f"{self.where}: a conditional put of {key!r} failed: {failure}") from failure

    # -- expiry: DynamoDB's TTL, fenced item by item -----------------------------------------

    def expire_keys(self, keys: Sequence[str], at_ms: int, head: str, version: Any, *, gen: int) -> bool:
        """Set the TTL attribute of each of ``keys`` to ``at_ms`` in epoch seconds (rounded up: never earlier), only on
        an item that exists and that no :meth:`persist_keys` of generation ``gen`` or later reached; ``head`` and
        ``version`` are not checked (no transaction: the fence does that). Whether every key took it."""
        if self.ttl_attribute is None:
            return False
        at = -(-at_ms // 1000)
        return all(self._fenced(keys, "SET #t = :at", {":at": {"N": str(at)}, ":g": {"N": str(gen)}}))

    def persist_keys(self, keys: Sequence[str], *, gen: int) -> None:
        """Remove the TTL attribute of each of ``keys`` and fence it at generation ``gen``: from then on only an
        :meth:`expire_keys` of a later generation sets it again. A key absent, or fenced at ``gen`` or later already
        (by another process's persist), is left as it is."""
        if self.ttl_attribute is not None:
            self._fenced(keys, "SET #f = :g REMOVE #t", {":g": {"N": str(gen)}})

    def _fenced(self, keys: Sequence[str], update: str, values: dict[str, Any]) -> list[bool]:
        """``update`` on each of ``keys`` (one ``UpdateItem`` each, ``concurrency`` at once: DynamoDB has no batch
        update) if the item exists and its fence is below ``:g``; whether each did. One round trip in ``stats.calls``.
        Idempotent: a resend after a lost reply sets the same or is refused by its own fence."""

        def one(part: Sequence[str]) -> bool:
            try:
                self._call(
                    "update_item",
                    TableName=self.table,
                    Key=self._key(part[0]),
                    UpdateExpression=update,
                    ConditionExpression="attribute_exists(k) AND (attribute_not_exists(#f) OR #f < :g)",
                    ExpressionAttributeNames={"#t": self.ttl_attribute, "#f": _FENCE},
                    ExpressionAttributeValues=values,
                )
            except StoreError as exc:
                if _code(exc.__cause__) != "ConditionalCheckFailedException":
                    raise
                return False
            return True

        unique = list(dict.fromkeys(keys))
        if not unique:
            return []
        done = self._parallel(one, _chunks(unique, 1))
        self.stats.add(calls=1)
        return done

    def _read_back(self, key: str, lost: Exception) -> str | None:
        """The key's revision after a lost reply (``None``: absent); OutcomeUnknownError if it cannot be read."""
        try:
            record = self._get(key)
        except StoreError as exc:
            raise OutcomeUnknownError(
                f"{self.where}: a conditional put of {key!r} lost its reply ({lost}) and the key cannot be read: {exc}"
            ) from exc
        return None if record is None else record.version

    # -- the table ---------------------------------------------------------------------

    def _open_table(self, create: bool) -> None:
        """Check the table's key schema; with ``create``, make a missing table (on-demand), wait for it, and enable its
        TTL on :attr:`ttl_attribute`."""
        created = False
        try:
            table = self._describe()
        except StoreError as exc:
            if not create or _code(exc.__cause__) != "ResourceNotFoundException":
                raise
            created = True
            try:
                self._call(
                    "create_table",
                    TableName=self.table,
                    AttributeDefinitions=[{"AttributeName": "k", "AttributeType": "S"}],
                    KeySchema=[{"AttributeName": "k", "KeyType": "HASH"}],
                    BillingMode="PAY_PER_REQUEST",
                )
            except StoreError as again:
                if _code(again.__cause__) != "ResourceInUseException":  # else: another process created it first
                    raise
                created = False
            table = self._describe()
        for _ in self.retry.attempts():
            if table.get("TableStatus") == "ACTIVE":
                break
            table = self._describe()
        else:
            raise StoreUnavailableError(f"{self.where} is {table.get('TableStatus')}, not ACTIVE, after its budget")
        try:
            schema = {(k["AttributeName"], k["KeyType"]) for k in table["KeySchema"]}
            types = {a["AttributeName"]: a["AttributeType"] for a in table["AttributeDefinitions"]}
        except (KeyError, TypeError) as exc:
            raise StoreError(f"{self.where}: the endpoint described the table without a key schema ({exc!r})") from exc
        if schema != {("k", "HASH")} or types.get("k") != "S":
            raise StoreError(
                f"{self.where} has the key schema {sorted(schema)}; mdss needs a string partition key named k "
                "and no sort key (see docs/dynamodb.md)"
            )
        if created and self.ttl_attribute is not None:
            self.ttl_enabled = self._enable_ttl()

    def _describe(self) -> dict[str, Any]:
        """The table's description; :class:`StoreError` when the endpoint does not answer as DynamoDB does (botocore
        takes a body it cannot parse, an HTML page or ``{}``, for a reply without fields)."""
        table = self._call("describe_table", TableName=self.table).get("Table")
        if not isinstance(table, dict):
            raise StoreError(
                f"{self.where}: the endpoint did not answer DescribeTable as DynamoDB does: is it DynamoDB?"
            )
        return table

    def _enable_ttl(self) -> bool:
        """Enable the table's TTL on :attr:`ttl_attribute`; whether the engine did. One that refuses (dynalite does not
        know the operation; an IAM policy without ``dynamodb:UpdateTimeToLive``) leaves the table working, its expired
        sets reclaimed by their next write or a sweep: :attr:`ttl_enabled` says so, and docs/dynamodb.md how to enable
        it by hand."""
        try:
            self._call(
                "update_time_to_live",
                TableName=self.table,
                TimeToLiveSpecification={"Enabled": True, "AttributeName": self.ttl_attribute},
            )
        except StoreUnavailableError:
            raise
        except StoreError:
            return False
        return True

    def _close(self) -> None:
        self._executor.shutdown(wait=False)
        self.client.close()


@functools.cache
def _models() -> botocore.loaders.Loader:
    """botocore's loader of service models, shared by every store of the process: a session of its own parses the
    models' JSON again (about 40 ms of the 45 a client takes to make; 7 ms with them cached). The loader only caches
    what it read from botocore's files, so sharing it shares no credentials or settings."""
    return botocore.loaders.create_loader()


def _client(region: str | None, endpoint: str | None, timeout: float, concurrency: int) -> Any:
    """A DynamoDB client (botocore's, which boto3.client makes too) that never retries by itself, with ``timeout``
    per request."""
    config = botocore.config.Config(
        retries={"total_max_attempts": 1, "mode": "standard"},
        connect_timeout=timeout,
        read_timeout=timeout,
        max_pool_connections=concurrency + 32,  # the batch threads, and as many threads as a process shares a store
    )
    session = botocore.session.get_session()  # its own credentials chain, as boto3.client() makes
    session.register_component("data_loader", _models())
    try:
        return session.create_client("dynamodb", region_name=region, endpoint_url=endpoint, config=config)
    except boto_errors.NoRegionError:
        raise InvalidArgumentError("a dynamodb:// store needs region=... (or AWS_DEFAULT_REGION)") from None
    except ValueError as exc:  # a malformed endpoint URL
        raise InvalidArgumentError(f"bad DynamoDB option endpoint={endpoint!r}: {exc}") from None
