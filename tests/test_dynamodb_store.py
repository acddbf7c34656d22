"""What only the DynamoDB store needs: URL options, the table, lost replies, throttling, unprocessed
batches, the 400 KB item limit, capacity units. On dynalite; failures are injected by patching the client.
"""

from __future__ import annotations

import json
import time
from typing import Any

import boto3
import botocore.config
import pytest
from botocore.exceptions import ClientError, EndpointConnectionError, ReadTimeoutError
from click.testing import CliRunner

import mdss
from mdss._writer import check_chunk_size, largest_node_bytes
from mdss.cli import cli
from mdss.stores.dynamodb import DynamoDBStore


@pytest.fixture
def url(dynamodb_url) -> str:
    if "{table}" not in dynamodb_url:
        pytest.skip("these tests create tables of their own: not on MDSS_DYNAMODB_URL")
    return dynamodb_url.replace("{table}", f"mdss-{time.monotonic_ns()}")


@pytest.fixture
def store(url):
    with mdss.open_store(url + "&retry_budget=1&backoff=0.001") as opened:
        yield opened


def _endpoint(url: str) -> str:
    return url.split("endpoint=")[1].split("&")[0]


def client_error(code: str, status: int = 400, **extra: Any) -> ClientError:
    return ClientError(
        {"Error": {"Code": code, "Message": code}, "ResponseMetadata": {"HTTPStatusCode": status}, **extra}, "X"
    )


class Patched:
    """The store's boto3 client, with some operations replaced: ``Patched(client, put_item=fn)``;
    ``fn(real, **request)`` gets the real operation."""

    def __init__(self, client: Any, **replaced: Any) -> None:
        self._client, self._replaced = client, replaced

    def __getattr__(self, name: str) -> Any:
        real = getattr(self._client, name)
        if name in self._replaced:
            return lambda **request: self._replaced[name](real, **request)
        return real


def patch(store: DynamoDBStore, **replaced: Any) -> None:
    store.client = Patched(store.client, **replaced)


# -- URL and table ---------------------------------------------------------------------


def test_url_options(url) -> None:
    with mdss.open_store(f"{url}&namespace=app&retries=2&backoff=0.01&retry_budget=3&timeout=2&concurrency=3") as s:
        assert (s.namespace, s.table, s.retry.max_attempts, s.retry.base, s.retry.budget) == (
            "app",
            s.table,
            3,
            0.01,
            3,
        )
        assert s.client.meta.config.read_timeout == 2 and s.client.meta.config.retries["total_max_attempts"] == 1


@pytest.mark.parametrize(
    "query, named",
    [
        ("foo=1", "foo"),
        ("retries=abc", "retries"),
        ("retries=-1", "retries"),
        ("backoff=soon", "backoff"),
        ("retry_budget=-2", "retry_budget"),
        ("timeout=0", "timeout"),
        ("concurrency=0", "concurrency"),
        ("create_table=maybe", "create_table"),
        ("endpoint=", "endpoint"),
    ],
)
def test_bad_url_options_are_named(url, query, named) -> None:
    with pytest.raises(mdss.InvalidArgumentError, match=named):
        mdss.open_store(f"{url}&{query}")


def test_a_table_name_and_a_region_are_needed(url, monkeypatch) -> None:
    with pytest.raises(mdss.InvalidArgumentError, match="table name"):
        mdss.open_store(url.replace(url.split("//")[1].split("?")[0], "ab"))
    monkeypatch.delenv("AWS_DEFAULT_REGION", raising=False)
    monkeypatch.delenv("AWS_REGION", raising=False)
    with pytest.raises(mdss.InvalidArgumentError, match="region"):
        mdss.open_store(url.replace("region=us-east-1&", ""))


def test_a_missing_table_is_a_clear_error_unless_created(url) -> None:
    with pytest.raises(mdss.StoreError, match="does not exist.*create_table=true"):
        mdss.open_store(url.replace("&create_table=true", ""))
    with mdss.open_store(url) as created:
        table = created.client.describe_table(TableName=created.table)["Table"]
        assert table["BillingModeSummary"]["BillingMode"] == "PAY_PER_REQUEST"
    with mdss.open_store(url.replace("&create_table=true", "")) as existing:  # now it exists
        existing.put("a:b:h", b"1")


def test_a_table_of_another_layout_is_refused(url, store) -> None:
    other = f"{store.table}-x"
    store.client.create_table(
        TableName=other,
        AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
        KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
        BillingMode="PAY_PER_REQUEST",
    )
    with pytest.raises(mdss.StoreError, match="string partition key named k"):
        mdss.open_store(url.replace(store.table, other))


