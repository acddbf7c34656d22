"""The Erlang port's memory bounds: compressed terms inflate to a bounded size, and the bytes of requests
served at once are bounded too (a 2 MB frame of compressed zeros once grew the port by 1 GB)."""

from __future__ import annotations

import io
import os
import pathlib
import subprocess
import sys
import threading
import time
import tracemalloc
import zlib
from typing import Any

import pytest

import erlang
from mdss.port import MAX_TERM, PortServer
from mdss.stores.memory import MemoryStore

A = erlang.OtpErlangAtom


def request(op: str, args: Any, ref: Any = 1, compressed: bool = False) -> bytes:
    return erlang.term_to_binary((A("call"), ref, A(op), args), compressed=compressed)


def deflate_zeros(size: int) -> bytes:
    """``size`` zero bytes, deflated (about a thousandth of ``size``) without holding them all."""
    packer, chunk = zlib.compressobj(9), bytes(1 << 20)
    parts = [packer.compress(chunk[: min(len(chunk), size - at)]) for at in range(0, size, len(chunk))]
    return b"".join(parts) + packer.flush()


ZEROS = 256 << 20  # inflated: four times MAX_TERM
BOMB = deflate_zeros(ZEROS)


def reply(port: PortServer, frame: bytes) -> tuple[Any, ...]:
    return erlang.binary_to_term(port.handle(frame))


def error_kind(answer: tuple[Any, ...]) -> str:
    assert answer[0] == A("error"), answer
    return answer[2][0].value


def served_in_bounded_memory(port: PortServer, frame: bytes) -> tuple[tuple[Any, ...], int, float]:
    """The reply to ``frame``, the peak of Python allocations while serving it, and the time it took."""
    tracemalloc.start()
    try:
        start = time.monotonic()
        answer = reply(port, frame)
        took = time.monotonic() - start
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return answer, peak, took


@pytest.mark.parametrize(
    "declared",
    [ZEROS, MAX_TERM + 1, 100, 0],
    ids=["declares-all", "declares-one-over", "declares-less-than-it-holds", "declares-nothing"],
)
def test_a_compressed_bomb_is_refused_quickly_and_in_bounded_memory(declared: int) -> None:
    """Whatever size a bomb declares: over the limit, refused before inflating; under it, the inflation
    stops one byte past the declared size. Either way an error reply, and a few MB at most."""
    port = PortServer(MemoryStore())
    frame = b"\x83P" + declared.to_bytes(4, "big") + BOMB
    answer, peak, took = served_in_bounded_memory(port, frame)
    assert error_kind(answer) == "InvalidArgumentError"
    assert answer[1] is None  # no Ref could be read from it
    assert peak < len(frame) + (4 << 20)
    assert took < 2
    assert reply(port, request("len", [erlang.OtpErlangBinary(b"s")], 2)) == (A("reply"), 2, 0)  # still serving


def test_a_compressed_term_nested_in_a_request_is_refused() -> None:
    """erlang-py inflates a compressed term anywhere in a term (Erlang makes them only whole), without a
    bound: the port refuses those."""
    port = PortServer(MemoryStore())
    whole = request("len", 0)
    assert whole.endswith(b"a\x00")  # the arguments: the small integer 0
    frame = whole[:-2] + b"P" + ZEROS.to_bytes(4, "big") + BOMB
    answer, peak, _ = served_in_bounded_memory(port, frame)
    assert error_kind(answer) == "InvalidArgumentError"
    assert "nested" in answer[2][1].value.decode()
    assert peak < len(frame) + (4 << 20)
    assert erlang.binary_to_term(erlang.term_to_binary([1, 2], compressed=True)) == [1, 2]  # others unaffected


def test_a_legit_compressed_request_is_served_up_to_the_limit() -> None:
    port = PortServer(MemoryStore(), max_term=4096)
    members = [erlang.OtpErlangBinary(b"m%d" % i) for i in range(10)]
    add = request("add_many", [erlang.OtpErlangBinary(b"s"), [(m, 1) for m in members]], 1, compressed=True)
    assert add[:2] == b"\x83P"
    assert reply(port, add)[:2] == (A("reply"), 1)
    assert reply(port, request("len", [erlang.OtpErlangBinary(b"s")], 2, compressed=True)) == (A("reply"), 2, 10)
    overhead = len(request("len", [erlang.OtpErlangBinary(b"")], 3)) - 1

    def inflating_to(size: int) -> bytes:
        term = request("len", [erlang.OtpErlangBinary(b"x" * (size - overhead))], 3)[1:]
        assert len(term) == size
        return b"\x83P" + size.to_bytes(4, "big") + zlib.compress(term)

    assert reply(port, inflating_to(4096)) == (A("reply"), 3, 0)
    answer = reply(port, inflating_to(4097))
    assert error_kind(answer) == "InvalidArgumentError"
    assert "over the 4096-byte limit" in answer[2][1].value.decode()


