"""Placeholder while the tree is written (replaced in the next commits)."""


class SortedSet:
    pass
