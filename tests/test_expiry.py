"""Expiry (``mdss._expiry``): sets, sharded sets and boards that expire at a moment in their head.

A fake clock (``mdss._head.clock``) moves by the steps of each search; reads before the moment match the model, reads
after it see an absent set (as after ``drop()``), writes after it start a fresh set, and ``check()`` passes throughout.
"""

from __future__ import annotations

import datetime as dt
import threading
import time

import pytest
from click.testing import CliRunner
from depth import DEEP, examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mdss
from mdss import _head
from mdss.cli import cli

START = 1_800_000_000  # seconds since the epoch: where the fake clock starts


class Clock:
    """Whole seconds since the epoch, moved by the tests: moments and ``ttl()`` are then exact."""

    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> float:
        return float(self.now)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(_head, "clock", fake)
    return fake


MEMBERS = [f"m{i}" for i in range(12)]
steps = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.dictionaries(st.sampled_from(MEMBERS), st.integers(-5, 5), max_size=6)),
        st.tuples(st.just("remove"), st.lists(st.sampled_from(MEMBERS), max_size=3)),
        st.tuples(st.just("expire"), st.integers(-2, 6)),
        st.tuples(st.just("persist"), st.none()),
        st.tuples(st.just("tick"), st.integers(1, 5)),
    ),
    max_size=12,
)


class Model:
    """What a set holds, whether it exists (a head made by a write, neither dropped nor expired) and its moment."""

    def __init__(self, clock: Clock) -> None:
        self.clock, self.pairs, self.exists, self.moment = clock, dict[str, int](), False, None

    def settle(self) -> None:
        if self.moment is not None and self.moment <= self.clock.now:
            self.pairs, self.exists, self.moment = {}, False, None

    def expire(self, seconds: int) -> bool:
        existed = self.exists and bool(self.pairs)  # Redis finds no key a set's last member left
        if existed:
            self.moment = self.clock.now + seconds
        self.settle()
        return existed

    def persist(self) -> bool:
        had = self.moment is not None
        self.moment = None
        return had

    def ttl(self) -> float | None:
        return None if self.moment is None else float(self.moment - self.clock.now)


def run_steps(sset: mdss.SortedSet | mdss.ShardedSet, model: Model, plan: list) -> None:
    for kind, arg in plan:
        if kind == "add":
            sset.add_many(arg)
            model.pairs.update(arg)
            model.exists = model.exists or bool(arg)  # a write with no ops makes no head
        elif kind == "remove":
            sset.remove_many(arg)
            for member in arg:
                model.pairs.pop(member, None)
            model.exists = model.exists or bool(arg)
        elif kind == "expire":
            assert sset.expire(arg) == model.expire(arg)
        elif kind == "persist":
            assert sset.persist() == model.persist()
        else:
            model.clock.now += arg
            model.settle()
        expected = sorted(model.pairs.items(), key=lambda p: (-p[1], p[0]))
        assert [(e.member, e.score) for e in sset] == expected
        assert len(sset) == len(expected)
        assert sset.rank("m0") == next((i + 1 for i, (m, _) in enumerate(expected) if m == "m0"), None)
        assert sset.ttl() == model.ttl()
        sset._check()


def test_sets_expire_as_the_model_says(store_factory, clock) -> None:
    """Random writes, expire/persist at random moments, the clock moved between: every read agrees with the model
    (empty after the moment), writes after it start a fresh set; ``check()`` passes after each step."""
    budget = examples(store_factory.kind, settings().max_examples, divisor=8)

    @settings(max_examples=budget, suppress_health_check=[HealthCheck.too_slow], deadline=None)
    @given(plan=steps, chunk=st.integers(2, 4), shards=st.sampled_from([1, 1, 3]), log_limit=st.sampled_from([0, 4]))
    def search(plan, chunk, shards, log_limit) -> None:
        clock.now = START
        store = store_factory()
        sset = mdss.SortedSet(store, "s", chunk_size=chunk, shards=shards, log_limit=log_limit)
        run_steps(sset, Model(clock), plan)
        # Another object on the same store, which never saw the set, reads the same.
        other = mdss.SortedSet.open(store, "s")
        assert [(e.member, e.score) for e in other] == [(e.member, e.score) for e in sset]

    search()


