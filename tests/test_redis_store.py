"""What only the Redis stores need: namespaces, clients, URLs, cluster spread, outages, lost replies."""

from __future__ import annotations

import time

import pytest
import redis
from redis.cluster import RedisCluster
from redis_servers import free_port, redis_server

import mdss
from mdss.stores.redis import RedisClusterStore, RedisStore

TRICKY = ["board", "board:h", "a:b", "{board}", "board/n", "*", "b?ard", "x" * 200]


@pytest.fixture(params=["redis", "redis-cluster"])
def url(request) -> str:
    return request.getfixturevalue("redis_url" if request.param == "redis" else "redis_cluster_url")


def test_namespaces_and_set_names_never_collide(url) -> None:
    stores = [mdss.open_store(f"{url}?namespace=app-{i}-{time.monotonic_ns()}") for i in range(2)]
    boards = {}
    for store in stores:
        for name in TRICKY:
            boards[store.namespace, name] = board = mdss.SortedSet(store, name, chunk_size=4)
            board.add_many({f"{store.namespace}/{name}/{i}": i for i in range(12)})
    for (namespace, name), board in boards.items():
        assert {e.member for e in board} == {f"{namespace}/{name}/{i}" for i in range(12)}
        assert board.check() == []
    for store in stores:
        other = next(s for s in stores if s is not store)
        assert not any(key.startswith(other.namespace) for key in store.keys(store.namespace + ":"))
        store.close()


def test_construction_from_a_ready_made_client(redis_url, redis_cluster_url) -> None:
    single = RedisStore(client=redis.Redis.from_url(redis_url), namespace=f"c{time.monotonic_ns()}")
    first = redis_cluster_url.split("//")[1].split(",")[0]
    host, port = first.split(":")
    cluster = RedisClusterStore(client=RedisCluster(host=host, port=int(port)), namespace=f"c{time.monotonic_ns()}")
    for store in (single, cluster):
        board = mdss.SortedSet(store, "b")
        board.add("ann", 3)
        assert board.rank("ann") == 1
        store.close()


def test_url_options(redis_url) -> None:
    store = mdss.open_store(f"{redis_url}?namespace=opts&retries=2&backoff=0.01&health_check_interval=30")
    assert (store.namespace, store.retries, store.backoff) == ("opts", 2, 0.01)
    with pytest.raises(mdss.InvalidArgumentError, match="seed"):
        mdss.open_store("redis+cluster://127.0.0.1")


def test_a_set_spreads_over_every_cluster_node(redis_cluster_url) -> None:
    store = mdss.open_store(f"{redis_cluster_url}?namespace=spread{time.monotonic_ns()}")
    board = mdss.SortedSet.load(store, "wide", {f"p{i}": i for i in range(3000)}, chunk_size=16)
    keys = list(store.keys(board._keys.nodes))
    nodes = {store.client.get_node_from_key(key).name for key in keys}
    assert len(nodes) == 3
    assert len({store.client.keyslot(key) for key in keys}) > 100
    assert board.rank("p0") == 3000 and board.range(1500, 2)[0].member == "p1499"
    store.close()


def test_an_unreachable_server_raises_store_unavailable_in_bounded_time() -> None:
    with redis_server() as port:
        store = mdss.open_store(f"redis://127.0.0.1:{port}/0?retries=2&backoff=0.01&socket_timeout=1")
        board = mdss.SortedSet(store, "b")
        board.add("ann", 1)
    start = time.monotonic()
    with pytest.raises(mdss.StoreUnavailableError, match="unreachable"):
        board.add("bob", 2)
    with pytest.raises(mdss.StoreUnavailableError):
        board.rank("ann")
    assert time.monotonic() - start < 10
    with pytest.raises(mdss.StoreUnavailableError):
        mdss.SortedSet(mdss.open_store(f"redis://127.0.0.1:{free_port()}/0?retries=1&backoff=0.01"), "b")


@pytest.mark.parametrize("lands", [True, False], ids=["landed", "lost-before-running"])
def test_cas_whose_reply_is_lost(redis_url, monkeypatch, lands: bool) -> None:
    store = mdss.open_store(f"{redis_url}?namespace=lost{time.monotonic_ns()}&backoff=0.001")
    key = store.namespace + ":h"
    store.put(key, b"v1")
    seen = store.get(key)
    real, calls = store._script, []

    def flaky(keys, args):
        calls.append(1)
        if len(calls) == 1:
            if lands:
                real(keys=keys, args=args)
            raise redis.ConnectionError("reply lost")
        return real(keys=keys, args=args)

    monkeypatch.setattr(store, "_script", flaky)
    store.cas(key, b"v2", seen.version)  # success either way: it landed, or it was resent
    assert store.get(key).value == b"v2"
    assert len(calls) == (1 if lands else 2)
    store.put(key, b"someone else")
    calls.clear()
    with pytest.raises(mdss.ConflictError):  # a lost reply, and the key changed meanwhile: a conflict
        store.cas(key, b"v3", seen.version)


def test_increments_survive_lost_cas_replies(redis_url, monkeypatch) -> None:
    """A commit whose head CAS reply is lost must neither drop nor double its increment."""
    store = mdss.open_store(f"{redis_url}?namespace=incr{time.monotonic_ns()}&retries=0")
    board = mdss.SortedSet(store, "b")
    board.incr("ann", 1)
    real = store._script

    def lost_after_running(keys, args):
        real(keys=keys, args=args)
        raise redis.ConnectionError("reply lost")

    monkeypatch.setattr(store, "_script", lost_after_running)
    assert board.incr("ann", 1) == 2  # the store sees its own bytes there and reports success
    monkeypatch.setattr(store, "_script", real)
    assert board.score("ann") == 2
