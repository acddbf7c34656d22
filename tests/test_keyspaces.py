"""Key spaces: no object a user names reaches another object's keys, on every store.

A board's windows, settings, registry and post ids, a sharded set's shards and
settings, a top-N set: each lives at keys that no other name can produce
(``mdss._keys``: names are percent-encoded, internal parts follow a raw ``#``
or ``|``). Boards stored before internal keys keep their old keys
(``tests/data/leaderboard/old-keys.json``).
"""

from __future__ import annotations

import base64
import json
import pathlib

import pytest
from hypothesis import given
from hypothesis import strategies as st
from readable import readable_keys

import mdss
from mdss._keys import HEAD, NODE, PART, SHARD, TOPN, Keyspace, kind
from mdss._keys import board_keyspace as _space

HOSTILE = [
    "g#all",
    "g#board",
    "g#windows",
    "g#posts",
    "g#day:2026-11-18",
    "g#rows#all",
    "g%23all",
    "g%23board",
    "g|0.1f",
    "g:h",
    "g:n:1.2",
    "{g}",
    "g}",
    "g#",
    "#",
    "|",
    "%",
    "g/all",
    "ğ#all",
]


def _state(store: mdss.Store) -> dict[str, bytes | None]:
    keys = readable_keys(store, Keyspace(store.namespace, "x").prefix[: -len("x:")])
    return dict(zip(keys, store.get_many(keys)))


def _owned(keys: Keyspace, key: str) -> bool:
    return key.startswith(keys.prefix)


def _board(store: mdss.Store) -> mdss.Leaderboard:
    board = mdss.Leaderboard(
        store, "g", columns={"xp": "desc"}, windows=["all", "day"], now=lambda: 1795000000, chunk_size=4
    )
    for i in range(9):
        board.post(f"o{i}", {"xp": i})
    return board


@pytest.mark.parametrize("name", HOSTILE)
def test_a_set_of_any_name_never_touches_a_board(store, name) -> None:
    board = _board(store)
    before = _state(store)
    rows = board.page("xp", limit=20).rows
    sset = mdss.SortedSet(store, name, chunk_size=4)
    assert len(sset) == 0 and sset.range(0, 10) == [] and sset.score("o1") is None
    sset.add_many({f"m{i}": i for i in range(9)})
    assert sset.check() == [] and board.check() == [] and board.check("day") == []
    mine = Keyspace(store.namespace, name)
    touched = {k for k, v in _state(store).items() if before.get(k) != v} | set(before) - set(_state(store))
    assert touched and all(_owned(mine, k) for k in touched)
    sset.drop()
    assert _state(store) == before
    top = mdss.TopN(store, name, n=3)
    top.post("z", 1)
    assert set(_state(store)) - set(before) == {mine.topn}
    store.delete(mine.topn)
    sharded = mdss.SortedSet(store, name, shards=2, chunk_size=4)
    sharded.add_many({f"m{i}": i for i in range(9)})
    assert sharded.check() == [] and board.check() == []
    sharded.drop()
    assert _state(store) == before
    assert board.page("xp", limit=20).rows == rows and board.windows() == ["all", "day:2026-11-18"]


def test_a_board_never_touches_sets_named_like_its_parts(store) -> None:
    users = {name: mdss.SortedSet(store, name, chunk_size=4) for name in HOSTILE}
    for i, sset in enumerate(users.values()):
        sset.add_many({"a": i, "b": i + 1})
    tops = {name: mdss.TopN(store, name, n=2) for name in HOSTILE}
    for top in tops.values():
        top.post("t", 1)
    before = _state(store)
    board = _board(store)
    board.drop_window("day")
    assert {k: v for k, v in _state(store).items() if k in before} == before
    board.drop()
    assert _state(store) == before
    assert all(sset.check() == [] and len(sset) == 2 for sset in users.values())
    with pytest.raises(mdss.InvalidArgumentError, match="no leaderboard"):
        mdss.Leaderboard.open(store, "g")  # "g#board" is a user's set, not the board's settings


def test_board_parts_and_shards_have_internal_keys(store) -> None:
    board = _board(store)
    ns = Keyspace(store.namespace, "x").prefix[: -len("x:")]
    assert _state(store) and all(k.startswith(ns + "g#") for k in _state(store))
    for part in ("board", "windows", "posts", "all", "day:2026-11-18"):
        assert _space(store, "g", part, False).prefix == Keyspace.internal(store.namespace, "g", part).prefix
        assert Keyspace.internal(store.namespace, "g", part).prefix != Keyspace(store.namespace, f"g#{part}").prefix
    assert board.windows() == ["all", "day:2026-11-18"]
    sharded = mdss.SortedSet(store, "s", shards=3)
    sharded.add_many({f"m{i}": i for i in range(20)})
    heads = [e.keys.head for e in sharded.engines]
    assert all(h.startswith(ns + "s|") for h in heads) and all(store.get(h) is not None for h in heads)
    for head in heads:  # a set named after a shard's key name is another set
        part = head[len(ns) : -len(":h")]
        user = mdss.SortedSet(store, part)
        assert len(user) == 0 and user.keys.head != head
        user.add("x", 1)
        user.drop()
    assert len(sharded) == 20 and sharded.check() == []