def test_an_expired_set_reads_as_dropped_and_its_next_write_drops_it(store, clock) -> None:
    sset = mdss.SortedSet(store, "s", chunk_size=2, max_staleness=60)
    sset.add_many({f"m{i}": i for i in range(9)})
    assert sset.expire(10) is True
    assert len(sset) == 9  # kept within max_staleness: the moment has not passed
    clock.now += 10
    assert len(sset) == 0 and sset.score("m3") is None and sset.rank("m3") is None and sset.range(1, 5) == []
    assert sset.ttl() is None and sset.persist() is False and sset.expire(5) is False
    assert sset.check() == []
    sset.add("new", 1)
    assert [e.member for e in sset] == ["new"] and sset.check() == []
    assert sset.unreferenced() == []  # the old nodes went with the drop


def test_expire_at_takes_aware_datetimes_and_epoch_seconds(store, clock) -> None:
    sset = mdss.SortedSet(store, "s")
    assert sset.expire(5) is False  # no set: as Redis' 0
    sset.add("a", 1)
    assert sset.expire_at(START + 30) is True and sset.ttl() == 30.0
    when = dt.datetime.fromtimestamp(START + 60, dt.timezone(dt.timedelta(hours=5)))
    assert sset.expire_at(when) is True and sset.ttl() == 60.0
    for bad in (dt.datetime(2030, 1, 1), float("nan"), float("inf"), "soon", True, 1e300):
        with pytest.raises(mdss.InvalidArgumentError):
            sset.expire_at(bad)
    with pytest.raises(mdss.InvalidArgumentError):
        sset.expire(float("inf"))
    assert sset.persist() is True and sset.ttl() is None and sset.persist() is False


def test_gc_sweep_drops_an_expired_set(store, clock) -> None:
    sset = mdss.SortedSet(store, "s", chunk_size=2, log_limit=0)
    sset.add_many({f"m{i}": i for i in range(9)})
    sset.expire(5)
    assert sset.gc(sweep=True, wait=False) == 0 and len(sset) == 9  # not yet
    clock.now += 5
    sset.gc(sweep=True, wait=False)
    assert not store.existing(list(store.keys(sset.keys.nodes)))  # (Riak lists deleted keys a while)
    assert store.get(sset.keys.head) is None and store.get(sset.keys.marker) is None
    sset.add("a", 1)
    assert [e.member for e in sset] == ["a"]


def test_head_bytes_without_an_expiry_are_what_earlier_versions_wrote(store, clock) -> None:
    sset = mdss.SortedSet(store, "s")
    sset.add("a", 1)
    before = store.get(sset.keys.head).value
    sset.expire(5)
    assert b"exp" in store.get(sset.keys.head).value
    sset.persist()
    after = store.get(sset.keys.head).value
    assert b"exp" not in after and b"exp" not in before
    head = _head.Head.decode("k", after)
    assert head.expires is None and _head.Head.decode("k", head.next("n" * 16, expires=123).encode()).expires == 123


