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
    if b"body hex (one line): " in rest:
        body = bytes.fromhex(re.search(rb"body hex \(one line\): ([0-9a-f]*)", rest).group(1).decode())
    else:
        size = re.search(rb"=== END \(response body: (\d+) bytes", rest)
        body = rest[: int(size.group(1))] if size else b""
    headers = [tuple(line.split(": ", 1)) for line in header_lines]
    return Exchange(method, target, request_headers, int(status), reason, headers, body)  # type: ignore[arg-type]


class Replay:
    """A loopback HTTP server that answers with recorded exchanges, in order, and records the requests."""

    def __init__(self, *names: str) -> None:
        self.script = [load(name) for name in names]
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

    def start(*names: str) -> Replay:
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


def test_real_riak_node_runs_every_suite() -> None:
    """The whole sorted-set, top-N and contract suites run on Riak when MDSS_RIAK_URL is set."""
    import os

    if not os.environ.get("MDSS_RIAK_URL"):
        pytest.skip("no Riak node: set MDSS_RIAK_URL=riak://host:8098 to run every suite against one")
    from conftest import SELECTED

    assert "riak" in SELECTED
