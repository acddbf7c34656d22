"""The Riak store's HTTP layer against transcripts recorded from a real Riak KV 3.2.3 node.

A replay server on a loopback port answers each request with the recorded
response, byte for byte, and keeps what it received, so the tests check both
what the store sends (method, encoded path, conditional headers, vclocks)
and how it reads what Riak answers (404s, tombstones, 300 multipart
siblings, 412s, error statuses).
"""

from __future__ import annotations

import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import attrs
import pytest
import urllib3
from redis_servers import free_port

import mdss
from mdss.stores.riak import RiakStore, parse_multipart

#: Copied from the project's shared/riak-http (see its README.md there): test data, not code.
TRANSCRIPTS = Path(__file__).parent / "data" / "riak-http"

SMALL = bytes.fromhex("0001026d647373feff")
BA = bytes.fromhex("000d0aff62696e2d41")
BB = bytes.fromhex("0d0a2d2d0062696e2d427f")


@attrs.frozen
class Exchange:
    method: str
    path: str
    request_headers: dict[str, str]
    status: int
    reason: str
    headers: list[tuple[str, str]]
    body: bytes


def load(name: str) -> Exchange:
    """Parse one transcript file (format in shared/riak-http/README.md)."""
    (path,) = TRANSCRIPTS.glob(f"{name}*.txt")
    data = path.read_bytes()
    trace = data[data.index(b"=== curl -v TRACE") : data.index(b"=== RESPONSE")].decode()
    sent = [line[2:] for line in trace.splitlines() if line.startswith("> ")]
    method, target, _ = sent[0].split(" ")
    request_headers = dict(line.split(": ", 1) for line in sent[1:] if ": " in line)
    response = data[data.index(b"\n", data.index(b"=== RESPONSE")) + 1 :]
    head, _, rest = response.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode().split("\r\n")
    _, status, reason = status_line.split(" ", 2)
    headers = [tuple(line.split(": ", 1)) for line in header_lines]
    if b"body hex (one line): " in rest:
        body = bytes.fromhex(re.search(rb"body hex \(one line\): ([0-9a-f]*)", rest).group(1).decode())
    else:
        size = re.search(rb"=== END \(response body: (\d+) bytes", rest)
        length = dict((k.lower(), v) for k, v in headers).get("content-length")  # the 17*/18* files give no size
        body = rest[: int(size.group(1)) if size else int(length or 0)]
    return Exchange(method, target, request_headers, int(status), reason, headers, body)  # type: ignore[arg-type]


class Replay:
    """A loopback HTTP server that answers with recorded exchanges, in order, and records the requests."""

    def __init__(self, *names: str | Exchange) -> None:
        self.script = [load(name) if isinstance(name, str) else name for name in names]
        self.received: list[tuple[str, str, dict[str, str], bytes]] = []
        replay = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                replay.received.append((self.command, self.path, dict(self.headers), body))
                if not replay.script:
                    self.send_error(599, "the test scripted no more exchanges")
                    return
                exchange = replay.script.pop(0)
                self.send_response_only(exchange.status, exchange.reason)
                for name, value in exchange.headers:
                    if name.lower() not in ("content-length", "transfer-encoding", "date", "server"):
                        self.send_header(name, value)
                self.send_header("Content-Length", str(len(exchange.body)))
                self.end_headers()
                self.wfile.write(exchange.body)

            do_GET = do_PUT = do_POST = do_DELETE = _answer

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.01,), daemon=True)
        self.thread.start()

    def store(self, **options) -> RiakStore:
        options = {"bucket": "ref", "check_types": False, "retries": 0, "notfound_retries": 0, **options}
        return RiakStore("127.0.0.1", self.server.server_address[1], **options)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def replay():
    servers: list[Replay] = []

    def start(*names: str | Exchange) -> Replay:
        servers.append(Replay(*names))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


