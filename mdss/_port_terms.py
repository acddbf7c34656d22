"""Erlang terms in and out for the port (mdss/port.py): a request decoded with its memory bounded, its
arguments checked into Python values (a refusal names the term), a result encoded back."""

from __future__ import annotations

import importlib
import math
import threading
import zlib
from typing import Any

from .exceptions import InvalidArgumentError, InvalidMemberError, InvalidScoreError, shown

# erlang-py has no type hints, and without it a checkout's erlang/ folder imports as an empty namespace package (mypy
# takes it for the module): so look the names up, and say what is missing.
try:
    _etf = importlib.import_module("erlang")
    OtpErlangAtom, OtpErlangBinary = _etf.OtpErlangAtom, _etf.OtpErlangBinary
    binary_to_term, term_to_binary = _etf.binary_to_term, _etf.term_to_binary
except (ImportError, AttributeError) as exc:  # pragma: no cover - the extra is part of every test install
    raise ImportError("the Erlang port needs the erlang-py package: pip install 'mdss[erlang]'") from exc

#: Most bytes a compressed request may inflate to: a 2 MB frame of compressed zeros would otherwise grow to 2 GB.
MAX_TERM = 64 << 20
#: External term format: the version byte, and the tag of a zlib-compressed term with its 4-byte size.
_VERSION, _COMPRESSED = 131, 80

_INF = {"inf": math.inf, "-inf": -math.inf}


class _Inflating(threading.local):
    refuse = False


_inflating = _Inflating()


class _GuardedZlib:
    """erlang-py's ``zlib``, which would inflate a compressed term anywhere in a term without a bound: the port inflates
    a whole request itself, bounded, and refuses a nested one (Erlang never makes those); other callers unaffected."""

    def __getattr__(self, name: str) -> Any:
        return getattr(zlib, name)

    @staticmethod
    def decompress(data: bytes, *args: Any, **kwargs: Any) -> bytes:
        if _inflating.refuse:
            raise InvalidArgumentError("a compressed term nested in a request (Erlang compresses only whole terms)")
        return zlib.decompress(data, *args, **kwargs)


if getattr(_etf, "zlib", None) is zlib:
    setattr(_etf, "zlib", _GuardedZlib())  # noqa: B010 - mypy knows no attributes of erlang-py


#: External term format: an integer of more than 255 bytes (Erlang's LARGE_BIG_EXT), which no argument can be (scores
#: are 64-bit) and which erlang-py decodes in time quadratic in its length (a 300 KB one held a thread for 25 s).
_LARGE_BIG = 111
_decode_term = getattr(_etf, "_binary_to_term", None)


def _bounded_term(i: int, data: bytes) -> Any:
    """erlang-py's decoding of the term at ``data[i]`` (it calls this for every term nested in a term), refusing a
    large integer in a request before it decodes it (other callers of erlang-py are unaffected)."""
    if _inflating.refuse and data[i : i + 1] == bytes((_LARGE_BIG,)):  # in the port's decode only
        raise InvalidArgumentError("an integer of more than 255 bytes (no argument is one)")
    return _decode_term(i, data)  # type: ignore[misc]


if _decode_term is not None:
    setattr(_etf, "_binary_to_term", _bounded_term)  # noqa: B010 - mypy knows no attributes of erlang-py


def compressed_size(frame: bytes) -> int | None:
    """The size a compressed term declares it inflates to, read from its header; ``None`` if not compressed."""
    if len(frame) >= 6 and frame[0] == _VERSION and frame[1] == _COMPRESSED:
        return int.from_bytes(frame[2:6], "big")
    return None


class Unreadable(Exception):
    """A request frame whose term was refused (:attr:`error`), with its ``Ref`` where that could be read alone
    (:attr:`ref`; :data:`NO_REF` if not), so that the caller hears of it and does not wait out its timeout."""

    def __init__(self, error: InvalidArgumentError, ref: Any) -> None:
        super().__init__(str(error))
        self.error, self.ref = error, ref


#: The ``ref`` of an :class:`Unreadable` request whose ``Ref`` could not be read either.
NO_REF = object()
#: External term format: the tags of a tuple of at most 255 elements and of a larger one.
_SMALL_TUPLE, _LARGE_TUPLE = 104, 105


