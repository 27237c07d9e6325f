"""Executors are built from plan nodes through one registry (`piestream.stream.build`)."""

from __future__ import annotations

from piestream.plan import NODE_KINDS
from piestream.stream.build import BUILDERS


def test_every_node_kind_has_exactly_one_builder() -> None:
    assert set(BUILDERS) == set(NODE_KINDS.values())
    assert len(set(NODE_KINDS.values())) == len(NODE_KINDS)  # one registered name per class