def sent(replay: Replay, n: int = -1) -> tuple[str, str, dict[str, str], bytes]:
    return replay.received[n]


# -- reads ---------------------------------------------------------------------------


def test_get_missing_is_none(replay) -> None:
    r = replay("02-")
    assert r.store().fetch("mdss_strong", "never-written") is None
    method, path, _, _ = sent(r)
    assert (method, path) == ("GET", "/types/mdss_strong/buckets/ref/keys/never-written?timeout=10000")


def test_get_existing_with_vclock(replay) -> None:
    r = replay("04-")
    record = r.store().fetch("mdss_nodes", "obj1")
    assert record.values == (SMALL,) and record.version == dict(load("04-").headers)["X-Riak-Vclock"]


def test_tombstone_is_absent(replay) -> None:
    assert replay("09a-").store().fetch("mdss_nodes", "obj1") is None


def test_siblings_as_multipart(replay) -> None:
    r = replay("10e-")
    record = r.store().fetch("mdss_sibs", "s1")
    assert record.values == (b"sibling-A", b"sibling-B")
    assert record.version == dict(load("10e-").headers)["X-Riak-Vclock"]
    assert "multipart/mixed" in sent(r)[2]["Accept"]
    with pytest.raises(mdss.SiblingsError):
        _ = record.value


def test_binary_siblings_byte_for_byte(replay) -> None:
    record = replay("10i-").store().fetch("mdss_sibs", "s2")
    assert sorted(record.values) == sorted([BA, BB])  # values holding CR LF and "--" survive


def test_siblings_without_multipart_are_an_error(replay) -> None:
    with pytest.raises(mdss.StoreError, match="300"):
        replay("10d-").store().fetch("mdss_sibs", "s1")


def test_parse_multipart_skips_tombstone_parts() -> None:
    body = b"\r\n--B\r\nX-Riak-Deleted: true\r\n\r\n\r\n--B\r\nContent-Type: x\r\n\r\nv\r\n\r\n--B--\r\n"
    assert parse_multipart("multipart/mixed; boundary=B", body) == [b"v\r\n"]


def test_encoded_keys_and_listing(replay) -> None:
    r = replay("13a-", "13b-", "13c-")
    store = r.store(bucket="enc")
    store.store("mdss_nodes", "set/1 n:é", b"key-with-specials")
    assert sent(r)[1] == "/types/mdss_nodes/buckets/enc/keys/set%2F1%20n%3A%C3%A9?timeout=10000"
    assert sent(r)[2]["Content-Type"] == "application/octet-stream"
    assert store.fetch("mdss_nodes", "set/1 n:é").value == b"key-with-specials"
    assert store.list_keys("mdss_nodes") == ["set/1 n:é"]
    assert sent(r)[1] == "/types/mdss_nodes/buckets/enc/keys?keys=true&timeout=10000"


# -- writes --------------------------------------------------------------------------


def test_put_sends_octet_stream_and_vclock(replay) -> None:
    r = replay("05-")
    vclock = load("05-").request_headers["X-Riak-Vclock"]
    r.store().store("mdss_nodes", "obj1", b"node-v2\x00\x10\x80", vclock=vclock)
    method, path, headers, body = sent(r)
    assert (method, headers["X-Riak-Vclock"], body) == ("PUT", vclock, b"node-v2\x00\x10\x80")


def test_create_if_absent(replay) -> None:
    r = replay("06b-", "06a-")
    store = r.store()
    store.put_if("mdss_nodes", "fresh", b"x", None)
    assert sent(r)[2]["If-None-Match"] == "*"
    with pytest.raises(mdss.ConflictError, match="412"):
        store.put_if("mdss_nodes", "obj1", b"x", None)


