"""Sort orders of key columns (ASC/DESC, NULLS FIRST/LAST) with PostgreSQL defaults."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class OrderType:
    """How one key column sorts.

    PostgreSQL treats NULL as larger than every value, so ``ASC`` means NULLS LAST and ``DESC``
    means NULLS FIRST; `nulls_largest=False` gives ``ASC NULLS FIRST`` / ``DESC NULLS LAST``.
    """

    descending: bool = False
    nulls_largest: bool = True

    @classmethod
    def of(cls, descending: bool = False, nulls_first: bool | None = None) -> OrderType:
        """From SQL spelling: ``ORDER BY x [ASC|DESC] [NULLS FIRST|LAST]``."""
        if nulls_first is None:
            return cls(descending, True)
        # ASC: nulls first <=> nulls smallest; DESC: nulls first <=> nulls largest
        return cls(descending, nulls_first == descending)

    @property
    def nulls_first(self) -> bool:
        return self.nulls_largest == self.descending

    def __str__(self) -> str:
        s = "DESC" if self.descending else "ASC"
        default_first = self.descending
        if self.nulls_first != default_first:
            s += " NULLS FIRST" if self.nulls_first else " NULLS LAST"
        return s


ASC = OrderType(False, True)
DESC = OrderType(True, True)
ASC_NULLS_FIRST = OrderType(False, False)
DESC_NULLS_LAST = OrderType(True, False)
