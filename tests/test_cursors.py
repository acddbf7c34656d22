"""Page cursors: one envelope (``mdss._cursor.pack``) for sets, sharded sets and leaderboards, each cursor
bound to what issued it."""

from __future__ import annotations

import itertools

import pytest

import mdss


def _issuers(store):
    """Things that hand out cursors, each with a page call, and a cursor it made."""
    plain = mdss.SortedSet.load(store, "s", {f"m{i}": i for i in range(30)}, chunk_size=4)
    other = mdss.SortedSet.load(store, "s2", {f"m{i}": i for i in range(30)}, chunk_size=4)
    sharded = mdss.SortedSet(store, "sh", shards=3, chunk_size=4)
    sharded.add_many({f"m{i}": i for i in range(30)})
    board = mdss.Leaderboard(store, "g", columns={"xp": "desc", "kills": "desc"}, windows=["all", "day"])
    for i in range(30):
        board.post(f"p{i}", {"xp": i, "kills": 30 - i})
    pages = {
        "set": lambda c: plain.page(5, c),
        "other set": lambda c: other.page(5, c),
        "sharded": lambda c: sharded.page(5, c),
        "board xp": lambda c: board.page("xp", limit=5, cursor=c),
        "board kills": lambda c: board.page("kills", limit=5, cursor=c),
        "board xp day": lambda c: board.page("xp", limit=5, cursor=c, window="day"),
    }
    cursors = {
        "set": plain.page(5).cursor,
        "other set": other.page(5).cursor,
        "sharded": sharded.page(5).cursor,
        "board xp": board.page("xp", limit=5).cursor,
        "board kills": board.page("kills", limit=5).cursor,
        "board xp day": board.page("xp", limit=5, window="day").cursor,
    }
    return pages, cursors


def test_a_cursor_is_taken_only_by_what_issued_it(store) -> None:
    pages, cursors = _issuers(store)
    assert all(isinstance(c, str) for c in cursors.values())
    for issuer, taker in itertools.product(cursors, pages):
        if issuer == taker:
            pages[taker](cursors[issuer])  # continues
            continue
        with pytest.raises(mdss.InvalidArgumentError, match="cursor"):
            pages[taker](cursors[issuer])


@pytest.mark.parametrize("bad", ["", "=", "AAAA", "A" * 9, "not base64!", 7, b"bytes", None.__class__.__name__])
def test_malformed_cursors_are_refused_by_every_issuer(store, bad) -> None:
    pages, _ = _issuers(store)
    for page in pages.values():
        with pytest.raises(mdss.InvalidArgumentError, match="cursor"):
            page(bad)


def test_a_cursor_whose_trees_lose_a_node_under_the_same_head_raises_rather_than_resumes(monkeypatch) -> None:
    """A page whose cursor's snapshot misses a node goes on from the newest head, next to the cursor's entry: right when
    the head moved on (the node collected), but under the very head that names the node the set is damaged. A helper's
    fuzz had one manifest hold another's valid bytes: the resumed page landed earlier in the damaged tree, and
    iterating the set never ended. Now the MissingNodeError stands."""
    board = mdss.SortedSet.load(mdss.open_store("memory://"), "s", {f"m{i:02d}": i for i in range(50)}, chunk_size=4)
    cursor = board.page(5).next

    def gone(state):
        raise mdss.MissingNodeError("injected: a node of the cursor's trees is gone", "mdss:s:n:lost")

    monkeypatch.setattr(board, "_cursor_ranking", gone)
    with pytest.raises(mdss.MissingNodeError):
        board.page(5, cursor)
    board.add("late", 100)  # the head moves on: the cursor's snapshot is an older one, and the page goes on from it
    board.merge()
    assert [e.member for e in board.page(5, cursor).entries] == ["m44", "m43", "m42", "m41", "m40"]
