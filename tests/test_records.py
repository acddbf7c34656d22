"""Record windows (docs/architecture.md, "Next: entries that carry a record"): a set whose members' values are rows,
each row making one score tree key per column whose fields it has, its tie as score. Checked against a model on every
store, with tiny chunks and log limits so that trees split, merge and take patches all the time: the score tree as read
(with the update log applied) holds exactly the entries the model's rows make, in order; counts below any key and
distinct ties below it (dense ranks) are exact; the member index gives back each row; ``check()`` finds nothing."""

from __future__ import annotations

from bisect import bisect_left
from typing import Any

import msgpack
import pytest
import strategies as S
from depth import examples
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule, run_state_machine_as_test

import mdss
from mdss._keys import Keyspace
from mdss._order import column_member, column_tag, row_columns, row_record, rows_tiebreak

# A column on field "" (which no board row has) orders rows that hold only it: a board's post ids, by moment. Columns
# whose ties go by first order a tie by when each row reached its key there.
COLUMNS = [
    ((0, (("xp", "desc"),), False),),
    (
        (0, (("xp", "desc"),), False),
        (1, (("wins", "desc"), ("t", "asc")), True),
        (5, (("t", "asc"),), False),
        (130, (("", "asc"),), False),
    ),
    ((0, (("xp", "desc"),), True), (2, (("t", "asc"),), True)),
]
OWNERS = ["ann", "bob", "cid", "dee", "ñandú", "日本", "a:b", "z" * 40, "p:1", "p:2"]
numbers = st.sampled_from([0, 1, 2, -3, 2**53 + 1, 0.5, 1e300, float("-inf")])
rows = st.fixed_dictionaries(
    {}, optional={"xp": numbers, "wins": numbers, "t": numbers, "name": st.sampled_from(["x", "ÿ", ""]), "": numbers}
)


def _tie(values: dict[str, Any], slot: int, parts: Any) -> str | None:
    """The tie a row's values make in a column (``None``: it lacks a field), spelled as boards spell column keys."""
    found = [values.get(f) for f, _ in parts]
    if not all(type(v) in (int, float) for v in found):
        return None
    return column_member(slot, [(v, d) for v, (_, d) in zip(found, parts)], "")


def _resolver(columns: Any) -> Any:
    """The op ``"row"``, as a board's post will resolve it in the commit: the posted values replace the row; in each
    column that goes by first, a row keeps the number of the entry that gave it its key while the key stays, else takes
    its own entry's (``None``)."""
    firsts = [(column_tag(slot), slot, parts) for slot, parts, first in columns if first]

    def resolve(trial: dict[str, Any], member: str, given: Any) -> bool:
        values, stamp = given
        old = trial[member]
        if not firsts:
            trial[member] = (stamp, msgpack.packb(values))
            return True
        had, numbers = row_record(old) if old is not None else ({}, {})
        kept = {}
        for tag, slot, parts in firsts:
            tie = _tie(values, slot, parts)
            if old is not None and tie is not None and tie == _tie(had, slot, parts):
                kept[tag] = old[2] if numbers.get(tag) is None else numbers[tag]
        trial[member] = (stamp, msgpack.packb([values, kept]), None)
        return True

    return {"row": resolve}


