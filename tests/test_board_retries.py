"""A retried post counts nothing twice: across window boundaries, after partial landings, after other posts.

A post with a ``post_id`` records the moment it was first tried (the board's
record of post ids) and each window's commit adds the post's entry; a retry
takes the recorded moment, so it goes to the first try's window instances
however late it comes within ``post_id_ttl``. Each test runs on every store.
"""

from __future__ import annotations

import base64
import datetime as dt
import itertools
import json
import pathlib
import threading
import types
from zoneinfo import ZoneInfo

import pytest
from click.testing import CliRunner
from depth import examples
from faulty import FaultyStore
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mdss
from mdss import _windows
from mdss._board_format import _POST, _post_member
from mdss._board_post import _PRUNE
from mdss._retry import Backoff

UTC, NEW_YORK = dt.timezone.utc, ZoneInfo("America/New_York")
KINDS = ["all", "day", "week", "month"]
DAY = 86400

#: Moments one second before a boundary that changes where a post lands: (name, tz, the moment in tz).
BOUNDARIES = [
    ("day", None, dt.datetime(2026, 11, 18, 23, 59, 59, tzinfo=UTC)),
    ("iso-week", None, dt.datetime(2026, 11, 22, 23, 59, 59, tzinfo=UTC)),
    ("week-53", None, dt.datetime(2027, 1, 3, 23, 59, 59, tzinfo=UTC)),  # 2026-W53 -> 2027-W01
    ("month", None, dt.datetime(2026, 11, 30, 23, 59, 59, tzinfo=UTC)),
    ("year", None, dt.datetime(2026, 12, 31, 23, 59, 59, tzinfo=UTC)),  # day and month; the week stays W53
    ("dst-spring-day", "America/New_York", dt.datetime(2026, 3, 7, 23, 59, 59, tzinfo=NEW_YORK)),
    ("dst-fall-month", "America/New_York", dt.datetime(2026, 10, 31, 23, 59, 59, tzinfo=NEW_YORK)),
    ("dst-fall-week", "America/New_York", dt.datetime(2026, 11, 1, 23, 59, 59, tzinfo=NEW_YORK)),
]

#: Each write path: the owner's posts before the one retried (no post_id), and the retried one's arguments.
PATHS = {
    "plain": ([{"xp": 1, "laps": 1, "ms": 990}], {"values": {"xp": 5, "laps": 2, "ms": 900, "name": "Ann"}}),
    "ops-incr": ([{"xp": 1}], {"values": {"xp": 5}, "ops": {"xp": "incr"}}),
    "accumulate-keep-best": ([{"shots": 2, "ms": 800}], {"values": {"shots": 5, "ms": 700}}),
    "only-new": ([], {"values": {"xp": 5, "shots": 5}, "only": "new"}),
    "only-existing": ([{"shots": 1}], {"values": {"shots": 5}, "only": "existing"}),
}

_names = itertools.count()


def board_of(store: mdss.Store, clock: list[float], name: str = "game", **options) -> mdss.Leaderboard:
    options.setdefault("windows", KINDS)
    return mdss.Leaderboard(
        store,
        name,
        columns={"xp": "desc", "race": [("laps", "desc"), ("ms", "asc")]},
        accumulate=["shots"],
        keep_best={"ms": "min"},
        now=lambda: clock[0],
        **options,
    )


def instances(moment: float, tz, kinds=KINDS) -> list[str]:
    when = dt.datetime.fromtimestamp(moment, UTC)
    return [_windows.instance(k, when, _windows.check_tz(tz)) for k in kinds]


def rows_of(board: mdss.Leaderboard, owner: str) -> dict[str, mdss.Row | None]:
    return {i: board.row(owner, window=i) for i in board.windows()}


def post_entries(sset: mdss.SortedSet) -> int:
    """The post ids a window's set counts (members of its member index: ``mdss._board_rows``)."""
    return mdss._snapshot.read(sset.engine, lambda snap: sum(1 for m, _ in snap.by_member(_POST)))


#: The boundaries in four pairs: each store runs one pair, every pair runs on some store (all under MDSS_DEEP).
PAIRS = [BOUNDARIES[i::4] for i in range(4)]


