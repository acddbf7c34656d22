"""mdss.Leaderboard against a model: a dict of rows per window instance, sorted per column on demand."""

from __future__ import annotations

import datetime as dt
import functools
import math
import threading
from typing import Any

import pytest
from depth import budget, call_points
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

import mdss
from mdss import _windows
from mdss._order import encode_part

COLUMNS = {"xp": "desc", "accuracy": "desc", "race": [("laps", "desc"), ("time_ms", "asc")]}
ACCUMULATE = ["shots", "kills"]
KEEP_BEST = {"time_ms": "min"}
DAY = 86400
T0 = 1_795_000_000  # 2026-11-18, a Wednesday


class BoardModel:
    """What a leaderboard should hold: per window instance, owner -> (values, updated, post ids)."""

    def __init__(self, columns=COLUMNS, accumulate=ACCUMULATE, keep_best=KEEP_BEST, firsts=()) -> None:
        self.columns = {name: [(name, spec)] if isinstance(spec, str) else list(spec) for name, spec in columns.items()}
        self.accumulate, self.keep_best = set(accumulate), dict(keep_best)
        self.windows: dict[str, dict[str, tuple[dict, float, list]]] = {}
        self.removed: dict[tuple[str, str], list] = {}  # (instance, owner) -> the post ids of rows removed
        self.firsts = set(firsts)  # columns whose ties go by who reached the key first
        self.reached: dict[tuple[str, str, str], int] = {}  # (instance, column, owner) -> when it reached its key
        self.moments = 0

    def post(self, instance: str, owner: str, values: dict, post_id, only, stamp: float) -> bool:
        rows = self.windows.setdefault(instance, {})
        found = rows.get(owner)
        if post_id is not None and found is not None and post_id in found[2]:
            return False
        if post_id is not None and post_id in self.removed.get((instance, owner), ()):
            return False  # counted before the row was removed: a retry counts nothing
        if only == "new" and found is not None or only == "existing" and found is None:
            return False
        merged = dict(found[0]) if found else {}
        for field, value in values.items():
            current = merged.get(field)
            if field in self.accumulate:
                merged[field] = (current or 0) + value
            elif field in self.keep_best and current is not None:
                merged[field] = min(current, value) if self.keep_best[field] == "min" else max(current, value)
            else:
                merged[field] = value
        posts = (found[2] if found else []) + ([post_id] if post_id is not None else [])
        for column in self.firsts:  # only a change of the key moves its moment
            if self.key(column, merged) != (self.key(column, found[0]) if found else None):
                self.reached[instance, column, owner] = self.moments = self.moments + 1
        rows[owner] = (merged, stamp, posts)  # every post id: the machine's boards forget none
        return True

    def remove(self, instance: str, owner: str) -> bool:
        found = self.windows.get(instance, {}).pop(owner, None)
        if found is not None:
            self.removed.setdefault((instance, owner), []).extend(found[2])
        return found is not None

    def key(self, column: str, values: dict):
        parts = []
        for field, direction in self.columns[column]:
            value = values.get(field)
            if type(value) not in (int, float):
                return None
            parts.append(-value if direction == "desc" else value)
        return tuple(parts)

    def ranked(self, instance: str, column: str, ties: str = "ordinal") -> list[tuple[int, str]]:
        rows = self.windows.get(instance, {})
        keyed = sorted(
            (self.key(column, v[0]), self.reached[instance, column, owner] if column in self.firsts else 0, owner)
            for owner, v in rows.items()
            if self.key(column, v[0]) is not None
        )
        result = []
        for i, (key, _, owner) in enumerate(keyed):
            if ties == "ordinal":
                rank = i + 1
            elif ties == "competition":
                rank = 1 + sum(1 for k, _, _ in keyed if k < key)
            else:  # dense
                rank = 1 + len({k for k, _, _ in keyed if k < key})
            result.append((rank, owner))
        return result


def _as_pairs(rows: list[mdss.RankedRow]) -> list[tuple[int | None, str]]:
    return [(r.rank, r.owner) for r in rows]


OWNERS = st.sampled_from(["ann", "bob", "cid", "dee", "eve", "fay"])
NUMBERS = st.one_of(
    st.integers(-3, 3), st.sampled_from([0.5, 2**53, 2**53 + 1, -math.inf, math.inf, 1.0, 2**63 - 1, -(2**63)])
)
VALUES = st.fixed_dictionaries(
    {},
    optional={
        "xp": NUMBERS,
        "accuracy": NUMBERS,
        "laps": st.integers(0, 3),
        "time_ms": st.integers(50, 60),
        "shots": st.integers(0, 5),
        "kills": st.integers(0, 2),
        "name": st.text(max_size=5),
        "pro": st.booleans(),
    },
)


class LeaderboardMachine(RuleBasedStateMachine):
    """Posts with an injected clock, retried post ids and only=, against the model; check() after every step."""

    @initialize(
        chunk=st.sampled_from([2, 3, 4, 5, 8, 16]),
        log_limit=st.sampled_from([0, 3, None]),
        tz=st.sampled_from([None, "Asia/Tokyo"]),
        node_bytes=st.sampled_from([mdss.leaderboard.NODE_BYTES, 1100, 1600]),
        firsts=st.sets(st.sampled_from(sorted(COLUMNS))),
    )
    def start(self, chunk: int, log_limit, tz, node_bytes: int, firsts: set) -> None:
        self.clock = [float(T0)]
        self.tz = _windows.check_tz(tz)
        self.board = mdss.Leaderboard(
            mdss.open_store("memory://"),
            "game",
            columns=COLUMNS,
            tiebreak=dict.fromkeys(firsts, "first"),
            accumulate=ACCUMULATE,
            keep_best=KEEP_BEST,
            windows=["all", "week", "day"],
            tz=tz,
            now=lambda: self.clock[0],
            chunk_size=chunk,
            log_limit=log_limit,
            node_bytes=node_bytes,
            post_id_ttl=10**10,
        )
        self.model = BoardModel(firsts=firsts)
        self.post_ids: list[str] = []
        self.first_tried: dict[tuple[str, str], float] = {}  # a retried post goes where its first try went

    def instances(self, moment: float | None = None) -> list[str]:
        when = dt.datetime.fromtimestamp(self.clock[0] if moment is None else moment, dt.timezone.utc)
        return [_windows.instance(k, when, self.tz) for k in ("all", "week", "day")]

    @rule(owner=OWNERS, values=VALUES, reuse=st.booleans(), only=st.sampled_from([None, None, "new", "existing"]))
    def post(self, owner, values, reuse, only) -> None:
        post_id = self.post_ids[-1] if reuse and self.post_ids else f"p{len(self.post_ids)}"
        self.post_ids.append(post_id)
        moment = self.first_tried.setdefault((owner, post_id), self.clock[0])
        expected = {i: self.model.post(i, owner, values, post_id, only, moment) for i in self.instances(moment)}
        assert self.board.post(owner, values, post_id=post_id, only=only) == expected

    @rule(owner=OWNERS, which=st.sampled_from([None, "all", "week", "day"]))
    def remove(self, owner, which) -> None:
        """The owner's row leaves one window (a kind's current instance) or every window."""
        instances = self.board.windows() if which is None else [self.instances()[("all", "week", "day").index(which)]]
        expected = {i: self.model.remove(i, owner) for i in instances}
        assert self.board.remove(owner, window=which) == expected

    @rule(days=st.sampled_from([0.25, 1, 3, 8]))
    def tick(self, days) -> None:
        self.clock[0] += days * DAY

    @rule()
    def sweep(self) -> None:
        """gc leaves nothing that no head names (rows are entries: collected with their nodes)."""
        self.board.gc(sweep=True, wait=False)
        for instance in self.board.windows():
            assert self.board._set(instance).unreferenced() == []

    @invariant()
    def views_match(self) -> None:
        if not hasattr(self, "board"):
            return
        for instance in self.instances():
            rows = self.model.windows.get(instance, {})
            for owner in ("ann", "bob", "cid"):
                row = self.board.row(owner, window=instance)
                if owner not in rows:
                    assert row is None
                    assert self.board.positions(owner, window=instance) == {}
                    continue
                assert row == mdss.Row(owner, rows[owner][0], rows[owner][1])
                for ties in ("ordinal", "competition", "dense"):
                    expected = {
                        c: dict((o, r) for r, o in self.model.ranked(instance, c, ties))[owner]
                        for c in COLUMNS
                        if self.model.key(c, rows[owner][0]) is not None
                    }
                    assert self.board.positions(owner, window=instance, ties=ties) == expected
                for column in COLUMNS:
                    ranked = self.model.ranked(instance, column, "competition")
                    rank = dict((o, r) for r, o in ranked).get(owner)
                    share = None if rank is None else (rank - 1) / len(ranked)
                    assert self.board.percentile(owner, column, window=instance) == share
            for column in COLUMNS:
                for ties in ("ordinal", "competition", "dense"):
                    ranked = self.model.ranked(instance, column, ties)
                    # Pages of 2 walk the whole column; every row is the model's.
                    got, cursor = [], None
                    while True:
                        page = self.board.page(column, limit=2, cursor=cursor, window=instance, ties=ties)
                        got += page.rows
                        cursor = page.cursor
                        if cursor is None:
                            break
                    assert _as_pairs(got) == ranked
                    assert all(r.values == rows[r.owner][0] for r in got)
                    assert _as_pairs(self.board.top(column, 3, window=instance, ties=ties)) == ranked[:3]
                    for p in (0.0, 0.5, 0.99, 1.0):
                        found = self.board.at_percentile(column, p, window=instance, ties=ties)
                        at = min(int(p * len(ranked)), len(ranked) - 1)
                        assert (found and (found.rank, found.owner)) == (ranked[at] if ranked else None)
                    friends = ["ann", "cid", "fay", "zed"]
                    ranked_friends = [p for p in ranked if p[1] in friends]
                    unranked = sorted(o for o in friends if o in rows and all(o != p[1] for p in ranked))
                    assert _as_pairs(self.board.rows(friends, column, window=instance, ties=ties)) == ranked_friends + [
                        (None, o) for o in unranked
                    ]
                    for i, (_, owner) in enumerate(ranked[:3]):
                        around = self.board.around(owner, column, before=1, after=2, window=instance, ties=ties)
                        assert _as_pairs(around) == ranked[max(i - 1, 0) : i + 3]
            self.board._check(instance)

    @invariant()
    def windows_listed(self) -> None:
        if hasattr(self, "board"):
            assert set(self.board.windows()) == set(self.model.windows)


