"""The Erlang port server: mdss for an Erlang VM, over the External Term Format on stdin and stdout.

Erlang starts it with ``open_port({spawn_executable, Python}, [{packet, 4}, binary, {args, ["-m", "mdss.port",
"--store", Url]}])`` (as ``erlang/src/mdss.erl`` does): frames of a 4-byte big-endian length and ``term_to_binary``
data. A request ``{call, Ref, Op, Args}`` is answered ``{reply, Ref, Result}`` or ``{error, Ref, {Kind, Message}}``
(``Kind`` the exception's class name as an atom, ``Message`` a binary), as requests finish on a thread pool: match
replies by ``Ref``. Nothing a caller sends stops the server (a frame without a readable ``Ref`` gets
``{error, undefined, ...}``; a request refused as it decodes, such as one holding an integer of over 255 bytes, is
answered under its ``Ref`` where that reads alone). Memory is bounded: frames of at most :data:`MAX_FRAME` bytes,
compressed terms inflating to at most :data:`MAX_TERM` (checked on the declared size first), none nested in a
request, and at most :data:`IN_FLIGHT` bytes of requests served at once (past it the port reads no more until calls
finish). Decoded, a request takes up to about 80 times its bytes (a frame of 16 million empty lists, one byte each:
1.3 GB), so the port's bound is about 80 times :data:`IN_FLIGHT` at worst, a few times it for real requests; no
integer of over 255 bytes is decoded (erlang-py's decoding of one is quadratic).

Terms (mdss._port_terms): members, set names and cursors are UTF-8 binaries; scores integers, floats, ``inf`` or
``'-inf'``; an entry is ``{Member, Score, Rank}``; ``None`` is ``undefined``. ``Args`` starts with the set: a name, or
``{Name, #{order => asc | desc, chunk_size => N}}`` to create it so; top-N sets (``topn_*``) ``Name`` (n 10, desc) or
``{Name, #{n => N, order => Order}}``; leaderboards (``board_*``) ``Name`` (stored) or
``{Name, #{columns => ..., windows => ...}}``, rows being maps of fields to values. Each is opened once and kept.
:data:`OPS` lists every operation; erlang/README.md documents them and the Erlang client.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import threading
import traceback
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, BinaryIO, NamedTuple

from . import open_store
from ._parse import integer
from ._port_terms import (
    _READ,
    MAX_TERM,
    NO_REF,
    OtpErlangAtom,
    OtpErlangBinary,
    Unreadable,
    _atom,
    _board_options,
    _choice,
    _data,
    _int,
    _list,
    _member,
    _member_or_score,
    _name,
    _number,
    _options,
    _pairs,
    _rows,
    _score,
    _show,
    _text,
    _values,
    _view,
    compressed_size,
    decode,
    term_to_binary,
    to_term,
)
from ._sortedset import SortedSet
from ._union import intersection, union
from .exceptions import InvalidArgumentError, MdssError, SettingsMismatchError, shown
from .leaderboard import Leaderboard
from .stores.base import Store
from .topn import TopN

#: Threads serving requests: a slow call (a commit that retries, a large page) holds only its own.
DEFAULT_THREADS = 16
#: Largest request frame read (a bigger one is refused and the port stops: its framing cannot be trusted).
MAX_FRAME = 64 << 20
#: Most bytes of requests (as read, plus what compressed ones inflate to) served at once; past it the port reads no
#: further frame until calls finish (Erlang buffers them). One frame alone may exceed it, or it could never be served.
IN_FLIGHT = 2 * MAX_FRAME


class _InFlight:
    """Bytes of requests being served, bounded: :meth:`reserve` waits until the others leave room."""

    def __init__(self, limit: int) -> None:
        self.limit, self.used, self.most = limit, 0, 0
        self._changed = threading.Condition()

    def reserve(self, n: int, mine: int = 0) -> None:
        """Wait for room for ``n`` more bytes; ``mine``: what the caller holds already (alone, it may exceed)."""
        with self._changed:
            while self.used + n > self.limit and self.used > mine:
                self._changed.wait()
            self.used += n
            self.most = max(self.most, self.used)

    def release(self, n: int) -> None:
        with self._changed:
            self.used -= n
            self._changed.notify_all()


# -- the server ---------------------------------------------------------------------


class Op(NamedTuple):
    """One operation: its handler, its arguments as documented, and the arity they allow."""

    handler: Callable[..., Any]
    usage: str
    least: int
    most: int


#: Every operation by name.
OPS: dict[str, Op] = {}


def op(name: str, usage: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register a handler as operation ``name``; ``usage`` names its arguments, optional ones bracketed."""
    words = [word.strip() for word in usage.split(",")]

    def register(handler: Callable[..., Any]) -> Callable[..., Any]:
        OPS[name] = Op(handler, usage, sum(1 for w in words if not w.startswith("[")), len(words))
        return handler

    return register


