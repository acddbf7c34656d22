"""Ranks with bounded staleness against a native ZREVRANK, on one Redis, in one run.

    python benchmarks/stale_reads.py [--members 1000000] [--samples 5000] [--seconds 2] [--rounds 3]
        [--bound 1] [--posts 100] [--redis URL] [--json FILE]

Loads the harness's workload (benchmarks/harness.py: tie-heavy integer points) into an mdss set and into a native
sorted set on the same redis-server (one of our own on loopback unless ``--redis``). A reader opens the set with
``max_staleness=--bound`` and a node cache large enough for the set, and reads every sampled member once. Meanwhile
another process posts ``--posts`` single updates per second to the set (a live board: heads move, logs grow and
merge, so a read past the bound finds new nodes).

Then ``--rounds`` times, in turn, for ``--seconds`` each: ``ZREVRANK`` of the sampled members (a round trip each, as
the agoragames library and redis-py users do), ``rank(m)`` within the bound, and ``rank(m, max_staleness=0)`` (a
fresh read). Rates count every call in the window, the refreshes past the bound included; store calls per read are
the store's own counters over the window. The ratio is the median round's rate over ZREVRANK's median round.
"""

from __future__ import annotations

import argparse
import itertools
import json
import multiprocessing
import random
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import harness
import mdss


def _poster(url: str, name: str, members: list[str], rate: float, stop: Any) -> None:
    """Another process: ``rate`` single updates per second to the set until ``stop`` is set."""
    sset = mdss.SortedSet(mdss.open_store(url), name)
    rng = random.Random(7)
    start, n = time.monotonic(), 0
    while not stop.is_set():
        sset.add(rng.choice(members), rng.randrange(10_000))
        n += 1
        pause = start + n / rate - time.monotonic()
        if pause > 0:
            time.sleep(pause)


def _window(call: Callable[[str], Any], members: list[str], seconds: float, store: Any) -> dict[str, float]:
    """Calls of ``call`` over ``members`` (cycled) for ``seconds``: their rate and the store calls per call."""
    calls_before = None if store is None else store.stats.calls
    n, cycle = 0, itertools.cycle(members)
    start = time.perf_counter()
    deadline = start + seconds
    while True:
        for _ in range(100):
            call(next(cycle))
        n += 100
        now = time.perf_counter()
        if now >= deadline:
            break
    out = {"per_s": n / (now - start)}
    if store is not None:
        out["store_calls"] = (store.stats.calls - calls_before) / n
    return out


def run(args: argparse.Namespace, progress: Callable[[str], None]) -> dict[str, Any]:
    scores = harness.synthetic_scores(args.members, args.seed)
    members = random.Random(args.seed + 1).sample(list(scores), args.samples)
    name, zkey = f"stale-{time.monotonic_ns()}", f"zset-{time.monotonic_ns()}"
    with harness.redis_url(args.redis) as url:
        store = mdss.open_store(url)
        progress(f"loading {args.members:,} members into mdss and into a native sorted set ...")
        mdss.SortedSet.load(store, name, scores)
        client = store.client  # the store's own redis-py client: same connection settings
        pairs = list(scores.items())
        for i in range(0, len(pairs), 10_000):
            pipe = client.pipeline(transaction=False)
            pipe.zadd(zkey, dict(pairs[i : i + 10_000]))
            pipe.execute()
        reader = mdss.SortedSet(store, name, max_staleness=args.bound, cache_bytes=1 << 31)
        for m in members:
            reader.rank(m)
        stop = multiprocessing.Event()
        poster = multiprocessing.Process(target=_poster, args=(url, name, list(scores), args.posts, stop))
        if args.posts:
            poster.start()
        time.sleep(1)
        sides: dict[str, Callable[[str], Any]] = {
            "zrevrank": lambda m: client.zrevrank(zkey, m),
            "stale": reader.rank,
            "fresh": lambda m: reader.rank(m, max_staleness=0),
        }
        rounds: dict[str, list[dict[str, float]]] = {side: [] for side in sides}
        try:
            for r in range(args.rounds):
                for side, call in sides.items():
                    rounds[side].append(_window(call, members, args.seconds, None if side == "zrevrank" else store))
                progress(f"round {r + 1}: " + ", ".join(f"{side} {rounds[side][-1]['per_s']:,.0f}/s" for side in sides))
        finally:
            stop.set()
            if args.posts:
                poster.join()
    median = {side: statistics.median(w["per_s"] for w in rounds[side]) for side in sides}
    return {
        "members": args.members,
        "bound_s": args.bound,
        "posts_per_s": args.posts,
        "rounds": rounds,
        "median_per_s": median,
        "stale_over_zrevrank": median["stale"] / median["zrevrank"],
        "fresh_over_zrevrank": median["fresh"] / median["zrevrank"],
        "stale_store_calls_per_read": statistics.median(w["store_calls"] for w in rounds["stale"]),
        "fresh_store_calls_per_read": statistics.median(w["store_calls"] for w in rounds["fresh"]),
    }


def table(result: dict[str, Any]) -> Iterator[str]:
    m = result["median_per_s"]
    yield (
        f"{result['members']:,} members on one Redis, another process posting {result['posts_per_s']} updates/s; "
        f"medians of {len(result['rounds']['stale'])} interleaved rounds"
    )
    yield f"{'read':38} {'per s':>10} {'store calls/read':>17} {'/ ZREVRANK':>11}"
    yield f"{'ZREVRANK (redis-py, one round trip)':38} {m['zrevrank']:>10,.0f} {'':>17} {1:>10.2f}x"
    yield (
        f"{'rank, max_staleness=' + format(result['bound_s'], 'g'):38} {m['stale']:>10,.0f} "
        f"{result['stale_store_calls_per_read']:>17.4f} {result['stale_over_zrevrank']:>10.2f}x"
    )
    yield (
        f"{'rank, fresh (max_staleness=0)':38} {m['fresh']:>10,.0f} "
        f"{result['fresh_store_calls_per_read']:>17.4f} {result['fresh_over_zrevrank']:>10.2f}x"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--members", type=int, default=1_000_000)
    parser.add_argument("--samples", type=int, default=5000)
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--bound", type=float, default=1.0)
    parser.add_argument("--posts", type=float, default=100.0, help="updates per second by another process (0: none)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--redis", help="a Redis URL (default: a redis-server of our own on loopback)")
    parser.add_argument("--json", help="write the result here")
    args = parser.parse_args()
    result = run(args, lambda line: print(line, file=sys.stderr, flush=True))
    for line in table(result):
        print(line)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