def test_strongly_consistent_compare_and_set(replay) -> None:
    r = replay("15b-", "15c-", "15d-", "15e-", "15f-", "15g-")
    store = r.store()
    store.put_if("mdss_strong", "c1", b"strong-v1", None)
    with pytest.raises(mdss.ConflictError):
        store.put_if("mdss_strong", "c1", b"again", None)
    current = store.fetch("mdss_strong", "c1")
    store.put_if("mdss_strong", "c1", b"strong-v2", current.version)
    assert sent(r)[2]["X-Riak-Vclock"] == current.version and "If-None-Match" not in sent(r)[2]
    with pytest.raises(mdss.ConflictError):  # the stale vclock of the first read
        store.put_if("mdss_strong", "c1", b"strong-v3-stale", current.version)
    with pytest.raises(mdss.StoreError, match="412"):  # a plain PUT is no compare-and-set: 412 is an error
        store.store("mdss_strong", "c1", b"strong-v4-novclock")


def test_cas_returns_the_vclock_written(replay) -> None:
    """``returnbody=true`` makes Riak answer the new vclock (15e), the one a later GET gives (15h): the next
    compare-and-set of a writer that holds the head needs no read."""
    r = replay("15e-", "15b-")
    store = r.store(timeout=3, quorum={"w": "quorum"})
    written = store.cas("app:s:h", b"strong-v2", load("15e-").request_headers["X-Riak-Vclock"])
    assert written == dict(load("15e-").headers)["X-Riak-Vclock"] == dict(load("15h-").headers)["X-Riak-Vclock"]
    assert sent(r)[1] == "/types/mdss_strong/buckets/ref/keys/app%3As%3Ah?w=quorum&returnbody=true&timeout=3000"
    assert store.cas("app:t:h", b"strong-v1", None) is None  # a 204 without a vclock: the store cannot tell
    assert sent(r)[2]["If-None-Match"] == "*" and "returnbody=true" in sent(r)[1]


def test_delete_with_vclock_and_missing(replay) -> None:
    r = replay("08a-", "08b-", "15j-")
    store = r.store()
    vclock = load("08a-").request_headers["X-Riak-Vclock"]
    store.remove("mdss_nodes", "obj1", vclock=vclock)
    assert (
        sent(r)[:2] == ("DELETE", "/types/mdss_nodes/buckets/ref/keys/obj1?timeout=10000")
        and sent(r)[2]["X-Riak-Vclock"] == vclock
    )
    store.remove("mdss_nodes", "never-written")  # 404: already absent
    with pytest.raises(mdss.ConflictError):
        store.remove("mdss_strong", "c1", vclock="stale")


def test_a_conditional_delete_of_a_head_gone_meanwhile_is_no_conflict(replay) -> None:
    """A consistent type answers 412 to a stale vclock (15j), and the vclock of a head deleted meanwhile is
    stale too: the key is read back, absent (15m) is done, present (15k) is the conflict."""
    r = replay("15j-", "15m-", "15j-", "15k-")
    store = r.store()
    stale = load("15j-").request_headers["X-Riak-Vclock"]
    store.delete_if("app:s:h", stale)
    with pytest.raises(mdss.ConflictError):
        store.delete_if("app:s:h", stale)
    assert [method for method, *_ in r.received] == ["DELETE", "GET", "DELETE", "GET"]
    assert store.stats.deletes == 1 and store.stats.conflicts == 1


# -- errors --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, call, error, text",
    [
        ("16a-", lambda s: s.fetch("nosuchtype", "k1"), mdss.StoreError, "404: Unknown bucket type: nosuchtype"),
        ("16b-", lambda s: s.store("nosuchtype", "k1", b"x"), mdss.StoreError, "404: Unknown bucket type"),
        ("16e-", lambda s: s.store("mdss_nodes", "noct", b"x"), mdss.StoreError, "400: Missing Content-Type"),
        ("14e-", lambda s: s.store("mdss_nodes", "quorum1", b"x"), mdss.StoreError, "400: Specified w/dw/pw"),
        ("14f-", lambda s: s.fetch("mdss_nodes", "quorum1"), mdss.StoreError, "r query parameter must be"),
        (
            "16d-",
            lambda s: s.store("mdss_nodes", "badvc", b"x", vclock="bad"),
            mdss.StoreUnavailableError,
            "status 500",
        ),
        (
            "14g-",
            lambda s: s.store("mdss_nodes", "quorum1", b"x"),
            mdss.StoreUnavailableError,
            "node_confirms-value unsatisfied",
        ),
    ],
)
def test_error_statuses_name_status_and_body(replay, name, call, error, text) -> None:
    with pytest.raises(error, match=re.escape(text)):
        call(replay(name).store())


