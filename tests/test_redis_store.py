"""What only the Redis stores need: namespaces, clients, URLs, cluster spread, outages, lost replies."""

from __future__ import annotations

import gc
import itertools
import multiprocessing
import os
import threading
import time
import warnings

import attrs
import pytest
import redis
from redis.backoff import ExponentialBackoff
from redis.cluster import RedisCluster
from redis.retry import Retry
from redis_servers import free_port, limited_user, redis_cluster, redis_server

import mdss
from mdss import _tail
from mdss._keys import Keyspace
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


def test_url_options(redis_url, redis_cluster_url) -> None:
    store = mdss.open_store(f"{redis_url}?namespace=opts&retries=2&backoff=0.01&retry_budget=3&health_check_interval=9")
    assert store.namespace == "opts"
    assert (store.retry.max_attempts, store.retry.base, store.retry.budget) == (3, 0.01, 3.0)
    assert store.client.connection_pool.connection_kwargs["health_check_interval"] == 9
    store.close()
    cluster = mdss.open_store(f"{redis_cluster_url}?socket_timeout=2.5&retry_budget=1")
    assert cluster.retry.budget == 1.0
    pools = [node.redis_connection.connection_pool for node in cluster.client.get_nodes()]
    assert {pool.connection_kwargs["socket_timeout"] for pool in pools} == {2.5}
    cluster.close()
    with pytest.raises(mdss.InvalidArgumentError, match="seed"):
        mdss.open_store("redis+cluster://127.0.0.1")


@pytest.mark.parametrize(
    "query, named",
    [
        ("retries=abc", "retries"),
        ("retries=-1", "retries"),
        ("backoff=soon", "backoff"),
        ("retry_budget=-2", "retry_budget"),
        ("check_policy=maybe", "check_policy"),
        ("socket_timeout=abc", "socket_timeout"),
        ("health_check_interval=1.5", "health_check_interval"),
        ("foo=1", "foo"),
    ],
)
def test_bad_url_options_name_themselves(url, query: str, named: str) -> None:
    with pytest.raises(mdss.InvalidArgumentError, match=named):
        mdss.open_store(f"{url}?{query}")


def test_bad_keyword_options_name_themselves(redis_url) -> None:
    with pytest.raises(mdss.InvalidArgumentError, match="colour"):
        mdss.open_store(redis_url, colour="blue")
    with pytest.raises(mdss.InvalidArgumentError, match="retries"):
        mdss.open_store(redis_url, retries="3")


def test_the_store_switches_off_redis_py_retries_of_a_client_passed_in(redis_url) -> None:
    """redis-py would resend a timed-out compare-and-set blindly: a landed write would then read as a conflict."""
    client = redis.Redis.from_url(redis_url, retry=Retry(ExponentialBackoff(), 3))
    RedisStore(client=client, namespace="r").close()
    assert client.get_retry().get_retries() == 0


def test_a_set_spreads_over_every_cluster_node(redis_cluster_url) -> None:
    store = mdss.open_store(f"{redis_cluster_url}?namespace=spread{time.monotonic_ns()}")
    board = mdss.SortedSet.load(store, "wide", {f"p{i}": i for i in range(3000)}, chunk_size=16)
    keys = list(store.keys(board.keys.nodes))
    nodes = {store.client.get_node_from_key(key).name for key in keys}
    assert len(nodes) == 3
    assert len({store.client.keyslot(key) for key in keys}) > 100
    assert board.rank("p0") == 3000 and board.range(1500, 2)[0].member == "p1499"
    store.close()


def test_cluster_batch_reads_go_per_master_and_follow_a_moved_slot(redis_cluster_url) -> None:
    """get_many sends one MGET per slot to every master before reading: values in order, None where absent,
    one round trip; with a stale slot map (a slot moved), the MOVED reply sends it redis-py's way."""
    store = mdss.open_store(f"{redis_cluster_url}?namespace=batch{time.monotonic_ns()}")
    keys = [f"{store.namespace}:k{i}" for i in range(40)]
    store.put_many({key: f"v{i}".encode() for i, key in enumerate(keys) if i % 3})
    expected = [None if i % 3 == 0 else f"v{i}".encode() for i in range(40)]
    before = store.stats.snapshot()
    assert store.get_many(keys) == expected
    assert store.get_many([*keys[5:9], keys[5]]) == [*expected[5:9], expected[5]]
    assert store.stats.since(before)["calls"] == 2
    slots = store.client.nodes_manager.slots_cache
    slot = store.client.keyslot(keys[1])
    owner = slots[slot][0]
    other = next(node for node in store.client.get_primaries() if node.name != owner.name)
    slots[slot] = [other]  # this client now believes the slot lives elsewhere: the server answers MOVED
    assert store.get_many(keys) == expected
    assert store.client.get_node_from_key(keys[1]).name == owner.name  # redis-py refreshed its map
    assert store.get_many(keys) == expected  # and no connection was left out of step
    store.close()