@pytest.mark.grid("pair", size=len(PAIRS))
@pytest.mark.parametrize("pair", range(len(PAIRS)), ids=["+".join(b[0] for b in p) for p in PAIRS])
def test_a_retry_across_a_boundary_lands_where_the_first_try_did(store_factory, pair) -> None:
    """Every write path, retried 3 s after a boundary once it landed in every window, or in the first two
    only (the process died before the third): the board ends as a reference board posted to once. The window
    arithmetic is the same on every store: each runs two of the boundaries."""
    for _, tz, before in PAIRS[pair]:
        _retry_across(store_factory(), tz, before)


def _retry_across(store: mdss.Store, tz: str | None, before: dt.datetime) -> None:
    start = before.timestamp()
    after = start + 3
    assert instances(start, tz) != instances(after, tz), "not a boundary"
    clock = [start]
    ref = board_of(store, clock, "ref", tz=tz)
    for path, (earlier, post) in PATHS.items():
        for partial in (False, True):
            owner = f"{path}-{partial}"
            clock[0] = start
            for values in earlier:
                ref.post(owner, values)
                board_of(store, clock, tz=tz).post(owner, values)
            first = ref.post(owner, post_id="job", **post)
            assert set(first) == set(instances(start, tz))
            dying = board_of(store, clock, tz=tz)  # a process that dies after its second window's commit
            if partial:
                third = dying._set(instances(start, tz)[2])

                def died(ops, want_score=False):
                    raise RuntimeError("the process died")

                third.engine.group.submit = died  # type: ignore[method-assign]
                with pytest.raises(RuntimeError):
                    dying.post(owner, post_id="job", **post)
            else:
                assert dying.post(owner, post_id="job", **post) == first
            clock[0] = after
            board = board_of(store, clock, tz=tz)  # the retry, by another process, after the boundary
            landed = board.post(owner, post_id="job", **post)
            assert landed == {i: partial and changed and n >= 2 for n, (i, changed) in enumerate(first.items())}
            assert board.post(owner, post_id="job", **post) == dict.fromkeys(first, False)
            assert rows_of(board, owner) == rows_of(ref, owner), (path, partial)
    board = board_of(store, clock, tz=tz)
    assert board.windows() == ref.windows()
    for instance in board.windows():
        board._check(instance)
        assert [(r.rank, r.owner) for r in board.top("race", 20, window=instance)] == [
            (r.rank, r.owner) for r in ref.top("race", 20, window=instance)
        ]


def test_a_post_interrupted_at_any_store_call_is_finished_by_its_retry(store, monkeypatch) -> None:
    """A post that fails at its k-th store call (before the call, or after it: a lost reply) and whose process
    dies, retried by another process after the month turned: for every k, each window kind counts it once,
    in the instances of a single moment (the first try's once anything landed), and check() holds."""
    monkeypatch.setattr(mdss._retry, "STORE_CALLS", Backoff(budget=0.0, base=0.0, max_attempts=1))  # it died
    monkeypatch.setattr(mdss._log, "CLAIM_MS", 20)  # and its merge claims lapse soon
    start = dt.datetime(2026, 11, 30, 23, 59, 59, tzinfo=UTC).timestamp()
    clock = [start]
    values = {"xp": 3, "shots": 5, "laps": 1, "ms": 700}
    board = board_of(store, clock)
    board.post("warm", values)  # the windows and the record of post ids exist, as in a running board
    board.post("warm", values, post_id="warm")
    for after in (False, True):
        for k in itertools.count(1):
            owner = f"o{k}-{after}"
            clock[0] = start
            faulty = FaultyStore(store)
            dying = board_of(faulty, clock)
            faulty.fail_at, faulty.after, faulty.dies = faulty.count + k, after, True
            try:
                dying.post(owner, values, post_id="job")
                finished = True  # k is past the post's last store call
            except mdss.MdssError:
                finished = False
            clock[0] = start + 3
            survivor = board_of(store, clock)
            survivor.post(owner, values, post_id="job")
            assert set(survivor.post(owner, values, post_id="job").values()) == {False}
            rows = {i: r for i, r in rows_of(survivor, owner).items() if r is not None}
            assert sorted(rows) in (sorted(instances(start, None)), sorted(instances(start + 3, None))), (k, after)
            assert all(r.values == values for r in rows.values()), (k, after, rows)
            if finished:
                assert k > 5 and sorted(rows) == sorted(instances(start, None))
                break
    for instance in survivor.windows():
        survivor._check(instance)