def _ref_of(term: bytes) -> Any:
    """The ``Ref`` of a request ``{call, Ref, Op, Args}`` (a whole external term) read alone, or :data:`NO_REF`."""
    if term[1:3] == bytes((_SMALL_TUPLE, 4)):
        start = 3
    elif term[1:2] == bytes((_LARGE_TUPLE,)) and term[2:6] == (4).to_bytes(4, "big"):
        start = 6
    else:
        return NO_REF
    _inflating.refuse = True
    try:
        at, tag = _bounded_term(start, term)
        return _bounded_term(at, term)[1] if _atom(tag) == "call" else NO_REF
    except Exception:  # the Ref itself is what fails (erlang-py raises several types on garbage)
        return NO_REF
    finally:
        _inflating.refuse = False


def decode(frame: bytes, max_term: int = MAX_TERM) -> Any:
    """A request frame's term. A compressed one inflates to at most ``max_term`` bytes, checked on its declared size,
    then on the inflation; a compressed term nested in it is refused. :class:`Unreadable` for a non-term."""
    try:
        return _decoded(frame, max_term)
    except Unreadable:
        raise
    except InvalidArgumentError as exc:  # refused before inflating: no Ref is read from a term not inflated
        raise Unreadable(exc, NO_REF) from None


def _decoded(frame: bytes, max_term: int) -> Any:
    size = compressed_size(frame)
    if size is not None:
        if size > max_term:
            raise InvalidArgumentError(
                f"a compressed request declares {size} bytes inflated, over the {max_term}-byte limit"
            )
        inflater = zlib.decompressobj()
        try:
            inflated = inflater.decompress(frame[6:], size + 1)  # one byte more shows a lie
        except zlib.error as exc:
            raise InvalidArgumentError(f"a compressed request does not inflate: {exc}") from None
        if len(inflated) != size or not inflater.eof or inflater.unconsumed_tail or inflater.unused_data:
            raise InvalidArgumentError(
                f"a compressed request does not inflate to the {size} bytes it declares (or is followed by more)"
            )
        frame = bytes((_VERSION,)) + inflated
        del inflated
    _inflating.refuse = True
    try:
        return binary_to_term(frame)
    except InvalidArgumentError as exc:
        error = exc
    except Exception as exc:  # erlang-py raises several types on garbage
        error = InvalidArgumentError(f"the request is not an external term: {type(exc).__name__}: {exc}")
    finally:
        _inflating.refuse = False
    raise Unreadable(error, _ref_of(frame)) from None


def _atom(term: Any) -> str | None:
    """An atom's name, or ``None`` for any other term (``true``, ``false``, ``undefined`` decode to Python values)."""
    if isinstance(term, OtpErlangAtom) and isinstance(term.value, (str, bytes)):
        value = term.value
        return value if isinstance(value, str) else value.decode("latin-1")
    return None


def _text(term: Any, what: str, error: type[InvalidArgumentError] = InvalidArgumentError) -> str:
    if not isinstance(term, OtpErlangBinary) or term.bits != 8:
        raise error(f"{what} must be a UTF-8 binary, got {_show(term)}")
    try:
        return term.value.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error(f"{what} is not UTF-8: {exc.reason} at byte {exc.start}") from None


def _data(term: Any) -> bytes | None:
    """A member's data: any binary (kept as bytes), or ``undefined`` for none."""
    if term is None:
        return None
    if not isinstance(term, OtpErlangBinary) or term.bits != 8:
        raise InvalidArgumentError(f"data must be a binary or undefined, got {_show(term)}")
    return bytes(term.value)


def _member(term: Any) -> str:
    return _text(term, "a member", InvalidMemberError)


def _score(term: Any) -> int | float:
    """An Erlang number as a score (the set checks its range); the atoms ``inf`` and ``'-inf'`` as infinities."""
    if type(term) in (int, float):
        return term
    name = _atom(term)
    if name in _INF:
        return _INF[name]
    raise InvalidScoreError(f"a score must be an integer, a float, inf or '-inf', got {_show(term)}")


def _int(term: Any, what: str) -> int:
    if type(term) is not int:
        raise InvalidArgumentError(f"{what} must be an integer, got {_show(term)}")
    return term


def _number(term: Any, what: str) -> int | float:
    """An integer or a float (not a score: the caller checks its range)."""
    if type(term) not in (int, float):
        raise InvalidArgumentError(f"{what} must be a number, got {_show(term)}")
    return term


def _choice(term: Any, what: str, allowed: tuple[str, ...]) -> str:
    name = _atom(term)
    if name not in allowed:
        raise InvalidArgumentError(f"{what} must be one of the atoms {', '.join(allowed)}, got {_show(term)}")
    return name