def test_5xx_is_retried_then_unavailable(replay) -> None:
    r = replay("14g-", "14g-", "14g-")
    with pytest.raises(mdss.StoreUnavailableError, match="503"):
        r.store(retries=2, backoff=0.001).store("mdss_nodes", "quorum1", b"x")
    assert len(r.received) == 3


def test_unreachable_node() -> None:
    with pytest.raises(mdss.StoreUnavailableError, match="Riak at"):
        RiakStore("127.0.0.1", free_port(), retries=1, backoff=0.001, timeout=1)


def test_a_conditional_put_that_never_connects_is_refused() -> None:
    """No connection made, nothing sent: StoreRefusedError (safe to retry), not a doubt."""
    store = RiakStore("127.0.0.1", free_port(), retries=1, backoff=0.001, timeout=1, check_types=False)
    with pytest.raises(mdss.StoreRefusedError, match="never reached Riak"):
        store.put_if("mdss_strong", "h", b"x", None)


# -- bucket types ------------------------------------------------------------------------


def test_types_are_checked_on_open(replay) -> None:
    r = replay("00c-", "00b-")
    r.store(check_types=True)
    assert [p for _, p, _, _ in r.received] == [
        "/types/mdss_strong/buckets/ref/props?timeout=10000",
        "/types/mdss_sibs/buckets/ref/props?timeout=10000",
    ]


def test_heads_type_that_is_not_consistent_is_refused(replay) -> None:
    with pytest.raises(mdss.StoreError, match=r"consistent=.*riak-admin bucket-type create mdss_nodes"):
        replay("00a-").store(check_types=True, heads_type="mdss_nodes")


def test_missing_heads_type_is_refused(replay) -> None:
    with pytest.raises(mdss.StoreError, match="does not exist; create it: riak-admin bucket-type create nosuchtype"):
        replay("16c-").store(check_types=True, heads_type="nosuchtype")


# -- routing -------------------------------------------------------------------------------


def test_keys_route_to_bucket_types(replay) -> None:
    store = replay().store()
    assert store._type("app:board:h") == "mdss_strong"
    assert store._type("app:board:n:018f2a") == "mdss_nodes"
    assert store._type("app:board:t") == "mdss_sibs"


def test_url_options() -> None:
    store = RiakStore.from_url(
        "riak://127.0.0.1:1?heads_type=a&nodes_type=b&sibling_type=c&r=quorum&w=all"
        "&timeout=2&check_types=false&namespace=app"
    )
    assert store.types == {"heads": "a", "nodes": "b", "sibling": "c"}
    assert store.quorum == {"r": "quorum", "w": "all"} and store.timeout == 2 and store.namespace == "app"
    store.close()


# -- listing by key range (17*) -------------------------------------------------------


def one_type(replay: Replay, **options) -> RiakStore:
    """A store whose three roles share the recorded bucket type and bucket (so a listing is one type's)."""
    types = dict.fromkeys(("heads_type", "nodes_type", "sibling_type"), "mdss_nodes")
    return replay.store(bucket="lst", **types, **options)


def test_key_range_query_sends_the_recorded_request(replay) -> None:
    r = replay("17h-")
    assert one_type(r, page_size=1).index_page("mdss_nodes", "a0", "b9") == (["a1"], "g20AAAACYTE=")
    assert sent(r)[1] == load("17h-").path + "&timeout=10000"


