"""Port throughput: ``rank`` calls per second from Erlang processes through the port, against Python.

    python benchmarks/port_throughput.py [--members 1000000] [--calls 20000] [--store URL]
        [--json benchmarks/results/port.json]

Builds the ``mdss demo`` leaderboard (same players, same seed) in an SQLite
file unless the store already holds it, compiles erlang/src/mdss.erl with
``erlc``, and times ``mdss:rank/3`` of random players from 1 and from 8
Erlang processes sharing one client, then ``SortedSet.rank`` of the same
players from 1 and 8 Python threads sharing one object. Each side first
ranks every sampled player once, so both node caches hold what the calls
need: the comparison is the port's cost (ETF both ways, a pipe, a thread
pool) on top of the same Python call. Needs ``erl``, ``erlc`` and a Python
with mdss and erlang-py.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import mdss
from mdss.cli import synthetic_players

ERLANG = Path(__file__).resolve().parent.parent / "erlang"
SET = "leaderboard"

#: Erlang: rank each player once (warm-up), then for each process count split the calls among that many
#: processes and print "procs seconds latencies-in-us..." per run.
BENCH = """
Players = list_to_tuple([list_to_binary(P) || P <- string:tokens(os:getenv("PLAYERS"), ",")]),
Calls = list_to_integer(os:getenv("CALLS")),
{ok, Pid} = mdss:start_link(os:getenv("STORE"), #{timeout => 60000, threads => 8}),
[{ok, _} = mdss:rank(Pid, <<"leaderboard">>, P) || P <- tuple_to_list(Players)],
N = tuple_size(Players),
lists:foreach(fun(Procs) ->
    Self = self(),
    Start = erlang:monotonic_time(),
    Workers = [spawn_link(fun() ->
        Times = [begin
            P = element(1 + (I * 7919 + W) rem N, Players),
            T0 = erlang:monotonic_time(),
            {ok, _} = mdss:rank(Pid, <<"leaderboard">>, P),
            erlang:convert_time_unit(erlang:monotonic_time() - T0, native, nanosecond)
        end || I <- lists:seq(1, Calls div Procs)],
        Self ! {done, self(), Times}
    end) || W <- lists:seq(1, Procs)],
    Times = lists:append([receive {done, W, T} -> T end || W <- Workers]),
    Seconds = erlang:convert_time_unit(erlang:monotonic_time() - Start, native, nanosecond) / 1.0e9,
    io:format("~b ~f ~s~n", [Procs, Seconds, lists:join(" ", [integer_to_list(T) || T <- Times])])
end, [1, 8]),
halt(0).
"""


def summary(workers: int, seconds: float, latencies_ns: list[int]) -> dict[str, Any]:
    cuts = statistics.quantiles(latencies_ns, n=100)
    return {
        "workers": workers,
        "calls": len(latencies_ns),
        "calls_per_s": len(latencies_ns) / seconds,
        "p50_us": cuts[49] / 1000,
        "p90_us": cuts[89] / 1000,
        "p99_us": cuts[98] / 1000,
        "max_us": max(latencies_ns) / 1000,
    }


def erlang_side(store_url: str, players: list[str], calls: int) -> list[dict[str, Any]]:
    erlc = shutil.which("erlc")
    if erlc is None or shutil.which("erl") is None:
        sys.exit("needs erl and erlc: apt-get install erlang-nox")
    with tempfile.TemporaryDirectory() as ebin:
        subprocess.run([erlc, "-o", ebin, str(ERLANG / "src" / "mdss.erl")], check=True)
        env = {**os.environ, "MDSS_PYTHON": sys.executable, "STORE": store_url, "CALLS": str(calls)}
        env["PLAYERS"] = ",".join(players)
        done = subprocess.run(
            ["erl", "-noshell", "-pa", ebin, "-eval", BENCH], env=env, capture_output=True, text=True, check=True
        )
    runs = []
    for line in done.stdout.splitlines():
        procs, seconds, *times = line.split()
        runs.append({"side": "erlang, through the port", **summary(int(procs), float(seconds), list(map(int, times)))})
    return runs


def python_side(store_url: str, players: list[str], calls: int) -> list[dict[str, Any]]:
    board = mdss.SortedSet(mdss.open_store(store_url), SET)
    for player in players:
        board.rank(player)
    runs = []

    def work(w: int, count: int, times: list[int]) -> None:
        for i in range(1, count + 1):
            player = players[(i * 7919 + w + 1) % len(players)]
            t0 = time.perf_counter_ns()
            board.rank(player)
            times.append(time.perf_counter_ns() - t0)

    for threads in (1, 8):
        times: list[list[int]] = [[] for _ in range(threads)]
        workers = [threading.Thread(target=work, args=(w, calls // threads, times[w])) for w in range(threads)]
        start = time.perf_counter()
        for t in workers:
            t.start()
        for t in workers:
            t.join()
        seconds = time.perf_counter() - start
        runs.append({"side": "python, direct", **summary(threads, seconds, [x for ts in times for x in ts])})
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    default_store = f"sqlite:///{tempfile.gettempdir()}/mdss-port-bench.db"
    parser.add_argument("--store", default=default_store, help="an SQLite URL (the set is kept for reruns)")
    parser.add_argument("--members", type=int, default=1_000_000)
    parser.add_argument("--calls", type=int, default=20_000, help="rank calls per run")
    parser.add_argument("--sample", type=int, default=2000, help="distinct random players ranked")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    board = mdss.SortedSet(mdss.open_store(args.store), SET)
    if len(board) != args.members:
        print(f"building the demo set of {args.members:,} players in {args.store}", file=sys.stderr)
        mdss.SortedSet.load(board.store, SET, dict(synthetic_players(args.members, 7)), order="desc", replace=True)
    players = [f"player-{i:07d}" for i in random.Random(1).sample(range(args.members), args.sample)]
    runs = erlang_side(args.store, players, args.calls) + python_side(args.store, players, args.calls)
    print(f"rank of random players, N = {args.members:,}, {args.store}, {args.calls:,} calls per run")
    print(f"{'side':<28}{'workers':>8}{'calls/s':>10}{'p50 us':>9}{'p90 us':>9}{'p99 us':>9}{'max us':>9}")
    for r in runs:
        print(
            f"{r['side']:<28}{r['workers']:>8}{r['calls_per_s']:>10,.0f}{r['p50_us']:>9.1f}{r['p90_us']:>9.1f}"
            f"{r['p99_us']:>9.1f}{r['max_us']:>9.0f}"
        )
    if args.json:
        Path(args.json).write_text(json.dumps({"members": args.members, "store": args.store, "runs": runs}, indent=1))


if __name__ == "__main__":
    main()