class PortServer:
    """Serves requests read from a stream on a thread pool, writing each reply whole under one lock."""

    def __init__(
        self, store: Store, threads: int = DEFAULT_THREADS, *, max_term: int = MAX_TERM, in_flight: int = IN_FLIGHT
    ) -> None:
        self.store = store
        self.threads = threads
        self.max_term = max_term
        self.in_flight = _InFlight(in_flight)
        self._sets: dict[str, SortedSet] = {}
        self._topns: dict[tuple[str, int, str], TopN] = {}
        self._boards: dict[tuple[str, str], Leaderboard] = {}
        self._write = threading.Lock()

    # -- the objects, opened once per name

    def sorted_set(self, term: Any) -> SortedSet:
        """The set a request names: ``Name`` or ``{Name, #{order => O, chunk_size => C, tiebreak => T}}``."""
        options: dict[str, Any] = {}
        if type(term) is tuple and len(term) == 2:
            term, options = term[0], _options(term[1], ("order", "chunk_size", "tiebreak"))
        name = _text(term, "a set name")
        sset = self._sets.get(name)
        if sset is None:  # opened outside any lock (it reads the store); two racing opens keep the first
            sset = self._sets.setdefault(name, SortedSet(self.store, name, **options))
        if any(getattr(sset, what) != wanted for what, wanted in options.items()):
            # Open with other settings, as a set read by its bare name before it was made: opened again, the stored
            # settings win (SettingsMismatchError if they differ from these), else these make it, as in Python.
            sset = SortedSet(self.store, name, **options)
            self._sets[name] = sset
        return sset

    def top_n(self, term: Any) -> TopN:
        """The top-N set a request names: ``Name`` or ``{Name, #{n => N, order => O}}``."""
        options: dict[str, Any] = {}
        if type(term) is tuple and len(term) == 2:
            term, options = term[0], _options(term[1], ("n", "order"))
        key = (_text(term, "a top-N set name"), options.get("n", 10), options.get("order", "desc"))
        podium = self._topns.get(key)
        if podium is None:
            podium = self._topns.setdefault(key, TopN(self.store, *key))
        return podium

    def board(self, term: Any) -> Leaderboard:
        """The leaderboard ``Name`` (as stored) or ``{Name, #{columns => ...}}`` names: one per name and options."""
        options: dict[str, Any] = {}
        if type(term) is tuple and len(term) == 2:
            term, options = term[0], _board_options(term[1])
        name = _text(term, "a leaderboard name")
        key = (name, repr(sorted(options.items())))
        board = self._boards.get(key)
        if board is None:  # opened outside any lock (it reads the store); two racing opens keep the first
            if "columns" in options:
                board = Leaderboard(self.store, name, **options)
            else:
                board = Leaderboard.open(self.store, name, **options)
            board = self._boards.setdefault(key, board)
        return board

    def forget_set(self, name: str) -> None:
        """Stop keeping set ``name`` open (it was dropped): the next request opens it afresh, with its own settings."""
        self._sets.pop(name, None)

    def forget_board(self, name: str) -> None:
        """Stop keeping leaderboard ``name`` open under any options (it, or one of its windows, was dropped): the next
        request opens it afresh, finds it gone, or creates it anew if it gives columns."""
        for key in [key for key in list(self._boards) if key[0] == name]:
            self._boards.pop(key, None)

    # -- one request

    def handle(self, frame: bytes) -> bytes:
        """The reply frame's payload for one request frame's payload; never raises."""
        ref: Any = None
        try:
            try:
                request = decode(frame, self.max_term)
            except Unreadable as exc:  # answered under its Ref where that reads alone: the caller waits for it
                ref = None if exc.ref is NO_REF else exc.ref
                raise exc.error from None
            if type(request) is tuple and len(request) >= 2 and _atom(request[0]) == "call":
                ref = request[1]
            if type(request) is not tuple or len(request) != 4 or _atom(request[0]) != "call":
                raise InvalidArgumentError(f"a request must be {{call, Ref, Op, Args}}, got {_show(request)}")
            result = self.call(request[2], request[3])
            return term_to_binary((OtpErlangAtom("reply"), ref, to_term(result)))
        except Exception as exc:
            if not isinstance(exc, MdssError):  # a bug, not a caller's mistake: say where
                traceback.print_exc(file=sys.stderr)
            return _error(ref, exc)

    def call(self, op_term: Any, args: Any) -> Any:
        """Run operation ``op_term`` on ``args`` (a list) and return its Python result."""
        name = _atom(op_term)
        found = OPS.get(name) if name is not None else None
        if found is None:
            raise InvalidArgumentError(f"unknown operation {_show(op_term)}; the operations are {', '.join(OPS)}")
        args = _list(args, f"the arguments of {name}")
        if not found.least <= len(args) <= found.most:
            raise InvalidArgumentError(f"{name} takes [{found.usage}], got {len(args)} arguments")
        try:
            return found.handler(self, *args)
        except SettingsMismatchError:
            # A set kept open with settings the store no longer holds (two requests opened it with other settings
            # before either made it, and the other one did): every set is opened afresh, with the stored settings.
            self._sets.clear()
            raise

    # -- the stream

    def serve(self, reader: BinaryIO, writer: BinaryIO) -> None:
        """Answer every frame ``reader`` holds until it ends, then finish the calls still running."""
        with ThreadPoolExecutor(self.threads, thread_name_prefix="mdss-port") as pool:
            while True:
                header = reader.read(4)
                if len(header) < 4:
                    return  # Erlang closed the port
                size = int.from_bytes(header, "big")
                if size > MAX_FRAME:
                    reply = _error(None, InvalidArgumentError(f"a {size}-byte frame is over the {MAX_FRAME} limit"))
                    self.send(writer, reply)
                    return
                self.in_flight.reserve(size)
                frame = reader.read(size)
                if len(frame) < size:
                    self.in_flight.release(size)
                    return
                held = size
                inflated = compressed_size(frame)
                if inflated is not None and inflated <= self.max_term:  # a bigger one is refused uninflated
                    self.in_flight.reserve(inflated, mine=size)
                    held += inflated
                pool.submit(self._answer, writer, frame, held)

    def _answer(self, writer: BinaryIO, frame: bytes, held: int = 0) -> None:
        try:
            self.send(writer, self.handle(frame))
        finally:
            self.in_flight.release(held)

    def send(self, writer: BinaryIO, payload: bytes) -> None:
        """Write one frame whole: replies from many threads never interleave."""
        with self._write:
            try:
                writer.write(len(payload).to_bytes(4, "big") + payload)
                writer.flush()
            except (BrokenPipeError, ValueError):  # the VM went away (or closed the pipe) meanwhile
                pass