def test_a_corrupt_compressed_request_is_an_error_reply() -> None:
    port = PortServer(MemoryStore())
    good = request("len", [erlang.OtpErlangBinary(b"s")], compressed=True)
    for frame in (good[:-3], good[:6] + b"garbage", good + b"\x00", b"\x83P\x00\x00"):
        assert error_kind(reply(port, frame)) == "InvalidArgumentError"


class _Recording(PortServer):
    """A port whose calls take a while and note how many run at once."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.running, self.most_running, self._lock = 0, 0, threading.Lock()

    def handle(self, frame: bytes) -> bytes:
        with self._lock:
            self.running += 1
            self.most_running = max(self.most_running, self.running)
        time.sleep(0.02)
        try:
            return super().handle(frame)
        finally:
            with self._lock:
                self.running -= 1


def serve_all(port: PortServer, frames: list[bytes]) -> list[Any]:
    stream = b"".join(len(f).to_bytes(4, "big") + f for f in frames)
    out = io.BytesIO()
    port.serve(io.BytesIO(stream), out)
    data, replies, at = out.getvalue(), [], 0
    while at < len(data):
        size = int.from_bytes(data[at : at + 4], "big")
        replies.append(erlang.binary_to_term(data[at + 4 : at + 4 + size]))
        at += 4 + size
    return replies


def test_concurrent_big_frames_stay_within_the_budget() -> None:
    """Frames of 200 KB, some compressed (counted at their inflated size too), 8 threads, a 1 MB budget:
    never more than 1 MB in flight, several at once, every request answered."""
    budget = 1 << 20
    port = _Recording(MemoryStore(), threads=8, in_flight=budget)
    big = erlang.OtpErlangBinary(b"x" * 200_000)
    frames = [request("len", [big, 1, 2], ref, compressed=ref % 2 == 1) for ref in range(30)]
    replies = serve_all(port, frames)
    assert sorted(r[1] for r in replies) == list(range(30))
    assert all(error_kind(r) == "InvalidArgumentError" for r in replies)  # len takes one argument
    assert port.in_flight.most <= budget
    assert 2 <= port.most_running < 8  # the budget, not the threads, bounded it
    assert port.in_flight.used == 0


def test_a_frame_bigger_than_the_budget_is_served_alone() -> None:
    port = _Recording(MemoryStore(), threads=4, in_flight=100_000)
    big = erlang.OtpErlangBinary(b"x" * 200_000)
    small = erlang.OtpErlangBinary(b"s")
    frames = [request("len", [small], 0), request("len", [big], 1), request("len", [small], 2)]
    replies = serve_all(port, frames)
    assert sorted(r[1] for r in replies) == [0, 1, 2]
    assert all(r[0] == A("reply") for r in replies)
    assert port.in_flight.used == 0


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads the peak RSS from /proc")
def test_a_real_port_survives_bombs_without_growing() -> None:
    """Through the real program: bombs (one declaring its size, one lying about it, one nested) get error
    replies, the next request its answer, and the port's peak resident memory stays far below what one bomb
    inflates to (256 MB)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "mdss.port", "--store", "memory://"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdin and proc.stdout
    nested = request("len", 0)[:-2] + b"P" + ZEROS.to_bytes(4, "big") + BOMB
    frames = [
        b"\x83P" + ZEROS.to_bytes(4, "big") + BOMB,
        b"\x83P" + (1000).to_bytes(4, "big") + BOMB,
        nested,
        request("len", [erlang.OtpErlangBinary(b"s")], 7),
    ]
    try:
        proc.stdin.write(b"".join(len(f).to_bytes(4, "big") + f for f in frames))
        proc.stdin.flush()
        replies = []
        for _ in frames:
            size = int.from_bytes(proc.stdout.read(4), "big")
            replies.append(erlang.binary_to_term(proc.stdout.read(size)))
        status = pathlib.Path(f"/proc/{proc.pid}/status").read_text()
        peak_kb = int(next(line for line in status.splitlines() if line.startswith("VmHWM:")).split()[1])
    finally:
        proc.stdin.close()
        proc.wait(30)
    assert sorted(error_kind(r) for r in replies if r[0] == A("error")) == ["InvalidArgumentError"] * 3
    assert (A("reply"), 7, 0) in replies
    assert peak_kb < 100_000, peak_kb  # about 25 MB; one bomb inflated is 256 MB


def test_an_integer_of_over_255_bytes_is_refused_before_it_is_decoded() -> None:
    """erlang-py decodes a large integer (LARGE_BIG_EXT) in time quadratic in its length: a helper's probe held a
    thread 25 s with a 300 KB one. No argument can be one (scores are 64-bit): refused, at once; smaller ones decode."""
    port = PortServer(MemoryStore())
    whole = request("len", 0)
    assert whole.endswith(b"a\x00")
    frame = whole[:-2] + b"o" + (300_000).to_bytes(4, "big") + b"\x00" + b"\x01" * 300_000
    start = time.monotonic()
    answer = reply(port, frame)
    assert error_kind(answer) == "InvalidArgumentError" and "255 bytes" in answer[2][1].value.decode()
    assert answer[1] == 1  # under its Ref: a caller waits for no reply that never comes (a helper's probe)
    assert time.monotonic() - start < 1
    assert reply(port, request("len", [erlang.OtpErlangBinary(b"s")], 2)) == (A("reply"), 2, 0)  # still serving
    assert erlang.binary_to_term(erlang.term_to_binary(2**2000)) == 2**2000  # 251 bytes: still decoded


