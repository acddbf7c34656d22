"""Every exception mdss raises.

Each subclasses the built-in a caller would catch (``ValueError`` for bad input, ``ConnectionError`` for an unreachable
store, ...), and all share the root :class:`MdssError`: ``except mdss.MdssError`` catches what mdss raises on purpose.
"""

from __future__ import annotations

from typing import Any, NoReturn


def shown(value: Any, width: int = 80) -> str:
    """``repr(value)`` cut to ``width`` characters, for a message: an int too long for Python to spell (over 4,300
    digits, ``sys.get_int_max_str_digits``) is named by its size, and a value whose ``__repr__`` fails by its type,
    instead of failing the message."""
    try:
        text = repr(value)
    except Exception:  # too long an int; a __repr__ that fails, or nests too deep
        return f"<an int of {value.bit_length():,} bits>" if isinstance(value, int) else f"<a {type(value).__name__}>"
    return text[:width] if isinstance(text, str) else f"<a {type(value).__name__}>"


class MdssError(Exception):
    """Root of mdss' exceptions."""


class InvalidArgumentError(MdssError, ValueError):
    """An argument is of the wrong kind or out of range (unknown ``op``, ``ties``...)."""


class InvalidScoreError(InvalidArgumentError):
    """A score is NaN, not a number, or an integer outside 64 bits."""


class InvalidMemberError(InvalidArgumentError):
    """A member is not a string, is empty, or is longer than the limit."""


class SettingsMismatchError(InvalidArgumentError):
    """A set was opened with settings that differ from the stored ones."""


class CorruptDataError(MdssError, ValueError):
    """Stored bytes could not be decoded, or the stored tree breaks an invariant. ``key`` names the store key that holds
    the bad bytes, when there is one."""

    def __init__(self, message: str, key: str | None = None) -> None:
        super().__init__(message if key is None else f"{message} (key {key!r})")
        self.key = key


class StoreError(MdssError, RuntimeError):
    """The store failed in a way that is not the caller's fault."""


class StoreUnavailableError(StoreError, ConnectionError):
    """The store cannot be reached, opened or read (after bounded retries). From a write: it may or may not have been
    applied, and mdss never deletes what it stored until it has proven that it did not land."""


class StoreRefusedError(StoreUnavailableError):
    """The store refused a write and applied none of it (after bounded retries: a lock held past the timeout, a
    read-only file, throttling). From a write of a set or a board, nothing of the call is visible and it is safe to
    retry; a call of several commits that landed some first (a post to several windows, a batch or a pop over shards)
    raises :class:`StoreUnavailableError` naming them instead. Calls that clean up (``drop``, ``gc``, ``expire``) may
    have done part of their work: calling them again finishes it."""


def failed_after(exc: StoreError, landed: str) -> NoReturn:
    """Raise, for a call of several commits, ``exc`` while nothing of the call landed before it (``landed`` empty),
    else a :class:`StoreUnavailableError` saying what did: a refusal or a conflict says nothing of the call landed, and
    an unknown outcome that the call is applied entirely or not at all."""
    if not landed:
        raise exc
    raise StoreUnavailableError(f"{exc} ({landed})") from exc


class OutcomeUnknownError(StoreUnavailableError):
    """A write's reply was lost and it could not be proven applied or not. From :meth:`Store.cas`: the key changed since
    it was read and may hold this write or a later one. From a set's write methods: the commit may or may not be visible
    (never half-visible); re-read before retrying a non-idempotent write such as ``incr``. A call of several commits
    that landed some first raises :class:`StoreUnavailableError` naming them instead."""


class MissingNodeError(CorruptDataError):
    """A node the current head names is gone from the store: the set is damaged. (A node collected under an *older* head
    is not this error: reads retry on the newer head.)"""


class HeadMissingError(CorruptDataError):
    """A set has stored nodes but no head: the head was lost (evicted, deleted by hand). mdss refuses to treat such a
    set as empty and start it afresh; ``drop()`` removes what is left."""


class ConflictError(StoreError):
    """A conditional write lost: the key changed since it was read; nothing was written.

    From :meth:`Store.cas`, ``current`` is the record the key holds now (``None``: absent) if the store read it in the
    same round trip (``current_known``), so the caller need not read it again. From a set's write methods: the commit
    lost to concurrent writers for its whole ``retry_budget`` (a time); nothing of it is visible.
    """

    def __init__(self, message: str, *, current: Any = None, current_known: bool = False) -> None:
        super().__init__(message)
        self.current, self.current_known = current, current_known


class SiblingsError(StoreError):
    """A single value was asked for but the store holds concurrent siblings."""


__all__ = [
    "ConflictError",
    "CorruptDataError",
    "HeadMissingError",
    "InvalidArgumentError",
    "InvalidMemberError",
    "InvalidScoreError",
    "MdssError",
    "MissingNodeError",
    "OutcomeUnknownError",
    "SettingsMismatchError",
    "SiblingsError",
    "StoreError",
    "StoreRefusedError",
    "StoreUnavailableError",
]
