"""The chain of commits: N processes incr on one SQLite set (100,000 members); every head compare-and-set's
start and end (CLOCK_MONOTONIC, shared by the processes), outcome and process, with their merges, node
writes (put_many) and sleeps. Prints the links between consecutive winning compare-and-sets (the same
process again, or another), the share of the chain's time in links over 1 ms, and what the processes did
during those (merging, asleep, in a commit otherwise, outside one); DUMP=1 prints six of them in full.

    PROCS=1,4 SECS=4 [DUMP=1] python benchmarks/experiments/chain_trace.py

Run from the repository's root (or with PYTHONPATH at another worktree), holding /tmp/mdss-bench.lock.
"""

import contextlib
import multiprocessing
import os
import random
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.getcwd())
import mdss

MEMBERS = 100_000


def traced(owner, name, into, seed, outcome=None):
    """Record (start, end, process, ...) of every call of ``owner.name`` in ``into``."""
    fn = getattr(owner, name)

    def call(*args, **kwargs):
        start = time.monotonic_ns()
        won = 1
        try:
            return fn(*args, **kwargs)
        except mdss.ConflictError:
            won = 0
            raise
        finally:
            into.append((start, time.monotonic_ns(), seed, *(outcome(args, won) if outcome else ())))

    setattr(owner, name, call)
    return call


def proc(url, seed, seconds, ready, out):
    import mdss._commit as C
    import mdss._merge as M
    import mdss._retry as R
    import mdss.stores.sqlite as S

    board = mdss.SortedSet(mdss.open_store(url), "bench")
    cas, puts, merges, calls, sleeps = [], [], [], [], []
    traced(S.SQLiteStore, "_cas", cas, seed, lambda args, won: (won, len(args[2])))
    traced(S.SQLiteStore, "_put_many", puts, seed)
    C._merge.merge = traced(M, "merge", merges, seed)
    traced(C, "commit", calls, seed)

    class Clock:
        def __getattr__(self, name):
            return getattr(time, name)

        @staticmethod
        def sleep(seconds):
            start = time.monotonic_ns()
            time.sleep(seconds)
            sleeps.append((start, time.monotonic_ns(), seed))

    R.time = C.time = Clock()
    rng = random.Random(seed)
    warm = time.monotonic() + 1.0
    while time.monotonic() < warm:
        with contextlib.suppress(mdss.ConflictError):
            board.incr(f"p{rng.randrange(MEMBERS)}", 1)
    for events in (cas, puts, merges, calls, sleeps):
        events.clear()
    ready.wait()
    n = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        board.incr(f"p{rng.randrange(MEMBERS)}", 1)
        n += 1
    out.put({"ops": n, "cas": cas, "puts": puts, "merges": merges, "calls": calls, "sleeps": sleeps})


def spread(xs):
    if not xs:
        return "-"
    return f"p50 {statistics.median(xs):.0f} p90 {sorted(xs)[int(len(xs) * 0.9)]:.0f} mean {statistics.mean(xs):.0f}"


def overlap(events, start, end, pid):
    return sum(max(0, min(b, end) - max(a, start)) for a, b, p, *_ in events if p == pid)


def report(procs, seconds, res):
    ev = {k: sorted(e for r in res for e in r[k]) for k in ("cas", "puts", "merges", "calls", "sleeps")}
    ops = sum(r["ops"] for r in res)
    wins = sorted((e for e in ev["cas"] if e[3]), key=lambda e: e[1])
    losses = [e for e in ev["cas"] if not e[3]]
    print(f"{procs} procs: {ops / seconds:,.0f}/s  compare-and-sets {len(ev['cas'])}, lost {len(losses)}")
    print(f"  compare-and-set us, won: {spread([(e[1] - e[0]) / 1e3 for e in wins])}", end="")
    print(f"; lost: {spread([(e[1] - e[0]) / 1e3 for e in losses])}")
    pairs = list(zip(wins, wins[1:]))
    same = [(b[1] - a[1]) / 1e3 for a, b in pairs if a[2] == b[2]]
    other = [(b[1] - a[1]) / 1e3 for a, b in pairs if a[2] != b[2]]
    print(f"  links us (a win's end to the next's), same process {len(same)}: {spread(same)}", end="")
    print(f"; another process {len(other)}: {spread(other)}")
    links = same + other
    share = sum(x for x in links if x > 1000) / sum(links)
    print(f"  chain time in links over 1 ms: {share:.2f} of {sum(links) / 1e6:.2f} s")
    print(f"  merges: {len(ev['merges'])}, {sum(e[1] - e[0] for e in ev['merges']) / 1e9 / seconds:.3f} of the time")
    long = [(a[1], b[1], a[2], b[2]) for a, b in pairs if b[1] - a[1] > 1e6]
    shares = dict.fromkeys(("merging", "asleep", "in a commit otherwise", "outside a commit"), 0)
    gap = 0
    for start, end, _, _ in long:
        for pid in range(procs):
            merging = overlap(ev["merges"], start, end, pid)
            asleep = overlap(ev["sleeps"], start, end, pid)
            committing = overlap(ev["calls"], start, end, pid)
            shares["merging"] += merging
            shares["asleep"] += asleep
            shares["in a commit otherwise"] += max(0, committing - merging - asleep)
            shares["outside a commit"] += (end - start) - max(committing, merging + asleep)
        gap += end - start
    if gap:
        print("  in links over 1 ms, the processes' time:", {k: round(v / gap / procs, 3) for k, v in shares.items()})
    if os.environ.get("DUMP"):
        for start, end, before, after in random.Random(1).sample(long, min(6, len(long))):
            print(f"  --- link of {(end - start) / 1e3:.0f} us, won by process {before} then {after}")
            rows = []
            for kind in ("cas", "sleeps", "merges", "puts", "calls"):
                for e in ev[kind]:
                    if e[0] < end and e[1] > start:
                        what = ("won" if e[3] else "lost") if kind == "cas" else ""
                        rows.append((e[0], e[2], kind, (e[0] - start) / 1e3, (e[1] - start) / 1e3, what))
            for _, pid, kind, a, b, what in sorted(rows):
                print(f"     p{pid} {kind:6} {a:9.0f} .. {b:9.0f} {what}")


def main():
    seconds = float(os.environ.get("SECS", "4"))
    for procs in [int(p) for p in os.environ.get("PROCS", "1,4").split(",")]:
        with tempfile.TemporaryDirectory() as d:
            url = f"sqlite:///{d}/t.db"
            mdss.SortedSet.load(mdss.open_store(url), "bench", {f"p{i}": i for i in range(MEMBERS)}, replace=True)
            ctx = multiprocessing.get_context("spawn")
            out, ready = ctx.Queue(), ctx.Barrier(procs)
            ps = [ctx.Process(target=proc, args=(url, p, seconds, ready, out)) for p in range(procs)]
            for p in ps:
                p.start()
            res = [out.get() for _ in ps]
            for p in ps:
                p.join()
        report(procs, seconds, res)


if __name__ == "__main__":
    main()
