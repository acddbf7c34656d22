"""Expiry on DynamoDB's own TTL (``DynamoDBStore.expire_keys``, ``persist_keys``; ``mdss._expiry``), on dynalite.

dynalite deletes nothing by TTL (it has no ``UpdateTimeToLive``): :func:`sweep` plays DynamoDB's TTL process, deleting
every item whose TTL attribute has passed a given second. A fake clock (``mdss._head.clock``) makes moments exact.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

import boto3
import botocore.config
import pytest
import test_expiry

import mdss
from mdss import _head, _snapshot
from mdss.stores.dynamodb import DynamoDBStore

START = test_expiry.START
clock = test_expiry.clock  # the fake head clock: test_expiry's fixture


@pytest.fixture
def url(dynamodb_url) -> str:
    if "{table}" not in dynamodb_url:
        pytest.skip("these tests create tables of their own: not on MDSS_DYNAMODB_URL")
    return dynamodb_url.replace("{table}", f"mdss-ttl-{time.monotonic_ns()}")


@pytest.fixture
def store(url):
    with mdss.open_store(url) as opened:
        yield opened


def items(store: DynamoDBStore) -> dict[str, dict[str, Any]]:
    """Every item of the store's table, by key, straight through boto3."""
    found, request = {}, {"TableName": store.table, "ConsistentRead": True}
    while True:
        reply = store.client.scan(**request)
        found.update({item["k"]["S"]: item for item in reply["Items"]})
        if "LastEvaluatedKey" not in reply:
            return found
        request["ExclusiveStartKey"] = reply["LastEvaluatedKey"]


def ttl_of(store: DynamoDBStore, sset: mdss.SortedSet) -> dict[str, int | None]:
    """The TTL attribute (epoch seconds) of every node and note item of ``sset``; ``None``: none."""
    prefixes = (sset.keys.nodes, sset.keys.notes)
    found = {k: item for k, item in items(store).items() if k.startswith(prefixes)}
    return {k: int(item["ttl"]["N"]) if "ttl" in item else None for k, item in found.items()}


def sweep(store: DynamoDBStore, now: float) -> list[str]:
    """DynamoDB's TTL process at epoch second ``now``: delete every item whose TTL attribute has passed; their keys."""
    gone = [k for k, item in items(store).items() if "ttl" in item and int(item["ttl"]["N"]) <= now]
    for key in gone:
        store.client.delete_item(TableName=store.table, Key={"k": {"S": key}})
    return gone


def racing(monkeypatch: pytest.MonkeyPatch, race: Callable[[], None]) -> list[bool]:
    """Run ``race()`` once, right after the second snapshot read from now (in ``expire()``: its arming's, after the one
    that finds the set's members): the arming then goes on from a head read before it. A list that is non-empty once
    it ran."""
    real, ran, reads = _snapshot.snapshot, list[bool](), [0]

    def snapshot(engine: Any, *args: Any, **kwargs: Any) -> Any:
        snap = real(engine, *args, **kwargs)
        reads[0] += 1
        if not ran and reads[0] == 2:
            ran.append(True)
            race()
        return snap

    monkeypatch.setattr(_snapshot, "snapshot", snapshot)
    return ran


def filled(store: mdss.Store, name: str = "s", n: int = 10, remove: bool = True, **options: Any) -> mdss.SortedSet:
    """A set of ``n`` members, less ``m0`` with ``remove`` (a second commit: replaced nodes and a garbage note)."""
    sset = mdss.SortedSet(store, name, chunk_size=2, log_limit=0, **options)
    sset.add_many({f"m{i}": i for i in range(n)})
    if remove:
        sset.remove_many(["m0"])
    return sset


