"""What dense ranks cost: reads against ordinal and competition ranks, writes and loads against the same code with
the distinct counts turned off (format-2 manifests), the update log, and a set stored before format 3.

    python benchmarks/dense.py [--store memory://] [--members 1000000] [--log 2000] [--commits 100]
        [--json out.json]

All in one run, so that the figures are ratios to anchors measured beside them:

- ``reads``: per call, every node cached, empty log: ``rank`` and ``range(offset, 100)`` by ``ties``
  (CPU time, p50 of 2,000 calls); round trips and bytes of a ``rank`` with only the manifests cached.
- ``log``: ``--log`` single-member updates appended to the log (random members, each raised by 1-49
  points); then the first dense rank (it resolves every logged score's tie group in its descent), the next
  ones, and one after one more append.
- ``writes``: CPU and bytes written per direct commit of 100 updates (``log_limit=0``), and a load, with
  the distinct counts on and off (off: ``Writer.dense`` forced False, what format 2 wrote).
- ``legacy``: a set loaded with the counts off; its first dense rank computes them from the entry sets.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from typing import Any

sys.path.insert(0, os.path.dirname(__file__))

import mdss  # noqa: E402
from harness import synthetic_scores  # noqa: E402
from mdss import _writer  # noqa: E402
from mdss._tree import Leaf  # noqa: E402


@contextmanager
def counts_off() -> Iterator[None]:
    """Writers that record no distinct counts: what format 2 wrote."""
    start = _writer.Writer._start

    def plain(self: Any, tree: Any) -> None:
        start(self, tree)
        self.dense = False

    _writer.Writer._start = plain  # type: ignore[method-assign]
    try:
        yield
    finally:
        _writer.Writer._start = start  # type: ignore[method-assign]


def cpu_us(call: Callable[[], Any], repeat: int) -> float:
    """p50 of ``call``'s thread CPU time, in microseconds."""
    samples = []
    for _ in range(repeat):
        start = time.thread_time_ns()
        call()
        samples.append(time.thread_time_ns() - start)
    samples.sort()
    return samples[len(samples) // 2] / 1000


def cost(store: mdss.Store, call: Callable[[], Any]) -> dict[str, float]:
    before = store.stats.snapshot()
    start = time.thread_time_ns()
    call()
    cpu = (time.thread_time_ns() - start) / 1000
    found = store.stats.since(before)
    return {"calls": found["calls"], "bytes_read": found["bytes_read"], "cpu_us": round(cpu)}


def drop_leaves(board: mdss.SortedSet) -> None:
    for key in [k for k, (node, _) in board.engines[0].cache._nodes.items() if isinstance(node, Leaf)]:
        board.engines[0].cache.discard(key)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--store", default="memory://")
    parser.add_argument("--members", type=int, default=1_000_000)
    parser.add_argument("--log", type=int, default=2_000, help="updates in the log for the 'log' figures")
    parser.add_argument("--commits", type=int, default=100, help="commits of 100 updates, per mode")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    rng = random.Random(14)
    store = mdss.open_store(args.store)
    pairs = synthetic_scores(args.members, 14)
    names = list(pairs)
    out: dict[str, Any] = {"members": args.members, "store": args.store, "distinct_scores": len(set(pairs.values()))}

    # -- loads and commits, counts on and off: commits alternate, the same batch to each ---------------------
    writes: dict[str, Any] = {}
    boards, samples, written = {}, {"off": [], "on": []}, {"off": 0, "on": 0}
    for mode in ("off", "on"):
        with counts_off() if mode == "off" else nullcontext():
            start = time.process_time()
            boards[mode] = mdss.SortedSet.load(store, f"dense-{mode}", pairs, replace=True, log_limit=0, gc_grace=0)
            load_s = time.process_time() - start
        tree = boards[mode]._snapshot().score_tree
        keys = [boards[mode]._keys.node(path[-1]) for height, path, _ in tree.walk() if height]
        writes[mode] = {
            "load_cpu_s": round(load_s, 2),
            "score_tree_manifest_bytes": sum(len(store.get(k).value) for k in keys),
        }
    for _ in range(args.commits):
        batch = {rng.choice(names): rng.randrange(10_000) for _ in range(100)}
        for mode in ("off", "on"):
            with counts_off() if mode == "off" else nullcontext():
                before = store.stats.snapshot()
                start_ns = time.thread_time_ns()
                boards[mode].add_many(batch)
                samples[mode].append(time.thread_time_ns() - start_ns)
                written[mode] += store.stats.since(before)["bytes_written"]
    for mode in ("off", "on"):
        ordered = sorted(samples[mode])
        writes[mode]["commit_of_100_cpu_us_p50"] = ordered[len(ordered) // 2] // 1000
        writes[mode]["bytes_written_per_commit"] = written[mode] // args.commits
        boards[mode].drop()
    for what in ("load_cpu_s", "commit_of_100_cpu_us_p50", "bytes_written_per_commit", "score_tree_manifest_bytes"):
        writes[f"ratio_{what}"] = round(writes["on"][what] / writes["off"][what], 3)
    out["writes"] = writes

    # -- reads, empty log ----------------------------------------------------------------------------------------
    board = mdss.SortedSet.load(store, "dense-reads", pairs, replace=True, cache_bytes=4 << 30)
    sample = [rng.choice(names) for _ in range(2000)]
    offsets = [rng.randrange(args.members - 100) for _ in range(2000)]
    for member in sample:  # every node these calls need, cached
        board.rank(member, ties="dense")
    for offset in offsets:
        board.range(offset, 100, ties="dense")
    reads: dict[str, Any] = {}
    for ties in ("ordinal", "competition", "dense"):
        members, starts = iter(sample), iter(offsets)
        reads[f"rank_{ties}_cpu_us"] = cpu_us(lambda t=ties, m=members: board.rank(next(m), ties=t), 2000)
        reads[f"range100_{ties}_cpu_us"] = cpu_us(lambda t=ties, o=starts: board.range(next(o), 100, ties=t), 2000)
    fresh = mdss.SortedSet(store, "dense-reads")
    fresh.scores([e.member for e in fresh])
    for ties in ("competition", "dense"):
        drop_leaves(fresh)
        reads[f"rank_{ties}_manifests_cached"] = cost(store, lambda t=ties: fresh.rank(sample[0], ties=t))
    out["reads"] = reads

    # -- over the update log -------------------------------------------------------------------------------------
    logged = mdss.SortedSet(store, "dense-reads", log_limit=10**6, cache_bytes=4 << 30)
    logged.scores(sample)
    for member in sample:
        logged.rank(member, ties="dense")
    for _ in range(args.log):  # as a game posts: scores raised a little, mostly onto scores that others hold
        member = rng.choice(names)
        logged.add(member, pairs[member] + rng.randrange(1, 50))
    log: dict[str, Any] = {"entries": logged.info()["log_entries"]}
    log["first_dense_rank"] = cost(store, lambda: logged.rank(sample[1], ties="dense"))
    log["next_dense_rank"] = cost(store, lambda: logged.rank(sample[2], ties="dense"))
    for ties in ("competition", "dense"):
        members = iter(sample)
        log[f"rank_{ties}_cpu_us"] = cpu_us(lambda t=ties, m=members: logged.rank(next(m), ties=t), 2000)
    logged.add(rng.choice(names), 5)
    log["after_one_append"] = cost(store, lambda: logged.rank(sample[3], ties="dense"))
    out["log"] = log
    logged.merge()

    # -- a set stored before format 3 ----------------------------------------------------------------------------
    with counts_off():
        mdss.SortedSet.load(store, "dense-legacy", pairs, replace=True)
    legacy = mdss.SortedSet(store, "dense-legacy", cache_bytes=4 << 30)
    worst = min(pairs, key=pairs.__getitem__)  # the last entry: every entry set before it is read once
    out["legacy"] = {
        "first_dense_rank_of_the_last": cost(store, lambda: legacy.rank(worst, ties="dense")),
        "next_dense_rank": cost(store, lambda: legacy.rank(sample[-2], ties="dense")),
    }
    for name in ("dense-reads", "dense-legacy"):
        mdss.SortedSet(store, name).drop()

    print(json.dumps(out, indent=1))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
