"""Review of the lead's session changes (garbage notes, split log segments, fresh readers' look for a lost
head, held heads per shard): each test is a bug found by probing them on real stores, with faults."""

from __future__ import annotations

import pytest
from faulty import FaultyStore

import mdss


@pytest.mark.parametrize("after", [False, True])
def test_a_shard_started_again_after_a_drop_stores_the_settings_even_if_that_call_failed(store, after) -> None:
    """A writer whose set another process dropped starts a shard's head afresh and then stores the set's
    settings again (``_Shard._started``). If that one store call fails, the write fails, and its retry finds
    the head made and never came back to the settings: later writes were acknowledged into a shard that no
    reader could find (a fresh reader saw an empty unsharded set)."""
    faulty = FaultyStore(store)
    writer = mdss.SortedSet(faulty, "b", shards=2, chunk_size=4)
    writer.add("x", 1)
    mdss.SortedSet(store, "b").drop()
    calls = []

    class Settings(FaultyStore):  # fails the settings' compare-and-set, the call after the head's
        def _cas(self, key, value, version):
            calls.append(key)
            if key.endswith(":s") and len(calls) == 2:
                if after:
                    self.inner._cas(key, value, version)
                raise mdss.StoreUnavailableError("injected")
            return self.inner._cas(key, value, version)

    faulty.inner = Settings(store)
    with pytest.raises(mdss.StoreUnavailableError):
        writer.add("y", 2)
    assert calls[0].endswith(":h")  # the shard's head was made, then the settings failed
    assert writer.add("z", 3) is True
    fresh = mdss.SortedSet(store, "b")
    assert isinstance(fresh, mdss.ShardedSet) and [e.member for e in fresh] == ["z"]
    assert fresh.check() == []
