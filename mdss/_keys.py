"""Where a set's objects live in the store: one function per kind of key.

Under ``{namespace}:{set}:``, ``h`` is the head, ``n:{id}`` a tree node, ``g:{id}`` an immutable garbage note or note
page (what commits replaced, see ``mdss._garbage``), ``m`` the set's marker (the set has content: see
``mdss._snapshot.mark``), ``s`` a sharded set's settings; ``{namespace}:{name}:t`` is a top-N set. :func:`kind` tells
them apart (the Riak store routes each kind to its own bucket type by it).

Set names and namespaces are percent-encoded so that they never contain the separator ``:``, nor ``{``/``}`` (Redis
Cluster hash tags) nor ``/``, nor :data:`PART` ``#`` nor :data:`SHARD` ``|``; keys of two different sets therefore never
collide, whatever their names hold. An object's *internal* sets (a board's windows, settings, registry and post ids, a
sharded set's shards) are named ``{name}#{part}`` or ``{name}|{part}`` with the separator raw
(:meth:`Keyspace.internal`): no name a user chooses encodes to that, so no ``SortedSet``, ``TopN`` or board of any name
reaches another object's keys. Member names never appear in keys.
"""

from __future__ import annotations

import binascii
import re
from typing import Any
from urllib.parse import quote

from .exceptions import CorruptDataError, InvalidArgumentError, shown

#: The most characters a node or note id can have (``mdss._writer.new_id``): a 64-bit epoch in hex, a dot, then 11
#: and 16 hex digits.
MAX_ID_CHARS = 16 + 1 + 11 + 16

_SAFE = "-_.~!$&'()*+,;=@"  # everything quote() leaves alone but ':', '/', '{', '}' ('#', '|', '%' are quoted)
#: The separators of an internal part from its owner's name, raw (a name's ``#`` is ``%23``, its ``|`` ``%7C``).
PART, SHARD = "#", "|"


def _part(text: str, what: str) -> str:
    if not isinstance(text, str) or not text:
        raise InvalidArgumentError(f"a {what} must be a non-empty string, got {shown(text)}")
    try:
        return quote(str.__str__(text), safe=_SAFE)  # its text, whatever a str subclass's own methods say
    except UnicodeEncodeError:  # a lone surrogate: no UTF-8, so no key
        raise InvalidArgumentError(f"a {what} must be valid Unicode (no lone surrogates), got {shown(text)}") from None


HEAD, NODE, TOPN = "head", "node", "topn"


def kind(key: str) -> str:
    """What a key mdss made holds: :data:`HEAD` (mutable, compare-and-set: heads, markers, settings),
    :data:`NODE` (immutable) or :data:`TOPN` (mutable, merged from siblings).

    >>> [kind(k) for k in ("app:s:h", "app:s:n:0.1f", "app:s:g:0.2e", "app:s:t", "app:s:m", "app:g#all:h")]
    ['head', 'node', 'node', 'topn', 'head', 'head']
    """
    _, _, rest = key.partition(":")
    _, _, rest = rest.partition(":")  # namespace and name are percent-encoded: no ':' inside
    if rest.startswith(("n:", "g:")):
        return NODE
    if rest == "t":
        return TOPN
    return HEAD


#: Redis Cluster's hash slots: a shard's head key is placed in slot range ``i * SLOTS // S ..``.
SLOTS = 16384
#: A shard's key name as a sharded set's settings record names it: ``{encoded set}|{i}.{salt}``.
PARTS = re.compile(r"[^:/{}|]+\|[0-9]+\.[0-9a-f]+", re.ASCII)  # matched whole (fullmatch)


def slot(key: str) -> int:
    """The Redis Cluster hash slot of a key without a hash tag (CRC-16/XMODEM modulo 16384)."""
    return binascii.crc_hqx(key.encode("utf-8"), 0) % SLOTS


