"""Pages both ways (``Page.next`` and ``Page.previous``), pages around a member or an owner, and ``around(...,
fill=True)``: against a plain sorted list on every store, for sets with tiny entry sets (deep trees that split and
merge), sharded sets and leaderboards; cursors stay exact while other writers change the set; bad cursors are refused.

By default the networked stores search a quarter of the examples (``depth.examples``); ``MDSS_DEEP=1`` searches more.
"""

from __future__ import annotations

import itertools
import random

import pytest
from depth import examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from model import Model
from strategies import orders

import mdss
from mdss import _cursor
from mdss._tree import Manifest


def budget(kind: str) -> settings:
    """The profile's examples on the in-process stores, a quarter on the networked ones (an eighth on DynamoDB, the
    slowest: ``depth.examples``)."""
    budget = examples(kind, settings().max_examples, divisor=8 if kind == "dynamodb" else 4)
    return settings(max_examples=budget, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def fill_span(position: int, before: int, after: int, size: int) -> tuple[int, int]:
    """Where a full span of ``before + after + 1`` around ``position`` lies once slid inside ``size`` entries."""
    want = before + after + 1
    start = min(max(position - before, 0), max(size - want, 0))
    return start, min(start + want, size)


def walk(fetch, expected: list, limit: int, listed) -> None:
    """Every page from the first by ``next``, then from the last by ``previous``: the same pages of ``expected``
    (``limit`` each, the last one short) both ways, each item once; the ``next`` of a page reached going back is the
    page after it, and the ``previous`` of a page reached going forward the page before it (``listed(page)``: a
    page's items as ``expected`` spells them; ``fetch(cursor)``: a page, the first for ``None``)."""
    chunks = [expected[i : i + limit] for i in range(0, len(expected), limit)] or [[]]
    forward = [fetch(None)]
    while forward[-1].next is not None:
        forward.append(fetch(forward[-1].next))
    assert [listed(p) for p in forward] == chunks
    backward = [forward[-1]]
    while backward[-1].previous is not None:
        backward.append(fetch(backward[-1].previous))
    backward.reverse()
    assert [listed(p) for p in backward] == chunks
    assert forward[0].previous is None and backward[-1].next is None
    for k in range(1, len(chunks)):
        assert listed(fetch(backward[k - 1].next)) == chunks[k]  # next of a page reached going back
        assert listed(fetch(forward[k].previous)) == chunks[k - 1]  # previous of a page reached going forward


def check_around_page(page, expected: list, at: int, limit: int, fetch, listed) -> None:
    """A page around the item at ``at`` of ``expected``: it holds that item at index ``limit // 2`` (or slid to stay
    full at an end), and its cursors lead to the pages just after and just before it."""
    start, stop = fill_span(at, limit // 2, limit - 1 - limit // 2, len(expected))
    assert listed(page) == expected[start:stop]
    assert (page.next is None) == (stop == len(expected)) and (page.previous is None) == (start == 0)
    if page.next is not None:
        assert listed(fetch(page.next)) == expected[stop : stop + limit]
    if page.previous is not None:
        assert listed(fetch(page.previous)) == expected[max(start - limit, 0) : start]


def test_sets_page_both_ways_against_the_model(store_factory) -> None:
    """Sets and sharded sets built with entry sets of 2 to 4 entries, then changed (so that pages read the update
    log over the trees), paged forward and back, around members, and ``around`` with and without ``fill``."""

    @budget(store_factory.kind)
    @given(
        order=orders,
        chunk=st.integers(2, 4),
        shards=st.sampled_from([1, 1, 3]),
        size=st.integers(0, 24),
        limit=st.integers(1, 6),
        seed=st.integers(0, 2**32),
        log_limit=st.sampled_from([None, 0, 2]),
    )
    def check(order, chunk, shards, size, limit, seed, log_limit) -> None:
        rng = random.Random(seed)
        model = Model(order)
        model.scores = {f"m{k:02d}": rng.randrange(6) for k in range(size)}  # ties: a score of about four members
        options = {"chunk_size": chunk, "order": order, "shards": shards, "log_limit": log_limit}
        sset = mdss.SortedSet.load(store_factory(), "b", model.scores, **options)
        changes = {f"m{rng.randrange(30):02d}": rng.randrange(6) for _ in range(rng.randrange(6))}
        gone = [f"m{rng.randrange(30):02d}" for _ in range(rng.randrange(4))]
        sset.add_many(changes)
        sset.remove_many(gone)
        model.scores.update(changes)
        for member in gone:
            model.scores.pop(member, None)
        expected = model.entries()
        walk(lambda cursor: sset.page(limit, cursor), expected, limit, lambda p: p.entries)
        n = len(expected)
        for at in sorted({0, n - 1, rng.randrange(n)} if n else ()):
            member = expected[at].member
            page = sset.page(limit, around=member)
            check_around_page(page, expected, at, limit, lambda c: sset.page(limit, c), lambda p: p.entries)
            before, after = rng.randrange(4), rng.randrange(4)
            start, stop = fill_span(at, before, after, n)
            assert sset.around(member, before, after, fill=True) == expected[start:stop]
            assert len(expected[start:stop]) == min(before + after + 1, n)
            assert sset.around(member, before, after) == expected[max(at - before, 0) : at + after + 1]
        assert sset.page(limit, around="absent") == mdss._facade.Page([], None, None)

    check()


def board_model(rows: dict) -> dict[str, list[tuple[int, str]]]:
    """Each column's ``(rank, owner)`` pairs, best first: ``xp`` descending, ``t`` ascending, ties by owner; a
    row without ``t`` has no place in that column."""
    ranked = {
        "xp": sorted(rows, key=lambda o: (-rows[o]["xp"], o)),
        "t": sorted((o for o in rows if "t" in rows[o]), key=lambda o: (rows[o]["t"], o)),
    }
    return {column: [(i + 1, o) for i, o in enumerate(owners)] for column, owners in ranked.items()}


def as_pairs(rows) -> list[tuple[int, str]]:
    return [(r.rank, r.owner) for r in rows]


def test_boards_page_both_ways_against_the_model(store_factory) -> None:
    """A board's columns (one with every row, one with some) paged forward and back, by offset from either cursor,
    around owners, and ``around`` with and without ``fill``."""

    @budget(store_factory.kind)
    @given(
        chunk=st.integers(2, 4),
        size=st.integers(0, 20),
        limit=st.integers(1, 6),
        offset=st.integers(0, 4),
        seed=st.integers(0, 2**32),
    )
    def check(chunk, size, limit, offset, seed) -> None:
        rng = random.Random(seed)
        rows = {f"o{k:02d}": {"xp": rng.randrange(5)} for k in range(size)}
        for values in rows.values():
            if rng.random() < 0.7:
                values["t"] = rng.randrange(5)
        board = mdss.Leaderboard(store_factory(), "g", columns={"xp": "desc", "t": "asc"}, chunk_size=chunk)
        board.load(rows)
        for column, expected in board_model(rows).items():

            def fetch(cursor, column=column):
                return board.page(column, limit=limit, cursor=cursor)

            walk(fetch, expected, limit, lambda p: as_pairs(p.rows))
            n = len(expected)
            middle = board.page(column, limit=limit, offset=offset)  # a page by rank, its cursors with an offset
            start, skip = min(offset, n), rng.randrange(offset + 1)
            assert as_pairs(middle.rows) == expected[start : start + limit]
            if middle.previous is not None:  # ``skip`` rows before the page, going back
                page = board.page(column, limit=limit, cursor=middle.previous, offset=skip)
                assert as_pairs(page.rows) == expected[max(start - skip - limit, 0) : max(start - skip, 0)]
            if middle.next is not None:
                page = board.page(column, limit=limit, cursor=middle.next, offset=skip)
                assert as_pairs(page.rows) == expected[start + limit + skip : start + 2 * limit + skip]
            for at in sorted({0, n - 1, rng.randrange(n)} if n else ()):
                owner = expected[at][1]
                page = board.page(column, limit=limit, around=owner)
                check_around_page(page, expected, at, limit, fetch, lambda p: as_pairs(p.rows))
                before, after = rng.randrange(4), rng.randrange(4)
                start, stop = fill_span(at, before, after, n)
                filled = board.around(owner, column, before=before, after=after, fill=True)
                assert as_pairs(filled) == expected[start:stop]
                plain = board.around(owner, column, before=before, after=after)
                assert as_pairs(plain) == expected[max(at - before, 0) : at + after + 1]
            assert board.page(column, limit=limit, around="nobody").rows == []

    check()


def _paged_thing(store, kind: str, steady: dict[str, int]):
    """A set, a sharded set or a board holding ``steady``, with what pages it, lists a page's members or owners,
    writes other members (``w...``) among them, and folds its update logs."""
    if kind == "board":
        board = mdss.Leaderboard(store, "g", columns={"xp": "desc"}, chunk_size=3, gc_grace=0.0)
        board.load({owner: {"xp": xp} for owner, xp in steady.items()})
        windows = [board._set(instance) for instance in board.windows()]

        def write(rng: random.Random) -> None:
            board.post(f"w{rng.randrange(9)}", {"xp": rng.randrange(len(steady))})
            board.remove(f"w{rng.randrange(9)}")

        return (
            lambda cursor: board.page("xp", limit=3, cursor=cursor),
            lambda page: [r.owner for r in page.rows],
            write,
            lambda: [w.merge() for w in windows],
        )
    sset = mdss.SortedSet.load(store, "b", steady, chunk_size=3, shards=3 if kind == "sharded" else 1, gc_grace=0.0)

    def change(rng: random.Random) -> None:
        sset.add_many({f"w{rng.randrange(9)}": rng.randrange(len(steady)) for _ in range(2)})
        sset.remove(f"w{rng.randrange(9)}")

    return lambda cursor: sset.page(3, cursor), lambda page: [e.member for e in page.entries], change, sset.merge


def test_pages_back_never_skip_nor_repeat_a_member_nobody_changes(store_factory) -> None:
    """Going back from the last page while other members come, go and move, and the update log each cursor names is
    merged (an unsharded set's snapshot is then gone: the page ends just before the cursor's entry, on the newest
    state): every member nobody changed is listed once, in order, as going forward."""
    steady = {f"s{i:02d}": i for i in range(14)}
    want = sorted(steady, key=lambda m: -steady[m])
    for n, kind in enumerate(("set", "sharded", "board")):
        fetch, listed, write, merge = _paged_thing(store_factory(), kind, steady)
        rng = random.Random(n)
        page = fetch(None)
        while page.next is not None:
            page = fetch(page.next)
        seen = listed(page)
        while page.previous is not None:
            write(rng)
            page = fetch(page.previous)
            merge()
            seen[:0] = listed(page)
        assert [m for m in seen if m.startswith("s")] == want, kind
        assert any(m.startswith("w") for m in seen), kind  # pages went on from the newest state


def _issuers(store) -> dict:
    """Each kind of page, by a call taking a cursor, with a ``previous`` cursor of its own (of its second page)."""
    plain = mdss.SortedSet.load(store, "s", {f"m{i}": i for i in range(12)}, chunk_size=3)
    sharded = mdss.SortedSet.load(store, "sh", {f"m{i}": i for i in range(12)}, chunk_size=3, shards=3)
    board = mdss.Leaderboard(store, "g", columns={"xp": "desc", "kills": "desc"}, chunk_size=3)
    board.load({f"p{i}": {"xp": i, "kills": 12 - i} for i in range(12)})
    calls = {
        "set": lambda c: plain.page(4, c),
        "sharded": lambda c: sharded.page(4, c),
        "board xp": lambda c: board.page("xp", limit=4, cursor=c),
        "board kills": lambda c: board.page("kills", limit=4, cursor=c),
    }
    return {name: (call, call(call(None).next).previous) for name, call in calls.items()}


def test_a_cursor_back_is_taken_only_by_what_issued_it(store) -> None:
    """A ``previous`` cursor is bound to its set, board, column and direction as ``next`` is; pages keep their older
    shape (``cursor`` is ``next``, and a page unpacks as its items and ``next``)."""
    issuers = _issuers(store)
    for (issuer, (_, cursor)), (taker, (call, _)) in itertools.product(issuers.items(), issuers.items()):
        assert isinstance(cursor, str)
        if issuer == taker:
            first = call(cursor)
            assert first.next is not None and first.previous is None
            continue
        with pytest.raises(mdss.InvalidArgumentError, match="cursor"):
            call(cursor)
    for call, cursor in issuers.values():
        for bad in (cursor[:-2], cursor[:5] + ("A" if cursor[5] != "A" else "B") + cursor[6:], cursor + "AA"):
            with pytest.raises(mdss.InvalidArgumentError, match="cursor"):
                call(bad)
        page = call(None)
        items, following = page
        assert following is not None and following == page.cursor == page.next
        assert items == (page.entries if isinstance(page, mdss._facade.Page) else page.rows)


def test_bad_paging_arguments_are_refused(store) -> None:
    """A page by cursor and around at once, around with an offset, a bad limit, member or ``fill``: refused before
    any read; around an absent member or owner, an empty page without cursors."""
    sset = mdss.SortedSet.load(store, "s", {"a": 1, "b": 2})
    board = mdss.Leaderboard(store, "g", columns={"xp": "desc"})
    board.load({"ann": {"xp": 1}, "bob": {"xp": 2}})
    cursor = sset.page(1).next
    for call in (
        lambda: sset.page(1, cursor, around="a"),
        lambda: sset.page(0, around="a"),
        lambda: sset.page(1, around=7),
        lambda: sset.around("a", fill="yes"),
        lambda: board.page("xp", limit=1, around="ann", offset=1),
        lambda: board.page("xp", limit=1, around="ann", cursor=board.page("xp", limit=1).next),
        lambda: board.around("ann", "xp", fill=1),
    ):
        with pytest.raises(mdss.InvalidArgumentError):
            call()
    assert board.page("xp", limit=3, around="nobody") == mdss.leaderboard.Page([], None, None)


def test_board_pages_cost_as_before() -> None:
    """With the manifests cached and no entry set, a page back costs the round trips of a page forward (3: the
    head, the entry sets from the key, the rows) and a page around an owner those of ``around`` (4), in either
    ties mode: the entry sets before the key are fetched with it (docs/leaderboard.md, "Reads")."""
    store = mdss.open_store("memory://")
    board = mdss.Leaderboard(store, "g", columns={"xp": "desc"}, chunk_size=50)
    board.load({f"o{i}": {"xp": i % 97} for i in range(300)})
    engine = board._set(board.windows()[0]).engine

    def trips(call) -> int:
        for key in [k for k, (node, _) in engine.cache._nodes.items() if not isinstance(node, Manifest)]:
            engine.cache.discard(key)
        before = store.stats.snapshot()
        call()
        return store.stats.since(before)["calls"]

    for ties in ("ordinal", "competition"):  # each lambda binds its loop values (B023)
        pages = [board.page("xp", limit=7, ties=ties)]
        while pages[-1].next is not None:
            pages.append(board.page("xp", limit=7, cursor=pages[-1].next, ties=ties))
        back = {trips(lambda p=p, t=ties: board.page("xp", limit=7, cursor=p.previous, ties=t)) for p in pages[1:]}
        assert back == {3}, ties
        owners = [f"o{i}" for i in range(0, 300, 11)]
        centred = {trips(lambda o=o, t=ties: board.page("xp", limit=7, around=o, ties=t)) for o in owners}
        filled = {
            trips(lambda o=o, t=ties: board.around(o, "xp", before=3, after=3, ties=t, fill=True)) for o in owners
        }
        assert centred == filled == {4}, ties


def test_a_cursor_altered_with_its_checksum_is_refused_as_a_bad_argument_not_store_damage() -> None:
    """A helper's probe: a cursor's checksum is no secret, and one re-packed with another height read as
    CorruptDataError (an operator's alarm for what a client made up); another size shifted the pages."""
    store = mdss.open_store("memory://")
    sset = mdss.SortedSet(store, "s", chunk_size=3, log_limit=0)
    sset.add_many({f"m{i:02d}": i for i in range(40)})
    page = sset.page(5)
    fields, _ = _cursor.unpack(sset.keys.prefix, page.next, "set")
    state = _cursor.State(*fields)
    assert state.height >= 1 and state.root is not None
    for altered in (state._replace(height=state.height - 1), state._replace(size=state.size + 1)):
        forged = _cursor.encode(sset.keys.prefix, altered)
        with pytest.raises(mdss.InvalidArgumentError, match="never was"):
            sset.page(5, forged)
    assert [e.member for e in sset.page(5, page.next).entries] == [f"m{i:02d}" for i in range(34, 29, -1)]
    assert sset.check() == []


@pytest.mark.parametrize("shards", [1, 3])
def test_a_first_set_pages_on_after_its_boundary_entry_moved(store, shards: int) -> None:
    """In a set whose ties go by ``"first"``, a cursor held the boundary entry's member and score but not its place
    among its ties: once its snapshot was gone (always, sharded) and that entry had moved, the next page went on from
    the first of its tie, repeating members (going back, skipping them). Cursors now carry the entry's number among
    its ties: every member nobody changed is listed once, in order, both ways."""
    options = {"tiebreak": "first", "chunk_size": 3, "shards": shards, "gc_grace": 0.0}
    for direction, away in (("next", 1), ("previous", 9)):
        name = f"f-{direction}"
        sset = mdss.SortedSet(store, name, **options)
        steady = [f"s{i:02d}" for i in range(12)]
        for member in steady:  # one tie, in the order they reach it
            sset.add(member, 5)
        page = sset.page(3)
        while direction == "previous" and page.next is not None:
            page = sset.page(3, page.next)
        seen, moved = [e.member for e in page.entries], set()
        while getattr(page, direction) is not None:
            cursor = getattr(page, direction)
            moved.add(page.entries[-1 if direction == "next" else 0].member)
            sset.add(max(moved), away)  # the boundary entry leaves the tie
            sset.merge()
            sset.gc(wait=False)  # the cursor's snapshot is gone: the page goes on from the newest state
            page = mdss.SortedSet(store, name).page(3, cursor)  # a process that never saw it
            listed = [e.member for e in page.entries]
            seen = seen + listed if direction == "next" else listed + seen
        assert [m for m in seen if m not in moved] == [m for m in steady if m not in moved], (direction, seen)