def test_a_shard_settings_record_naming_another_sets_shards_is_damage(store) -> None:
    mdss.SortedSet(store, "a", shards=2).add("x", 1)
    record = store.get(Keyspace(store.namespace, "a").settings)
    assert record is not None
    store.put(Keyspace(store.namespace, "b").settings, record.value)  # "b" would read "a"'s shards
    with pytest.raises(mdss.CorruptDataError, match="another set"):
        mdss.SortedSet(store, "b")


def test_a_board_stored_with_old_keys_still_reads_and_posts(store) -> None:
    """tests/data/leaderboard/old-keys.json: board "game" as stored when its parts were sets named
    "game#all"...: it keeps those keys (reachable by those set names) until dropped."""
    dump = json.loads((pathlib.Path(__file__).parent / "data" / "leaderboard" / "old-keys.json").read_text())
    ns = Keyspace(store.namespace, "x").prefix[: -len("x:")]
    for key, value in dump["store"].items():
        store.put(ns + key[len("mdss:") :], base64.b64decode(value))
    board = mdss.Leaderboard(
        store, "game", columns={"xp": "desc"}, accumulate=["shots"], windows=["all", "day"], now=lambda: 1795000000
    )
    assert board.windows() == dump["windows"]
    for window, rows in dump["rows"].items():
        got = {r.owner: [r.values, r.updated] for r in board.page("xp", limit=100, window=window).rows}
        assert got == rows
        assert board.check(window) == []
    assert board.post("o3", {"xp": 100, "shots": 1}, post_id="p3") == dict.fromkeys(dump["windows"], False)
    assert board.post("o3", {"xp": 100, "shots": 1}, post_id="new")["all"] is True
    assert board.top("xp", 1)[0].owner == "o3"
    assert readable_keys(store, ns + "game#") == []  # nothing at the internal keys: the old ones serve
    again = mdss.Leaderboard.open(store, "game", windows=["all", "day"], now=lambda: 1795000000)
    assert again.row("o3") == board.row("o3") and again.row("o3").values["shots"] == 3 + 1
    board.drop()
    assert readable_keys(store, ns + "game") == []
    fresh = mdss.Leaderboard(store, "game", columns={"xp": "desc"})
    fresh.post("ann", {"xp": 1})
    assert readable_keys(store, ns + "game%23") == [] and readable_keys(store, ns + "game#")


# -- every key family against every other, for names over an alphabet of separators -----------------------------

names = st.text(alphabet="#|:{}%/a\u00e9\U0001f600 ", min_size=1, max_size=6)
objects = st.one_of(
    st.tuples(st.just("set"), names, st.none()),
    st.tuples(st.just("topn"), names, st.none()),
    st.tuples(
        st.just("board"),
        names.filter(lambda n: "#" not in n),
        st.sampled_from(["board", "windows", "posts", "all", "day:2026-11-18", "rows#all"]),
    ),
    st.tuples(st.just("shard"), names, st.sampled_from(["0.1f", "1.0", "12.a3"])),
)


def _keys_of(namespace: str, obj: tuple[str, str, str | None]) -> dict[str, str]:
    """Every key (nodes and notes by an example id) of one object, with the kind it must have."""
    family, name, part = obj
    if family == "topn":
        return {Keyspace(namespace, name).topn: TOPN}
    if family == "set":
        keys = Keyspace(namespace, name)
        found = {keys.settings: HEAD}  # a sharded set's settings record
    elif family == "board":
        keys = Keyspace.internal(namespace, name, part)  # type: ignore[arg-type]
        found = {}
    else:
        keys = Keyspace.internal(namespace, name, part, SHARD)  # type: ignore[arg-type]
        found = {}
    return {**found, keys.head: HEAD, keys.node("1.2f"): NODE, keys.note("1.2f"): NODE}


@given(st.lists(objects, min_size=2, max_size=8, unique=True), st.sampled_from(["mdss", "a:b", "#|"]))
def test_no_two_objects_share_a_key(objs, namespace) -> None:
    owner: dict[str, tuple[str, str, str | None]] = {}
    for obj in objs:
        for key, want in _keys_of(namespace, obj).items():
            assert kind(key) == want, key
            other = owner.setdefault(key, obj)
            assert other == obj, f"{obj} and {other} share {key}"
        # an object's keys share the part before the second ':' (what kind() and the Riak store split on)
        assert len({tuple(k.split(":", 2)[:2]) for k in _keys_of(namespace, obj)}) == 1


def test_separators_are_never_raw_in_a_name() -> None:
    for name in HOSTILE:
        encoded = Keyspace("n", name).prefix[len("n:") : -1]
        assert PART not in encoded and SHARD not in encoded and ":" not in encoded
