"""The capacity model (mdss.stores.capacity): per-key units a second over any store, throttled requests retried with
nothing lost, buckets shared by processes. The store contract runs over it too (tests/test_store_contract.py)."""

from __future__ import annotations

import multiprocessing
import threading
import time

import pytest
from hypothesis import settings
from hypothesis.stateful import run_state_machine_as_test
from test_sortedset_stateful import SortedSetMachine

import mdss
from mdss.stores.capacity import CapacityStore, read_units, write_units


def test_units_per_started_kilobyte() -> None:
    assert [write_units(n) for n in (0, 1, 1024, 1025, 3000)] == [1, 1, 1, 2, 3]
    assert [read_units(n) for n in (0, 4096, 4097)] == [1, 1, 2]
    capped = CapacityStore(mdss.open_store("memory://"))
    capped.put("a", b"x" * 2500)
    capped.get("a")
    capped.get_many(["a", "missing"])
    assert (capped.usage.write_units, capped.usage.read_units) == (3, 3)
    # The watched keys' (a benchmark's heads) units and the writes that took them, the others' apart.
    watched = CapacityStore(mdss.open_store("memory://"), watch=lambda key: key.startswith("h"))
    watched.put_many({"h1": b"x" * 2500, "h2": b"x", "n": b"x" * 5000})
    watched.put("h1", b"x" * 1500)
    usage = watched.usage
    assert (usage.write_units, usage.watched_units, usage.watched_writes) == (11, 6, 3)


def test_a_key_takes_its_rate_and_no_more() -> None:
    capped = CapacityStore(mdss.open_store("memory://"), write_units=100, burst=0.1)
    start = time.monotonic()
    for i in range(40):
        capped.put("hot", b"%d" % i)
    elapsed = time.monotonic() - start
    assert elapsed >= (40 - 10) / 100 * 0.9  # the burst (10 units), then 100 a second
    assert capped.usage.throttled > 0 and capped.get("hot").value == b"39"
    start = time.monotonic()
    for i in range(40):  # other keys have buckets of their own
        capped.put(f"cold{i}", b"x")
    assert time.monotonic() - start < 0.25


def test_a_request_refused_past_the_budget_has_no_effect() -> None:
    inner = mdss.open_store("memory://")
    capped = CapacityStore(inner, write_units=1, burst=1, retry_budget=0.05)
    capped.put("k", b"first" * 1000)  # 5 units from a bucket of 1: the key is in debt for 4 s
    with pytest.raises(mdss.StoreUnavailableError, match="throttled"):
        capped.put("k", b"second")
    assert inner.get("k").value == b"first" * 1000


def _sets_over(store_factory, **limits):
    return CapacityStore(store_factory(), **limits)


def test_sets_under_throttling_lose_nothing(store_factory) -> None:
    """Threads post to one set whose head takes 200 writes a second (60 on dynalite, which a loaded machine runs slower
    than 200 a second: no write would wait): writes wait, retry, and every one is there."""
    units = 60 if store_factory.kind == "dynamodb" else 200
    capped = _sets_over(store_factory, write_units=units, read_units=3 * units, burst=0.05)
    sset = mdss.SortedSet(capped, "s", chunk_size=4, log_limit=8)
    done: dict[str, int] = {}
    lock = threading.Lock()

    def post(t: int) -> None:
        for i in range(15):
            member = f"t{t}-{i % 6}"
            sset.add(member, i)
            with lock:
                done[member] = i

    threads = [threading.Thread(target=post, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert capped.usage.throttled > 0
    fresh = mdss.SortedSet(capped.inner, "s")
    assert {e.member: e.score for e in fresh} == done
    assert fresh.check() == []


def test_the_stateful_model_over_the_capacity_model() -> None:
    """The set's stateful test (tiny chunks, logs, merges) on a memory store capped low enough to throttle."""
    SortedSetMachine.factory = staticmethod(
        lambda: CapacityStore(mdss.open_store("memory://"), write_units=2000, read_units=4000, burst=0.003)
    )
    SortedSetMachine.shards = 1
    profile = settings()
    examples = max(profile.max_examples // 5, 8)
    run_state_machine_as_test(SortedSetMachine, settings=settings(profile, max_examples=examples))


def _hammer(path: str, url: str, start: float, seconds: float, counts: list[int], i: int) -> None:
    """Writes to one key from ``start`` (wall clock, the same for every process) for ``seconds``."""
    capped = CapacityStore(mdss.open_store(url), write_units=50, burst=0.2, shared=path)
    time.sleep(max(0.0, start - time.time()))
    end, n = start + seconds, 0
    while time.time() < end:
        capped.put("mdss:shared-hot", b"x")
        n += time.time() <= end  # only writes done within the window: a process paused past its end adds none
    counts[i] = n


def test_processes_share_a_key_s_limit(tmp_path) -> None:
    """Four processes writing one key through buckets in one SQLite file get its 50 writes a second together."""
    db = tmp_path / "store.db"
    url = f"sqlite:///{db}"
    mdss.open_store(url).close()
    counts = multiprocessing.Manager().list([0] * 4)
    seconds, start = 1.5, time.time() + 2.0  # every process writes in the same window, however slowly it started
    buckets = str(tmp_path / "buckets.db")
    procs = [multiprocessing.Process(target=_hammer, args=(buckets, url, start, seconds, counts, i)) for i in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    total = sum(counts)
    # The rate, the burst, and one write per process admitted at the window's end (a bucket admits while not empty).
    assert 50 * seconds * 0.6 <= total <= 50 * seconds + 10 + 4


@pytest.mark.parametrize(
    "options", [{"write_units": 0}, {"read_units": -1}, {"burst": float("nan")}, {"retry_budget": -1}]
)
def test_bad_limits_are_refused(options) -> None:
    with pytest.raises(mdss.InvalidArgumentError):
        CapacityStore(mdss.open_store("memory://"), **options)
    with pytest.raises(mdss.InvalidArgumentError):
        CapacityStore("memory://")  # type: ignore[arg-type]


def test_shards_for_a_post_rate() -> None:
    assert mdss.shards_for(1) == 1
    assert mdss.shards_for(300, headroom=1) == 1 and mdss.shards_for(301, headroom=1) == 2
    assert mdss.shards_for(1000, key_write_units=40, posts_per_unit=0.3, headroom=1) == 84
    assert [mdss.shards_for(r) for r in (100, 1000, 10_000)] == sorted(mdss.shards_for(r) for r in (100, 1000, 10_000))
    for bad in ({"posts_per_second": 0}, {"posts_per_second": "9"}, {"posts_per_second": 10, "headroom": 0.5}):
        with pytest.raises(mdss.InvalidArgumentError):
            mdss.shards_for(**bad)
    with pytest.raises(mdss.InvalidArgumentError, match="more than a set takes"):
        mdss.shards_for(10**9)


def test_heads_by_compare_and_set_as_on_dynamodb() -> None:
    """``appends=False``: a store that applies appends is used as DynamoDB is, by compare-and-set of the head."""
    inner = mdss.open_store("memory://")
    capped = CapacityStore(inner, appends=False)
    sset = mdss.SortedSet(capped, "s")
    sset.add_many({"a": 1, "b": 2})
    sset.add("c", 3)
    assert not capped.appends and inner.appends
    assert [e.member for e in mdss.SortedSet(inner, "s")] == ["c", "b", "a"]
    with pytest.raises(mdss.InvalidArgumentError):
        CapacityStore(mdss.open_store("memory://?appends=false"), appends=True)
    with pytest.raises(mdss.InvalidArgumentError):
        CapacityStore(inner, appends="no")  # type: ignore[arg-type]
