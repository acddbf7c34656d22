"""Every exception mdss raises.

Each one subclasses the built-in a caller would already catch (``ValueError``
for bad input, ``ConnectionError`` for an unreachable store, ...) and all of
them share the root :class:`MdssError`, so ``except mdss.MdssError`` catches
everything mdss raises on purpose.
"""

from __future__ import annotations


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
    """Stored bytes could not be decoded, or the stored tree breaks an invariant.

    ``key`` names the store key that holds the bad bytes, when there is one.
    """

    def __init__(self, message: str, key: str | None = None) -> None:
        super().__init__(message if key is None else f"{message} (key {key!r})")
        self.key = key


class StoreError(MdssError, RuntimeError):
    """The store failed in a way that is not the caller's fault."""


class StoreUnavailableError(StoreError, ConnectionError):
    """The store cannot be reached, opened or read (after bounded retries)."""


class ConflictError(StoreError):
    """A conditional write lost: the key changed since it was read.

    From a set's write methods it means the commit was retried its whole
    budget against concurrent writers; nothing of it is visible.
    """


class SiblingsError(StoreError):
    """A single value was asked for but the store holds concurrent siblings."""


__all__ = [
    "ConflictError",
    "CorruptDataError",
    "InvalidArgumentError",
    "InvalidMemberError",
    "InvalidScoreError",
    "MdssError",
    "SettingsMismatchError",
    "SiblingsError",
    "StoreError",
    "StoreUnavailableError",
]