def test_a_retry_after_many_other_posts_counts_nothing_twice_until_the_ttl(store) -> None:
    """A post id is remembered for post_id_ttl whatever the owner posts meanwhile (rows used to keep 8);
    retried after the ttl, the post counts again, as documented."""
    clock = [dt.datetime(2026, 11, 18, 12, tzinfo=UTC).timestamp()]
    board = board_of(store, clock, post_id_ttl=3600)
    board.post("ann", {"shots": 5}, post_id="job")
    for i in range(50):
        clock[0] += 10
        board.post("ann", {"shots": 1}, post_id=f"other-{i}")
        board.post("bob", {"shots": 1}, post_id=f"other-{i}")  # the same ids, another owner: its own
    assert set(board.post("ann", {"shots": 5}, post_id="job").values()) == {False}
    clock[0] += 3000  # 3500 s after the first try: still remembered
    assert set(board.post("ann", {"shots": 5}, post_id="job").values()) == {False}
    assert set(board.post("ann", {"shots": 1}, post_id="other-0").values()) == {False}
    assert board.row("ann").values["shots"] == 55 and board.row("bob").values["shots"] == 50
    clock[0] += 101  # 3601 s after the first try: forgotten, the post counts again
    assert set(board.post("ann", {"shots": 5}, post_id="job").values()) == {True}
    assert board.row("ann").values["shots"] == 60
    assert set(board.post("ann", {"shots": 5}, post_id="job").values()) == {False}  # and is remembered anew
    for instance in board.windows():
        board._check(instance)


def test_post_ids_stay_bounded_with_a_short_ttl(store) -> None:
    """Posts forget the ids past the ttl as they go: the record and each window hold about a ttl's worth."""
    clock = [dt.datetime(2026, 11, 18, 1, tzinfo=UTC).timestamp()]
    board = board_of(store, clock, windows=["all", "day"], post_id_ttl=100, chunk_size=8)
    live = 100 // 10 + 1  # ids younger than the ttl, one post every 10 s
    for i in range(240):
        clock[0] += 10
        board.post(f"o{i % 3}", {"shots": 1}, post_id=f"job-{i}")
        if i % 40 == 39:
            assert len(board._posts()) <= live + _PRUNE
            for instance in board.windows():
                assert post_entries(board._set(instance)) <= live + _PRUNE
    assert [board.row(f"o{i}").values["shots"] for i in range(3)] == [80, 80, 80]
    for instance in board.windows():
        board._check(instance)


def test_reads_never_see_post_id_entries(store) -> None:
    """Every view of a board posted with post ids equals that of a board posted the same without them."""
    clock = [dt.datetime(2026, 11, 18, 1, tzinfo=UTC).timestamp()]
    with_ids, without = board_of(store, clock, "a", chunk_size=4), board_of(store, clock, "b", chunk_size=4)
    for i in range(30):
        values = {"xp": i % 7, "shots": i % 3, "laps": i % 2, "ms": 900 + i % 5}
        with_ids.post(f"o{i % 9}", values, post_id=f"job-{i}")
        without.post(f"o{i % 9}", values)
    for window in with_ids.windows():
        assert post_entries(with_ids._set(window)) == 30
        for column in ("xp", "race"):
            for ties in mdss.leaderboard.TIES:
                assert with_ids.top(column, 50, window=window, ties=ties) == without.top(
                    column, 50, window=window, ties=ties
                )
                assert with_ids.around("o3", column, window=window, ties=ties) == without.around(
                    "o3", column, window=window, ties=ties
                )
            assert with_ids.count(column, window=window) == without.count(column, window=window) == 9
            assert (
                with_ids.page(column, limit=4, window=window).rows == without.page(column, limit=4, window=window).rows
            )
            assert with_ids.percentile("o8", column, window=window) == without.percentile("o8", column, window=window)
            assert with_ids.at_percentile(column, 0.99, window=window) == without.at_percentile(
                column, 0.99, window=window
            )
            owners = [f"o{i}" for i in range(10)]
            assert with_ids.rows(owners, column, window=window) == without.rows(owners, column, window=window)
        assert with_ids.positions("o5", window=window) == without.positions("o5", window=window)
        assert with_ids.check(window) == []