def test_a_ready_made_client_must_not_retry(url) -> None:
    endpoint = _endpoint(url)
    with pytest.raises(mdss.InvalidArgumentError, match="total_max_attempts"):
        DynamoDBStore("mdss-given", client=boto3.client("dynamodb", endpoint_url=endpoint))
    config = botocore.config.Config(retries={"total_max_attempts": 1})
    with DynamoDBStore(
        "mdss-given", client=boto3.client("dynamodb", endpoint_url=endpoint, config=config), create_table=True
    ) as given:
        board = mdss.SortedSet(given, "b")
        board.add("ann", 3)
        assert board.rank("ann") == 1


def test_an_unreachable_endpoint_is_unavailable_in_bounded_time(url) -> None:
    from redis_servers import free_port

    start = time.monotonic()
    with pytest.raises(mdss.StoreUnavailableError) as raised:
        mdss.open_store(url.replace(_endpoint(url), f"http://127.0.0.1:{free_port()}") + "&retry_budget=0.5")
    assert not isinstance(raised.value, mdss.OutcomeUnknownError) and time.monotonic() - start < 5


# -- compare-and-set and lost replies ------------------------------------------------


def test_a_cas_whose_reply_is_lost_but_landed_is_success(store) -> None:
    store.cas("a:b:h", b"v1", None)
    seen = store.get("a:b:h")

    def landed_then_lost(real, **request):
        real(**request)
        raise ReadTimeoutError(endpoint_url="dynalite")

    patch(store, put_item=landed_then_lost)
    store.cas("a:b:h", b"v2", seen.version)
    assert store.get("a:b:h").value == b"v2"


def test_a_lost_reply_with_another_writer_on_top_is_unknown_not_conflict(store) -> None:
    store.cas("a:b:h", b"v1", None)
    seen = store.get("a:b:h")
    client = store.client

    def landed_then_lost_then_overwritten(real, **request):
        real(**request)
        client.put_item(TableName=store.table, Item={"k": {"S": "a:b:h"}, "v": {"B": b"other"}, "r": {"S": "x"}})
        raise ReadTimeoutError(endpoint_url="dynalite")

    patch(store, put_item=landed_then_lost_then_overwritten)
    with pytest.raises(mdss.OutcomeUnknownError, match="changed since"):
        store.cas("a:b:h", b"v2", seen.version)


def test_a_request_that_never_arrived_is_resent(store) -> None:
    calls = []

    def lost_once(real, **request):
        calls.append(1)
        if len(calls) == 1:
            raise ReadTimeoutError(endpoint_url="dynalite")  # the request never reached the table
        return real(**request)

    patch(store, put_item=lost_once)
    store.cas("a:b:h", b"v1", None)
    assert store.get("a:b:h").value == b"v1" and len(calls) == 2


def test_a_lost_request_landing_before_its_resend_is_success(store) -> None:
    """The first request arrives late, after the read-back: the resend fails its condition, and the item
    (returned by DynamoDB, read again on engines that do not return it) holds our revision."""
    delayed, sent = [], []

    def late(real, **request):
        sent.append(1)
        if len(sent) == 1:
            delayed.append(lambda: real(**request))
            raise ReadTimeoutError(endpoint_url="dynalite")
        return real(**request)

    def read_back(real, **request):
        reply = real(**request)
        while delayed:  # the lost request lands now
            delayed.pop()()
        return reply

    patch(store, put_item=late, get_item=read_back)
    store.cas("a:b:h", b"v1", None)
    assert store.get("a:b:h").value == b"v1" and len(sent) == 2


@pytest.mark.parametrize("ours", [True, False])
def test_the_item_returned_on_a_failed_condition_settles_a_lost_reply(store, ours) -> None:
    tokens = []

    def lost_then_failed(real, **request):
        tokens.append(request["Item"]["r"]["S"])
        if len(tokens) == 1:
            raise ReadTimeoutError(endpoint_url="dynalite")
        item = {"k": {"S": "a:b:h"}, "v": {"B": b"v1"}, "r": {"S": tokens[0] if ours else "someone"}}
        raise client_error("ConditionalCheckFailedException", Item=item)

    store.cas("a:b:h", b"v0", None)
    seen = store.get("a:b:h")
    patch(store, put_item=lost_then_failed)
    if ours:
        store.cas("a:b:h", b"v1", seen.version)
    else:
        with pytest.raises(mdss.OutcomeUnknownError):
            store.cas("a:b:h", b"v1", seen.version)


def test_a_cas_cut_for_good_is_unknown_in_bounded_time(store) -> None:
    def lost(real, **request):
        raise ReadTimeoutError(endpoint_url="dynalite")

    patch(store, put_item=lost)
    start = time.monotonic()
    with pytest.raises(mdss.OutcomeUnknownError):
        store.cas("a:b:h", b"v1", None)
    assert time.monotonic() - start < 3


