"""An in-memory fake of Riak KV's HTTP API, modelled on the recorded transcripts in ``data/riak-http``.

Consistent types answer 412 to a stale or missing vclock and to
``If-None-Match: *`` on a live key; an ``allow_mult`` type keeps a write
whose vclock has not seen every value as a sibling, and answers them with a
300 (``multipart/mixed`` when asked); a deleted key is a tombstone (404 with
``X-Riak-Deleted``) that key listings and ``$key`` range queries keep listing
until it is reaped; ``$key`` pages are sorted and carry a continuation; a
type without secondary indexes answers them with bitcask's 500. Every
request is counted. ``conftest.py`` runs every suite on it as the store kind
``riak-fake``.
"""

from __future__ import annotations

import base64
import json
import threading
from collections import Counter
from urllib.parse import parse_qsl, unquote_to_bytes, urlsplit

import attrs

Reply = attrs.make_class("Reply", ["status", "headers", "data"])


class FakeRiak:
    """Riak KV's HTTP API in a dict: ``request`` like a urllib3 pool's, every request kept in ``sent``."""

    def __init__(
        self,
        consistent: tuple[str, ...] = ("mdss_strong",),
        unindexed: tuple[str, ...] = (),
        siblings: tuple[str, ...] = ("mdss_sibs",),
    ) -> None:
        self.consistent, self.unindexed, self.siblings = consistent, unindexed, siblings
        #: (type, key) -> {dot: value}: one value, or siblings on an allow_mult type; the vclock names the dots.
        self.objects: dict[tuple[str, str], dict[int, bytes]] = {}
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
                props = {"consistent": btype in self.consistent, "allow_mult": btype in self.siblings}
                return Reply(200, {}, json.dumps({"props": props}).encode())
            if rest == ["keys"]:
                return Reply(200, {}, json.dumps({"keys": list(self._keys(btype))}).encode())
            if rest[0] == "index":
                return self._index(btype, rest[2], rest[3], query)
            if method == "PUT":
                return self._put(btype, rest[1], headers, body or b"", query.get("returnbody") == "true")
            return getattr(self, f"_{method.lower()}")(btype, rest[1], headers)

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

    def _vclock(self, btype: str, key: str) -> str:
        return "vc" + ".".join(map(str, self.objects[btype, key]))

    def _get(self, btype: str, key: str, headers: dict[str, str]) -> Reply:
        values = self.objects.get((btype, key))
        if values and len(values) == 1:
            (value,) = values.values()
            vclock = self._vclock(btype, key)
            return Reply(200, {"X-Riak-Vclock": vclock, "Content-Type": "application/octet-stream"}, value)
        if values:  # siblings: 10e as multipart/mixed (parts end where the next boundary begins), else 10d
            vclock, boundary = self._vclock(btype, key), b"FHL81EPJVoGUZKRjwlSBAANYD3y"
            if "multipart/mixed" in headers.get("Accept", ""):
                parts = [
                    b"\r\n--%s\r\nContent-Type: application/octet-stream\r\nEtag: %d\r\n\r\n" % (boundary, dot) + v
                    for dot, v in values.items()
                ]
                body = b"".join(parts) + b"\r\n--%s--\r\n" % boundary
                return Reply(
                    300,
                    {"X-Riak-Vclock": vclock, "Content-Type": f"multipart/mixed; boundary={boundary.decode()}"},
                    body,
                )
            body = b"Siblings:\n" + b"".join(b"%d\n" % dot for dot in values)
            return Reply(300, {"X-Riak-Vclock": vclock, "Content-Type": "text/plain"}, body)
        if (btype, key) in self.tombstones and btype not in self.consistent:  # 09a, 17d
            return Reply(404, {"X-Riak-Vclock": "tomb", "X-Riak-Deleted": "true"}, b"not found\n")
        # A deleted key of a consistent type answers a plain 404, without X-Riak-Deleted (15m).
        return Reply(404, {}, b"not found\n")

    def _put(self, btype: str, key: str, headers: dict[str, str], body: bytes, returnbody: bool) -> Reply:
        current = self.objects.get((btype, key), {})
        vclock = headers.get("X-Riak-Vclock")
        if headers.get("If-None-Match") == "*" and current:  # 06a, 15c
            return Reply(412, {}, b"<html>412 Precondition Failed</html>")
        if btype in self.consistent and vclock != (self._vclock(btype, key) if current else None):
            return Reply(412, {}, b"<html>412 Precondition Failed</html>")  # a stale, missing or extra vclock: 15f, 15g
        self._clock += 1
        if btype in self.siblings:  # 10c, 11a: the values the vclock has seen are replaced, the others kept
            seen = {int(dot) for dot in vclock[2:].split(".")} if vclock else set()
            values = {dot: v for dot, v in current.items() if dot not in seen}
        else:  # 05b: a write without vclock overwrites
            values = {}
        values[self._clock] = body
        self.objects[btype, key] = values
        self.tombstones.discard((btype, key))
        if returnbody:  # 03b, 15e: 200 with the value and the vclock a later GET gives (15h)
            return self._get(btype, key, headers)
        return Reply(204, {}, b"")

    def _delete(self, btype: str, key: str, headers: dict[str, str]) -> Reply:
        current = self.objects.get((btype, key))
        vclock = headers.get("X-Riak-Vclock")
        if btype in self.consistent and vclock is not None and vclock != (current and self._vclock(btype, key)):
            # 15j: a stale vclock answers 412; Riak's conditional delete (riak_ensemble ksafe_delete, a kupdate
            # to notfound) compares it with what the key holds, so also when the key is gone (not recorded)
            return Reply(412, {}, b"<html>412 Precondition Failed</html>")
        if current is None:
            return Reply(404, {}, b"not found\n")  # 08b
        del self.objects[btype, key]
        self.tombstones.add((btype, key))
        return Reply(204, {}, b"")

    def close(self) -> None:
        pass