def test_the_cli_and_the_port_retry_across_midnight(store, tmp_path, monkeypatch) -> None:
    """``mdss board post --post-id`` and the port's ``board_post`` are Leaderboard.post: retried after
    midnight, they count nothing twice (their boards read the clock through time.time)."""
    from test_port import A, B, ask

    from mdss.cli import cli
    from mdss.port import PortServer

    clock = [dt.datetime(2026, 11, 18, 23, 59, 59, tzinfo=UTC).timestamp()]
    monkeypatch.setattr(mdss.leaderboard, "time", types.SimpleNamespace(time=lambda: clock[0]))
    url = f"sqlite:///{tmp_path}/cli.db"

    def run(*args: str) -> dict:
        result = CliRunner().invoke(cli, ["--store", url, "--set", "game", "board", "--windows", "all,day", *args])
        assert result.exit_code == 0, result.output
        return json.loads(result.output)

    create = ["--columns", json.dumps({"xp": "desc"}), "--accumulate", "shots"]
    assert run(*create, "--json", "post", "ann", "shots=5", "--post-id", "p1") == {
        "all": True,
        "day:2026-11-18": True,
    }
    clock[0] += 3
    assert run("--json", "post", "ann", "shots=5", "--post-id", "p1") == {"all": False, "day:2026-11-18": False}
    assert run("--json", "windows") == ["all", "day:2026-11-18"]
    assert run("--json", "row", "ann")["values"]["shots"] == 5
    ttl = ["--post-id", "p1", "--post-id-ttl", "2"]  # 3 s after its first try: forgotten, it counts again
    assert run("--json", "post", "ann", "shots=5", *ttl) == {"all": True, "day:2026-11-19": True}
    assert run("--json", "post", "ann", "shots=5", *ttl) == {"all": False, "day:2026-11-19": False}

    clock[0] -= 3
    port = PortServer(store)
    board = (
        B("game"),
        {A("columns"): {A("xp"): A("desc")}, A("accumulate"): [A("shots")], A("windows"): [A("all"), A("day")]},
    )
    posted = ask(port, "board_post", board, B("ann"), {A("shots"): 5}, {A("post_id"): B("p1")})
    assert posted[2] == {"all": True, "day:2026-11-18": True}
    clock[0] += 3
    retried = ask(port, "board_post", board, B("ann"), {A("shots"): 5}, {A("post_id"): B("p1")})
    assert retried[2] == {"all": False, "day:2026-11-18": False}
    assert ask(port, "board_row", board, B("ann"))[2][1] == {"shots": 5}