def test_a_cas_that_never_connected_is_unavailable_not_unknown(store) -> None:
    def refused(real, **request):
        raise EndpointConnectionError(endpoint_url="dynalite")

    patch(store, put_item=refused)
    with pytest.raises(mdss.StoreUnavailableError) as raised:
        store.cas("a:b:h", b"v1", None)
    assert not isinstance(raised.value, mdss.OutcomeUnknownError)


def test_sorted_set_commits_through_lost_replies(store) -> None:
    board = mdss.SortedSet(store, "b", chunk_size=4, gc_grace=0)
    board.add_many({f"m{i}": i for i in range(20)})
    flips = iter([True, False] * 50)

    def every_other_reply_lost(real, **request):
        reply = real(**request)
        if next(flips):
            raise ReadTimeoutError(endpoint_url="dynalite")
        return reply

    patch(store, put_item=every_other_reply_lost)
    for _ in range(10):
        board.incr("m3", 1)
    assert board.score("m3") == 13 and board.check() == []


# -- throttling and unprocessed batches -------------------------------------------------


@pytest.mark.parametrize(
    "code", ["ProvisionedThroughputExceededException", "ThrottlingException", "RequestLimitExceeded"]
)
def test_throttling_is_retried_then_unavailable(store, code) -> None:
    throttled = []

    def twice(real, **request):
        throttled.append(1)
        if len(throttled) <= 2:
            raise client_error(code)
        return real(**request)

    patch(store, put_item=twice, get_item=lambda real, **request: (_ for _ in ()).throw(client_error(code)))
    store.put("a:b:n:1", b"x")
    store.cas("a:b:h", b"x", None)  # throttled: nothing applied, so no read-back is needed
    assert len(throttled) == 4
    with pytest.raises(mdss.StoreUnavailableError, match="retry budget") as raised:
        store.get("a:b:h")
    assert not isinstance(raised.value, mdss.OutcomeUnknownError)


def test_a_throttled_head_refuses_a_set_write_rather_than_doubting_it(store) -> None:
    """A hot head whose conditional puts are all throttled applied nothing, yet a set's write reported
    OutcomeUnknownError after proving for seconds more (a helper's probe): now StoreRefusedError, safe to retry."""
    board = mdss.SortedSet(store, "hot")
    board.add("ann", 1)

    def throttled(real, **request):
        if request["Item"]["k"]["S"].endswith(":h"):
            raise client_error("ProvisionedThroughputExceededException")
        return real(**request)

    real = store.client
    patch(store, put_item=throttled)
    with pytest.raises(mdss.StoreRefusedError) as raised:
        board.incr("ann", 1)
    assert not isinstance(raised.value, mdss.OutcomeUnknownError)
    store.client = real
    assert board.score("ann") == 1 and board.incr("ann", 1) == 2


