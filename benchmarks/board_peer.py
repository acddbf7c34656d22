"""mdss.Leaderboard beside the agoragames ``leaderboard`` library (plain Redis sorted sets) on one Redis.

    python benchmarks/board_peer.py [--owners 1000000] [--rounds 3] [--block 200] [--redis URL] [--json FILE]
                                    [--memory-mb M] [--cache-mb M] [--warm]

Both sides hold the same owners (``player-NNNNNNNN``, integer points) in one descending column: the peer in one
sorted set, mdss in a board with one column and the ``all`` window. Each side is bulk-loaded once (the peer's
``rank_members``, pipelined in chunks of 10,000; ``Leaderboard.load``, with its default ``memory_bytes`` unless
``--memory-mb``: past about 125,000 rows per 256 MiB it spills to SQLite), and each side's Redis memory is read with
``MEMORY USAGE`` of all its keys. With ``--warm``, mdss then reads its board's nodes once (``Leaderboard.warm``,
untimed), so that the rounds see the steady state of a process whose cache (``--cache-mb``, which must hold them)
holds the window, as Redis holds the peer's; the growth of the process' peak memory is reported. Then, ``--rounds``
times, every operation runs a block of ``--block`` calls on one
side, then the same calls on the other (which side goes first alternates), so that the machine's other load falls on
both alike: single posts (the same owners and values on both), rank, score and rank, 25 around an owner, a page of 25
by rank at a random page, percentile, count. Posts are also timed for mdss with 3 columns in 3 windows (``all``,
``week``, ``day``) beside the peer writing the same 9 sorted sets in one pipeline. Ratios are mdss / peer (rates) or
peer / mdss (latencies): above 1 means mdss is faster. A redis-server is started on loopback unless ``--redis``.

The peer (PyPI ``leaderboard`` 3.7.0) calls ``zadd(name, member, score)``, which redis-py 3 and later refuse; its two
write methods are replaced here by the same commands in today's call form (one pipeline of ZADD, and HSET for member
data), and nothing else is changed.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import redis

import mdss
from harness import redis_url

# benchmarks/leaderboard.py, beside this script, would shadow the peer's package of the same name.
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != os.path.dirname(os.path.abspath(__file__))]
from leaderboard.leaderboard import Leaderboard as Peer  # noqa: E402

PAGE = 25


def _rank_member_in(self: Peer, name: str, member: str, score: float, member_data: str | None = None) -> None:
    pipeline = self.redis_connection.pipeline()
    pipeline.zadd(name, {member: score})
    if member_data:
        pipeline.hset(self._member_data_key(name), member, member_data)
    pipeline.execute()


def _rank_members_in(self: Peer, name: str, members_and_scores: list[Any]) -> None:
    pipeline = self.redis_connection.pipeline()
    for i in range(0, len(members_and_scores), 2):
        pipeline.zadd(name, {members_and_scores[i]: members_and_scores[i + 1]})
    pipeline.execute()


Peer.rank_member_in = _rank_member_in
Peer.rank_members_in = _rank_members_in


def _memory(client: redis.Redis, pattern: str) -> int:
    """``MEMORY USAGE`` (exact: ``SAMPLES 0``) summed over the keys matching ``pattern``."""
    keys = list(client.scan_iter(match=pattern, count=10_000))
    total = 0
    for start in range(0, len(keys), 10_000):
        pipe = client.pipeline(transaction=False)
        for key in keys[start : start + 10_000]:
            pipe.memory_usage(key, samples=0)
        total += sum(v or 0 for v in pipe.execute())
    return total


def _p50_us(samples: list[int]) -> float:
    return statistics.median(samples) / 1000 if samples else float("nan")


def _block(call: Callable[[Any], Any], args: list[Any], into: list[int]) -> None:
    for arg in args:
        t = time.perf_counter_ns()
        call(arg)
        into.append(time.perf_counter_ns() - t)


def run(
    url: str,
    owners: int,
    rounds: int,
    block: int,
    seed: int,
    options: dict[str, Any],
    memory_mb: int | None = None,
    warm: bool = False,
) -> dict[str, Any]:
    rng = random.Random(seed)
    names = [f"player-{i:08d}" for i in range(owners)]
    points = {n: rng.randrange(10 * owners) for n in names}
    client = redis.Redis.from_url(url)
    client.flushdb()
    host, port = client.connection_pool.connection_kwargs["host"], client.connection_pool.connection_kwargs["port"]
    db = client.connection_pool.connection_kwargs.get("db", 0)
    peer = Peer("peer", host=host, port=port, db=db)
    store = mdss.open_store(url, namespace="mdss")
    board = mdss.Leaderboard(store, "game", columns={"xp": "desc"}, **options)
    result: dict[str, Any] = {"owners": owners, "rounds": rounds, "block": block}

    print(f"loading {owners:,} owners into each side", file=sys.stderr)
    flat = [x for n in names for x in (n, points[n])]
    t = time.perf_counter()
    for start in range(0, len(flat), 20_000):
        peer.rank_members(flat[start : start + 20_000])
    peer_load = owners / (time.perf_counter() - t)
    t = time.perf_counter()
    memory = {} if memory_mb is None else {"memory_bytes": memory_mb << 20}
    board.load(((n, {"xp": points[n]}) for n in names), **memory)
    mdss_load = owners / (time.perf_counter() - t)
    result["load"] = {"mdss_per_s": mdss_load, "peer_per_s": peer_load, "ratio": mdss_load / peer_load}
    memory = {"mdss": _memory(client, "mdss*") / owners, "peer": _memory(client, "peer*") / owners}
    result["memory_after_load"] = {**memory, "ratio": memory["mdss"] / memory["peer"]}
    if warm:  # the steady state of a process whose cache holds the window (Redis holds the peer's)
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        t = time.perf_counter()
        read = board.warm()
        grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss) * 1024 / owners
        result["warm"] = {"seconds": time.perf_counter() - t, "entry_sets": read, "client_bytes_per_owner": grown}
        print(f"warmed {read:,} entry sets in {time.perf_counter() - t:.1f} s, +{grown:,.0f} B/owner", file=sys.stderr)

    wide = mdss.Leaderboard(
        store, "wide", columns={"xp": "desc", "kills": "desc", "ms": "asc"}, windows=["all", "week", "day"], **options
    )

    def wide_post(arg: tuple[str, int]) -> None:
        wide.post(arg[0], {"xp": arg[1], "kills": arg[1] % 97, "ms": arg[1] % 1013})

    def peer_wide(arg: tuple[str, int]) -> None:
        pipe = client.pipeline()
        for window in ("all", "week", "day"):
            pipe.zadd(f"wide:{window}:xp", {arg[0]: arg[1]})
            pipe.zadd(f"wide:{window}:kills", {arg[0]: arg[1] % 97})
            pipe.zadd(f"wide:{window}:ms", {arg[0]: arg[1] % 1013})
        pipe.execute()

    ops: dict[str, tuple[Callable[[Any], Any], Callable[[Any], Any], Callable[[], Any]]] = {
        "post": (
            lambda a: board.post(a[0], {"xp": a[1]}),
            lambda a: peer.rank_member(a[0], a[1]),
            lambda: (rng.choice(names), rng.randrange(10 * owners)),
        ),
        "post_3x3": (wide_post, peer_wide, lambda: (rng.choice(names), rng.randrange(10 * owners))),
        "rank": (lambda o: board.positions(o)["xp"], peer.rank_for, lambda: rng.choice(names)),
        "score_and_rank": (lambda o: board.rows([o], "xp")[0], peer.score_and_rank_for, lambda: rng.choice(names)),
        "around": (
            lambda o: board.around(o, "xp", before=PAGE // 2, after=PAGE // 2),
            lambda o: peer.around_me(o, page_size=PAGE),
            lambda: rng.choice(names),
        ),
        "page_by_rank": (
            lambda p: board.page("xp", offset=(p - 1) * PAGE, limit=PAGE).rows,
            lambda p: peer.leaders(p, page_size=PAGE),
            lambda: rng.randrange(1, owners // PAGE + 1),
        ),
        "percentile": (lambda o: board.percentile(o, "xp"), peer.percentile_for, lambda: rng.choice(names)),
        "count": (lambda _: board.count("xp"), lambda _: peer.total_members(), lambda: None),
    }
    samples: dict[str, dict[str, list[int]]] = {op: {"mdss": [], "peer": []} for op in ops}
    for r in range(rounds):
        print(f"round {r + 1} of {rounds}", file=sys.stderr)
        for op, (mine, theirs, arg) in ops.items():
            args = [arg() for _ in range(block)]
            sides = [("mdss", mine), ("peer", theirs)]
            for side, call in sides if r % 2 == 0 else sides[::-1]:
                _block(call, args, samples[op][side])
    for op, found in samples.items():
        mine, theirs = found["mdss"], found["peer"]
        if op.startswith("post"):
            rates = {"mdss_per_s": len(mine) * 1e9 / sum(mine), "peer_per_s": len(theirs) * 1e9 / sum(theirs)}
            result[op] = {**rates, "ratio": rates["mdss_per_s"] / rates["peer_per_s"]}
        else:
            p50 = {"mdss_p50_us": _p50_us(mine), "peer_p50_us": _p50_us(theirs)}
            result[op] = {**p50, "ratio": p50["peer_p50_us"] / p50["mdss_p50_us"]}
    memory = {"mdss": _memory(client, "mdss*game*") / owners, "peer": _memory(client, "peer*") / owners}
    result["memory_after_posts"] = {**memory, "ratio": memory["mdss"] / memory["peer"]}
    return result


def report(result: dict[str, Any]) -> Iterator[str]:
    yield f"{result['owners']:,} owners, {result['rounds']} rounds of {result['block']} calls per side and operation"
    yield f"{'operation':<22}{'mdss':>14}{'peer':>14}{'mdss/peer':>12}"
    load = result["load"]
    yield f"{'bulk load (owners/s)':<22}{load['mdss_per_s']:>14,.0f}{load['peer_per_s']:>14,.0f}{load['ratio']:>11.2f}x"
    for op in ("post", "post_3x3"):
        f = result[op]
        yield f"{op + ' (/s)':<22}{f['mdss_per_s']:>14,.0f}{f['peer_per_s']:>14,.0f}{f['ratio']:>11.2f}x"
    for op in ("rank", "score_and_rank", "around", "page_by_rank", "percentile", "count"):
        f = result[op]
        yield f"{op + ' p50 (us)':<22}{f['mdss_p50_us']:>14,.0f}{f['peer_p50_us']:>14,.0f}{f['ratio']:>11.2f}x"
    if "warm" in result:
        yield f"warmed first: client memory +{result['warm']['client_bytes_per_owner']:,.0f} B/owner"
    for when in ("memory_after_load", "memory_after_posts"):
        f = result[when]
        yield f"{when + ' (B/owner)':<22}{f['mdss']:>14,.0f}{f['peer']:>14,.0f}{f['ratio']:>11.2f}x (mdss/peer)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--owners", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--block", type=int, default=200, help="calls per side, operation and round")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--redis", default=None, help="a Redis URL whose database is flushed (default: start one)")
    parser.add_argument("--json", default=None)
    parser.add_argument("--chunk-size", type=int, default=None, help="the boards' chunk_size (default: mdss')")
    parser.add_argument("--memory-mb", type=int, default=None, help="Leaderboard.load's memory_bytes in MiB")
    parser.add_argument("--cache-mb", type=int, default=None, help="the boards' cache_bytes in MiB (default: mdss')")
    parser.add_argument("--warm", action="store_true", help="Leaderboard.warm() before the rounds (see --cache-mb)")
    args = parser.parse_args()
    options = {} if args.chunk_size is None else {"chunk_size": args.chunk_size}
    if args.cache_mb is not None:
        options["cache_bytes"] = args.cache_mb << 20
    with redis_url(args.redis) as url:
        result = run(url, args.owners, args.rounds, args.block, args.seed, options, args.memory_mb, args.warm)
    print("\n".join(report(result)))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
