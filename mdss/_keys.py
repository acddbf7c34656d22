"""Where a set's objects live in the store: one function per kind of key.

``{namespace}:{set}:h`` is the head, ``{namespace}:{set}:n:{id}`` a tree node.
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


class Keyspace:
    """The keys of one named object (a sorted set, a top-N set) in a store."""

    __slots__ = ("prefix", "head", "nodes")

    def __init__(self, namespace: str, name: str) -> None:
        self.prefix = f"{_part(namespace, 'namespace')}:{_part(name, 'set name')}:"
        self.head = self.prefix + "h"
        self.nodes = self.prefix + "n:"

    def node(self, node_id: str) -> str:
        return self.nodes + node_id