def test_nodes_and_notes_carry_the_ttl_in_epoch_seconds_and_persist_removes_it(store, clock) -> None:
    """expire() gives every node and note the head names the TTL attribute, the epoch second gc_grace after the moment
    (rounded up), never the head or the marker; writes after it give their nodes the same; persist() removes it from
    every item and fences them; writes after persist() give none."""
    assert store.expires_keys and store.ttl_attribute == "ttl" and store.ttl_enabled is False  # dynalite refuses
    sset = filled(store, gc_grace=0.25)
    before = store.stats.snapshot()
    assert sset.expire(100) is True
    due = math.ceil(START + 100 + 0.25)  # START + 101
    stamped = ttl_of(store, sset)
    named = set(sset.node_keys())
    assert named <= set(stamped) and all(stamped[k] == due for k in named)
    assert any(k.startswith(sset.keys.notes) and t == due for k, t in stamped.items())  # the garbage note
    spent = store.stats.since(before)
    assert spent["requests"] >= len(named) and spent["write_units"] >= len(named)
    whole = items(store)
    assert "ttl" not in whole[sset.keys.head] and "ttl" not in whole[sset.keys.marker]
    sset.add_many({"late": 50, "later": 51})  # follow(): its nodes get the set's expiry
    assert all(ttl_of(store, sset)[k] == due for k in sset.node_keys())
    assert sset.persist() is True
    after = items(store)
    assert all("ttl" not in after[k] and "f" in after[k] for k in sset.node_keys())
    sset.add("latest", 52)
    assert all(t is None for t in ttl_of(store, sset).values())
    assert sset.check() == [] and len(sset) == 12


def test_an_armer_whose_head_was_read_before_a_persist_is_refused(store, clock, monkeypatch) -> None:
    """The race, made deterministic: expire()'s arming reads the head and what it names, then another process's
    persist() (fence, cancel, clear) and a write run, then the arming sends its updates: every one is refused (the
    fence), the write's new nodes are not among them (only what the old head named is armed), and DynamoDB's TTL
    process, run far in the future, takes nothing of the live set."""
    sset = filled(store)
    other = mdss.SortedSet(store, "s", log_limit=0)  # its write makes new tree nodes

    named, gens = sset.node_keys(), []

    def race() -> None:
        gens.append(_head.Head.decode("h", store.get(sset.keys.head).value).gen)  # the head the arming read
        assert other.persist() is True  # the set had the moment before: expire() committed it
        other.add_many({"new1": 100, "new2": 101})

    raced = racing(monkeypatch, race)
    assert sset.expire(100) is True and raced
    assert all(t is None for t in ttl_of(store, sset).values())
    assert sweep(store, 2**40) == []
    assert sset.ttl() is None and len(sset) == 11 and sset.check() == []
    assert not set(named) >= set(sset.node_keys())  # the write's new nodes, never listed by the persist
    stale = store.expire_keys(named, (START + 1) * 1000, sset.keys.head, None, gen=gens[0])
    assert stale is False and all(t is None for t in ttl_of(store, sset).values())
    assert not store.expire_keys(["nope:n:absent"], (START + 1) * 1000, "nope:h", None, gen=10**9)
    assert "nope:n:absent" not in items(store)  # an update never creates an item


def test_fences_only_rise(store) -> None:
    """A persist of an older generation (a fencer that stalled) neither lowers a key's fence nor clears an expiry that
    an armer past the newer fence gave; armers at or below the fence are refused, above it they arm."""
    store.put_many({"a:s:n:1": b"x", "a:s:n:2": b"y"})
    keys = ["a:s:n:1", "a:s:n:2"]
    store.persist_keys(keys, gen=10)
    assert store.expire_keys(keys, 5_000, "a:s:h", None, gen=11)
    store.persist_keys(keys, gen=5)
    assert not store.expire_keys(keys, 9_000, "a:s:h", None, gen=10)
    stored = {k: (item["f"]["N"], item["ttl"]["N"]) for k, item in items(store).items()}
    assert stored == dict.fromkeys(keys, ("10", "5"))