def test_keys_pages_through_the_key_index_with_continuations(replay) -> None:
    last = attrs.evolve(load("17i-"), body=b'{"keys":[]}')  # made up: the empty page after a3 ends the range
    r = replay("17h-", "17i-", last)
    store = one_type(r, page_size=1)
    assert list(store.keys("a")) == ["a1", "a3"]
    range_path = "/types/mdss_nodes/buckets/lst/index/$key/a/a%F4%8F%BF%BF"
    assert [path for _, path, _, _ in r.received] == [
        f"{range_path}?max_results=1&timeout=10000",
        f"{range_path}?max_results=1&continuation=g20AAAACYTE%3D&timeout=10000",
        f"{range_path}?max_results=1&continuation=g20AAAACYTM%3D&timeout=10000",
    ]


def test_a_node_prefix_lists_the_nodes_type_only(replay) -> None:
    r = replay(attrs.evolve(load("17h-"), body=b'{"keys":["app:s:n:01","app:s:n:02","app:t:n:01"]}'))
    store = r.store()
    assert list(store.keys("app:s:n:")) == ["app:s:n:01", "app:s:n:02"]  # a key outside the prefix is dropped
    assert len(r.received) == 1 and sent(r)[1].startswith("/types/mdss_nodes/buckets/ref/index/$key/app%3As%3An%3A/")


def test_a_set_prefix_lists_every_type_merged_in_key_order(replay) -> None:
    pages = (b'{"keys":["s:h"]}', b'{"keys":["s:n:1"]}', b'{"keys":["s:a"]}')  # made up, one per type
    r = replay(*(attrs.evolve(load("17g-"), body=body) for body in pages))
    assert list(r.store().keys("s:")) == ["s:a", "s:h", "s:n:1"]
    assert [path.split("/")[2] for _, path, _, _ in r.received] == ["mdss_strong", "mdss_nodes", "mdss_sibs"]


#: Riak's answer to a secondary-index query on bitcask (its text as Riak's clients reported it; not recorded here).
NO_INDEXES = attrs.evolve(
    load("16d-"),
    body=b"<html><head><title>500 Internal Server Error</title></head><body><h1>Internal Server Error</h1>"
    b"The server encountered an error while processing this request:<br><pre>"
    b"{error,{error,{indexes_not_supported,riak_kv_bitcask_backend}}}</pre></body></html>",
)


def test_without_secondary_indexes_keys_fall_back_to_a_full_listing_with_one_warning(replay) -> None:
    r = replay(NO_INDEXES, "17a-", "17f-")
    store = one_type(r, retries=3)
    with pytest.warns(UserWarning, match="no secondary indexes.*full-bucket scans"):
        assert list(store.keys("a")) == ["a1", "a2", "a3"]  # the 500 is an answer, not retried
    assert list(store.keys("a")) == ["a1", "a3"]  # no second index query, no second warning
    assert [path.split("?")[1] for _, path, _, _ in r.received] == [
        "max_results=1000&timeout=10000",
        "keys=true&timeout=10000",
        "keys=true&timeout=10000",
    ]


# -- tombstones (17*) ----------------------------------------------------------------


def test_listings_include_tombstones_that_reads_call_absent(replay) -> None:
    r = replay("17e-", "17d-", "18a-", "17d-")
    store = one_type(r, notfound_retries=5, concurrency=1)
    assert sorted(store.index_page("mdss_nodes", "a1", "a9")[0]) == ["a1", "a2", "a3"]  # a2 was just deleted
    assert store.get_many(["a2", "a1"]) == [None, b"node-bytes"]  # a2: one read, no not-found retries
    assert store.get("a2") is None
    assert len(r.received) == 4


