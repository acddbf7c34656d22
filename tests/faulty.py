"""A store wrapper that fails at the k-th store call: before it reaches the store, or after (reply lost)."""

from __future__ import annotations

from typing import Any

import mdss
from mdss.stores.base import Store


class FaultyStore(Store):
    """Delegates to ``inner``; call number ``fail_at`` (1-based) raises StoreUnavailableError.

    ``after=True`` performs the call first, then raises, like a reply lost on
    the network. ``fail_at=None`` never fails and just counts calls.
    """

    def __init__(self, inner: Store, fail_at: int | None = None, *, after: bool = False) -> None:
        super().__init__(namespace=inner.namespace)
        self.inner, self.fail_at, self.after, self.count = inner, fail_at, after, 0

    def _call(self, name: str, *args: Any) -> Any:
        self.count += 1
        failing = self.count == self.fail_at
        if failing and not self.after:
            raise mdss.StoreUnavailableError(f"injected failure before call {self.count} ({name})")
        result = getattr(self.inner, name)(*args)
        if failing:
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

    def _delete(self, key):
        return self._call("_delete", key)

    def _delete_many(self, keys):
        return self._call("_delete_many", keys)

    def _keys(self, prefix):
        return self._call("_keys", prefix)