def shard_parts(namespace: str, name: str, shards: int, store: Any = None) -> list[str]:
    """The key names of a new set's shards: ``{set}|{i}.{salt}``.

    ``|`` never appears in a percent-encoded set name, so shard keys never collide with another set's. The salt places
    the shards' heads: hash tags would choose slots, not masters, so on a Redis Cluster (a store whose client knows the
    slot owners) the salt is the first that puts shard ``i``'s head on master ``i mod M``, as the cluster is when the
    set is created: the heads are as evenly spread as ``S`` allows. The heads of one master share the slot of its first
    (a salt found in about 16,384 tries, a few milliseconds per shard), so that a read's ``get_many`` of the ``S`` heads
    is one ``MGET`` per master rather than per shard. Elsewhere the salt is the first that puts the head in the ``i``-th
    of ``S`` equal ranges of the hash slots, which spreads them over any cluster of equal slot ranges.
    """
    base, prefix = _part(name, "set name"), _part(namespace, "namespace")
    client: Any = getattr(store, "client", None)
    owner: Any = getattr(client, "get_node_from_key", None)
    masters = sorted(node.name for node in client.get_primaries()) if owner is not None else []
    slots: dict[str, int] = {}  # each master's slot: that of its first shard's head
    parts = []
    for i in range(shards):
        low, high, salt = i * SLOTS // shards, (i + 1) * SLOTS // shards, 0
        master = masters[i % len(masters)] if masters else ""
        target = slots.get(master)
        if target is not None:  # CRC-16 of the key's constant start once, then of each salt's few bytes
            start = binascii.crc_hqx(f"{prefix}:{base}|{i}.".encode(), 0)
            while binascii.crc_hqx(f"{salt:x}:h".encode("ascii"), start) % SLOTS != target:
                salt += 1
        while True:
            head = f"{prefix}:{base}|{i}.{salt:x}:h"
            if target is not None:
                if slot(head) == target:
                    break
            elif (owner(head).name == master) if masters else low <= slot(head) < high:
                break
            salt += 1
        if masters:
            slots.setdefault(master, slot(head))
        parts.append(f"{base}|{i}.{salt:x}")
    return parts


def shard_keyspace(namespace: str, name: str, part: str) -> Keyspace:
    """The keys of one shard of set ``name``: those of its internal part ``{i}.{salt}`` (``part``, as the settings
    record names it, is ``{encoded name}|{i}.{salt}``: a record naming another set's shards is damaged)."""
    base, _, tail = part.partition(SHARD)
    if base != _part(name, "set name") or not tail:
        raise CorruptDataError(f"the settings of set {name!r} name shard {part!r} of another set")
    return Keyspace.internal(namespace, name, tail, SHARD)


class Keyspace:
    """The keys of one named object (a sorted set, a top-N set) in a store.

    >>> Keyspace("app", "g#all").head, Keyspace.internal("app", "g", "all").head
    ('app:g%23all:h', 'app:g#all:h')
    """

    __slots__ = ("prefix", "head", "nodes", "notes", "topn", "marker", "settings")

    def __init__(self, namespace: str, name: str, part: str | None = None, sep: str = PART) -> None:
        encoded = _part(name, "set name")
        if part is not None:
            if sep not in (PART, SHARD):
                raise InvalidArgumentError(f"an internal part is separated by {PART!r} or {SHARD!r}, got {sep!r}")
            encoded += sep + _part(part, "part name")
        self.prefix = prefix = f"{_part(namespace, 'namespace')}:{encoded}:"
        self.head = prefix + "h"
        self.nodes = prefix + "n:"
        self.notes = prefix + "g:"
        self.topn = prefix + "t"
        self.marker = prefix + "m"  # not under "n:" nor "g:": gc's listings of nodes and notes never name it
        self.settings = prefix + "s"

    @classmethod
    def internal(cls, namespace: str, name: str, part: str, sep: str = PART) -> Keyspace:
        """The keys of ``part`` of the object ``name`` (a board's window ``all``, a shard ``0.1f``):
        ``{name}{sep}{part}``, both percent-encoded and ``sep`` raw, so that no user's name reaches them."""
        return cls(namespace, name, part, sep)

    def node(self, node_id: str) -> str:
        return self.nodes + node_id

    def check_fits(self, store: Any, name: str = "") -> None:
        """Refuse (:class:`InvalidArgumentError`) keys that could pass ``store``'s longest key: node and note keys, this
        keyspace's longest, with the longest id ``mdss._writer`` mints (:data:`MAX_ID_CHARS`)."""
        longest = len(self.node("f" * MAX_ID_CHARS).encode("utf-8"))
        if store.max_key_bytes is not None and longest > store.max_key_bytes:
            raise InvalidArgumentError(
                f"set {(name or self.prefix)[:60]!r}: its node keys reach {longest:,} bytes, past the store's "
                f"{store.max_key_bytes:,} (use a shorter name or namespace)"
            )

    def note(self, note_id: str) -> str:
        return self.notes + note_id


def board_keyspace(store, name: str, part: str, legacy: bool) -> Keyspace:
    """The keys of part ``part`` (``board``: settings, ``windows``: registry, ``posts``: post ids, or a window instance)
    of board ``name`` in ``store``: internal keys (``g#all``, which no set name reaches), or for a board stored before
    those (``legacy``) the keys of the set named ``g#all`` (``g%23all``), where it stays until dropped."""
    if legacy:
        return Keyspace(store.namespace, f"{name}#{part}")
    return Keyspace.internal(store.namespace, name, part)