def test_rows_stored_with_their_post_ids_still_dedup(store) -> None:
    """Rows written before post id entries keep their last 8 post ids in the row (the dump
    tests/data/leaderboard/post-ids-in-rows.json): a retry of one of those is still a no-op, after new posts
    too; check() holds; new post ids get entries. Those ids have no recorded moment: the move to record windows
    records each as first tried at the move, in the windows whose rows held it, for post_id_ttl
    (docs/leaderboard.md says so)."""
    dump = json.loads((pathlib.Path(__file__).parent / "data" / "leaderboard" / "post-ids-in-rows.json").read_text())
    old, new = "mdss:", mdss._keys.Keyspace(store.namespace, "x").prefix[: -len("x:")]
    for key, value in dump["store"].items():
        store.put(new + key[len(old) :], base64.b64decode(value))
    clock = [1795000000.0 + 3600]
    board = mdss.Leaderboard.open(store, "game", windows=["all", "day"], now=lambda: clock[0])
    for window, rows in dump["rows"].items():
        for owner, (values, updated) in rows.items():
            assert board.row(owner, window=window) == mdss.Row(owner, values, updated)
        board._check(window)
    remembered = [p for p in dump["posts"] if p[0] == "bob"] + [p for p in dump["posts"] if p[0] == "ann"][-8:]
    for owner, values, post_id in remembered[1:]:  # retried today: now recorded, with today's moment
        assert set(board.post(owner, values, post_id=post_id).values()) == {False}, post_id
    assert set(board.post("ann", {"shots": 1}, post_id="new").values()) == {True}
    clock[0] += DAY  # the next day: the ids retried yesterday go where they went
    assert set(board.post("ann", {"shots": 1}, post_id="new").values()) == {False}
    for owner, values, post_id in remembered[1:]:
        assert board.post(owner, values, post_id=post_id) == {"all": False, "day:2026-11-18": False}, post_id
    owner, values, post_id = remembered[0]  # never retried since: first tried at the move, where the rows held it
    assert board.post(owner, values, post_id=post_id) == {"all": False, "day:2026-11-18": False}
    assert board.row("ann").values["shots"] == dump["rows"]["all"]["ann"][0]["shots"] + 1
    assert board.row(owner).values == dump["rows"]["all"][owner][0]
    for window in board.windows():
        board._check(window)


def _moment_of(board: mdss.Leaderboard, owner: str, post_id: str) -> float | None:
    return board._posts().score(_post_member(owner, post_id))


_RETRY_STEPS = dict(
    steps=st.lists(
        st.tuples(
            st.sampled_from(["ann", "bob"]),
            st.integers(0, 4),  # the post id: few, so that many posts are retries
            st.sampled_from([0, 1, 3600, DAY - 1, DAY, 3 * DAY, 7 * DAY, 31 * DAY]),  # the clock's jump first
            st.one_of(st.none(), st.integers(1, 30)),  # the store call that fails (then the process restarts)
            st.booleans(),  # after it (a lost reply) or before
        ),
        max_size=14,
    ),
    tz=st.sampled_from([None, "America/New_York"]),
)


