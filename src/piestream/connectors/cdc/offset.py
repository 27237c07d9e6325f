"""The offset of a CDC split: where its snapshot and its stream are (versioned JSON in the
source's state table, committed with the epoch's rows)."""

from __future__ import annotations

import json
from dataclasses import dataclass

from piestream.common.errors import PiestreamError

VERSION = 1


@dataclass(frozen=True)
class CdcOffset:
    """`phase` "snapshot": rows with a key after `cursor` (the last copied key's text values,
    None: none yet) are still to copy; "stream": the table is copied. `lsn`: the stream resumes
    with the first transaction committing at or after it (the slot's consistent point at first,
    then the end of the last transaction applied); `applied`: changes of that transaction already
    applied (a transaction larger than an epoch's budget spans epochs).

    PostgreSQL: `lsn` is an LSN. MySQL: `file` is the binlog file and `lsn` the position in it
    (the start of the next transaction to apply)."""

    phase: str
    lsn: int
    cursor: tuple[str, ...] | None = None
    applied: int = 0
    snapshot_rows: int = 0  # rows copied so far (progress)
    commit_ts_us: int | None = None  # upstream commit time of the last transaction applied
    file: str | None = None  # MySQL: the binlog file `lsn` is a position in

    def to_json(self) -> str:
        return json.dumps(
            {
                "v": VERSION,
                "phase": self.phase,
                "lsn": self.lsn,
                "cursor": list(self.cursor) if self.cursor is not None else None,
                "applied": self.applied,
                "rows": self.snapshot_rows,
                "ts": self.commit_ts_us,
                **({"file": self.file} if self.file is not None else {}),
            },
            separators=(",", ":"),
        )

    @classmethod
    def from_json(cls, text: str) -> CdcOffset:
        d = json.loads(text)
        if d.get("v") != VERSION:
            raise PiestreamError(f"CDC offset of unknown format version {d.get('v')!r}", sqlstate="XX000")
        cur = d.get("cursor")
        return cls(
            d["phase"],
            int(d["lsn"]),
            tuple(cur) if cur is not None else None,
            int(d["applied"]),
            int(d["rows"]),
            d.get("ts"),
            d.get("file"),
        )


def lsn_text(lsn: int) -> str:
    """PostgreSQL's pg_lsn text form."""
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"


def parse_lsn(text: str) -> int:
    hi, lo = text.split("/")
    return (int(hi, 16) << 32) | int(lo, 16)