def _list(term: Any, what: str) -> list[Any]:
    if type(term) is not list:
        raise InvalidArgumentError(f"{what} must be a proper list, got {_show(term)}")
    return term


def _pairs(term: Any) -> list[tuple[str, int | float]]:
    """``[{Member, Score}]`` or ``#{Member => Score}`` as pairs."""
    items = list(term.items()) if isinstance(term, dict) else _list(term, "pairs")
    pairs = []
    for item in items:
        if type(item) is not tuple or len(item) != 2:
            raise InvalidArgumentError(f"pairs must be {{Member, Score}} tuples, got {_show(item)}")
        pairs.append((_member(item[0]), _score(item[1])))
    return pairs


def _member_or_score(term: Any) -> dict[str, Any]:
    """What an estimate is of: ``Member`` or ``{score, Score}``, as the keyword argument that names it."""
    if type(term) is tuple and len(term) == 2 and _atom(term[0]) == "score":
        return {"score": _score(term[1])}
    return {"member": _member(term)}


def _options(term: Any, allowed: tuple[str, ...]) -> dict[str, Any]:
    """A map of a set's settings: ``order`` an atom, ``chunk_size`` and ``n`` integers (their ranges: the set's)."""
    if not isinstance(term, dict):
        raise InvalidArgumentError(f"options must be a map, got {_show(term)}")
    options: dict[str, Any] = {}
    for key, value in term.items():
        name = _atom(key)
        if name not in allowed:
            raise InvalidArgumentError(f"unknown option {_show(key)}: the options are {', '.join(allowed)}")
        if name == "order":
            options[name] = _choice(value, "order", ("asc", "desc"))
        elif name == "tiebreak":
            options[name] = _choice(value, "tiebreak", ("member", "member_desc", "first"))
        else:
            options[name] = _int(value, name)
    return options


def _show(term: Any) -> str:
    """A short description of a decoded term for an error message."""
    if isinstance(term, OtpErlangBinary):
        return f"the binary {term.value[:40]!r}"
    if isinstance(term, bytes):  # erlang-py decodes a string (a list of bytes) so
        return f"the string (a list, not a binary) {term[:40].decode('latin-1')!r}"
    name = _atom(term)
    return f"the atom {shown(name, 40)}" if name is not None else f"{type(term).__name__} {shown(term, 60)}"


def to_term(value: Any) -> Any:
    """A Python result as an Erlang term: strings as binaries, infinities as atoms, tuples and lists within."""
    if isinstance(value, str):
        return OtpErlangBinary(value.encode("utf-8"))
    if isinstance(value, bytes):  # a member's data (erlang-py would send bytes as a string, a list)
        return OtpErlangBinary(value)
    if isinstance(value, float) and math.isinf(value):
        return OtpErlangAtom("inf" if value > 0 else "-inf")
    if isinstance(value, list):
        return [to_term(v) for v in value]
    if isinstance(value, tuple):  # entries and pages too (named tuples)
        return tuple(to_term(v) for v in value)
    if isinstance(value, dict):  # a leaderboard's rows, positions, posts
        return {to_term(k): to_term(v) for k, v in value.items()}
    return value


# -- leaderboards ---------------------------------------------------------------------


def _name(term: Any, what: str) -> str:
    """A field, column or window name: a binary or an atom."""
    name = _atom(term)
    return name if name is not None else _text(term, what)


def _map(term: Any, what: str) -> dict[Any, Any]:
    if not isinstance(term, dict):
        raise InvalidArgumentError(f"{what} must be a map, got {_show(term)}")
    return term


def _value(term: Any) -> Any:
    """A row's value: an integer, a float, ``inf`` / ``'-inf'``, a binary (text), ``true`` or ``false``."""
    if type(term) in (int, float, bool):
        return term
    if isinstance(term, OtpErlangBinary):
        return _text(term, "a text value")
    if _atom(term) in _INF:
        return _score(term)
    raise InvalidArgumentError(f"a value must be a number, inf, '-inf', a binary, true or false, got {_show(term)}")


def _values(term: Any) -> dict[str, Any]:
    """A row's values: ``#{Field => Value}``."""
    return {_name(f, "a field"): _value(v) for f, v in _map(term, "values").items()}


def _rows(term: Any) -> list[tuple[str, dict[str, Any]]]:
    """Rows to load: ``[{Owner, Values}]`` or ``#{Owner => Values}``."""
    items = list(term.items()) if isinstance(term, dict) else _list(term, "rows")
    rows = []
    for item in items:
        if type(item) is not tuple or len(item) != 2:
            raise InvalidArgumentError(f"rows must be {{Owner, Values}} tuples, got {_show(item)}")
        rows.append((_member(item[0]), _values(item[1])))
    return rows