def test_unprocessed_items_and_keys_are_resent(store) -> None:
    rounds = {"write": 0, "get": 0}

    def half_written(real, **request):
        rounds["write"] += 1
        requests = request["RequestItems"][store.table]
        half = max(len(requests) // 2, 1)
        reply = real(**{**request, "RequestItems": {store.table: requests[:half]}})
        return {**reply, "UnprocessedItems": {store.table: requests[half:]} if requests[half:] else {}}

    def half_read(real, **request):
        rounds["get"] += 1
        wanted = request["RequestItems"][store.table]
        keys = wanted["Keys"]
        half = max(len(keys) // 2, 1)
        reply = real(**{**request, "RequestItems": {store.table: {**wanted, "Keys": keys[:half]}}})
        if keys[half:]:
            reply["UnprocessedKeys"] = {store.table: {**wanted, "Keys": keys[half:]}}
        return reply

    patch(store, batch_write_item=half_written, batch_get_item=half_read)
    items = {f"a:b:n:{i}": bytes([i]) for i in range(20)}
    store.put_many(items)
    assert store.get_many(list(items)) == list(items.values())
    assert rounds["write"] == rounds["get"] == 6  # 20 requests: 10 done, then 5, 2, 1, 1, 1


def test_items_unprocessed_for_good_are_unavailable(store) -> None:
    def never(real, **request):
        return {"UnprocessedItems": request["RequestItems"]}

    patch(store, batch_write_item=never)
    with pytest.raises(mdss.StoreUnavailableError, match="unprocessed"):
        store.put_many({"a:b:n:1": b"x", "a:b:n:2": b"y"})


# -- the 400 KB item --------------------------------------------------------------------


def test_chunk_sizes_whose_nodes_do_not_fit_are_refused_saying_what_fits(store) -> None:
    check_chunk_size(1000, store.max_value_bytes, "DynamoDBStore")  # the default fits, with the longest members
    with pytest.raises(
        mdss.InvalidArgumentError, match=r"chunk_size=2000 makes nodes .* use chunk_size=(\d+)"
    ) as raised:
        check_chunk_size(2000, store.max_value_bytes, "DynamoDBStore")
    fits = int(raised.value.args[0].rsplit("=", 1)[1].split()[0])
    check_chunk_size(fits, store.max_value_bytes, "DynamoDBStore")
    with pytest.raises(mdss.InvalidArgumentError):
        check_chunk_size(fits + 1, store.max_value_bytes, "DynamoDBStore")
    check_chunk_size(100_000, mdss.open_store("memory://").max_value_bytes, "MemoryStore")  # no limit, no check
    with pytest.raises(mdss.InvalidArgumentError, match="use chunk_size"):
        mdss.SortedSet(store, "too-big", chunk_size=2000)  # refused when the set opens, before any write
    # The estimate is real: a full entry set of the longest members at that size is accepted by the engine.
    board = mdss.SortedSet.load(store, "big", {f"{i:05d}" + "é" * 125 + "x": i for i in range(fits)}, chunk_size=fits)
    assert board.check() == [] and largest_node_bytes(fits) <= store.max_value_bytes


def test_keys_too_long_for_a_partition_key_are_refused(store) -> None:
    with pytest.raises(mdss.InvalidArgumentError, match="2048"):
        mdss.SortedSet(store, "s" * 3000).add("a", 1)


# -- capacity, listing, bench --------------------------------------------------------


def test_capacity_units_are_counted(store) -> None:
    store.stats.reset()
    store.put("a:b:n:small", b"x")
    store.put("a:b:n:big", b"x" * 5000)  # 5 KB: 5 write units
    store.get("a:b:n:big")  # up to 8 KB, strongly consistent: 2 read units
    counts = store.stats.snapshot()
    assert (counts["write_units"], counts["read_units"]) == (6, 2)


def test_keys_pages_through_the_scan(store) -> None:
    store.put_many({f"a:b:n:{i:03d}": b"x" * 200_000 for i in range(12)})  # 2.4 MB: several 1 MB pages
    store.put("a:c:h", b"")
    assert sorted(store.keys("a:b:")) == [f"a:b:n:{i:03d}" for i in range(12)]


def test_bench_measures_the_seed_001_anchor(url, tmp_path) -> None:
    out = tmp_path / "bench.json"
    args = [
        "bench",
        "--store",
        url,
        "--members",
        "300",
        "--samples",
        "20",
        "--singles",
        "40",
        "--batch-size",
        "300",
        "--board-owners",  # a small board: this test is about the DynamoDB anchor, not the board row
        "100",
        "--board-posts",
        "30",
        "--json",
        str(out),
    ]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    figures = json.loads(out.read_text())
    anchor = figures["dynamodb_count"]
    assert anchor["round_trips_per_median_rank"] >= 2 and anchor["rank_median_p50_us"] > 0
    assert figures["mdss"]["round_trips_per_median_rank"] <= 3 and "mdss / dynamodb_count" in result.output


@pytest.mark.parametrize("body", [b"<html><body>Welcome</body></html>", b"{}", b'{"Table": {"TableStatus": "ACTIVE"}}'])
def test_an_endpoint_that_is_not_dynamodb_is_a_store_error(body: bytes, monkeypatch) -> None:
    """An endpoint answering 200 with a web page (botocore reads it as a reply without fields) raised a bare
    KeyError('Table') from open_store (a helper's probe)."""
    for name, value in (("AWS_ACCESS_KEY_ID", "x"), ("AWS_SECRET_ACCESS_KEY", "x"), ("AWS_EC2_METADATA_DISABLED", "1")):
        monkeypatch.setenv(name, value)  # signed requests, so that they reach the endpoint
    import http.server
    import threading

    class Web(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Web)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        endpoint = f"http://127.0.0.1:{server.server_address[1]}"
        with pytest.raises(mdss.StoreError, match="DynamoDB|key schema"):
            mdss.open_store(f"dynamodb://tbl?region=us-east-1&endpoint={endpoint}&retry_budget=0.5")
    finally:
        server.shutdown()
        server.server_close()


def test_a_batch_write_refused_after_other_batches_landed_is_no_refusal(store) -> None:
    """put_many sends batches of 25 at once; one refused (throttled past the budget) said nothing was written while
    the others had landed (a review): StoreUnavailableError now, StoreRefusedError only when nothing could be."""
    calls = []

    def second_refused(real, **request):
        calls.append(1)
        if len(calls) > 1:
            raise client_error("ProvisionedThroughputExceededException")
        return real(**request)

    patch(store, batch_write_item=second_refused)
    with pytest.raises(mdss.StoreUnavailableError) as raised:
        store.put_many({f"a:b:n:{i}": b"x" for i in range(30)})
    assert not isinstance(raised.value, mdss.StoreRefusedError)
    calls.clear()
    calls.append(1)  # every call refused now
    with pytest.raises(mdss.StoreRefusedError):
        store.put_many({f"a:b:n:{i}": b"y" for i in range(5)})
