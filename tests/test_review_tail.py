"""Adversarial review of store-applied appends (``mdss._tail``): lost replies with other writers, seals,
merges and gc in between; exact incr results; damaged tails."""

from __future__ import annotations

import uuid
from collections import Counter

import pytest
import redis
from faulty import FaultyStore
from hypothesis import given, settings
from hypothesis import strategies as st

import mdss
from mdss import _log, _merge, _tail
from mdss.stores.memory import MemoryStore


class _Lossy(FaultyStore):
    """Loses the reply of the next head write (append or compare-and-set) when armed, after running
    ``meanwhile``; ``before`` loses the request instead (it never reaches the store)."""

    armed = False
    before = False

    def _arm(self, key: str) -> None:
        if self.armed and key.endswith(":h"):
            self.armed = False
            self.fail_at, self.after = self.count + 1, not self.before

    def _append(self, key, held, sha, seen, record, cap):
        self._arm(key)
        return self._call("_append", key, held, sha, seen, record, cap)

    def _cas(self, key, value, version):
        self._arm(key)
        return self._call("_cas", key, value, version)


STEP = st.tuples(
    st.integers(0, 2),  # writer
    st.sampled_from(["a", "b", "c"]),  # member
    st.sampled_from(["none", "after", "before"]),  # lose the reply of its head write
    st.lists(
        st.tuples(st.integers(1, 2), st.sampled_from(["a", "b", "c", "d"]), st.sampled_from(["incr", "merge", "gc"])),
        max_size=6,
    ),
)


@pytest.mark.parametrize("inline", [60, 1024])
def test_lost_replies_among_other_writers_keep_incr_exact(store_factory, inline) -> None:
    """Lost replies (or requests) of head writes, with other writers' commits, merges and gc in between:
    every acknowledged incr applied once, with exact results; an unknown outcome applied at most once."""

    @settings(max_examples=60, deadline=None)
    @given(steps=st.lists(STEP, min_size=1, max_size=25), log_limit=st.sampled_from([3, 8, 10_000]))
    def check(steps, log_limit):
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(_log, "INLINE_BYTES", inline)
            mp.setattr(_tail, "TAIL_BYTES", 150)
            _lost_replies(store_factory(), steps, log_limit)

    check()


def _lost_replies(store, steps, log_limit) -> None:
    stores = [_Lossy(store) for _ in range(3)]
    boards = [mdss.SortedSet(s, "b", chunk_size=2, log_limit=log_limit) for s in stores]
    boards[0].add("z", 0)
    acked: dict[str, list[float]] = {m: [] for m in "abcd"}
    unknown: Counter[str] = Counter()

    def run(board, member, what="incr"):
        if what == "merge":
            _merge.merge(board)
            return
        if what == "gc":
            board.gc(wait=False)
            return
        try:
            acked[member].append(board.incr(member, 1))
        except mdss.OutcomeUnknownError:
            unknown[member] += 1

    for writer, member, lose, meanwhile in steps:
        lossy = stores[writer]
        lossy.fail_at = None
        if lose != "none":
            lossy.armed, lossy.before = True, lose == "before"
            lossy.meanwhile = lambda mw=meanwhile, w=writer: [run(boards[(w + i) % 3], m, what) for i, m, what in mw]
        else:
            lossy.armed = False
        run(boards[writer], member)
        lossy.armed, lossy.fail_at = False, None
    fresh = mdss.SortedSet(store, "b")
    assert fresh.check() == []
    for member, got in acked.items():
        final = fresh.score(member) or 0
        assert len(set(got)) == len(got), (member, got)  # exact: no two incrs saw the same score
        assert sorted(got) == [g for g in sorted(got) if g <= final]
        assert len(got) <= final <= len(got) + unknown[member], (member, got, final, unknown)