class RecordMachine(RuleBasedStateMachine):
    factory: Any = None

    @initialize(
        columns=st.sampled_from(COLUMNS),
        chunk=S.chunk_sizes,
        log_limit=S.log_limits,
        node_bytes=st.sampled_from([None, 700, 1200]),
    )
    def open(self, columns: Any, chunk: int, log_limit: int | None, node_bytes: int | None) -> None:
        """Nodes bounded in items, or in bytes too (a member index's rows weigh with their owners: 4 of the heaviest
        entry fit 700 bytes)."""
        store = self.factory()
        self.tiebreak = rows_tiebreak(columns)
        self.columns = row_columns(self.tiebreak)
        self.set = mdss.SortedSet.at_keys(
            Keyspace(store.namespace, "w"),
            store,
            "w",
            tiebreak=self.tiebreak,
            order="asc",
            chunk_size=chunk,
            log_limit=log_limit,
            gc_grace=0,
            node_bytes=node_bytes,
            resolvers=_resolver(self.columns),
        )
        self.rows: dict[str, dict[str, Any]] = {}
        self.reached: dict[tuple[str, int], int] = {}  # (owner, slot) -> the post that gave its key, in a first column
        self.posts = 0

    def expected(self) -> list[tuple[Any, str, str]]:
        """The score tree the model makes: ``(order, member, tie)`` in order (a first column's ties by reaching)."""
        found = []
        for owner, values in self.rows.items():
            for slot, parts, first in self.columns:
                tie = _tie(values, slot, parts)
                if tie is not None:
                    found.append(((tie, self.reached[owner, slot] if first else 0, owner), owner, tie))
        return sorted(found)

    @rule(owner=st.sampled_from(OWNERS), row=rows)
    def post(self, owner: str, row: dict[str, Any]) -> None:
        self.posts += 1
        self.set.engine.group.submit([("row", owner, (row, float(self.posts)))])
        for slot, parts, first in self.columns:
            tie = _tie(row, slot, parts)
            if first and (owner not in self.rows or tie != _tie(self.rows[owner], slot, parts)):
                self.reached[owner, slot] = self.posts
        self.rows[owner] = row

    @rule(member=st.sampled_from(OWNERS))
    def remove(self, member: str) -> None:
        assert self.set.remove(member) == (self.rows.pop(member, None) is not None)

    @rule()
    def merge(self) -> None:
        self.set.merge()

    @rule(owner=st.sampled_from(OWNERS))
    def value(self, owner: str) -> None:
        found = mdss._snapshot.read(self.set.engine, lambda snap: snap.index.get(owner))
        assert (None if found is None else row_record(found)[0]) == self.rows.get(owner)

    @rule(tag=st.sampled_from(["00:", "01:", "02:", "05:", "06:", "82:"]), owner=st.sampled_from(OWNERS))
    def count_below(self, tag: str, owner: str) -> None:
        """Counts below a column's start, below each of a row's keys and ties, and the distinct ties below those."""
        expected = self.expected()
        probes: list[Any] = [(tag,)]
        positions = [sum(e[2] < tag for e in expected)]
        if owner in self.rows:
            value = mdss._snapshot.read(self.set.engine, lambda snap: snap.index.get(owner))
            for key in self.set.engine.ordering.keys(owner, value):
                mine = next(i for i, e in enumerate(expected) if e[1] == owner and e[2] == key[0])
                probes += [key, (key[0],)]
                positions += [mine, sum(e[2] < key[0] for e in expected)]
        firsts = [p for p in probes if len(p) == 1]  # dense counts are asked below the first key of a tie

        def read(snap: Any) -> Any:
            return snap.ranking.count_below(probes), mdss._ranking.dense_below(snap.ranking, firsts)

        counts, dense = mdss._snapshot.read(self.set.engine, read)
        assert counts == positions
        ties = sorted({e[2] for e in expected})
        assert dense == [bisect_left(ties, p[0]) for p in firsts]

    @invariant()
    def score_tree_is_the_rows_keys(self) -> None:
        if not hasattr(self, "set"):
            return

        def read(snap: Any) -> Any:
            return snap.ranking.slice(0, snap.ranking.count)

        members, scores = mdss._snapshot.read(self.set.engine, read)
        assert list(zip(members, scores)) == [(m, t) for _, m, t in self.expected()]

    def teardown(self) -> None:
        if hasattr(self, "set"):
            self.set.merge()
            assert self.set.check() == []
            self.score_tree_is_the_rows_keys()


def test_record_windows_match_the_model(store_factory) -> None:
    RecordMachine.factory = staticmethod(store_factory)
    profile = settings()
    budget = examples(store_factory.kind, profile.max_examples, divisor=4)
    run_state_machine_as_test(RecordMachine, settings=settings(profile, max_examples=budget))


def test_a_record_window_is_stored_with_its_columns_and_refused_by_a_reader_expecting_others() -> None:
    store = mdss.open_store("memory://")
    tiebreak = rows_tiebreak(((0, (("xp", "desc"),), False),))
    made = mdss.SortedSet.at_keys(Keyspace(store.namespace, "w"), store, "w", tiebreak=tiebreak, order="asc")
    made.add("ann", 1.0, data=msgpack.packb({"xp": 3}))
    again = mdss.SortedSet.at_keys(Keyspace(store.namespace, "w"), store, "w")
    assert again.tiebreak == tiebreak
    with pytest.raises(mdss.SettingsMismatchError):
        mdss.SortedSet.at_keys(
            Keyspace(store.namespace, "w"), store, "w", tiebreak=rows_tiebreak(((0, (("xp", "asc"),), False),))
        )
    with pytest.raises(mdss.InvalidArgumentError, match="holds a row"):
        again.rank("ann")
    with pytest.raises(mdss.InvalidArgumentError, match="holds rows, not"):
        again.add("bob", 3)
    again.merge()
    assert again.check() == [] and again.engine.head.members.count == 1


@pytest.mark.parametrize(
    "bad",
    [
        "rows:",
        "rows:[]",
        'rows:[[0,[["xp","down"]]]]',
        'rows:[[0,[["xp","desc"]]],[0,[["t","asc"]]]]',
        'rows:[[256,[["xp","desc"]]]]',
        'rows: [[0,[["xp","desc"]]]]',
        "rows:[[0,[]]]",
        'rows:[[0,[["xp","desc","x"]]]]',
        'rows:[[0,[["xp","desc"]],"last"]]',
        'rows:[[0,[["xp","desc"]],"first",1]]',
    ],
)
def test_malformed_record_columns_are_refused(bad: str) -> None:
    assert not mdss._order.valid_tiebreak(bad)
    with pytest.raises(mdss.InvalidArgumentError):
        mdss._order.Order("asc", bad)