def _error(ref: Any, exc: BaseException) -> bytes:
    reason = (OtpErlangAtom(type(exc).__name__), OtpErlangBinary(str(exc).encode("utf-8", "replace")))
    try:
        return term_to_binary((OtpErlangAtom("error"), ref, reason))
    except Exception:  # a Ref that does not encode back
        return term_to_binary((OtpErlangAtom("error"), None, reason))


# -- the operations, in SortedSet's and TopN's terms --------------------------------------


def _ties(term: Any) -> str:
    """The optional ``Ties`` argument of ranks: ``ordinal`` (the default), ``competition`` or ``dense``."""
    return "ordinal" if term is None else _choice(term, "ties", ("ordinal", "competition", "dense"))


@op("len", "Set")
def _len(port: PortServer, s: Any) -> int:
    return len(port.sorted_set(s))


@op("info", "Set")
def _info(port: PortServer, s: Any) -> dict[Any, Any]:
    info = port.sorted_set(s).info()
    for key in ("order", "tiebreak"):  # choices, as a request names them: atoms
        if isinstance(info.get(key), str):
            info[key] = OtpErlangAtom(info[key])
    return {OtpErlangAtom(key): value for key, value in info.items()}


@op("score", "Set, Member")
def _score_of(port: PortServer, s: Any, member: Any) -> Any:
    return port.sorted_set(s).score(_member(member))