@pytest.mark.parametrize("compressed", [False, True])
def test_a_request_refused_as_it_decodes_is_answered_under_its_ref(compressed) -> None:
    """The Erlang client matches replies by Ref and drops any other: a request refused as it decodes was answered under
    ``undefined``, so its caller waited out its timeout, or for ever (a helper's probe). Now under its Ref where that
    reads alone; ``undefined`` only where the Ref itself is what fails."""
    port = PortServer(MemoryStore())
    ref, name, slot = (A("ref"), 42), erlang.OtpErlangBinary(b"s"), erlang.OtpErlangBinary(b"SLOT")
    nested = b"l\x00\x00\x00\x01" * 2000 + b"a\x01" + b"j" * 2000  # a member 2,000 lists deep
    frames = [
        request("add", [name, erlang.OtpErlangBinary(b"m"), 1 << 2100], ref, compressed),
        request("add", [name, slot, 1], ref).replace(erlang.term_to_binary(slot)[1:], nested),
    ]
    if compressed:
        frames[1] = bytes((131, 80)) + (len(frames[1]) - 1).to_bytes(4, "big") + zlib.compress(frames[1][1:])
    for frame in frames:
        answer = reply(port, frame)
        assert error_kind(answer) == "InvalidArgumentError" and answer[1] == ref
    assert reply(port, request("len", [name], 1 << 2100))[1] is None  # the Ref itself refused: undefined
    assert reply(port, request("len", [name], 3)) == (A("reply"), 3, 0)


def test_a_set_read_before_it_exists_is_made_with_the_settings_a_later_request_gives() -> None:
    """A set read by its bare name before it existed stayed open with the default settings, so a later request to make
    it ``asc`` was refused for as long as the port ran (a helper's probe); a Python SortedSet made with them works."""
    port = PortServer(MemoryStore())
    name = erlang.OtpErlangBinary(b"race")
    assert reply(port, request("rank", [name, erlang.OtpErlangBinary(b"ann")])) == (A("reply"), 1, None)
    asc = (name, {A("order"): A("asc")})
    assert reply(port, request("add", [asc, erlang.OtpErlangBinary(b"ann"), 61], 2)) == (A("reply"), 2, True)
    assert reply(port, request("add", [asc, erlang.OtpErlangBinary(b"bob"), 59], 3)) == (A("reply"), 3, True)
    assert reply(port, request("rank", [name, erlang.OtpErlangBinary(b"bob")], 4)) == (A("reply"), 4, 1)
    desc = (name, {A("order"): A("desc")})  # stored asc now: the stored settings win
    assert error_kind(reply(port, request("len", [desc], 5))) == "SettingsMismatchError"
    # Two requests giving other settings before either made the set: the later one's handle was kept, and once the
    # other made the set, every request by its bare name failed for as long as the port ran (a review).
    other = erlang.OtpErlangBinary(b"lap")
    kept = port.sorted_set((other, {A("order"): A("asc")}))
    port.sorted_set((other, {A("order"): A("desc")}))
    kept.add("ann", 61)  # the first request's write makes the set, ascending
    assert error_kind(reply(port, request("add", [other, erlang.OtpErlangBinary(b"bob"), 59], 6))) == (
        "SettingsMismatchError"
    )
    assert reply(port, request("add", [other, erlang.OtpErlangBinary(b"bob"), 59], 7)) == (A("reply"), 7, True)
    assert reply(port, request("rank", [other, erlang.OtpErlangBinary(b"bob")], 8)) == (A("reply"), 8, 1)


def test_the_port_exits_quietly_when_the_vm_goes_away_with_a_reply_unsent() -> None:
    """The VM closed both pipes with a call in flight: the reply left in the port's buffered output made its last
    flush raise, and the port exited 1 with a traceback, where stderr carries only bugs' (a helper's probe)."""
    port = subprocess.Popen(
        [sys.executable, "-m", "mdss.port", "--store", "memory://"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    pairs = [(erlang.OtpErlangBinary(b"m%06d" % i), i) for i in range(20_000)]
    for frame in (
        request("add_many", [erlang.OtpErlangBinary(b"s"), pairs]),
        request("check", [erlang.OtpErlangBinary(b"s")], 2),
    ):
        port.stdin.write(len(frame).to_bytes(4, "big") + frame)
        port.stdin.flush()
        if len(frame) > 1000:
            size = int.from_bytes(port.stdout.read(4), "big")
            port.stdout.read(size)
    port.stdout.close()
    port.stdin.close()
    assert port.wait(60) == 0
    assert b"Traceback" not in port.stderr.read()