def _columns(term: Any) -> dict[str, Any]:
    """``#{Column => asc | desc | [{Field, asc | desc}]}``."""
    columns: dict[str, Any] = {}
    for column, spec in _map(term, "columns").items():
        if type(spec) is list:
            parts = []
            for part in spec:
                if type(part) is not tuple or len(part) != 2:
                    raise InvalidArgumentError(f"a column part must be {{Field, asc | desc}}, got {_show(part)}")
                parts.append((_name(part[0], "a field"), _choice(part[1], "a direction", ("asc", "desc"))))
            columns[_name(column, "a column")] = parts
        else:
            columns[_name(column, "a column")] = _choice(spec, "a direction", ("asc", "desc"))
    return columns


def _board_options(term: Any) -> dict[str, Any]:
    """A board's options map as :class:`Leaderboard`'s keyword arguments."""
    options: dict[str, Any] = {}
    for key, value in _map(term, "board options").items():
        name = _atom(key)
        if name == "columns":
            options[name] = _columns(value)
        elif name in ("accumulate", "windows"):
            options[name] = [_name(v, "a name") for v in _list(value, name)]
        elif name == "keep_best":
            options[name] = {
                _name(f, "a field"): _choice(how, "keep_best", ("min", "max")) for f, how in _map(value, name).items()
            }
        elif name == "tiebreak":
            options[name] = {
                _name(c, "a column"): _choice(how, "tiebreak", ("owner", "first"))
                for c, how in _map(value, name).items()
            }
        elif name == "retention":
            options[name] = {_name(k, "a window kind"): _int(n, "retention") for k, n in _map(value, name).items()}
        elif name == "tz":
            options[name] = _text(value, "tz")
        elif name == "week_start":
            options[name] = _name(value, "a week_start")
        elif name == "schedules":
            options[name] = {_name(k, "a schedule name"): _text(v, "a cron line") for k, v in _map(value, name).items()}
        elif name in ("chunk_size", "post_id_ttl"):
            options[name] = _int(value, name)
        else:
            raise InvalidArgumentError(
                f"unknown board option {_show(key)}: the options are columns, tiebreak, accumulate, keep_best, "
                "windows, tz, week_start, schedules, retention, chunk_size, post_id_ttl"
            )
    return options


def _view(term: Any, allowed: tuple[str, ...]) -> dict[str, Any]:
    """An options map, of a view or of any other call: ``window`` (a kind or an instance), ``ties``, and what
    ``allowed`` adds; only the options in ``allowed`` are accepted."""
    if term is None:
        return {}
    found: dict[str, Any] = {}
    for key, value in _map(term, "options").items():
        name = _atom(key)
        if name not in allowed:
            raise InvalidArgumentError(f"unknown option {_show(key)}: the options are {', '.join(allowed)}")
        if name == "window":
            found[name] = _name(value, "a window")
        elif name == "ties":
            found[name] = _choice(value, "ties", ("ordinal", "competition", "dense"))
        elif name == "only":
            found[name] = _choice(value, "only", ("new", "existing"))
        elif name == "when":
            found[name] = _choice(value, "when", ("gt", "lt"))
        elif name == "post_id":
            found[name] = _text(value, "a post id")
        elif name == "data":
            found[name] = _data(value)
        elif name == "offset":
            found[name] = _int(value, "offset")
        elif name == "aggregate":
            found[name] = _choice(value, "aggregate", ("sum", "min", "max"))
        elif name == "order":
            found[name] = _choice(value, "order", ("asc", "desc"))
        elif name == "weights":
            # A list of small integers comes as a string (bytes) from erlang-py, as Erlang prints it.
            weights = list(value) if isinstance(value, bytes) else _list(value, "weights")
            found[name] = [_number(w, "a weight") for w in weights]
        elif name in ("max_error", "min_age"):
            found[name] = _number(value, name)
        elif name == "ops":
            ops = ("set", "incr", "best", "gt", "lt")
            found[name] = {_name(f, "a field"): _choice(op, "an op", ops) for f, op in _map(value, name).items()}
        else:  # sweep, wait, replace, changed
            if type(value) is not bool:
                raise InvalidArgumentError(f"{name} must be true or false, got {_show(value)}")
            found[name] = value
    return found


_READ = ("window", "ties")