@op("scores", "Set, Members")
def _scores(port: PortServer, s: Any, members: Any) -> Any:
    return port.sorted_set(s).scores([_member(m) for m in _list(members, "members")])


@op("rank", "Set, Member, [Ties]")
def _rank(port: PortServer, s: Any, member: Any, ties: Any = None) -> Any:
    return port.sorted_set(s).rank(_member(member), ties=_ties(ties))


@op("rank_with_score", "Set, Member, [Ties]")
def _rank_with_score(port: PortServer, s: Any, member: Any, ties: Any = None) -> Any:
    return port.sorted_set(s).rank(_member(member), ties=_ties(ties), with_score=True)


@op("percentile", "Set, Member")
def _percentile(port: PortServer, s: Any, member: Any) -> Any:
    return port.sorted_set(s).percentile(_member(member))


@op("at_percentile", "Set, P, [Ties]")
def _at_percentile(port: PortServer, s: Any, p: Any, ties: Any = None) -> Any:
    return port.sorted_set(s).at_percentile(_number(p, "p"), ties=_ties(ties))


@op("estimate_rank", "Set, Of, [Opts]")
def _estimate_rank(port: PortServer, s: Any, of: Any, opts: Any = None) -> Any:
    return port.sorted_set(s).estimate_rank(**_member_or_score(of), **_view(opts, ("ties", "max_error")))


@op("estimate_percentile", "Set, Of, [Opts]")
def _estimate_percentile(port: PortServer, s: Any, of: Any, opts: Any = None) -> Any:
    return port.sorted_set(s).estimate_percentile(**_member_or_score(of), **_view(opts, ("max_error",)))


@op("rank_of_score", "Set, Score")
def _rank_of_score(port: PortServer, s: Any, score: Any) -> int:
    return port.sorted_set(s).rank_of_score(_score(score))


@op("count", "Set, Best, Worst")
def _count(port: PortServer, s: Any, best: Any, worst: Any) -> int:
    return port.sorted_set(s).count(_score(best), _score(worst))


@op("range", "Set, Offset, Limit, [Ties]")
def _range(port: PortServer, s: Any, offset: Any, limit: Any, ties: Any = None) -> Any:
    return port.sorted_set(s).range(_int(offset, "offset"), _int(limit, "limit"), ties=_ties(ties))


@op("range_by_score", "Set, Best, Worst, [Offset], [Limit], [Ties]")
def _range_by_score(
    port: PortServer, s: Any, best: Any, worst: Any, offset: Any = None, limit: Any = None, ties: Any = None
) -> Any:
    return port.sorted_set(s).range_by_score(
        _score(best),
        _score(worst),
        offset=0 if offset is None else _int(offset, "offset"),
        limit=None if limit is None else _int(limit, "limit"),
        ties=_ties(ties),
    )


@op("at", "Set, Rank, [Ties]")
def _at(port: PortServer, s: Any, rank: Any, ties: Any = None) -> Any:
    return port.sorted_set(s).at(_int(rank, "rank"), ties=_ties(ties))


@op("around", "Set, Member, Before, After, [Ties]")
def _around(port: PortServer, s: Any, member: Any, before: Any, after: Any, ties: Any = None) -> Any:
    return port.sorted_set(s).around(_member(member), _int(before, "before"), _int(after, "after"), ties=_ties(ties))


@op("random_members", "Set, [N]")
def _random_members(port: PortServer, s: Any, n: Any = 1) -> Any:
    return port.sorted_set(s).random_members(_int(n, "n"))