def test_an_unreachable_server_raises_store_unavailable_in_bounded_time() -> None:
    with redis_server() as port:
        store = mdss.open_store(f"redis://127.0.0.1:{port}/0?retries=2&backoff=0.01&socket_timeout=1")
        board = mdss.SortedSet(store, "b")
        board.add("ann", 1)
    start = time.monotonic()
    with pytest.raises(mdss.StoreUnavailableError, match="unreachable"):
        board.rank("ann")
    # The server closed the connection the set holds, and no new one can be made: nothing was sent, so nothing
    # applied (the write does not go out on the closed connection and lose its reply), and that is known at once.
    with pytest.raises(mdss.StoreRefusedError, match="Connection refused"):
        board.add("bob", 2)
    with pytest.raises(mdss.StoreRefusedError, match="Connection refused"):
        board.incr("ann", 1)
    assert time.monotonic() - start < 5
    start = time.monotonic()
    with pytest.raises(mdss.StoreUnavailableError, match="unreachable after .* attempts in"):
        mdss.open_store(f"redis://127.0.0.1:{free_port()}/0?retry_budget=0.3&socket_connect_timeout=0.1")
    assert time.monotonic() - start < 2  # a time budget, whatever the count
    with pytest.raises(mdss.StoreUnavailableError):
        mdss.SortedSet(mdss.open_store(f"redis://127.0.0.1:{free_port()}/0?retries=1&backoff=0.01"), "b")


def test_a_write_after_the_server_closed_the_connection_goes_out_on_a_new_one(redis_url, monkeypatch) -> None:
    """A server that closed the set's connection (a restart, an idle timeout, CLIENT KILL): the write goes out on a new
    connection at once, rather than on the closed one, whose lost reply would leave its outcome to be proven."""
    store = mdss.open_store(f"{redis_url}?namespace=killed{time.monotonic_ns()}")
    board = mdss.SortedSet(store, "b")
    board.add("ann", 1)
    redis.Redis.from_url(redis_url).client_kill_filter(_id=store.client.client_id())
    script, sent = store._tail_script, []
    monkeypatch.setattr(store, "_tail_script", lambda *a, **k: sent.append(1) or script(*a, **k))
    time.sleep(1.05)  # a connection is looked at once a second at most
    board.add("bob", 2)
    assert len(sent) == 1  # not sent on the closed connection, then again
    board.incr("ann", 5)
    assert [board.score("ann"), board.score("bob")] == [6, 2]
    store.close()


def test_each_thread_writes_through_a_connection_of_its_own_and_gives_it_back(redis_url) -> None:
    """A thread's commands go through a connection it holds (no pool round per command); when the thread ends
    the connection goes back to the pool, and the next thread takes it again."""
    store = mdss.open_store(f"{redis_url}?namespace=threads{time.monotonic_ns()}")
    sset = mdss.SortedSet(store, "s")
    sset.add("main", 0)
    pool = store.shared.connection_pool
    barrier, held = threading.Barrier(6), []

    def work(i: int) -> None:
        sset.add(f"m{i}", i)  # concurrent adds commit together: the leader's thread makes the store calls
        assert sset.rank(f"m{i}") is not None  # a read is this thread's own
        barrier.wait()  # all six alive at once: six connections held
        held.append(id(store.client.connection))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(held)) == 6 and id(store.client.connection) not in held
    gc.collect()
    free, in_use = (n for n, _ in pool.get_connection_count())
    assert in_use == 1 and free >= 6  # the main thread's, and the six given back
    assert {e.member: e.score for e in sset} == {"main": 0, **{f"m{i}": i for i in range(6)}} and sset.check() == []
    store.close()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