TestLeaderboard = LeaderboardMachine.TestCase
TestLeaderboard.settings = settings(max_examples=budget(30), stateful_step_count=20, deadline=None)


# -- examples ----------------------------------------------------------------------------------------------------------


def board_of(**options) -> mdss.Leaderboard:
    options.setdefault("columns", COLUMNS)
    options.setdefault("accumulate", ACCUMULATE)
    options.setdefault("keep_best", KEEP_BEST)
    return mdss.Leaderboard(mdss.open_store("memory://"), "game", **options)


def test_the_issue_example() -> None:
    clock = [dt.datetime(2026, 11, 19, 12, tzinfo=dt.timezone.utc)]
    board = board_of(windows=["all", "week", "day"], now=lambda: clock[0], chunk_size=3)
    assert board.post("owner-1", {"xp": 600, "shots": 10, "time_ms": 61000, "laps": 3}, post_id="p-991") == {
        "all": True,
        "week:2026-W47": True,
        "day:2026-11-19": True,
    }
    board.post("owner-2", {"xp": 900, "shots": 3, "time_ms": 59000, "laps": 3, "accuracy": 0.5})
    board.post("owner-1", {"shots": 5, "time_ms": 62000, "accuracy": 0.75})
    row = board.row("owner-1", window="week")
    assert row is not None and row.values == {"xp": 600, "shots": 15, "time_ms": 61000, "laps": 3, "accuracy": 0.75}
    assert board.positions("owner-1", window="week") == {"xp": 2, "accuracy": 1, "race": 2}
    assert _as_pairs(board.top("race", 10, window="day")) == [(1, "owner-2"), (2, "owner-1")]
    assert _as_pairs(board.around("owner-1", "xp", before=5, after=5)) == [(1, "owner-2"), (2, "owner-1")]
    assert _as_pairs(board.rows(["owner-1", "owner-7"], "xp")) == [(2, "owner-1")]
    assert board.windows("week") == ["week:2026-W47"]
    assert _as_pairs(board.top("xp", window="week:2026-W47")) == [(1, "owner-2"), (2, "owner-1")]
    clock[0] += dt.timedelta(days=7)
    assert board.top("xp", window="week") == []  # a new week
    assert len(board.top("xp", window="week:2026-W47")) == 2  # the old one stays readable
    for instance in board.windows():
        board._check(instance)


def test_composite_keys_are_exact() -> None:
    values = [-math.inf, -(2**63), -(2**53) - 1, -1.5, -1, 0, 0.5, 1, 2**53, 2**53 + 1, 2**63 - 1, math.inf]
    for direction in ("asc", "desc"):
        encoded = [encode_part(v, direction) for v in values]
        assert encoded == sorted(encoded, reverse=direction == "desc")
        assert len(set(encoded)) == len(values)
    board = board_of(columns={"big": "desc", "duo": [("a", "asc"), ("b", "desc")]}, accumulate=[], keep_best={})
    board.post("x", {"big": 2**53, "a": 1, "b": 2**63 - 1})
    board.post("y", {"big": 2**53 + 1, "a": 1, "b": 2**63 - 2})
    board.post("z", {"big": 2.0**53, "a": 1.0, "b": 2**63 - 1})  # ties x exactly: broken by owner
    assert _as_pairs(board.top("big")) == [(1, "y"), (2, "x"), (3, "z")]
    assert _as_pairs(board.top("big", ties="competition")) == [(1, "y"), (2, "x"), (2, "z")]
    assert _as_pairs(board.top("duo", ties="competition")) == [(1, "x"), (1, "z"), (3, "y")]
    assert _as_pairs(board.top("duo", ties="dense")) == [(1, "x"), (1, "z"), (2, "y")]
    assert board.positions("y", ties="dense") == {"big": 1, "duo": 2}


@given(st.lists(st.one_of(st.integers(-(2**63), 2**63 - 1), st.floats(allow_nan=False)), min_size=2, max_size=8))
def test_part_encoding_orders_like_numbers(values) -> None:
    for direction in ("asc", "desc"):
        by_number = sorted(values, reverse=direction == "desc")
        by_code = sorted(values, key=lambda v: encode_part(v, direction))
        assert by_code == by_number or all(a == b for a, b in zip(by_code, by_number))


def test_bad_values_write_nothing() -> None:
    board = board_of()
    for values, error in (
        ({"xp": "lots"}, mdss.InvalidScoreError),
        ({"xp": True}, mdss.InvalidScoreError),
        ({"shots": "x"}, mdss.InvalidScoreError),
        ({"xp": math.nan}, mdss.InvalidScoreError),
        ({"xp": 2**64}, mdss.InvalidScoreError),
        ({"xp": [1]}, mdss.InvalidArgumentError),
        ({f"f{i}": i for i in range(65)}, mdss.InvalidArgumentError),
        ({"blob": "x" * 5000}, mdss.InvalidArgumentError),
        ({"": 1}, mdss.InvalidArgumentError),
    ):
        with pytest.raises(error):
            board.post("ann", values)
    with pytest.raises(mdss.InvalidMemberError):
        board.post("x" * 200, {"xp": 1})
    with pytest.raises(mdss.InvalidArgumentError):
        board.post("ann", {"xp": 1}, ops={"xp": "sometimes"})
    with pytest.raises(mdss.InvalidArgumentError):
        board.post("ann", {"xp": 1}, only="old")
    assert board.row("ann") is None and board.windows() == []
    with pytest.raises(mdss.InvalidArgumentError):
        board.top("nope")
    with pytest.raises(mdss.InvalidArgumentError):
        board.top("xp", ties="modified")
    with pytest.raises(mdss.InvalidArgumentError):
        board.top("xp", window="fortnight")
    with pytest.raises(mdss.InvalidArgumentError):
        board.page("xp", cursor="garbage")


def test_bad_settings_are_refused() -> None:
    for options in (
        {"columns": {}},
        {"columns": {"xp": "up"}},
        {"columns": {"xp": [("a", "asc"), ("a", "desc")]}},
        {"columns": {"xp": "desc"}, "keep_best": {"t": "least"}},
        {"columns": {"xp": "desc"}, "accumulate": ["k"], "keep_best": {"k": "min"}},
        {"columns": {"xp": "desc"}, "windows": ["season"]},  # not a kind, and no schedule has that name
        {"columns": {"xp": "desc"}, "windows": ["all"], "retention": {"day": 3}},
        {"columns": {"xp": "desc"}, "tz": "Mars/Olympus"},
        {"columns": {"xp": "desc"}, "name": "a#rows"},
    ):
        with pytest.raises(mdss.InvalidArgumentError):
            mdss.Leaderboard(mdss.open_store("memory://"), options.pop("name", "g"), **options)
    store = mdss.open_store("memory://")
    mdss.Leaderboard(store, "g", columns={"xp": "desc"})
    with pytest.raises(mdss.SettingsMismatchError):
        mdss.Leaderboard(store, "g", columns={"xp": "asc"})
    mdss.Leaderboard(store, "g", columns={"xp": "desc"}, windows=["day"])  # windows are the caller's


def test_ops_and_only_in_posts() -> None:
    board = board_of(columns={"xp": "desc"}, accumulate=[], keep_best={})
    board.post("ann", {"xp": 5, "lvl": 1})
    board.post("ann", {"xp": 3, "lvl": 2}, ops={"xp": "gt", "lvl": "incr"})
    assert board.row("ann").values == {"xp": 5, "lvl": 3}
    board.post("ann", {"xp": 9}, ops={"xp": "best"})
    assert board.row("ann").values["xp"] == 9
    assert board.post("ann", {"xp": 1}, only="new") == {"all": False}
    assert board.post("bob", {"xp": 1}, only="existing") == {"all": False}
    assert board.row("bob") is None


def test_a_crash_between_windows_is_finished_by_retrying_once() -> None:
    board = board_of(windows=["all", "week", "day"], now=lambda: T0)
    board.post("bob", {"xp": 1})  # opens the windows' sets
    week = board._set(board.windows("week")[0])

    def died(ops, want_score=False):
        raise RuntimeError("the process died")

    week.engine.group.submit = died  # type: ignore[method-assign]
    with pytest.raises(RuntimeError):
        board.post("ann", {"shots": 10, "xp": 1}, post_id="p1")
    del week.engine.group.submit
    assert board.row("ann", window="week") is None and board.row("ann").values["shots"] == 10
    done = board.post("ann", {"shots": 10, "xp": 1}, post_id="p1")
    assert list(done.values()) == [False, True, True]
    for instance in board.windows():
        assert board.row("ann", window=instance).values["shots"] == 10
        board._check(instance)
    for instance in board.windows():
        assert board._set(instance).unreferenced() == []