def test_a_later_moment_outlives_a_stale_armer_and_the_ttl_sweep(store, clock, monkeypatch) -> None:
    """expire() to a later moment while an armer of the earlier one is stalled: the stalled one is refused, every
    item carries the later moment, and a TTL sweep after the first moment takes nothing; after the later moment (and
    the grace) it takes every node and note, the set reads as dropped, and its next write starts afresh."""
    sset = filled(store, remove=False, gc_grace=1)  # one commit: no replaced nodes (the process deletes those)
    other = mdss.SortedSet(store, "s", gc_grace=1)
    raced = racing(monkeypatch, lambda: other.expire(500))
    assert sset.expire(50) is True and raced
    stamped = ttl_of(store, sset)
    assert set(sset.node_keys()) <= set(stamped) and set(stamped.values()) == {START + 501}
    assert sweep(store, START + 51) == [] and sweep(store, START + 500) == []
    clock.now += 499
    assert len(sset) == 10 and sset.check() == []
    gone = sweep(store, START + 501)
    assert set(gone) == set(stamped)
    left = [k for k in items(store) if k.startswith(sset.keys.prefix)]
    assert sorted(left) == sorted([sset.keys.head, sset.keys.marker])
    clock.now += 1
    assert len(sset) == 0 and sset.check() == []
    fresh = mdss.SortedSet(store, "s", chunk_size=2)
    fresh.add("a", 1)
    assert [e.member for e in sset] == ["a"] and sset.check() == [] and fresh.ttl() is None


def test_expiry_calls_beside_a_writer_keep_the_invariant(store) -> None:
    """A writer commits while expire() and persist() move the moment (real clock, far moments): after each call no
    node a head without a moment names carries a TTL, none that one with a moment names carries one before it."""
    import threading

    sset = filled(store, n=6)
    stop, errors = threading.Event(), list[BaseException]()

    def write() -> None:
        writer, n = mdss.SortedSet(store, "s"), 0
        while not stop.is_set():
            try:
                writer.add(f"w{n % 5}", n)
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)
                return
            n += 1

    def invariant() -> None:
        head = _head.Head.decode("h", store.get(sset.keys.head).value)
        stamped = ttl_of(store, sset)
        left = [stamped.get(k) for k in sset.node_keys()]
        if head.expires is None:
            assert all(t is None for t in left), (head, left)
        else:
            assert all(t is None or t * 1000 >= head.expires for t in left), (head, left)

    thread = threading.Thread(target=write)
    thread.start()
    try:
        for seconds in (600, 300, 900, None, 450):
            sset.persist() if seconds is None else sset.expire(seconds)
            invariant()
    finally:
        stop.set()
        thread.join()
    assert not errors and sset.check() == []
    invariant()


def test_ttl_attribute_option_and_enabling_ttl_on_a_created_table(url) -> None:
    """``ttl_attribute`` names the attribute (empty: none, and no native expiry); a table mdss creates gets TTL enabled
    on it where the engine knows the operation; a bad name is refused."""
    enabled: list[dict[str, Any]] = []

    class Client:
        def __init__(self, real: Any) -> None:
            self.real = real

        def __getattr__(self, name: str) -> Any:
            return getattr(self.real, name)

        def update_time_to_live(self, **request: Any) -> dict[str, Any]:
            enabled.append(request)
            return {}

    endpoint = url.split("endpoint=")[1].split("&")[0]
    config = botocore.config.Config(retries={"total_max_attempts": 1})
    real = boto3.client("dynamodb", endpoint_url=endpoint, region_name="us-east-1", config=config)
    table = url.split("//")[1].split("?")[0]
    with DynamoDBStore(table, client=Client(real), create_table=True, ttl_attribute="expires_at") as store:
        assert store.ttl_enabled is True and store.expires_keys
        assert enabled == [
            {"TableName": table, "TimeToLiveSpecification": {"Enabled": True, "AttributeName": "expires_at"}}
        ]
        sset = filled(store, n=4)
        sset.expire(1000)
        assert all("expires_at" in items(store)[k] for k in sset.node_keys())
    with mdss.open_store(url + "&ttl_attribute=") as off:  # the table exists: nothing enabled
        assert off.ttl_attribute is None and not off.expires_keys and off.ttl_enabled is None
        assert off.max_value_bytes > store.max_value_bytes
        sset = filled(off, "t", n=4)
        sset.expire(1000)
        assert not any(k for k, item in items(off).items() if k.startswith(sset.keys.prefix) and len(item) > 3)
        assert not off.expire_keys(sset.node_keys(), 1, sset.keys.head, None, gen=99)
    for bad in ("k", "f", "x" * 256, 5):
        with pytest.raises(mdss.InvalidArgumentError, match="ttl_attribute"):
            DynamoDBStore(table, client=Client(real), ttl_attribute=bad)  # type: ignore[arg-type]
