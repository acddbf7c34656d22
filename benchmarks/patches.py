"""Bytes written per update once patched entry sets and manifest deltas are at their steady sizes, against the ratio of
the log's length to the number of entry sets: with patches and deltas, with patches only, and with neither (every
touched node written whole, as before patches).

    python benchmarks/patches.py [--members 1000000] [--limits 21000,1000,100] [--variants deltas,patches,whole]
                                 [--dir /work/tmp] [--json benchmarks/results/patches.json]

A merge's cost per update depends on how many entries it changes per entry set it touches: about ``log limit / entry
sets``. A set of 10^8 members merges 100,000 updates (``LOG_MAX``) into 10^5 entry sets per tree; a set of 10^6 with
``log_limit=1,000`` does the same per entry set, and reaches the patches' steady sizes in minutes instead of hours
(each entry set takes ``patch_most`` changes, 44 of 1,000, before it is written whole). ``log_limit=100`` is 10^9's
ratio for entry sets; for the manifests above them it takes 10^7 members with ``log_limit=1,000``, where, as at 10^9,
a merge changes a tenth of the children of each manifest of height 1 and the root is a small share (at 10^6 the root
is a manifest of height 1, rewritten whole by every merge). For each limit, in a fresh process on a SQLite file
holding ``--members`` members loaded as ``benchmarks/massive.py`` loads them: aging by batches of random updates
(``add_many``, into the log like single ones) over ``AGE`` patch lifetimes (the merges from an entry set's whole write
to its next), then single ``add`` calls through a whole lifetime (at least ``MERGES`` merges: a patch's cost grows
over its lifetime, and entry sets patched together are written whole together, so a shorter window sees one phase of
that cycle), with bytes written and round trips per update from the store's counters; the same without deltas
(``mdss._merge.deltas_fit`` at 0) and without patches either (``mdss._writer.patch_most`` at -1 as well). Then, in
another fresh process, ``massive.py``'s reads (rank, page, around; cold and warm p50) of the set the updates left.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import time
from typing import Any

import massive
import mdss
from mdss import _merge, _writer

AGE = 1.5
MERGES = 3


def _run(path: str, n: int, limit: int, variant: str, out: Any) -> None:
    patches = variant != "whole"
    if variant != "deltas":
        _merge.deltas_fit = lambda chunk, limit: 0
    if not patches:
        _writer.patch_most = lambda chunk: -1
    store = mdss.open_store(f"sqlite:///{path}")
    mdss.SortedSet.load(store, "s", massive._pairs(n))
    sset = mdss.SortedSet(store, "s", log_limit=limit)
    per_merge = limit / (n / sset.chunk_size)
    lifetime = math.ceil(_writer.patch_most(sset.chunk_size) / per_merge)  # merges from one whole write to the next
    aged = math.ceil(AGE * lifetime) if patches else 2
    measured = max(MERGES, lifetime)
    rng = random.Random(3)
    batch = min(1000, limit // 2)  # a batch of log_limit or more would go straight into the trees, not merge
    t = time.perf_counter()
    while sset.merges < aged:
        sset.add_many([(f"m{rng.randrange(n):09d}", rng.randrange(10 * n)) for _ in range(batch)])
    aging_s = time.perf_counter() - t
    before, count = store.stats.snapshot(), 0
    while count < 2000 or sset.merges < aged + measured:
        for _ in range(100):
            sset.add(f"m{rng.randrange(n):09d}", rng.randrange(10 * n))
        count += 100
    spent = store.stats.since(before)
    out.put(
        {
            "log_limit": limit,
            "variant": variant,
            "patches": patches,
            "changes_per_entry_set_per_merge": per_merge,
            "aged_merges": aged,
            "aging_s": aging_s,
            "updates": count,
            "merges": sset.merges - aged,
            "bytes_written_per_update": spent["bytes_written"] / count,
            "round_trips_per_update": spent["calls"] / count,
        }
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--members", type=int, default=1_000_000)
    parser.add_argument("--limits", default="21000,1000,100")
    parser.add_argument("--variants", default="deltas,patches,whole", help="of deltas, patches, whole")
    parser.add_argument("--dir", default=".")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    rows = []
    for limit in map(int, args.limits.split(",")):
        for variant in args.variants.split(","):
            path = os.path.join(args.dir, f"patches-{limit}-{variant}.db")
            try:
                row = massive._in_child(_run, path, args.members, limit, variant)
                row["reads"] = massive._in_child(massive._reads, path, args.members)
            finally:
                for suffix in ("", "-wal", "-shm"):
                    if os.path.exists(path + suffix):
                        os.remove(path + suffix)
            rows.append(row)
            print(
                f"log limit {limit:>6,} ({row['changes_per_entry_set_per_merge']:.2f} changes per entry set and "
                f"merge), {variant}: {row['bytes_written_per_update']:,.0f} B and "
                f"{row['round_trips_per_update']:.2f} round trips per update over {row['merges']} merges, after "
                f"{row['aged_merges']} merges of aging; then cold/warm p50 "
                + ", ".join(f"{k} {v['cold_p50_us']:,.0f}/{v['warm_p50_us']:,.0f} us" for k, v in row["reads"].items()),
                flush=True,
            )
            if args.json:
                with open(args.json, "w") as f:
                    json.dump({"members": args.members, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
