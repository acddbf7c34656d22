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
from mdss._order import column_member, row_columns, rows_tiebreak

# A column on field "" (which no board row has) orders rows that hold only it: a board's post ids, by moment.
COLUMNS = [
    ((0, (("xp", "desc"),)),),
    ((0, (("xp", "desc"),)), (1, (("wins", "desc"), ("t", "asc"))), (5, (("t", "asc"),)), (130, (("", "asc"),))),
]
OWNERS = ["ann", "bob", "cid", "dee", "ñandú", "日本", "a:b", "z" * 40, "p:1", "p:2"]
numbers = st.sampled_from([0, 1, 2, -3, 2**53 + 1, 0.5, 1e300, float("-inf")])
rows = st.fixed_dictionaries(
    {}, optional={"xp": numbers, "wins": numbers, "t": numbers, "name": st.sampled_from(["x", "ÿ", ""]), "": numbers}
)


def _entries(columns: Any, model: dict[str, Any]) -> list[tuple[Any, str, Any]]:
    """The score tree the model's values make: ``(key, stored member, score)`` in key order."""
    found = []
    for member, value in model.items():
        row = msgpack.unpackb(value[1])
        for slot, parts in columns:
            values = [row.get(f) for f, _ in parts]
            if all(type(v) in (int, float) for v in values):
                spelled = column_member(slot, [(v, d) for v, (_, d) in zip(values, parts)], member)
                tie = spelled[: -len(member)]
                found.append(((tie, spelled), member, tie))
    return sorted(found)


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
        )
        self.model: dict[str, Any] = {}
        self.stamp = 0

    @rule(owner=st.sampled_from(OWNERS), row=rows)
    def post(self, owner: str, row: dict[str, Any]) -> None:
        self.stamp += 1
        data = msgpack.packb(row)
        self.set.add(owner, float(self.stamp), data=data)
        self.model[owner] = (float(self.stamp), data)

    @rule(member=st.sampled_from(OWNERS))
    def remove(self, member: str) -> None:
        assert self.set.remove(member) == (self.model.pop(member, None) is not None)

    @rule()
    def merge(self) -> None:
        self.set.merge()

    @rule(owner=st.sampled_from(OWNERS))
    def value(self, owner: str) -> None:
        found = mdss._snapshot.read(self.set.engine, lambda snap: snap.index.get(owner))
        assert found == self.model.get(owner)

    @rule(tag=st.sampled_from(["00:", "01:", "05:", "06:", "82:"]), owner=st.sampled_from(OWNERS))
    def count_below(self, tag: str, owner: str) -> None:
        """Counts below a column's start, below each of a row's keys and ties, and the distinct ties below those."""
        expected = _entries(self.columns, self.model)
        keys = [e[0] for e in expected]
        probes: list[Any] = [(tag,)]
        value = self.model.get(owner)
        if value is not None:
            for key in self.set.engine.ordering.keys(owner, value):
                probes += [key, (key[0],)]

        firsts = [p for p in probes if len(p) == 1]  # dense counts are asked below the first key of a tie

        def read(snap: Any) -> Any:
            return snap.ranking.count_below(probes), mdss._ranking.dense_below(snap.ranking, firsts)

        counts, dense = mdss._snapshot.read(self.set.engine, read)
        assert counts == [bisect_left(keys, p) for p in probes]
        ties = sorted({e[2] for e in expected})
        assert dense == [bisect_left(ties, p[0]) for p in firsts]

    @invariant()
    def score_tree_is_the_rows_keys(self) -> None:
        if not hasattr(self, "set"):
            return
        expected = _entries(self.columns, self.model)

        def read(snap: Any) -> Any:
            return snap.ranking.slice(0, snap.ranking.count)

        members, scores = mdss._snapshot.read(self.set.engine, read)
        assert list(zip(members, scores)) == [(m, s) for _, m, s in expected]

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
    tiebreak = rows_tiebreak(((0, (("xp", "desc"),)),))
    made = mdss.SortedSet.at_keys(Keyspace(store.namespace, "w"), store, "w", tiebreak=tiebreak, order="asc")
    made.add("ann", 1.0, data=msgpack.packb({"xp": 3}))
    again = mdss.SortedSet.at_keys(Keyspace(store.namespace, "w"), store, "w")
    assert again.tiebreak == tiebreak
    with pytest.raises(mdss.SettingsMismatchError):
        mdss.SortedSet.at_keys(
            Keyspace(store.namespace, "w"), store, "w", tiebreak=rows_tiebreak(((0, (("xp", "asc"),)),))
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
    ],
)
def test_malformed_record_columns_are_refused(bad: str) -> None:
    assert not mdss._order.valid_tiebreak(bad)
    with pytest.raises(mdss.InvalidArgumentError):
        mdss._order.Order("asc", bad)