def test_retried_posts_match_a_model_that_counts_each_post_once(store_factory, store, monkeypatch) -> None:
    """Random posts, many of them retries, random clock jumps across boundaries and crashes at random store
    calls; at the end every post is retried once more. The board's rows equal a model that applies each
    distinct (owner, post id) once, in the window instances of the moment the board recorded for it, which
    is one of the moments it was tried at.

    By default a quarter of the examples on the networked stores (``depth.examples``), all under MDSS_DEEP."""

    @settings(
        max_examples=examples(store_factory.kind, settings().max_examples),
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    @given(**_RETRY_STEPS)
    def retried(steps, tz) -> None:
        _retried_posts(store, monkeypatch, steps, tz)

    retried()


def _retried_posts(store, monkeypatch, steps, tz) -> None:
    monkeypatch.setattr(mdss._log, "CLAIM_MS", 20)  # the merge claim of a post that failed lapses soon
    clock = [dt.datetime(2026, 12, 20, 23, 59, tzinfo=UTC).timestamp()]
    faulty = FaultyStore(store)
    name = f"g{next(_names)}"
    board = board_of(faulty, clock, name, tz=tz, post_id_ttl=10**9, chunk_size=3)
    tried: dict[tuple[str, str], set[float]] = {}
    values: dict[tuple[str, str], dict] = {}
    for owner, n, jump, fail_at, after in steps:
        clock[0] += jump
        key = (owner, f"job-{n}")
        shots = values.setdefault(key, {"shots": n + 1, "xp": len(values)})  # a retry posts the same values
        tried.setdefault(key, set()).add(clock[0])
        if fail_at is not None:
            faulty.fail_at, faulty.after = faulty.count + fail_at, after
        try:
            board.post(owner, shots, post_id=key[1])
        except mdss.MdssError:
            board = board_of(faulty, clock, name, tz=tz, post_id_ttl=10**9, chunk_size=3)  # a restart
        faulty.fail_at = None
    for key in values:
        tried[key].add(clock[0])
        board.post(key[0], values[key], post_id=key[1])
    model: dict[str, dict[str, int]] = {}
    for (owner, post_id), posted in values.items():
        moment = _moment_of(board, owner, post_id)
        assert moment in tried[(owner, post_id)]
        for instance in instances(moment, tz):
            row = model.setdefault(instance, {}).setdefault(owner, 0)
            model[instance][owner] = row + posted["shots"]
    assert sorted(board.windows()) == sorted(model)
    for instance, rows in model.items():
        for owner in ("ann", "bob"):
            row = board.row(owner, window=instance)
            assert (row and row.values["shots"]) == rows.get(owner), (instance, owner)
        board._check(instance)


def test_a_retry_never_brings_back_a_window_retention_dropped(store) -> None:
    """A post retried after its day's window was dropped (retention keeps the newest day) skips that window
    (False) instead of making it again; the all-time window still counts it once."""
    clock = [dt.datetime(2026, 11, 18, 23, 59, 59, tzinfo=UTC).timestamp()]
    board = board_of(store, clock, windows=["all", "day"], retention={"day": 1})
    assert board.post("ann", {"shots": 5}, post_id="job") == {"all": True, "day:2026-11-18": True}
    clock[0] += 3
    board.post("bob", {"shots": 1})
    assert board.windows("day") == ["day:2026-11-19"]
    retry = board_of(store, clock, windows=["all", "day"], retention={"day": 1})  # another process
    assert retry.post("ann", {"shots": 5}, post_id="job") == {"all": False, "day:2026-11-18": False}
    assert retry.windows("day") == ["day:2026-11-19"] and retry.row("ann").values == {"shots": 5}


def test_a_lagging_process_never_brings_back_a_window_another_dropped(store) -> None:
    """The process that made a day's window remembers it listed; another process's post on the next day drops it
    (retention keeps one day). A retry in the first process skips that window (False): it neither writes rows into an
    unlisted window nor lists the dropped window again, and leaves no head behind."""
    clock = [dt.datetime(2026, 11, 18, 23, 59, 59, tzinfo=UTC).timestamp()]
    first = board_of(store, clock, windows=["all", "day"], retention={"day": 1})
    assert first.post("ann", {"shots": 5}, post_id="job") == {"all": True, "day:2026-11-18": True}
    clock[0] += 3
    other = board_of(store, clock, windows=["all", "day"], retention={"day": 1})  # another process
    other.post("bob", {"shots": 1})
    assert other.windows("day") == ["day:2026-11-19"]
    assert first.post("ann", {"shots": 5}, post_id="job") == {"all": False, "day:2026-11-18": False}
    assert first.windows("day") == ["day:2026-11-19"] and other.windows("day") == ["day:2026-11-19"]
    assert store.get(first._set("day:2026-11-18").keys.head) is None
    assert first.row("ann").values == {"shots": 5}


def test_the_same_post_from_several_threads_counts_once(store) -> None:
    """Four processes' worth of threads send one post (the same post id) at once, as a client that timed out
    and resent it to other servers: every window counts it exactly once, in one set of instances."""
    clock = [dt.datetime(2026, 11, 30, 23, 59, 59, tzinfo=UTC).timestamp()]
    boards = [board_of(store, clock, chunk_size=4) for _ in range(4)]
    barrier = threading.Barrier(len(boards))
    results: list[dict[str, bool]] = []

    def send(board: mdss.Leaderboard) -> None:
        barrier.wait()
        results.append(board.post("ann", {"shots": 5, "xp": 1}, post_id="job"))

    threads = [threading.Thread(target=send, args=(b,)) for b in boards]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 4 and all(set(r) == set(instances(clock[0], None)) for r in results)
    assert [sum(r[i] for r in results) for i in instances(clock[0], None)] == [1, 1, 1, 1]
    assert all(row.values["shots"] == 5 for row in rows_of(boards[0], "ann").values() if row is not None)
    for instance in boards[0].windows():
        boards[0]._check(instance)
