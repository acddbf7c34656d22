"""The Riak store over an in-memory fake of Riak's HTTP API that counts every request.

The fake keeps what the transcripts in ``data/riak-http`` show a real node
do: consistent types answer 412 to a stale or missing vclock and to
``If-None-Match: *`` on a live key; a deleted key is a tombstone (404 with
``X-Riak-Deleted``) that key listings and ``$key`` range queries keep
listing until it is reaped; ``$key`` pages are sorted and carry a
continuation; a type without secondary indexes answers them with bitcask's
500. The store contract suite runs on it, and the whole-set maintenance
calls are shown to list one set by key range, never by a full-bucket scan.
"""

from __future__ import annotations

import base64
import json
import threading
from collections import Counter
from urllib.parse import parse_qsl, unquote_to_bytes, urlsplit

import attrs
import pytest
from test_store_contract import *  # noqa: F403  (the contract suite and its fixture k, run here on the fake)

import mdss
from mdss.stores.riak import RiakStore

Reply = attrs.make_class("Reply", ["status", "headers", "data"])


class FakeRiak:
    """Riak KV's HTTP API in a dict: ``request`` like a urllib3 pool's, every request kept in ``sent``."""

    def __init__(self, consistent: tuple[str, ...] = ("mdss_strong",), unindexed: tuple[str, ...] = ()) -> None:
        self.consistent, self.unindexed = consistent, unindexed
        self.objects: dict[tuple[str, str], tuple[bytes, str]] = {}  # (type, key) -> (value, vclock)
        self.tombstones: set[tuple[str, str]] = set()
        self.sent: list[tuple[str, str]] = []
        self._clock = 0
        self._lock = threading.Lock()

    def reap(self) -> None:
        """What Riak does ``delete_mode`` (3 s) after a delete: the tombstones go."""
        self.tombstones.clear()

    def listings(self) -> Counter[str]:
        """How many requests of each kind were sent: get, put, delete, index, full listing, props."""
        kinds: Counter[str] = Counter()
        for method, url in self.sent:
            path = urlsplit(url).path
            if "/index/" in path:
                kinds["index"] += 1
            elif path.endswith("/keys"):
                kinds["full listing"] += 1
            elif path.endswith("/props"):
                kinds["props"] += 1
            else:
                kinds[method.lower()] += 1
        return kinds

    def request(self, method: str, url: str, *, headers: dict[str, str], body: bytes | None, redirect: bool) -> Reply:
        with self._lock:
            self.sent.append((method, url))
            parts = urlsplit(url)
            query = dict(parse_qsl(parts.query))
            assert query.get("timeout", "").isdigit(), f"no timeout= on {url}"
            _, _, btype, _, _, *rest = [unquote_to_bytes(p).decode() for p in parts.path.split("/")]
            if rest == ["props"]:
                props = {"consistent": btype in self.consistent, "allow_mult": btype == "mdss_sibs"}
                return Reply(200, {}, json.dumps({"props": props}).encode())
            if rest == ["keys"]:
                return Reply(200, {}, json.dumps({"keys": list(self._keys(btype))}).encode())
            if rest[0] == "index":
                return self._index(btype, rest[2], rest[3], query)
            return getattr(self, f"_{method.lower()}")(btype, rest[1], headers, body or b"")

    def _index(self, btype: str, start: str, end: str, query: dict[str, str]) -> Reply:
        if btype in self.unindexed:
            return Reply(500, {}, b"<pre>{error,{error,{indexes_not_supported,riak_kv_bitcask_backend}}}</pre>")
        after = base64.b64decode(query["continuation"]).decode() if "continuation" in query else None
        keys = sorted(key for key in self._keys(btype) if start <= key <= end and (after is None or key > after))
        page = keys[: int(query["max_results"])]
        reply: dict[str, object] = {"keys": page}
        if len(page) == int(query["max_results"]):
            reply["continuation"] = base64.b64encode(page[-1].encode()).decode()
        return Reply(200, {}, json.dumps(reply).encode())

    def _keys(self, btype: str) -> set[str]:
        return {key for t, key in [*self.objects, *self.tombstones] if t == btype}

    def _get(self, btype: str, key: str, headers: dict[str, str], body: bytes) -> Reply:
        if (btype, key) in self.objects:
            value, vclock = self.objects[btype, key]
            return Reply(200, {"X-Riak-Vclock": vclock}, value)
        if (btype, key) in self.tombstones:
            return Reply(404, {"X-Riak-Vclock": "tomb", "X-Riak-Deleted": "true"}, b"not found\n")
        return Reply(404, {}, b"not found\n")

    def _put(self, btype: str, key: str, headers: dict[str, str], body: bytes) -> Reply:
        current = self.objects.get((btype, key))
        if headers.get("If-None-Match") == "*" and current is not None:
            return Reply(412, {}, b"<html>412 Precondition Failed</html>")
        if btype in self.consistent and headers.get("X-Riak-Vclock") != (current and current[1]):
            return Reply(412, {}, b"<html>412 Precondition Failed</html>")  # a stale, missing or extra vclock
        self._clock += 1
        self.objects[btype, key] = (body, f"vc{self._clock}")
        self.tombstones.discard((btype, key))
        return Reply(204, {}, b"")

    def _delete(self, btype: str, key: str, headers: dict[str, str], body: bytes) -> Reply:
        current = self.objects.get((btype, key))
        if current is None:
            return Reply(404, {}, b"not found\n")
        if btype in self.consistent and headers.get("X-Riak-Vclock") != current[1]:
            return Reply(412, {}, b"<html>412 Precondition Failed</html>")
        del self.objects[btype, key]
        self.tombstones.add((btype, key))
        return Reply(204, {}, b"")

    def close(self) -> None:
        pass


