"""Code that runs in other processes during the concurrency tests (importable for ``spawn``)."""

from __future__ import annotations

import os
import random
import time

import mdss


def writer(
    url: str, name: str, index: int, n_ops: int, seed: int, shared: list[str], log_limit: int | None = None
) -> dict:
    """Random incr on shared members, and add/set/remove/incr on members only this process owns.

    Returns the owned members' final model, every acknowledged increment of a
    shared member with its invoke and ok times (monotonic clock, shared by
    the processes of one machine), and the failures by kind.
    """
    rng = random.Random(seed)
    board = mdss.SortedSet(mdss.open_store(url), name, gc_grace=0.05, log_limit=log_limit)
    owned: dict[str, int] = {}
    acked: list[tuple[str, int, int, int]] = []
    failures: dict[str, int] = {}
    for _ in range(n_ops):
        roll = rng.random()
        invoked = time.monotonic_ns()
        try:
            if roll < 0.5:
                member, delta = rng.choice(shared), rng.randint(1, 3)
                board.incr(member, delta)
                acked.append((member, delta, invoked, time.monotonic_ns()))
            else:
                member = f"w{index}-{rng.randrange(40)}"
                if roll < 0.7:
                    score = rng.randrange(100)
                    board.add(member, score)
                    owned[member] = score
                elif roll < 0.85:
                    board.remove(member)
                    owned.pop(member, None)
                else:
                    owned[member] = board.incr(member, 1)  # type: ignore[assignment]
        except mdss.MdssError as exc:
            failures[type(exc).__name__] = failures.get(type(exc).__name__, 0) + 1
    board.store.close()
    counters = {"commits": board.commits, "retries": board.retries, "merges": board.merges}
    return {"owned": owned, "acked": acked, "failures": failures, **counters}


def stopped(stop: str, started: float, seconds: float, at_most: float = 300.0) -> bool:
    """Whether a loop beside the writers is done: the test made the file ``stop`` (the writers finished)
    and ``seconds`` have passed since ``started``; or ``at_most`` seconds have passed whatever happened."""
    elapsed = time.monotonic() - started
    return (elapsed >= seconds and os.path.exists(stop)) or elapsed >= at_most


def reader(url: str, name: str, shared: list[str], stop: str, seconds: float = 0.0) -> list[tuple[int, int, int]]:
    """Read the shared counters' total and the whole ranking repeatedly, until the writers finish (the file
    ``stop`` exists) and for at least ``seconds``; check each read on its own.

    Returns (invoked, completed, total) per read, for the history check.
    """
    board = mdss.SortedSet(mdss.open_store(url), name)
    history: list[tuple[int, int, int]] = []
    started = time.monotonic()
    while len(history) < 6 or not stopped(stop, started, seconds):
        invoked = time.monotonic_ns()
        total = sum(s or 0 for s in board.scores(shared))
        history.append((invoked, time.monotonic_ns(), total))
        entries = board.range(0, 10_000)  # one snapshot: ranks and order must agree with each other
        assert [e.rank for e in entries] == list(range(1, len(entries) + 1))
        keys = [(-e.score, e.member) for e in entries]
        assert keys == sorted(keys) and len({e.member for e in entries}) == len(entries)
    board.store.close()
    return history


def loader(url: str, name: str, batches: int, size: int) -> None:
    """Commit batches of new members, printing each batch number once it is acknowledged (for kill -9)."""
    board = mdss.SortedSet(mdss.open_store(url), name, chunk_size=16)
    for batch in range(batches):
        board.add_many({f"b{batch}-{i}": (batch * 7919 + i) % 1000 for i in range(size)})
        print(batch, flush=True)


def collector(url: str, name: str, skew: float, stop: str, seconds: float = 0.0, at_most: float = 300.0) -> int:
    """Run ``gc(min_age=0)`` in a loop with this process' clock ``skew`` seconds off, until the writers finish
    (the file ``stop`` exists) and for at least ``seconds``, at most ``at_most``; returns nodes deleted."""
    import mdss._writer

    mdss._writer.clock = lambda: time.time() + skew
    board = mdss.SortedSet(mdss.open_store(url), name, gc_grace=0)
    deleted = 0
    started = time.monotonic()
    while not stopped(stop, started, seconds, at_most):
        deleted += board.gc(min_age=0, wait=False, sweep=True)
    board.store.close()
    return deleted


def skewed_writer(url: str, name: str, index: int, n_ops: int, skew: float) -> dict:
    """:func:`writer` with this process' clock ``skew`` seconds off."""
    import mdss._writer

    mdss._writer.clock = lambda: time.time() + skew
    return writer(url, name, index, n_ops, 2000 + index, [f"s{i}" for i in range(6)])
