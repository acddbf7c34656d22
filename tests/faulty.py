"""Store wrappers for fault injection: a failure at the k-th store call, before it reaches the store or
after it (a lost reply), optionally with something else happening in between; and injected latency."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Any

import mdss
from mdss.stores.base import Store


class FaultyStore(Store):
    """Delegates to ``inner``; call number ``fail_at`` (1-based) raises StoreUnavailableError.

    ``after=True`` performs the call first, then raises, like a reply lost on
    the network. ``meanwhile()``, if given, runs between the failed call and
    the exception (another writer committing, a gc running). ``dies=True``
    fails every call after ``fail_at`` too, before it reaches the store: a
    process that crashed makes no more calls (not even to clean up).
    ``fail_at=None`` never fails and just counts calls.
    """

    def __init__(
        self,
        inner: Store,
        fail_at: int | None = None,
        *,
        after: bool = False,
        meanwhile: Callable[[], Any] | None = None,
        dies: bool = False,
    ) -> None:
        super().__init__(namespace=inner.namespace)
        self.inner, self.fail_at, self.after, self.meanwhile, self.count = inner, fail_at, after, meanwhile, 0
        self.dies = dies
        self.keeps_siblings = inner.keeps_siblings
        self.appends, self.seals_nodes = inner.appends, inner.seals_nodes

    def _call(self, name: str, *args: Any) -> Any:
        self.count += 1
        if self.dies and self.fail_at is not None and self.count > self.fail_at:
            raise mdss.StoreUnavailableError(f"call {self.count} ({name}) after the process died")
        failing = self.count == self.fail_at
        if failing and not self.after:
            if self.meanwhile is not None:
                self.meanwhile()
            raise mdss.StoreUnavailableError(f"injected failure before call {self.count} ({name})")
        result = getattr(self.inner, name)(*args)
        if failing:
            if self.meanwhile is not None:
                self.meanwhile()
            raise mdss.StoreUnavailableError(f"injected failure after call {self.count} ({name})")
        return result

    def _get(self, key):
        return self._call("_get", key)

    def _get_many(self, keys):
        return self._call("_get_many", keys)

    def _put(self, key, value, context):
        return self._call("_put", key, value, context)

    def _put_many(self, items):
        return self._call("_put_many", items)

    def _cas(self, key, value, version):
        return self._call("_cas", key, value, version)

    def _append(self, key, held, sha, seen, record, cap):
        return self._call("_append", key, held, sha, seen, record, cap)

    def _swap(self, key, held, sha, seen, core, record, cap, nodes, lagging=False):
        return self._call("_swap", key, held, sha, seen, core, record, cap, nodes, lagging)

    def _delete(self, key):
        return self._call("_delete", key)

    def _delete_if(self, key, version):
        return self._call("_delete_if", key, version)

    def _delete_many(self, keys):
        return self._call("_delete_many", keys)

    def _keys(self, prefix):
        return self._call("_keys", prefix)


class SlowStore(FaultyStore):
    """Delegates to ``inner`` with ``low``..``high`` seconds of latency added to every call, as real clusters have."""

    def __init__(self, inner: Store, low: float = 0.005, high: float = 0.020) -> None:
        super().__init__(inner)
        self.low, self.high = low, high

    def _call(self, name: str, *args: Any) -> Any:
        time.sleep(random.uniform(self.low, self.high))
        return getattr(self.inner, name)(*args)
