"""The in-process store: a dict behind a lock. The embedded default for tests.

With ``siblings=True`` it keeps concurrent writes like Riak with ``allow_mult``, so sibling merging is tested on every
run: each value carries a dot, a read's version is the set of dots it saw, and a write replaces exactly the values its
context saw: two writers that read the same version both survive as siblings.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from .. import _tail
from ..exceptions import ConflictError, InvalidArgumentError
from .base import Record, Store, parse_flag, store_options


class MemoryStore(Store):
    """Keys and values in a dict; thread-safe; gone when the process ends."""

    def __init__(self, *, namespace: str = "mdss", siblings: bool = False, appends: bool = True) -> None:
        super().__init__(namespace=namespace)
        for name, flag in (("siblings", siblings), ("appends", appends)):
            if not isinstance(flag, bool):
                raise InvalidArgumentError(f"{name} must be True or False, got {flag!r}")
        self.keeps_siblings = siblings
        # Store-applied appends (mdss._tail, else heads are compare-and-set); never with siblings: no atomic update.
        self.appends = appends and not siblings
        self.seals_nodes = self.appends  # a seal's nodes with its core, under the lock
        self._data: dict[str, dict[int, bytes]] = {}  # key -> {dot: value}
        self._dots = itertools.count(1)
        self._lock = threading.Lock()

    @classmethod
    def from_url(cls, url: str, **options: Any) -> MemoryStore:
        """``memory://`` or ``memory://?siblings=true&appends=false&namespace=app``."""
        return cls(**store_options(url, options, {"namespace": str, "siblings": parse_flag, "appends": parse_flag}))

    def _get(self, key: str) -> Record | None:
        with self._lock:
            values = self._data.get(key)
            if not values:
                return None
            return Record(tuple(values.values()), frozenset(values))

    def _get_many(self, keys: Sequence[str]) -> list[bytes | None]:
        data = self._data
        with self._lock:
            out = []
            for key in keys:
                values = data.get(key)
                out.append(next(iter(values.values())) if values else None)
            return out

    def _write(self, key: str, value: bytes, seen: frozenset[int]) -> None:
        current = self._data.get(key, {})
        current = {dot: v for dot, v in current.items() if dot not in seen} if self.keeps_siblings else {}
        current[next(self._dots)] = value
        self._data[key] = current

    def _put(self, key: str, value: bytes, context: Any) -> None:
        with self._lock:
            self._write(key, value, context or frozenset())

    def _put_many(self, items: Mapping[str, bytes]) -> None:
        with self._lock:
            for key, value in items.items():
                self._write(key, value, frozenset())

    def _cas(self, key: str, value: bytes, version: Any) -> Any:
        with self._lock:
            values = self._data.get(key)
            current = frozenset(values or ())
            if (version is None and current) or (version is not None and version != current):
                record = Record(tuple(values.values()), current) if values else None
                raise ConflictError(f"key {key!r} changed since it was read", current=record, current_known=True)
            dot = next(self._dots)
            self._data[key] = {dot: value}
            return frozenset((dot,))

    def _append(self, key: str, held: bytes, sha: bytes, seen: int, record: bytes, cap: int) -> Record:
        return self._applied(key, lambda value: _tail.apply(value, sha, seen, record, cap))

    def _swap(
        self,
        key: str,
        held: bytes,
        sha: bytes,
        seen: int,
        core: bytes,
        record: bytes,
        cap: int,
        nodes: Mapping[str, bytes],
        lagging: bool = False,
    ) -> Record:
        return self._applied(key, lambda value: _tail.swap(value, sha, seen, core, record, cap, lagging), (core, nodes))

    def _applied(
        self,
        key: str,
        change: Callable[[bytes | None], bytes],
        sealing: tuple[bytes, Mapping[str, bytes]] | None = None,
    ) -> Record:
        """``change`` (``mdss._tail``) applied to the value at ``key`` under the lock: the record now there. With
        ``sealing`` (a core and nodes), the nodes are written if the change put that core in place."""
        if not self.appends:
            raise NotImplementedError("this memory store commits by compare-and-set only (appends=false)")
        with self._lock:
            values = self._data.get(key)
            value = next(iter(values.values())) if values else None
            try:
                new = change(value)
            except _tail.Refused as exc:
                exc.current = Record(tuple(values.values()), frozenset(values)) if values else None
                raise
            if new is value:  # a resend, found there already: the same version
                return Record((new,), frozenset(values))  # type: ignore[arg-type]
            dot = next(self._dots)
            self._data[key] = {dot: new}
            if sealing is not None and sealing[1] and _tail.core(new) == sealing[0]:
                for node, data in sealing[1].items():
                    self._write(node, data, frozenset())
            return Record((new,), frozenset((dot,)))

    def _delete(self, key: str) -> None:
        with self._lock:
            self._data.pop(key, None)

    def _delete_if(self, key: str, version: Any) -> None:
        with self._lock:
            values = self._data.get(key)
            if values and frozenset(values) != version:
                raise ConflictError(f"key {key!r} changed since it was read")
            self._data.pop(key, None)

    def _delete_many(self, keys: Sequence[str]) -> None:
        with self._lock:
            for key in keys:
                self._data.pop(key, None)

    def _keys(self, prefix: str) -> Iterator[str]:
        with self._lock:
            found = [key for key in self._data if key.startswith(prefix)]
        return iter(found)
