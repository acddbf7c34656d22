"""Rank and page latency as the set grows: N = 10^4 ... 10^7 on one store, with a table and a plot.

    python benchmarks/growth.py [--store memory://] [--max 10000000] [--json benchmarks/results/growth.json]
                                [--plot docs/performance-growth.png]

Each N runs ``mdss bench``'s measurement of mdss (warm node cache, p50/p99
over 2000 random members and offsets) on a fresh set, and of the in-process
``SortedList`` anchor on the same data: how much of the growth any Python
structure pays once the data outgrows the CPU caches.
"""

from __future__ import annotations

import argparse
import json

import mdss
from harness import Workload, bench_mdss, bench_sortedlist


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--store", default="memory://")
    parser.add_argument("--max", type=int, default=10_000_000)
    parser.add_argument("--samples", type=int, default=2000)
    parser.add_argument("--json", default=None)
    parser.add_argument("--plot", default=None)
    args = parser.parse_args()
    rows = []
    n = 10_000
    while n <= args.max:
        store = mdss.open_store(args.store)
        w = Workload(n, args.samples, min(20_000, n), seed=1)
        figures = bench_mdss(store, w, 1000, 8 << 30)
        store.close()
        anchor = bench_sortedlist(w)
        rows.append({"members": n, **figures, "sortedcontainers": anchor})
        print(
            f"{n:>12,}  rank p50 {figures['rank_p50_us']:8.1f} us  p99 {figures['rank_p99_us']:8.1f} us  "
            f"page p50 {figures['page_p50_us']:8.1f} us  p99 {figures['page_p99_us']:8.1f} us  "
            f"SortedList rank p50 {anchor['rank_p50_us']:6.1f} us  page p50 {anchor['page_p50_us']:6.1f} us",
            flush=True,
        )
        del w, anchor
        n *= 10
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"store": args.store.split("://")[0], "rows": rows}, f, indent=1)
    if args.plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6.4, 4))
        sizes = [r["members"] for r in rows]
        for key, label in (
            ("rank_p50_us", "rank p50"),
            ("rank_p99_us", "rank p99"),
            ("page_p50_us", "page of 100 p50"),
            ("page_p99_us", "page of 100 p99"),
        ):
            ax.plot(sizes, [r[key] for r in rows], marker="o", label=label)
        for key, label in (("rank_p50_us", "SortedList rank p50"), ("page_p50_us", "SortedList page p50")):
            ax.plot(sizes, [r["sortedcontainers"][key] for r in rows], marker=".", linestyle="--", label=label)
        ax.set_xscale("log")
        ax.set_xlabel("members")
        ax.set_ylabel("microseconds per call")
        ax.set_ylim(bottom=0)
        ax.set_title(f"mdss on {args.store}: latency as the set grows (warm cache)")
        ax.legend()
        ax.grid(True, alpha=0.3)
        fig.tight_layout()
        fig.savefig(args.plot, dpi=110)


if __name__ == "__main__":
    main()