@pytest.fixture
def store() -> mdss.Store:
    """Replaces the contract suite's fixture: a Riak store on a fresh fake (bucket types checked on open)."""
    return RiakStore(pool=FakeRiak(), backoff=0.001)


def test_tombstones_are_listed_but_read_as_absent(store, k) -> None:
    store.put_many({k("s:n:1"): b"a", k("s:n:2"): b"b"})
    store.delete(k("s:n:1"))
    assert list(store.keys(k("s:n:"))) == [k("s:n:1"), k("s:n:2")]  # as Riak does until the reap
    assert store.get_many([k("s:n:1"), k("s:n:2")]) == [None, b"b"]
    store.pool.reap()
    assert list(store.keys(k("s:n:"))) == [k("s:n:2")]


def test_a_tombstone_costs_one_read(store, k) -> None:
    store.put(k("s:n:1"), b"a")
    store.delete(k("s:n:1"))
    before = len(store.pool.sent)
    store.notfound = attrs.evolve(store.notfound, max_attempts=10)
    assert store.get_many([k("s:n:1")]) == [None]
    assert len(store.pool.sent) == before + 1


def test_pages_of_a_large_listing(k) -> None:
    fake = FakeRiak()
    store = RiakStore(pool=fake, page_size=7)
    keys = sorted(k(f"s:n:{i:03}") for i in range(50))
    store.put_many(dict.fromkeys(keys, b"x"))
    store.put(k("t:n:1"), b"another set")
    assert list(store.keys(k("s:n:"))) == keys
    assert fake.listings()["index"] == 8  # 50 keys, 7 a page: 7 full pages and one short one


def board_on(fake: FakeRiak) -> mdss.SortedSet:
    board = mdss.SortedSet(RiakStore(pool=fake, backoff=0.001), "season", chunk_size=4, gc_grace=0)
    for round_ in range(5):
        board.add_many({f"p{i}": i * round_ for i in range(40)})
    return board


def test_maintenance_of_one_set_never_lists_a_whole_bucket() -> None:
    fake = FakeRiak()
    other = mdss.SortedSet(RiakStore(pool=fake), "other", chunk_size=4)
    other.add_many({f"q{i}": i for i in range(100)})  # keys a full listing would have to read
    board = board_on(fake)
    fake.sent.clear()
    board.unreferenced()
    board.gc(min_age=0, wait=False)
    board.check()
    board.drop()
    counts = fake.listings()
    assert counts["full listing"] == 0 and counts["index"] >= 3
    assert all("/index/$key/mdss%3Aseason%3A" in url for _, url in fake.sent if "/index/" in url)


def test_without_indexes_a_listing_warns_once_and_scans(k) -> None:
    fake = FakeRiak(unindexed=("mdss_nodes",))
    store = RiakStore(pool=fake, backoff=0.001)
    store.put_many({k("s:n:1"): b"a", k("x:n:1"): b"b"})
    with pytest.warns(UserWarning, match="'mdss_nodes' has no secondary indexes"):
        assert list(store.keys(k("s:n:"))) == [k("s:n:1")]
    assert list(store.keys(k("s:n:"))) == [k("s:n:1")]
    assert fake.listings()["full listing"] == 2 and fake.listings()["index"] == 1
