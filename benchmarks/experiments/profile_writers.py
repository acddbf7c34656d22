"""Where a writer process's CPU and waiting go: N processes incr on one SQLite set (100,000 members), per update:
CPU, retries, conflicts, store calls and bytes, head decodes, overlay extends, sleeps (asked and slept, by
caller) and the CPU of the commit's phases (thread time, inclusive); PROF=1 adds cProfile (thread time).

    PROCS=1,4 SECS=4 [PROF=1] python benchmarks/experiments/profile_writers.py
"""

import contextlib
import cProfile
import multiprocessing
import os
import pstats
import random
import sys
import time

sys.path.insert(0, os.getcwd())
import mdss


def proc(url, seed, seconds, members, ready, out, profile):
    board = mdss.SortedSet(mdss.open_store(url), "bench")
    import collections

    import mdss._commit as C
    import mdss._head as H
    import mdss._log as L
    import mdss._retry as R

    counts = collections.Counter()
    waits = collections.Counter()
    real_sleep = time.sleep

    class T:
        def __getattr__(self, k):
            return getattr(time, k)

        @staticmethod
        def sleep(x):
            f = sys._getframe(2)
            counts["sleep:" + f.f_code.co_name] += 1
            t0 = time.perf_counter()
            real_sleep(x)
            waits[f.f_code.co_name] += time.perf_counter() - t0
            waits["asked:" + f.f_code.co_name] += x

    R.time = T()

    def wrap(mod, name, tag):
        fn = getattr(mod, name)

        def w(*a, **k):
            counts[tag] += 1
            return fn(*a, **k)

        setattr(mod, name, w)

    import mdss._merge as M
    import mdss.stores.sqlite as S

    tt = time.thread_time_ns

    def timed(owner, name, tag, method=False):
        fn = getattr(owner, name)

        def w(*a, **k):
            t0 = tt()
            try:
                return fn(*a, **k)
            finally:
                waits["cpu:" + tag] += (tt() - t0) / 1e9

        setattr(owner, name, w)

    for n in ("_cas", "_get", "_get_many", "_put_many"):
        timed(S.SQLiteStore, n, n)
    timed(H, "snapshot", "snapshot")
    timed(C, "_attempt", "_attempt(incl cas)")
    timed(C, "commit", "commit")
    timed(M, "merge", "merge")
    timed(H.Head, "encode", "encode")
    timed(L, "applied", "applied(extend)")
    timed(L, "overlay_view", "overlay_view")
    timed(H, "decode_for", "decode_for")
    timed(L.Index, "find", "find")
    timed(L, "appended", "appended")
    timed(C, "publish", "publish")
    dec = H.Head.decode.__func__
    H.Head.decode = classmethod(
        lambda cls, key, data: (counts.__setitem__("decode", counts["decode"] + 1), dec(cls, key, data))[1]
    )
    wrap(L, "entries", "log.entries")
    wrap(C, "_attempt", "attempt")
    ext = L.Overlay.extend

    def e2(self, start, entries):
        counts["extend"] += 1
        counts["extend_entries"] += max(0, start + len(entries) - self.seq)
        return ext(self, start, entries)

    L.Overlay.extend = e2
    rng = random.Random(seed)
    warm = time.monotonic() + 1.0
    while time.monotonic() < warm:
        with contextlib.suppress(mdss.ConflictError):
            board.incr(f"p{rng.randrange(members)}", 1)
    c0, r0, m0 = board.commits, board.retries, board.merges
    counts.clear()
    waits.clear()
    ready.wait()
    st = board.store.stats.snapshot()
    prof = cProfile.Profile(time.thread_time) if profile else None
    cpu = time.process_time()
    n = 0
    deadline = time.monotonic() + seconds
    if prof:
        prof.enable()
    while time.monotonic() < deadline:
        board.incr(f"p{rng.randrange(members)}", 1)
        n += 1
    if prof:
        prof.disable()
    cpu = time.process_time() - cpu
    cost = board.store.stats.since(st)
    text = None
    if prof:
        import tempfile as tf

        fn = tf.mktemp(suffix=".prof")
        prof.dump_stats(fn)
        text = fn
    out.put(
        dict(
            counts=dict(counts),
            waits=dict(waits),
            ops=n,
            cpu=cpu,
            retries=board.retries - r0,
            merges=board.merges - m0,
            commits=board.commits - c0,
            prof=text,
            **cost,
        )
    )


def run(url, procs, seconds, members, profile):
    ctx = multiprocessing.get_context("spawn")
    out, ready = ctx.Queue(), ctx.Barrier(procs)
    ps = [ctx.Process(target=proc, args=(url, p, seconds, members, ready, out, profile)) for p in range(procs)]
    for p in ps:
        p.start()
    res = [out.get() for _ in ps]
    for p in ps:
        p.join()
    ops = sum(r["ops"] for r in res)

    def tot(k: str) -> float:
        return sum(r[k] for r in res)

    print(
        f"{procs} procs: {ops / seconds:,.0f}/s cpu/op {tot('cpu') / ops * 1e6:,.0f}us "
        f"retries/op {tot('retries') / ops:.3f} conflicts/op {tot('conflicts') / ops:.3f} "
        f"calls/op {tot('calls') / ops:.2f} reads/op {tot('reads') / ops:.2f} "
        f"bytes_read/op {tot('bytes_read') / ops:,.0f} writes/op {tot('writes') / ops:.2f} merges {tot('merges')}",
        flush=True,
    )
    import collections

    c = collections.Counter()
    w = collections.Counter()
    for r in res:
        c.update(r["counts"])
        w.update(r["waits"])
    print("   per op:", {k: round(v / ops, 3) for k, v in sorted(c.items())})
    print(
        "   wait us per op:",
        {k: round(v / ops * 1e6, 1) for k, v in sorted(w.items())},
        " wall per op (procs*secs/ops) us",
        round(procs * seconds / ops * 1e6),
    )
    if profile:
        st = pstats.Stats(*[r["prof"] for r in res])
        rows = []
        for (f, line, name), (_, nc, tt, ct, _callers) in st.stats.items():
            rows.append((tt / ops * 1e6, ct / ops * 1e6, nc / ops, f"{os.path.basename(f)}:{line}({name})"))
        rows.sort(reverse=True)
        print("   tottime us/op  cumtime us/op  calls/op")
        for r in rows[:40]:
            print(f"   {r[0]:8.1f} {r[1]:8.1f} {r[2]:7.2f}  {r[3]}")
        rows.sort(key=lambda r: -r[1])
        print("   -- by cumulative")
        for r in rows[:60]:
            print(f"   {r[0]:8.1f} {r[1]:8.1f} {r[2]:7.2f}  {r[3]}")
    return ops / seconds


if __name__ == "__main__":
    import tempfile

    seconds = float(os.environ.get("SECS", 4))
    members = 100_000
    counts = [int(x) for x in os.environ.get("PROCS", "1,4").split(",")]
    profile = bool(os.environ.get("PROF"))
    with tempfile.TemporaryDirectory() as d:
        url = f"sqlite:///{d}/w.db"
        mdss.SortedSet.load(mdss.open_store(url), "bench", {f"p{i}": i for i in range(members)}, replace=True)
        for k in counts:
            run(url, k, seconds, members, profile)
