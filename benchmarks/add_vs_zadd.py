"""``SortedSet.add`` beside an unpipelined ``ZADD`` on one Redis, interleaved, with the second core busy.

    python benchmarks/add_vs_zadd.py [--members 1000000] [--rounds 5] [--block 500] [--warmup 5000] [--no-busy]
        [--tiebreak member|member_desc|first] [--redis URL]

Both sides hold the same members (``player-NNNNNNNN``) and scores: mdss in a set loaded with ``SortedSet.load``,
Redis in one sorted set. ``--warmup`` updates on each side (untimed) fill mdss' node cache as a running service's
is (an update reads its member's entry set of the member index, to log the score it replaces). Then ``--rounds``
times a block of ``--block`` single updates on one side and the same updates on the other (which side goes first
alternates). ``--tiebreak`` is the mdss set's (``first``: ties by who reached the score first). Unless
``--no-busy``, a process spins on the other core all along, as a production host's other work does: mdss spends more
client CPU per write than a ``ZADD``, so a shared CPU is its real condition. A redis-server is started on loopback
unless ``--redis``. Prints each round's rates, Redis' own time per call of each side (``INFO commandstats`` over the
timed rounds, where ``CONFIG RESETSTAT`` is allowed), and the ratio over all rounds (mdss / ZADD).
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import random
import time
from collections.abc import Iterator

import redis

import mdss
from harness import redis_url


def _spin(stop: multiprocessing.synchronize.Event) -> None:
    while not stop.is_set():
        sum(range(10_000))


@contextlib.contextmanager
def _busy(on: bool) -> Iterator[None]:
    if not on:
        yield
        return
    stop = multiprocessing.Event()
    spinner = multiprocessing.Process(target=_spin, args=(stop,), daemon=True)
    spinner.start()
    try:
        yield
    finally:
        stop.set()
        spinner.join()


def _reset_stats(client: redis.Redis) -> bool:
    """Zero the server's command statistics (False where ``CONFIG RESETSTAT`` is not allowed)."""
    try:
        client.config_resetstat()
    except redis.ResponseError:
        return False
    return True


def _server_time(client: redis.Redis, updates: int) -> str:
    """Redis' own time per call over the timed rounds (``INFO commandstats``): mdss' scripts (appends, seals) beside
    ``ZADD``, and how many of each an update took."""
    stats = client.info("commandstats")
    parts = []
    for command, name in (("evalsha", "EVALSHA (mdss' scripts)"), ("zadd", "ZADD")):
        found = stats.get(f"cmdstat_{command}", {"calls": 0, "usec_per_call": 0.0})
        parts.append(f"{name} {found['usec_per_call']:.2f} us a call, {found['calls'] / updates:.2f} per update")
    return "Redis time: " + "; ".join(parts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--members", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--block", type=int, default=500)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--warmup", type=int, default=5000, help="untimed updates on each side first")
    parser.add_argument("--no-busy", action="store_true", help="leave the other core idle")
    parser.add_argument("--tiebreak", default="member", choices=["member", "member_desc", "first"])
    parser.add_argument("--redis", default=None, help="a Redis URL whose database is flushed (default: start one)")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    names = [f"player-{i:08d}" for i in range(args.members)]
    with redis_url(args.redis) as url:
        client = redis.Redis.from_url(url)
        client.flushdb()
        pairs = {n: rng.randrange(10 * args.members) for n in names}
        for start in range(0, len(names), 10_000):
            client.zadd("zset", {n: pairs[n] for n in names[start : start + 10_000]})
        sset = mdss.SortedSet.load(mdss.open_store(url, namespace="mdss"), "set", pairs, tiebreak=args.tiebreak)
        spent = {"mdss": 0.0, "zadd": 0.0}
        sides = {"mdss": lambda m, s: sset.add(m, s), "zadd": lambda m, s: client.zadd("zset", {m: s})}
        with _busy(not args.no_busy):
            for _ in range(args.warmup):
                member, score = rng.choice(names), rng.randrange(10 * args.members)
                sides["mdss"](member, score)
                sides["zadd"](member, score)
            server = _reset_stats(client)
            for r in range(args.rounds):
                updates = [(rng.choice(names), rng.randrange(10 * args.members)) for _ in range(args.block)]
                took = {}
                for side in ("mdss", "zadd") if r % 2 == 0 else ("zadd", "mdss"):
                    call = sides[side]
                    t = time.perf_counter()
                    for member, score in updates:
                        call(member, score)
                    took[side] = time.perf_counter() - t
                    spent[side] += took[side]
                rates = {side: args.block / took[side] for side in took}
                print(
                    f"round {r + 1}: mdss {rates['mdss']:,.0f}/s, ZADD {rates['zadd']:,.0f}/s, "
                    f"{rates['mdss'] / rates['zadd']:.2f}x"
                )
        if server:
            print(_server_time(client, args.rounds * args.block))
    print(
        f"{args.members:,} members (tiebreak={args.tiebreak}), {args.rounds} x {args.block} updates per side, "
        "other core "
        f"{'idle' if args.no_busy else 'busy'}: mdss {args.rounds * args.block / spent['mdss']:,.0f}/s, "
        f"ZADD {args.rounds * args.block / spent['zadd']:,.0f}/s, {spent['zadd'] / spent['mdss']:.2f}x"
    )


if __name__ == "__main__":
    main()