@op("page", "Set, Limit, [Cursor], [Ties]")
def _page(port: PortServer, s: Any, limit: Any, cursor: Any = None, ties: Any = None) -> Any:
    at = None if cursor is None else _text(cursor, "a cursor")
    return tuple(port.sorted_set(s).page(_int(limit, "limit"), at, ties=_ties(ties)))


def _write_op(term: Any) -> str:
    """The optional ``Op`` argument of adds: ``set`` (the default), ``incr``, ``best``, ``gt`` or ``lt``."""
    return "set" if term is None else _choice(term, "op", ("set", "incr", "best", "gt", "lt"))


@op("add", "Set, Member, Score, [Op], [Opts]")
def _add(port: PortServer, s: Any, member: Any, score: Any, how: Any = None, opts: Any = None) -> Any:
    options = _view(opts, ("only", "changed", "data"))
    return port.sorted_set(s).add(_member(member), _score(score), op=_write_op(how), **options)


@op("data", "Set, Member")
def _data_of(port: PortServer, s: Any, member: Any) -> Any:
    return port.sorted_set(s).data(_member(member))


@op("set_data", "Set, Member, Data")
def _set_data(port: PortServer, s: Any, member: Any, data: Any) -> Any:
    return port.sorted_set(s).set_data(_member(member), _data(data))


@op("range_with_data", "Set, Offset, Limit, [Ties]")
def _range_with_data(port: PortServer, s: Any, offset: Any, limit: Any, ties: Any = None) -> Any:
    return port.sorted_set(s).range(_int(offset, "offset"), _int(limit, "limit"), ties=_ties(ties), with_data=True)


@op("add_many", "Set, Pairs, [Op], [Opts]")
def _add_many(port: PortServer, s: Any, pairs: Any, how: Any = None, opts: Any = None) -> Any:
    return port.sorted_set(s).add_many(_pairs(pairs), op=_write_op(how), **_view(opts, ("only", "changed")))


@op("incr", "Set, Member, Delta, [Opts]")
def _incr(port: PortServer, s: Any, member: Any, delta: Any, opts: Any = None) -> Any:
    return port.sorted_set(s).incr(_member(member), _score(delta), **_view(opts, ("only", "when")))


@op("remove", "Set, Member")
def _remove(port: PortServer, s: Any, member: Any) -> Any:
    return port.sorted_set(s).remove(_member(member))


@op("remove_many", "Set, Members")
def _remove_many(port: PortServer, s: Any, members: Any) -> Any:
    return port.sorted_set(s).remove_many([_member(m) for m in _list(members, "members")])


@op("remove_range_by_score", "Set, Lo, Hi")
def _remove_range_by_score(port: PortServer, s: Any, lo: Any, hi: Any) -> int:
    return port.sorted_set(s).remove_range_by_score(_score(lo), _score(hi))


@op("remove_range_by_rank", "Set, First, Last")
def _remove_range_by_rank(port: PortServer, s: Any, first: Any, last: Any) -> int:
    return port.sorted_set(s).remove_range_by_rank(_int(first, "first"), _int(last, "last"))


@op("pop_min", "Set, [N]")
def _pop_min(port: PortServer, s: Any, n: Any = 1) -> Any:
    return port.sorted_set(s).pop_min(_int(n, "n"))


@op("pop_max", "Set, [N]")
def _pop_max(port: PortServer, s: Any, n: Any = 1) -> Any:
    return port.sorted_set(s).pop_max(_int(n, "n"))


@op("load", "Set, Pairs, [Opts]")
def _load(port: PortServer, s: Any, pairs: Any, opts: Any = None) -> int:
    """The whole set built bottom-up in one commit (``SortedSet.load``): the pairs come in one frame, so at most
    :data:`MAX_FRAME` bytes of them. Returns how many members it loaded (a member given twice counts once)."""
    loaded = dict(_pairs(pairs))  # the last score of a member given twice wins, as in load
    port.sorted_set(s).load_from(loaded, **_view(opts, ("replace",)))
    return len(loaded)


