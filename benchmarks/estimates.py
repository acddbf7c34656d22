"""Rank estimates against the exact rank and the seeds' approximations, on one set, in one run:

- ``exact``: ``rank_of_score`` with only manifests cached (it reads the head and one entry set);
- ``estimate``: ``estimate_rank(score=...)``, from the manifests (the head only), with sure bounds;
- ``predictor``: seed 000's prediction curve, every k-th score of the set (1000 samples), interpolated;
- ``buckets-5``, ``buckets-100``: seed 003's equal-width score buckets with counts, interpolated inside.

Scores are the harness's tie-heavy Pareto points (most players score little, a few a lot) and, as in seed
003's test, integers spread uniformly; the seeds' methods assume a dense, smooth distribution.

The predictor and buckets are built from the same data in the same run and held in process (the seeds
keep them in memcached: one more round trip each in practice). Every method estimates the competition rank
of the scores of sampled members, and of the top 500 members. Error is |estimate - exact| / N.

    python benchmarks/estimates.py --store memory:// --members 1000000
    python benchmarks/estimates.py --store redis://127.0.0.1:6379/0 --members 1000000
    python benchmarks/estimates.py --store memory:// --members 1000000 --ten-million  # also 10M: minutes, GBs
"""

from __future__ import annotations

import argparse
import math
import random
import time
from bisect import bisect_left
from collections.abc import Callable, Sequence
from typing import Any

import mdss
from harness import synthetic_scores
from mdss._tree import Leaf

TOP = 500


class Predictor:
    """Seed 000: the score at ranks 1, 1 + k, 1 + 2k, ... (best first); a score's rank interpolated between
    the two samples around it."""

    def __init__(self, best_first: Sequence[int], samples: int) -> None:
        skip = max(math.ceil(len(best_first) / samples), 1)
        self.ranks = list(range(1, len(best_first) + 1, skip))
        self.negated = [-best_first[r - 1] for r in self.ranks]  # ascending, for bisect
        self.n = len(best_first)

    def __call__(self, score: float) -> float:
        i = bisect_left(self.negated, -score)  # samples strictly better: 0 .. i-1
        if i == 0:
            return 1
        if i == len(self.ranks):
            return self.ranks[-1] + 1 if -self.negated[-1] > score else self.ranks[-1]
        r0, s0, r1, s1 = self.ranks[i - 1], -self.negated[i - 1], self.ranks[i], -self.negated[i]
        # the sample at r1 has score s1 <= score: the rank is at most r1; interpolate between the two
        return r0 + 1 + (s0 - score) / (s0 - s1) * (r1 - r0 - 1) if s0 != s1 else r1


class Buckets:
    """Seed 003: ``count`` equal-width score buckets over [min, max] with their counts and upper-most ranks;
    a score's rank interpolated linearly inside its bucket."""

    def __init__(self, best_first: Sequence[int], count: int) -> None:
        self.low, self.high = best_first[-1], best_first[0]
        self.width = (self.high - self.low) / count or 1
        counts = [0] * count
        for score in best_first:
            counts[min(int((score - self.low) / self.width), count - 1)] += 1
        self.counts = counts
        self.upper = [0] * count  # the best rank in each bucket: 1 + everyone in the buckets above
        above = 0
        for b in range(count - 1, -1, -1):
            self.upper[b] = above + 1
            above += counts[b]

    def __call__(self, score: float) -> float:
        b = min(max(int((score - self.low) / self.width), 0), len(self.counts) - 1)
        top = self.low + (b + 1) * self.width  # the bucket's best score
        return self.upper[b] + max(top - score, 0) / self.width * self.counts[b]


def errors(estimates: Sequence[float], exact: Sequence[int], n: int) -> dict[str, float]:
    """Mean, p99 and max of |estimate - exact| / N."""
    gaps = sorted(abs(e - x) / n for e, x in zip(estimates, exact))
    return {"mean": sum(gaps) / len(gaps), "p99": gaps[min(int(0.99 * len(gaps)), len(gaps) - 1)], "max": gaps[-1]}


