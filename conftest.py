"""Doctests in the package see ``mdss`` without importing it in every docstring."""

import pytest

import mdss


@pytest.fixture(autouse=True)
def _doctest_namespace(doctest_namespace: dict) -> None:
    doctest_namespace["mdss"] = mdss
    doctest_namespace["SortedSet"] = mdss.SortedSet