@op("gc", "Set, [Opts]")
def _gc(port: PortServer, s: Any, opts: Any = None) -> int:
    return port.sorted_set(s).gc(**_view(opts, ("min_age", "wait", "sweep")))


@op("drop", "Set")
def _drop(port: PortServer, s: Any) -> None:
    sset = port.sorted_set(s)
    sset.drop()
    port.forget_set(sset.name)


def _combined(port: PortServer, how: Callable[..., int], dest: Any, sources: Any, opts: Any) -> int:
    """``mdss.union`` or ``mdss.intersection`` of the sets ``sources`` names into ``dest``; the port opens ``dest``
    afresh afterwards (a union with ``replace`` makes it anew, with the settings it gives)."""
    name = _text(dest, "a set name")
    found = how(
        port.store,
        name,
        [port.sorted_set(t) for t in _list(sources, "sources")],
        **_view(opts, ("weights", "aggregate", "replace", "order")),
    )
    port.forget_set(name)
    return found


@op("union", "Dest, Sources, [Opts]")
def _union(port: PortServer, dest: Any, sources: Any, opts: Any = None) -> int:
    """Redis' ZUNIONSTORE (``mdss.union``): how many members ``dest`` holds."""
    return _combined(port, union, dest, sources, opts)


@op("intersection", "Dest, Sources, [Opts]")
def _intersection(port: PortServer, dest: Any, sources: Any, opts: Any = None) -> int:
    """Redis' ZINTERSTORE (``mdss.intersection``): how many members ``dest`` holds."""
    return _combined(port, intersection, dest, sources, opts)


@op("check", "Set")
def _check(port: PortServer, s: Any) -> list[str]:
    return port.sorted_set(s).check()


@op("merge", "Set")
def _merge(port: PortServer, s: Any) -> bool:
    return port.sorted_set(s).merge()


@op("topn_post", "TopN, Member, Score")
def _topn_post(port: PortServer, t: Any, member: Any, score: Any) -> bool:
    return port.top_n(t).post(_member(member), _score(score))


@op("topn_post_many", "TopN, Pairs")
def _topn_post_many(port: PortServer, t: Any, pairs: Any) -> bool:
    return port.top_n(t).post_many(_pairs(pairs))


@op("topn_top", "TopN, [Ties]")
def _topn_top(port: PortServer, t: Any, ties: Any = None) -> Any:
    return port.top_n(t).top(ties=_ties(ties))


@op("topn_threshold", "TopN")
def _topn_threshold(port: PortServer, t: Any) -> Any:
    return port.top_n(t).threshold()


# -- leaderboards ---------------------------------------------------------------------


@op("board_post", "Board, Owner, Values, [Opts]")
def _board_post(port: PortServer, b: Any, owner: Any, values: Any, opts: Any = None) -> Any:
    return port.board(b).post(_member(owner), _values(values), **_view(opts, ("post_id", "only", "ops")))


@op("board_remove", "Board, Owner, [Opts]")
def _board_remove(port: PortServer, b: Any, owner: Any, opts: Any = None) -> Any:
    return port.board(b).remove(_member(owner), **_view(opts, ("window",)))


@op("board_load", "Board, Rows, [Opts]")
def _board_load(port: PortServer, b: Any, rows: Any, opts: Any = None) -> int:
    return port.board(b).load(_rows(rows), **_view(opts, ("window", "replace")))


@op("board_row", "Board, Owner, [Opts]")
def _board_row(port: PortServer, b: Any, owner: Any, opts: Any = None) -> Any:
    return port.board(b).row(_member(owner), **_view(opts, ("window",)))


@op("board_positions", "Board, Owner, [Opts]")
def _board_positions(port: PortServer, b: Any, owner: Any, opts: Any = None) -> Any:
    return port.board(b).positions(_member(owner), **_view(opts, _READ))


@op("board_around", "Board, Owner, Column, Before, After, [Opts]")
def _board_around(port: PortServer, b: Any, owner: Any, column: Any, before: Any, after: Any, opts: Any = None) -> Any:
    return port.board(b).around(
        _member(owner),
        _name(column, "a column"),
        before=_int(before, "before"),
        after=_int(after, "after"),
        **_view(opts, _READ),
    )