def measure(
    call: Callable[[Any], float], args: Sequence[Any], store: mdss.Store | None, before_each: Callable[[], None]
) -> dict[str, float]:
    """Run ``call`` over ``args`` (after ``before_each``): p50 microseconds, round trips and bytes read per call."""
    times, calls, read = [], 0, 0
    for arg in args:
        before_each()
        counters = store.stats.snapshot() if store else None
        start = time.perf_counter_ns()
        call(arg)
        times.append(time.perf_counter_ns() - start)
        if store:
            spent = store.stats.since(counters)  # type: ignore[arg-type]
            calls, read = calls + spent["calls"], read + spent["bytes_read"]
    times.sort()
    return {"p50_us": times[len(times) // 2] / 1000, "trips": calls / len(args), "bytes": read / len(args)}


def uniform_scores(n: int, seed: int) -> dict[str, int]:
    """``n`` players with integer points spread evenly over [0, 10**6): the Datastore article's test case."""
    rng = random.Random(seed)
    return {f"player-{i:08d}": rng.randrange(10**6) for i in range(n)}


DISTRIBUTIONS = {"pareto": synthetic_scores, "uniform": uniform_scores}


def run(url: str, n: int, distribution: str, samples: int, chunk: int, seed: int) -> list[dict[str, Any]]:
    scores = DISTRIBUTIONS[distribution](n, seed)
    best_first = sorted(scores.values(), reverse=True)
    negated = [-s for s in best_first]
    rng = random.Random(seed + 1)
    members = list(scores)
    queries = [scores[rng.choice(members)] for _ in range(samples)]
    top = best_first[:TOP]

    def exact_rank(score: float) -> int:
        return 1 + bisect_left(negated, -score)  # members strictly better, plus one

    with mdss.open_store(url) as store:
        name = f"estimates-{n}"
        start = time.perf_counter()
        mdss.SortedSet.load(store, name, scores, chunk_size=chunk, replace=True)
        print(f"loaded {n:,} members on {url} in {time.perf_counter() - start:.1f} s")
        board = mdss.SortedSet(store, name)  # a fresh object: nothing cached
        board.node_keys()  # reads every manifest of both trees, no entry set
        manifests = set(board.engines[0].cache._nodes)

        def manifests_only() -> None:
            for key in [k for k, (node, _) in board.engines[0].cache._nodes.items() if isinstance(node, Leaf)]:
                board.engines[0].cache.discard(key)

        def nothing() -> None:
            pass

        methods: list[tuple[str, Callable[[float], float], mdss.Store | None, Callable[[], None]]] = [
            ("exact (rank_of_score)", board.rank_of_score, store, manifests_only),
            ("estimate_rank", lambda s: board.estimate_rank(score=s).rank, store, nothing),  # type: ignore[union-attr]
            ("predictor, 1000 samples (seed 000)", Predictor(best_first, 1000), None, nothing),
            ("buckets, 5 (seed 003)", Buckets(best_first, 5), None, nothing),
            ("buckets, 100 (seed 003)", Buckets(best_first, 100), None, nothing),
        ]
        exact, exact_top = list(map(exact_rank, queries)), list(map(exact_rank, top))
        widths = [(e.high - e.low) for e in (board.estimate_rank(score=s) for s in queries)]  # type: ignore[union-attr]
        rows = []
        for label, call, counted, before_each in methods:
            row: dict[str, Any] = {"method": label, "members": n, "scores": distribution}
            row.update(measure(call, queries, counted, before_each))
            if counted is None:
                row["trips"] = row["bytes"] = 0.0
            row["error"] = errors([call(s) for s in queries], exact, n)
            top_estimates = [call(s) for s in top]
            row["top"] = errors(top_estimates, exact_top, n)
            row["top_max_ranks"] = max(abs(e - x) for e, x in zip(top_estimates, exact_top))
            row["bound"] = max(widths) if label == "estimate_rank" else None
            rows.append(row)
        assert set(board.engines[0].cache._nodes) >= manifests
        board.drop()
    return rows


def table(rows: list[dict[str, Any]], url: str) -> str:
    lines = [
        "| members | scores | method | round trips | p50 µs | bytes read | mean err | p99 err | max err "
        "| top-500 mean err | top-500 max err | top-500 max (ranks) | sure bound (ranks) |",
        "| ---: | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]

    def pct(x: float) -> str:
        return "0" if x == 0 else f"{100 * x:.4f}%"

    for r in rows:
        bound = "-" if r["bound"] is None else f"{r['bound']:,}"
        lines.append(
            f"| {r['members']:,} | {r['scores']} | {r['method']} | {r['trips']:.2f} | {r['p50_us']:,.1f} "
            f"| {r['bytes']:,.0f} "
            f"| {pct(r['error']['mean'])} | {pct(r['error']['p99'])} | {pct(r['error']['max'])} "
            f"| {pct(r['top']['mean'])} | {pct(r['top']['max'])} | {r['top_max_ranks']:,.0f} "
            f"| {bound} |"
        )
    return f"{url}, errors as |estimate - exact| / N\n\n" + "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", default="memory://")
    parser.add_argument("--members", type=int, default=1_000_000)
    parser.add_argument("--ten-million", action="store_true", help="also run 10,000,000 members (minutes, GBs)")
    parser.add_argument("--scores", choices=[*DISTRIBUTIONS, "both"], default="both")
    parser.add_argument("--samples", type=int, default=2000)
    parser.add_argument("--chunk-size", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    rows = []
    for n in [args.members, *([10_000_000] if args.ten_million and args.members != 10_000_000 else [])]:
        for distribution in DISTRIBUTIONS if args.scores == "both" else [args.scores]:
            rows += run(args.store, n, distribution, args.samples, args.chunk_size, args.seed)
    print(table(rows, args.store))


if __name__ == "__main__":
    main()
