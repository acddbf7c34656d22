"""What a store holds, as a caller sees it: listed keys that still read as present.

A listing may name keys deleted moments ago (Riak keeps tombstones listed
until they are reaped); tests judge what remains by what can still be read.
"""

from __future__ import annotations

import mdss


def readable_keys(store: mdss.Store, prefix: str) -> list[str]:
    """The keys under ``prefix`` that still read as present, sorted."""
    keys = sorted(store.keys(prefix))
    return [key for key, value in zip(keys, store.get_many(keys)) if value is not None]