@op("board_rows", "Board, Owners, Column, [Opts]")
def _board_rows(port: PortServer, b: Any, owners: Any, column: Any, opts: Any = None) -> Any:
    friends = [_member(o) for o in _list(owners, "owners")]
    return port.board(b).rows(friends, _name(column, "a column"), **_view(opts, _READ))


@op("board_page", "Board, Column, Limit, [Cursor], [Opts]")
def _board_page(port: PortServer, b: Any, column: Any, limit: Any, cursor: Any = None, opts: Any = None) -> Any:
    at = None if cursor is None else _text(cursor, "a cursor")
    options = _view(opts, (*_READ, "offset"))
    found = port.board(b).page(_name(column, "a column"), limit=_int(limit, "limit"), cursor=at, **options)
    return tuple(found)


@op("board_top", "Board, Column, N, [Opts]")
def _board_top(port: PortServer, b: Any, column: Any, n: Any, opts: Any = None) -> Any:
    return port.board(b).top(_name(column, "a column"), _int(n, "n"), **_view(opts, _READ))


@op("board_count", "Board, Column, [Opts]")
def _board_count(port: PortServer, b: Any, column: Any, opts: Any = None) -> int:
    return port.board(b).count(_name(column, "a column"), **_view(opts, ("window",)))


@op("board_windows", "Board, [Kind]")
def _board_windows(port: PortServer, b: Any, kind: Any = None) -> Any:
    return port.board(b).windows(None if kind is None else _name(kind, "a window kind"))


@op("board_percentile", "Board, Owner, Column, [Opts]")
def _board_percentile(port: PortServer, b: Any, owner: Any, column: Any, opts: Any = None) -> Any:
    return port.board(b).percentile(_member(owner), _name(column, "a column"), **_view(opts, ("window",)))


@op("board_at_percentile", "Board, Column, P, [Opts]")
def _board_at_percentile(port: PortServer, b: Any, column: Any, p: Any, opts: Any = None) -> Any:
    return port.board(b).at_percentile(_name(column, "a column"), _score(p), **_view(opts, _READ))


@op("board_check", "Board, [Opts]")
def _board_check(port: PortServer, b: Any, opts: Any = None) -> list[str]:
    return port.board(b).check(**_view(opts, ("window",)))


@op("board_gc", "Board, [Opts]")
def _board_gc(port: PortServer, b: Any, opts: Any = None) -> int:
    found = _view(opts, ("window", "sweep", "wait"))
    return port.board(b).gc(found.pop("window", None), **found)


@op("board_drop_window", "Board, Window")
def _board_drop_window(port: PortServer, b: Any, window: Any) -> None:
    board = port.board(b)
    board.drop_window(_name(window, "a window"))
    port.forget_board(board.name)  # the board's other open objects deem the window registered: a post would not list it


@op("board_drop", "Board")
def _board_drop(port: PortServer, b: Any) -> None:
    board = port.board(b)
    board.drop()
    port.forget_board(board.name)


# -- the program ------------------------------------------------------------------------


def run(store_url: str, threads: int = DEFAULT_THREADS) -> None:
    """Serve the port protocol on stdin and stdout until stdin ends; other output goes to stderr, not the frames."""
    if type(threads) is not int or threads < 1:
        raise InvalidArgumentError(f"threads must be an int >= 1, got {shown(threads)}")
    out = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    store = open_store(store_url)
    try:
        PortServer(store, threads).serve(sys.stdin.buffer, out)
    finally:
        store.close()
        with contextlib.suppress(BrokenPipeError):  # the VM closed the port with replies unsent: no one to tell
            out.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m mdss.port", description=__doc__.split("\n", 1)[0])
    parser.add_argument("--store", required=True, metavar="URL", help="store URL (sqlite:///file.db, redis://...)")
    parser.add_argument("--threads", type=integer, default=DEFAULT_THREADS, help="requests served at once")
    args = parser.parse_args(argv)
    try:
        run(args.store, args.threads)
    except MdssError as exc:
        sys.exit(f"mdss port: {exc}")


if __name__ == "__main__":
    main()
