"""The Nexmark benchmark's event generator as a source connector (reference §8)."""

from piestream.connectors.nexmark.config import NexmarkConfig
from piestream.connectors.nexmark.generator import EventKind, event_kinds, generate
from piestream.connectors.nexmark.tables_sql import nexmark_combined_ddl, nexmark_ddl

__all__ = ["EventKind", "NexmarkConfig", "event_kinds", "generate", "nexmark_combined_ddl", "nexmark_ddl"]