def test_an_overflow_in_any_window_writes_nothing() -> None:
    board = board_of(windows=["all", "day"], now=lambda: T0)
    board.post("ann", {"shots": 2**63 - 2})
    with pytest.raises(mdss.InvalidScoreError):
        board.post("ann", {"shots": 5})
    assert board.row("ann").values["shots"] == 2**63 - 2


def test_retention_keeps_the_newest_windows() -> None:
    clock = [float(T0)]
    board = board_of(windows=["all", "day"], retention={"day": 3}, now=lambda: clock[0])
    for day in range(6):
        board.post("ann", {"xp": day, "shots": 1})
        clock[0] += DAY
    assert board.windows("day") == ["day:2026-11-21", "day:2026-11-22", "day:2026-11-23"]
    assert board.row("ann", window="day:2026-11-18") is None  # dropped
    assert board.row("ann").values["shots"] == 6  # all time keeps everything
    # The dropped windows' nodes (rows included) are gone too.
    assert not list(board.store.keys(mdss._keys.Keyspace(board.store.namespace, "game#day:2026-11-18").nodes))


def test_windows_cut_in_a_time_zone() -> None:
    moment = dt.datetime(2026, 11, 23, 3, 0, tzinfo=dt.timezone.utc)  # Sunday 22:00 in New York
    board = board_of(windows=["day", "week", "month"], tz="America/New_York", now=lambda: moment)
    assert set(board.post("ann", {"xp": 1})) == {"day:2026-11-22", "week:2026-W47", "month:2026-11"}


