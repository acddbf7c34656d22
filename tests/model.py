"""The simple model every set is compared against: a dict, sorted on demand."""

from __future__ import annotations

import math

import mdss
from mdss._order import INT_MAX, INT_MIN


class Model:
    def __init__(self, order: str, tiebreak: str = "member") -> None:
        self.order, self.tiebreak = order, tiebreak
        self.scores: dict[str, int | float] = {}

    def entries(self) -> list[mdss.Entry]:
        # Two stable sorts: by member (ties' order), then by score.
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

    def apply(self, op: str, member: str, value: int | float) -> None:
        """Apply one op; raises ValueError where mdss must refuse it (the model stays unchanged)."""
        old = self.scores.get(member)
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
        trial = Model(self.order, self.tiebreak)
        trial.scores = dict(self.scores)
        try:
            for op, member, value in ops:
                trial.apply(op, member, value)
        except ValueError:
            return None
        return trial
