"""The store contract: every backend (memory, SQLite, Redis, Redis Cluster, Riak) passes this suite."""

from __future__ import annotations

import importlib
import threading

import pytest

import mdss
from mdss.stores import BACKENDS
from mdss.stores.base import Stats, Store
from mdss.stores.capacity import CapacityStore
from mdss.stores.memory import MemoryStore

ALL_BYTES = bytes(range(256))


@pytest.fixture(params=["plain", "capped"])
def store(store_factory, request) -> mdss.Store:
    """Each selected backend, bare and under the capacity model (mdss.stores.capacity) with limits low enough that
    these tests are throttled, retried, and must still see exactly what they wrote."""
    inner = store_factory()
    if request.param == "plain":
        return inner
    return CapacityStore(inner, read_units=3000, write_units=1500, burst=0.004)


@pytest.fixture
def k(store):
    """Raw keys under the store's namespace: a Redis server is shared by the whole test session."""
    return lambda name: f"{store.namespace}:{name}"


ODD_KEYS = ["k ey", "ключ", "日本", "a%2Fb", "a/b", "{tag}x", "a:b:c", "x" * 500, "tab\tnl\n", "emoji🎮"]


def test_get_missing(store, k) -> None:
    assert store.get(k("t:missing")) is None
    assert store.get_many([k("t:missing"), k("t:other")]) == [None, None]


@pytest.mark.parametrize("value", [ALL_BYTES, b"", b"\x00", b"x" * 100_000], ids=["all-bytes", "empty", "nul", "100k"])
def test_put_get_roundtrip(store, k, value) -> None:
    store.put(k("t:k"), value)
    record = store.get(k("t:k"))
    assert record is not None and record.values == (value,) and record.value == value
    assert store.get_many([k("t:k")]) == [value]