def test_concurrent_posts_count_every_accumulation() -> None:
    board = board_of(windows=["all", "day"], now=lambda: T0, chunk_size=3, log_limit=4)

    def poster(n: int) -> None:
        for i in range(15):
            board.post(f"p{i % 3}", {"shots": 1, "xp": n * 100 + i}, post_id=f"{n}-{i}")

    threads = [threading.Thread(target=poster, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for instance in board.windows():
        assert sum(board.row(f"p{i}", window=instance).values["shots"] for i in range(3)) == 60
        board._check(instance)


def test_two_processes_share_a_board(tmp_path) -> None:
    url = f"sqlite:///{tmp_path}/board.db"
    one = mdss.Leaderboard(mdss.open_store(url), "g", columns={"xp": "desc"}, accumulate=["k"])
    two = mdss.Leaderboard(mdss.open_store(url), "g", columns={"xp": "desc"}, accumulate=["k"])
    for i in range(5):
        one.post("ann", {"k": 1, "xp": i})
        two.post("ann", {"k": 1})
    assert two.row("ann").values == {"k": 10, "xp": 4}
    one._check()


@pytest.mark.parametrize("ties", ["ordinal", "competition", "dense"])
@pytest.mark.parametrize("logged", [0, 30], ids=["trees", "over-the-log"])
def test_round_trips(logged: int, ties: str) -> None:
    """Store calls per view and per post, rows returned, in each ties mode: with the caches warm (every node
    the call needs cached), and with only the manifests cached (the issue's condition: ``positions`` for 3
    columns <= 3, ``rows`` of 100 owners <= 3, ``page`` <= 3, ``around`` <= 4, a post to 3 windows 3
    appends); on the trees alone, and with ``logged`` posts in each window's update log. Every answer is the
    model's."""
    from collections import Counter

    from faulty import FaultyStore

    from mdss._tree import Manifest

    class Counting(FaultyStore):
        def _call(self, name, *args):
            self.calls[name] += 1
            return getattr(self.inner, name)(*args)

    store = Counting(mdss.open_store("memory://"))
    store.calls = Counter()
    board = mdss.Leaderboard(
        store,
        "game",
        columns=COLUMNS,
        accumulate=ACCUMULATE,
        keep_best=KEEP_BEST,
        windows=["all", "week", "day"],
        now=lambda: T0,
        chunk_size=50,
        log_limit=10_000,  # the logs hold what the test leaves in them
    )
    model = BoardModel()

    def post(owner: str, values: dict) -> None:
        board.post(owner, values)
        for instance in board.windows():
            model.post(instance, owner, values, None, None, T0)

    for i in range(300):
        post(f"o{i}", {"xp": i % 37, "accuracy": i % 11, "laps": i % 3, "time_ms": i})
    sets = [board._set(instance) for instance in board.windows()]
    for sset in sets:
        sset.merge()
    for i in range(logged):  # posts that stay in the update logs (rows and column entries the trees lack)
        post(f"o{(i * 7 + 1) % 300}", {"xp": i % 5, "accuracy": i % 3})  # not o7 nor o150: read below
    for sset in sets:
        assert len(mdss._snapshot.snapshot(sset.engine).head.log) >= logged  # a post logs an entry per window
        sset.warm()  # every node of both trees cached
    instance = board._instance(None)
    ranked = {column: model.ranked(instance, column, ties) for column in COLUMNS}
    competition = dict((o, r) for r, o in model.ranked(instance, "xp", "competition"))
    friends = [f"o{i}" for i in range(0, 300, 3)]
    views = {
        "row": (lambda: board.row("o7"), lambda found: found.values == model.windows[instance]["o7"][0]),
        "positions": (  # 3 columns
            lambda: board.positions("o7", ties=ties),
            lambda found: found == {c: dict((o, r) for r, o in ranked[c])["o7"] for c in COLUMNS},
        ),
        "rows": (  # 100 owners, every one ranked
            lambda: board.rows(friends, "xp", ties=ties),
            lambda found: _as_pairs(found) == [p for p in ranked["xp"] if p[1] in set(friends)],
        ),
        "page": (
            lambda: board.page("xp", limit=100, ties=ties),
            lambda found: _as_pairs(found.rows) == ranked["xp"][:100],
        ),
        "around": (
            lambda: board.around("o150", "xp", ties=ties),
            lambda found: _as_pairs(found) == around_of(ranked["xp"], "o150", 5, 5),
        ),
        "percentile": (
            lambda: board.percentile("o7", "xp"),
            lambda found: found == (competition["o7"] - 1) / 300,
        ),
        "at_percentile": (
            lambda: board.at_percentile("xp", 0.37, ties=ties),
            lambda found: (found.rank, found.owner) == ranked["xp"][int(0.37 * 300)],
        ),
    }
    stats = board.store.stats

    def trips(fn) -> int:
        before = stats.snapshot()
        fn()
        return stats.since(before)["calls"]

    def checked(name: str) -> int:
        view, expected = views[name]
        before = stats.snapshot()
        found = view()
        assert expected(found), (name, found)
        return stats.since(before)["calls"]

    warm = {name: (checked(name), checked(name))[1] for name in views}
    assert warm == dict.fromkeys(views, 1)  # the head: nodes never change, caches stay exact

    def drop_entry_sets() -> None:
        for sset in sets:
            for key in [k for k, (node, _) in sset.engines[0].cache._nodes.items() if not isinstance(node, Manifest)]:
                sset.engines[0].cache.discard(key)  # entry sets: rows are entries of their own

    def manifests_only(name: str) -> int:
        drop_entry_sets()
        return checked(name)

    cold = {name: manifests_only(name) for name in views}
    # The head; the member index's entry sets that hold the owners' rows (one batched read: the manifests
    # route to them); then the column's entry sets for counts, and for a listing its slice with them (one
    # read: the entry sets around the key, and where the first row's tie starts, are fetched before
    # counting); then the listed owners' rows. at_percentile fetches the entry sets its position can fall
    # in (the manifests bound it) with the column's ends. With posts in the log, this process (which
    # posted every row) finds each row in the log its earlier overlays hold: no read of the member index.
    r = 0 if logged else 1
    expected = {
        "row": 1 + r,
        "positions": 2 + r,
        "rows": 2 + r,
        "page": 2 + r,
        "around": 2 + 2 * r,
        "percentile": 2 + r,
        "at_percentile": 2 + r,
    }
    assert cold == expected

    # Every page of 7 rows of two columns (tie groups of about 8 and 27 rows, spanning entry sets: a page
    # often starts inside a group that began in an entry set before it), around every 7th owner, and
    # at_percentile at every 20th.
    for column in ("xp", "accuracy"):
        pages, cursor = [], None
        while True:
            drop_entry_sets()
            before = stats.snapshot()
            page = board.page(column, limit=7, cursor=cursor, ties=ties)
            pages.append(stats.since(before)["calls"])
            assert _as_pairs(page.rows) == ranked[column][7 * (len(pages) - 1) : 7 * len(pages)]
            cursor = page.cursor
            if cursor is None:
                break
        assert len(pages) == 43 and set(pages) == {2 + r}, Counter(pages)
        arounds = Counter()
        for owner in [f"o{i}" for i in range(0, 300, 7)]:
            drop_entry_sets()
            before = stats.snapshot()
            found = board.around(owner, column, before=3, after=4, ties=ties)
            arounds[stats.since(before)["calls"]] += 1
            assert _as_pairs(found) == around_of(ranked[column], owner, 3, 4)
        assert set(arounds) == {2 + 2 * r}, arounds
        for p in [k / 20 for k in range(21)]:
            drop_entry_sets()
            before = stats.snapshot()
            found = board.at_percentile(column, p, ties=ties)
            assert stats.since(before)["calls"] <= 3
            assert (found.rank, found.owner) == ranked[column][min(int(p * 300), 299)]

    for sset in sets:
        sset.warm()  # every node of both trees cached, as in a busy process
    for n in range(2):
        store.calls.clear()
        board.post("o7", {"xp": 99 + n, "accuracy": 3})
        # The owner's rows are read from the heads and nodes this process holds (no call); then one append
        # (a store-applied append or seal, or a head compare-and-set) per window: the issue's "post to 3
        # windows <= 3 appends". A post logs more than the head holds inline (mdss._log.INLINE_BYTES), so an
        # append may also seal a segment (a put_many first; by compare-and-set, after reading the head).
        appends = store.calls["_append"] + store.calls["_swap"] + store.calls["_cas"]
        assert appends >= 3 and store.calls["_get_many"] == 0, store.calls
        assert sum(store.calls.values()) <= 3 + 2 * 3, store.calls


def around_of(ranked: list[tuple[int, str]], owner: str, before: int, after: int) -> list[tuple[int, str]]:
    """The model's ``around``: up to ``before`` pairs better than the owner's, its own, up to ``after`` worse."""
    at = [o for _, o in ranked].index(owner)
    return ranked[max(at - before, 0) : at + after + 1]


def test_every_store(store) -> None:
    """Posts, every view, retention and drop on each backend, against the model; one column's ties by first."""
    import random

    rng = random.Random(14)
    clock = [float(T0)]
    board = mdss.Leaderboard(
        store,
        "game",
        columns=COLUMNS,
        tiebreak={"race": "first"},  # xp and accuracy: by owner
        accumulate=ACCUMULATE,
        keep_best=KEEP_BEST,
        windows=["all", "day"],
        retention={"day": 2},
        now=lambda: clock[0],
        chunk_size=4,
        log_limit=5,
    )
    model = BoardModel(firsts={"race"})
    owners = [f"o{i}" for i in range(12)]
    for step in range(60):
        owner = rng.choice(owners)
        values = {"xp": rng.randint(0, 5), "shots": 1, "laps": rng.randint(0, 2), "time_ms": rng.randint(1, 9)}
        if rng.random() < 0.3:
            values["accuracy"] = rng.choice([0.5, 1, math.inf])
        when = dt.datetime.fromtimestamp(clock[0], dt.timezone.utc)
        expected = {
            i: model.post(i, owner, values, f"p{step}", None, clock[0])
            for i in (_windows.instance(k, when, dt.timezone.utc) for k in ("all", "day"))
        }
        assert board.post(owner, values, post_id=f"p{step}") == expected
        if step % 20 == 19:
            clock[0] += DAY
    assert len(board.windows("day")) == 2  # retention dropped the first day
    gone = rng.choice([o for o in owners if o in model.windows[board.windows("day")[-1]]])
    assert board.remove(gone) == {i: model.remove(i, gone) for i in board.windows()}  # every window
    assert board.remove("o2", window="all") == {"all": model.remove("all", "o2")}
    when = dt.datetime.fromtimestamp(clock[0], dt.timezone.utc)
    current = [_windows.instance(k, when, dt.timezone.utc) for k in ("all", "day")]
    expected = {i: model.post(i, gone, {"xp": 1}, "back", None, clock[0]) for i in current}
    assert board.post(gone, {"xp": 1}, post_id="back") == expected  # a new row after the removal
    for instance in board.windows():
        rows = model.windows[instance]
        for column in COLUMNS:
            for ties in ("ordinal", "competition", "dense"):
                ranked = model.ranked(instance, column, ties)
                got, cursor = [], None
                while True:
                    page = board.page(column, limit=5, cursor=cursor, window=instance, ties=ties)
                    got += page.rows
                    if page.cursor is None:
                        break
                    cursor = page.cursor
                assert _as_pairs(got) == ranked
                assert _as_pairs(board.rows(owners[:5], column, window=instance, ties=ties)) == [
                    p for p in ranked if p[1] in owners[:5]
                ] + [(None, o) for o in sorted(owners[:5]) if o in rows and all(o != p[1] for p in ranked)]
        for owner in owners:
            found = board.row(owner, window=instance)
            assert (found and found.values) == (rows[owner][0] if owner in rows else None)
        board._check(instance)
    dropped = board.windows("day")[0]
    assert board.drop_window(dropped) is True and board.drop_window(dropped) is False
    assert dropped not in board.windows() and board.row("o1", window=dropped) is None
    assert board.drop() is True and board.drop() is False
    assert store.existing(list(store.keys(f"{store.namespace}:"))) == []  # Riak lists tombstones a while


@pytest.mark.parametrize("after", [False, True], ids=["failed-call", "lost-reply"])
def test_a_post_retried_after_any_store_failure_counts_once(after: bool) -> None:
    """A failure at every store call of a 3-window post (before the call, or its reply lost); the post is
    retried with its post_id until it succeeds: every window counts it exactly once, and check() holds."""
    from faulty import FaultyStore

    k = 0
    while True:
        k += 1
        store = FaultyStore(mdss.open_store("memory://"))
        board = mdss.Leaderboard(
            store,
            "g",
            columns={"xp": "desc", "race": [("laps", "desc"), ("ms", "asc")]},
            accumulate=["shots"],
            windows=["all", "week", "day"],
            now=lambda: T0,
            log_limit=2,
            gc_grace=0,
        )
        board.post("bob", {"xp": 3, "shots": 1, "laps": 1, "ms": 5})
        board.post("ann", {"xp": 1, "shots": 1, "laps": 2, "ms": 9}, post_id="p0")
        store.count, store.fail_at, store.after = 0, k, after
        try:
            board.post("ann", {"xp": 7, "shots": 10, "laps": 2, "ms": 8}, post_id="p1")
            failed = False
        except mdss.StoreUnavailableError:
            failed = True
        calls = store.count
        store.fail_at = None
        for _ in range(3):
            try:
                board.post("ann", {"xp": 7, "shots": 10, "laps": 2, "ms": 8}, post_id="p1")
                break
            except mdss.StoreUnavailableError:
                continue
        for instance in board.windows():
            row = board.row("ann", window=instance)
            assert row is not None and row.values["shots"] == 11, (k, instance, row)
            assert board.positions("ann", window=instance, ties="dense") == {"xp": 1, "race": 1}
            board._check(instance)
        if not failed and calls < k:  # the post made fewer calls than k: every call has failed once
            break
    assert k > 5  # a 3-window post makes at least 5 store calls


@settings(max_examples=budget(40), deadline=None)
@given(
    st.dictionaries(
        st.sampled_from([f"o{i}" for i in range(40)]),
        st.fixed_dictionaries({"xp": st.integers(0, 30), "laps": st.integers(0, 3), "time_ms": st.integers(0, 9)}),
        min_size=1,
    ),
    st.integers(2, 5),
    st.sampled_from(["ordinal", "competition", "dense"]),
    st.sampled_from([None, 0, 1, 3]),
)
def test_estimated_positions_bound_the_exact_ones(posts, chunk, ties, max_error) -> None:
    """``positions(estimate=True)``: bounds that hold for every column and tie mode, under twice the chunk
    size wide (two entry sets unseen: the column's start and the owner's), exact when ``max_error`` asks."""
    board = board_of(windows=["all"], chunk_size=chunk)
    for owner, values in posts.items():
        board.post(owner, values)
    for owner in posts:
        exact = board.positions(owner, ties=ties)
        rough = board.positions(owner, ties=ties, estimate=True, max_error=max_error)
        assert set(rough) == set(exact)
        for column, estimate in rough.items():
            assert estimate.low <= exact[column] <= estimate.high and estimate.low <= estimate.rank <= estimate.high
            assert estimate.high - estimate.low < 2 * chunk
            if max_error is not None:  # each count within max_error made ranks 2 * max_error wide (a helper's review)
                assert estimate.high - estimate.low <= max_error
    assert board.positions("nobody", estimate=True) == {}


# -- gc: rows are entries, collected with the nodes that hold them --------------------------------------------------


def unnamed_records(board: mdss.Leaderboard, instance: str) -> list[str]:
    """The stored nodes of a window that no head names (``check()`` finds the converse)."""
    return board._set(instance).unreferenced()


def gc_board(store, name: str = "g", **options) -> mdss.Leaderboard:
    options = {
        "columns": {"xp": "desc", "race": [("laps", "desc"), ("ms", "asc")]},
        "accumulate": ["shots"],
        "windows": ["all", "week", "day"],
        "now": lambda: T0,
        "log_limit": 2,
        "chunk_size": 3,
        "gc_grace": 0,
        **options,
    }
    return mdss.Leaderboard(store, name, **options)


@pytest.mark.parametrize("after", [False, True], ids=["failed-call", "lost-reply"])
def test_gc_sweeps_the_rows_of_a_post_that_crashed_at_any_store_call(
    store_factory, store, after: bool, monkeypatch
) -> None:
    """The process dies at every store call of a 3-window post in turn (makes no call after it, not even to
    clean up); another process's ``gc(sweep=True)`` then leaves exactly the nodes the heads name, and
    the post retried with its post_id counts once in every window. On the networked stores by default the
    first, the last and every fifth call (``depth.call_points``), every call under MDSS_DEEP."""
    from faulty import FaultyStore

    import mdss._commit
    from mdss._retry import Backoff

    # A dead process's commit would ask a head it cannot reach for 5 s: once is enough here.
    monkeypatch.setattr(mdss._retry, "STORE_CALLS", Backoff(budget=0.0, base=0.0, max_attempts=1))

    def crash_at(k: int) -> tuple[bool, int]:
        dying = FaultyStore(store, dies=True, after=after)
        board = gc_board(dying, f"g{k}")
        board.post("bob", {"xp": 3, "shots": 1, "laps": 1, "ms": 5})
        board.post("ann", {"xp": 1, "shots": 1, "laps": 2, "ms": 9}, post_id="p0")
        dying.count, dying.fail_at = 0, k
        try:
            board.post("ann", {"xp": 7, "shots": 10, "laps": 2, "ms": 8}, post_id="p1")
            crashed = False
        except mdss.StoreUnavailableError:
            crashed = True
        calls = dying.count
        survivor = gc_board(store, f"g{k}")  # another process
        survivor.gc(sweep=True, wait=False)
        for instance in survivor.windows():
            assert unnamed_records(survivor, instance) == [], (k, instance)
            survivor._check(instance)
        survivor.post("ann", {"xp": 7, "shots": 10, "laps": 2, "ms": 8}, post_id="p1")
        for instance in survivor.windows():
            assert survivor.row("ann", window=instance).values["shots"] == 11, (k, instance)
            assert survivor.positions("ann", window=instance, ties="dense") == {"xp": 1, "race": 1}
        return crashed, calls

    visited = set()
    for k in call_points(store_factory.kind, f"gc-sweeps-{after}", stride=5):
        crashed, calls = crash_at(k)
        visited.add(k)
        if not crashed and calls < k:  # the post made fewer calls than k: it has died at every one (sampled)
            if calls not in visited:
                crash_at(calls)  # its last call
            break
    assert calls > 4


def test_gc_at_any_store_call_of_a_post_never_takes_its_record(store_factory, store) -> None:
    """Another process sweeps just before each store call of a 3-window post in turn: the post lands once
    everywhere, check() holds, and nothing is left over. On the networked stores by default the first, the
    last and every fifth call (``depth.call_points``), every call under MDSS_DEEP."""
    from faulty import FaultyStore

    class Sweeping(FaultyStore):
        def _call(self, name, *args):
            self.count += 1
            if self.count == self.fail_at:
                self.meanwhile()
            return getattr(self.inner, name)(*args)

    def sweep_at(k: int) -> int:
        other = gc_board(store, f"g{k}")
        sweeping = Sweeping(store, meanwhile=functools.partial(other.gc, sweep=True, wait=False))
        board = gc_board(sweeping, f"g{k}")
        board.post("bob", {"xp": 3, "shots": 1, "laps": 1, "ms": 5})
        board.post("ann", {"xp": 1, "shots": 1, "laps": 2, "ms": 9})
        sweeping.count, sweeping.fail_at = 0, k
        assert board.post("ann", {"xp": 7, "shots": 10, "laps": 2, "ms": 8}, post_id="p1") == dict.fromkeys(
            board.windows(), True
        )
        calls = sweeping.count
        for instance in board.windows():
            board._check(instance)
            assert board.row("ann", window=instance).values["shots"] == 11
        other.gc(sweep=True, wait=False)
        for instance in board.windows():
            assert unnamed_records(board, instance) == []
            board._check(instance)
        return calls

    visited = set()
    for k in call_points(store_factory.kind, "gc-at-any-call", stride=5):
        calls = sweep_at(k)
        visited.add(k)
        if calls < k:
            if calls not in visited:
                sweep_at(calls)  # its last call
            break
    assert calls > 4


def test_gc_beside_concurrent_posts(store) -> None:
    """Posting threads while another sweeps in a loop, with nodes of crashed posts planted first: every
    accumulation counts once, check() holds throughout, and the last sweep leaves only named nodes."""
    board = gc_board(store)
    board.post("p0", {"xp": 0})
    stray = {i: board._set(i).keys.node(f"1.{0:011x}{n:016x}") for n, i in enumerate(board.windows())}
    store.put_many(dict.fromkeys(stray.values(), b"a crashed post's row"))
    sweeps, stop, errors = [0], threading.Event(), []

    def sweeper() -> None:
        other = gc_board(store)
        try:
            while not stop.is_set():
                other.gc(sweep=True, wait=False)
                sweeps[0] += 1
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    def poster(n: int) -> None:
        mine = gc_board(store)  # a process of its own
        for i in range(8):
            mine.post(f"p{i % 3}", {"shots": 1, "xp": n * 10 + i, "laps": i % 2, "ms": n}, post_id=f"{n}-{i}")

    gc_thread = threading.Thread(target=sweeper)
    gc_thread.start()
    posters = [threading.Thread(target=poster, args=(n,)) for n in range(3)]
    for t in posters:
        t.start()
    for t in posters:
        t.join()
    stop.set()
    gc_thread.join()
    assert errors == [] and sweeps[0] >= 1
    board.gc(sweep=True, wait=False)
    for instance in board.windows():
        assert sum(board.row(f"p{i}", window=instance).values.get("shots", 0) for i in range(3)) == 24
        assert unnamed_records(board, instance) == []
        assert not store.existing([stray[instance]])
        board._check(instance)


def test_gc_collects_replaced_rows_an_ended_process_left() -> None:
    """Replaced rows live in replaced nodes, which garbage notes name: gc finds them without a listing."""
    store = mdss.open_store("memory://")
    board = gc_board(store, gc_grace=60, log_limit=0)  # ends before the grace period does
    for xp in range(3):
        board.post("ann", {"xp": xp})
    assert unnamed_records(board, "all") != []
    gc_board(store).gc(wait=False)  # another process: the sets' noted garbage
    for instance in board.windows():
        assert unnamed_records(board, instance) == []
        board._check(instance)
    with pytest.raises(mdss.InvalidArgumentError):
        board.gc(sweep="yes")


def test_a_post_whose_last_attempt_lands_returns(store) -> None:
    """The retry budget counts attempts that lose: a post that lands on its last allowed attempt reports what
    it did (it once raised ConflictError after landing, and its caller posted again)."""
    board = gc_board(store, max_attempts=1)
    assert board.post("p0", {"shots": 2, "xp": 5}, post_id="a") == dict.fromkeys(board.windows(), True)
    assert board.post("p0", {"shots": 2, "xp": 5}, post_id="a") == dict.fromkeys(board.windows(), False)
    assert board.row("p0").values["shots"] == 2


# -- rows bounded in bytes -----------------------------------------------------------------------------------------


@settings(max_examples=budget(25), deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 60),
            st.fixed_dictionaries({"xp": st.integers(0, 20)}, optional={"bio": st.text(min_size=20, max_size=160)}),
        ),
        min_size=1,
        max_size=120,
    ),
    st.sampled_from([3, 8, 50]),
    st.sampled_from([0, 6, None]),
)
def test_large_rows_split_entry_sets_by_bytes(posts, chunk, log_limit) -> None:
    """Rows of up to ~1 KB in entry sets bounded to 4 KB: nodes are cut by bytes (and by entries), check()
    holds, and every view agrees with the model."""
    board = board_of(
        columns={"xp": "desc"},
        accumulate=[],
        keep_best={},
        chunk_size=chunk,
        log_limit=log_limit,
        node_bytes=4096,
        now=lambda: T0,
    )
    model = BoardModel(columns={"xp": "desc"}, accumulate=[], keep_best={})
    for n, values in posts:
        owner = f"owner-{n}"
        assert board.post(owner, values) == {"all": model.post("all", owner, values, None, None, T0)}
    board._check()
    ranked = model.ranked("all", "xp")
    got, cursor = [], None
    while True:
        page = board.page("xp", limit=7, cursor=cursor)
        got += page.rows
        if page.cursor is None:
            break
        cursor = page.cursor
    assert _as_pairs(got) == ranked
    assert all(r.values == model.windows["all"][r.owner][0] for r in got)
    owners = [o for _, o in ranked]
    assert _as_pairs(board.rows(owners[::2], "xp")) == ranked[::2]
    for i in (0, len(owners) // 2, len(owners) - 1):
        assert _as_pairs(board.around(owners[i], "xp", before=2, after=2)) == ranked[max(i - 2, 0) : i + 3]


def test_the_largest_row_fits_the_default_bound() -> None:
    """64 fields of 4 KB and 8 post ids of 128 four-byte characters: an entry under a quarter of the 64 KB
    bound, so a node holds four of them at least; a bound too small for a row refuses it before writing."""
    board = board_of(columns={"xp": "desc"}, accumulate=[], keep_best={})
    values = {f"f{i:02d}": "x" * 50 for i in range(63)} | {"xp": 1}
    for n in range(8):
        board.post("\U0001f600" * 32, values, post_id="\U0001f600" * 127 + str(n))
    row = board.row("\U0001f600" * 32)
    assert row is not None and row.values == values
    board._check()
    small = board_of(columns={"xp": "desc"}, accumulate=[], keep_best={}, node_bytes=1024)
    with pytest.raises(mdss.InvalidArgumentError, match="node_bytes"):
        small.post("ann", {"xp": 1, "bio": "y" * 300})
    assert small.row("ann") is None
    with pytest.raises(mdss.InvalidArgumentError, match="node_bytes"):
        board_of(node_bytes=100)


def test_a_board_with_row_records_migrates(store) -> None:
    """A board stored before rows were entries (pointers to row records: the dump
    tests/data/leaderboard/rows-as-records.json, one window merged, one with its update log) is moved at
    open: every row reads as it was, check() holds, the records are gone, posts continue."""
    import base64
    import json
    import pathlib

    dump = json.loads((pathlib.Path(__file__).parent / "data" / "leaderboard" / "rows-as-records.json").read_text())
    old, new = "mdss:", mdss._keys.Keyspace(store.namespace, "x").prefix[: -len("x:")]
    for key, value in dump["store"].items():
        store.put(new + key[len(old) :], base64.b64decode(value))
    board = mdss.Leaderboard(
        store,
        "game",
        columns={"xp": "desc", "race": [("laps", "desc"), ("time_ms", "asc")]},
        accumulate=["shots"],
        keep_best={"time_ms": "min"},
        windows=["all", "day"],
        now=lambda: 1795000000,
        chunk_size=4,
    )
    assert board.windows() == dump["windows"]
    for window, rows in dump["rows"].items():
        for owner, (values, updated) in rows.items():
            assert board.row(owner, window=window) == mdss.Row(owner, values, updated)
        board._check(window)
        records = mdss._keys.Keyspace(store.namespace, f"game#rows#{window}").nodes
        assert not store.existing(list(store.keys(records)))  # (a Riak listing names tombstones a while)
    assert [list(p) for p in _as_pairs(board.top("xp", 20))] == dump["xp"]
    assert board.post("o3", {"xp": 1, "shots": 1}, post_id="again") == dict.fromkeys(dump["windows"], False)
    assert board.post("o3", {"shots": 1}, post_id="new")["all"] is True
    assert board.row("o3").values["shots"] == dump["rows"]["all"]["o3"][0]["shots"] + 1
    assert mdss.Leaderboard.open(store, "game").row("o3") == board.row("o3")  # the settings say "entries" now


def test_a_board_with_rows_as_entries_moves_to_record_windows(store) -> None:
    """A board stored with rows as entries of its windows' sets (layout 2: the dump tests/data/leaderboard/layout2.json,
    made by the code before record windows; two columns, one whose ties go by first, post ids, a removed owner, one
    window merged and two with their update logs) is moved at open: every row, and every rank of every column in
    each ties mode, reads as the earlier code read them; check() holds; the old windows are gone; a retry of a
    counted post id counts nothing; posts continue; the settings say layout 3 (another open moves nothing)."""
    import base64
    import json
    import pathlib

    dump = json.loads((pathlib.Path(__file__).parent / "data" / "leaderboard" / "layout2.json").read_text())
    old, new = "mdss:", mdss._keys.Keyspace(store.namespace, "x").prefix[: -len("x:")]
    for key, value in dump["store"].items():
        store.put(new + key[len(old) :], base64.b64decode(value))
    clock = [dump["clock"] + 5]
    options = {"windows": ["all", "day"], "now": lambda: clock[0], "chunk_size": 4, "log_limit": 8}
    board = mdss.Leaderboard.open(store, "game", **options)
    assert board.windows() == list(dump["views"])
    for window, seen in dump["views"].items():
        for owner, (values, updated) in seen["rows"].items():
            assert board.row(owner, window=window) == mdss.Row(owner, values, updated)
        assert board.row("o4", window=window) is None
        for ties, columns in seen["ranks"].items():
            for column, ranked in columns.items():
                found = [[r.rank, r.owner] for r in board.top(column, 50, window=window, ties=ties)]
                assert found == ranked, (window, ties, column)
        board._check(window)
        entries = board._entry_window(window)
        assert store.get(entries.keys.head) is None
    owner, values, post_id, _ = next(p for p in reversed(dump["posts"]) if p[2])  # counted in "all" and day 2
    assert set(board.post(owner, values, post_id=post_id).values()) == {False}
    before = board.row(owner).values["shots"]
    assert board.post(owner, {"shots": 1, "xp": 9}) == {"all": True, "day:2026-11-19": True}
    assert board.row(owner).values["shots"] == before + 1 and board.top("xp", 1)[0].owner == owner
    again = mdss.Leaderboard.open(store, "game", **options)
    assert again.row(owner) == board.row(owner)
    row = board.row(owner)
    again._move_to_records()  # a move that began before the first one ended: it finds the settings say it is done
    assert board.row(owner) == row and board.top("xp", 1)[0].owner == owner
    assert mdss._board_settings.stored_settings(store, "game")[0].value == mdss._board_settings.settings(
        board.columns, board.accumulate, board.keep_best, mdss._board_settings.RECORDS_LAYOUT
    )


def test_a_late_move_never_writes_over_a_moved_board(monkeypatch) -> None:
    """Two processes open a board of layout 2 at once: the second's move reads the record window, then the old window,
    then the first process finishes its move and posts; the second's load, bound to the record window as it read it,
    is refused, and it finds the settings say the move is done: the post stays."""
    import base64
    import json
    import pathlib

    dump = json.loads((pathlib.Path(__file__).parent / "data" / "leaderboard" / "layout2.json").read_text())
    store = mdss.open_store("memory://")
    for key, value in dump["store"].items():
        store.put(key, base64.b64decode(value))
    clock = [dump["clock"] + 5]
    options = {"windows": ["all", "day"], "now": lambda: clock[0], "chunk_size": 4, "log_limit": 8}
    settings = store.get(mdss._keys.board_keyspace(store, "game", "board", False).head).value
    first = mdss.Leaderboard.open(store, "game", **options)  # moves
    moved = store.get(mdss._keys.board_keyspace(store, "game", "board", False).head).value
    store.put(mdss._keys.board_keyspace(store, "game", "board", False).head, settings)  # as the second read it
    fill, posted = mdss._load.fill, []

    def first_finishes_then_fill(*args, **kwargs):
        if not posted:  # the first process says its move is done, then posts, before the second's load lands
            store.put(mdss._keys.board_keyspace(store, "game", "board", False).head, moved)
            posted.append(first.post("o1", {"xp": 99, "shots": 1}))
        return fill(*args, **kwargs)

    monkeypatch.setattr(mdss._load, "fill", first_finishes_then_fill)
    mdss.Leaderboard.open(store, "game", **options)  # the second: its move is refused, then stops
    assert posted and first.row("o1").values["xp"] == 99 and first.top("xp", 1)[0].owner == "o1"
    first._check()


@pytest.mark.parametrize("ties", ["ordinal", "competition", "dense"])
def test_a_page_by_offset_starts_at_that_rank(store, ties) -> None:
    """``page(column, offset=k)`` is the listing from rank ``k + 1`` (a page by rank, as ``leaders(page)``): the
    same rows and ranks as the top ``k + limit`` from ``k`` on, over entry sets that split; after a cursor it skips
    ``k`` more; past the end it is empty; a bad offset is refused."""
    board = mdss.Leaderboard(store, "game", columns={"xp": "desc"}, chunk_size=3)
    for i in range(40):
        board.post(f"p{i:02}", {"xp": i // 3})  # tie groups of three, across entry sets
    everyone = board.top("xp", 40, ties=ties)
    for offset in (0, 1, 2, 5, 17, 38, 39, 40, 45):
        page = board.page("xp", offset=offset, limit=4, ties=ties)
        assert page.rows == everyone[offset : offset + 4], offset
        assert (page.cursor is None) == (offset + 4 >= 40), offset
    first = board.page("xp", limit=5, ties=ties)
    assert board.page("xp", cursor=first.cursor, offset=3, limit=4, ties=ties).rows == everyone[8:12]
    for bad in (-1, 1.5, True, "2", None):
        with pytest.raises(mdss.InvalidArgumentError):
            board.page("xp", offset=bad)


# -- bulk loads --------------------------------------------------------------------------------------------------------


@settings(max_examples=budget(40), deadline=None)
@given(
    rows=st.lists(st.tuples(OWNERS, VALUES), max_size=14),
    chunk=st.sampled_from([2, 3, 5]),
    node_bytes=st.sampled_from([mdss.leaderboard.NODE_BYTES, 1100]),
    spilled=st.booleans(),
)
def test_a_load_holds_what_its_posts_would(rows, chunk, node_bytes, spilled) -> None:
    """``load(rows)`` leaves every window as posting the rows in turn would: rows, ranks in each ties mode, counts,
    percentiles, tie groups (``check``), over tiny entry sets; later posts and a replacing load work on it. ``spilled``:
    with a budget of two rows, blocks of three (rows, entries and tie groups sorted on disk: ``mdss._board_load``)."""
    with pytest.MonkeyPatch.context() as patch:
        if spilled:
            _tiny_loads(patch)
        _load_holds_what_its_posts_would(rows, chunk, node_bytes, (1 << 20) if spilled else mdss._load.MEMORY_BYTES)


def _tiny_loads(patch: pytest.MonkeyPatch) -> None:
    patch.setattr(mdss._board_load, "ROW_BYTES", (1 << 20) // 2)
    for module in (mdss._spill, mdss._board_load):
        patch.setattr(module, "BLOCK", 3)


def _load_holds_what_its_posts_would(rows, chunk, node_bytes, memory) -> None:

    def board(name: str) -> mdss.Leaderboard:
        options = {"windows": ["all", "day"], "now": lambda: T0, "chunk_size": chunk, "node_bytes": node_bytes}
        return mdss.Leaderboard(store, name, columns=COLUMNS, accumulate=ACCUMULATE, keep_best=KEEP_BEST, **options)

    store = mdss.open_store("memory://")
    posted, loaded = board("posted"), board("loaded")
    for owner, values in rows:
        posted.post(owner, values)
    assert loaded.load(rows, memory_bytes=memory) == len({owner for owner, _ in rows})
    assert loaded.windows() == posted.windows()

    def same(instance: str) -> None:
        for owner in ("ann", "bob", "fay", "zed"):
            assert loaded.row(owner, window=instance) == posted.row(owner, window=instance)
            assert loaded.positions(owner, window=instance) == posted.positions(owner, window=instance)
        for column in COLUMNS:
            assert loaded.count(column, window=instance) == posted.count(column, window=instance)
            for ties in ("ordinal", "competition", "dense"):
                assert loaded.top(column, 20, window=instance, ties=ties) == posted.top(
                    column, 20, window=instance, ties=ties
                )
        loaded._check(instance)

    for instance in posted.windows():
        same(instance)
        posted.post("ann", {"xp": 2, "shots": 1})
        loaded.post("ann", {"xp": 2, "shots": 1})
        same(instance)
    assert loaded.load(rows[:3], window="all", replace=True, memory_bytes=memory) == len({o for o, _ in rows[:3]})
    reference = board("reference")
    for owner, values in rows[:3]:
        reference.post(owner, values)
    for column in COLUMNS:
        assert loaded.top(column, 20) == reference.top(column, 20)
    loaded._check("all")


@pytest.mark.parametrize("spilled", [False, True])
def test_a_load_on_every_store(store, spilled, monkeypatch, tmp_path) -> None:
    """A load fills empty windows in one commit each (the progress callback sees each one's nodes), refuses a window
    with rows unless ``replace``, refuses bad rows before writing anything, and the board takes posts after it; the
    same with its rows sorted on disk (``spilled``), leaving nothing there."""
    memory = mdss._load.MEMORY_BYTES
    if spilled:
        _tiny_loads(monkeypatch)
        memory = 1 << 20
    board = mdss.Leaderboard(
        store,
        "game",
        columns={"xp": "desc"},
        accumulate=["kills"],
        windows=["all", "day"],
        now=lambda: T0,
        chunk_size=4,
    )
    seen: dict[str, tuple[int, int]] = {}
    rows = {f"p{i:03}": {"xp": i % 17, "kills": 1} for i in range(200)}
    load = functools.partial(board.load, memory_bytes=memory, spill_dir=str(tmp_path))
    assert load(rows, progress=lambda window, done, total: seen.__setitem__(window, (done, total))) == 200
    assert list(tmp_path.iterdir()) == []
    assert sorted(seen) == ["all", "day:2026-11-18"] and all(done == total > 0 for done, total in seen.values())
    assert board.count("xp") == board.count("xp", window="day") == 200
    assert [r.owner for r in board.top("xp", 3)] == ["p016", "p033", "p050"]
    assert board.positions("p016") == {"xp": 1}
    board._check("all")
    board._check("day")
    with pytest.raises(mdss.InvalidArgumentError, match="has rows"):
        load({f"new{i}": {"xp": 1} for i in range(9)})
    for bad in ("rows", [("ann",)], [("ann", {"xp": "high"})], [(3, {"xp": 1})], [("ann", {"xp": float("nan")})], 7):
        with pytest.raises(mdss.MdssError):
            load([*rows.items(), *bad] if isinstance(bad, list) else bad, replace=True)
    assert board.count("xp") == 200 and list(tmp_path.iterdir()) == []  # nothing written by a refused load
    board.post("p000", {"xp": 100, "kills": 1})
    assert board.positions("p000") == {"xp": 1} and board.row("p000").values == {"xp": 100, "kills": 2}
    assert load({"solo": {"xp": 3}}, window="day", replace=True) == 1
    if spilled:  # the rows went through the spill directory: one that does not exist is refused
        with pytest.raises(mdss.InvalidArgumentError, match="spill directory"):
            board.load(rows, replace=True, memory_bytes=memory, spill_dir=str(tmp_path / "absent"))
    assert board.count("xp", window="day") == 1 and board.count("xp") == 200
    board._check("day")


def test_a_cold_view_reads_the_head_with_the_rows_entry_set_on_redis(redis_url: str) -> None:
    """On Redis a view of an owner reads the head and the entry set holding the owner's row in one round trip (one
    MGET: the row's entry set as the last head decoded names it), then the column's entry set: 2 round trips where 3
    were, with only the manifests cached; exact after another process's merges replaced that entry set too."""
    import uuid

    from mdss._tree import Manifest

    url = f"{redis_url}{'&' if '?' in redis_url else '?'}namespace=t{uuid.uuid4().hex[:12]}"
    writer = mdss.Leaderboard(mdss.open_store(url), "g", columns={"xp": "desc"}, chunk_size=8)
    for i in range(200):
        writer.post(f"o{i:03d}", {"xp": i})
    writer._set("all").merge()
    store = mdss.open_store(url)
    reader = mdss.Leaderboard(store, "g", columns={"xp": "desc"}, chunk_size=8)
    cache = reader._set("all").engine.cache

    def cold(view):  # the manifests cached, no entry set
        for key in [k for k, (node, _) in cache._nodes.items() if not isinstance(node, Manifest)]:
            cache.discard(key)
        before = store.stats.snapshot()
        found = view()
        return found, store.stats.since(before)["calls"]

    reader.warm()  # reads the head and every node: cold() keeps the manifests
    assert cold(lambda: reader.positions("o007")) == ({"xp": 193}, 2)
    assert cold(lambda: reader.row("o042").values) == ({"xp": 42}, 1)
    assert cold(lambda: reader.percentile("o199", "xp")) == (0.0, 2)
    for i in range(200, 260):
        writer.post(f"o{i:03d}", {"xp": i})
        writer.post(f"o{i - 200:03d}", {"xp": -i})  # rows move: the reader's last head names replaced entry sets
    writer._set("all").merge()
    assert cold(lambda: reader.positions("o007"))[0] == {"xp": 208} == writer.positions("o007")
    assert reader.rows(["o001", "o250"], "xp") == writer.rows(["o001", "o250"], "xp")
    assert reader.around("o130", "xp", before=2, after=2) == writer.around("o130", "xp", before=2, after=2)


def test_warm_views_on_redis_answer_while_the_head_travels_and_only_for_an_unchanged_head(redis_url: str) -> None:
    """A warm view on Redis answers from the snapshot the last read found unchanged while the head's read travels
    (``mdss._snapshot._guessed``): one round trip, and the answer is used only when the head came back unchanged.
    Another process's posts between two reads change the head: the second read answers on the new one. A page whose
    ranks or cursors need nodes afterwards reads them."""
    import uuid

    url = f"{redis_url}{'&' if '?' in redis_url else '?'}namespace=t{uuid.uuid4().hex[:12]}"
    writer = mdss.Leaderboard(mdss.open_store(url), "g", columns={"xp": "desc"}, chunk_size=8)
    for i in range(120):
        writer.post(f"o{i:03d}", {"xp": i % 50})
    writer._set("all").merge()
    store = mdss.open_store(url)
    reader = mdss.Leaderboard(store, "g", columns={"xp": "desc"}, chunk_size=8)
    reader.warm()
    for round_ in range(6):
        for again in range(3):  # the later reads find the head unchanged: they guess
            before = store.stats.snapshot()
            assert reader.positions("o007") == writer.positions("o007")
            assert reader.rows(["o001", "o119"], "xp") == writer.rows(["o001", "o119"], "xp")
            assert reader.around("o060", "xp", before=3, after=3) == writer.around("o060", "xp", before=3, after=3)
            assert reader.page("xp", offset=10, limit=7) == writer.page("xp", offset=10, limit=7)
            assert reader.page("xp", offset=10, limit=7, ties="dense") == writer.page(
                "xp", offset=10, limit=7, ties="dense"
            )
            assert reader.percentile("o030", "xp") == writer.percentile("o030", "xp")
            assert store.stats.since(before)["calls"] == 6 or not again  # the first reads the nodes a merge made
        writer.post(f"o{round_:03d}", {"xp": 100 + round_})  # the head changes under the reader's snapshot
        if round_ % 2:
            writer._set("all").merge()
    sset = mdss.SortedSet(store, "plain", chunk_size=4)
    sset.add_many({f"m{i}": i % 5 for i in range(40)})
    for _ in range(3):  # a fresh object guesses nothing: what the guesses must equal
        fresh = mdss.SortedSet(mdss.open_store(url), "plain")
        page, expected = sset.page(6, ties="dense"), fresh.page(6, ties="dense")
        assert page.entries == expected.entries
        assert sset.page(6, page.next).entries == fresh.page(6, expected.next).entries
        assert sset.rank("m7") == fresh.rank("m7") and sset.range(3, 9) == fresh.range(3, 9)


def test_threads_sharing_a_board_read_exactly_while_another_object_posts_and_merges(redis_url: str) -> None:
    """Four threads read one warm board object on Redis (guesses and reused snapshots, each thread on its own
    connection) while another object posts below the rows they read and merges: every rank and page they read is the
    one those rows have in every state."""
    import random
    import threading
    import uuid

    url = f"{redis_url}{'&' if '?' in redis_url else '?'}namespace=t{uuid.uuid4().hex[:12]}"
    writer = mdss.Leaderboard(mdss.open_store(url), "g", columns={"xp": "desc"}, chunk_size=8)
    for i in range(10):
        writer.post(f"top{i}", {"xp": 10_000 + i})
    for i in range(100):
        writer.post(f"o{i:03d}", {"xp": i})
    reader = mdss.Leaderboard(mdss.open_store(url), "g", columns={"xp": "desc"}, chunk_size=8)
    reader.warm()
    wrong: list[object] = []
    stop = threading.Event()

    def read(seed: int) -> None:
        rng = random.Random(seed)
        while not stop.is_set():
            i = rng.randrange(10)
            try:
                if reader.positions(f"top{i}") != {"xp": 10 - i}:
                    wrong.append(("rank", i))
                if [r.owner for r in reader.page("xp", offset=0, limit=3).rows] != ["top9", "top8", "top7"]:
                    wrong.append("page")
            except Exception as exc:  # noqa: BLE001 - reported below, with the wrong answers
                wrong.append(exc)

    threads = [threading.Thread(target=read, args=(seed,)) for seed in range(4)]
    for thread in threads:
        thread.start()
    rng = random.Random(7)
    try:
        for k in range(300):
            writer.post(f"o{rng.randrange(200):03d}", {"xp": rng.randrange(9000)})
            if k % 100 == 99:
                writer._set("all").merge()
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    assert wrong == []


def test_a_post_refused_by_a_window_s_row_changes_no_window_first_and_combine_takes_a_window_once() -> None:
    """A helper's probe: a post whose merged row outgrew the limits in ``all`` (the largest rows) had been applied to
    the day window listed before it; ``all`` now goes first. ``combine`` of a window named twice counted its rows
    twice."""
    clock = [1_795_000_000]
    board = mdss.Leaderboard(
        mdss.open_store("memory://"), "g", columns={"xp": "desc"}, windows=["day", "all"], now=lambda: clock[0]
    )
    board.post("ann", {"xp": 1, **{f"f{i}": "y" * 55 for i in range(60)}})
    clock[0] += 86_400
    with pytest.raises(mdss.InvalidArgumentError, match="at most"):
        board.post("ann", {"xp": 2, "extra": "z" * 900})
    assert board.row("ann").values["xp"] == 1
    (day,) = board.windows("day")  # the refused post listed no window of its day
    assert board.row("ann", window=day).values["xp"] == 1
    with pytest.raises(mdss.InvalidArgumentError, match="more than once"):
        board.combine(["all", "all"], into="season:1")


def test_a_board_object_made_before_the_first_post_takes_the_chunk_size_of_whoever_made_the_board() -> None:
    """A helper's probe: a board's parts always name their order (ascending), which made every setting of an object
    made before the board existed count as given, the default chunk size too: once another object made the board with
    another chunk size, every post through it was refused as another set's."""
    store = mdss.open_store("memory://")
    maker = mdss.Leaderboard(store, "g", columns={"xp": "desc"}, chunk_size=3)
    early = mdss.Leaderboard(store, "g", columns={"xp": "desc"})
    maker.post("a", {"xp": 1})
    assert early.post("b", {"xp": 2}) == {"all": True}
    assert [r.owner for r in early.top("xp")] == ["b", "a"] and early.check() == []
    other = mdss.SortedSet(store, "q", chunk_size=5)
    mdss.SortedSet(store, "q", chunk_size=7).add("x", 1)  # made first, with 7: a chunk size given is still checked
    with pytest.raises(mdss.SettingsMismatchError):
        other.add("y", 2)


def _refusing_cas(store: Any, marker: str) -> tuple[Any, Any]:
    """The store's compare-and-set, and one that refuses keys holding ``marker`` (as throttling: nothing applied)."""
    real = store._cas

    def refusing(key: str, value: bytes, version: Any) -> Any:
        if marker in key:
            raise mdss.StoreRefusedError("injected: throttled")
        return real(key, value, version)

    return real, refusing


def test_a_window_the_store_refuses_after_another_took_the_post_is_no_refusal_of_the_whole_post(monkeypatch) -> None:
    """StoreRefusedError says nothing of the call landed: a post the ``all`` window took before the store refused the
    day window's commit raises StoreUnavailableError naming the windows that took it (a retry with the post id then
    counts nothing twice)."""
    store = mdss.open_store("memory://?appends=false")
    board = mdss.Leaderboard(store, "g", columns={"xp": "desc"}, accumulate=["xp"], windows=["all", "day"])
    board.post("ann", {"xp": 1}, post_id="p0")
    real, refusing = _refusing_cas(store, "day")
    monkeypatch.setattr(store, "_cas", refusing)
    with pytest.raises(mdss.StoreUnavailableError, match="after 'all' took the post") as raised:
        board.post("ann", {"xp": 5}, post_id="p1")
    assert not isinstance(raised.value, mdss.StoreRefusedError)
    monkeypatch.setattr(store, "_cas", real)
    board.post("ann", {"xp": 5}, post_id="p1")  # the retry: each window counts it once
    assert {w.split(":")[0]: board.row("ann", window=w).values["xp"] for w in board.windows()} == {"all": 6, "day": 6}
    monkeypatch.setattr(store, "_cas", refusing)
    with pytest.raises(mdss.StoreUnavailableError, match="after \\['all'\\] removed the row") as raised:
        board.remove("ann")  # likewise a removal from several windows, and a load
    assert not isinstance(raised.value, mdss.StoreRefusedError)
    with pytest.raises(mdss.StoreUnavailableError, match="after \\['all'\\] loaded") as raised:
        board.load({"bob": {"xp": 1}}, replace=True)
    assert not isinstance(raised.value, mdss.StoreRefusedError)


def test_a_post_the_all_window_refuses_lists_no_window_and_drops_none() -> None:
    """A post refused by its commit (an ``accumulate`` sum past 64 bits) listed the new day's window first, and with
    ``retention`` dropped the day before, rows and all; a row too heavy for ``node_bytes`` was refused only at its
    commit, after the listing (a helper's review). Now the weight is checked with the rest of the input, and a window
    is listed just before its own commit: ``all`` goes first and refuses first."""
    clock = [1_795_000_000]
    board = mdss.Leaderboard(
        mdss.open_store("memory://"),
        "g",
        columns={"xp": "desc"},
        accumulate=["kills"],
        windows=["all", "day"],
        retention={"day": 1},
        now=lambda: clock[0],
        node_bytes=1024,
    )
    board.post("ann", {"xp": 1, "kills": 2**63 - 1})
    before = board.windows()
    clock[0] += 86400
    with pytest.raises(mdss.InvalidScoreError):
        board.post("ann", {"xp": 2, "kills": 1})
    with pytest.raises(mdss.InvalidArgumentError, match="does not fit nodes"):
        board.post("bob", {"xp": 1, "t": "a" * 500})
    assert board.windows() == before
    assert [r.owner for r in board.top("xp", window=before[1])] == ["ann"]
    assert board.post("cid", {"xp": 3}) == {"all": True, board.windows("day")[0]: True}
    assert len(board.windows("day")) == 1 and board.windows("day") != before[1:]  # retention, once a post landed


def test_an_estimated_position_is_no_wider_than_max_error() -> None:
    """A rank is two counts apart (the column's start, the row's key), and each was held within ``max_error``: an
    estimate ``max_error=1`` asked for came 2 wide, its ``high`` past the column's rows (a helper's review)."""
    board = mdss.Leaderboard(
        mdss.open_store("memory://"),
        "g",
        columns={"xp": "desc", "race": [("laps", "desc"), ("xp", "asc")]},
        chunk_size=2,
    )
    board.load([("p0", {"xp": 0, "laps": 0}), ("p1", {"xp": 0, "laps": 0})])
    for owner in ("p0", "p1"):
        exact = board.positions(owner)
        for max_error in (0, 1, 2):
            for column, rough in board.positions(owner, estimate=True, max_error=max_error).items():
                assert rough.low <= exact[column] <= rough.high and rough.high - rough.low <= max_error


@pytest.mark.parametrize("memory_bytes", [None, 1 << 20])
def test_a_load_whose_merged_rows_overflow_names_the_owner(memory_bytes) -> None:
    """An owner's rows merged past 64 bits were refused with no word of whose rows (they may lie far apart)."""
    board = mdss.Leaderboard(mdss.open_store("memory://"), "g", columns={"xp": "desc"}, accumulate=["xp"])
    rows = [("ann", {"xp": 2**63 - 1}), ("bob", {"xp": 1}), ("ann", {"xp": 1})]
    with pytest.raises(mdss.InvalidScoreError, match="owner 'ann', whose rows merge: integer score"):
        board.load(rows, **({} if memory_bytes is None else {"memory_bytes": memory_bytes}))
    assert board.count("xp") == 0


def test_a_window_listing_the_store_refuses_after_all_took_the_post_is_no_refusal_of_the_whole_post(
    monkeypatch,
) -> None:
    """A window is listed just before its commit, after ``all`` took the post: a refusal of the listing raised
    StoreRefusedError ("nothing landed"), and the retry it invites counted the post twice in ``all`` (a review)."""
    clock = [1_795_000_000]
    store = mdss.open_store("memory://?appends=false")
    board = mdss.Leaderboard(
        store, "g", columns={"xp": "desc"}, accumulate=["xp"], windows=["all", "day"], now=lambda: clock[0]
    )
    board.post("ann", {"xp": 1})
    clock[0] += 86_400  # a new day: its window is listed by the next post
    monkeypatch.setattr(store, "_cas", _refusing_cas(store, "#windows")[1])
    with pytest.raises(mdss.StoreUnavailableError, match="after 'all' took the post") as raised:
        board.post("ann", {"xp": 1})
    assert not isinstance(raised.value, mdss.StoreRefusedError)
    assert board.row("ann").values == {"xp": 2}
