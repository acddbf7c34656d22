"""An in-memory stand-in for a boto3 DynamoDB client that enforces the limits of DynamoDB proper where
dynalite does not (or not all): 100 keys per ``BatchGetItem`` and at most 16 MB of items per reply (the
rest in ``UnprocessedKeys``), 25 items and 16 MB per ``BatchWriteItem``, no key twice in one batch, 400 KB
per item, 1 MB of items read per ``Scan`` page, and the item ``ReturnValuesOnConditionCheckFailure=ALL_OLD``
puts into a ``ConditionalCheckFailedException``. It understands exactly the requests the DynamoDB store
makes; anything else fails loudly.
"""

from __future__ import annotations

import threading
from collections import Counter
from types import SimpleNamespace
from typing import Any

from botocore.exceptions import ClientError

ITEM_LIMIT, BATCH_BYTES, SCAN_PAGE = 400 * 1024, 16 * 1024 * 1024, 1024 * 1024


def error(code: str, message: str, **extra: Any) -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": message}, "message": message, **extra}, code)


def item_size(item: dict[str, Any]) -> int:
    """DynamoDB's item size: attribute names plus values (UTF-8 strings, raw binaries)."""
    total = 0
    for name, value in item.items():
        ((kind, data),) = value.items()
        total += len(name.encode()) + (len(data.encode()) if kind == "S" else len(data))
    return total