def test_writers_racing_the_drop_of_an_expired_set_lose_nothing(store_factory, clock) -> None:
    """Threads that write after the moment, each its own members: every write is there, nothing of the old set."""
    store = store_factory()
    mdss.SortedSet(store, "s", chunk_size=2).add_many({f"old{i}": i for i in range(6)})
    mdss.SortedSet(store, "s").expire(1)
    clock.now += 1
    writers = [mdss.SortedSet(store, "s") for _ in range(3)]

    def write(i: int) -> None:
        for j in range(3):
            writers[i].add(f"w{i}-{j}", j)

    threads = [threading.Thread(target=write, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    sset = mdss.SortedSet(store, "s")
    assert sorted(e.member for e in sset) == sorted(f"w{i}-{j}" for i in range(3) for j in range(3))
    assert sset.check() == []


board_steps = st.lists(
    st.one_of(
        st.tuples(st.just("post"), st.tuples(st.sampled_from(["ann", "bob", "cid"]), st.integers(0, 9))),
        st.tuples(st.just("expire"), st.integers(-1, 4)),
        st.tuples(st.just("persist"), st.none()),
        st.tuples(st.just("tick"), st.integers(1, 3)),
    ),
    max_size=8,
)


def test_boards_expire_whole(store_factory, clock) -> None:
    """Every window, the registry and the post ids expire as one: the board reads empty after the moment, posts
    after it start afresh (a new day's window too), and ``gc(sweep=True)`` drops an expired board as ``drop()``."""
    budget = examples(store_factory.kind, max(settings().max_examples // 3, 3), divisor=4)

    @settings(max_examples=budget, suppress_health_check=[HealthCheck.too_slow], deadline=None)
    @given(plan=board_steps)
    def search(plan) -> None:
        clock.now = START
        store = store_factory()
        board = mdss.Leaderboard(store, "g", columns={"xp": "desc"}, windows=["all", "day"], now=clock, chunk_size=2)
        model = Model(clock)
        for n, (kind, arg) in enumerate(plan):
            if kind == "post":
                board.post(arg[0], {"xp": arg[1]}, post_id=f"p{n}")
                model.pairs[arg[0]] = arg[1]
                model.exists = True
            elif kind == "expire":
                assert board.expire(arg) == model.expire(arg)
            elif kind == "persist":
                assert board.persist() == model.persist()
            else:
                clock.now += arg * 40_000  # past a day, now and then: a new window instance
                model.settle()
            assert {r.owner: r.values["xp"] for r in board.top("xp", 10, window="all")} == model.pairs
            assert board.ttl() == model.ttl()
            assert ("all" in board.windows()) == model.exists  # listed again by the first post after the moment
            if not model.exists:
                assert board.windows() == [] and board.count("xp", window="day") == 0
            for window in board.windows():
                board._check(window)
        board.post("zed", {"xp": 1})
        assert board.expire(1) is True
        clock.now += 1
        board.gc(sweep=True, wait=False)
        with pytest.raises(mdss.InvalidArgumentError):
            mdss.Leaderboard.open(store, "g")

    search()


@pytest.fixture
def run(tmp_path):
    url = f"sqlite:///{tmp_path}/cli.db"

    def invoke(*args: str, code: int = 0) -> str:
        result = CliRunner().invoke(cli, ["--store", url, "--set", "s", *args])
        assert result.exit_code == code, result.output
        return result.output

    return invoke


def test_cli_expire_ttl_persist(run, clock) -> None:
    assert "nothing to expire" in run("expire", "10")
    run("add", "a", "1")
    assert "expires in 10 s" in run("expire", "10")
    assert run("ttl") == "10.000\n"
    assert "no longer expires" in run("persist")
    assert run("ttl") == "none\n" and "had no expiry" in run("persist")
    run("expire", "-1")
    assert "no entries" in run("top")
    assert "not a number" in run("expire", "abc", code=2)  # click's usage error
    for bad, says in (("inf", "finite"), ("1e300", "past the latest")):
        lines = run("expire", bad, code=1).splitlines()
        assert len(lines) == 1 and lines[0].startswith("Error: ") and says in lines[0]


def test_cli_board_expire_ttl_persist(run, clock) -> None:
    run("board", "--columns", '{"xp": "desc"}', "post", "ann", "xp=3")
    assert run("board", "expire", "20") == "True\n"
    assert run("board", "ttl") == "20.0\n" and run("board", "--json", "ttl") == "20.0\n"
    assert run("board", "persist") == "True\n" and run("board", "ttl") == "none\n"
    assert run("board", "--json", "ttl") == "null\n"
    assert "Error:" in run("board", "expire", "x", code=2)


def test_an_expired_set_opens_with_any_settings_as_a_dropped_one(store, clock) -> None:
    mdss.SortedSet(store, "s", order="asc", chunk_size=3).add_many({"a": 1, "b": 2})
    mdss.SortedSet(store, "s").expire(1)
    clock.now += 1
    again = mdss.SortedSet(store, "s", order="desc", chunk_size=4)
    assert len(again) == 0
    again.add_many({"a": 1, "b": 2})
    assert [e.member for e in again] == ["b", "a"] and again.chunk_size == 4 and again.check() == []
    with pytest.raises(mdss.SettingsMismatchError):
        mdss.SortedSet(store, "s", order="asc")


def test_a_sharded_set_expired_at_once_starts_afresh(store, clock) -> None:
    sset = mdss.SortedSet(store, "s", shards=3, chunk_size=2)
    sset.add_many({f"m{i}": i for i in range(8)})
    assert sset.expire(0) is True and len(sset) == 0 and sset.ttl() is None
    sset.add("x", 1)
    assert [e.member for e in sset] == ["x"] and sset.check() == []
    assert sset.expire(30) is True and sset.ttl() == 30.0
    clock.now += 29
    sset.add("y", 2)  # a shard made by the write after expire(): it expires with the others
    clock.now += 1
    assert len(sset) == 0 and sset.check() == []


def test_writers_with_new_settings_race_the_drop_of_an_expired_set(store, clock) -> None:
    """The head a drop empties keeps the moment: a writer that reads it takes it for the expired set, never for a live
    one with other settings."""
    mdss.SortedSet(store, "s", order="asc", chunk_size=3).add_many({f"m{i}": i for i in range(7)})
    mdss.SortedSet(store, "s").expire(1)
    clock.now += 1
    writers = [mdss.SortedSet(store, "s", order="desc", chunk_size=4) for _ in range(3)]
    errors: list[BaseException] = []

    def write(i: int) -> None:
        try:
            writers[i].add(f"w{i}", i)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    sset = mdss.SortedSet(store, "s")
    assert [e.member for e in sset] == ["w2", "w1", "w0"] and sset.check() == []


# -- the store's own expiry (one Redis server): real time, short moments --------------------------------------------


@pytest.fixture
def redis_store(redis_url):
    store = mdss.open_store(f"{redis_url}?namespace=exp{time.monotonic_ns()}")
    yield store
    store.close()


def ttls(store: mdss.Store, keys: list[str]) -> list[int]:
    """Milliseconds left of each key's own expiry on the server (-1: none, -2: gone)."""
    client = store.client  # type: ignore[attr-defined]
    return [client.pttl(k) for k in keys]


def test_redis_expires_the_nodes_itself_and_the_set_reads_empty(redis_store) -> None:
    """Nodes and notes get Redis' own expiry gc_grace after the moment; the head (and marker) never do, so the set
    reads empty after it, never as damaged, and the next write drops what is left and starts afresh."""
    sset = mdss.SortedSet(redis_store, "s", chunk_size=2, log_limit=0, gc_grace=0.2)
    sset.add_many({f"m{i}": i for i in range(12)})
    nodes = list(redis_store.keys(sset.keys.nodes))
    assert nodes and all(t == -1 for t in ttls(redis_store, nodes))
    assert sset.expire(0.3) is True
    assert all(0 < t <= 500 for t in ttls(redis_store, nodes))
    assert ttls(redis_store, [sset.keys.head, sset.keys.marker]) == [-1, -1]
    time.sleep(0.6)
    assert list(redis_store.keys(sset.keys.nodes)) == [] and redis_store.get(sset.keys.head) is not None
    other = mdss.SortedSet(redis_store, "s", chunk_size=2)  # never saw it: not a lost head
    assert len(sset) == 0 and len(other) == 0 and sset.check() == [] and other.check() == []
    other.add("a", 1)
    assert [e.member for e in sset] == ["a"] and sset.check() == []
    assert all(t == -1 for t in ttls(redis_store, list(redis_store.keys(sset.keys.nodes))))


def test_redis_persist_and_a_later_moment_undo_the_stores_expiry(redis_store) -> None:
    """persist() and expire() to a later moment cancel what the store would expire first (the head fenced, then every
    key persisted), so a live set never loses a node; an expire() whose script finds the head moved changes nothing."""
    sset = mdss.SortedSet(redis_store, "s", chunk_size=2, log_limit=0, gc_grace=0.2)
    sset.add_many({f"m{i}": i for i in range(12)})
    keep = mdss.SortedSet(redis_store, "k", chunk_size=2, log_limit=0, gc_grace=0.2)
    keep.add_many({f"m{i}": i for i in range(12)})
    assert sset.expire(0.3) and keep.expire(0.3)
    stale = redis_store.get(sset.keys.head).version
    assert sset.persist() is True and keep.expire(100) is True
    nodes = [*redis_store.keys(sset.keys.nodes), *redis_store.keys(keep.keys.nodes)]
    assert all(t == -1 or t > 90_000 for t in ttls(redis_store, nodes))
    assert not redis_store.expire_keys(nodes, int(time.time() * 1000) + 300, sset.keys.head, stale, gen=0)  # fenced off
    sset.add("late", 99)  # a write after persist(): the head carries neither moment nor token
    time.sleep(0.6)
    for s in (sset, keep):
        assert len(s) == 12 + (s is sset) and s.check() == []
    assert keep.ttl() > 90 and sset.ttl() is None


def test_redis_an_interrupted_persist_is_finished_by_the_next(redis_store) -> None:
    """A head left fenced (a persist interrupted after its first commit) still expires at its moment, and the next
    persist() cancels every key's expiry before it clears the moment."""
    sset = mdss.SortedSet(redis_store, "s", chunk_size=2, log_limit=0, gc_grace=0.2)
    sset.add_many({f"m{i}": i for i in range(8)})
    sset.expire(0.3)
    record = redis_store.get(sset.keys.head)
    head = _head.Head.decode(sset.keys.head, record.value)
    redis_store.cas(sset.keys.head, head.next("f" * 16, native=_head.FENCED + "0f").encode(), record.version)
    assert sset.persist() is True
    time.sleep(0.6)
    assert len(sset) == 8 and sset.check() == []


def test_redis_expiry_calls_beside_writers_keep_the_invariant(redis_store) -> None:
    """Writers commit while other threads expire, move and clear the moment: after each call, no node a head without a
    moment names carries Redis' expiry, and none a head with one names expires before that moment; check() passes."""
    name, stop = "s", threading.Event()
    mdss.SortedSet(redis_store, name, chunk_size=2, log_limit=0).add_many({f"m{i}": i for i in range(10)})
    errors: list[BaseException] = []

    def write(i: int) -> None:
        sset, n = mdss.SortedSet(redis_store, name), 0
        while not stop.is_set():
            try:
                sset.add(f"w{i}-{n % 7}", n)
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)
                return
            n += 1

    def invariant(sset: mdss.SortedSet) -> None:
        head = _head.Head.decode("h", redis_store.get(sset.keys.head).value)
        named = [k for k in sset.node_keys() if k in set(redis_store.keys(sset.keys.nodes))]
        left = ttls(redis_store, named)
        if head.expires is None:
            assert all(t == -1 for t in left), (head, left)
        else:
            due = head.expires - time.time() * 1000
            assert all(t == -1 or t >= due - 50 for t in left), (head, left)

    writers = [threading.Thread(target=write, args=(i,)) for i in range(2 if DEEP else 1)]
    for t in writers:
        t.start()
    sset = mdss.SortedSet(redis_store, name)
    try:
        for seconds in (60, 30, 90, None, 45, None) if DEEP else (60, 90, None):
            if seconds is None:
                sset.persist()
            else:
                sset.expire(seconds)
            invariant(sset)
    finally:
        stop.set()
        for t in writers:
            t.join()
    assert not errors and sset.check() == []
    invariant(sset)


def test_redis_nodes_written_after_expire_take_its_expiry(redis_store) -> None:
    """Commits into the trees, merges of the log and loads after expire() give the nodes they write the same expiry
    (fenced by the head they published); after persist() they give none."""
    for log_limit in (0, 4):
        sset = mdss.SortedSet(redis_store, f"s{log_limit}", chunk_size=2, log_limit=log_limit)
        sset.add_many({f"m{i}": i for i in range(6)})
        sset.expire(1000)
        before = set(redis_store.keys(sset.keys.nodes))
        sset.add_many({f"n{i}": i for i in range(6)})
        sset.merge()
        new = [k for k in redis_store.keys(sset.keys.nodes) if k not in before]
        assert new and all(990_000 < t <= 1_030_000 for t in ttls(redis_store, new)), ttls(redis_store, new)
        sset.persist()
        assert all(t == -1 for t in ttls(redis_store, list(redis_store.keys(sset.keys.nodes))))
        sset.add_many({f"o{i}": i for i in range(6)})
        sset.merge()
        assert all(t == -1 for t in ttls(redis_store, list(redis_store.keys(sset.keys.nodes))))
        assert sset.check() == []


def test_expire_finds_no_set_without_members_and_an_emptied_set_keeps_its_moment(store, clock) -> None:
    """As Redis' EXPIRE of a key a set's last member left: False, nothing set, and what is added later stays. A set
    emptied after ``expire()`` keeps the moment (unlike Redis: documented), until ``persist()``."""
    for shards in (1, 3):
        sset = mdss.SortedSet(store, f"s{shards}", chunk_size=2, shards=shards)
        sset.add("a", 1)
        sset.remove("a")
        assert (sset.expire(5), sset.ttl()) == (False, None)
        sset.add("b", 2)
        clock.now += 10
        assert [e.member for e in sset] == ["b"] and sset.ttl() is None
        assert sset.expire(5) is True
        sset.remove("b")
        assert sset.ttl() == 5.0 and sset.expire(9) is False and sset.persist() is True
        sset.add("c", 3)
        clock.now += 10
        assert [e.member for e in sset] == ["c"]


def test_a_landed_commit_never_fails_on_giving_its_nodes_the_expiry(redis_store, monkeypatch) -> None:
    """The class of the DynamoDB long-name probe: what runs after a commit landed (a merge, the nodes' expiry) never
    fails the commit, whatever it raises, or a caller retries a write that landed (an incr counted twice)."""
    sset = mdss.SortedSet(redis_store, "late", chunk_size=2, log_limit=0)
    sset.add_many({f"m{i}": i for i in range(6)})
    sset.expire(1000)

    def refused(*args, **kwargs):
        raise mdss.InvalidArgumentError("injected: the store refuses the expiry")

    monkeypatch.setattr(redis_store, "expire_keys", refused)
    assert [sset.incr("hits", 1) for _ in range(3)] == [1, 2, 3]
    assert mdss.SortedSet(redis_store, "late").score("hits") == 3 and sset.check() == []


@pytest.mark.parametrize("how", ["persist", "expire later", "replacing load", "made again after expiry"])
def test_a_removal_from_a_held_head_past_its_moment_reads_the_set_as_it_stands(clock, how) -> None:
    """A removal answered "no set" from the head this object held, past its moment, though another object had since
    persisted the set, moved its moment later, replaced it, or made it again: the member stayed (a review)."""
    store = mdss.open_store("memory://")
    mine, other = mdss.SortedSet(store, "s"), mdss.SortedSet(store, "s")
    mine.add("x", 1)
    mine.expire(10)
    mine.add("y", 2)  # the head this object holds: its moment in 10 s
    if how == "persist":
        other.persist()
    elif how == "expire later":
        other.expire(60)
    elif how == "replacing load":
        mdss.SortedSet.load(store, "s", {"x": 1, "y": 2}, replace=True)
    clock.now += 11
    if how == "made again after expiry":
        other.add("x", 1)
    assert mine.remove("x") is True and mdss.SortedSet(store, "s").score("x") is None
