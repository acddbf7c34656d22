"""Backends side by side behind one small interface, and :func:`open_store`."""

from __future__ import annotations

import importlib
from urllib.parse import parse_qsl, urlencode, urlsplit

from ..exceptions import InvalidArgumentError, MdssError, StoreUnavailableError
from .base import Record, Stats, Store, parse_integer, url_options

#: URL scheme -> (module, class), imported when used: a missing driver only matters to the store that needs it.
BACKENDS = {
    "memory": ("mdss.stores.memory", "MemoryStore"),
    "sqlite": ("mdss.stores.sqlite", "SQLiteStore"),
    "redis": ("mdss.stores.redis", "RedisStore"),
    "rediss": ("mdss.stores.redis", "RedisStore"),
    "redis+cluster": ("mdss.stores.redis", "RedisClusterStore"),
    "riak": ("mdss.stores.riak", "RiakStore"),
    "dynamodb": ("mdss.stores.dynamodb", "DynamoDBStore"),
}


def open_store(url: str, **options: object) -> Store:
    """Open the store a URL names.

    ``memory://``, ``sqlite:///relative.db``, ``sqlite:////absolute.db``, ``redis://host:6379/0``,
    ``redis+cluster://host:7000``, ``riak://host:8098``, ``dynamodb://TABLE?region=eu-west-1``. Query parameters
    and keyword ``options`` go to the backend; ``namespace`` (default ``mdss``) prefixes every key. An option the
    backend does not know or cannot use raises :class:`~mdss.InvalidArgumentError` naming it. ``slots=N`` (on a store
    that only compares and sets) writes each append under a key of its own and the head every ``N`` commits
    (:class:`mdss.stores.slots.SlotStore`: a post under DynamoDB's per-key limits; docs/guide.md).

    >>> store = open_store("memory://")
    >>> type(store).__name__
    'MemoryStore'
    """
    if not isinstance(url, str):
        raise InvalidArgumentError(f"a store URL must be a string, got {type(url).__name__}")
    try:
        scheme = urlsplit(url).scheme
    except ValueError as exc:  # an unclosed IPv6 bracket, a bad port
        raise InvalidArgumentError(f"malformed store URL {url!r:.120}: {exc}") from None
    if scheme not in BACKENDS:
        known = ", ".join(f"{s}://" for s in BACKENDS)
        raise InvalidArgumentError(f"unknown store URL {url!r}: expected one of {known}")
    slots = _slots(url, options)
    if slots is not None:
        from .slots import SlotStore

        base, _, query = url.partition("?")
        kept = urlencode([(k, v) for k, v in parse_qsl(query, keep_blank_values=True) if k != "slots"])
        return SlotStore(open_store(f"{base}?{kept}" if kept else base, **options), every=slots)
    module_name, class_name = BACKENDS[scheme]
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        extra = module_name.rsplit(".", 1)[1]
        raise StoreUnavailableError(
            f"the {scheme}:// store needs a driver that is not installed: pip install 'mdss[{extra}]'"
        ) from exc
    try:
        return getattr(module, class_name).from_url(url, **options)
    except MdssError:
        raise
    except (TypeError, ValueError) as exc:
        # A backend not checking its options: an unknown one is a TypeError, a badly typed one a ValueError, naming it.
        raise InvalidArgumentError(f"bad option for the {scheme}:// store: {exc}") from exc


def _slots(url: str, options: dict[str, object]) -> int | None:
    """The ``slots`` option of :func:`open_store` (taken out of ``options``): after how many commits a head is
    written."""
    found = options.pop("slots", url_options(url).get("slots"))
    if found is None:
        return None
    try:
        every = parse_integer(found) if isinstance(found, str) else found
    except ValueError:
        every = None
    if type(every) is not int or every < 1:
        raise InvalidArgumentError(f"slots must be a positive integer (commits per write of a head), got {found!r}")
    return every


__all__ = ["BACKENDS", "Record", "Stats", "Store", "open_store", "url_options"]
