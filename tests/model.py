"""The simple model every set is compared against: a dict, sorted on demand."""

from __future__ import annotations

import math

import mdss
from mdss._order import INT_MAX, INT_MIN


class Model:
    def __init__(self, order: str, tiebreak: str = "member", shard_of=None) -> None:
        self.order, self.tiebreak = order, tiebreak
        self.shard_of = shard_of  # a sharded set commits a batch shard by shard, in shard order
        self.scores: dict[str, int | float] = {}
        self.data: dict[str, str | bytes] = {}  # what members carry (add(..., data=), set_data)
        # tiebreak="first": when each member reached its score (a load: -1 for all), and the next moment.
        self.reached: dict[str, int] = {}
        self.clock = 0

    def entries(self) -> list[mdss.Entry]:
        # Two stable sorts: by member (ties' order; by when it was reached, for "first"), then by score.
        if self.tiebreak == "first":
            ranked = sorted(self.scores.items(), key=lambda item: (self.reached[item[0]], item[0]))
        else:
            ranked = sorted(self.scores.items(), key=lambda item: item[0], reverse=self.tiebreak == "member_desc")
        ranked.sort(key=lambda item: item[1], reverse=self.order == "desc")
        return [mdss.Entry(m, s, i + 1) for i, (m, s) in enumerate(ranked)]

    def dense(self) -> list[mdss.Entry]:
        """The entries with dense ranks: 1 + the distinct scores strictly better, counted naively."""
        scores = self.scores.values()
        return [
            mdss.Entry(e.member, e.score, 1 + len({s for s in scores if self.better(s, e.score)}))
            for e in self.entries()
        ]

    def better(self, a: float, b: float) -> bool:
        """Whether score ``a`` ranks strictly before score ``b``."""
        return a > b if self.order == "desc" else a < b

    def with_data(self) -> list[mdss.DataEntry]:
        return [mdss.DataEntry(*e, self.data.get(e.member)) for e in self.entries()]

    def loaded(self, scores: dict[str, int | float]) -> None:
        """A load: these scores, no data, every member reached at once (ties among them by member)."""
        self.scores = {m: (s + 0.0 if isinstance(s, float) else s) for m, s in scores.items()}
        self.data, self.reached = {}, dict.fromkeys(scores, -1)

    def remove(self, member: str) -> bool:
        self.data.pop(member, None)
        self.reached.pop(member, None)
        return self.scores.pop(member, None) is not None

    def apply(self, op: str, member: str, value: int | float, data: str | bytes | None = None) -> None:
        """Apply one op; raises ValueError where mdss must refuse it (the model stays unchanged). ``data`` goes with
        the score when the op takes it (``best`` that keeps a better score keeps the data too)."""
        old = self.scores.get(member)
        if data is not None and (op != "best" or old is None or self.better(value, old)):
            self.data[member] = data
        if op == "set":
            new = value
        elif op == "best":
            new = value if old is None or self.better(value, old) else old
        else:
            new = (0 if old is None else old) + value
            if isinstance(new, float) and math.isnan(new):
                raise ValueError("nan")
            if isinstance(new, int) and not INT_MIN <= new <= INT_MAX:
                raise ValueError("overflow")
        self.scores[member] = new + 0.0 if isinstance(new, float) else new

    def tried(self, ops) -> Model | None:
        """A copy with the batch ``ops`` (``(op, member, value)``) applied; ``None`` where mdss must refuse it."""
        trial = Model(self.order, self.tiebreak, self.shard_of)
        trial.scores, trial.data = dict(self.scores), dict(self.data)
        trial.reached, trial.clock = dict(self.reached), self.clock
        try:
            for op, member, value, *data in ops:
                trial.apply(op, member, value, *data)
        except ValueError:
            return None
        # One commit: each member whose score it changes reaches it then, in the order the batch first names them
        # (sharded: one commit per shard, in shard order).
        named = list(dict.fromkeys(op[1] for op in ops))
        if self.shard_of is not None:
            named.sort(key=self.shard_of)
        for member in named:
            old, new = self.scores.get(member), trial.scores.get(member)
            if new is not None and (old is None or old != new):
                trial.reached[member], trial.clock = trial.clock, trial.clock + 1
        return trial