def test_large_value(store, k) -> None:
    size = store.max_value_bytes or 4 << 20  # 4 MiB where the store has no limit of its own
    value = (bytes(range(256)) * (size // 256 + 1))[:size]
    store.put(k("t:big"), value)
    assert store.get(k("t:big")).value == value
    if store.max_value_bytes is not None:  # DynamoDB: refused before anything is sent, naming the key
        with pytest.raises(mdss.InvalidArgumentError, match="t:big2"):
            store.put(k("t:big2"), value + b"x")
        assert store.get(k("t:big2")) is None


def test_overwrite_and_delete(store, k) -> None:
    store.put(k("t:k"), b"1")
    store.put(k("t:k"), b"2")
    assert store.get(k("t:k")).value == b"2"
    store.delete(k("t:k"))
    assert store.get(k("t:k")) is None
    store.delete(k("t:k"))  # deleting an absent key is fine


def test_get_many_aligned_with_keys(store, k) -> None:
    store.put_many({k("t:a"): b"A", k("t:b"): b"B", k("t:c"): b"C"})
    assert store.get_many([k("t:c"), k("t:missing"), k("t:a"), k("t:c")]) == [b"C", None, b"A", b"C"]
    store.delete_many([k("t:a"), k("t:c"), k("t:never")])
    assert store.get_many([k("t:a"), k("t:b"), k("t:c")]) == [None, b"B", None]


def test_many_keys_in_one_call(store, k) -> None:
    items = {k(f"t:n{i}"): i.to_bytes(4, "big") for i in range(2500)}
    store.put_many(items)
    keys = list(items)
    assert store.get_many(keys) == list(items.values())
    store.delete_many(keys)
    assert set(store.get_many(keys)) == {None}


@pytest.mark.parametrize("key", ODD_KEYS, ids=range(len(ODD_KEYS)))
def test_unusual_keys(store, k, key) -> None:
    key = k(key)
    store.put(key, key.encode())
    assert store.get(key).value == key.encode()
    assert store.get_many([key]) == [key.encode()]
    assert set(store.keys(k(""))) == {key}
    store.delete(key)
    assert store.get(key) is None


def test_cas_when_absent(store, k) -> None:
    store.cas(k("t:h"), b"v1", None)
    with pytest.raises(mdss.ConflictError):
        store.cas(k("t:h"), b"v2", None)
    assert store.get(k("t:h")).value == b"v1"


def test_cas_with_the_version_read(store, k) -> None:
    store.put(k("t:h"), b"v1")
    first = store.get(k("t:h"))
    store.cas(k("t:h"), b"v2", first.version)
    second = store.get(k("t:h"))
    assert second.value == b"v2"
    with pytest.raises(mdss.ConflictError):  # stale: the version of the first read
        store.cas(k("t:h"), b"v3", first.version)
    assert store.get(k("t:h")).value == b"v2"
    store.cas(k("t:h"), b"v3", second.version)
    assert store.get(k("t:h")).value == b"v3"


def test_cas_returns_the_version_written_or_none(store, k) -> None:
    written = store.cas(k("t:h"), b"v1", None)
    if written is not None:  # a store that can tell: the next compare-and-set needs no read
        written = store.cas(k("t:h"), b"v2", written)
        assert store.get(k("t:h")).version == written
    assert store.get(k("t:h")).value == (b"v1" if written is None else b"v2")


def test_a_lost_race_may_carry_what_won(store, k) -> None:
    first = store.cas(k("t:h"), b"v1", None)
    with pytest.raises(mdss.ConflictError) as lost:
        store.cas(k("t:h"), b"v2", None)
    if lost.value.current_known:
        assert lost.value.current.value == b"v1" and lost.value.current == store.get(k("t:h"))
        if first is not None:
            assert lost.value.current.version == first
    store.delete(k("t:h"))
    stale = store.get(k("t:h"))
    assert stale is None
    store.put(k("t:h"), b"v3")
    record = store.get(k("t:h"))
    store.put(k("t:h"), b"v4")
    with pytest.raises(mdss.ConflictError) as lost:
        store.cas(k("t:h"), b"v5", record.version)
    if lost.value.current_known:
        assert lost.value.current == store.get(k("t:h"))


def test_cas_after_delete_and_recreate(store, k) -> None:
    store.cas(k("t:h"), b"v1", None)
    seen = store.get(k("t:h"))
    store.delete(k("t:h"))
    with pytest.raises(mdss.ConflictError):
        store.cas(k("t:h"), b"v2", seen.version)
    store.cas(k("t:h"), b"v2", None)
    assert store.get(k("t:h")).value == b"v2"


def test_keys_by_prefix(store, k) -> None:
    store.put_many({k("p:a:1"): b"", k("p:a:2"): b"", k("p:a2:1"): b"", k("p:b:1"): b"", k("p:a"): b""})
    assert sorted(store.keys(k("p:a:"))) == [k("p:a:1"), k("p:a:2")]
    assert sorted(store.keys(k("p:a"))) == [k("p:a"), k("p:a2:1"), k("p:a:1"), k("p:a:2")]
    assert list(store.keys(k("p:zzz"))) == []
    assert sorted(store.keys(k("p:*"))) == [] and sorted(store.keys(k("p:?"))) == []  # no glob semantics


def test_stats_count_calls_and_bytes(store, k) -> None:
    store.stats.reset()
    store.put(k("t:a"), b"12345")
    store.put_many({k("t:b"): b"12", k("t:c"): b"3"})
    store.get(k("t:a"))
    store.get_many([k("t:b"), k("t:c"), k("t:none")])
    with pytest.raises(mdss.ConflictError):
        store.cas(k("t:a"), b"x", None)
    store.delete_many([k("t:b"), k("t:c")])
    base = Stats().snapshot()  # a backend's own counters (DynamoDB's units and requests) aside
    counts = {name: n for name, n in store.stats.snapshot().items() if name in base}
    assert counts == {
        "calls": 6,
        "reads": 4,
        "bytes_read": 8,
        "writes": 3,
        "bytes_written": 8,
        "deletes": 2,
        "conflicts": 1,
    }


def test_concurrent_conditional_puts(store, k) -> None:
    """Read-modify-CAS counters from many threads: every increment lands exactly once."""
    store.cas(k("t:counter"), b"0", None)
    threads, per_thread, conflicts = 8, 25, []

    def work() -> None:
        for _ in range(per_thread):
            while True:
                record = store.get(k("t:counter"))
                try:
                    store.cas(k("t:counter"), str(int(record.value) + 1).encode(), record.version)
                    break
                except mdss.ConflictError:
                    conflicts.append(1)

    pool = [threading.Thread(target=work) for _ in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    assert int(store.get(k("t:counter")).value) == threads * per_thread
    assert store.stats.conflicts == len(conflicts)


def test_namespace_is_set(store, k) -> None:
    assert isinstance(store.namespace, str) and store.namespace


@pytest.mark.parametrize("scheme", sorted(BACKENDS))
def test_every_backend_implements_the_whole_interface(scheme) -> None:
    module_name, class_name = BACKENDS[scheme]
    cls = getattr(importlib.import_module(module_name), class_name)
    assert issubclass(cls, Store)
    missing = [name for name in Store.REQUIRED if getattr(cls, name) is getattr(Store, name)]
    assert not missing, f"{class_name} does not implement {missing}"
    assert "from_url" in vars(cls) or scheme == "memory" or cls.from_url is not Store.from_url


def test_siblings_are_kept_and_resolved() -> None:
    store = MemoryStore(siblings=True)
    store.put("t:s", b"A")
    seen = store.get("t:s")
    store.put("t:s", b"B", context=seen.version)  # a writer that read A
    store.put("t:s", b"C", context=seen.version)  # a concurrent writer that also read A
    both = store.get("t:s")
    assert sorted(both.values) == [b"B", b"C"]
    with pytest.raises(mdss.SiblingsError):
        _ = both.value
    store.put("t:s", b"BC", context=both.version)  # resolves what it read
    assert store.get("t:s").values == (b"BC",)
    with pytest.raises(mdss.ConflictError):
        store.cas("t:s", b"x", seen.version)


def test_delete_if_unchanged(store, k) -> None:
    store.put(k("t:h"), b"v1")
    seen = store.get(k("t:h"))
    store.put(k("t:h"), b"v2")
    with pytest.raises(mdss.ConflictError):
        store.delete_if(k("t:h"), seen.version)  # written since: kept
    assert store.get(k("t:h")).value == b"v2"
    store.delete_if(k("t:h"), store.get(k("t:h")).version)
    assert store.get(k("t:h")) is None
    store.delete_if(k("t:h"), seen.version)  # absent: nothing to do
