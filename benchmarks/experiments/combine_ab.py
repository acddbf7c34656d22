"""The runs of docs/performance.md ("Many writers", host-local combining): writers.py's process rows for
1 and 4 processes on one store URL, plus each process's leads, callers per lead and waits.

Apply combine.patch to a worktree first (see store_update_ab.sh for how), then, from its root:
    flock -x /tmp/mdss-bench.lock env MDSS_COMBINE=1 MDSS_FIFO=1 python benchmarks/experiments/combine_ab.py URL
(without MDSS_COMBINE: plain commits; without MDSS_FIFO: waiters poll with sleeps).
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import mdss  # noqa: E402
import writers  # noqa: E402

_process = writers._process


def _counted(*args):  # type: ignore[no-untyped-def]
    try:
        _process(*args)
    finally:
        if os.environ.get("MDSS_COMBINE"):
            import mdss._combine as combine

            leads, callers, waits = combine.STATS
            per = callers / max(leads, 1)
            print(f"  process {os.getpid()}: {leads} leads, {per:.2f} callers per lead, {waits} waits")


writers._process = _counted

if __name__ == "__main__":
    url = sys.argv[1]
    mdss.SortedSet.load(mdss.open_store(url), "bench", {f"p{i}": i for i in range(100_000)}, replace=True)
    for processes in (1, 4, 4):
        row = writers._processes(url, processes, 5, 100_000)
        print(
            f"{processes} processes: {row['ops_per_s']:,.0f} updates/s, CPU {row['cpu_us_per_op']:.0f} µs/update, "
            f"conflicts {row['conflicts_per_update']:.3f}/update",
            flush=True,
        )
