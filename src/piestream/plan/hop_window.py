"""HopWindow: each row once per hopping window containing its time (reference §6.6); output =
input columns, window_start, window_end; stream key = input key + window_start."""

from __future__ import annotations

from dataclasses import dataclass

from piestream.common.errors import FeatureNotSupported
from piestream.plan.node import StreamNode, node_kind


@node_kind("HopWindow")
@dataclass(frozen=True, kw_only=True)
class HopWindowNode(StreamNode):
    child_fields = ("input",)

    input: StreamNode
    time_col: int
    slide_usecs: int
    size_usecs: int
    offset_usecs: int = 0

    def __post_init__(self) -> None:
        if self.slide_usecs <= 0 or self.size_usecs <= 0:
            raise FeatureNotSupported("HOP window slide and size must be positive")
        if self.size_usecs % self.slide_usecs:
            raise FeatureNotSupported("HOP window size must be a multiple of the slide")

    def explain(self) -> str:
        return (
            f"HopWindow {{ time_col: ${self.time_col}, slide: {self.slide_usecs}us, "
            f"size: {self.size_usecs}us }}"
        )