class StrictClient:
    """``StrictClient()``: a table named by whatever ``TableName`` the store uses; ``requests`` counts calls
    per operation; ``unprocessed`` (a callable of a key) leaves keys unprocessed as throttling would."""

    meta = SimpleNamespace(config=SimpleNamespace(retries={"total_max_attempts": 1}))

    def __init__(self) -> None:
        self.items: dict[str, dict[str, Any]] = {}
        self.requests: Counter[str] = Counter()
        self.unprocessed = lambda key: False
        self._lock = threading.Lock()

    def _count(self, operation: str) -> None:
        with self._lock:
            self.requests[operation] += 1

    def describe_table(self, TableName: str) -> dict[str, Any]:
        self._count("describe_table")
        return {
            "Table": {
                "TableStatus": "ACTIVE",
                "KeySchema": [{"AttributeName": "k", "KeyType": "HASH"}],
                "AttributeDefinitions": [{"AttributeName": "k", "AttributeType": "S"}],
            }
        }

    def close(self) -> None:
        pass

    @staticmethod
    def _check_item(item: dict[str, Any]) -> None:
        if item_size(item) > ITEM_LIMIT:
            raise error("ValidationException", "Item size has exceeded the maximum allowed size")

    def _holds(self, key: str, condition: str | None, values: dict[str, Any] | None) -> bool:
        old = self.items.get(key)
        if condition is None:
            return True
        if condition == "attribute_not_exists(k)":
            return old is None
        if condition == "r = :read":
            return old is not None and old["r"] == values[":read"]  # type: ignore[index]
        if condition == "attribute_not_exists(k) OR r = :read":
            return old is None or old["r"] == values[":read"]  # type: ignore[index]
        raise AssertionError(f"condition {condition!r} not understood")

    def put_item(
        self,
        TableName: str,
        Item: dict[str, Any],
        ConditionExpression: str | None = None,
        ExpressionAttributeValues: dict[str, Any] | None = None,
        ReturnValuesOnConditionCheckFailure: str = "NONE",
        ReturnConsumedCapacity: str = "NONE",
    ) -> dict[str, Any]:
        self._count("put_item")
        self._check_item(Item)
        key = Item["k"]["S"]
        with self._lock:
            if not self._holds(key, ConditionExpression, ExpressionAttributeValues):
                old = self.items.get(key)
                extra = (
                    {"Item": dict(old)} if old is not None and ReturnValuesOnConditionCheckFailure == "ALL_OLD" else {}
                )
                raise error("ConditionalCheckFailedException", "The conditional request failed", **extra)
            self.items[key] = dict(Item)
        return {}

    def get_item(self, TableName: str, Key: dict[str, Any], ConsistentRead: bool, **_: Any) -> dict[str, Any]:
        self._count("get_item")
        assert ConsistentRead is True
        item = self.items.get(Key["k"]["S"])
        return {} if item is None else {"Item": dict(item)}

    def delete_item(
        self,
        TableName: str,
        Key: dict[str, Any],
        ConditionExpression: str | None = None,
        ExpressionAttributeValues: dict[str, Any] | None = None,
        **_: Any,
    ) -> dict[str, Any]:
        self._count("delete_item")
        key = Key["k"]["S"]
        with self._lock:
            if not self._holds(key, ConditionExpression, ExpressionAttributeValues):
                raise error("ConditionalCheckFailedException", "The conditional request failed")
            self.items.pop(key, None)
        return {}

    def batch_get_item(self, RequestItems: dict[str, Any], **_: Any) -> dict[str, Any]:
        self._count("batch_get_item")
        ((table, wanted),) = RequestItems.items()
        keys = [k["k"]["S"] for k in wanted["Keys"]]
        assert wanted.get("ConsistentRead") is True
        if not 1 <= len(keys) <= 100:
            raise error("ValidationException", "Too many items requested for the BatchGetItem call")
        if len(set(keys)) != len(keys):
            raise error("ValidationException", "Provided list of item keys contains duplicates")
        found, left, size = [], [], 0
        for key in keys:
            item = self.items.get(key)
            if self.unprocessed(key) or (item is not None and size + item_size(item) > BATCH_BYTES):
                left.append({"k": {"S": key}})
            elif item is not None:
                found.append(dict(item))
                size += item_size(item)
        unprocessed = {table: {**wanted, "Keys": left}} if left else {}
        return {"Responses": {table: found}, "UnprocessedKeys": unprocessed}

    def batch_write_item(self, RequestItems: dict[str, Any], **_: Any) -> dict[str, Any]:
        self._count("batch_write_item")
        ((table, requests),) = RequestItems.items()
        if not 1 <= len(requests) <= 25:
            raise error("ValidationException", "Too many items requested for the BatchWriteItem call")
        keys = [(r.get("PutRequest", {}).get("Item") or r["DeleteRequest"]["Key"])["k"]["S"] for r in requests]
        if len(set(keys)) != len(keys):
            raise error("ValidationException", "Provided list of item keys contains duplicates")
        for r in requests:
            if "PutRequest" in r:
                self._check_item(r["PutRequest"]["Item"])
        if sum(item_size(r["PutRequest"]["Item"]) for r in requests if "PutRequest" in r) > BATCH_BYTES:
            raise error("ValidationException", "Item collection size limit exceeded")
        left = []
        with self._lock:
            for key, r in zip(keys, requests):
                if self.unprocessed(key):
                    left.append(r)
                elif "PutRequest" in r:
                    self.items[key] = dict(r["PutRequest"]["Item"])
                else:
                    self.items.pop(key, None)
        return {"UnprocessedItems": {table: left} if left else {}}

    def scan(
        self,
        TableName: str,
        ProjectionExpression: str,
        FilterExpression: str,
        ExpressionAttributeValues: dict[str, Any],
        ConsistentRead: bool,
        ExclusiveStartKey: dict[str, Any] | None = None,
        **_: Any,
    ) -> dict[str, Any]:
        self._count("scan")
        assert (ProjectionExpression, FilterExpression, ConsistentRead) == ("k", "begins_with(k, :prefix)", True)
        prefix = ExpressionAttributeValues[":prefix"]["S"]
        start = None if ExclusiveStartKey is None else ExclusiveStartKey["k"]["S"]
        items, size = [], 0
        keys = [key for key in sorted(self.items) if start is None or key > start]
        for n, key in enumerate(keys):
            if size >= SCAN_PAGE:  # a page ends after 1 MB of items read, matching the filter or not
                return {"Items": items, "LastEvaluatedKey": {"k": {"S": keys[n - 1]}}}
            size += item_size(self.items[key])
            if key.startswith(prefix):
                items.append({"k": {"S": key}})
        return {"Items": items}
