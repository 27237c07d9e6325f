"""piestream.batch: SELECT over one committed snapshot (DESIGN layer 6).

`plan` holds the plan nodes the frontend builds, `execute` runs them; the executors live in one
module per concept (scan, basic, join, agg / agg_kernels, sort, window) over shared `keys`.
"""

from piestream.batch.basic import CardinalityViolation
from piestream.batch.context import BatchContext
from piestream.batch.execute import collect, execute, execute_to_chunks

__all__ = ["BatchContext", "CardinalityViolation", "collect", "execute", "execute_to_chunks"]