def test_a_missing_node_is_read_again(replay) -> None:
    r = replay("18b-", "18b-", "18a-")
    store = r.store(notfound_retries=2, backoff=0.001)
    assert store.get_many(["app:s:n:01"]) == [b"node-bytes"]  # two 404s, then the node arrived
    assert len(r.received) == 3


def test_a_missing_or_deleted_head_is_read_once(replay) -> None:
    """A strongly consistent type answers a deleted key with a plain 404, no X-Riak-Deleted (15m), like a
    key never written (15a): the ensemble leader's answer, final, so not re-read like a node's 404."""
    r = replay("15a-", "15m-")
    store = r.store(notfound_retries=5, backoff=0.001)
    assert store.get_many(["app:s|0.1:h", "app:s|1.2:h"]) == [None, None]  # two shards' heads, neither there
    assert len(r.received) == 2


# -- read parameters (18*) ------------------------------------------------------------


def test_node_reads_send_notfound_ok_false_r1_and_timeout(replay) -> None:
    r = replay("18a-", "18b-")
    store = r.store(bucket="lst", timeout=3)
    assert store.fetch("mdss_nodes", "n1").value == b"node-bytes"
    assert store.fetch("mdss_nodes", "never-written") is None
    assert [path for _, path, _, _ in r.received] == [load("18a-").path, load("18b-").path]  # as recorded


def test_every_node_read_of_get_many_sends_the_node_parameters(replay) -> None:
    r = replay("18a-", "18a-", "18a-")
    store = r.store(timeout=3, quorum={"r": "quorum", "pr": "1"})
    assert store.get_many([f"app:s:n:0{i}" for i in range(3)]) == [b"node-bytes"] * 3
    assert {path.split("?")[1] for _, path, _, _ in r.received} == {"r=1&notfound_ok=false&timeout=3000"}


def test_head_reads_keep_the_configured_quorum(replay) -> None:
    r = replay("15d-")
    r.store(timeout=3, quorum={"r": "quorum", "w": "all"}).get("app:s:h")
    assert sent(r)[1] == "/types/mdss_strong/buckets/ref/keys/app%3As%3Ah?r=quorum&timeout=3000"


def test_riak_refuses_a_bad_notfound_ok(replay) -> None:
    with pytest.raises(mdss.StoreError, match="400: notfound_ok query parameter must be true or false"):
        replay("18c-").store().fetch("mdss_strong", "n1")


# -- outcomes of a compare-and-set -------------------------------------------------------


def test_a_spurious_412_on_the_head_is_a_conflict(replay) -> None:
    """After an ensemble leader change, a vclock read before it gets a 412 though nobody wrote: a lost race."""
    r = replay("15f-")
    store = r.store(retries=3)
    with pytest.raises(mdss.ConflictError, match="412"):
        store.cas("app:s:h", b"strong-v3-stale", load("15f-").request_headers["X-Riak-Vclock"])
    assert len(r.received) == 1 and store.stats.conflicts == 1


def test_a_412_after_a_5xx_is_not_a_conflict(replay) -> None:
    """The 503'd attempt may have landed: the 412 may be its own write, so the key is read back."""
    r = replay("14g-", "15f-", "15d-")
    with pytest.raises(mdss.OutcomeUnknownError, match="may hold this write or a later one"):
        r.store(retries=3, backoff=0.001).cas("app:s:h", b"strong-v3-stale", "vclock-read")
    assert [method for method, *_ in r.received] == ["PUT", "PUT", "GET"]


def test_a_412_after_a_5xx_is_success_when_the_key_holds_the_value_written(replay) -> None:
    r = replay("14g-", "15f-", "15h-")
    store = r.store(retries=3, backoff=0.001)
    assert store.cas("app:s:h", b"strong-v2", "vclock-read") == dict(load("15h-").headers)["X-Riak-Vclock"]
    assert store.stats.writes == 1 and store.stats.conflicts == 0


