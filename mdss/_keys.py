"""Where a set's objects live in the store: one function per kind of key.

``{namespace}:{set}:h`` is the head, ``{namespace}:{set}:n:{id}`` a tree node,
``{namespace}:{set}:g:{id}`` an immutable garbage note or note page (what
commits replaced, see ``mdss._garbage``), ``{namespace}:{name}:t`` a top-N set. :func:`kind` tells them apart (the Riak
store routes each kind to its own bucket type by it).
Set names and namespaces are percent-encoded so that they never contain the
separator ``:``, nor ``{``/``}`` (Redis Cluster hash tags) nor ``/``; keys of
two different sets therefore never collide, whatever their names hold. Member
names never appear in keys.
"""

from __future__ import annotations

from urllib.parse import quote

from .exceptions import InvalidArgumentError

_SAFE = "-_.~!$&'()*+,;=@"  # everything quote() leaves alone but ':', '/', '{', '}'


def _part(text: str, what: str) -> str:
    if not isinstance(text, str) or not text:
        raise InvalidArgumentError(f"a {what} must be a non-empty string, got {text!r}")
    return quote(text, safe=_SAFE.replace(":", ""))


HEAD, NODE, TOPN = "head", "node", "topn"


def kind(key: str) -> str:
    """What a key mdss made holds: :data:`HEAD` (mutable, compare-and-set), :data:`NODE` (immutable)
    or :data:`TOPN` (mutable, merged from siblings).

    >>> [kind(k) for k in ("app:s:h", "app:s:n:0.1f", "app:s:g:0.2e", "app:s:t")]
    ['head', 'node', 'node', 'topn']
    """
    _, _, rest = key.partition(":")
    _, _, rest = rest.partition(":")  # namespace and name are percent-encoded: no ':' inside
    if rest.startswith(("n:", "g:")):
        return NODE
    if rest == "t":
        return TOPN
    return HEAD


class Keyspace:
    """The keys of one named object (a sorted set, a top-N set) in a store."""

    __slots__ = ("prefix", "head", "nodes", "notes", "topn")

    def __init__(self, namespace: str, name: str) -> None:
        self.prefix = f"{_part(namespace, 'namespace')}:{_part(name, 'set name')}:"
        self.head = self.prefix + "h"
        self.nodes = self.prefix + "n:"
        self.notes = self.prefix + "g:"
        self.topn = self.prefix + "t"

    def node(self, node_id: str) -> str:
        return self.nodes + node_id

    def note(self, note_id: str) -> str:
        return self.notes + note_id
