"""How full SQLite's WAL is while writer processes post: N processes incr random members of one SQLite set
(100,000 members) for SECS seconds, while this process samples the WAL index's frame count (``mxFrame``,
from the ``-shm`` file) every 2 ms; prints updates/s, the frame count's percentiles and the share of
samples at or above the checkpoint threshold (a commit then checkpoints). WAL_PAGES sets
``mdss.stores.sqlite._WAL_PAGES`` (the threshold) for every process.

    PROCS=1,4 SECS=4 WAL_PAGES=1000 python benchmarks/experiments/wal_frames.py
"""

import multiprocessing
import os
import random
import struct
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.getcwd())
import mdss
import mdss.stores.sqlite

MEMBERS = 100_000


def post(url, seed, seconds, ready, out):
    board = mdss.SortedSet(mdss.open_store(url), "bench")
    rnd = random.Random(seed)
    end = time.monotonic() + 1  # warm up, as benchmarks/writers.py does
    while time.monotonic() < end:
        board.incr(f"m{rnd.randrange(MEMBERS)}", 1)
    ready.wait()
    ops, end = 0, time.monotonic() + seconds
    while time.monotonic() < end:
        board.incr(f"m{rnd.randrange(MEMBERS)}", 1)
        ops += 1
    out.put(ops)


def run(procs, seconds, pages):
    directory = tempfile.mkdtemp()
    url = f"sqlite:///{directory}/w.db"
    mdss.SortedSet(mdss.open_store(url), "bench").add_many({f"m{i}": i for i in range(MEMBERS)})
    ctx = multiprocessing.get_context("fork")
    ready, out = ctx.Barrier(procs + 1), ctx.Queue()
    workers = [ctx.Process(target=post, args=(url, n, seconds, ready, out)) for n in range(procs)]
    for w in workers:
        w.start()
    ready.wait()
    frames, stop = [], threading.Event()

    def sample():
        fd = os.open(f"{directory}/w.db-shm", os.O_RDONLY)
        while not stop.is_set():
            frames.append(struct.unpack_from("<I", os.pread(fd, 20, 0), 16)[0])  # WalIndexHdr.mxFrame
            time.sleep(0.002)
        os.close(fd)

    sampler = threading.Thread(target=sample)
    sampler.start()
    ops = sum(out.get() for _ in workers)
    stop.set()
    sampler.join()
    for w in workers:
        w.join()
    frames.sort()
    at = [frames[int(len(frames) * q)] for q in (0.1, 0.5, 0.9)]
    share = sum(f >= pages for f in frames) / len(frames)
    print(
        f"{procs} processes, WAL_PAGES={pages}: {ops / seconds:,.0f} updates/s; WAL frames p10/p50/p90/max "
        f"{at[0]}/{at[1]}/{at[2]}/{frames[-1]}; {share:.0%} of {len(frames)} samples at or above {pages}"
    )


if __name__ == "__main__":
    pages = int(os.environ.get("WAL_PAGES", mdss.stores.sqlite._WAL_PAGES))
    mdss.stores.sqlite._WAL_PAGES = pages
    for procs in [int(p) for p in os.environ.get("PROCS", "1,4").split(",")]:
        run(procs, float(os.environ.get("SECS", "4")), pages)