class Scripted:
    """A transport answering from a script of recorded exchanges and exceptions (a reply lost in flight)."""

    Reply = attrs.make_class("Reply", ["status", "headers", "data"])

    def __init__(self, *script: str | Exception) -> None:
        self.script = [load(item) if isinstance(item, str) else item for item in script]
        self.sent: list[tuple[str, str]] = []

    def request(self, method: str, url: str, **_: object) -> object:
        self.sent.append((method, url))
        item = self.script.pop(0)
        if isinstance(item, Exception):
            raise item
        return self.Reply(item.status, dict(item.headers), item.body)

    def close(self) -> None:
        pass


def scripted(*script: str | Exception, **options) -> tuple[RiakStore, Scripted]:
    pool = Scripted(*script)
    return RiakStore(pool=pool, **{"check_types": False, "backoff": 0.001, **options}), pool


def test_a_412_after_a_lost_reply_is_not_a_conflict() -> None:
    lost = urllib3.exceptions.ProtocolError("Connection aborted.", ConnectionResetError())
    store, pool = scripted(lost, "15c-", "15d-")
    with pytest.raises(mdss.OutcomeUnknownError):
        store.cas("app:s:h", b"mine", None)
    assert [method for method, _ in pool.sent] == ["PUT", "PUT", "GET"]


def test_a_412_after_a_refused_connection_is_a_conflict() -> None:
    """A connection that was never made sent nothing: the 412 is a lost race."""
    refused = urllib3.exceptions.NewConnectionError(None, "Connection refused")  # type: ignore[arg-type]
    store, pool = scripted(refused, "15c-")
    with pytest.raises(mdss.ConflictError):
        store.cas("app:s:h", b"mine", None)
    assert len(pool.sent) == 2


def test_a_conditional_put_that_runs_out_of_retries_after_a_5xx_is_unknown() -> None:
    store, _ = scripted("14g-", "14g-", retries=1)
    with pytest.raises(mdss.OutcomeUnknownError, match="may or may not have been applied"):
        store.cas("app:s:h", b"mine", "vclock-read")


def test_reads_are_retried_within_the_time_budget() -> None:
    store, pool = scripted(*["14g-"] * 50, retry_budget=0.05, backoff=0.01)
    with pytest.raises(mdss.StoreUnavailableError, match="503"):
        store.get("app:s:h")
    assert 2 <= len(pool.sent) < 50


# -- options ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "query, name",
    [
        ("foo=1", "foo"),
        ("timeout=abc", "timeout"),
        ("timeout=0", "timeout"),
        ("retries=-1", "retries"),
        ("retries=1.5", "retries"),
        ("backoff=x", "backoff"),
        ("page_size=0", "page_size"),
        ("concurrency=0", "concurrency"),
        ("check_types=maybe", "check_types"),
        ("r=abc", "r"),
        ("w=0", "w"),
        ("bucket=", "bucket"),
    ],
)
def test_bad_url_options_are_named(query, name) -> None:
    with pytest.raises(mdss.InvalidArgumentError, match=rf"\b{name}\b"):
        mdss.open_store(f"riak://127.0.0.1:1?check_types=false&{query}")


def test_bad_keyword_options_are_named() -> None:
    with pytest.raises(mdss.InvalidArgumentError, match="timeout"):
        RiakStore(check_types=False, timeout="5")  # type: ignore[arg-type]
    with pytest.raises(mdss.InvalidArgumentError, match="unknown Riak store option 'retry'"):
        RiakStore.from_url("riak://127.0.0.1:1", retry=3)


def test_real_riak_node_runs_every_suite() -> None:
    """The whole sorted-set, top-N and contract suites run on Riak when MDSS_RIAK_URL is set."""
    import os

    if not os.environ.get("MDSS_RIAK_URL"):
        pytest.skip("no Riak node: set MDSS_RIAK_URL=riak://host:8098 to run every suite against one")
    from conftest import SELECTED

    assert "riak" in SELECTED