def test_a_forked_child_takes_a_connection_of_its_own(redis_url) -> None:
    """After a fork the child's commands never share the parent's socket (the replies would cross)."""
    store = mdss.open_store(f"{redis_url}?namespace=fork{time.monotonic_ns()}")
    sset = mdss.SortedSet(store, "s")
    sset.add("parent", 1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # fork with threads running (pytest's): none touch redis
        child = multiprocessing.get_context("fork").Process(target=_child_posts, args=(sset,))
        child.start()
    for i in range(200):  # the parent keeps using its connection meanwhile
        assert sset.score("parent") == 1
        sset.add(f"p{i}", i)
    child.join(30)
    assert child.exitcode == 0
    assert sset.score("child") == 2 and len(sset) == 202 and sset.check() == []
    store.close()


def _child_posts(sset: mdss.SortedSet) -> None:
    for i in range(200):
        sset.add("child", 2)
        sset.score(f"p{i}")


def test_a_thread_whose_first_command_finds_no_server_raises_store_unavailable() -> None:
    """A thread's own connection is made by its first command, inside the store's retries: an unreachable server
    is a StoreUnavailableError there too, not redis-py's ConnectionError."""
    with redis_server() as port:
        store = mdss.open_store(f"redis://127.0.0.1:{port}/0?retries=1&backoff=0.01&socket_connect_timeout=0.5")
        mdss.SortedSet(store, "b").add("ann", 1)
    raised: list[BaseException] = []

    def first() -> None:
        try:
            store.get("anything")
        except BaseException as exc:  # the type is what the test checks
            raised.append(exc)

    thread = threading.Thread(target=first)
    thread.start()
    thread.join()
    assert len(raised) == 1 and isinstance(raised[0], mdss.StoreUnavailableError), raised


#: Per script call, what happens: "run" the real script, "other" writer sets the key, the reply is "lost".
#: Then the outcome the caller must see. After a lost reply, never ConflictError (issue 10, item 1).
LOST_REPLIES = {
    "landed": (["run+lost"], "ok"),
    "lost-before-running": (["lost", "run"], "ok"),
    "landed-then-another-on-top": (["run+other+lost"], mdss.OutcomeUnknownError),
    "lost-and-another-wrote": (["other+lost"], mdss.OutcomeUnknownError),
    "queued-request-ran-before-the-resend": (["lost", "run+run"], "ok"),
    "queued-request-ran-then-another-on-top": (["lost", "run+other+run"], mdss.OutcomeUnknownError),
    "every-reply-lost": (["lost", "lost", "lost"], mdss.OutcomeUnknownError),
    "plain-conflict": (["other+run"], mdss.ConflictError),
}


@pytest.mark.parametrize("scenario", LOST_REPLIES)
def test_cas_whose_reply_is_lost(url, monkeypatch, scenario: str) -> None:
    plan, outcome = LOST_REPLIES[scenario]
    store = mdss.open_store(f"{url}?namespace=lost{time.monotonic_ns()}&backoff=0.001&retries={len(plan) - 1}")
    key = store.namespace + ":h"
    store.put(key, b"v1")
    seen = store.get(key)
    real, calls = store._script, []

    def scripted(keys, args, client=None):
        result, step = None, plan[len(calls)]
        calls.append(step)
        for action in step.split("+"):
            if action == "run":
                result = real(keys=keys, args=args, client=client)
            elif action == "other":
                store.client.set(key, b"other")
            else:
                raise redis.TimeoutError("reply lost")
        return result

    monkeypatch.setattr(store, "_script", scripted)
    if outcome == "ok":
        store.cas(key, b"v2", seen.version)
        assert store.get(key).value == b"v2"
    else:
        with pytest.raises(outcome) as raised:
            store.cas(key, b"v2", seen.version)
        assert type(raised.value) is outcome
    assert len(calls) == len(plan)


@pytest.mark.parametrize("write", ["cas", "append"])
@pytest.mark.parametrize("first", ["run+lost", "lost", None])
def test_credentials_refused_after_a_lost_reply_leave_the_outcome_unknown(url, monkeypatch, write, first) -> None:
    """A resend that the server refuses for its credentials says nothing of the request whose reply was
    lost (it may have run): OutcomeUnknownError, not a refusal. Without a lost reply first, StoreError. (A
    compare-and-set that ran is proven by reading the key back, before any resend.)"""
    store = mdss.open_store(f"{url}?namespace=auth{time.monotonic_ns()}&backoff=0.001&retries=2")
    key = store.namespace + ":h"
    held = b"\x80"
    store.put(key, held)
    name = "_script" if write == "cas" else "_tail_script"
    real, steps = getattr(store, name), [first] if first else []

    def scripted(keys, args, client=None):
        step = steps.pop(0) if steps else "auth"
        if step == "auth":
            raise redis.AuthenticationError("invalid username-password pair")
        if step == "run+lost":
            real(keys=keys, args=args, client=client)
        raise redis.TimeoutError("reply lost")

    version = store.get(key).version
    monkeypatch.setattr(store, name, scripted)
    if write == "cas" and first == "run+lost":
        store.cas(key, b"v2", version)
        assert store.get(key).value == b"v2"
        return
    expected = mdss.OutcomeUnknownError if first else mdss.StoreError
    with pytest.raises(expected, match="credentials") as raised:
        if write == "cas":
            store.cas(key, b"v2", version)
        else:
            store.append_log(key, held, _tail.record("00" * 8, [("m", None, 1.0, "00" * 8)], ["m"]), _tail.TAIL_BYTES)
    assert type(raised.value) is expected


def test_cas_whose_reply_is_lost_and_the_key_cannot_be_read_back(redis_url, monkeypatch) -> None:
    store = mdss.open_store(f"{redis_url}?namespace=lost{time.monotonic_ns()}&backoff=0.001&retries=1")
    key = store.namespace + ":h"

    def down(*args, **kwargs):
        raise redis.ConnectionError("connection refused")

    monkeypatch.setattr(store, "_script", down)
    monkeypatch.setattr(store.client, "get", down)
    with pytest.raises(mdss.OutcomeUnknownError, match="cannot be read"):
        store.cas(key, b"v", None)


def test_increments_survive_lost_cas_replies(redis_url, monkeypatch) -> None:
    """A commit whose head CAS reply is lost must neither drop nor double its increment."""
    store = mdss.open_store(f"{redis_url}?namespace=incr{time.monotonic_ns()}&retries=0")
    board = mdss.SortedSet(store, "b")
    board.incr("ann", 1)
    real = store._script

    def lost_after_running(keys, args, client=None):
        real(keys=keys, args=args, client=client)
        raise redis.ConnectionError("reply lost")

    monkeypatch.setattr(store, "_script", lost_after_running)
    assert board.incr("ann", 1) == 2  # the store sees its own bytes there and reports success
    monkeypatch.setattr(store, "_script", real)
    assert board.score("ann") == 2


@pytest.mark.parametrize("policy", ["allkeys-lru", "allkeys-lfu", "allkeys-random"])
def test_an_evicting_server_is_refused_at_open(policy: str) -> None:
    """An evicting Redis dropped a set's head and the set silently started afresh (issue 10, item 5)."""
    with redis_server("--maxmemory-policy", policy) as port:
        with pytest.raises(mdss.StoreError, match=f"maxmemory-policy {policy}.*noeviction"):
            mdss.open_store(f"redis://127.0.0.1:{port}/0")
        with pytest.raises(mdss.StoreError, match=policy):
            RedisStore(client=redis.Redis(port=port))
        store = mdss.open_store(f"redis://127.0.0.1:{port}/0?check_policy=false")  # the operator's choice
        mdss.SortedSet(store, "b").add("ann", 1)
        store.close()


@pytest.mark.parametrize("policy", ["noeviction", "volatile-lru", "volatile-ttl"])
def test_a_server_that_keeps_keys_without_ttl_is_accepted(policy: str) -> None:
    """Accepted, but under a volatile-* policy no key gets a TTL: ``expire()`` had given a set's nodes one, the keys
    such a policy evicts first, and a helper's probe lost a 20,000-member set within the hour it had to live (its
    nodes evicted, its head kept: MissingNodeError)."""
    with redis_server("--maxmemory-policy", policy) as port, warnings.catch_warnings():
        warnings.simplefilter("error")
        store = mdss.open_store(f"redis://127.0.0.1:{port}/0")
        sset = mdss.SortedSet(store, "b", chunk_size=4)
        sset.add_many({f"m{i}": i for i in range(40)})
        sset.merge()
        assert sset.expire(3600)
        client = redis.Redis(port=port)
        ttls = {client.ttl(key) for key in client.keys(f"{store.namespace}:*")}
        assert (max(ttls) > 0) == (policy == "noeviction"), ttls
        store.close()
        unchecked = mdss.open_store(f"redis://127.0.0.1:{port}/0?check_policy=false")
        assert unchecked.expires_keys is False  # the policy unread: none either
        unchecked.close()


def test_a_server_that_refuses_config_warns_once_and_works() -> None:
    with redis_server("--maxmemory-policy", "allkeys-lru") as port:
        user = limited_user(port)
        with pytest.warns(UserWarning, match="maxmemory-policy.*noeviction") as caught:
            store = mdss.open_store(f"redis://{user}127.0.0.1:{port}/0")
        assert len(caught) == 1
        mdss.SortedSet(store, "b").add("ann", 1)
        store.close()
        with pytest.raises(mdss.StoreError, match="credentials"):
            mdss.open_store(f"redis://limited:wrong@127.0.0.1:{port}/0")


def test_a_cluster_is_checked_on_every_primary() -> None:
    with redis_cluster(3) as ports:
        url = "redis+cluster://" + ",".join(f"127.0.0.1:{p}" for p in ports)
        redis.Redis(port=ports[2]).config_set("maxmemory-policy", "allkeys-lfu")
        with pytest.raises(mdss.StoreError, match=f"node 127.0.0.1:{ports[2]} has maxmemory-policy allkeys-lfu"):
            mdss.open_store(url)
        mdss.open_store(url + "?check_policy=false").close()
        user = {limited_user(port) for port in ports}.pop()
        with pytest.warns(UserWarning, match="maxmemory-policy") as caught:
            store = mdss.open_store(f"redis+cluster://{user}" + ",".join(f"127.0.0.1:{p}" for p in ports))
        assert len(caught) == 1 and all(f":{port}" in str(caught[0].message) for port in ports)
        mdss.SortedSet(store, "b").add("ann", 1)
        store.close()


#: What a slot on the move makes redis-py raise, each a refusal of a command that did not run.
SLOT_REFUSALS = {
    "ttl-exhausted": lambda: redis.exceptions.ClusterError("TTL exhausted."),
    "tryagain": lambda: redis.exceptions.TryAgainError("Multiple keys request during rehashing of slot"),
    "clusterdown": lambda: redis.exceptions.ClusterDownError("The cluster is down"),
    "masterdown": lambda: redis.exceptions.MasterDownError("Link with MASTER is down"),
    "slot-not-covered": lambda: redis.exceptions.SlotNotCoveredError('Slot "7" is not covered by the cluster.'),
    "moved": lambda: redis.exceptions.MovedError("7 127.0.0.1:1"),
    "readonly": lambda: redis.exceptions.ReadOnlyError("You can't write against a read only replica."),
    "loading": lambda: redis.exceptions.BusyLoadingError("Redis is loading the dataset in memory"),
}


def _refusing(store, write: str, refusal, times: int | None):
    """Patch the callable behind ``write`` to raise ``refusal()`` ``times`` times (None: always), then run."""
    owner, name = {
        "put": (store.client, "set"),
        "put_many": (store.client, "mset_nonatomic" if isinstance(store, RedisClusterStore) else "mset"),
        "cas": (store, "_script"),
        "append": (store, "_tail_script"),
    }[write]
    real, calls = getattr(owner, name), []

    def refused(*args, **kwargs):
        calls.append(1)
        if times is None or len(calls) <= times:
            raise refusal()
        return real(*args, **kwargs)

    return owner, name, refused, calls


def _write(store, write: str, key: str) -> None:
    held = store.get(key).value
    if write == "put":
        store.put(key, b"v2")
    elif write == "put_many":
        store.put_many({key: b"v2"})
    elif write == "cas":
        store.cas(key, b"v2", store.get(key).version)
    else:
        store.append_log(key, held, _tail.record("00" * 8, [("m", None, 1.0, "00" * 8)], ["m"]), _tail.TAIL_BYTES)


@pytest.mark.parametrize("refusal", SLOT_REFUSALS)
@pytest.mark.parametrize("write", ["put", "put_many", "cas", "append"])
def test_a_write_that_meets_a_slot_move_is_retried_within_its_budget(url, monkeypatch, write, refusal) -> None:
    """A refusal of a command that did not run (redis-py gives up after 16 MOVED/ASK/TRYAGAIN with "TTL
    exhausted.") is resent within the budget, a compare-and-set included (not through the lost-reply path:
    a refusal proves the script did not run, so a later conflict stays a ConflictError); once the budget is
    spent, StoreRefusedError for a compare-and-set or an append, StoreUnavailableError for an idempotent put (not
    OutcomeUnknownError: nothing may have landed)."""
    store = mdss.open_store(f"{url}?namespace=moved{time.monotonic_ns()}&backoff=0.001&retry_budget=2")
    key = store.namespace + ":h"
    store.put(key, b"\x80")
    owner, name, refused, calls = _refusing(store, write, SLOT_REFUSALS[refusal], times=3)
    monkeypatch.setattr(owner, name, refused)
    _write(store, write, key)
    assert len(calls) == 4
    if write != "append":
        assert store.get(key).value == b"v2"
    if write == "cas":  # a stale version after refusals: a plain conflict, the key read is the one there
        calls.clear()
        with pytest.raises(mdss.ConflictError):
            store.cas(key, b"v3", str(store.get(key).version) + "0")
    monkeypatch.undo()

    store.retry = attrs.evolve(store.retry, budget=0.3)
    owner, name, refused, calls = _refusing(store, write, SLOT_REFUSALS[refusal], times=None)
    monkeypatch.setattr(owner, name, refused)
    start = time.monotonic()
    with pytest.raises(mdss.StoreUnavailableError, match="unavailable") as raised:
        _write(store, write, key)
    assert type(raised.value) is (mdss.StoreRefusedError if write in ("cas", "append") else mdss.StoreUnavailableError)
    assert time.monotonic() - start < 2
    assert len(calls) > 2  # the budget spent (its last pause would overrun it), not given up at once
    store.close()


def test_a_refusal_after_a_lost_reply_keeps_the_outcome_in_doubt(redis_url, monkeypatch) -> None:
    """A lost reply, then refusals until the budget is spent: the lost request may have run, so
    OutcomeUnknownError, not a plain StoreUnavailableError."""
    store = mdss.open_store(f"{redis_url}?namespace=moved{time.monotonic_ns()}&backoff=0.001&retry_budget=0.3")
    key = store.namespace + ":h"
    store.put(key, b"v1")
    version, steps = store.get(key).version, ["lost"]

    def scripted(keys, args, client=None):
        if steps and steps.pop() == "lost":
            raise redis.TimeoutError("reply lost")
        raise redis.exceptions.ClusterError("TTL exhausted.")

    monkeypatch.setattr(store, "_script", scripted)
    with pytest.raises(mdss.OutcomeUnknownError):
        store.cas(key, b"v2", version)


@pytest.mark.parametrize("write", ["cas", "sorted-set"])
def test_a_write_into_a_slot_stuck_mid_migration_succeeds_once_the_move_proceeds(redis_cluster_url, write) -> None:
    """A real slot move, half set up: the source is MIGRATING, the target not yet IMPORTING, so the source
    answers ASK and the target MOVED back, and redis-py gives up after 16 with "TTL exhausted.". The write
    (a compare-and-set; a new set's first add, whose head lives in that slot) is resent until the target
    imports the slot (0.5 s later), then lands there, well within its budget."""
    for attempt in itertools.count():  # a slot no earlier test left keys in: a slot with keys cannot move
        store = mdss.open_store(f"{redis_cluster_url}?namespace=migrate{time.monotonic_ns()}{attempt}&retry_budget=10")
        key = store.namespace + ":h" if write == "cas" else Keyspace(store.namespace, "s").head
        client = store.client
        slot = client.keyslot(key)
        if client.cluster_countkeysinslot(slot) == 0:
            break
        store.close()
    source = client.get_node_from_key(key)
    target = next(node for node in client.get_primaries() if node.name != source.name)
    ids = {node.name: client.cluster_myid(node) for node in (source, target)}
    ids = {name: i.decode() if isinstance(i, bytes) else i for name, i in ids.items()}
    client.cluster_setslot(source, ids[target.name], slot, "MIGRATING")
    importing = threading.Timer(0.5, client.cluster_setslot, (target, ids[source.name], slot, "IMPORTING"))
    start = time.monotonic()
    importing.start()
    try:
        if write == "cas":
            store.cas(key, b"v", None)
        else:
            assert mdss.SortedSet(store, "s").add("ann", 1) is not None
        assert time.monotonic() - start > 0.4
    finally:
        importing.join()
        for node in (target, source):  # the move completes: the slot (and the key written there) is the target's
            client.cluster_setslot(node, ids[target.name], slot, "NODE")

    def written() -> bool:
        if write == "cas":
            return store.get(key).value == b"v"
        return mdss.SortedSet(store, "s").score("ann") == 1

    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # the third master learns of the move by gossip
        try:
            assert written()
            break
        except mdss.StoreError:
            time.sleep(0.1)
    assert written()
    store.close()


@pytest.mark.parametrize("write", ["put", "put_many", "cas", "append"])
def test_a_slot_map_that_cannot_be_loaded_is_transient_and_other_client_failures_are_not(url, monkeypatch, write):
    """redis-py raises RedisClusterException, not a RedisError, when it cannot reload the slot map (no node
    reachable, nodes that disagree while a slot moves): retried as a lost reply. Its other failures (a
    command it cannot route) are a StoreError at once, never a bare exception."""
    store = mdss.open_store(f"{url}?namespace=map{time.monotonic_ns()}&backoff=0.001&retry_budget=2")
    key = store.namespace + ":h"
    store.put(key, b"\x80")
    failures = [
        lambda: redis.exceptions.RedisClusterException("Redis Cluster cannot be connected. Please provide ..."),
        lambda: redis.exceptions.RedisClusterException("startup_nodes could not agree on a valid slots cache: x"),
    ]
    for failure in failures:
        store.put(key, b"\x80")  # (a compare-and-set that finds its value there already is done at once)
        owner, name, refused, calls = _refusing(store, write, failure, times=2)
        monkeypatch.setattr(owner, name, refused)
        _write(store, write, key)
        assert len(calls) == 3
        monkeypatch.undo()
    unroutable = lambda: redis.exceptions.RedisClusterException("No way to dispatch this command")  # noqa: E731
    owner, name, refused, calls = _refusing(store, write, unroutable, times=None)
    monkeypatch.setattr(owner, name, refused)
    with pytest.raises(mdss.StoreError, match="No way to dispatch") as raised:
        _write(store, write, key)
    assert type(raised.value) is mdss.StoreError and len(calls) == 1
    store.close()


def test_a_record_read_along_with_nodes_is_the_records_read_alone(url) -> None:
    """``get_along`` (a head with the nodes a read will likely need, in one MGET on Redis; Redis Cluster, whose keys
    may sit on several nodes, reads them apart): the record's version is the one ``get`` gives, good for a
    compare-and-set; an absent record is ``None``, absent values ``None``."""
    store = mdss.open_store(f"{url}?namespace=along-{time.monotonic_ns()}")
    ns = store.namespace
    store.put(f"{ns}:h", b"head")
    store.put_many({f"{ns}:n:1": b"one", f"{ns}:n:2": b"two"})
    found = store.get_along(f"{ns}:h", [f"{ns}:n:1", f"{ns}:n:3", f"{ns}:n:2"])
    if isinstance(store, RedisClusterStore):
        assert found is None
        return
    record, values = found
    assert record.value == b"head" and record.version == store.get(f"{ns}:h").version
    assert values == [b"one", None, b"two"]
    store.cas(f"{ns}:h", b"next", record.version)
    assert store.get(f"{ns}:h").value == b"next"
    assert store.get_along(f"{ns}:gone", [f"{ns}:n:1"]) == (None, [b"one"])
    store.close()


def test_work_runs_while_a_read_travels_and_the_connection_stays_in_step(redis_url) -> None:
    """``get_during`` on Redis: the GET is sent, ``work`` runs, then the reply is read. ``work`` that sends a command
    of its own is refused (it would take the GET's reply) and counts as failed; ``work`` raising is dropped; an
    interrupt goes through; a connection that dies meanwhile is read again. After each, this thread's next commands
    get their own replies."""
    store = mdss.open_store(f"{redis_url}?namespace=during-{time.monotonic_ns()}")
    ns = store.namespace
    store.put(f"{ns}:h", b"head")
    assert store.overlaps_reads and store.reads_along
    record, ran, result = store.get_during(f"{ns}:h", lambda: 42)
    assert (record.value, ran, result) == (b"head", True, 42) and record.version == store.get(f"{ns}:h").version
    assert store.get_during(f"{ns}:gone", lambda: 1) == (None, True, 1)
    refused: list[BaseException] = []

    def sneaky() -> None:
        try:
            store.get(f"{ns}:h")
        except mdss.StoreError as exc:
            refused.append(exc)
            raise

    record, ran, result = store.get_during(f"{ns}:h", sneaky)
    assert (record.value, ran, result) == (b"head", False, None) and len(refused) == 1
    assert store.get_during(f"{ns}:h", lambda: 1 / 0)[1:] == (False, None)
    with pytest.raises(KeyboardInterrupt):
        store.get_during(f"{ns}:h", lambda: (_ for _ in ()).throw(KeyboardInterrupt))
    connection = store.client.connection
    record, ran, _ = store.get_during(f"{ns}:h", connection.disconnect)  # the socket closed under the reply
    assert (record.value, ran) == (b"head", True)
    store.put(f"{ns}:k", b"k")
    assert [store.get(f"{ns}:{k}").value for k in ("h", "k")] == [b"head", b"k"]
    assert store.get_many([f"{ns}:k", f"{ns}:h"]) == [b"k", b"head"]
    # The same for several keys in one MGET (a sharded set's heads).
    keys = [f"{ns}:h", f"{ns}:gone", f"{ns}:k"]
    before = store.stats.snapshot()
    assert store.get_many_during(keys, lambda: 7) == ([b"head", None, b"k"], True, 7)
    assert store.stats.since(before)["calls"] == 1
    refused.clear()
    assert store.get_many_during(keys, sneaky) == ([b"head", None, b"k"], False, None) and len(refused) == 1
    assert store.get_many_during(keys, lambda: 1 / 0) == ([b"head", None, b"k"], False, None)
    connection = store.client.connection
    assert store.get_many_during(keys, connection.disconnect) == ([b"head", None, b"k"], True, None)
    assert store.get_many([f"{ns}:k", f"{ns}:h"]) == [b"k", b"head"] and store.get(f"{ns}:h").value == b"head"
    store.close()


def test_stores_that_cannot_overlap_a_read_do_not_run_the_work(redis_cluster_url) -> None:
    """Stores other than one Redis server neither run work during a read nor read a head along with nodes, and say so
    (``overlaps_reads``, ``reads_along``): their reads spend no CPU on guesses or routes they cannot use."""
    for store in (
        mdss.open_store("memory://"),
        mdss.open_store(f"{redis_cluster_url}?namespace=d{time.monotonic_ns()}"),
    ):
        assert not store.overlaps_reads and not store.reads_along
        store.put("mdss:h", b"x")
        record, ran, result = store.get_during("mdss:h", lambda: pytest.fail("ran"))
        assert (record.value, ran, result) == (b"x", False, None)
        assert store.get_many_during(["mdss:h", "mdss:y"], lambda: pytest.fail("ran")) == ([b"x", None], False, None)
        store.close()


def test_a_cold_member_read_of_a_set_brings_its_entry_set_with_the_head(redis_url) -> None:
    """``score``, ``scores``, ``data`` and ``rank`` of a set on Redis read the member index's entry sets they need in
    the head's round trip (``Store.get_along``), with only the manifests cached: a score in one round trip, a rank in
    two (then the score tree's entry set); exact after another object's writes and merge replaced those entry sets."""
    from mdss._tree import Manifest

    url = f"{redis_url}?namespace=near-{time.monotonic_ns()}"
    writer = mdss.SortedSet(mdss.open_store(url), "s", chunk_size=8)
    writer.add_many({f"m{i:03d}": i for i in range(300)})
    store = mdss.open_store(url)
    reader = mdss.SortedSet(store, "s", chunk_size=8)
    reader.warm()

    def cold(read):  # the manifests cached, no entry set
        cache = reader.engine.cache
        for key in [k for k, (node, _) in cache._nodes.items() if not isinstance(node, Manifest)]:
            cache.discard(key)
        before = store.stats.snapshot()
        found = read()
        return found, store.stats.since(before)["calls"]

    assert cold(lambda: reader.score("m100")) == (100, 1)
    assert cold(lambda: reader.scores(["m001", "m200", "zed"])) == ([1, 200, None], 1)
    assert cold(lambda: reader.data("m001")) == (None, 1)
    assert cold(lambda: reader.rank("m007")) == (293, 2)
    writer.add_many({f"m{i:03d}": -i for i in range(0, 300, 3)})
    writer.merge()
    assert cold(lambda: reader.rank("m007"))[0] == writer.rank("m007")  # new manifests too: more round trips
    assert cold(lambda: reader.scores(["m003", "m004"]))[0] == [-3, 4]


@pytest.mark.parametrize("write", ["cas", "append"])
def test_a_connection_error_is_a_refusal_only_where_it_proves_nothing_was_sent(url, monkeypatch, write) -> None:
    """One server's "Error 111 connecting to ..." comes from the socket's connect, before a byte is sent: a refusal.
    A cluster's client reloads its slot map after a sent command lost its reply, and its error then tells of a connect
    that failed while the command had run (a helper's probe: a compare-and-set that landed reported refused), so on a
    cluster such an error is a lost reply; and a reload's error is a lost reply everywhere."""
    store = mdss.open_store(f"{url}?namespace=unsent{time.monotonic_ns()}&backoff=0.001&retry_budget=0.2")
    key = store.namespace + ":h"
    store.put(key, b"v1")
    connect = lambda: redis.ConnectionError("Error 111 connecting to 127.0.0.1:1. Connection refused.")  # noqa: E731
    reload = lambda: redis.ConnectionError(  # noqa: E731
        "the cluster's slot map could not be loaded: Redis Cluster cannot be connected. Please provide at least one"
        " reachable node: Error 111 connecting to 127.0.0.1:1. Connection refused."
    )
    monkeypatch.setattr(store, "_read_back", lambda *args: b"v1")  # the key as read: a lost request may yet run
    for error, refused in ((connect, not isinstance(store, RedisClusterStore)), (reload, False)):
        owner, name, failing, _ = _refusing(store, write, error, times=None)
        monkeypatch.setattr(owner, name, failing)
        with pytest.raises(mdss.StoreUnavailableError) as raised:
            _write(store, write, key)
        assert isinstance(raised.value, mdss.StoreRefusedError) is refused
        assert isinstance(raised.value, mdss.OutcomeUnknownError) is not refused
    store.close()