def test_a_damaged_core_checksum_is_refused_by_a_process_that_held_the_plain_head() -> None:
    """A process holding the plain head decodes only the records of the tailed head the store holds
    next: the SHA-1 in its header must still be checked, as a fresh process checks it (else that one
    process serves the set, reports it sound and keeps appending while every other one refuses it)."""
    store = MemoryStore()
    mdss.SortedSet(store, "b", log_limit=0).add("a", 1)  # a plain head (straight into the trees)
    held = mdss.SortedSet(store, "b", log_limit=10_000)
    assert held.scores(["a"]) == [1] and held._head_bytes[:1] != _tail.TAILED
    mdss.SortedSet(store, "b", log_limit=10_000).add("b", 2)  # appended: the head now has a tail
    key = held._keys.head
    damaged = bytearray(store.get(key).value)
    damaged[5] ^= 0x10  # in the core's SHA-1
    store.put(key, bytes(damaged))
    with pytest.raises(mdss.CorruptDataError):
        mdss.SortedSet(store, "b").score("b")
    with pytest.raises(mdss.CorruptDataError):
        held.score("b")
    assert held.check() != []


@pytest.mark.parametrize("redis_kind", ["redis", "redis-cluster"])
@pytest.mark.parametrize("meanwhile", ["nothing", "same member", "other member", "seal"])
def test_a_delayed_original_append_arriving_after_the_resend_is_never_applied_twice(
    redis_kind, meanwhile, request
) -> None:
    """Redis: the first append request is held back (its connection failed, the server runs it later); the
    store's own resend, other writers, then the held-back request. Applied once, incr exact."""
    url = request.getfixturevalue("redis_url" if redis_kind == "redis" else "redis_cluster_url")
    store = mdss.open_store(f"{url}?namespace=t{uuid.uuid4().hex[:12]}")
    request.addfinalizer(store.close)
    mdss.SortedSet(store, "b", chunk_size=4, log_limit=0).add_many({f"m{i}": i for i in range(10)})
    other = mdss.SortedSet(store, "b", log_limit=10_000)
    writer = mdss.SortedSet(store, "b", log_limit=10_000)
    writer.scores(["x"])
    real, held_back = store._append_script, []

    def flaky(keys, args):
        if not held_back:
            held_back.append((keys, args))
            if meanwhile == "same member":
                other.incr("x", 10)
            elif meanwhile == "other member":
                other.incr("y", 10)
            elif meanwhile == "seal":
                mdss.SortedSet(store, "b", log_limit=0).incr("z", 1)  # straight into the trees: a new core
            raise redis.ConnectionError("held back")
        return real(keys=keys, args=args)

    store._append_script = flaky
    try:
        got = writer.incr("x", 1)
    finally:
        store._append_script = real
    keys, args = held_back[0]
    real(keys=keys, args=args)  # the held-back request reaches the server at last
    final = mdss.SortedSet(store, "b").score("x")
    assert final == (11 if meanwhile == "same member" else 1)
    assert got == final or (meanwhile == "same member" and got in (1, 11))
    assert mdss.SortedSet(store, "b").check() == []


@pytest.mark.parametrize("landed", [False, True])
def test_a_lost_append_then_a_fold_into_the_trees_is_told_from_the_recent_commits(landed: bool) -> None:
    """The append's request (or its reply) is lost, and a commit folds the log into the trees before the
    resend: the head's recent nonces cover every commit since the writer's view, so the outcome is known
    (not OutcomeUnknownError), and the incr applies once."""
    store = MemoryStore()
    mdss.SortedSet(store, "b", chunk_size=4, log_limit=0).add_many({f"m{i}": i for i in range(10)})
    lossy = _Lossy(store, meanwhile=lambda: mdss.SortedSet(store, "b", log_limit=0).incr("z", 1))
    writer = mdss.SortedSet(lossy, "b", log_limit=10_000)
    writer.scores(["x"])
    lossy.armed, lossy.before = True, not landed
    assert writer.incr("x", 1) == 1
    fresh = mdss.SortedSet(store, "b")
    assert fresh.scores(["x", "z"]) == [1, 1]
    assert fresh.check() == []
